"""lm-evaluation-harness tasks against a variant's endpoint, and the log-likelihood check of each scoring path.

`lm_eval` runs any task lm-eval knows (gsm8k, mmlu, truthfulqa_mc2, bbh, arc_challenge,
hellaswag, ...) as a library, through lm-eval's own API model classes: `local-completions`
(generation and log-likelihood over /v1/completions) or `local-chat-completions` (generate-only
tasks over /v1/chat/completions). Per-sample results (log_samples) become quality_samples rows,
the aggregates with lm-eval's stderr quality_scores rows, and lm-eval's own output files
(results_*.json, samples_*.jsonl) stay in the run folder, so its tools can read them.

Air-gapped data: `datasets` maps a task (or a group: every task in it) to local files. The
suite writes an override task file `<task>.yaml` that `include:`s lm-eval's own definition and
only swaps the data source (`dataset_path: json`, `data_files`); the prompts, filters and
metrics stay lm-eval's. The same task name then runs on the hub data or on the local files,
and `lm-eval run --include_path <run>/.../lm_eval/tasks --tasks <task>` reproduces the run.

Log-likelihood: llama-cpp-python 0.3.36's server returns wrong prompt logprobs (echo=True):
with a model that adds no BOS token, it pairs each prompt token with the logits of the
position after it (one step off). `loglik_check` measures this for any endpoint against the
in-process reference (llama.cpp `Llama.scores` of the same GGUF), and `lm_eval` scores
log-likelihood requests in-process (`tradeoff-llama-cpp` model: lm-eval's local-completions
for generation, llama.cpp logits for log-likelihood) where the engine's path is known wrong. The
in-process models and scorers live in tasks.quality.logits.
"""

from __future__ import annotations

import asyncio
import copy
import json
import logging
import math
import os
import weakref
from concurrent.futures import ThreadPoolExecutor
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable, Literal

import numpy as np
import yaml
from pydantic import BaseModel, ConfigDict, Field, field_validator

from tasks.client import HTTPError, endpoint_headers, get, json_of, request
from tasks.core.credentials import model_args_problem
from tasks.core.errors import close_matches
from tasks.quality.base import Score, Suite, SuiteContext, SuiteParams, SuiteResult, error_text, sibling_server
from tasks.quality.logits import LlamaCppScorer, TransformersScorer, reference_worker
from tasks.quality.loglik_records import find_record, new_record, same_weights_reference, save_record
from tasks.quality.texts import FIDELITY_TEXT

# Whether an engine's endpoint scores log-likelihood right is not hard-coded: `loglik_check` records its
# result per engine, version and artifact (tasks.quality.loglik_records) and `lm_eval` follows it.
# Engine settings that make a server return prompt logprobs at all (the check starts such a sibling).
LOG = logging.getLogger("tradeoff.quality")
PROMPT_LOGPROB_ARGS: dict[str, dict[str, Any]] = {"llama.cpp": {"logits_all": True}}
INVALID_RESPONSES = ("", "[invalid]")  # lm-eval's regex filters answer "[invalid]" when nothing matches


# ---------------------------------------------------------------- lm-eval task index and local data


@lru_cache(maxsize=1)
def task_index() -> dict[str, Any]:
    """lm-eval's index of tasks, groups and tags (built once per process: it reads ~15,000 YAML files)."""
    logging.getLogger("lm_eval").setLevel(logging.WARNING)
    from lm_eval.tasks import TaskManager

    return dict(TaskManager().task_index)


def check_task_name(name: str) -> None:
    """ValueError with close matches when lm-eval knows no task, group or tag `name` (a YAML path is fine)."""
    if name.endswith((".yaml", ".yml")) and Path(name).is_file():
        return
    index = task_index()
    if name not in index:
        raise ValueError(close_matches(name, list(index), "lm-eval task"))


def leaf_tasks(name: str, index: dict[str, Any] | None = None) -> list[str]:
    """The tasks a task/group/tag name stands for, groups and tags expanded recursively."""
    index = index if index is not None else task_index()
    entry = index.get(name)
    if entry is None:
        return []
    kind = entry.kind.name
    if kind in ("TASK", "PY_TASK"):
        return [name]
    members = (
        sorted(entry.tags) if kind == "TAG" else [t if isinstance(t, str) else t.get("task") for t in entry.cfg["task"]]
    )
    out: list[str] = []
    for m in members:
        for t in leaf_tasks(m, index) if isinstance(m, str) else []:
            if t not in out:
                out.append(t)
    return out


