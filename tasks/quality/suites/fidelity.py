"""Fidelity for every engine: the variant's next-token distributions against the reference's, wherever they come from.

`GGUFFidelity` compares two GGUFs with llama.cpp logits in-process. `Fidelity` (the suite
registered as `fidelity`) keeps that path and adds the others:
- the reference: always full-vocabulary log-probabilities computed in-process from its artifact
  (llama.cpp for a GGUF, transformers on the CPU in float32 for an HF checkpoint);
- the variant: in-process too where its engine has in-process logits (llama.cpp); else the
  endpoint's prompt log-probabilities (vLLM's `prompt_logprobs`, TensorRT-LLM where its server
  returns them) for the reference's own token ids; else NULL scores with the reason (a hosted API).

Top-k truncation. An endpoint returns the variant's log-probabilities of its top k tokens (vLLM's
default cap `max_logprobs` is 20) and of the actual next token, not of the whole vocabulary. Top-1
agreement and the perplexity ratio need nothing more and are exact. KL(reference || variant) needs
the variant's probability of every token the reference gives mass to: tokens outside the known set
are pooled into one bin on both sides (the reference's remaining mass against the variant's), which
by the log-sum inequality gives a lower bound of the true KL, equal to it when the variant's top k
carry all of the reference's mass. The scores' note says so. `in_process: true` (an HF checkpoint
the CPU can hold) also computes the variant's full distributions with transformers from the same
weights: `in_process.kl_mean` (exact KL) and `in_process.kl_mean_topk` (the same pooling applied),
so a run shows both what truncation hides and how far the engine's numbers are from the reference
implementation's. Every log-probability comes from tasks.quality.logits; this suite compares them.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import Field

from tasks.client import HTTPError, endpoint_headers
from tasks.core.process import run_in_child
from tasks.core.registry import ENGINES
from tasks.quality.base import Score, Suite, SuiteContext, SuiteParams, SuiteResult, mean_stderr
from tasks.quality.logits import (
    gguf_logprobs,
    gguf_text_logprobs,
    hf_logprobs,
    hf_text_logprobs,
    is_gguf,
    is_hf_checkpoint,
    prompt_topk,
)
from tasks.quality.texts import FIDELITY_TEXT


def fidelity_in_process(reference: Path, variant: Path, text: str, max_tokens: int, n_ctx: int) -> list[dict[str, Any]]:
    """fidelity_rows of two GGUFs of one model over `text` (meant to run in a child process: native code)."""
    ref, toks = gguf_text_logprobs(reference, text, max_tokens, n_ctx)
    var, toks_v = gguf_text_logprobs(variant, text, max_tokens, n_ctx)
    if toks != toks_v:
        raise ValueError("fidelity: variant and reference tokenize the text differently; compare variants of one model")
    return fidelity_rows(ref, var, toks)


def fidelity_rows(ref_logp: np.ndarray, var_logp: np.ndarray, toks: list[int]) -> list[dict[str, Any]]:
    """Per position: top-1 agreement, KL(ref || var) in nats, and both models' NLL of the true next token."""
    rows = []
    for i in range(len(toks) - 1):
        p, q = ref_logp[i], var_logp[i]
        kl = float(np.sum(np.exp(p) * (p - q)))
        rows.append(
            {
                "pos": i,
                "agree": float(p.argmax() == q.argmax()),
                "kl": max(kl, 0.0),
                "nll_ref": float(-p[toks[i + 1]]),
                "nll_var": float(-q[toks[i + 1]]),
            }
        )
    return rows


class FidelityParams(SuiteParams):
    text: str | None = Field(default=None, description="the fixed corpus (default: the built-in text)")
    text_file: str | None = Field(default=None, description="read the corpus from this local file instead")
    corpus: Literal["builtin", "wikitext"] = Field(
        default="builtin", description="wikitext: WikiText-2's test split from the hub (needs the network)"
    )

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
        raise ValueError(
            f"fidelity: wikitext needs the hub ({type(err).__name__}); offline, give text_file: "
            f"a local copy, or the built-in corpus"
        ) from None
    return "".join(rows["text"])


class GGUFFidelity(Suite):
    """Two GGUFs compared in-process with llama.cpp logits (the base of Fidelity, not registered)."""

    name = "fidelity"
    version = "1"
    Params = FidelityParams

    def run(self, ctx: SuiteContext) -> SuiteResult:
        if ctx.artifact_path is None or ctx.reference_artifact_path is None:
            raise ValueError(
                "fidelity: needs the variant's and the reference's artifacts (an engine with in-process logits)"
            )
        p = self.params(ctx)
        text = p.corpus_text()
        n = ctx.limit or 256
        # llama.cpp in a child process: a native crash fails this suite with its signal, not the run.
        rows = run_in_child(
            fidelity_in_process,
            ctx.reference_artifact_path,
            ctx.artifact_path,
            text,
            n,
            ctx.n_ctx,
            what="fidelity (llama.cpp logits)",
        )
        return fidelity_result(rows)


