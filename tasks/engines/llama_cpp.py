"""llama.cpp through llama-cpp-python: GGUF requantization builds and its OpenAI-compatible server."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import ClassVar

from tasks.core.config import ModelSpec, Variant
from tasks.core.process import run_in_child
from tasks.engines.base import Artifact, Engine, build_key, sha256_file

# llama.cpp's llama_ftype values (include/llama.h), by the names users write.
FTYPES: dict[str, int] = {
    "f32": 0,
    "f16": 1,
    "q4_0": 2,
    "q4_1": 3,
    "q8_0": 7,
    "q5_0": 8,
    "q5_1": 9,
    "q2_k": 10,
    "q3_k_s": 11,
    "q3_k_m": 12,
    "q3_k_l": 13,
    "q4_k_s": 14,
    "q4_k_m": 15,
    "q5_k_s": 16,
    "q5_k_m": 17,
    "q6_k": 18,
    "iq4_nl": 25,
    "iq4_xs": 30,
    "bf16": 32,
}
# KV-cache element types (ggml_type) accepted by the server's --type_k/--type_v.
KV_TYPES: dict[str, int] = {"f32": 0, "f16": 1, "q4_0": 2, "q4_1": 3, "q5_0": 6, "q5_1": 7, "q8_0": 8, "bf16": 30}

SERVER_OPTIONS = frozenset(
    {
        "n_threads",
        "n_threads_batch",
        "n_batch",
        "n_ubatch",
        "n_ctx",
        "flash_attn",
        "type_k",
        "type_v",
        "logits_all",
        "use_mmap",
        "seed",
        "n_gpu_layers",
        "verbose",
    }
)


def gguf_file_type(path: Path) -> int | None:
    """The `general.file_type` of a GGUF file, read through llama.cpp's own loader (vocab only)."""
    from llama_cpp import Llama

    llm = Llama(model_path=str(path), vocab_only=True, verbose=False)
    try:
        value = llm.metadata.get("general.file_type")
        return int(value) if value is not None else None
    finally:
        llm.close()


def quantize_gguf(src: Path, dst: Path, ftype: int, nthread: int = 0) -> None:
    """Requantize a GGUF with llama_model_quantize (allow_requantize: the source may be quantized)."""
    import ctypes

    import llama_cpp

    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = ftype
    params.allow_requantize = True
    params.nthread = nthread
    tmp = dst.with_suffix(".partial")
    rc = llama_cpp.llama_model_quantize(str(src).encode(), str(tmp).encode(), ctypes.byref(params))
    if rc != 0 or not tmp.exists():
        raise RuntimeError(f"llama_model_quantize failed with code {rc} for {src} -> {dst}")
    tmp.replace(dst)


SERVER_MODULE = "tasks.engines.llama_cpp_server"