class LocalData(BaseModel):
    """Local files for a task's data instead of the hub: a datasets builder and its data_files."""

    model_config = ConfigDict(extra="forbid")

    path: str = Field(default="json", description="datasets builder: json (also JSON Lines), csv, parquet")
    data_files: dict[str, str] | str = Field(
        description="split -> file; '{dataset_name}' and '{task}' are filled per task (e.g. one BBH file per subtask)"
    )
    field: str | None = Field(default=None, description="JSON key holding the rows, e.g. examples (BBH)")
    if_missing: Literal["fail", "hub"] = Field(
        default="fail", description="files absent: fail the suite, or run the task from the hub (one config for both)"
    )


def _fill(template: str, **values: str) -> str:
    for k, v in values.items():
        template = template.replace("{" + k + "}", v)
    return template


def write_local_overrides(datasets: dict[str, LocalData], out_dir: Path, base: Path | None = None) -> Path:
    """Write `<task>.yaml` overrides that point lm-eval's own task definitions at local files; returns the folder.

    Relative data paths are resolved against `base` (default: the working directory). A missing
    file is a ValueError naming it.
    """
    index = task_index()
    out_dir.mkdir(parents=True, exist_ok=True)
    base = base or Path.cwd()
    for name, local in datasets.items():
        tasks = leaf_tasks(name, index)
        if not tasks:
            raise ValueError(f"datasets.{name}: " + close_matches(name, list(index), "lm-eval task"))
        for task in tasks:
            entry = index[task]
            values = {"task": task, "dataset_name": str((entry.cfg or {}).get("dataset_name") or "")}
            # One file stands for the split the task is scored on.
            files = (
                local.data_files
                if isinstance(local.data_files, dict)
                else {str((entry.cfg or {}).get("test_split") or "test"): local.data_files}
            )
            resolved: dict[str, str] = {}
            for split, f in files.items():
                p = Path(_fill(f, **values)).expanduser()
                p = p if p.is_absolute() else (base / p)
                if not p.is_file() and local.if_missing == "hub":
                    resolved = {}  # lm-eval's own definition (the hub) for this task
                    break
                if not p.is_file():
                    raise ValueError(
                        f"datasets.{name}: file {p} for task {task} not found; fix data_files or drop the entry"
                    )
                resolved[split] = str(p.resolve())
            if not resolved:
                continue
            kwargs: dict[str, Any] = {"data_files": resolved}
            if local.field:
                kwargs["field"] = local.field
            override = {
                "include": str(entry.yaml_path),
                "task": task,
                "dataset_path": local.path,
                "dataset_name": None,
                "dataset_kwargs": kwargs,
            }
            (out_dir / f"{task}.yaml").write_text(yaml.safe_dump(override, sort_keys=False))
    return out_dir


def contained_generations(parse: Callable[..., list], outputs: Any, **kwargs: Any) -> list[str]:
    """lm-eval's `parse_generations` answer by answer: one whose JSON has the wrong shape (`{"choices": [null]}`,
    `"text": 5`) becomes an empty answer, counted invalid, instead of an exception that ends the whole suite."""
    res: list[str] = []
    for out in outputs if isinstance(outputs, list) else [outputs]:
        try:
            got = parse(out, **kwargs)
        except (KeyError, IndexError, TypeError, AttributeError, ValueError) as err:
            LOG.warning(
                "lm-eval: malformed answer from the endpoint (%s: %s); scored as an empty answer",
                type(err).__name__,
                err,
            )
            got = [""]
        res += [g if isinstance(g, str) else "" for g in got]
    return res


class _ClientAnswer:
    """The part of an aiohttp response lm-eval's `amodel_call` reads, over tasks.client's answer."""

    def __init__(self, r: Any):
        self.r, self.status, self.ok = r, r.status_code, r.status_code < 400

    async def text(self) -> str:
        return self.r.text

    async def json(self) -> Any:
        return json_of(self.r)

    def raise_for_status(self) -> None:
        self.r.raise_for_status()


class _ClientPost:
    """`async with session.post(...) as response`: the POST sent by tasks.client in a worker thread."""

    def __init__(self, send: Callable[[], Any], pool: ThreadPoolExecutor):
        self.send, self.pool = send, pool

    async def __aenter__(self) -> _ClientAnswer:
        return _ClientAnswer(await asyncio.get_running_loop().run_in_executor(self.pool, self.send))

    async def __aexit__(self, *exc: Any) -> None:
        return None


