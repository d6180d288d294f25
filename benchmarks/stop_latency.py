"""How long `tradeoff run` takes to stop on a signal, and until no process of the run is left.

    python benchmarks/stop_latency.py [--phases startup perf quality load] [--signals SIGINT SIGTERM SIGKILL]
                                      [--to group process]

Each (phase, signal, target): the real CLI on configs/tiny.yaml cut to its reference variant (as
tests/e2e/test_faults_orphans.py runs it, with instruments/jobs.py: in a process group of its own), the signal sent
in the phase to the command's process group (Ctrl-C in a terminal) or to the command alone, then two
times from the signal: until the command has ended, and until /proc holds no process of the run
(engine server, Prefect's ephemeral API). Prints one line per case.
"""

from __future__ import annotations

import argparse
import fcntl
import os
import signal
import tempfile
import time
from pathlib import Path

import yaml

from instruments.jobs import Job, JobFailed, processes_of, reach, tiny_one_variant


def one(phase: str, sig: signal.Signals, to: str, tmp: Path, shared: dict[str, str]) -> tuple[float, float, int, int]:
    """(seconds to the command's end, seconds until no process of the run is left, processes seen before, exit code)."""
    config = tmp / "tiny-one.yaml"
    config.write_text(yaml.safe_dump(tiny_one_variant(phase)))
    runs, warehouse = tmp / "runs", tmp / "wh.duckdb"
    writer = None
    if phase == "load":  # the load waits for the warehouse, held by another writer
        writer = os.open(warehouse.with_name(f".{warehouse.name}.writer"), os.O_RDWR | os.O_CREAT)
        fcntl.flock(writer, fcntl.LOCK_EX)
    job = Job(
        ["run", str(config)], tmp, {**shared, "TRADEOFF_RUNS_DIR": str(runs), "TRADEOFF_WAREHOUSE": str(warehouse)}
    )
    try:
        reach(phase, job, runs, warehouse)
        before = len(processes_of(job.marker))
        t0 = time.perf_counter()
        job.send(sig, to)
        code = job.proc.wait(timeout=300)
        ended = time.perf_counter() - t0
        while processes_of(job.marker) and time.perf_counter() - t0 < 120:
            time.sleep(0.02)
        return ended, time.perf_counter() - t0, before, code
    finally:
        if writer is not None:
            os.close(writer)
        job.kill()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--phases", nargs="+", default=["startup", "perf", "quality", "load"])
    ap.add_argument("--signals", nargs="+", default=["SIGINT", "SIGTERM", "SIGKILL"])
    ap.add_argument("--to", nargs="+", default=["group", "process"], choices=["group", "process"])
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="tradeoff-stop-") as root:
        shared = {"TRADEOFF_CACHE_DIR": f"{root}/builds", "PREFECT_HOME": f"{root}/prefect"}
        print(
            f"{'phase':<8} {'signal':<8} {'to':<8} {'processes':>9} {'exit':>5} {'command ended (s)':>18} "
            f"{'none left (s)':>14}"
        )
        for phase in a.phases:
            for name in a.signals:
                for to in a.to:
                    tmp = Path(tempfile.mkdtemp(dir=root))
                    try:
                        ended, gone, before, code = one(phase, signal.Signals[name], to, tmp, shared)
                    except JobFailed as err:
                        print(f"{phase:<8} {name:<8} {to:<8} failed: {err}")
                        continue
                    print(
                        f"{phase:<8} {name:<8} {to:<8} {before:>9} {code:>5} {ended:>18.2f} {gone:>14.2f}", flush=True
                    )


if __name__ == "__main__":
    main()
