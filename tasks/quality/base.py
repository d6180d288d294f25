"""The quality suite interface: parameters, context, scores and results; suites register by name."""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Iterator

import numpy as np
from pydantic import BaseModel, ConfigDict, ValidationError

from tasks.client import HTTPError, complete
from tasks.core.config import ModelSpec, Variant
from tasks.core.errors import validation_line
from tasks.core.registry import SUITES
from tasks.engines.base import Artifact, engine_for
from tasks.engines.tokenizer import Tokenizer, TokenizerRef, open_tokenizer


class SuiteParams(BaseModel):
    """Base of every suite's parameters: unknown keys are errors, caught when the config loads."""

    model_config = ConfigDict(extra="forbid")


@dataclass
class SuiteContext:
    """What a suite may use: the variant's endpoint and artifact, and the reference's artifact.

    `variant_spec`, `model_spec` and `engine` are set inside a nightly run (None for a bare
    endpoint); suites that start a sibling server (the same variant without speculation, or
    with prompt logits on) need them.
    """

    variant: str
    base_url: str | None
    served_model: str
    artifact_path: Path | None
    reference_artifact_path: Path | None
    limit: int | None
    seed: int
    params: dict[str, Any]
    work_dir: Path
    n_ctx: int = 2048
    engine: str | None = None
    artifact: "Artifact | None" = None  # what the engine serves (any engine); artifact_path: a GGUF for in-process use
    variant_spec: "Variant | None" = None
    model_spec: "ModelSpec | None" = None
    server_start_timeout_s: float = 120.0
    request_timeout_s: float = 300.0
    # The tokenizer the variant's server tokenizes with (Engine.tokenizer), for any engine; None: none known.
    tokenizer_ref: "TokenizerRef | None" = None
    # The reference variant's artifact, any engine (reference_artifact_path: a GGUF for in-process use only).
    reference_artifact: "Artifact | None" = None
    # Items already answered: an extendable suite's run answers items offset..limit-1 of its sequence only.
    offset: int = 0

    def tokenizer(self) -> "Tokenizer | None":
        """The variant's own tokenizer (tokenizer_ref, else the GGUF artifact), or None for a bare endpoint."""
        ref = self.tokenizer_ref
        if ref is None and self.artifact_path is not None:
            ref = TokenizerRef("gguf", str(self.artifact_path), "artifact")
        return open_tokenizer(ref) if ref is not None else None


@dataclass
class Score:
    metric: str
    value: float | None
    stderr: float | None
    n: int
    unit: str  # one of warehouse.contract.UNITS
    higher_is_better: bool
    # How the value follows from the suite's samples, e.g. "mean(score)", "p99(kl) where ctx=512"
    # (tasks.quality.deltas); None when it does not (no confidence interval on its delta then).
    sample_stat: str | None = None
    # Why the value is NULL or what to know about it (e.g. "judge endpoint down: ...").
    note: str | None = None


@dataclass
class SuiteResult:
    samples: list[dict[str, Any]] = field(default_factory=list)
    scores: list[Score] = field(default_factory=list)


class Suite:
    name: ClassVar[str]
    version: ClassVar[str]
    Params: ClassVar[type[SuiteParams]] = SuiteParams
    # Whether the suite can answer more items of the same fixed sequence (item i is the same whatever the
    # limit, so the first n items of a longer run are those of a run of n): an adaptive gate extends it.
    extendable: ClassVar[bool] = False

    def params(self, ctx: SuiteContext) -> Any:
        return self.Params.model_validate(ctx.params)

    def run(self, ctx: SuiteContext) -> SuiteResult:
        raise NotImplementedError

    def supply(self, params: Any) -> int | None:
        """Items the suite can answer with these (validated) params, known before it runs: a `limit` over it is
        refused at load; None: no end (generated items) or not known until it runs (a data set)."""
        return None

    def max_items(self, ctx: SuiteContext) -> int | None:
        """Items the sequence holds (an extendable suite; None: unlimited, e.g. generated)."""
        return None

    def score(self, samples: list[dict[str, Any]]) -> list[Score]:
        """The scores of a set of samples (an extendable suite, over all the items it answered)."""
        raise NotImplementedError(f"suite {self.name} does not extend")