class _ClientSession:
    """Stands in for lm-eval's aiohttp session: every POST goes through tasks.client.request (its total deadline
    and response caps), `concurrency` at a time as lm-eval's own connector allowed."""

    def __init__(self, timeout_s: float, concurrency: int):
        self.timeout_s = timeout_s
        self.pool = ThreadPoolExecutor(max_workers=max(1, concurrency), thread_name_prefix="lm-eval-request")

    def post(self, url: str, json: Any = None, headers: dict[str, str] | None = None) -> _ClientPost:
        return _ClientPost(lambda: request("POST", url, "", self.timeout_s, json, headers=headers or {}), self.pool)


class ThroughClient:
    """lm-eval's API calls (`model_call`, `amodel_call`) sent by tasks.client, not by lm-eval's requests/aiohttp:
    lm-eval still builds each payload, retries and parses; the client sends it."""

    def _client_session(self) -> _ClientSession:
        if getattr(self, "_tradeoff_session", None) is None:
            self._tradeoff_session = _ClientSession(self.timeout, self._concurrent)
            weakref.finalize(self, self._tradeoff_session.pool.shutdown, wait=False)  # its threads end with the model
        return self._tradeoff_session

    def model_call(
        self, messages: Any, *, generate: bool = True, gen_kwargs: dict | None = None, **kwargs: Any
    ) -> dict | None:
        gen_kwargs = copy.deepcopy(gen_kwargs)  # as lm-eval: the dict is shared between requests
        payload = self._create_payload(
            self.create_message(messages),
            generate=generate,
            gen_kwargs=gen_kwargs,
            seed=self._seed,
            eos=self.eos_string,
            **kwargs,
        )
        r = request("POST", self.base_url, "", self.timeout, payload, headers=self.header or {})
        if r.status_code >= 400:
            LOG.warning("lm-eval: API request failed with error message: %s. Retrying...", r.text[:200])
        r.raise_for_status()
        return json_of(r)

    async def amodel_call(self, session: Any, sem: asyncio.Semaphore, messages: Any, **kwargs: Any) -> Any:
        return await super().amodel_call(self._client_session(), sem, messages, **kwargs)


def _register_model() -> None:
    """Register `tradeoff-llama-cpp` with lm-eval, and lm-eval's API models with answers contained one by one (on
    first use: importing lm-eval takes seconds)."""
    from lm_eval.api.registry import register_model
    from lm_eval.models.openai_completions import LocalChatCompletion, LocalCompletionsAPI

    class Completions(ThroughClient, LocalCompletionsAPI):
        def parse_generations(self, outputs: Any, **kwargs: Any) -> list[str]:
            return contained_generations(super().parse_generations, outputs, **kwargs)

    class Chat(ThroughClient, LocalChatCompletion):
        def parse_generations(self, outputs: Any, **kwargs: Any) -> list[str]:
            return contained_generations(super().parse_generations, outputs, **kwargs)

    @register_model("tradeoff-llama-cpp")
    class TradeoffLlamaCpp(Completions):
        """lm-eval's local-completions with the GGUF's own tokenizer, and log-likelihood from either path.

        loglikelihood="endpoint": lm-eval's echo=True prompt-logprob request to the server;
        "in-process": llama.cpp logits of the same GGUF (the reference). Generation always goes
        through the endpoint, exactly as local-completions sends it.
        """

        def __init__(
            self,
            gguf: str | None = None,
            loglikelihood: "str | LoglikDecider" = "in-process",
            n_ctx: int = 2048,
            hf: str | None = None,
            **kwargs: Any,
        ):
            super().__init__(tokenizer_backend=None, tokenized_requests=False, **kwargs)
            self.scorer = LlamaCppScorer(gguf, int(n_ctx)) if gguf else TransformersScorer(str(hf), int(n_ctx))
            # Anything but None: lm-eval's log-likelihood path asserts a tokenizer exists.
            self.tokenizer = self.scorer
            # An HF checkpoint's server (vLLM) takes token ids: it scores exactly the tokens counted here.
            self.tokenized_requests = hf is not None and not gguf
            self._loglikelihood = loglikelihood  # a path, or decided on the first log-likelihood request
            self.max_length = int(n_ctx) - 1

        @property
        def loglikelihood_path(self) -> str:
            return self._loglikelihood if isinstance(self._loglikelihood, str) else self._loglikelihood.path

        @property
        def prefix_token_id(self) -> int:
            return self.scorer.token_bos() if self.scorer.token_bos() >= 0 else self.scorer.token_eos()

        def tok_encode(
            self, string: str, left_truncate_len: int | None = None, add_special_tokens: bool = False, **kwargs: Any
        ) -> list[int] | list[list[int]]:
            if not isinstance(string, str):
                return [self.tok_encode(s, left_truncate_len) for s in string]
            enc = self.scorer.encode(string)
            return enc[-left_truncate_len:] if left_truncate_len else enc

        def decode_batch(self, tokens: list[list[int]]) -> list[str]:
            return [self.scorer.decode(t) for t in tokens]

        def _loglikelihood_tokens(self, requests, **kwargs) -> list[tuple[float, bool]]:
            if self.loglikelihood_path == "endpoint":
                return super()._loglikelihood_tokens(requests, **kwargs)
            return [self.scorer.logprob(list(ctx), list(cont)) for _, ctx, cont in requests]

    globals().update(TradeoffLlamaCpp=TradeoffLlamaCpp, ContainedCompletions=Completions, ContainedChat=Chat)


