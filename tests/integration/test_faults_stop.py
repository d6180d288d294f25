"""Fault injection, Ctrl-C: `tradeoff perf`, `quality` and `recommend` stopped by SIGINT end within seconds with 130.

Each command runs as a shell starts a job (a process group of its own), against a measuring instrument (the
paced SSE server) or the embedded model, and gets SIGINT in one phase, sent to its process group (Ctrl-C in
a terminal) or to it alone (`kill -INT`): it ends within 10 s with 130 and one line, leaves no process, and
keeps what it finished. `tradeoff run` is stopped the same way in tests/e2e/test_faults_orphans.py. Then
the stop itself (tasks.core.lifecycle.StopSignals): a second signal exits at once, and a stop that a library
turned into its own error (DuckDB: RuntimeError 'Query interrupted') is still a stop.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from instruments.jobs import Job, maps, processes_of
from instruments.paced_server import running
from tasks.core.config import PackageFile
from tests.helpers import ROOT, SMOLLM2_GGUF

STOP_WITHIN_S = 10.0
TARGETS = ("group", "process")


def stopped(job: Job, to: str, grace_s: float = 0.0) -> str:
    """Send SIGINT (to the job's group or to it alone); check it ended in time with 130 and left nothing (after
    `grace_s` for processes that end on their own once the command has ended); its output."""
    code = job.ended(job.send(signal.SIGINT, to), within_s=STOP_WITHIN_S)
    out = job.output
    assert code == 130, out[-3000:]
    assert "stopped by SIGINT; what it started is stopped" in out and "Traceback" not in out, out[-3000:]
    assert not job.left(grace_s), out[-3000:]
    return out


@pytest.fixture(scope="module")
def paced():
    with running() as url:
        yield url


@pytest.mark.parametrize("phase", ["startup", "perf"])
@pytest.mark.parametrize("to", TARGETS)
def test_tradeoff_perf(paced, phase, to, tmp_path) -> None:
    """Start-up (imports) and inside the sweep, the first scenario written: that scenario is kept."""
    out = tmp_path / "perf.json"
    job = Job(
        [
            "perf",
            "--endpoint",
            paced,
            "--model",
            "ttft=20,itl=40,jitter=0",
            "--concurrency",
            "1,2",
            "--num-prompts",
            "2",
            "--warmup",
            "0",
            "--output-len",
            "50",
            "--input-len",
            "8",
            "--no-progress",
            "--output",
            str(out),
        ],
        tmp_path,
    )
    try:
        if phase == "startup":
            job.started()
        else:
            job.wait_for(out.exists, "the first scenario written")
        stopped(job, to)
        if phase == "startup":
            assert not out.exists()
        else:
            rows = [json.loads(line) for line in out.read_text().splitlines()]
            assert [r["scenario"] for r in rows] == ["c1"] and rows[0]["completed"] == 2  # what finished is kept
    finally:
        job.kill()


@pytest.mark.parametrize("phase", ["startup", "suite"])
@pytest.mark.parametrize("to", TARGETS)
def test_tradeoff_quality(phase, to, tmp_path) -> None:
    """Start-up, and inside the fidelity suite, whose llama.cpp logits run in a spawned child (which a group's
    Ctrl-C reaches too): the child is stopped, no half suite is written."""
    gguf = str(PackageFile(**SMOLLM2_GGUF).resolve())
    out = tmp_path / "quality"
    job = Job(
        [
            "quality",
            "--endpoint",
            "http://127.0.0.1:9",
            "--model",
            "q4_1",
            "--suite",
            "fidelity",
            "--limit",
            "256",
            "--gguf",
            gguf,
            "--reference-gguf",
            gguf,
            "--output",
            str(out),
        ],
        tmp_path,
    )
    try:
        if phase == "startup":
            job.started()
        else:
            job.wait_for(
                lambda: any(maps(pid, "libllama") for pid in processes_of(job.marker) if pid != job.proc.pid),
                "the suite's llama.cpp child",
            )
        # multiprocessing's resource tracker (started with the spawned child) ends when the command's end closes
        # its pipe: a moment after the command, never before it.
        stopped(job, to, grace_s=5.0)
        assert not (out / "results").exists() and not (out / "scores.json").exists()
    finally:
        job.kill()


@pytest.fixture
def held_warehouse(tmp_path):
    """A warehouse that another process holds open for writing (a DuckDB shell, a load): readers wait for it."""
    from warehouse.db import open_warehouse

    path = tmp_path / "wh.duckdb"
    open_warehouse(path).close()
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import duckdb, sys, time; con = duckdb.connect(sys.argv[1]); print('open', flush=True); time.sleep(120)",
            str(path),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "open"
        yield path
    finally:
        holder.kill()
        holder.wait()


@pytest.mark.parametrize("to", TARGETS)
def test_tradeoff_recommend(held_warehouse, to, tmp_path) -> None:
    """Start-up: the signal comes while it imports (the warehouse is held, so it cannot have finished first)."""
    job = Job(["recommend", "--warehouse", str(held_warehouse)], tmp_path)
    try:
        job.started()
        stopped(job, to)
    finally:
        job.kill()


def in_process_sigint(after_s: float, argv: list[str]) -> tuple[int, float]:
    """`main(argv)` in this process with SIGINT sent to it `after_s` in: (exit code, seconds from signal to return).

    Only inside main is SIGINT the command's (StopSignals); the timer is cancelled when main returns early."""
    from flows.cli import main

    sent: list[float] = []

    def fire() -> None:
        sent.append(time.monotonic())
        os.kill(os.getpid(), signal.SIGINT)

    timer = threading.Timer(after_s, fire)
    timer.start()
    try:
        code = main(argv)
    finally:
        timer.cancel()
    assert sent, f"main returned {code} before the signal"
    return code, time.monotonic() - sent[0]


