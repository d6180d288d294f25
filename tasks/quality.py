"""Quality suites, registered by name. Each returns per-sample rows and aggregate scores.

Built-in suites need no download; their data is generated from a seed and they carry a
version that is bumped whenever a change could move scores.
- arithmetic: GPT-3-style few-shot arithmetic ("Q: What is 48 plus 76? A: 124"; GPT-3's
  2D+ ... 5D-, 2Dx, plus 1-digit tasks that a 135M model can partly solve) over the
  variant's endpoint, greedy, exact match on the first integer of the answer.
- fidelity: next-token distributions of the variant vs the reference on a fixed text,
  from real logits computed in-process from each artifact (llama.cpp `Llama.scores`):
  top-1 agreement, mean and p99 KL(reference || variant) in nats, perplexity ratio.
"""

from __future__ import annotations

import json
import math
import random
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import httpx
import numpy as np

SUITES: dict[str, type["Suite"]] = {}


def register_suite(cls: type["Suite"]) -> type["Suite"]:
    SUITES[cls.name] = cls
    return cls


@dataclass
class SuiteContext:
    """What a suite may use: the variant's endpoint and artifact, and the reference's artifact."""

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


@dataclass
class Score:
    metric: str
    value: float | None
    stderr: float | None
    n: int
    unit: str  # fraction | nats | ratio | count
    higher_is_better: bool


@dataclass
class SuiteResult:
    samples: list[dict[str, Any]] = field(default_factory=list)
    scores: list[Score] = field(default_factory=list)


class Suite:
    name: ClassVar[str]
    version: ClassVar[str]

    def run(self, ctx: SuiteContext) -> SuiteResult:
        raise NotImplementedError


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
             timeout_s: float = 120.0) -> str:
    """One greedy, non-streaming /v1/completions call; returns the text."""
    body = {"model": model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0.0}
    if stop:
        body["stop"] = stop
    r = httpx.post(base_url.rstrip("/") + "/v1/completions", json=body, timeout=timeout_s)
    r.raise_for_status()
    return r.json()["choices"][0].get("text") or ""


@register_suite
class Arithmetic(Suite):
    name = "arithmetic"
    version = "1"

    def run(self, ctx: SuiteContext) -> SuiteResult:
        tasks = ctx.params.get("tasks", ["1D+", "1D-", "1Dx", "2D+"])
        unknown = [t for t in tasks if t not in ARITH_TASKS]
        if unknown:
            raise ValueError(f"arithmetic.params.tasks: unknown task {unknown[0]!r}; use some of {', '.join(ARITH_TASKS)}")
        shots = arithmetic_problems(int(ctx.params.get("num_fewshot", 3)), ctx.seed + 1_000_003, tasks)
        header = "".join(f"Q: {s['question']}\nA: {s['answer']}\n\n" for s in shots)
        res = SuiteResult()
        for p in arithmetic_problems(ctx.limit or 40, ctx.seed, tasks):
            prompt = f"{header}Q: {p['question']}\nA:"
            try:
                text, error = complete(ctx.base_url, ctx.served_model, prompt, 12, stop=["\n", "Q:"]), None
            except (httpx.HTTPError, KeyError, ValueError) as err:
                text, error = "", f"{type(err).__name__}: {err}"[:200]
            got = parse_int(text)
            res.samples.append({"sample_id": p["id"], "prompt": prompt, "target": str(p["answer"]), "response": text,
                                "score": float(got == p["answer"]), "valid": got is not None and error is None,
                                "details": json.dumps({"task": p["task"], "parsed": got, "error": error})})
        scores = [s["score"] for s in res.samples]
        acc, se = mean_stderr(scores)
        n = len(scores)
        invalid = sum(not s["valid"] for s in res.samples)
        res.scores = [Score("accuracy", acc, se, n, "fraction", True),
                      Score("invalid_rate", invalid / n if n else None, None, n, "fraction", False)]
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


def fidelity_rows(ref_logp: np.ndarray, var_logp: np.ndarray, toks: list[int]) -> list[dict[str, Any]]:
    """Per position: top-1 agreement, KL(ref || var) in nats, and both models' NLL of the true next token."""
    rows = []
    for i in range(len(toks) - 1):
        p, q = ref_logp[i], var_logp[i]
        kl = float(np.sum(np.exp(p) * (p - q)))
        rows.append({"pos": i, "agree": float(p.argmax() == q.argmax()), "kl": max(kl, 0.0),
                     "nll_ref": float(-p[toks[i + 1]]), "nll_var": float(-q[toks[i + 1]])})
    return rows


@register_suite
class Fidelity(Suite):
    name = "fidelity"
    version = "1"

    def run(self, ctx: SuiteContext) -> SuiteResult:
        if ctx.artifact_path is None or ctx.reference_artifact_path is None:
            raise ValueError("fidelity: needs the variant's and the reference's artifacts (an engine with in-process logits)")
        text = ctx.params.get("text", FIDELITY_TEXT)
        n = ctx.limit or 256
        ref, toks = next_token_logprobs(ctx.reference_artifact_path, text, n, ctx.n_ctx)
        var, toks_v = next_token_logprobs(ctx.artifact_path, text, n, ctx.n_ctx)
        if toks != toks_v:
            raise ValueError("fidelity: variant and reference tokenize the text differently; compare variants of one model")
        rows = fidelity_rows(ref, var, toks)
        res = SuiteResult()
        for r in rows:
            res.samples.append({"sample_id": f"pos-{r['pos']}", "prompt": None, "target": None, "response": None,
                                "score": r["agree"], "valid": True,
                                "details": json.dumps({k: r[k] for k in ("kl", "nll_ref", "nll_var")})})
        kls = [r["kl"] for r in rows]
        agree, agree_se = mean_stderr([r["agree"] for r in rows])
        kl_mean, kl_se = mean_stderr(kls)
        ppl_ref = math.exp(float(np.mean([r["nll_ref"] for r in rows])))
        ppl_var = math.exp(float(np.mean([r["nll_var"] for r in rows])))
        k = len(rows)
        res.scores = [Score("top1_agreement", agree, agree_se, k, "fraction", True),
                      Score("kl_mean", kl_mean, kl_se, k, "nats", False),
                      Score("kl_p99", float(np.percentile(kls, 99)), None, k, "nats", False),
                      Score("ppl_ratio", ppl_var / ppl_ref, None, k, "ratio", False)]
        return res


def suite_for(name: str) -> Suite:
    return SUITES[name]()