def fidelity_result(rows: list[dict[str, Any]], kl_note: str | None = None, extra: tuple[str, ...] = ()) -> SuiteResult:
    """Samples and scores from fidelity_rows (`extra` detail keys kept; `kl_note` says how KL was computed)."""
    res = SuiteResult()
    for r in rows:
        res.samples.append(
            {
                "sample_id": f"pos-{r['pos']}",
                "prompt": None,
                "target": None,
                "response": None,
                "score": r["agree"],
                "valid": True,
                "details": json.dumps({k: r[k] for k in ("kl", "nll_ref", "nll_var", *extra)}),
            }
        )
    kls = [r["kl"] for r in rows]
    agree, agree_se = mean_stderr([r["agree"] for r in rows])
    kl_mean, kl_se = mean_stderr(kls)
    ppl_ref = math.exp(float(np.mean([r["nll_ref"] for r in rows])))
    ppl_var = math.exp(float(np.mean([r["nll_var"] for r in rows])))
    k = len(rows)
    res.scores = [
        Score("top1_agreement", agree, agree_se, k, "fraction", True, "mean(score)"),
        Score("kl_mean", kl_mean, kl_se, k, "nats", False, "mean(kl)", note=kl_note),
        Score("kl_p99", float(np.percentile(kls, 99)), None, k, "nats", False, "p99(kl)", note=kl_note),
        Score("ppl_ratio", ppl_var / ppl_ref, None, k, "ratio", False, "exp_mean_diff(nll_var,nll_ref)"),
    ]
    return res


# Prompt log-probabilities per position that a vLLM server returns by default (its --max-logprobs).
DEFAULT_TOP_K = 20


class AnyEngineFidelityParams(FidelityParams):
    top_k: int = Field(
        default=DEFAULT_TOP_K,
        ge=1,
        le=1000,
        description="prompt log-probabilities asked per position (endpoint path; vLLM allows up to --max-logprobs)",
    )
    in_process: bool = Field(
        default=False,
        description="also the variant's full distributions with transformers (HF checkpoints the CPU can hold)",
    )


def reference_distributions(path: Path, text: str, n: int, n_ctx: int) -> tuple[np.ndarray, list[int], str]:
    """The reference's full distributions over `text` in-process: (log-probs, token ids, what computed them)."""
    if is_gguf(path):
        logp, ids = run_in_child(gguf_text_logprobs, path, text, n, n_ctx, what="fidelity reference (llama.cpp)")
        return logp, ids, "llama.cpp"
    if is_hf_checkpoint(path):
        logp, ids = run_in_child(hf_text_logprobs, str(path), text, n, n_ctx, what="fidelity reference (transformers)")
        return logp, ids, "transformers float32"
    raise ValueError(
        f"fidelity: the reference's artifact {path} is neither a GGUF nor an HF checkpoint; no in-process reference"
    )


def pooled_kl(p: np.ndarray, known: dict[int, float]) -> float:
    """KL(p || q) with q known on `known` only: the other tokens pooled into one bin on both sides (a lower bound)."""
    idx = np.fromiter(known, dtype=np.int64)
    logq = np.fromiter(known.values(), dtype=np.float64)
    logp = p[idx]
    pk = np.exp(logp)
    kl = float(np.sum(pk * (logp - logq)))
    p_rest = max(0.0, 1.0 - float(pk.sum()))
    q_rest = max(1e-300, 1.0 - float(np.exp(logq).sum()))
    if p_rest > 1e-12:
        kl += p_rest * (math.log(p_rest) - math.log(q_rest))
    return max(kl, 0.0)


def topk_rows(ref_logp: np.ndarray, var_topk: list[dict[int, float]], ids: list[int]) -> list[dict[str, Any]]:
    """fidelity_rows from the reference's full distributions and the variant's top-k prompt log-probabilities."""
    rows = []
    for i in range(len(ids) - 1):
        p, q = ref_logp[i], var_topk[i + 1]
        top_q = max(q, key=q.get)
        rows.append(
            {
                "pos": i,
                "agree": float(int(p.argmax()) == top_q),
                "kl": pooled_kl(p, q),
                "nll_ref": float(-p[ids[i + 1]]),
                "nll_var": float(-q[ids[i + 1]]),
                "known_tokens": len(q),
            }
        )
    return rows


def truncate(logp: np.ndarray, k: int, ids: list[int]) -> list[dict[int, float]]:
    """What an endpoint would return from full distributions: per position the top k and the actual token."""
    out: list[dict[int, float]] = [{}]
    for i in range(1, len(ids)):
        row = logp[i - 1]
        top = np.argpartition(-row, k)[:k] if k < row.size else np.arange(row.size)
        got = {int(t): float(row[t]) for t in top}
        got[ids[i]] = float(row[ids[i]])
        out.append(got)
    return out


