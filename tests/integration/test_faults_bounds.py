"""Hardening, third pass (issue 49), as a hostile user and a broken server would try it: a trace's span is bounded
before any request, a request that fails costs at most its deadline, bad suite params are refused with the config,
errors are counted by cause in the terminal and the file, and an interrupted `tradeoff perf` keeps what it measured.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
import yaml

from flows.cli import main
from tasks.core.errors import ConfigError
from tasks.perf.error_share import causes_text, count_causes, error_cause
from tests.helpers import ROOT
from tests.stubs.stub_server import Handler, start_stub


@pytest.fixture(scope="module")
def stub():
    srv, url = start_stub()
    yield url
    srv.shutdown()


def _perf(url, out, *extra):
    return main(["perf", "--endpoint", url, "--output", str(out), "--no-progress", "--input-len", "8", *extra])


def _rows(path):
    return [json.loads(x) for x in path.read_text().splitlines()]


def _trace(tmp_path, lines):
    p = tmp_path / "t.jsonl"
    p.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return p


# 1. A replay's span is bounded like every other duration of a config.

YEARS_APART = [
    {"timestamp": 0, "input_length": 8, "output_length": 4},
    {"timestamp": 10**15, "input_length": 8, "output_length": 4},  # 31,700 years later
]


def test_a_trace_spanning_31000_years_is_refused_before_any_request(stub, tmp_path, capsys):
    before = Handler.posts
    t0 = time.perf_counter()
    code = _perf(stub, tmp_path / "r.json", "--model", "ok", "--trace", str(_trace(tmp_path, YEARS_APART)))
    took = time.perf_counter() - t0
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and took < 5.0 and Handler.posts == before, (code, took)
    assert len(err) == 1 and err[0].startswith("error: --trace: its requests span 1,000,000,000,000 s (31,688 years)")
    assert "years" in err[0] and "over a step's bound of 86,400 s" in err[0] and "--trace-speed" in err[0]
    assert not (tmp_path / "r.json").exists()


def test_a_session_thinking_past_a_day_is_refused_and_a_config_names_its_keys(tmp_path):
    from tasks.core.config import PerfSpec
    from tasks.perf.trace import load_trace, trace_span_note

    turns = [
        {"timestamp": 0, "input_length": 8, "output_length": 4, "session_id": "s", "turn": k + 1}
        | {"think_time_ms": 8.64e7}
        for k in range(3)
    ]
    spec = PerfSpec(trace={"path": str(_trace(tmp_path, turns))})
    with pytest.raises(ConfigError, match=r"^perf\.trace: a session's think times add up to 172,800 s .*\.speed"):
        trace_span_note(load_trace(spec.trace.path), spec.trace, None)
    # a bound that cuts it is said, not refused: the replay is cut there
    note = trace_span_note(load_trace(spec.trace.path), spec.trace, 60.0)
    assert note and "perf.max_duration_s cuts each replay at 60 s" in note


def test_a_config_with_a_years_long_trace_fails_tradeoff_check(tmp_path, capsys):
    cfg = yaml.safe_load((ROOT / "configs" / "demo.yaml").read_text())
    cfg["perf"]["trace"] = {"path": str(_trace(tmp_path, YEARS_APART))}
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(cfg))
    assert main(["check", str(path)]) == 2
    err = capsys.readouterr().err
    assert "perf.trace: its requests span" in err and "perf.max_duration_s" in err


# 2. A request that fails costs at most its deadline.


def test_a_ping_only_server_costs_its_deadlines_and_no_more(stub, tmp_path, capsys):
    """Two requests at a 10 s deadline against ': ping' comments every second: about 20 s, never a window sent
    again (the guard re-measures a window the host disturbed, not one the server failed)."""
    before = Handler.posts
    t0 = time.perf_counter()
    code = _perf(
        stub, tmp_path / "r.json", "--model", "ping", "--concurrency", "1", "--num-prompts", "2", "--deadline-s", "10",
        "--timeout-s", "3", "--warmup", "0",
    )  # fmt: skip
    took = time.perf_counter() - t0
    assert code == 1 and took < 25.0, took
    assert Handler.posts - before == 2  # each request sent once
    (row,) = _rows(tmp_path / "r.json")
    assert row["num_errors"] == 2 and row["error_causes"] == {"request deadline of 10 s exceeded": 2}
    assert "2 errored, 0 incomplete (request deadline of 10 s exceeded x2)" in capsys.readouterr().out


# 3. Suite params are validated with the config.


def _config_with_suite(tmp_path, suite: dict):
    cfg = yaml.safe_load((ROOT / "configs" / "tiny.yaml").read_text())
    cfg["quality"]["suites"] = [suite]
    cfg["quality"].pop("primary", None)
    cfg.get("decision", {}).pop("gate_metrics", None)
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


@pytest.mark.parametrize(
    "suite, words",
    [
        ({"name": "arithmetic", "params": {"tasks": []}}, ["(arithmetic).params.tasks: is empty; list at least one"]),
        ({"name": "arithmetic", "params": {"tasks": ["9Dx"]}}, ["(arithmetic).params", "9Dx"]),
        ({"name": "coherence", "limit": 50, "params": {"prompts": ["a", "b"]}}, ["(coherence).limit: 50", "2 items"]),
        (
            {"name": "longctx", "limit": 10, "params": {"context_tokens": [512], "depths_pct": [0, 50]}},
            ["limit: 10", "<= 2"],
        ),
        ({"name": "longctx", "params": {"depths_pct": []}}, ["(longctx).params.depths_pct"]),
    ],
)
def test_bad_suite_params_are_refused_by_tradeoff_check_in_one_line(tmp_path, capsys, suite, words):
    assert main(["check", str(_config_with_suite(tmp_path, suite))]) == 2
    out = capsys.readouterr()
    err = out.err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: quality.suites[0]"), err
    for w in words:
        assert w in err[0], err[0]
    assert "power" not in out.out  # no gate's power is stated for a suite that cannot run


def test_a_limit_the_suite_can_supply_passes(tmp_path, capsys):
    suite = {"name": "coherence", "limit": 2, "params": {"prompts": ["a", "b"]}}
    assert main(["check", str(_config_with_suite(tmp_path, suite))]) == 0, capsys.readouterr().err


# 4. Errors are counted by cause.


@pytest.mark.parametrize(
    "error, cause",
    [
        ('HTTP 503: {"error": {"message": "overloaded", "type": "server_error", "code": 503}}', "HTTP 503 overloaded"),
        ('HTTP 422: {"detail": "max_tokens too large"}', "HTTP 422 max_tokens too large"),
        ("HTTP 500: boom", "HTTP 500 boom"),
        ('HTTP 503: {"error": {"mess', 'HTTP 503 {"error": {"mess'),  # a body cut short is shown as text
        ("malformed SSE data: {not json", "malformed SSE data"),
        ("request deadline of 10 s exceeded", "request deadline of 10 s exceeded"),
        (None, "unknown error"),
    ],
)
def test_error_cause(error, cause):
    assert error_cause(error) == cause


def test_causes_are_counted_commonest_first():
    causes = count_causes(["HTTP 500: boom", "request deadline of 1 s exceeded", "HTTP 500: boom"])
    assert causes_text(causes) == "HTTP 500 boom x2; request deadline of 1 s exceeded x1"


def test_a_503_servers_cause_is_in_the_terminal_line_and_the_file(stub, tmp_path, capsys):
    Handler.posts = 0  # the stub answers its even-numbered requests with 503
    out = tmp_path / "r.json"
    assert _perf(stub, out, "--model", "overloaded", "--concurrency", "1", "--num-prompts", "8", "--warmup", "0") == 0
    (row,) = _rows(out)
    assert (row["num_ok"], row["num_errors"]) == (4, 4) and "errors" not in row  # not --detailed
    assert row["error_causes"] == {"HTTP 503 overloaded": 4}
    assert "4 ok, 4 errored, 0 incomplete (HTTP 503 overloaded x4)" in capsys.readouterr().out


# 5. An interrupted `tradeoff perf` keeps what it measured.


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_an_interrupted_tradeoff_perf_keeps_its_answered_requests(stub, tmp_path, sig):
    out = tmp_path / "r.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    before = Handler.posts
    cmd = [sys.executable, "-m", "flows.cli", "perf", "--endpoint", stub, "--model", "slow", "--output", str(out),
           "--concurrency", "2", "--num-prompts", "1000", "--output-len", "4", "--no-progress"]  # fmt: skip
    proc = subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while Handler.posts - before < 40 and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.1)
        assert proc.poll() is None and Handler.posts - before >= 40, "the run did not get going"
        proc.send_signal(sig)
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode != 0
    (row,) = _rows(out)
    assert row["interrupted"] is True and row["scenario"] == "c2"
    assert 30 <= row["num_ok"] < 1000 and row["num_ok"] == row["completed"]
    kept = [line for line in stderr.splitlines() if line.startswith("interrupted: kept")]
    assert kept == [f"interrupted: kept {row['num_requests']} answered requests in 1 scenario(s) in {out}"], stderr
