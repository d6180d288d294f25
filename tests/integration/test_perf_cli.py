"""`tradeoff perf` against the local stub: vLLM's JSON keys, bad flags before any request, bad servers."""

from __future__ import annotations

import json

import pytest

from flows.cli import main
from tests.stubs.stub_server import start_stub

VLLM_KEYS = (
    "date",
    "backend",
    "model_id",
    "num_prompts",
    "request_rate",
    "burstiness",
    "max_concurrency",
    "duration",
    "completed",
    "failed",
    "total_input_tokens",
    "total_output_tokens",
    "request_throughput",
    "request_goodput",
    "output_throughput",
    "total_token_throughput",
    "max_output_tokens_per_s",
    "mean_ttft_ms",
    "median_ttft_ms",
    "std_ttft_ms",
    "p99_ttft_ms",
    "mean_tpot_ms",
    "median_tpot_ms",
    "p99_tpot_ms",
    "mean_itl_ms",
    "median_itl_ms",
    "p99_itl_ms",
    "mean_e2el_ms",
    "median_e2el_ms",
    "p99_e2el_ms",
)
OWN_KEYS = (
    "ttft_cv_pct_pooled",
    "itl_cv_pct_pooled",
    "ttft_cv_pct_median",
    "request_throughput_ci_low",
    "ttft_ms_mean_ci_low",
    "ttft_ms_p99_ci_high",
    "energy_j_per_token",
    "energy_note",
    "mbu_pct",
    "output_tokens_sources",
)


@pytest.fixture(scope="module")
def stub():
    srv, url = start_stub()
    yield url
    srv.shutdown()


def perf(url, out, *extra):
    return main(
        [
            "perf",
            "--endpoint",
            url,
            "--output",
            str(out),
            "--num-prompts",
            "3",
            "--warmup",
            "1",
            "--output-len",
            "4",
            "--input-len",
            "8",
            "--no-progress",
            *extra,
        ]
    )


def lines(path):
    return [json.loads(x) for x in path.read_text().splitlines()]


def test_writes_vllm_keys_per_scenario(stub, tmp_path, capsys):
    out = tmp_path / "r.json"
    assert perf(stub, out, "--model", "ok", "--concurrency", "1,2", "--percentiles", "50,90,99.9") == 0
    rows = lines(out)
    assert [r["scenario"] for r in rows] == ["c1", "c2"] and [r["max_concurrency"] for r in rows] == [1, 2]
    for r in rows:
        for k in VLLM_KEYS + OWN_KEYS + ("p99.9_ttft_ms",):
            assert k in r, k
        assert (r["completed"], r["failed"], r["request_rate"]) == (3, 0, "inf")
        assert r["median_ttft_ms"] == r["p50_ttft_ms"] and r["total_output_tokens"] == 12
        assert r["output_tokens_sources"] == {"max_tokens": 3} and r["mbu_pct"] is None
        assert r["energy_j_per_token"] is None and r["energy_note"]  # no meter here: NULL with the reason
    assert "wrote" in capsys.readouterr().out


def test_detailed_writes_vllms_per_request_lists(stub, tmp_path):
    out = tmp_path / "r.json"
    assert perf(stub, out, "--model", "ok", "--concurrency", "1", "--detailed") == 0
    (r,) = lines(out)
    lists = ("input_lens", "output_lens", "ttfts", "itls", "start_times", "generated_texts", "errors")
    assert {k: len(r[k]) for k in lists} == dict.fromkeys(lists, 3)  # the measured requests, warm-up left out
    assert r["output_lens"] == [4, 4, 4] and r["errors"] == ["", "", ""]
    assert all(0 < t < 60 for t in r["ttfts"])  # seconds, as vLLM writes them
    assert [len(x) for x in r["itls"]] == [3, 3, 3]  # one gap between each two chunks with choices
    assert r["start_times"] == sorted(r["start_times"])


def test_model_defaults_to_the_servers_first(stub, tmp_path):
    out = tmp_path / "r.json"
    assert perf(stub, out, "--rate", "20", "--repeats", "2") == 0
    (r,) = lines(out)
    assert r["model_id"] == "stub" and r["request_rate"] == 20.0 and r["repeats"] == 2 and r["completed"] == 6
    assert r["output_throughput_ci_low"] <= r["output_throughput_ci_high"]


@pytest.mark.parametrize(
    "model,reason", [("garbage", "malformed SSE data"), ("html", "not an SSE stream"), ("http500", "HTTP 500")]
)
def test_bad_servers_error_the_requests_and_the_sweep_goes_on(stub, tmp_path, model, reason):
    out = tmp_path / "r.json"
    # No ok request in a scenario: exit 1 (issue 18), and the file is still written
    assert perf(stub, out, "--model", model, "--concurrency", "1,2", "--detailed") == 1
    rows = lines(out)
    assert len(rows) == 2
    for r in rows:
        assert (r["completed"], r["failed"], r["mean_ttft_ms"]) == (0, 3, None)
        assert all(reason in e for e in r["errors"])


@pytest.mark.parametrize(
    "flags,expect",
    [
        (["--rate", "0"], "--rate: input should be greater than 0"),
        (["--rate", "-2"], "--rate: input should be greater than 0"),
        (["--percentiles", "50,101"], "--percentiles: input should be less than or equal to 100"),
        (["--concurrency", "0"], "--concurrency: input should be greater than or equal to 1"),
        (["--concurrency", "a,b"], "--concurrency: 'a,b' is not a comma-separated list of numbers"),
        (["--num-prompts", "0"], "--num-prompts: input should be greater than or equal to 1"),
        (["--burstiness", "0"], "--burstiness: input should be greater than 0"),
        (["--slo", "fast"], "--slo: unknown SLO preset 'fast'"),
        (["--dataset", "/nonexistent.json"], "--dataset: file /nonexistent.json not found"),
        (["--tokenizer", "/nonexistent.gguf"], "--tokenizer: file /nonexistent.gguf not found"),
    ],
)
def test_bad_flags_fail_in_one_line_before_anything_is_sent(tmp_path, capsys, flags, expect):
    # Port 9 is closed: had a request been tried first, the error would be about the endpoint.
    assert perf("http://127.0.0.1:9", tmp_path / "r.json", *flags) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: {expect}") and ";" in err[0]
    assert not (tmp_path / "r.json").exists()


def test_unreachable_endpoint_is_a_clear_error_after_a_bounded_wait(tmp_path, capsys):
    assert perf("http://127.0.0.1:9", tmp_path / "r.json", "--connect-timeout-s", "1") == 1
    (err,) = capsys.readouterr().err.strip().splitlines()
    assert "unreachable after 1 s" in err and "--endpoint" in err
