"""`tradeoff perf`'s keys shared with `vllm bench serve` carry vLLM's definitions; tradeoff's own have own names.

Hand-computed against vllm/benchmarks/serve.py `calculate_metrics` and the request functions of
vllm/benchmarks/lib/endpoint_request_func.py.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from flows.cli import main
from tasks.perf.metrics import RequestRecord, summarize, summarize_repeats
from tasks.perf.vllm_compat import buckets_1s, vllm_keys
from tests.stubs.stub_server import start_stub


def ok(i, start, ttft, e2el, chunks, out=None, end=None, finish=None):
    """An ok request; `finish`: a last chunk with choices but no text that many ms after the last text chunk."""
    return RequestRecord(
        index=i,
        status="ok",
        start_ms=start,
        ttft_ms=ttft,
        e2el_ms=e2el,
        prompt_tokens=10,
        output_tokens=out or len(chunks),
        chunk_offsets_ms=chunks,
        vllm_success=True,
        end_ms=end if end is not None else start + e2el,
        choice_offsets_ms=chunks + ([chunks[-1] + finish] if finish is not None else []),
    )


def keys(runs):
    return vllm_keys(runs, summarize_repeats(runs))


def test_std_is_numpys_default_ddof_0_and_the_sample_std_keeps_its_own_name():
    runs = [[ok(0, 0.0, 100.0, 300.0, [100.0, 200.0, 300.0]), ok(1, 400.0, 200.0, 400.0, [200.0, 300.0, 400.0])]]
    k = keys(runs)
    assert k["std_ttft_ms"] == pytest.approx(50.0)  # vLLM: np.std([100, 200]) -> 50
    assert summarize(runs[0])["ttft_ms_std"] == pytest.approx(np.std([100, 200], ddof=1))  # 70.7, tradeoff's own
    assert k["std_itl_ms"] == pytest.approx(0.0) and k["std_e2el_ms"] == pytest.approx(50.0)


def test_latencies_time_every_chunk_with_choices_as_vllm_and_tradeoffs_own_only_output_chunks():
    """llama.cpp and vLLM end a stream with a chunk whose text is empty and finish_reason set: vLLM's ITL
    counts its gap (its request function stamps every chunk with choices) and its latency ends there."""
    r = ok(0, 0.0, 100.0, 300.0, [100.0, 200.0, 300.0], finish=1.0)
    k = vllm_keys([[r]], summarize([r]), [50.0, 99.0])
    assert k["mean_itl_ms"] == pytest.approx(201 / 3) and k["median_itl_ms"] == pytest.approx(100.0)
    assert k["p50_itl_ms"] == pytest.approx(100.0) and k["std_itl_ms"] == pytest.approx(np.std([100, 100, 1]))
    assert k["mean_e2el_ms"] == pytest.approx(301.0) and k["mean_ttft_ms"] == pytest.approx(100.0)
    assert k["mean_tpot_ms"] == pytest.approx(201 / 2)  # (latency - ttft) / (3 tokens - 1)
    s = summarize([r])
    assert s["itl_ms_mean"] == pytest.approx(100.0) and s["e2el_ms_mean"] == pytest.approx(300.0)


def test_max_concurrent_requests_counts_1s_buckets_as_vllm():
    """Back to back at concurrency 1: the first ends in second 0, the second starts there: vLLM says 2."""
    a = ok(0, 0.0, 100.0, 900.0, [100.0, 900.0])
    b = ok(1, 950.0, 100.0, 600.0, [100.0, 600.0])
    c = ok(2, 2100.0, 100.0, 300.0, [100.0, 300.0])
    assert keys([[a, b, c]])["max_concurrent_requests"] == 2
    assert keys([[c]])["max_concurrent_requests"] == 1 and keys([[]])["max_concurrent_requests"] == 0


def test_goodput_uses_vllms_times_and_limits():
    fast, slow = ok(0, 0.0, 100.0, 300.0, [100.0, 300.0]), ok(1, 400.0, 600.0, 900.0, [600.0, 900.0])
    s = summarize([fast, slow], slo={"ttft_ms": 500.0})
    s.update(goodput_slo="ttft_ms<=500", slo_ttft_ms=500.0)
    k = vllm_keys([[fast, slow]], s)
    assert k["request_goodput"] == pytest.approx(1 / s["duration_s"])
    assert vllm_keys([[fast, slow]], summarize([fast, slow]))["request_goodput"] is None  # no SLO: none


def test_max_output_tokens_per_s_is_vllms_fixed_1s_buckets_of_chunks():
    """6 chunks straddling the 1 s bucket edge: vLLM's buckets hold 3 and 3, a sliding 1 s window up to 6."""
    r = ok(0, 0.0, 700.0, 1300.0, [700.0, 800.0, 900.0, 1100.0, 1200.0, 1300.0], out=12)
    assert buckets_1s([r])[0] == 3.0  # chunks, one token each, as vLLM counts them
    # tradeoff's sliding window, inside the 1.3 s interval: [300, 1300) ms holds 5 chunks of 2 tokens
    assert summarize([r], window_s=1.0)["peak_output_throughput"] == pytest.approx(10.0)
    long = ok(1, 0.0, 700.0, 2500.0, [700.0, 800.0, 900.0, 1100.0, 1200.0, 1300.0, 2500.0])
    assert buckets_1s([long])[0] == 3.0 and summarize([long])["peak_output_throughput"] == 6.0


