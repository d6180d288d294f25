"""TensorRT-LLM: engines built with its quantization and speculative decoding, served by `trtllm-serve`.

Two backends, as trtllm-serve has them:
- `tensorrt` (default): a TensorRT engine per variant. The checkpoint comes from TensorRT-LLM's
  example scripts (`quantization/quantize.py` for fp8, int4_awq, w4a8_awq, int8_sq and for
  Medusa heads; `models/core/llama/convert_checkpoint.py` for fp16/bf16; `eagle/convert_checkpoint.py`
  for EAGLE), then `trtllm-build` with the speculative decoding mode (medusa, eagle,
  lookahead_decoding) compiled in; `trtllm-serve ENGINE --backend tensorrt` serves it with the
  runtime settings in an `--extra_llm_api_options` YAML.
- `pytorch`: no engine; `trtllm-serve HF_MODEL --backend pytorch` with the speculative config
  (draft model, n-gram, EAGLE-3) in the YAML; quantized only from a pre-quantized (ModelOpt)
  checkpoint in `engine_args.checkpoint`.
`build_plan` and `server_command` are pure and unit-tested; `build` runs the plan only where
tensorrt_llm imports and an NVIDIA GPU is visible, otherwise the variant is skipped with the
reason. Pinned: TensorRT-LLM `TRTLLM_VERSION` (scripts/requirements-gpu-trtllm.txt, scripts/gpu_engines.sh);
the `--extra_llm_api_options` YAML is generated for the installed version's keys (`yaml_keys`: the
1.2 set, or the 1.4 set with `Eagle3` / `speculative_model`). Weights come from the hub without the
`original/` folder (tools/hub_download.py); quantize.py calibrates on `engine_args.calib_dataset`: a
local file or folder (GSM8K/BBH files, any text; tools/calibration_text.py) or a hub dataset name.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field

from tasks import client
from tasks.core.config import ModelSpec, Variant
from tasks.core.lifecycle import run_tied
from tasks.engines.base import Artifact, Endpoint, Engine, EngineUnavailable, build_key, check_args, gpu_visible
from tasks.engines.hub import calibration_command, download_command, is_local_data
from tasks.engines.vllm import dir_digest, run_step

TRTLLM_VERSION = "1.2.1"  # the pinned version (scripts/requirements-gpu-trtllm.txt)
QFORMATS = {"fp8": "fp8", "int4_awq": "int4_awq", "w4a8_awq": "w4a8_awq", "int8_sq": "int8_sq"}
DTYPES = {"fp16": "float16", "bf16": "bfloat16"}
QUANTIZATIONS = frozenset(QFORMATS) | frozenset(DTYPES)
# method -> backend it runs on
SPECULATIVE = {
    "medusa": "tensorrt",
    "eagle": "tensorrt",
    "lookahead": "tensorrt",
    "draft_model": "pytorch",
    "ngram": "pytorch",
    "eagle3": "pytorch",
}
BUILD_MODES = {"medusa": "medusa", "eagle": "eagle", "lookahead": "lookahead_decoding"}
# A Medusa / EAGLE tree with 63 draft tokens (TensorRT-LLM's examples use this default width).
DEFAULT_TREE_DRAFT_LEN = 63


class TrtArgs(BaseModel):
    """`engine_args` of a tensorrt-llm variant."""

    model_config = ConfigDict(extra="forbid")

    backend: Literal["tensorrt", "pytorch"] | None = Field(
        default=None, description="default: tensorrt, or pytorch for draft_model / ngram / eagle3"
    )
    tp_size: int = Field(default=1, ge=1, le=64, description="tensor parallel GPUs")
    max_batch_size: int = Field(default=64, ge=1, le=65_536)
    max_num_tokens: int = Field(default=8192, ge=1, le=1_048_576, description="batched tokens per step")
    max_input_len: int | None = Field(default=None, ge=1, le=1_048_576, description="default: the model's max_context")
    max_seq_len: int | None = Field(
        default=None, ge=2, le=1_048_576, description="prompt + output; default: max_context"
    )
    kv_cache_dtype: Literal["fp8", "int8"] | None = None
    free_gpu_memory_fraction: float = Field(default=0.9, gt=0, le=1, description="GPU memory for the KV cache")
    enable_block_reuse: bool | None = Field(default=None, description="KV-cache block reuse (prefix caching)")
    calib_size: int = Field(default=512, ge=1, le=100_000, description="calibration samples (quantize.py)")
    calib_dataset: str | None = Field(
        default=None,
        max_length=4096,
        description="calibration data: a local file or "
        "folder (GSM8K/BBH files, any text) or a hub dataset name; default: "
        "quantize.py's cnn_dailymail from the hub",
    )
    awq_block_size: int = Field(default=128, ge=1, le=4096)
    checkpoint: str | None = Field(default=None, description="pytorch backend: a pre-quantized checkpoint to serve")
    examples_dir: str | None = Field(default=None, description="TensorRT-LLM examples/ (default $TRTLLM_EXAMPLES_DIR)")
    model_family: str = Field(
        default="llama",
        pattern=r"^[a-z0-9_]+$",
        description="examples/models/core/<family>/convert_checkpoint.py converts fp16/bf16",
    )
    llm_api_options: dict[str, Any] = Field(
        default_factory=dict, description="merged last into the --extra_llm_api_options YAML"
    )
    num_medusa_heads: int = Field(default=4, ge=1, le=64)
    medusa_choices: list[list[int]] | None = Field(default=None, max_length=1024)
    num_eagle_layers: int = Field(default=4, ge=1, le=64)
    max_non_leaves_per_layer: int = Field(default=10, ge=1, le=1024)
    eagle_choices: list[list[int]] | None = Field(default=None, max_length=1024)
    lookahead_window_size: int = Field(default=4, ge=1, le=64, description="W")
    lookahead_ngram_size: int = Field(default=4, ge=1, le=64, description="N")
    lookahead_verification_set_size: int = Field(default=4, ge=1, le=64, description="G")
    max_matching_ngram_size: int = Field(default=4, ge=1, le=64, description="ngram: longest n-gram matched")


def lookahead_draft_len(window: int, ngram: int, verification: int) -> int:
    """Draft tokens a lookahead engine must hold for (W, N, G), as TensorRT-LLM computes it."""
    return (0 if ngram == 1 else ngram - 2) + (window - 1 + verification) * (ngram - 1)


def yaml_keys(version: str) -> str:
    """Which key set of the runtime YAML a TensorRT-LLM version reads: '1.2' (EagleDecodingConfig, decoding_type
    Eagle, speculative_model_dir) or '1.4' (Eagle3DecodingConfig, decoding_type Eagle3, speculative_model)."""
    try:
        major, minor = (int(x) for x in version.split(".")[:2])
    except ValueError:
        raise EngineUnavailable(f"TensorRT-LLM version '{version}' is not a version number") from None
    if (major, minor) == (1, 2):
        return "1.2"
    if (major, minor) in ((1, 3), (1, 4)):
        return "1.4"
    raise EngineUnavailable(
        f"TensorRT-LLM {version} is untested: tradeoff writes the runtime YAML for 1.2 and 1.4 "
        f"(pinned {TRTLLM_VERSION}); install tensorrt-llm=={TRTLLM_VERSION}"
    )


def trtllm_python() -> str:
    return os.environ.get("TRADEOFF_TRTLLM_PYTHON") or sys.executable


def deep_merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    """`base` with `extra` merged in, nested mappings merged key by key (extra wins)."""
    out = dict(base)
    for k, v in extra.items():
        out[k] = deep_merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def trtllm_version(python: str) -> str | None:
    """tensorrt_llm's version in that environment (read from package metadata), None when absent."""
    try:
        out = run_tied(
            [python, "-c", "import importlib.metadata as m; print(m.version('tensorrt_llm'))"],
            capture_output=True,
            text=True,
            timeout_s=120,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


def tool(python: str, name: str) -> str:
    """A console script of the TensorRT-LLM environment (trtllm-build, trtllm-serve)."""
    return str(Path(python).parent / name)


@dataclass
class Step:
    name: str
    argv: list[str]


@dataclass
class Plan:
    """How a variant is built and served: commands in order, the folder to serve, the runtime YAML."""

    backend: str
    model_dir: str  # what trtllm-serve loads: an engine folder or an HF folder / hub name
    tokenizer: str | None
    steps: list[Step] = field(default_factory=list)
    extra_options: dict[str, Any] = field(default_factory=dict)
    key: str = ""


class TensorRTLLM(Engine):
    name: ClassVar[str] = "tensorrt-llm"
    quantizations: ClassVar[frozenset[str]] = QUANTIZATIONS
    speculative_methods: ClassVar[frozenset[str]] = frozenset(SPECULATIVE)
    forces_output_len: ClassVar[str | None] = "ignore_eos"
    metrics_path: ClassVar[str | None] = "/metrics"  # JSON iteration stats, drained by each read
    prompt_logprobs: ClassVar[bool] = True  # asked for; a server that returns none gets NULL fidelity with the reason
    health_path: ClassVar[str] = "/health"
    stop_grace_s: ClassVar[float] = 30.0

    def __init__(self) -> None:
        self._totals: dict[str, float] = {}

    @staticmethod
    def args(variant: "Variant") -> TrtArgs:
        return TrtArgs.model_validate(variant.engine_args)

    def gpu_count(self, variant: "Variant", artifact: Artifact) -> int | None:
        return self.args(variant).tp_size

    def missing_dependency(self) -> str | None:
        """The variant is skipped with this reason where TensorRT-LLM cannot run (no GPU, not installed)."""
        if not gpu_visible():
            return "engine tensorrt-llm needs an NVIDIA GPU (none is visible here); skipped"
        if trtllm_version(trtllm_python()) is None:
            return (
                f"engine tensorrt-llm needs tensorrt_llm for {trtllm_python()} (see scripts/gpu_engines.sh, "
                f"or set TRADEOFF_TRTLLM_PYTHON); skipped"
            )
        return None

    @staticmethod
    def backend(variant: "Variant", a: TrtArgs) -> str:
        if a.backend:
            return a.backend
        return SPECULATIVE[variant.speculative.method] if variant.speculative else "tensorrt"

    def check_variant(self, variant: "Variant", model: "ModelSpec") -> str | None:
        problem = check_args(variant.engine_args, TrtArgs, self.name) or super().check_variant(variant, model)
        if problem:
            return problem
        a = self.args(variant)
        backend = self.backend(variant, a)
        q = variant.quantization
        spec = variant.speculative
        local = model.local_path() if model.hub is None else None
        if local is not None and local.suffix == ".gguf":
            return "model: tensorrt-llm needs a Hugging Face checkpoint (hub name or folder), not a GGUF"
        if spec:
            if SPECULATIVE[spec.method] != backend:
                return (
                    f"speculative.method: {spec.method} runs on the {SPECULATIVE[spec.method]} backend of "
                    f"trtllm-serve; set engine_args.backend: {SPECULATIVE[spec.method]} or remove it"
                )
            needs_model = spec.method in ("medusa", "eagle", "draft_model", "eagle3")
            if needs_model and not spec.draft_model:
                return (
                    f"speculative.draft_model: method {spec.method} needs its heads or draft model (hub name or folder)"
                )
            if not needs_model and spec.draft_model:
                return f"speculative.draft_model: method {spec.method} drafts without a model; remove draft_model"
            if spec.method == "eagle" and q not in DTYPES:
                return (
                    f"quantization: TensorRT-LLM's EAGLE converter builds fp16/bf16 only, not {q}; "
                    f"use eagle3 on the pytorch backend with a quantized checkpoint, or medusa/lookahead"
                )
        if backend == "pytorch" and q not in DTYPES and not a.checkpoint:
            return (
                f"engine_args.checkpoint: the pytorch backend serves {q} only from a pre-quantized checkpoint; "
                f"name one (e.g. a ModelOpt export) or use backend tensorrt"
            )
        if backend == "tensorrt" and a.checkpoint:
            return "engine_args.checkpoint: the tensorrt backend quantizes and builds itself; remove checkpoint"
        if (
            a.calib_dataset
            and is_local_data(a.calib_dataset)
            and not Path(os.path.expanduser(a.calib_dataset)).exists()
        ):
            return (
                f"engine_args.calib_dataset: {a.calib_dataset} does not exist; give a local file/folder or a hub name"
            )
        return None

    # ------------------------------------------------------------------ build

    def build_plan(
        self,
        variant: "Variant",
        model: "ModelSpec",
        cache_dir: Path,
        python: str,
        hf_dir: str,
        version: str = TRTLLM_VERSION,
    ) -> Plan:
        """Commands that turn the HF model in `hf_dir` into what trtllm-serve loads (pure: runs nothing)."""
        a = self.args(variant)
        backend = self.backend(variant, a)
        q = variant.quantization
        spec = variant.speculative
        max_seq = a.max_seq_len or model.max_context
        max_in = a.max_input_len or min(model.max_context, max_seq - 1)
        # Runtime-only settings (the YAML read at serve time) do not change the engine.
        runtime = {
            "examples_dir",
            "llm_api_options",
            "free_gpu_memory_fraction",
            "enable_block_reuse",
            "medusa_choices",
            "eagle_choices",
        }
        params = {
            "backend": backend,
            "q": q,
            "spec": spec.model_dump() if spec else None,
            "args": a.model_dump(exclude=runtime),
            "max_seq": max_seq,
            "max_in": max_in,
        }
        key = build_key(f"hf:{model.hub or hf_dir}", {"engine": self.name, **params})
        root = cache_dir / key
        if backend == "pytorch":
            return Plan(
                "pytorch", a.checkpoint or hf_dir, None, [], self.extra_options(variant, a, backend, version), key
            )
        examples = Path(a.examples_dir or os.environ.get("TRTLLM_EXAMPLES_DIR", "/app/tensorrt_llm/examples"))
        ckpt, engine = root / "checkpoint", root / "engine"
        steps, conv = _checkpoint_steps(python, examples, hf_dir, ckpt, root, variant, a)
        build = _build_command(python, ckpt, engine, variant, a, max_in, max_seq)
        return Plan(
            "tensorrt",
            str(engine),
            hf_dir,
            [*steps, Step("checkpoint", conv), Step("trtllm-build", build)],
            self.extra_options(variant, a, backend, version),
            key,
        )

    def extra_options(
        self, variant: "Variant", a: TrtArgs, backend: str, version: str = TRTLLM_VERSION
    ) -> dict[str, Any]:
        """The `--extra_llm_api_options` YAML: KV cache, speculative runtime settings, iteration stats."""
        kv: dict[str, Any] = {"free_gpu_memory_fraction": a.free_gpu_memory_fraction}
        if a.enable_block_reuse is not None:
            kv["enable_block_reuse"] = a.enable_block_reuse
        if backend == "pytorch" and a.kv_cache_dtype:
            kv["dtype"] = a.kv_cache_dtype
        out: dict[str, Any] = {"kv_cache_config": kv, "enable_iter_perf_stats": True}
        spec = variant.speculative
        if spec:
            out["speculative_config"] = self.speculative_options(variant, a, version)
            if spec.method in ("draft_model", "ngram"):
                out["disable_overlap_scheduler"] = True  # the two-model path needs it
        return deep_merge(out, a.llm_api_options)

    def speculative_options(self, variant: "Variant", a: TrtArgs, version: str = TRTLLM_VERSION) -> dict[str, Any]:
        """speculative_config of the runtime YAML, in the keys of TensorRT-LLM `version` (yaml_keys)."""
        spec = variant.speculative
        assert spec is not None
        n = spec.num_speculative_tokens
        keys = yaml_keys(version)
        model_key = "speculative_model_dir" if keys == "1.2" else "speculative_model"
        if spec.method == "medusa":
            sc: dict[str, Any] = {
                "decoding_type": "Medusa",
                "max_draft_len": DEFAULT_TREE_DRAFT_LEN,
                "num_medusa_heads": a.num_medusa_heads,
            }
            if a.medusa_choices:
                sc["medusa_choices"] = a.medusa_choices
        elif spec.method == "eagle":
            sc = {
                "decoding_type": "Eagle",
                "max_draft_len": DEFAULT_TREE_DRAFT_LEN,
                "num_eagle_layers": a.num_eagle_layers,
                "max_non_leaves_per_layer": a.max_non_leaves_per_layer,
            }
            if a.eagle_choices:
                sc["eagle_choices"] = a.eagle_choices
        elif spec.method == "lookahead":
            sc = {
                "decoding_type": "Lookahead",
                "max_window_size": a.lookahead_window_size,
                "max_ngram_size": a.lookahead_ngram_size,
                "max_verification_set_size": a.lookahead_verification_set_size,
            }
        elif spec.method == "eagle3" and keys == "1.2":  # EagleDecodingConfig, EAGLE-3 in one model
            sc = {"decoding_type": "Eagle", "max_draft_len": n, model_key: spec.draft_model, "eagle3_one_model": True}
        elif spec.method == "eagle3":  # Eagle3DecodingConfig (one model is its only mode)
            sc = {"decoding_type": "Eagle3", "max_draft_len": n, model_key: spec.draft_model}
        elif spec.method == "draft_model":
            sc = {"decoding_type": "DraftTarget", "max_draft_len": n, model_key: spec.draft_model}
        else:  # ngram
            sc = {
                "decoding_type": "NGram",
                "max_draft_len": n,
                "max_matching_ngram_size": a.max_matching_ngram_size,
                "is_keep_all": True,
                "is_use_oldest": True,
                "is_public_pool": True,
            }
        return sc

    def build(self, variant: "Variant", model: "ModelSpec", cache_dir: Path) -> Artifact:
        t0 = time.perf_counter()
        if not gpu_visible():
            raise EngineUnavailable("skipped: TensorRT-LLM needs an NVIDIA GPU; none is visible here")
        python = trtllm_python()
        version = trtllm_version(python)
        if not version:
            raise EngineUnavailable(
                f"skipped: tensorrt_llm is not installed for {python}; see scripts/gpu_engines.sh "
                f"or set TRADEOFF_TRTLLM_PYTHON"
            )
        hf_dir = model.hub or str(model.local_path())
        if model.hub:
            hf_dir = self._download(model.hub, cache_dir, python)
        plan = self.build_plan(variant, model, cache_dir, python, hf_dir, version)
        if plan.backend == "pytorch" and not Path(plan.model_dir).exists():  # a hub checkpoint: fetch it to hash it
            plan.model_dir = self._download(plan.model_dir, cache_dir, python)
        root = cache_dir / plan.key
        root.mkdir(parents=True, exist_ok=True)
        done = root / "built.json"
        cached = done.exists()
        if not cached:
            for step in plan.steps:
                run_step(step.argv, root / "build.log", 4 * 3600, f"TensorRT-LLM {step.name}")
            done.write_text(json.dumps([s.argv for s in plan.steps]))
        extra = root / "extra_llm_api_options.yaml"
        extra.write_text(yaml.safe_dump(plan.extra_options, sort_keys=True))
        served = Path(plan.model_dir)
        sha, size = dir_digest(served) if served.is_dir() else (plan.key, 0)
        meta = {
            "engine_version": f"tensorrt-llm {version}",
            "python": python,
            "backend": plan.backend,
            "yaml_keys": yaml_keys(version),
            "tokenizer": plan.tokenizer,
            "extra_options": str(extra),
            "build_key": plan.key,
            "source": hf_dir,
        }
        return Artifact(variant.name, served, sha, size, cached, time.perf_counter() - t0, meta)

    def _download(self, repo: str, cache_dir: Path, python: str) -> str:
        out = cache_dir / f"download-{build_key(repo, {})}.txt"
        run_step(
            download_command(python, repo, out), cache_dir / "downloads.log", 3600, f"downloading {repo} from the hub"
        )
        return out.read_text().strip()

    # ------------------------------------------------------------------ serve

    def server_command(
        self, artifact: Artifact, variant: "Variant", model: "ModelSpec", host: str, port: int
    ) -> list[str]:
        a = self.args(variant)
        python = artifact.meta.get("python") or trtllm_python()
        backend = artifact.meta.get("backend") or self.backend(variant, a)
        max_seq = a.max_seq_len or model.max_context
        cmd = [
            tool(python, "trtllm-serve"),
            str(artifact.path),
            "--backend",
            backend,
            "--host",
            host,
            "--port",
            str(port),
            "--max_batch_size",
            str(a.max_batch_size),
            "--max_num_tokens",
            str(a.max_num_tokens),
            "--max_seq_len",
            str(max_seq),
            "--tp_size",
            str(a.tp_size),
        ]
        if artifact.meta.get("tokenizer"):
            cmd += ["--tokenizer", str(artifact.meta["tokenizer"])]
        if artifact.meta.get("extra_options"):
            cmd += ["--extra_llm_api_options", str(artifact.meta["extra_options"])]
        return cmd

    def scrape(self, endpoint: Endpoint, timeout_s: float = 5.0) -> dict[str, float]:
        r = client.get(endpoint.base_url, "/metrics", timeout_s)
        r.raise_for_status()
        return self.read_iteration_stats(r.json())

    def read_iteration_stats(self, stats: list[dict[str, Any]]) -> dict[str, float]:
        """trtllm-serve's /metrics (iteration stats since the last read) -> gauges of the latest iteration and
        running totals of the speculative counters."""
        out: dict[str, float] = {}
        for it in stats or []:
            spec = it.get("specDecodingStats") or {}
            for name, key in (
                ("spec_draft_tokens", "numDraftTokens"),
                ("spec_accepted_tokens", "numAcceptedTokens"),
                ("spec_drafts", "numRequestsWithDraftTokens"),
            ):
                if key in spec:
                    self._totals[name] = self._totals.get(name, 0.0) + float(spec[key])
        out.update(self._totals)
        if stats:
            last = stats[-1]
            kv = last.get("kvCacheStats") or {}
            if kv.get("maxNumBlocks"):
                out["kv_cache_usage_pct"] = 100.0 * float(kv.get("usedNumBlocks", 0)) / float(kv["maxNumBlocks"])
            if "numActiveRequests" in last:
                out["requests_running"] = float(last["numActiveRequests"])
            if "numQueuedRequests" in last:
                out["requests_waiting"] = float(last["numQueuedRequests"])
        return out


def _checkpoint_steps(
    python: str, examples: Path, hf_dir: str, ckpt: Path, root: Path, variant: "Variant", a: TrtArgs
) -> tuple[list[Step], list[str]]:
    """The steps before the checkpoint command (a local calibration set), and the command that writes the
    TensorRT-LLM checkpoint: quantize.py for a quantized or Medusa variant, EAGLE's converter, or the model
    family's converter."""
    q, spec = variant.quantization, variant.speculative
    dtype = DTYPES.get(q, "float16")
    steps: list[Step] = []
    if q in QFORMATS or spec and spec.method == "medusa":
        conv = [
            python,
            str(examples / "quantization" / "quantize.py"),
            "--model_dir",
            hf_dir,
            "--dtype",
            dtype,
            "--qformat",
            QFORMATS.get(q, "full_prec"),
            "--output_dir",
            str(ckpt),
            "--calib_size",
            str(a.calib_size),
            "--tp_size",
            str(a.tp_size),
        ]
        if q in ("int4_awq", "w4a8_awq"):
            conv += ["--awq_block_size", str(a.awq_block_size)]
        if a.kv_cache_dtype:
            conv += ["--kv_cache_dtype", a.kv_cache_dtype]
        if a.calib_dataset and is_local_data(a.calib_dataset):  # air-gapped: a local text set, no hub
            steps.append(
                Step("calibration", calibration_command(python, a.calib_dataset, root / "calibration", a.calib_size))
            )
            conv += ["--calib_dataset", str(root / "calibration")]
        elif a.calib_dataset:
            conv += ["--calib_dataset", a.calib_dataset]
        if spec and spec.method == "medusa":
            conv += [
                "--medusa_model_dir",
                str(spec.draft_model),
                "--num_medusa_heads",
                str(a.num_medusa_heads),
                "--max_draft_len",
                str(DEFAULT_TREE_DRAFT_LEN),
            ]
        return steps, conv
    if spec and spec.method == "eagle":
        return steps, [
            python,
            str(examples / "eagle" / "convert_checkpoint.py"),
            "--model_dir",
            hf_dir,
            "--eagle_model_dir",
            str(spec.draft_model),
            "--output_dir",
            str(ckpt),
            "--dtype",
            dtype,
            "--max_draft_len",
            str(DEFAULT_TREE_DRAFT_LEN),
            "--num_eagle_layers",
            str(a.num_eagle_layers),
            "--max_non_leaves_per_layer",
            str(a.max_non_leaves_per_layer),
            "--tp_size",
            str(a.tp_size),
        ]
    return steps, [
        python,
        str(examples / "models" / "core" / a.model_family / "convert_checkpoint.py"),
        "--model_dir",
        hf_dir,
        "--output_dir",
        str(ckpt),
        "--dtype",
        dtype,
        "--tp_size",
        str(a.tp_size),
    ]


def _build_command(
    python: str, ckpt: Path, engine: Path, variant: "Variant", a: TrtArgs, max_in: int, max_seq: int
) -> list[str]:
    """`trtllm-build` from the checkpoint to the engine, with the variant's FP8 and speculative settings."""
    q, spec = variant.quantization, variant.speculative
    build = [
        tool(python, "trtllm-build"),
        "--checkpoint_dir",
        str(ckpt),
        "--output_dir",
        str(engine),
        "--gemm_plugin",
        "auto",
        "--max_batch_size",
        str(a.max_batch_size),
        "--max_input_len",
        str(max_in),
        "--max_seq_len",
        str(max_seq),
        "--max_num_tokens",
        str(a.max_num_tokens),
        "--workers",
        str(a.tp_size),
    ]
    if q == "fp8":
        build += ["--use_paged_context_fmha", "enable", "--use_fp8_context_fmha", "enable"]
    if spec:
        draft = (
            DEFAULT_TREE_DRAFT_LEN
            if spec.method in ("medusa", "eagle")
            else lookahead_draft_len(a.lookahead_window_size, a.lookahead_ngram_size, a.lookahead_verification_set_size)
        )
        build += ["--speculative_decoding_mode", BUILD_MODES[spec.method], "--max_draft_len", str(draft)]
        if spec.method == "eagle" and q != "fp8":
            build += ["--use_paged_context_fmha", "enable"]
    return build
