"""How long `tradeoff run` takes to stop on a signal, and until no process of the run is left.

    python benchmarks/stop_latency.py [--phases startup perf quality] [--signals SIGINT SIGTERM SIGKILL]

Each (phase, signal): the real CLI on configs/tiny.yaml cut to its reference variant (as
tests/e2e/test_faults_orphans.py runs it), the signal sent in the phase, then two times from the
signal: until the command has ended, and until /proc holds no process of the run (engine
server, Prefect's ephemeral API). Prints one line per case.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.e2e.test_faults_orphans import processes_of, reach, tiny_one_variant  # noqa: E402


def one(phase: str, sig: signal.Signals, tmp: Path, shared: dict[str, str]) -> tuple[float, float, int]:
    """(seconds to the command's end, seconds until no process of the run is left, processes seen before)."""
    config = tmp / "tiny-one.yaml"
    config.write_text(yaml.safe_dump(tiny_one_variant()))
    runs = tmp / "runs"
    marker = f"TRADEOFF_RUNS_DIR={runs}".encode()
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}
    env.update(shared, TRADEOFF_RUNS_DIR=str(runs), TRADEOFF_WAREHOUSE=str(tmp / "wh.duckdb"))
    log = tmp / "run.log"
    with log.open("w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "flows.cli", "run", str(config)], cwd=ROOT, env=env,
                                stdout=out, stderr=subprocess.STDOUT)
    try:
        reach(phase, runs, marker, proc, log)
        before = len(processes_of(marker))
        t0 = time.perf_counter()
        proc.send_signal(sig)
        proc.wait(timeout=300)
        ended = time.perf_counter() - t0
        while processes_of(marker) and time.perf_counter() - t0 < 120:
            time.sleep(0.02)
        return ended, time.perf_counter() - t0, before
    finally:
        if proc.poll() is None:
            proc.kill()
        for pid in processes_of(marker):
            os.kill(pid, signal.SIGKILL)


def main() -> None:
    import pytest  # reach() reports a run that ended early through pytest.fail

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--phases", nargs="+", default=["startup", "perf", "quality"])
    ap.add_argument("--signals", nargs="+", default=["SIGINT", "SIGTERM", "SIGKILL"])
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="tradeoff-stop-") as root:
        shared = {"TRADEOFF_CACHE_DIR": f"{root}/builds", "PREFECT_HOME": f"{root}/prefect"}
        print(f"{'phase':<8} {'signal':<8} {'processes':>9} {'command ended (s)':>18} {'none left (s)':>14}")
        for phase in a.phases:
            for name in a.signals:
                tmp = Path(tempfile.mkdtemp(dir=root))
                try:
                    ended, gone, before = one(phase, signal.Signals[name], tmp, shared)
                except pytest.fail.Exception as err:
                    print(f"{phase:<8} {name:<8} failed: {err}")
                    continue
                print(f"{phase:<8} {name:<8} {before:>9} {ended:>18.2f} {gone:>14.2f}", flush=True)


if __name__ == "__main__":
    main()
