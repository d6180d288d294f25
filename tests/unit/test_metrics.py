"""Unit tests of the perf metrics against hand-computed values (vLLM bench serve definitions)."""

import math

import pytest

from tasks.perf.metrics import RequestRecord, cv_pct, describe, peak_tokens_per_s, summarize


def rec(i, start, ttft, e2el, out, chunks, status="ok", warm=False, prompt=10):
    return RequestRecord(
        index=i,
        status=status,
        start_ms=start,
        ttft_ms=ttft,
        e2el_ms=e2el,
        prompt_tokens=prompt,
        output_tokens=out,
        chunk_offsets_ms=chunks,
        is_warmup=warm,
    )


def test_tpot_and_itl_follow_vllm_definitions():
    r = rec(0, 0.0, 100.0, 400.0, 4, [100.0, 200.0, 300.0, 400.0])
    assert r.tpot_ms == pytest.approx((400 - 100) / (4 - 1))
    assert r.itl_ms == [100.0, 100.0, 100.0]
    assert rec(0, 0, 50.0, 50.0, 1, [50.0]).tpot_ms is None  # one token: no TPOT


def test_describe_and_cv():
    d = describe([1.0, 2.0, 3.0, 4.0], "x")
    assert d["x_mean"] == 2.5 and d["x_min"] == 1.0 and d["x_max"] == 4.0
    assert d["x_p50"] == pytest.approx(2.5)
    assert d["x_std"] == pytest.approx(math.sqrt(5 / 3))
    assert cv_pct([1.0, 2.0, 3.0, 4.0]) == pytest.approx(math.sqrt(5 / 3) / 2.5 * 100)
    assert cv_pct([5.0]) is None
    assert describe([], "y")["y_mean"] is None


def test_summary_excludes_warmup_and_counts_failures_apart():
    records = [
        rec(0, 0.0, 900.0, 2000.0, 4, [900, 1000, 1100, 2000], warm=True),  # warm-up: excluded
        rec(1, 0.0, 100.0, 400.0, 4, [100.0, 200.0, 300.0, 400.0]),
        rec(2, 500.0, 300.0, 600.0, 4, [300.0, 400.0, 500.0, 600.0]),
        RequestRecord(index=3, status="error", start_ms=10.0, error="HTTP 500"),
        RequestRecord(index=4, status="incomplete", start_ms=20.0, ttft_ms=50.0, chunk_offsets_ms=[50.0]),
    ]
    s = summarize(records, window_s=1.0)
    assert (s["num_requests"], s["num_ok"], s["num_errors"], s["num_incomplete"]) == (4, 2, 1, 1)
    # measured interval: first send 0 ms -> last end 500 + 600 = 1100 ms
    assert s["duration_s"] == pytest.approx(1.1)
    assert s["output_throughput"] == pytest.approx(8 / 1.1)
    assert s["request_throughput"] == pytest.approx(2 / 1.1)
    assert s["total_token_throughput"] == pytest.approx(28 / 1.1)
    assert s["ttft_ms_mean"] == pytest.approx(200.0)
    assert s["tpot_ms_mean"] == pytest.approx(100.0)
    assert s["ttft_cv_pct_pooled"] == pytest.approx(math.sqrt(20000) / 200 * 100)
    assert s["itl_ms_mean"] == pytest.approx(100.0) and s["itl_cv_pct_pooled"] == pytest.approx(0.0)


def test_peak_window():
    # 10 tokens in the first 0.5 s, then 1 token per second: the best 1 s window holds 10 (+0) tokens.
    events = [(i * 50.0, 1.0) for i in range(10)] + [(1000.0 * k, 1.0) for k in range(2, 6)]
    assert peak_tokens_per_s(events, 0.0, 5000.0, 1.0) == pytest.approx(10.0)
    # interval shorter than one window: mean throughput
    assert peak_tokens_per_s([(0.0, 2.0), (400.0, 2.0)], 0.0, 500.0, 1.0) == pytest.approx(8.0)
    assert peak_tokens_per_s([], 0.0, 1.0, 1.0) is None


def test_summary_with_no_ok_request_has_null_metrics():
    s = summarize([RequestRecord(index=0, status="error", start_ms=0.0, error="boom")])
    assert s["num_ok"] == 0 and s["output_throughput"] is None and s["ttft_ms_mean"] is None