def test_recommend_waiting_for_the_warehouse_stops(held_warehouse, capsys) -> None:
    """Inside the command: it waits for the held warehouse (up to 10 s), Ctrl-C ends the wait."""
    code, took_s = in_process_sigint(1.0, ["recommend", "--warehouse", str(held_warehouse)])
    assert code == 130 and took_s < 2.0
    assert "stopped by SIGINT" in capsys.readouterr().err


SLOW_STOP = """
import sys, time
from tasks.core.lifecycle import StopSignals
with StopSignals(owns_process=True) as stop:
    try:
        print("ready", flush=True)
        time.sleep(60)
    finally:
        print("stopping", flush=True)
        time.sleep(60)  # a stop that takes long: a server that does not end
"""


def test_a_second_signal_exits_at_once(tmp_path) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-c", SLOW_STOP],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    try:
        assert proc.stdout.readline().strip() == "ready"
        proc.send_signal(signal.SIGINT)
        assert proc.stdout.readline().strip() == "stopping"
        t0 = time.monotonic()
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=5) == 130 and time.monotonic() - t0 < 5
        assert "stopped at once by a second SIGINT" in proc.stderr.read()
    finally:
        proc.kill()
        proc.wait()


def test_a_stop_a_library_turned_into_its_own_error_is_kept() -> None:
    """A library that checks for signals itself may catch the KeyboardInterrupt and raise its own error (DuckDB:
    RuntimeError('Query interrupted'), on some of its query paths and not on others, so not testable with it): the
    stop stays known until the block ends, and code that records failures and goes on (a variant, a suite, the
    CLI's one-line error) raises it again."""
    from tasks.core.lifecycle import StopSignals, raise_if_stopping, stop_requested

    raise_if_stopping()  # no block, no stop: nothing happens
    before = signal.getsignal(signal.SIGINT)
    with StopSignals() as stop:
        try:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(5)  # the handler raises KeyboardInterrupt here, at once
        except KeyboardInterrupt as err:
            swallowed = RuntimeError(f"Query interrupted ({err!r})")  # what the library raises instead
        assert swallowed and stop_requested() == signal.SIGINT == stop.signum
        with pytest.raises(KeyboardInterrupt):
            raise_if_stopping()
    assert stop_requested() is None and signal.getsignal(signal.SIGINT) is before  # the caller's handler again


def test_a_stop_signal_waits_while_a_child_starts() -> None:
    """Between a child's fork and the moment its handle is held inside the block that stops it (inside
    subprocess.Popen itself), a KeyboardInterrupt would leave the child running: the signal waits, then lands."""
    from tasks.core.lifecycle import StopSignals, hold_stop_signals

    with StopSignals() as stop:
        release = hold_stop_signals()
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.2)  # held: nothing is raised here
        assert stop.signum is None
        with pytest.raises(KeyboardInterrupt):
            release()  # the handlers are back, the held signal is sent again: raised here
            time.sleep(5)
        assert stop.signum == signal.SIGINT


def test_a_stop_while_the_sweeps_loop_is_made_ends_cleanly(monkeypatch) -> None:
    """A Ctrl-C that lands while run_async makes its event loop (seen in CI: `tradeoff perf` stopped between two
    scenarios printed a half-made loop's traceback and 'coroutine was never awaited'): the stop is noted, the
    coroutine is cancelled before its first step and KeyboardInterrupt follows, with nothing left unawaited."""
    import asyncio
    import gc
    import warnings

    from tasks.core.lifecycle import StopSignals, run_async

    made = asyncio.Runner.__init__

    def interrupted(self, *args, **kwargs) -> None:
        os.kill(os.getpid(), signal.SIGINT)  # the handler runs at the next bytecode: inside the making
        made(self, *args, **kwargs)

    monkeypatch.setattr(asyncio.Runner, "__init__", interrupted)
    steps = []

    async def sweep() -> None:
        steps.append("started")
        await asyncio.sleep(10)

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with StopSignals() as stop, pytest.raises(KeyboardInterrupt):
            run_async(sweep)
        gc.collect()
    assert stop.signum == signal.SIGINT and steps == []
    assert not [w for w in caught if "never awaited" in str(w.message)]