@lru_cache(maxsize=1)
def _model_registered() -> bool:
    _register_model()
    return True


def make_lm(
    base_url: str,
    model: str,
    api: str,
    gguf: Path | None,
    loglikelihood: "str | LoglikDecider",
    n_ctx: int,
    concurrency: int,
    timeout_s: int,
    model_args: dict[str, Any],
    hf: Path | None = None,
):
    """An lm-eval API model for the endpoint: local-chat-completions, local-completions or tradeoff-llama-cpp
    (with the variant's GGUF, or its HF checkpoint's tokenizer `hf`)."""
    _model_registered()
    headers = endpoint_headers(base_url)  # a hosted endpoint's Authorization; lm-eval sends `header` as is
    # Never empty: without a header lm-eval sends OPENAI_API_KEY from the environment to any base_url.
    common = dict(
        model=model,
        num_concurrent=concurrency,
        timeout=timeout_s,
        header=headers or {"User-Agent": "tradeoff (lm-eval)"},
        **model_args,
    )
    url = base_url.rstrip("/")
    if api == "chat":
        return globals()["ContainedChat"](
            base_url=url + "/v1/chat/completions", tokenizer_backend=None, tokenized_requests=False, **common
        )
    if gguf is not None or (hf is not None and "tokenizer_backend" not in model_args):
        return globals()["TradeoffLlamaCpp"](
            base_url=url + "/v1/completions",
            gguf=str(gguf) if gguf else None,
            hf=str(hf) if hf else None,
            loglikelihood=loglikelihood,
            n_ctx=n_ctx,
            **common,
        )
    # A bare endpoint: no tokenizer, so generate-only tasks (lm-eval's own offline setting).
    return globals()["ContainedCompletions"](
        base_url=url + "/v1/completions", **{"tokenizer_backend": None, "tokenized_requests": False, **common}
    )


# ---------------------------------------------------------------- lm_eval suite


class LmEvalParams(SuiteParams):
    tasks: list[str] = Field(
        min_length=1, max_length=1024, description="lm-eval task, group or tag names (or task YAML paths)"
    )
    num_fewshot: int | None = Field(default=None, ge=0, le=64, description="default: each task's own")
    api: Literal["completions", "chat"] = Field(
        default="completions", description="local-completions, or local-chat-completions (generate-only tasks)"
    )
    loglikelihood: Literal["auto", "endpoint", "in-process"] = Field(
        default="auto",
        description="where log-likelihood requests are scored; auto: in-process where the engine's "
        "endpoint path failed loglik_check",
    )
    concurrency: int = Field(default=1, ge=1, le=256, description="requests in flight (num_concurrent)")
    datasets: dict[str, LocalData] = Field(
        default_factory=dict, max_length=1024, description="task or group -> local data files"
    )
    gen_kwargs: dict[str, Any] = Field(default_factory=dict, description="generation overrides, e.g. max_gen_toks")
    fewshot_seed: int = Field(
        default=1234,
        description="numpy/torch/few-shot seeds (lm-eval's CLI default 1234); "
        "the suite's seed is lm-eval's random seed",
    )
    bootstrap_iters: int = Field(
        default=100000, ge=0, le=1_000_000, description="lm-eval's bootstrap for non-mean stderrs"
    )
    model_args: dict[str, Any] = Field(
        default_factory=dict,
        description="extra arguments of lm-eval's model class "
        "(those that weaken security are refused: "
        "tasks.core.credentials)",
    )
    timeout_s: int = Field(default=300, ge=1, le=3_600)

    @field_validator("model_args")
    @classmethod
    def _safe_model_args(cls, v: dict[str, Any]) -> dict[str, Any]:
        if problem := model_args_problem(v):
            raise ValueError(problem)
        return v

    def model_post_init(self, _: Any) -> None:
        for name in [*self.tasks, *self.datasets]:
            check_task_name(name)


