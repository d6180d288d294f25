# One command each, on a fresh clone:
#   make demo   set up .venv and run the embedded-default nightly, then print the report
#   make test   set up .venv and run the test suite
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
# Prefect's ephemeral API can take ~20 s to start on 2 busy cores (default timeout 20 s).
export PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS ?= 180

.PHONY: setup demo test clean

$(BIN)/tradeoff: pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install --upgrade pip
	# llama-cpp-python is source-only on PyPI: the first install compiles llama.cpp
	# (minutes on 2 cores); pip caches the wheel for later installs.
	CMAKE_BUILD_PARALLEL_LEVEL=$$(nproc) $(BIN)/pip install -e ".[test]"
	touch $@

setup: $(BIN)/tradeoff

demo: setup
	$(BIN)/tradeoff run configs/demo.yaml
	$(BIN)/tradeoff report

test: setup
	$(BIN)/python -m pytest -q

clean:
	rm -rf $(VENV) runs warehouse/*.duckdb