def host_cores() -> int:
    """Cores this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def decode_threads() -> int:
    """Cores this process may run on, less one for the load generator and the HTTP server (at least 1)."""
    return max(1, host_cores() - 1)


class LlamaCpp(Engine):
    name: ClassVar[str] = "llama.cpp"
    quantizations: ClassVar[frozenset[str]] = frozenset(FTYPES)
    speculative_methods: ClassVar[frozenset[str]] = frozenset({"prompt-lookup"})
    forces_output_len: ClassVar[str | None] = "min_tokens"  # the server ignores ignore_eos
    has_in_process_logits: ClassVar[bool] = True
    requires: ClassVar[dict[str, str]] = {
        "llama_cpp": "llama-cpp-python",
        "uvicorn": "llama-cpp-python[server]",
        "sse_starlette": "llama-cpp-python[server]",
    }

    def check_variant(self, variant: "Variant", model: "ModelSpec") -> str | None:
        problem = super().check_variant(variant, model)
        if problem:
            return problem
        unknown = sorted(set(variant.engine_args) - SERVER_OPTIONS)
        if unknown:
            return (
                f"engine_args.{unknown[0]}: not a llama.cpp option tradeoff passes on; use one of "
                f"{', '.join(sorted(SERVER_OPTIONS))}"
            )
        for k in ("type_k", "type_v"):
            if k in variant.engine_args and str(variant.engine_args[k]).lower() not in KV_TYPES:
                return (
                    f"engine_args.{k}: unknown KV-cache type '{variant.engine_args[k]}'; use one of "
                    f"{', '.join(KV_TYPES)}"
                )
        if model.hub is not None:
            return "model: llama.cpp needs a local GGUF (path or package_file), not a hub name"
        return None

    def build(self, variant: "Variant", model: "ModelSpec", cache_dir: Path) -> Artifact:
        src = model.local_path()
        assert src is not None
        t0 = time.perf_counter()
        src_sha = sha256_file(src)
        target = FTYPES[variant.quantization]
        meta = {"source": str(src), "source_sha256": src_sha, "ftype": target}
        if gguf_file_type(src) == target:
            # As shipped: the source already has the requested format.
            return Artifact(
                variant.name, src, src_sha, src.stat().st_size, True, time.perf_counter() - t0, {**meta, "built": False}
            )
        key = build_key(src_sha, {"engine": self.name, "ftype": target, "allow_requantize": True})
        out_dir = cache_dir / key
        dst = out_dir / f"{src.stem}.{variant.quantization}.gguf"
        cached = dst.exists()
        if not cached:
            out_dir.mkdir(parents=True, exist_ok=True)
            # In a child: a native crash (a library built for another CPU) fails this variant, not the run.
            run_in_child(quantize_gguf, src, dst, target, what="llama.cpp requantization")
        return Artifact(
            variant.name,
            dst,
            sha256_file(dst),
            dst.stat().st_size,
            cached,
            time.perf_counter() - t0,
            {**meta, "built": True, "build_key": key},
        )

    def cpu_threads(self, variant: "Variant", model: "ModelSpec") -> dict[str, int] | None:
        """Decode threads (n_threads: all cores but one unless engine_args say otherwise), prompt threads
        (n_threads_batch: llama-cpp-python's default is every core the OS reports) and this host's cores; None
        when engine_args give a value that is not a whole number (the server refuses it at start-up)."""
        every = os.cpu_count() or 1  # llama-cpp-python's -1 and default: multiprocessing.cpu_count()
        try:
            given = {
                k: int(variant.engine_args[k]) for k in ("n_threads", "n_threads_batch") if k in variant.engine_args
            }
        except (TypeError, ValueError):
            return None
        given = {k: every if n == -1 else n for k, n in given.items()}
        return {
            "decode": given.get("n_threads") or decode_threads(),
            "prompt": given.get("n_threads_batch") or every,
            "host_cores": host_cores(),
        }

    def gpu_count(self, variant: "Variant", artifact: Artifact) -> int | None:
        """One GPU when layers are offloaded (n_gpu_layers), else the CPU only."""
        return 1 if int(variant.engine_args.get("n_gpu_layers") or 0) != 0 else 0

    def server_command(
        self, artifact: Artifact, variant: "Variant", model: "ModelSpec", host: str, port: int
    ) -> list[str]:
        # logits_all off: the server would otherwise copy every prompt position's logits. On with a
        # draft model: llama-cpp-python then keeps every position's logits but sizes that buffer by
        # logits_all at load (n_batch rows when off), so any prompt longer than n_batch (512) failed
        # with HTTP 500 "could not broadcast input array" (seen in the demo's long-context suite).
        # Decode threads: all cores but one, for the load generator and the server's own HTTP thread. (The
        # bimodal decode once seen with every core decoding, 8.2 or ~13 ms per token "depending on how the
        # client's wake-ups fell", was the stock server's second OpenMP team: tasks/engines/llama_cpp_server.py.
        # Served through that module, 2 threads on 2 cores decoded at 14.0 ms per token under every client
        # and 1 thread at 19.1 ms: docs/timing.md.) Prompts are still evaluated on every core
        # (n_threads_batch, llama-cpp-python's default). engine_args.n_threads overrides.
        args = {
            "n_ctx": model.max_context,
            "n_threads": decode_threads(),
            "logits_all": variant.speculative is not None,
            "verbose": False,
            **variant.engine_args,
        }
        for k in ("type_k", "type_v"):
            if k in args:
                args[k] = KV_TYPES[str(args[k]).lower()]
        # llama-cpp-python's server with every llama.cpp call on one thread (tasks/engines/llama_cpp_server.py:
        # the stock one's decode speed depends on the clients' timing once n_threads > 1).
        cmd = [
            sys.executable,
            "-m",
            SERVER_MODULE,
            "--model",
            str(artifact.path),
            "--model_alias",
            self.served_model_name(variant),
            "--host",
            host,
            "--port",
            str(port),
            # One request at a time; without this a new request cuts the running one short.
            "--interrupt_requests",
            "false",
        ]
        if variant.speculative:
            cmd += [
                "--draft_model",
                "prompt-lookup-decoding",
                "--draft_model_num_pred_tokens",
                str(variant.speculative.num_speculative_tokens),
            ]
        for k, v in sorted(args.items()):
            cmd += [f"--{k}", str(v).lower() if isinstance(v, bool) else str(v)]
        return cmd