def _first_arg(arguments: Any) -> str | None:
    """The prompt of a logged sample: lm-eval logs {'gen_args_0': {'arg_0': context, 'arg_1': ...}, ...}."""
    if isinstance(arguments, dict) and arguments:
        first = next(iter(arguments.values()))
        return str(first.get("arg_0")) if isinstance(first, dict) else str(first)
    if isinstance(arguments, (list, tuple)) and arguments:
        return str(arguments[0][0] if isinstance(arguments[0], (list, tuple)) else arguments[0])
    return None


def _response(filtered: Any) -> str:
    while isinstance(filtered, (list, tuple)) and len(filtered) == 1:
        filtered = filtered[0]
    return filtered if isinstance(filtered, str) else json.dumps(filtered, default=str)


def _num(x: Any) -> float | None:
    return (
        float(x)
        if isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)
        else (float(x) if isinstance(x, bool) else None)
    )


def sample_rows(results: dict) -> list[dict]:
    """quality_samples rows from lm-eval's logged samples: one per (task, doc, filter)."""
    rows = []
    for task, logged in (results.get("samples") or {}).items():
        output_type = (results.get("configs", {}).get(task) or {}).get("output_type")
        for r in logged:
            filt = r.get("filter", "none")
            metrics = {m: _num(r.get(m)) for m in r.get("metrics", []) if m in r}
            first = next(iter(metrics.values()), None)
            response = _response(r.get("filtered_resps"))
            invalid = output_type == "generate_until" and response.strip() in INVALID_RESPONSES
            rows.append(
                {
                    "sample_id": f"{task}/{r['doc_id']}" + (f"/{filt}" if filt != "none" else ""),
                    "prompt": _first_arg(r.get("arguments")),
                    "target": str(r.get("target")),
                    "response": response,
                    "score": first if first is not None and 0.0 <= first <= 1.0 else None,
                    "valid": not invalid,
                    "details": json.dumps(
                        {
                            "task": task,
                            "doc_id": r["doc_id"],
                            "filter": filt,
                            **metrics,
                            "invalid": int(invalid),
                            "doc_hash": r.get("doc_hash"),
                            "prompt_hash": r.get("prompt_hash"),
                        },
                        default=str,
                    ),
                }
            )
    return rows


def score_rows(results: dict, samples: list[dict]) -> list[Score]:
    """quality_scores rows from lm-eval's aggregates ('metric,filter' keys) with lm-eval's stderr.

    A metric gets a sample_stat (so a CI on its delta) only where lm-eval's aggregate is the
    plain mean of the per-sample values; corpus-level metrics (BLEU, F1 over a corpus) do not.
    """
    by_task: dict[str, list[dict]] = {}
    for s in samples:
        d = json.loads(s["details"])
        by_task.setdefault(d["task"], []).append(d)
    out = []
    for task, res in (results.get("results") or {}).items():
        n = int(((results.get("n-samples") or {}).get(task) or {}).get("effective") or len(by_task.get(task, [])) or 1)
        hib = (results.get("higher_is_better") or {}).get(task) or {}
        filters = set()
        for key, value in res.items():
            if "," not in key or "_stderr," in key or _num(value) is None:
                continue
            metric, filt = key.split(",", 1)
            filters.add(filt)
            stderr = _num(res.get(f"{metric}_stderr,{filt}"))
            per = [d.get(metric) for d in by_task.get(task, []) if d["filter"] == filt and d.get(metric) is not None]
            where = f"task={task} and filter={filt}"
            stat = f"mean({metric}) where {where}" if per and abs(float(np.mean(per)) - float(value)) < 1e-9 else None
            name = f"{task}.{metric}" + (f".{filt}" if filt != "none" else "")
            unit = "fraction" if 0.0 <= float(value) <= 1.0 else "ratio"
            out.append(Score(name, float(value), stderr, n, unit, bool(hib.get(metric, True)), stat))
        for filt in sorted(filters):
            rows = [d for d in by_task.get(task, []) if d["filter"] == filt]
            invalid = sum(d["invalid"] for d in rows)
            if rows and (results.get("configs", {}).get(task) or {}).get("output_type") == "generate_until":
                out.append(
                    Score(
                        f"{task}.invalid_rate" + (f".{filt}" if filt != "none" else ""),
                        invalid / len(rows),
                        None,
                        len(rows),
                        "fraction",
                        False,
                        f"mean(invalid) where task={task} and filter={filt}",
                        note=f"{invalid} of {len(rows)} answers empty or unparseable" if invalid else None,
                    )
                )
    return out


