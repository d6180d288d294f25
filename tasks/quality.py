"""Quality suites, registered by name. Each returns per-sample rows and aggregate scores.

Built-in suites need no download; their data is generated from a seed and they carry a
version that is bumped whenever a change could move scores.
- arithmetic: GPT-3-style few-shot arithmetic ("Q: What is 48 plus 76? A: 124"; GPT-3's
  2D+ ... 5D-, 2Dx, plus 1-digit tasks that a 135M model can partly solve) over the
  variant's endpoint, greedy, exact match on the first integer of the answer.
- fidelity: next-token distributions of the variant vs the reference on a fixed text,
  from real logits computed in-process from each artifact (llama.cpp `Llama.scores`):
  top-1 agreement, mean and p99 KL(reference || variant) in nats, perplexity ratio.
More suites live in `tasks/suites/` (long context, long generation, code, multi-turn, greedy
identity, lm-evaluation-harness tasks, the log-likelihood check) and register on import.

Every suite has a pydantic `Params` model, validated when the config loads. Every score says
how it is computed from the suite's samples (`sample_stat`), so `tasks.stats` can put a paired
confidence interval on its delta against the reference.
"""

from __future__ import annotations

import contextlib
import difflib
import json
import math
import random
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Iterator, Literal

import httpx
import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from tasks.model_tokenizer import Tokenizer, TokenizerRef, open_tokenizer
from tasks.process import run_in_child

if TYPE_CHECKING:
    from tasks.config import ModelSpec, Variant
    from tasks.engines import Artifact


class _Registry(dict):
    """Suites by name. A name ending in ':' registers a family: 'helm:' runs 'helm:gsm', 'helm:mmlu', ..."""

    def __missing__(self, name: str) -> type["Suite"]:
        family = name.split(":", 1)[0] + ":"
        if ":" in name and family != name and dict.__contains__(self, family):
            return dict.__getitem__(self, family)
        raise KeyError(name)

    def __contains__(self, name: object) -> bool:
        try:
            self[name]
        except (KeyError, TypeError):
            return False
        return True


SUITES: dict[str, type["Suite"]] = _Registry()


def register_suite(cls: type["Suite"]) -> type["Suite"]:
    SUITES[cls.name] = cls
    return cls


def close_matches(name: str, known: list[str] | set[str], what: str) -> str:
    """One line: `unknown <what> 'x' (did you mean a, b?); known: ...` (long lists only counted)."""
    known = sorted(known)
    near = difflib.get_close_matches(name, known, n=5, cutoff=0.5)
    hint = f" (did you mean {', '.join(near)}?)" if near else ""
    shown = ", ".join(known) if len(known) <= 30 else f"{len(known)} names"
    return f"unknown {what} '{name}'{hint}; known: {shown}"


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

    def tokenizer(self) -> "Tokenizer | None":
        """The variant's own tokenizer (tokenizer_ref, else the GGUF artifact), or None for a bare endpoint."""
        ref = self.tokenizer_ref
        if ref is None and self.artifact_path is not None:
            ref = TokenizerRef("gguf", str(self.artifact_path), "artifact")
        return open_tokenizer(ref) if ref is not None else None


UNITS = ("fraction", "nats", "ratio", "count", "tokens", "rating", "distance", "seconds")


@dataclass
class Score:
    metric: str
    value: float | None
    stderr: float | None
    n: int
    unit: str  # one of UNITS
    higher_is_better: bool
    # How the value follows from the suite's samples, e.g. "mean(score)", "p99(kl) where ctx=512"
    # (tasks.stats); None when it does not (no confidence interval on its delta then).
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

    def params(self, ctx: SuiteContext) -> Any:
        return self.Params.model_validate(ctx.params)

    def run(self, ctx: SuiteContext) -> SuiteResult:
        raise NotImplementedError


def binary_scores(samples: list[dict], metric: str = "accuracy") -> list[Score]:
    """Accuracy over 0/1 sample scores plus the share of invalid (empty/unparseable/errored) answers."""
    acc, se = mean_stderr([s["score"] for s in samples])
    n = len(samples)
    invalid = sum(not s["valid"] for s in samples)
    return [Score(metric, acc, se, n, "fraction", True, "mean(score)"),
            Score("invalid_rate", invalid / n if n else None, None, n, "fraction", False, "mean(invalid)",
                  note=f"{invalid} of {n} answers empty, unparseable or errored" if invalid else None)]


def mean_stderr(values: list[float]) -> tuple[float | None, float | None]:
    """Mean and its standard error (sample std / sqrt(n)), as lm-eval reports for per-sample means."""
    if not values:
        return None, None
    arr = np.asarray(values, dtype=float)
    se = float(arr.std(ddof=1) / math.sqrt(arr.size)) if arr.size > 1 else None
    return float(arr.mean()), se


