#!/usr/bin/env bash
# The GPU path of vLLM and TensorRT-LLM, end to end on one NVIDIA GPU host (one H200 is enough).
#
#   scripts/gpu_engines.sh setup     once (~10-15 min, mostly downloads): .venv (make setup),
#                                    .venv-gpu-vllm, .venv-gpu-trtllm, TensorRT-LLM's examples/
#   scripts/gpu_engines.sh run       configs/gpu-smoke.yaml: TinyLlama-1.1B on vLLM (FP16 reference,
#                                    FP8, INT4-AWQ built with llm-compressor, n-gram speculative) and on
#                                    TensorRT-LLM (FP16, FP8, INT4-AWQ + lookahead); perf sweep, arithmetic,
#                                    engine metrics; bounded by GPU_RUN_TIMEOUT_S (default 600 s)
#   scripts/gpu_engines.sh test      the GPU integration tests (tests/integration/test_engines_gpu.py)
#   scripts/gpu_engines.sh nightly   configs/nightly-gpu.yaml (Llama-3.1-8B, ten variants: hours; HF_TOKEN)
#
# Needs: an NVIDIA driver for CUDA 12.9 or newer; python3 3.10-3.12 (TensorRT-LLM ships wheels for
# 3.10 and 3.12: set PY_TRT=python3.12 if python3 is 3.11); git; libopenmpi-dev (apt, for mpi4py);
# network to PyPI, GitHub (TensorRT-LLM's examples) and the Hugging Face hub (the models named in
# the configs are the only weights downloaded; HF_TOKEN for gated ones).
# Packages: pyproject.toml (the project), scripts/requirements-gpu-vllm.txt,
# scripts/requirements-gpu-trtllm.txt. vLLM and TensorRT-LLM pin different torch builds, hence
# two environments; tradeoff finds them through TRADEOFF_VLLM_PYTHON and TRADEOFF_TRTLLM_PYTHON.
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${PY:-python3}
PY_TRT=${PY_TRT:-$PY}
TRTLLM_TAG=${TRTLLM_TAG:-v1.2.1}   # the tag of the tensorrt-llm version in requirements-gpu-trtllm.txt
VLLM_VENV=.venv-gpu-vllm
TRT_VENV=.venv-gpu-trtllm
TRT_SRC=.trtllm-src

export TRADEOFF_VLLM_PYTHON=$PWD/$VLLM_VENV/bin/python
export TRADEOFF_TRTLLM_PYTHON=$PWD/$TRT_VENV/bin/python
export TRTLLM_EXAMPLES_DIR=$PWD/$TRT_SRC/examples

need_gpu() {
  nvidia-smi -L >/dev/null 2>&1 || { echo "no NVIDIA GPU visible (nvidia-smi -L failed)" >&2; exit 2; }
}

setup() {
  need_gpu
  make setup
  [ -x "$VLLM_VENV/bin/python" ] || "$PY" -m venv "$VLLM_VENV"
  "$VLLM_VENV/bin/pip" install --upgrade pip
  "$VLLM_VENV/bin/pip" install -r scripts/requirements-gpu-vllm.txt
  [ -x "$TRT_VENV/bin/python" ] || "$PY_TRT" -m venv "$TRT_VENV"
  "$TRT_VENV/bin/pip" install --upgrade pip
  "$TRT_VENV/bin/pip" install -r scripts/requirements-gpu-trtllm.txt
  if [ ! -d "$TRT_SRC/examples" ]; then
    git clone --depth 1 --branch "$TRTLLM_TAG" --filter=blob:none --sparse \
      https://github.com/NVIDIA/TensorRT-LLM "$TRT_SRC"
    git -C "$TRT_SRC" sparse-checkout set examples
  fi
  "$TRT_VENV/bin/pip" install -r "$TRT_SRC/examples/quantization/requirements.txt"
  "$TRT_VENV/bin/python" -c "import tensorrt_llm, torch; print('tensorrt_llm', tensorrt_llm.__version__, 'cuda', torch.cuda.is_available())"
  "$VLLM_VENV/bin/python" -c "import vllm, torch; print('vllm', vllm.__version__, 'cuda', torch.cuda.is_available())"
}

run() {
  need_gpu
  export TRADEOFF_WAREHOUSE=${TRADEOFF_WAREHOUSE:-warehouse/gpu-smoke.duckdb}
  timeout "${GPU_RUN_TIMEOUT_S:-600}" .venv/bin/tradeoff run configs/gpu-smoke.yaml
  .venv/bin/tradeoff sql "select variant, engine, engine_version, status, round(server_startup_s) as startup_s,
      round(tps_mean, 1) as tps, round(ttft_ms_mean) as ttft_ms, round(kv_cache_usage_pct_max, 1) as kv_pct_max,
      requests_waiting_max, round(spec_acceptance_rate, 3) as spec_accept
    from v_engine_metrics where run_id = (select run_id from runs order by started_at desc limit 1)
    order by engine, variant"
}

case "${1:-}" in
  setup) setup ;;
  run) run ;;
  test) need_gpu; .venv/bin/python -m pytest -q -m gpu tests/integration/test_engines_gpu.py ;;
  nightly) need_gpu; .venv/bin/tradeoff run configs/nightly-gpu.yaml ;;
  *) sed -n '2,21p' "$0"; exit 2 ;;
esac