class LoglikDecider:
    """Where lm-eval's log-likelihood requests are scored, decided on the first one (generate-only tasks never ask):
    the configured path, else what `loglik_check` recorded for this engine and artifact (or engine and version),
    else a short check run now (8 pairs) when an in-process model of the same weights exists, else the endpoint,
    unchecked. `note` says which and why."""

    CHECK_PAIRS = 8

    def __init__(self, p: "LmEvalParams", ctx: SuiteContext):
        self.p, self.ctx = p, ctx
        self.decided = False
        self._path, self.note = "endpoint", None

    @property
    def path(self) -> str:
        if not self.decided:
            self._path, self.note = self._decide()
            self.decided = True
        return self._path

    def _decide(self) -> tuple[str, str]:
        ctx = self.ctx
        if self.p.loglikelihood != "auto":
            return self.p.loglikelihood, f"log-likelihood scored {self.p.loglikelihood} (configured)"
        rec, own = find_record(ctx)
        if rec is None and same_weights_reference(ctx) is not None and ctx.base_url:
            reachable = endpoint_reachable(ctx.base_url)
            rows, error, reference = run_loglik_check(
                ctx, LoglikCheckParams(paths=["endpoint"]), loglik_pairs(self.CHECK_PAIRS, ctx.seed)
            )
            details = [json.loads(r["details"]) for r in rows]
            rec, own = new_record(ctx, details, LoglikCheckParams().tolerance_nats, reference, error), True
            if reachable:  # an endpoint that was not there says nothing about its path: this run only
                save_record(ctx, rec)
        if rec is None:
            return "endpoint", "log-likelihood scored endpoint (not checked: no in-process model of these weights)"
        where = "" if own else f", checked on {rec.variant} (same engine and version)"
        if rec.endpoint_ok:
            return "endpoint", f"log-likelihood scored endpoint (its path passed loglik_check: {rec.summary()}{where})"
        if in_process_model(ctx) is not None:
            return "in-process", "log-likelihood scored in-process (the engine's endpoint path failed loglik_check)"
        return "endpoint", (
            f"log-likelihood scored endpoint although its path failed loglik_check ({rec.summary()}"
            f"{where}): no in-process model of these weights"
        )


def endpoint_reachable(base_url: str) -> bool:
    try:
        get(base_url, "/v1/models", timeout_s=10.0)
    except HTTPError:
        return False
    return True


def in_process_model(ctx: SuiteContext) -> tuple[Path | None, Path | None] | None:
    """(gguf, hf checkpoint) that scores log-likelihood in-process for the variant, or None."""
    ref = same_weights_reference(ctx)
    if ref is None:
        return None
    return (ref[1], None) if ref[0] == "gguf" else (None, ref[1])


def scoring_model(ctx: SuiteContext) -> tuple[Path | None, Path | None]:
    """(gguf, hf folder) that tokenize for lm-eval: the variant's GGUF, else its HF tokenizer folder."""
    if ctx.artifact_path is not None:
        return ctx.artifact_path, None
    ref = ctx.tokenizer_ref
    if ref is not None and ref.kind == "gguf":
        return Path(ref.path), None
    if ref is not None and ref.kind == "hf" and Path(ref.path).is_dir():
        return None, Path(ref.path)
    return None, None


def loglikelihood_path(p: LmEvalParams, ctx: SuiteContext) -> str:
    return LoglikDecider(p, ctx).path


def evaluate(ctx: SuiteContext, p: LmEvalParams, out_dir: Path, decider: LoglikDecider | None = None) -> dict:
    """Run lm-eval's simple_evaluate with its own model classes; save its output files under `out_dir`."""
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    from lm_eval import simple_evaluate
    from lm_eval.loggers import EvaluationTracker
    from lm_eval.tasks import TaskManager

    include = write_local_overrides(p.datasets, out_dir / "tasks") if p.datasets else None
    gguf, hf = scoring_model(ctx) if p.api == "completions" else (None, None)
    lm = make_lm(
        ctx.base_url,
        ctx.served_model,
        p.api,
        gguf,
        decider or LoglikDecider(p, ctx),
        ctx.n_ctx,
        p.concurrency,
        p.timeout_s,
        p.model_args,
        hf=hf,
    )
    tracker = EvaluationTracker(output_path=str(out_dir))
    # lm-eval logs a warning per task an override replaces: that is the point of the overrides.
    logging.getLogger("lm_eval.tasks._index").setLevel(logging.ERROR)
    results = simple_evaluate(
        # model_args only name the run (lm-eval's output folder is named after `model`, as its CLI's)
        model=lm,
        model_args={"model": ctx.served_model, "base_url": ctx.base_url},
        tasks=list(p.tasks),
        num_fewshot=p.num_fewshot,
        limit=ctx.limit,
        log_samples=True,
        evaluation_tracker=tracker,
        task_manager=TaskManager(include_path=str(include) if include else None),
        apply_chat_template=p.api == "chat",
        gen_kwargs=p.gen_kwargs or None,
        bootstrap_iters=p.bootstrap_iters,
        random_seed=ctx.seed,
        numpy_random_seed=p.fewshot_seed,
        torch_random_seed=p.fewshot_seed,
        fewshot_random_seed=p.fewshot_seed,
    )
    if results is None:
        raise RuntimeError("lm-eval returned no results")
    samples = results.pop("samples")
    tracker.save_results_aggregated(results=results, samples=samples)
    for task in results["configs"]:
        tracker.save_results_samples(task_name=task, samples=samples[task])
    results["samples"] = samples
    return results


