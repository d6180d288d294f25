"""fidelity: next-token distributions of the variant vs the reference on a fixed text, from real logits of each artifact."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import Field

from tasks.core.process import run_in_child
from tasks.quality.base import Score, Suite, SuiteContext, SuiteParams, SuiteResult, mean_stderr

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
        res.scores = [Score("top1_agreement", agree, agree_se, k, "fraction", True, "mean(score)"),
                      Score("kl_mean", kl_mean, kl_se, k, "nats", False, "mean(kl)"),
                      Score("kl_p99", float(np.percentile(kls, 99)), None, k, "nats", False, "p99(kl)"),
                      Score("ppl_ratio", ppl_var / ppl_ref, None, k, "ratio", False, "exp_mean_diff(nll_var,nll_ref)")]
        return res
