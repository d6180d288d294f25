"""llama.cpp's own server (`llama-server`): continuous batching over `--parallel` slots, its /metrics and /slots.

llama-cpp-python's server runs one request at a time: on it, concurrency 2 measures a queue (the demo's c2
throughput was 0.98-1.18x its c1). llama-server decodes every busy slot in one batch per step, so concurrency above
1 is batching: throughput rises with it and each request's TPOT with it, the trade-off quantization moves.

The binary is built by `make setup` from llama-cpp-python's own llama.cpp sources and compiled libraries, portable
like them (tasks/tools/llama_build.py), and lives in the venv with the shared libraries it loads
(`<venv>/llama-server/`); `TRADEOFF_LLAMA_SERVER` names another one. Builds are the llama.cpp engine's (the same
GGUF requantization, so both engines serve the same file), and so are in-process logits (fidelity, loglik_check go
through llama-cpp-python on the artifact). Speculative decoding is not offered here (the llama.cpp engine's
prompt-lookup variant stays there).

Options (`engine_args`, checked before any work by `LlamaServerArgs`): `parallel` slots (default 4), each with the
model's `max_context` tokens of KV cache (the server divides `--ctx-size` among its slots, so it gets their sum),
`n_threads` / `n_threads_batch` (decode / prompt threads; default: all cores but one / all cores, as the llama.cpp
engine), `type_k` / `type_v` (KV-cache element types), `n_batch` / `n_ubatch`, `flash_attn`, `cont_batching`,
`seed`, `n_gpu_layers`. Flash attention is off unless asked (`flash_attn: on`), as llama-cpp-python's
default, so both engines compute the same greedy answers.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field

from tasks.core.config import ModelSpec, Variant
from tasks.engines.base import Artifact, check_args
from tasks.engines.llama_cpp import KV_TYPES, LlamaCpp, decode_threads, host_cores
from tasks.engines.prometheus import by_names, sum_series
from tasks.tools.llama_build import installed_server

BINARY_ENV = "TRADEOFF_LLAMA_SERVER"
KvType = Literal["f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1"]
assert set(KvType.__args__) == set(KV_TYPES)  # one list of the KV types llama.cpp takes


class LlamaServerArgs(BaseModel):
    """`engine_args` of a llama-server variant (each maps to the llama-server option of the same meaning)."""

    model_config = ConfigDict(extra="forbid")

    parallel: int = Field(default=4, ge=1, le=256, description="slots: requests decoded together (--parallel)")
    n_threads: int | None = Field(default=None, ge=1, le=1024, description="decode threads (default: cores - 1)")
    n_threads_batch: int | None = Field(default=None, ge=1, le=1024, description="prompt threads (default: cores)")
    type_k: KvType | None = None
    type_v: KvType | None = None
    n_batch: int | None = Field(default=None, ge=1, le=1_048_576)
    n_ubatch: int | None = Field(default=None, ge=1, le=1_048_576)
    # off, as llama-cpp-python's default: the same arithmetic, so both engines' greedy answers are the same (the
    # server's own default, auto, turns it on on CPU, and one token of the test's 128 then differed)
    flash_attn: Literal["on", "off", "auto"] = "off"
    cont_batching: bool = True
    seed: int | None = None
    n_gpu_layers: int | None = Field(default=None, ge=-1)


def server_binary() -> Path | None:
    """The llama-server to run: $TRADEOFF_LLAMA_SERVER, else the one `make setup` built into this venv, else PATH's."""
    given = os.environ.get(BINARY_ENV)
    if given:
        return Path(given)
    built = installed_server()
    if built.exists():
        return built
    found = shutil.which("llama-server")
    return Path(found) if found else None