# ---------------------------------------------------------------- arithmetic

_OPS = {"plus": (lambda a, b: a + b), "minus": (lambda a, b: a - b), "times": (lambda a, b: a * b)}
# GPT-3 arithmetic task names -> (digits, operation).
ARITH_TASKS = {"1D+": (1, "plus"), "1D-": (1, "minus"), "1Dx": (1, "times"), "2D+": (2, "plus"), "2D-": (2, "minus"), "3D+": (3, "plus"), "3D-": (3, "minus"),
               "4D+": (4, "plus"), "4D-": (4, "minus"), "5D+": (5, "plus"), "5D-": (5, "minus"),
               "2Dx": (2, "times")}
_INT = re.compile(r"-?\d[\d,]*")


def arithmetic_problems(n: int, seed: int, tasks: list[str]) -> list[dict[str, Any]]:
    """`n` problems spread round-robin over `tasks`, operands drawn from a seeded RNG."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        task = tasks[i % len(tasks)]
        digits, op = ARITH_TASKS[task]
        a, b = (rng.randint(10 ** (digits - 1), 10**digits - 1) for _ in range(2))
        out.append({"id": f"{task}-{i}", "task": task, "question": f"What is {a} {op} {b}?", "answer": _OPS[op](a, b)})
    return out


def parse_int(text: str) -> int | None:
    m = _INT.search(text or "")
    return int(m.group().replace(",", "")) if m else None


def complete(base_url: str, model: str, prompt: str, max_tokens: int, stop: list[str] | None = None,
             timeout_s: float = 120.0, min_tokens: int | None = None, usage: dict | None = None) -> str:
    """One greedy, non-streaming /v1/completions call; returns the text.

    `min_tokens` (llama.cpp and vLLM honour it) keeps a long generation going past EOS. A
    `usage` dict receives the server's token counts (what a hosted API bills).
    """
    from tasks.engines import endpoint_headers  # a hosted endpoint's Authorization; empty for local servers

    body: dict[str, Any] = {"model": model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0.0}
    if stop:
        body["stop"] = stop
    if min_tokens:
        body["min_tokens"] = min_tokens
    r = httpx.post(base_url.rstrip("/") + "/v1/completions", json=body, timeout=timeout_s,
                   headers=endpoint_headers(base_url))
    r.raise_for_status()
    if usage is not None:
        usage.update(r.json().get("usage") or {})
    return r.json()["choices"][0].get("text") or ""


def chat(base_url: str, model: str, messages: list[dict], max_tokens: int, timeout_s: float = 120.0,
         temperature: float = 0.0) -> str:
    """One non-streaming /v1/chat/completions call (greedy by default); returns the message text."""
    from tasks.engines import endpoint_headers

    body = {"model": model, "messages": messages, "max_tokens": max_tokens, "temperature": temperature}
    r = httpx.post(base_url.rstrip("/") + "/v1/chat/completions", json=body, timeout=timeout_s,
                   headers=endpoint_headers(base_url))
    r.raise_for_status()
    return r.json()["choices"][0]["message"].get("content") or ""


def error_text(err: BaseException) -> str:
    return f"{type(err).__name__}: {err}".splitlines()[0][:200]


@contextlib.contextmanager
def sibling_server(ctx: SuiteContext, log_name: str, **variant_changes: Any) -> Iterator[str]:
    """A second server of the same variant with some settings changed (e.g. no speculation); yields its URL.

    Started with the one launcher (tasks.serve) on a free port, stopped on exit.
    """
    if ctx.variant_spec is None or ctx.model_spec is None or ctx.engine is None or ctx.artifact is None:
        raise ValueError("needs a variant built by tradeoff (engine, model, artifact); not available on a bare endpoint")
    from tasks.engines import engine_for

    variant = ctx.variant_spec.model_copy(update=variant_changes)
    with engine_for(ctx.engine).serving(ctx.artifact, variant, ctx.model_spec, ctx.work_dir / f"{log_name}.server.log",
                                        ctx.server_start_timeout_s) as endpoint:
        yield endpoint.base_url


class ArithmeticParams(SuiteParams):
    tasks: list[str] = Field(default_factory=lambda: ["1D+", "1D-", "1Dx", "2D+"],
                             description=f"GPT-3 arithmetic tasks: {', '.join(ARITH_TASKS)}")
    num_fewshot: int = Field(default=3, ge=0)

    def model_post_init(self, _: Any) -> None:
        unknown = [t for t in self.tasks if t not in ARITH_TASKS]
        if unknown:
            raise ValueError(close_matches(unknown[0], list(ARITH_TASKS), "arithmetic task"))


@register_suite
class Arithmetic(Suite):
    name = "arithmetic"
    version = "1"
    Params = ArithmeticParams

    def run(self, ctx: SuiteContext) -> SuiteResult:
        p = self.params(ctx)
        tasks = p.tasks
        shots = arithmetic_problems(p.num_fewshot, ctx.seed + 1_000_003, tasks)
        header = "".join(f"Q: {s['question']}\nA: {s['answer']}\n\n" for s in shots)
        res = SuiteResult()
        for p in arithmetic_problems(ctx.limit or 40, ctx.seed, tasks):
            prompt = f"{header}Q: {p['question']}\nA:"
            usage: dict = {}
            try:
                text, error = complete(ctx.base_url, ctx.served_model, prompt, 12, stop=["\n", "Q:"],
                                       timeout_s=ctx.request_timeout_s, usage=usage), None
            except (httpx.HTTPError, KeyError, ValueError) as err:
                text, error = "", error_text(err)
            got = parse_int(text)
            valid = got is not None and error is None
            # The server's token counts per answer: v_cost prices an answer with them.
            res.samples.append({"sample_id": p["id"], "prompt": prompt, "target": str(p["answer"]), "response": text,
                                "score": float(got == p["answer"]), "valid": valid,
                                "details": json.dumps({"task": p["task"], "parsed": got, "error": error,
                                                       "invalid": int(not valid),
                                                       "prompt_tokens": usage.get("prompt_tokens"),
                                                       "output_tokens": usage.get("completion_tokens")})})
        res.scores = binary_scores(res.samples)
        return res


# ---------------------------------------------------------------- fidelity

FIDELITY_TEXT = (
    "The river town woke slowly. Before the sun cleared the hills, the baker had already lit his ovens, "
    "and the smell of bread drifted down the narrow streets toward the water. Fishermen checked their nets "
    "and argued about the weather, as they did every morning, while the ferry waited at the dock for the "
    "first passengers of the day. A schoolteacher crossed the square with a stack of books under her arm. "
    "She had promised her students a lesson about the stars, and she had spent the evening reading about "
    "how sailors once used them to find their way across the sea. At the market, a farmer arranged apples "
    "in neat rows and told anyone who would listen that this year's harvest was the best in a decade. "
    "Children ran past him on their way to school, laughing, and a dog followed them as far as the bridge "
    "before deciding to return home. By noon the town was busy: carts rolled over the stones, bells rang "
    "from the tower, and the river carried small boats loaded with wood, grain and cloth to the city in the "
    "south. In the evening, when the work was done, people gathered by the water to watch the light fade, "
    "and the old men told the same stories they had told for forty years, about floods and fires, about "
    "weddings and storms, and about the winter when the river froze so hard that a horse could cross it."
)


def next_token_logprobs(model_path: Path, text: str, max_tokens: int, n_ctx: int) -> tuple[np.ndarray, list[int]]:
    """Log-softmax of llama.cpp's logits at every position of `text` (real logits, in-process)."""
    from llama_cpp import Llama

    llm = Llama(model_path=str(model_path), logits_all=True, n_ctx=n_ctx, verbose=False, seed=0)
    try:
        toks = llm.tokenize(text.encode(), add_bos=True)[: max_tokens + 1]
        llm.reset()
        llm.eval(toks)
        logits = np.array(llm.scores[: len(toks)], dtype=np.float64)
    finally:
        llm.close()
    m = logits.max(axis=1, keepdims=True)
    logp = logits - m - np.log(np.exp(logits - m).sum(axis=1, keepdims=True))
    return logp, toks