class LmEval(Suite):
    name = "lm_eval"
    version = "1"  # lm-eval's own task versions are in its results_*.json
    Params = LmEvalParams

    def run(self, ctx: SuiteContext) -> SuiteResult:
        p = self.params(ctx)
        decider = LoglikDecider(p, ctx)
        results = evaluate(ctx, p, ctx.work_dir / "lm_eval", decider)
        res = SuiteResult(samples=sample_rows(results))
        res.scores = score_rows(results, res.samples)
        loglik_tasks = {
            t
            for t, c in results.get("configs", {}).items()
            if (c or {}).get("output_type") in ("loglikelihood", "multiple_choice", "loglikelihood_rolling")
        }
        if loglik_tasks:
            decider.path  # decided already when lm-eval asked; a cached run decides here
        for s in res.scores:
            if s.metric.split(".", 1)[0] in loglik_tasks:
                s.note = decider.note
        return res


# ---------------------------------------------------------------- log-likelihood check


class LoglikCheckParams(SuiteParams):
    paths: list[Literal["endpoint", "in-process"]] = Field(
        default_factory=lambda: ["endpoint", "in-process"], max_length=2
    )
    tolerance_nats: float = Field(
        default=0.01, gt=0, le=100, description="largest |logprob - reference| that counts as equal"
    )
    prompt_logits_server: bool = Field(
        default=True,
        description="check the endpoint on a sibling server started with prompt logits on (llama.cpp: logits_all)",
    )