class LlamaServer(LlamaCpp):
    name: ClassVar[str] = "llama-server"
    speculative_methods: ClassVar[frozenset[str]] = frozenset()
    forces_output_len: ClassVar[str | None] = "ignore_eos"  # the server's own sampling option, as vLLM's
    requires: ClassVar[dict[str, str]] = {"llama_cpp": "llama-cpp-python"}  # builds (requantization), logits
    health_path: ClassVar[str] = "/health"  # 503 while the model loads, 200 once slots are ready
    metrics_path: ClassVar[str | None] = "/metrics"

    @staticmethod
    def args(variant: "Variant") -> LlamaServerArgs:
        return LlamaServerArgs(**variant.engine_args)

    def missing_dependency(self) -> str | None:
        problem = super().missing_dependency()
        if problem:
            return problem
        binary = server_binary()
        if binary is None or not os.access(binary, os.X_OK):
            where = f"{BINARY_ENV}={binary}" if os.environ.get(BINARY_ENV) else "this venv"
            return f"engine llama-server: no llama-server binary in {where}; run `make setup` (it builds one)"
        return None

    def check_variant(self, variant: "Variant", model: "ModelSpec") -> str | None:
        problem = check_args(variant.engine_args, LlamaServerArgs, self.name)
        if problem:
            return problem
        return super(LlamaCpp, self).check_variant(variant, model) or (
            "model: llama-server needs a local GGUF (path or package_file), not a hub name"
            if model.hub is not None
            else None
        )

    def cpu_threads(self, variant: "Variant", model: "ModelSpec") -> dict[str, int] | None:
        a = self.args(variant)
        return {
            "decode": a.n_threads or decode_threads(),
            "prompt": a.n_threads_batch or host_cores(),
            "host_cores": host_cores(),
        }

    def gpu_count(self, variant: "Variant", artifact: Artifact) -> int | None:
        return 1 if (self.args(variant).n_gpu_layers or 0) != 0 else 0

    def server_env(self) -> dict[str, str]:
        """The shared libraries the binary was built with sit beside it (tasks/tools/llama_build.py)."""
        binary = server_binary()
        if binary is None:
            return {}
        libs = str(binary.resolve().parent)
        return {"LD_LIBRARY_PATH": os.pathsep.join(p for p in (libs, os.environ.get("LD_LIBRARY_PATH")) if p)}

    def server_command(
        self, artifact: Artifact, variant: "Variant", model: "ModelSpec", host: str, port: int
    ) -> list[str]:
        a = self.args(variant)
        binary = server_binary()
        assert binary is not None, "checked by missing_dependency before any work"
        cmd = [
            str(binary),
            "--model",
            str(artifact.path),
            "--alias",
            self.served_model_name(variant),
            "--host",
            host,
            "--port",
            str(port),
            "--parallel",
            str(a.parallel),
            # --ctx-size is shared by the slots (each gets ctx / parallel): every slot gets the model's context
            "--ctx-size",
            str(model.max_context * a.parallel),
            "--threads",
            str(a.n_threads or decode_threads()),
            "--threads-batch",
            str(a.n_threads_batch or host_cores()),
            "--flash-attn",
            a.flash_attn,
            "--cont-batching" if a.cont_batching else "--no-cont-batching",
            "--metrics",
            "--slots",
            "--no-webui",
        ]
        for flag, value in (
            ("--cache-type-k", a.type_k),
            ("--cache-type-v", a.type_v),
            ("--batch-size", a.n_batch),
            ("--ubatch-size", a.n_ubatch),
            ("--seed", a.seed),
            ("--n-gpu-layers", a.n_gpu_layers),
        ):
            if value is not None:
                cmd += [flag, str(value)]
        return cmd

    def normalize_metrics(self, samples: list[tuple[str, dict[str, str], float]]) -> dict[str, float]:
        """llama-server's /metrics (`llamacpp:` names) by tradeoff's; it has no KV-cache usage gauge."""
        names = {
            "requests_running": "llamacpp:requests_processing",
            "requests_waiting": "llamacpp:requests_deferred",
            "generation_tokens": "llamacpp:tokens_predicted_total",
            "prefix_cache_hits": "llamacpp:prompt_tokens_cached_total",
            "spec_drafts": "llamacpp:spec_decode_num_drafts_total",
            "spec_draft_tokens": "llamacpp:spec_decode_num_draft_tokens_total",
            "spec_accepted_tokens": "llamacpp:spec_decode_num_accepted_tokens_total",
        }
        out = by_names(samples, names)
        # its prompt_tokens_total leaves out tokens reused from the cache; tradeoff's (vLLM's) counts every one
        computed = sum_series(samples, "llamacpp:prompt_tokens_total")
        if computed is not None:
            out["prompt_tokens"] = computed + out.get("prefix_cache_hits", 0.0)
            out["prefix_cache_queries"] = out["prompt_tokens"]
        return out