def fidelity_in_process(reference: Path, variant: Path, text: str, max_tokens: int, n_ctx: int) -> list[dict[str, Any]]:
    """fidelity_rows of two GGUFs of one model over `text` (meant to run in a child process: native code)."""
    ref, toks = next_token_logprobs(reference, text, max_tokens, n_ctx)
    var, toks_v = next_token_logprobs(variant, text, max_tokens, n_ctx)
    if toks != toks_v:
        raise ValueError("fidelity: variant and reference tokenize the text differently; compare variants of one model")
    return fidelity_rows(ref, var, toks)


def fidelity_rows(ref_logp: np.ndarray, var_logp: np.ndarray, toks: list[int]) -> list[dict[str, Any]]:
    """Per position: top-1 agreement, KL(ref || var) in nats, and both models' NLL of the true next token."""
    rows = []
    for i in range(len(toks) - 1):
        p, q = ref_logp[i], var_logp[i]
        kl = float(np.sum(np.exp(p) * (p - q)))
        rows.append({"pos": i, "agree": float(p.argmax() == q.argmax()), "kl": max(kl, 0.0),
                     "nll_ref": float(-p[toks[i + 1]]), "nll_var": float(-q[toks[i + 1]])})
    return rows


class FidelityParams(SuiteParams):
    text: str | None = Field(default=None, description="the fixed corpus (default: the built-in text)")
    text_file: str | None = Field(default=None, description="read the corpus from this local file instead")
    corpus: Literal["builtin", "wikitext"] = Field(
        default="builtin", description="wikitext: WikiText-2's test split from the hub (needs the network)")

    def corpus_text(self) -> str:
        if self.text_file:
            return Path(self.text_file).read_text()
        if self.text:
            return self.text
        if self.corpus == "wikitext":
            return wikitext_text()
        return FIDELITY_TEXT