def loglik_pairs(n: int, seed: int) -> list[tuple[str, str]]:
    """(context, continuation) pairs: running text split at a word, and short question/answer pairs."""
    rng = np.random.default_rng(seed)
    words = FIDELITY_TEXT.split()
    qa = [
        ("Question: What is the capital of France?\nAnswer:", " Paris"),
        ("Question: How many legs does a spider have?\nAnswer:", " eight"),
        ("The opposite of hot is", " cold"),
        ("2 + 2 =", " 4"),
        ("Q: Is the sky blue on a clear day?\nA:", " Yes, it is."),
    ]
    pairs = []
    for i in range(n):
        if i % 3 == 2:
            pairs.append(qa[(i // 3) % len(qa)])
            continue
        start = int(rng.integers(0, len(words) - 40))
        cut = start + int(rng.integers(8, 30))
        pairs.append((" ".join(words[start:cut]), " " + " ".join(words[cut : cut + int(rng.integers(1, 6))])))
    return pairs


def run_loglik_check(
    ctx: SuiteContext,
    p: "LoglikCheckParams",
    pairs: list[tuple[str, str]],
) -> tuple[list[dict], str | None, str]:
    """Every path of `p` against the in-process reference of the same weights: (sample rows, first error, what the
    reference was). The endpoint path of llama.cpp runs on a sibling server with prompt logits on."""
    from lm_eval.api.instance import Instance

    ref = same_weights_reference(ctx)
    if ref is None:
        raise ValueError(
            "loglik_check: no in-process model of the weights this endpoint serves (a GGUF, or an HF "
            "checkpoint served as stored); weights quantized when loading have none"
        )
    kind, path = ref
    gguf, hf = scoring_model(ctx)
    if gguf is None and hf is None:
        gguf, hf = (path, None) if kind == "gguf" else (None, path)
    label = f"{'llama.cpp' if kind == 'gguf' else 'transformers float32'} on {path.name}"
    reference = reference_worker(kind, path, ctx.n_ctx)
    rows: list[dict] = []
    try:
        for which in p.paths:
            needs_sibling = (
                which == "endpoint"
                and p.prompt_logits_server
                and ctx.engine in PROMPT_LOGPROB_ARGS
                and ctx.variant_spec is not None
            )
            if needs_sibling:
                args = {**ctx.variant_spec.engine_args, **PROMPT_LOGPROB_ARGS[ctx.engine]}
                with sibling_server(ctx, "prompt-logits", engine_args=args) as url:
                    rows += LoglikCheck._check(ctx, p, which, url, pairs, reference, Instance, gguf, hf)
            else:
                rows += LoglikCheck._check(ctx, p, which, ctx.base_url, pairs, reference, Instance, gguf, hf)
    finally:
        reference.close()
    details = [json.loads(r["details"]) for r in rows]
    error = next((d["error"] for d in details if d["path"] == "endpoint" and d["error"]), None)
    return rows, error, label


class LoglikCheck(Suite):
    name = "loglik_check"
    version = "1"
    Params = LoglikCheckParams

    def run(self, ctx: SuiteContext) -> SuiteResult:
        p = self.params(ctx)
        rows, error, reference = run_loglik_check(ctx, p, loglik_pairs(ctx.limit or 16, ctx.seed))
        res = SuiteResult(samples=rows)
        if "endpoint" in p.paths:  # lm_eval's auto path follows this record (engine, version, artifact)
            endpoint_rows = [json.loads(r["details"]) for r in rows if r["sample_id"].startswith("endpoint/")]
            save_record(ctx, new_record(ctx, endpoint_rows, p.tolerance_nats, reference, error))
        for path in p.paths:
            rows = [json.loads(s["details"]) for s in res.samples if s["sample_id"].startswith(path + "/")]
            diffs = [d["abs_diff_nats"] for d in rows if d["abs_diff_nats"] is not None]
            errors = sum(d["error"] is not None for d in rows)
            where = f"where path={path}"
            note = (
                f"{errors} of {len(rows)} requests failed: {next(d['error'] for d in rows if d['error'])}"
                if errors
                else None
            )
            res.scores += [
                Score(
                    f"{path}.within_tolerance",
                    float(np.mean([d["within"] for d in rows])) if rows else None,
                    None,
                    len(rows),
                    "fraction",
                    True,
                    f"mean(within) {where}",
                    note=note,
                ),
                Score(
                    f"{path}.max_abs_diff_nats",
                    max(diffs) if diffs else None,
                    None,
                    len(rows),
                    "nats",
                    False,
                    None,
                    note=note or f"vs {reference}",
                ),
                Score(
                    f"{path}.greedy_agreement",
                    float(np.mean([d["greedy_same"] for d in rows])) if rows else None,
                    None,
                    len(rows),
                    "fraction",
                    True,
                    f"mean(greedy_same) {where}",
                ),
            ]
        return res

    @staticmethod
    def _check(
        ctx: SuiteContext,
        p: LoglikCheckParams,
        path: str,
        url: str,
        pairs: list[tuple[str, str]],
        reference,
        Instance,
        gguf: Path | None = None,
        hf: Path | None = None,
    ) -> list[dict]:
        lm = make_lm(url, ctx.served_model, "completions", gguf, path, ctx.n_ctx, 1, 120, {"max_retries": 1}, hf=hf)
        try:
            requests = [Instance("loglikelihood", {}, pair, i) for i, pair in enumerate(pairs)]
            try:
                got, error = lm.loglikelihood(requests, disable_tqdm=True), None
            except Exception as err:  # noqa: BLE001 - a path that fails is a finding, not a crash
                got, error = [(None, None)] * len(pairs), error_text(err)
            # The very tokens lm-eval scored (its own context/continuation split).
            encoded = [lm._encode_pair(c, x) for c, x in pairs]
        finally:
            lm.scorer.close()
        rows = []
        for i, ((context, continuation), (lp, greedy), (ctx_enc, cont_enc)) in enumerate(zip(pairs, got, encoded)):
            ref_lp, ref_greedy = reference.call("reference_logprob", list(ctx_enc), list(cont_enc))
            diff = abs(lp - ref_lp) if lp is not None else None
            within = diff is not None and diff <= p.tolerance_nats
            rows.append(
                {
                    "sample_id": f"{path}/pair-{i}",
                    "prompt": context,
                    "target": continuation,
                    "response": None if lp is None else f"{lp:.6f}",
                    "score": float(within),
                    "valid": error is None,
                    "details": json.dumps(
                        {
                            "path": path,
                            "reference_logprob": ref_lp,
                            "logprob": lp,
                            "abs_diff_nats": diff,
                            "within": int(within),
                            "greedy_same": int(greedy is not None and greedy == ref_greedy),
                            "continuation_tokens": len(cont_enc),
                            "error": error,
                            "invalid": int(error is not None),
                        }
                    ),
                }
            )
        return rows
