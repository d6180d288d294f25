"""A `tradeoff` command run as a shell runs a job, the processes it leaves found in /proc, and a run of
configs/tiny.yaml brought to a phase (startup, perf, quality, load) to be stopped there: what the stop tests
(tests/e2e/test_faults_orphans.py, tests/integration/test_faults_stop.py) and benchmarks/stop_latency.py share."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import yaml

from tasks.core.lifecycle import die_with_parent
from tasks.core.runinfo import PROJECT_ROOT
from tasks.engines.llama_cpp import SERVER_MODULE


class JobFailed(AssertionError):
    """A job ended, or never got somewhere, before what its caller waited for (a test fails with it)."""


def processes_of(marker: bytes) -> dict[int, str]:
    """Live processes (zombies are dead) whose environment or command line contains `marker`: pid -> command."""
    found = {}
    for d in Path("/proc").glob("[0-9]*"):
        pid = int(d.name)
        if pid == os.getpid():
            continue
        try:
            if (d / "stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
                continue
            cmd = (d / "cmdline").read_bytes()
            env = (d / "environ").read_bytes()
        except (OSError, IndexError):
            continue
        if marker in env or marker in cmd:
            found[pid] = cmd.replace(b"\0", b" ").decode(errors="replace")[:200]
    return found


def catches(pid: int, sig: int) -> bool:
    """Whether process `pid` has a handler for `sig` installed (its /proc status SigCgt mask)."""
    try:
        line = next(x for x in Path(f"/proc/{pid}/status").read_text().splitlines() if x.startswith("SigCgt:"))
    except (OSError, StopIteration):
        return False
    return bool(int(line.split()[1], 16) >> (sig - 1) & 1)


def maps(pid: int, name: str) -> bool:
    """Whether process `pid` has a file whose path contains `name` mapped (a loaded shared library)."""
    try:
        return name in Path(f"/proc/{pid}/maps").read_text()
    except OSError:
        return False


class Job:
    """A `tradeoff` command started as a shell starts a job: in a process group of its own (Ctrl-C reaches the
    whole group), output to a file (a pipe would stay open while an orphan holds it), and a marker in the
    environment that every process it starts inherits (to find what it leaves behind)."""

    def __init__(self, args: list[str], tmp: Path, env: dict[str, str] | None = None):
        self.log = tmp / "command.log"
        self.marker = f"TRADEOFF_TEST_JOB={tmp}\0".encode()  # the whole variable: no other job's is a prefix
        full = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}  # Prefect's ephemeral API, as users get
        # PYTHONFAULTHANDLER: SIGABRT (sent when it does not end) dumps every thread's stack into the log.
        full.update(env or {}, TRADEOFF_TEST_JOB=str(tmp), PYTHONFAULTHANDLER="1")
        with self.log.open("w") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "flows.cli", *args],
                cwd=PROJECT_ROOT,
                env=full,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=die_with_parent(),
            )  # a killed pytest stops it too

    @property
    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def wait_for(self, check: Callable[[], Any], what: str, timeout_s: float = 240.0) -> Any:
        """Poll `check()` until it is truthy; fail naming `what` if the command ends or time runs out first."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            got = check()
            if got:
                return got
            if self.proc.poll() is not None:
                raise JobFailed(
                    f"the command ended (code {self.proc.returncode}) before {what}:\n{self.output[-3000:]}"
                )
            time.sleep(0.02)
        raise JobFailed(f"no {what} after {timeout_s} s:\n{self.output[-3000:]}")

    def started(self) -> None:
        """Return once the command handles its stop signals (the first moments of `main`, imports still to come)."""
        self.wait_for(lambda: catches(self.proc.pid, signal.SIGTERM), "stop-signal handler", timeout_s=60)

    def send(self, sig: int, to: str) -> float:
        """Send `sig` to the command's process group (`group`: Ctrl-C in a terminal) or to it alone (`process`);
        returns when (time.monotonic)."""
        if to == "group":
            os.killpg(self.proc.pid, sig)
        else:
            self.proc.send_signal(sig)
        return time.monotonic()

    def ended(self, since: float, within_s: float) -> int:
        """The command's exit code, once it ended; fail with every thread's stack when it has not within `within_s`
        of `since`."""
        try:
            return self.proc.wait(timeout=max(0.0, since + within_s - time.monotonic()))
        except subprocess.TimeoutExpired:
            self.proc.send_signal(signal.SIGABRT)
            self.proc.wait(timeout=30)
            raise JobFailed(f"still running {within_s} s after the signal; its stacks:\n{self.output[-12000:]}")

    def left(self, grace_s: float = 0.0) -> dict[int, str]:
        """Processes of the command still alive, after waiting up to `grace_s` for them to go."""
        deadline = time.monotonic() + grace_s
        while (found := processes_of(self.marker)) and time.monotonic() < deadline:
            time.sleep(0.1)
        return found

    def kill(self) -> None:
        """Whatever is left of the command, by PID (a failing case must not leave its processes to the next)."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        for pid in processes_of(self.marker):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass


def tiny_one_variant(phase: str = "quality") -> dict:
    """configs/tiny.yaml with its reference variant only, and no longer than `phase` needs: in `perf` a two-step
    sweep (the first step's part is written while the second runs), in `quality` a suite of 20 requests to be
    caught in; otherwise both as short as they go."""
    cfg = yaml.safe_load((PROJECT_ROOT / "configs" / "tiny.yaml").read_text())
    cfg["variants"] = [v for v in cfg["variants"] if v.get("reference")]
    cfg["perf"].update(
        {
            "concurrency": [1, 2] if phase == "perf" else [1],
            "num_prompts": 4 if phase == "perf" else 2,
            "warmup_requests": 1,
            "output_len": 16,
        }
    )
    cfg["quality"] = {
        "primary": "arithmetic.accuracy",
        "suites": [{"name": "arithmetic", "limit": 20 if phase == "quality" else 4}],
    }
    cfg["server_start_timeout_s"] = 120
    return cfg


def server_log_posts(runs: Path) -> int:
    """Requests the run's engine server has answered so far (its access log's POST lines)."""
    return sum(log.read_text(errors="replace").count('"POST /v1/') for log in runs.glob("*/logs/*.server.log"))


def parts(runs: Path, table: str) -> list[Path]:
    return sorted(runs.glob(f"*/results/{table}/*.parquet"))


def holds_open(pid: int, path: Path) -> bool:
    """Whether process `pid` has `path` open."""
    try:
        return any(os.readlink(fd) == str(path) for fd in Path(f"/proc/{pid}/fd").iterdir())
    except OSError:
        return False


def reach(phase: str, job: Job, runs: Path, warehouse: Path) -> None:
    """Return once the run is in `phase`: startup (the engine server is loading), perf (the sweep's first step is
    written, the second runs), quality (the sweep is written and the suite's requests are being answered), load
    (everything measured; the load waits for the warehouse, whose writer lock the caller holds)."""
    if phase == "startup":
        job.wait_for(
            lambda: any(SERVER_MODULE in c for c in processes_of(job.marker).values()), "engine server process"
        )
    elif phase == "perf":
        (part,) = job.wait_for(lambda: parts(runs, "perf_summary"), "the sweep's first step")
        rows = pq.read_table(part).num_rows
        if rows != 1:  # one step of two written: still inside the sweep
            raise JobFailed(f"the sweep's first part holds {rows} steps, not 1: the run was already past it")
    elif phase == "quality":
        job.wait_for(lambda: parts(runs, "perf_summary"), "end of the perf sweep")
        after_perf = server_log_posts(runs)
        job.wait_for(lambda: server_log_posts(runs) > after_perf, "quality request")
        if parts(runs, "quality_scores"):  # still inside the suite
            raise JobFailed("the quality scores were already written: the run was already past the suite")
    else:
        side = warehouse.with_name(f".{warehouse.name}.writer")  # warehouse.swap.writer_lock's file
        job.wait_for(lambda: holds_open(job.proc.pid, side), "the load's wait for the warehouse")
