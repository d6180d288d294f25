"""The perf client against hostile servers (issue 18): deadline, size caps, odd JSON, endpoint spellings, exit code.

Each case errs its own requests with the reason and the sweep goes on and writes its results.
"""

from __future__ import annotations

import asyncio
import json
import time

import pytest

import tasks.client as client
from flows.cli import main
from tasks.client import api_root
from tasks.core.config import PerfSpec
from tasks.perf.sweep import run_load, run_perf
from tasks.perf.workload import Prompt, make_workload
from tests.stubs.stub_server import ODD, start_stub


@pytest.fixture(scope="module")
def stub():
    srv, url = start_stub()
    yield url
    srv.shutdown()


def one(url, model, **kw):
    (r,) = asyncio.run(run_load(url, model, [Prompt("p", 3)], 4, concurrency=1, **kw))
    return r


def cli(url, out, *extra):
    return main(
        [
            "perf",
            "--endpoint",
            url,
            "--output",
            str(out),
            "--num-prompts",
            "2",
            "--warmup",
            "0",
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


def test_pings_forever_are_cut_at_the_request_deadline(stub):
    """': ping' every second keeps each read alive (the per-read timeout never fires); the deadline ends it."""
    t0 = time.perf_counter()
    r = one(stub, "ping", deadline_s=1.5, timeout_s=300.0)
    took = time.perf_counter() - t0
    assert (r.status, r.error) == ("error", "request deadline of 1.5 s exceeded") and not r.chunk_offsets_ms
    assert 1.4 < took < 4.0 and r.end_ms is not None


def test_deadline_from_the_config_and_the_cli(stub, tmp_path, capsys):
    spec = PerfSpec(
        concurrency=[1], num_prompts=1, warmup_requests=0, input_len=4, output_len=4, request_deadline_s=1.0
    )
    (sc,) = run_perf(spec, stub, "ping", make_workload(spec), None)
    assert [r.error for r in sc.records] == ["request deadline of 1 s exceeded"]
    out = tmp_path / "r.json"
    assert (
        cli(stub, out, "--model", "ping", "--concurrency", "1", "--num-prompts", "1", "--deadline-s", "1", "--detailed")
        == 1
    )
    (row,) = lines(out)
    assert row["errors"] == ["request deadline of 1 s exceeded"] and row["failed"] == 1
    assert "no ok request in scenario c1" in capsys.readouterr().err
    assert cli("http://127.0.0.1:9", tmp_path / "x.json", "--deadline-s", "0") == 2
    assert capsys.readouterr().err.startswith("error: --deadline-s: input should be greater than 0")


def test_a_body_without_newlines_beyond_the_cap_is_an_errored_request(stub):
    r = one(stub, "nonewline")
    assert r.status == "error" and r.error == f"SSE line over {client.MAX_SSE_LINE_BYTES} bytes without a newline"


def test_a_body_beyond_the_size_cap_is_an_errored_request(stub, monkeypatch):
    monkeypatch.setattr(client, "MAX_RESPONSE_BYTES", 300)  # ~5 chunks of the stub
    r = one(stub, "ok", deadline_s=10.0)
    assert r.status == "error" and r.error.startswith("response body over 300 bytes")


@pytest.mark.parametrize(
    "mode,reason",
    [
        ("odd-usage", "usage is a str, not an object"),
        ("odd-choices", "choices is a str, not a list"),
        ("odd-tokens", "usage.completion_tokens is 'many', not a token count"),
        ("odd-negative", "usage.completion_tokens is -4, not a token count"),
        ("odd-choice", "choices[0] is a int, not an object"),
        ("odd-text", "choices[0].text is a int, not a string"),
        ("odd-finish", "choices[0].finish_reason is a int, not a string"),
        ("odd-details", "usage.completion_tokens_details is a list, not an object"),
        ("odd-billions", "usage.completion_tokens is 3000000000, not a token count"),
    ],
)
def test_odd_json_errs_the_request_with_the_reason(stub, mode, reason):
    r = one(stub, mode)
    assert r.status == "error" and r.error.startswith(f"malformed SSE data: {reason}: "), r.error


def test_odd_json_never_aborts_the_sweep_and_the_file_is_written(stub, tmp_path, capsys):
    """Every odd shape in one sweep: all its requests errored with their reasons, exit 1, file written."""
    assert set(ODD) >= {"odd-usage", "odd-choices", "odd-tokens"}
    for mode in ODD:
        out = tmp_path / f"{mode}.json"
        assert cli(stub, out, "--model", mode, "--concurrency", "1,2", "--detailed") == 1
        rows = lines(out)
        assert [r["scenario"] for r in rows] == ["c1", "c2"]
        for row in rows:
            assert (row["num_ok"], row["num_errors"], row["failed"], row["completed"]) == (0, 2, 2, 0)
            assert all(e.startswith("malformed SSE data: ") for e in row["errors"])
    assert "no ok request in scenario c1, c2" in capsys.readouterr().err


def test_finished_scenarios_are_written_when_the_sweep_stops(stub, tmp_path, monkeypatch):
    """A sweep stopped in its second scenario (Ctrl-C here) leaves the first one in the file."""
    import tasks.perf.sweep as loadgen

    real, calls = loadgen.run_step, []

    def stop_in_second(spec, step, *args, **kw):
        calls.append(step.label)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(spec, step, *args, **kw)

    monkeypatch.setattr(loadgen, "run_step", stop_in_second)
    out = tmp_path / "r.json"
    assert cli(stub, out, "--model", "ok", "--concurrency", "1,2") == 130  # Ctrl-C: the CLI's orderly stop
    (row,) = lines(out)
    assert (row["scenario"], row["num_ok"], row["completed"]) == ("c1", 2, 2)


@pytest.mark.parametrize("suffix", ["", "/", "/v1", "/v1/"])
def test_tradeoff_perf_takes_the_endpoint_with_or_without_v1(stub, tmp_path, suffix):
    out = tmp_path / "r.json"
    assert cli(stub + suffix, out, "--concurrency", "1") == 0
    (row,) = lines(out)
    assert row["model_id"] == "stub" and row["num_ok"] == 2


@pytest.mark.parametrize(
    "url,root",
    [
        ("http://h:8000", "http://h:8000"),
        ("http://h:8000/", "http://h:8000"),
        ("http://h:8000/v1", "http://h:8000"),
        ("http://h:8000/v1/", "http://h:8000"),
        ("https://api.x.com/openai/v1", "https://api.x.com/openai"),
        ("https://api.x.com/v10", "https://api.x.com/v10"),
    ],
)
def test_one_rule_for_every_endpoint(url, root):
    """The same root for `tradeoff perf`, `tradeoff quality` and a hosted engine's base_url."""
    from tasks.engines.openai_compatible import HostedArgs

    assert api_root(url) == root
    if url.startswith("https"):
        assert HostedArgs(base_url=url, model="m").base_url == root


def test_no_ok_request_exits_non_zero_but_writes_the_file(stub, tmp_path, capsys):
    out = tmp_path / "r.json"
    assert cli(stub, out, "--model", "http500", "--concurrency", "1") == 1
    (row,) = lines(out)
    assert (row["num_ok"], row["failed"]) == (0, 2)
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: no ok request in scenario c1")
