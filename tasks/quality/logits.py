"""Log-probabilities for the quality suites, every way they are had: the framework's one home for them.

As lm-eval keeps its models apart from its tasks, the suites (tasks/quality/suites/) say what to
score and get every log-probability from here:
- in-process llama.cpp on a GGUF (`LlamaCppLogits`: the one place a model is opened with every
  position's logits, `logits_all=True`), the reference for GGUFs;
- in-process transformers on an HF checkpoint (`TransformersLogits`: float32 on the CPU), the
  reference for engines that serve HF checkpoints (vLLM, TensorRT-LLM's source weights);
- an endpoint's prompt log-probabilities (`prompt_topk`: vLLM's `prompt_logprobs`, top k per position).
lm-eval's echo=True requests are lm-eval's own (its local-completions model); `LlamaCppScorer` and
`TransformersScorer` are the in-process tokenizer and log-likelihood it scores with instead.

Native code and big models run in a spawned child (`tasks.core.process.ChildWorker`, `run_in_child`),
so a crash or the OOM killer fails the suite with its signal instead of the run. One log-softmax
(`log_softmax`: scipy's, in float64) turns every logit row into log-probabilities; only the
log-likelihood check's llama.cpp reference (`LlamaCppLogits.reference_logprob`) takes llama-cpp-python's
own, on purpose, so that the check tests this one too.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import numpy as np
from scipy import special

from tasks.client import BadResponse, json_of, request
from tasks.core.process import ChildWorker
from tasks.engines.tokenizer import HFTokenizer


def log_softmax(logits: np.ndarray) -> np.ndarray:
    """log P over the last axis (the vocabulary), in float64."""
    return special.log_softmax(np.asarray(logits, dtype=np.float64), axis=-1)


def is_gguf(path: Path | None) -> bool:
    """A GGUF file llama.cpp can load in-process."""
    return path is not None and path.suffix == ".gguf" and path.is_file()


def is_hf_checkpoint(path: Path | None) -> bool:
    """A folder transformers can load a causal LM from (config.json and weights)."""
    return bool(
        path is not None
        and path.is_dir()
        and (path / "config.json").is_file()
        and (any(path.glob("*.safetensors")) or any(path.glob("*.bin")))
    )


# ---------------------------------------------------------------- in-process models


class _Continuations:
    """The log-likelihood of token continuations, from a model's log-probabilities at every position."""

    n_ctx: int

    def _rows(self, tokens: list[int], start: int, stop: int) -> np.ndarray:
        """log P(next token | tokens[:i+1]) for i in [start, stop)."""
        raise NotImplementedError

    def logprob(self, context: list[int], continuation: list[int]) -> tuple[float, bool]:
        """(sum of log P(continuation | context), whether greedy decoding would produce it)."""
        tokens = (context + continuation)[-self.n_ctx :]
        ctxlen = len(tokens) - len(continuation)
        lp = self._rows(tokens, ctxlen - 1, len(tokens) - 1)
        picked = lp[np.arange(len(continuation)), continuation]
        return float(picked.sum()), bool((lp.argmax(axis=1) == np.asarray(continuation)).all())


class LlamaCppLogits(_Continuations):
    """llama.cpp logits of a GGUF (every position): log-probabilities and the log-likelihood of continuations.

    Consecutive requests that share a prefix (the choices of one multiple-choice question) reuse its
    evaluated positions, as llama.cpp's own generate does (`reuse_prefix`).
    """

    def __init__(self, gguf: str | Path, n_ctx: int = 2048, reuse_prefix: bool = True):
        from llama_cpp import Llama

        self.n_ctx, self.reuse_prefix = n_ctx, reuse_prefix
        self.llm = Llama(model_path=str(gguf), logits_all=True, n_ctx=n_ctx, verbose=False, seed=0)

    def tokenize(self, text: str) -> list[int]:
        """The GGUF's tokens of `text`, with its BOS token where the model adds one."""
        return self.llm.tokenize(text.encode(), add_bos=True)

    def _eval(self, tokens: list[int]) -> np.ndarray:
        llm = self.llm
        common = 0
        if self.reuse_prefix:
            have = llm.input_ids[: llm.n_tokens].tolist()
            while common < min(len(have), len(tokens) - 1) and have[common] == tokens[common]:
                common += 1
        llm.n_tokens = common  # eval() drops the cache from here on and evaluates the rest
        llm.eval(tokens[common:])
        return np.asarray(llm.scores[: len(tokens)], dtype=np.float64)

    def logprobs(self, tokens: list[int]) -> np.ndarray:
        """[len(tokens), vocab] log P(next token | tokens[:i+1]) in float64."""
        return log_softmax(self._eval(tokens))

    def _rows(self, tokens: list[int], start: int, stop: int) -> np.ndarray:
        return log_softmax(self._eval(tokens)[start:stop])

    def reference_logprob(self, context: list[int], continuation: list[int]) -> tuple[float, bool]:
        """The reference: a fresh evaluation of the whole sequence and llama-cpp-python's own log-softmax
        (written apart from `logprob`, which reuses prefixes, so the check tests that too)."""
        from llama_cpp import Llama

        tokens = context + continuation
        self.llm.reset()
        self.llm.eval(tokens)
        total, greedy = 0.0, True
        for i in range(len(context), len(tokens)):
            row = np.asarray(self.llm.scores[i - 1])
            total += float(Llama.logits_to_logprobs(row)[tokens[i]])
            greedy = greedy and int(row.argmax()) == tokens[i]
        return total, greedy

    def close(self) -> None:
        self.llm.close()