def null_result(reason: str) -> SuiteResult:
    """Every fidelity score NULL, with why (an engine that exposes no log-probabilities)."""
    return SuiteResult(
        scores=[
            Score(m, None, None, 1, u, hib, None, note=reason)
            for m, u, hib in (
                ("top1_agreement", "fraction", True),
                ("kl_mean", "nats", False),
                ("kl_p99", "nats", False),
                ("ppl_ratio", "ratio", False),
            )
        ]
    )


class Fidelity(GGUFFidelity):
    name = "fidelity"
    version = "1"  # the llama.cpp path scores as before; other engines had no fidelity scores until now
    Params = AnyEngineFidelityParams

    def run(self, ctx: SuiteContext) -> SuiteResult:
        p = self.params(ctx)
        if is_gguf(ctx.artifact_path) and is_gguf(ctx.reference_artifact_path):
            return super().run(ctx)  # both in-process llama.cpp: full distributions on both sides
        ref_path = ctx.reference_artifact_path or (ctx.reference_artifact.path if ctx.reference_artifact else None)
        if ref_path is None:
            raise ValueError("fidelity: needs the reference's artifact (a variant built by tradeoff)")
        source = logits_source(ctx)
        if source is None:
            return null_result(
                f"engine {ctx.engine or 'of this endpoint'} exposes no next-token log-probabilities "
                f"(no in-process logits, no prompt_logprobs): fidelity not measured"
            )
        n = ctx.limit or 256
        ref_logp, ids, ref_how = reference_distributions(Path(ref_path), p.corpus_text(), n, ctx.n_ctx)
        if source == "in-process":
            var_logp = run_in_child(
                gguf_logprobs,
                str(ctx.artifact_path or ctx.artifact.path),
                ids,
                ctx.n_ctx,
                what="fidelity variant (llama.cpp)",
            )
            return fidelity_result(fidelity_rows(ref_logp, var_logp, ids))
        try:
            topk = prompt_topk(
                ctx.base_url, ctx.served_model, ids, p.top_k, ctx.request_timeout_s, endpoint_headers(ctx.base_url)
            )
        except (HTTPError, ValueError) as err:
            return null_result(f"fidelity not measured: {str(err).splitlines()[0][:240]}")
        note = (
            f"lower bound: the endpoint's top-{p.top_k} prompt log-probabilities, the rest of the vocabulary "
            f"pooled into one bin (reference: {ref_how}, full vocabulary)"
        )
        res = fidelity_result(topk_rows(ref_logp, topk, ids), kl_note=note, extra=("known_tokens",))
        if p.in_process:
            res.scores += in_process_scores(ctx, ref_logp, ids, p.top_k)
        return res


def logits_source(ctx: SuiteContext) -> str | None:
    """Where the variant's distributions come from: in-process, the endpoint's prompt_logprobs, or None."""
    engine = ENGINES.get(ctx.engine or "")
    if (
        engine is not None
        and engine.has_in_process_logits
        and is_gguf(ctx.artifact_path or (ctx.artifact.path if ctx.artifact else None))
    ):
        return "in-process"
    if engine is not None and engine.prompt_logprobs and ctx.base_url:
        return "prompt_logprobs"
    return None


def in_process_scores(ctx: SuiteContext, ref_logp: np.ndarray, ids: list[int], k: int) -> list[Score]:
    """The variant's full distributions with transformers (same weights): exact KL, and KL with top-k pooling."""
    folder = ctx.artifact.path if ctx.artifact is not None else None
    if not is_hf_checkpoint(folder):
        return [
            Score(
                "in_process.kl_mean",
                None,
                None,
                1,
                "nats",
                False,
                None,
                note="in_process: the variant's artifact is not an HF checkpoint",
            )
        ]
    var_logp = run_in_child(hf_logprobs, str(folder), ids, ctx.n_ctx, what="fidelity variant (transformers)")
    full = fidelity_rows(ref_logp, var_logp, ids)
    pooled = topk_rows(ref_logp, truncate(var_logp, k, ids), ids)
    kl, kl_se = mean_stderr([r["kl"] for r in full])
    kl_k, kl_k_se = mean_stderr([r["kl"] for r in pooled])
    agree, _ = mean_stderr([r["agree"] for r in full])
    n = len(full)
    return [
        Score(
            "in_process.kl_mean",
            kl,
            kl_se,
            n,
            "nats",
            False,
            None,
            note="transformers float32 on the variant's checkpoint, full vocabulary (exact KL)",
        ),
        Score(
            "in_process.kl_mean_topk",
            kl_k,
            kl_k_se,
            n,
            "nats",
            False,
            None,
            note=f"the same with the endpoint's top-{k} pooling: exact minus this is what truncation hides",
        ),
        Score("in_process.top1_agreement", agree, None, n, "fraction", True, None),
    ]