def test_duration_is_the_wall_clock_and_failures_at_the_tail_do_not_inflate_throughput():
    """One ok request of 10 tokens in the first second, one that times out at 5 s: vLLM's duration is 5 s."""
    done = ok(0, 0.0, 100.0, 1000.0, [100.0 * k for k in range(1, 11)])
    stuck = RequestRecord(
        index=1, status="error", start_ms=0.5, error="ServerTimeoutError", end_ms=5000.0, vllm_success=False
    )
    s = summarize([done, stuck])
    assert s["duration_s"] == pytest.approx(5.0) and s["output_throughput"] == pytest.approx(2.0)  # not 10 tok/s
    k = keys([[done, stuck]])
    assert (k["duration"], k["completed"], k["failed"]) == (pytest.approx(5.0), 1, 1)
    assert k["output_throughput"] == pytest.approx(2.0) and k["request_throughput"] == pytest.approx(0.2)


def test_failed_and_completed_as_vllm_counts_them():
    """A stream that closed cleanly without [DONE] is `completed` for vLLM (tradeoff: incomplete), and so is
    one whose chunks carried no text (tradeoff: error); a timeout after chunks is failed for both."""
    runs = [
        [
            ok(0, 0.0, 10.0, 20.0, [10.0, 20.0]),
            RequestRecord(
                index=1,
                status="incomplete",
                start_ms=0.0,
                error="stream closed before [DONE]",
                vllm_success=True,
                end_ms=30.0,
            ),
            RequestRecord(
                index=2,
                status="error",
                start_ms=0.0,
                error="stream ended without any text",
                vllm_success=True,
                end_ms=30.0,
            ),
            RequestRecord(
                index=3, status="incomplete", start_ms=0.0, error="ServerTimeoutError", vllm_success=False, end_ms=40.0
            ),
        ]
    ]
    k = keys(runs)
    assert (k["completed"], k["failed"]) == (3, 1)
    s = summarize(runs[0])
    assert (s["num_ok"], s["num_errors"], s["num_incomplete"]) == (1, 1, 2)


def test_repeats_add_up_as_runs_back_to_back():
    a = [ok(0, 0.0, 100.0, 1000.0, [100.0, 1000.0], out=10)]
    b = [ok(0, 0.0, 100.0, 3000.0, [100.0, 3000.0], out=10)]
    k = keys([a, b])
    assert k["duration"] == pytest.approx(4.0) and k["output_throughput"] == pytest.approx(20 / 4.0)
    s = summarize_repeats([a, b])
    assert s["output_throughput"] == pytest.approx((10 / 1.0 + 10 / 3.0) / 2)  # tradeoff's: mean of the repeats


@pytest.fixture(scope="module")
def stub():
    srv, url = start_stub()
    yield url
    srv.shutdown()


def test_tradeoff_perf_json_names(stub, tmp_path):
    out = tmp_path / "r.json"
    assert (
        main(
            [
                "perf",
                "--endpoint",
                stub,
                "--model",
                "ok",
                "--output",
                str(out),
                "--num-prompts",
                "3",
                "--warmup",
                "0",
                "--output-len",
                "4",
                "--concurrency",
                "1",
                "--no-progress",
            ]
        )
        == 0
    )
    (r,) = [json.loads(x) for x in out.read_text().splitlines()]
    for m in ("ttft", "tpot", "itl", "e2el"):
        assert r[f"std_{m}_ms"] is not None and r[f"sample_std_{m}_ms"] is not None
    # Every chunk of this stub carries text, so TTFT and the ITL gaps are the same values on both sides
    # (E2EL and TPOT are not: vLLM's latency ends at the last chunk, tradeoff's at [DONE]); ddof 1 vs 0:
    for m, n in (("ttft", 3), ("itl", 3 * 3)):
        assert r[f"sample_std_{m}_ms"] == pytest.approx(r[f"std_{m}_ms"] * (n / (n - 1)) ** 0.5)
    assert r["max_output_tokens_per_s"] == 12.0  # 3 requests x 4 chunks, well inside the first second
    assert r["peak_output_tokens_per_s_sliding"] is not None and r["output_throughput_repeat_mean"] is not None
    assert r["duration"] > 0 and r["completed"] == r["num_ok"] == 3 and r["failed"] == 0


def test_a_clean_cut_is_completed_for_vllm_and_not_ok_for_tradeoff(stub, tmp_path):
    out = tmp_path / "r.json"
    assert (
        main(
            [
                "perf",
                "--endpoint",
                stub,
                "--model",
                "cut",
                "--output",
                str(out),
                "--num-prompts",
                "2",
                "--warmup",
                "0",
                "--output-len",
                "4",
                "--concurrency",
                "1",
                "--no-progress",
            ]
        )
        == 1
    )
    (r,) = [json.loads(x) for x in out.read_text().splitlines()]
    assert (r["completed"], r["failed"], r["num_ok"], r["num_incomplete"]) == (2, 0, 0, 2)