class TransformersLogits(_Continuations):
    """A causal LM from an HF folder (float32 on the CPU: no GPU kernel or reduced precision between the
    reference and the weights); next-token log-probabilities at every position of a token sequence."""

    def __init__(self, folder: str, n_ctx: int = 2048, threads: int | None = None):
        os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
        import torch
        from transformers import AutoModelForCausalLM

        if threads:
            torch.set_num_threads(threads)
        self.n_ctx = n_ctx
        self.model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, local_files_only=True)
        self.model.eval()

    def logprobs(self, tokens: list[int]) -> np.ndarray:
        """[len(tokens), vocab] log P(next token | tokens[:i+1]) in float64."""
        import torch

        with torch.inference_mode():
            out = self.model(torch.tensor([list(tokens)], dtype=torch.long))
        return log_softmax(out.logits[0].to(torch.float64).numpy())

    def _rows(self, tokens: list[int], start: int, stop: int) -> np.ndarray:
        return self.logprobs(tokens)[start:stop]

    def reference_logprob(self, context: list[int], continuation: list[int]) -> tuple[float, bool]:
        """The check's reference: the whole sequence evaluated afresh (here the same as `logprob`: no cache)."""
        return self.logprob(context, continuation)

    def close(self) -> None:
        self.model = None


def llama_cpp_worker(gguf: str | Path, n_ctx: int, reuse_prefix: bool = True) -> ChildWorker:
    """LlamaCppLogits of `gguf` in a child process."""
    return ChildWorker(LlamaCppLogits, str(gguf), n_ctx, reuse_prefix, what=f"llama.cpp logits of {Path(gguf).name}")


def transformers_worker(folder: str | Path, n_ctx: int = 2048) -> ChildWorker:
    """TransformersLogits of `folder` in a child process."""
    return ChildWorker(TransformersLogits, str(folder), n_ctx, what=f"transformers logits of {Path(folder).name}")


def reference_worker(kind: str, path: Path, n_ctx: int) -> ChildWorker:
    """The in-process reference of the same weights: llama.cpp logits of a GGUF (a fresh evaluation per request),
    or transformers on an HF checkpoint."""
    return llama_cpp_worker(path, n_ctx, reuse_prefix=False) if kind == "gguf" else transformers_worker(path, n_ctx)


# ---------------------------------------------------------------- full distributions (call in a child: native code)


def gguf_text_logprobs(path: str | Path, text: str, max_tokens: int, n_ctx: int) -> tuple[np.ndarray, list[int]]:
    """(llama.cpp's log-probabilities at every position, the token ids) of the first max_tokens + 1 tokens of `text`."""
    model = LlamaCppLogits(path, n_ctx, reuse_prefix=False)
    try:
        ids = model.tokenize(text)[: max_tokens + 1]
        return model.logprobs(ids), ids
    finally:
        model.close()


def gguf_logprobs(path: str | Path, ids: list[int], n_ctx: int) -> np.ndarray:
    """llama.cpp's log-probabilities at every position of given token ids."""
    model = LlamaCppLogits(path, n_ctx, reuse_prefix=False)
    try:
        return model.logprobs(list(ids))
    finally:
        model.close()


def hf_text_logprobs(folder: str, text: str, max_tokens: int, n_ctx: int) -> tuple[np.ndarray, list[int]]:
    """(transformers' log-probabilities at every position, the token ids) of `text` under an HF checkpoint."""
    ids = HFTokenizer(folder).encode(text, add_special_tokens=True)[: max_tokens + 1]
    return TransformersLogits(folder, n_ctx).logprobs(ids), ids


def hf_logprobs(folder: str, ids: list[int], n_ctx: int) -> np.ndarray:
    """transformers' log-probabilities at every position of given token ids."""
    return TransformersLogits(folder, n_ctx).logprobs(ids)


# ---------------------------------------------------------------- an endpoint's prompt log-probabilities


