"""The GPU path of vLLM and TensorRT-LLM, for real: build, serve, one greedy completion, metrics.

Runs only where an NVIDIA GPU is visible and the engine imports (scripts/gpu_engines.sh setup makes
both environments; `scripts/gpu_engines.sh test` runs this file); skipped with the reason
elsewhere. TinyLlama-1.1B-Chat from the hub (ungated, Llama architecture) keeps each case to
a minute or two on one H200. The whole nightly on the GPU is `scripts/gpu_engines.sh run`.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tasks.engines.base import EngineUnavailable, engine_for, gpu_visible
from tasks.loader import parse_config

pytestmark = pytest.mark.gpu

MODEL = {"hub": "TinyLlama/TinyLlama-1.1B-Chat-v1.0", "max_context": 2048}


def _imports(python: str, module: str) -> bool:
    code = f"import importlib.util, sys; sys.exit(importlib.util.find_spec({module!r}) is None)"
    try:
        return subprocess.run([python, "-c", code], timeout=120).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


def _why_not(engine: str) -> str | None:
    if not gpu_visible():
        return "no NVIDIA GPU visible (NVML)"
    if engine == "tensorrt-llm":
        python = os.environ.get("TRADEOFF_TRTLLM_PYTHON") or sys.executable
        if not _imports(python, "tensorrt_llm"):
            return f"tensorrt_llm does not import for {python} (scripts/gpu_engines.sh setup)"
        if not Path(os.environ.get("TRTLLM_EXAMPLES_DIR", "/app/tensorrt_llm/examples")).is_dir():
            return "TensorRT-LLM's examples/ not found (set TRTLLM_EXAMPLES_DIR)"
        return None
    try:
        from tasks.engines.vllm import vllm_python

        python = vllm_python()
    except EngineUnavailable as err:
        return str(err)
    return (
        None if _imports(python, "vllm") or importlib.util.find_spec("vllm") else f"vllm does not import for {python}"
    )


CASES = [
    (
        "trt-fp16",
        {
            "engine": "tensorrt-llm",
            "quantization": "fp16",
            "engine_args": {"max_batch_size": 8, "max_seq_len": 2048, "free_gpu_memory_fraction": 0.3},
        },
    ),
    (
        "trt-int4-lookahead",
        {
            "engine": "tensorrt-llm",
            "quantization": "int4_awq",
            "speculative": {"method": "lookahead"},
            "engine_args": {
                "max_batch_size": 8,
                "max_seq_len": 2048,
                "calib_size": 32,
                "free_gpu_memory_fraction": 0.3,
            },
        },
    ),
    (
        "vllm-fp8",
        {
            "engine": "vllm",
            "quantization": "fp8",
            "engine_args": {"gpu_memory_utilization": 0.3, "enforce_eager": True},
        },
    ),
    (
        "vllm-ngram",
        {
            "engine": "vllm",
            "quantization": "fp16",
            "speculative": {"method": "ngram", "num_speculative_tokens": 4},
            "engine_args": {"gpu_memory_utilization": 0.3, "enforce_eager": True},
        },
    ),
]


@pytest.mark.parametrize("name, variant", CASES, ids=[c[0] for c in CASES])
def test_build_serve_complete_scrape(name: str, variant: dict, tmp_path: Path) -> None:
    why = _why_not(variant["engine"])
    if why:
        pytest.skip(why)
    cfg = parse_config(
        {"models": {"m": MODEL}, "variants": [{"name": name, "model": "m", "reference": True, **variant}]}
    )
    v, m = cfg.variant(name), cfg.models["m"]
    engine = engine_for(v.engine)
    cache = Path(os.environ.get("TRADEOFF_CACHE_DIR", tmp_path / "builds"))
    art = engine.build(v, m, cache)
    with engine.serving(art, v, m, tmp_path / f"{name}.server.log", 900) as ep:
        body = {"model": ep.served_model, "prompt": "Q: What is 2 plus 3?\nA:", "max_tokens": 8, "temperature": 0}
        r = httpx.post(ep.base_url + "/v1/completions", json=body, timeout=120)
        assert r.status_code == 200, r.text[:300]
        assert r.json()["choices"][0]["text"].strip()
        metrics = engine.scrape(ep)
    assert isinstance(metrics, dict)
    if v.engine == "vllm":
        assert "kv_cache_usage_pct" in metrics and "generation_tokens" in metrics