def binary_scores(samples: list[dict], metric: str = "accuracy") -> list[Score]:
    """Accuracy over 0/1 sample scores plus the share of invalid (empty/unparseable/errored) answers."""
    acc, se = mean_stderr([s["score"] for s in samples])
    n = len(samples)
    invalid = sum(not s["valid"] for s in samples)
    return [
        Score(metric, acc, se, n, "fraction", True, "mean(score)"),
        invalid_rate_score(invalid, n, "answers empty, unparseable or errored"),
    ]


def invalid_rate_score(invalid: int, n: int, what: str) -> Score:
    """The share of samples without a usable answer; `what` says what they were ("answers empty or errored")."""
    return Score(
        "invalid_rate",
        invalid / n if n else None,
        None,
        n,
        "fraction",
        False,
        "mean(invalid)",
        note=f"{invalid} of {n} {what}" if invalid else None,
    )


def complete_sample(
    ctx: "SuiteContext", prompt: str, max_tokens: int, base_url: str | None = None, **kw: Any
) -> tuple[str, str | None]:
    """One greedy completion for one sample: (text, None), or ("", the error) when the endpoint errs, so the
    sample is scored invalid with its reason and the suite goes on. `kw`: complete's stop, min_tokens, usage."""
    try:
        return complete(
            base_url or ctx.base_url, ctx.served_model, prompt, max_tokens, timeout_s=ctx.request_timeout_s, **kw
        ), None
    except HTTPError as err:
        return "", error_text(err)


def mean_stderr(values: list[float]) -> tuple[float | None, float | None]:
    """Mean and its standard error (sample std / sqrt(n)), as lm-eval reports for per-sample means."""
    if not values:
        return None, None
    arr = np.asarray(values, dtype=float)
    se = float(arr.std(ddof=1) / math.sqrt(arr.size)) if arr.size > 1 else None
    return float(arr.mean()), se


def error_text(err: BaseException) -> str:
    return f"{type(err).__name__}: {err}".splitlines()[0][:200]


@contextlib.contextmanager
def sibling_server(ctx: SuiteContext, log_name: str, **variant_changes: Any) -> Iterator[str]:
    """A second server of the same variant with some settings changed (e.g. no speculation); yields its URL.

    Started with the one launcher (tasks.engines.launcher) on a free port, stopped on exit.
    """
    if ctx.variant_spec is None or ctx.model_spec is None or ctx.engine is None or ctx.artifact is None:
        raise ValueError(
            "needs a variant built by tradeoff (engine, model, artifact); not available on a bare endpoint"
        )

    variant = ctx.variant_spec.model_copy(update=variant_changes)
    with engine_for(ctx.engine).serving(
        ctx.artifact, variant, ctx.model_spec, ctx.work_dir / f"{log_name}.server.log", ctx.server_start_timeout_s
    ) as endpoint:
        yield endpoint.base_url


def suite_for(name: str) -> Suite:
    if name not in SUITES:
        raise ValueError(SUITES.unknown(name))
    suite = SUITES[name]()
    suite.name = name  # a family's member ('helm:gsm') runs under its own name
    return suite


def check_params(name: str, params: dict[str, Any], limit: int | None = None) -> str | None:
    """None when `params` (and the suite's `limit`) suit suite `name`, else one line 'params.<field>: problem' or
    'limit: problem' (a limit over the items the suite can supply with these params)."""
    try:
        valid = SUITES[name].Params.model_validate(params)
    except ValidationError as err:
        return validation_line(
            err,
            "params",
            missing="required; add it",
            unknown=f"unknown parameter of suite {name}; known: {', '.join(SUITES[name].Params.model_fields)}",
        )
    most = SUITES[name]().supply(valid)
    if limit is not None and most is not None and limit > most:
        return f"limit: {limit} is more than the {most} items suite {name} can supply with its params; set it <= {most}"
    return None