def prompt_topk(
    base_url: str, model: str, ids: list[int], k: int, timeout_s: float, headers: dict[str, str] | None = None
) -> list[dict[int, float]]:
    """The endpoint's prompt log-probabilities for token ids: per position, {token id: logprob} of its top k and the
    actual token (position 0 has none). Untrusted: a malformed answer is a ValueError naming what is wrong."""
    body = {"model": model, "prompt": list(ids), "max_tokens": 1, "temperature": 0.0, "prompt_logprobs": k}
    r = request("POST", base_url, "/v1/completions", timeout_s, body, headers=headers or {})
    if r.status_code >= 400:
        raise ValueError(f"endpoint refused prompt_logprobs: HTTP {r.status_code}: {r.text[:200]}")
    try:
        choice = json_of(r)["choices"][0]
    except (BadResponse, KeyError, IndexError, TypeError):
        choice = None
    if not isinstance(choice, dict):
        raise ValueError("endpoint's completion is not OpenAI-shaped JSON")
    entries = choice.get("prompt_logprobs")
    if not isinstance(entries, list):
        raise ValueError("endpoint returned no prompt_logprobs (the engine does not expose prompt log-probabilities)")
    if len(entries) != len(ids):
        raise ValueError(f"endpoint returned prompt_logprobs for {len(entries)} positions, not {len(ids)}")
    out: list[dict[int, float]] = []
    for i, entry in enumerate(entries):
        if entry is None:
            out.append({})
            continue
        try:
            got = {int(t): float(v["logprob"] if isinstance(v, dict) else v) for t, v in entry.items()}
        except (ValueError, TypeError, KeyError, AttributeError):
            raise ValueError(f"endpoint's prompt_logprobs[{i}] is not {{token id: {{logprob}}}}") from None
        if i > 0 and ids[i] not in got:
            raise ValueError(f"endpoint's prompt_logprobs[{i}] lacks the prompt's own token {ids[i]}")
        if any(not math.isfinite(v) or v > 1e-6 for v in got.values()):
            raise ValueError(f"endpoint's prompt_logprobs[{i}] holds a log-probability that is not <= 0")
        out.append(got)
    return out


# ---------------------------------------------------------------- scorers: lm-eval's tokenizer and log-likelihood


class _Scorer:
    """Tokenizer in-process, log-likelihoods from a logits worker started on the first request: the model with
    every position's logits holds n_ctx x vocabulary floats, which generate-only tasks never need."""

    _logits: ChildWorker | None = None

    def _start(self) -> ChildWorker:
        raise NotImplementedError

    @property
    def logits(self) -> ChildWorker:
        if self._logits is None:
            self._logits = self._start()
        return self._logits

    def logprob(self, context: list[int], continuation: list[int]) -> tuple[float, bool]:
        """(sum of log P(continuation | context), whether greedy decoding would produce it)."""
        return self.logits.call("logprob", context, continuation)

    def close(self) -> None:
        if self._logits is not None:
            self._logits.close()
            self._logits = None


class LlamaCppScorer(_Scorer):
    """Tokenizer (vocabulary only, in-process) and log-likelihoods (llama.cpp logits, in a child) of a GGUF."""

    def __init__(self, gguf: str | Path, n_ctx: int = 2048, reuse_prefix: bool = True):
        from llama_cpp import Llama

        self.gguf, self.n_ctx, self.reuse_prefix = str(gguf), n_ctx, reuse_prefix
        self.vocab = Llama(model_path=self.gguf, vocab_only=True, verbose=False)

    def _start(self) -> ChildWorker:
        return llama_cpp_worker(self.gguf, self.n_ctx, self.reuse_prefix)

    def encode(self, text: str) -> list[int]:
        return self.vocab.tokenize(text.encode("utf-8"), add_bos=False, special=False)

    def decode(self, tokens: list[int]) -> str:
        return self.vocab.detokenize(tokens).decode("utf-8", errors="replace")

    def token_bos(self) -> int:
        return self.vocab.token_bos()

    def token_eos(self) -> int:
        return self.vocab.token_eos()

    def close(self) -> None:
        self.vocab.close()
        super().close()


class TransformersScorer(_Scorer):
    """Tokenizer (in-process) and log-likelihoods (transformers logits, in a child) of an HF checkpoint."""

    def __init__(self, folder: str | Path, n_ctx: int = 2048):
        self.folder, self.n_ctx = str(folder), n_ctx
        self.vocab = HFTokenizer(self.folder)

    def _start(self) -> ChildWorker:
        return transformers_worker(self.folder, self.n_ctx)

    def encode(self, text: str) -> list[int]:
        return self.vocab.encode(text)

    def decode(self, tokens: list[int]) -> str:
        return self.vocab.decode(tokens)

    def token_bos(self) -> int:
        return self.vocab.bos_id

    def token_eos(self) -> int:
        return self.vocab.eos_id