def wikitext_text() -> str:
    """WikiText-2 (raw) test split joined, as perplexity evaluations use it; from the hub or its cache."""
    import datasets

    try:
        rows = datasets.load_dataset("Salesforce/wikitext", "wikitext-2-raw-v1", split="test")
    except Exception as err:  # noqa: BLE001 - offline: say what to do instead
        raise ValueError(f"fidelity: wikitext needs the hub ({type(err).__name__}); offline, give text_file: "
                         f"a local copy, or the built-in corpus") from None
    return "".join(rows["text"])


@register_suite
class Fidelity(Suite):
    name = "fidelity"
    version = "1"
    Params = FidelityParams

    def run(self, ctx: SuiteContext) -> SuiteResult:
        if ctx.artifact_path is None or ctx.reference_artifact_path is None:
            raise ValueError("fidelity: needs the variant's and the reference's artifacts (an engine with in-process logits)")
        p = self.params(ctx)
        text = p.corpus_text()
        n = ctx.limit or 256
        # llama.cpp in a child process: a native crash fails this suite with its signal, not the run.
        rows = run_in_child(fidelity_in_process, ctx.reference_artifact_path, ctx.artifact_path, text, n, ctx.n_ctx,
                            what="fidelity (llama.cpp logits)")
        return fidelity_result(rows)


def fidelity_result(rows: list[dict[str, Any]], kl_note: str | None = None,
                    extra: tuple[str, ...] = ()) -> SuiteResult:
    """Samples and scores from fidelity_rows (`extra` detail keys kept; `kl_note` says how KL was computed)."""
    res = SuiteResult()
    for r in rows:
        res.samples.append({"sample_id": f"pos-{r['pos']}", "prompt": None, "target": None, "response": None,
                            "score": r["agree"], "valid": True,
                            "details": json.dumps({k: r[k] for k in ("kl", "nll_ref", "nll_var", *extra)})})
    kls = [r["kl"] for r in rows]
    agree, agree_se = mean_stderr([r["agree"] for r in rows])
    kl_mean, kl_se = mean_stderr(kls)
    ppl_ref = math.exp(float(np.mean([r["nll_ref"] for r in rows])))
    ppl_var = math.exp(float(np.mean([r["nll_var"] for r in rows])))
    k = len(rows)
    res.scores = [Score("top1_agreement", agree, agree_se, k, "fraction", True, "mean(score)"),
                  Score("kl_mean", kl_mean, kl_se, k, "nats", False, "mean(kl)", note=kl_note),
                  Score("kl_p99", float(np.percentile(kls, 99)), None, k, "nats", False, "p99(kl)", note=kl_note),
                  Score("ppl_ratio", ppl_var / ppl_ref, None, k, "ratio", False, "exp_mean_diff(nll_var,nll_ref)")]
    return res


def suite_for(name: str) -> Suite:
    if name not in SUITES:
        raise ValueError(close_matches(name, list(SUITES), "suite"))
    suite = SUITES[name]()
    suite.name = name  # a family's member ('helm:gsm') runs under its own name
    return suite


def check_params(name: str, params: dict[str, Any]) -> str | None:
    """None when `params` suit suite `name`, else one line 'params.<field>: problem'."""
    from pydantic import ValidationError

    try:
        SUITES[name].Params.model_validate(params)
    except ValidationError as err:
        e = err.errors()[0]
        loc = ".".join(str(x) for x in e["loc"])
        msg = e["msg"].removeprefix("Value error, ")
        if e["type"] == "extra_forbidden":
            msg = f"unknown parameter of suite {name}; known: {', '.join(SUITES[name].Params.model_fields)}"
        elif e["type"] == "missing":
            msg = "required; add it"
        elif e["type"] != "value_error" and not isinstance(e.get("input"), (dict, list)):
            msg = f"{msg[0].lower()}{msg[1:]} (got {e.get('input')!r}); fix the value"
        return f"params{'.' + loc if loc else ''}: {msg}"
    return None


# The other suites register on import.
from tasks import suites as _suites  # noqa: E402,F401
from tasks import helm as _helm  # noqa: E402,F401  (the helm: family, crfm-helm)


