"""In-process reference logits of a Hugging Face checkpoint: transformers on the CPU in float32, in a child process.

The reference for engines that serve HF checkpoints (vLLM, TensorRT-LLM's source weights), as
llama.cpp's `Llama.scores` is for GGUFs: the same weights, evaluated by plain PyTorch code. It runs
in a spawned child (`tasks.core.process.ChildWorker`) like the llama.cpp references, so a crash or the
OOM killer fails the suite with its signal instead of the run. float32 on the CPU: no GPU kernel
or reduced precision between the reference and the weights.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from tasks.core.process import ChildWorker
from tasks.engines.tokenizer import HFTokenizer


def log_softmax(logits: np.ndarray) -> np.ndarray:
    logits = np.asarray(logits, dtype=np.float64)
    m = logits.max(axis=-1, keepdims=True)
    return logits - m - np.log(np.exp(logits - m).sum(axis=-1, keepdims=True))


class TransformersLogits:
    """A causal LM from an HF folder; next-token log-probabilities at every position of a token sequence."""

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

    def logprob(self, context: list[int], continuation: list[int]) -> tuple[float, bool]:
        """(sum of log P(continuation | context), whether greedy decoding would produce it)."""
        tokens = (context + continuation)[-self.n_ctx :]
        ctxlen = len(tokens) - len(continuation)
        lp = self.logprobs(tokens)[ctxlen - 1 : len(tokens) - 1]
        picked = lp[np.arange(len(continuation)), continuation]
        return float(picked.sum()), bool((lp.argmax(axis=1) == np.asarray(continuation)).all())

    def reference_logprob(self, context: list[int], continuation: list[int]) -> tuple[float, bool]:
        """The check's reference: the whole sequence evaluated afresh (here the same as `logprob`: no cache)."""
        return self.logprob(context, continuation)

    def close(self) -> None:
        self.model = None


def hf_logits_worker(folder: str | Path, n_ctx: int = 2048) -> ChildWorker:
    """TransformersLogits of `folder` in a child process."""
    return ChildWorker(TransformersLogits, str(folder), n_ctx, what=f"transformers logits of {Path(folder).name}")


def is_hf_checkpoint(path: Path | None) -> bool:
    """A folder transformers can load a causal LM from (config.json and weights)."""
    return bool(
        path is not None
        and path.is_dir()
        and (path / "config.json").is_file()
        and (any(path.glob("*.safetensors")) or any(path.glob("*.bin")))
    )


class TransformersScorer:
    """Tokenizer (in-process) and log-likelihoods (transformers logits, in a child) of an HF checkpoint: what
    `tasks.quality.suites.lm_eval.LlamaCppScorer` is for a GGUF."""

    def __init__(self, folder: str | Path, n_ctx: int = 2048):
        self.folder, self.n_ctx = str(folder), n_ctx
        self.vocab = HFTokenizer(self.folder)
        self._logits: ChildWorker | None = None

    @property
    def logits(self) -> ChildWorker:
        if self._logits is None:
            self._logits = hf_logits_worker(self.folder, self.n_ctx)
        return self._logits

    def encode(self, text: str) -> list[int]:
        return self.vocab.encode(text)

    def decode(self, tokens: list[int]) -> str:
        return self.vocab.decode(tokens)

    def token_bos(self) -> int:
        return self.vocab.bos_id

    def token_eos(self) -> int:
        return self.vocab.eos_id

    def logprob(self, context: list[int], continuation: list[int]) -> tuple[float, bool]:
        return self.logits.call("logprob", context, continuation)

    def close(self) -> None:
        if self._logits is not None:
            self._logits.close()
            self._logits = None
