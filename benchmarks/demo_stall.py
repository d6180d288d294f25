"""Benchmark: does a stall in the reference's perf window still decide the demo? (issue 36, done-when 2)

Runs `tradeoff run` on a config (default the demo's, into its own warehouse) while watching the reference
variant's server log; once the server has started `--after` requests (the warm-up and the first measured one of
its first window), another process is busy on every core of the host for `--busy-s` seconds, outside this
process's tree, as another user's job would be. Then prints `tradeoff recommend`'s decision and, per step of the
reference, what the host-noise guard saw and did (windows measured again, windows kept disturbed, the most CPU
other processes used). Compare its first line with a quiet run's (`make demo`): the decision should be the same.

Usage: .venv/bin/python -m benchmarks.demo_stall [--config configs/demo.yaml] [--busy-s 10] [--after 2]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import duckdb
import yaml

from benchmarks.noisy_neighbour import busy, stop

ROOT = Path(__file__).resolve().parents[1]

SLOT_STARTED = "launch_slot_"  # llama-server's log line for a request that took a slot


def newest_run(runs: Path, since: float) -> Path | None:
    fresh = [p for p in runs.glob("*") if p.is_dir() and p.stat().st_mtime >= since]
    return max(fresh, key=lambda p: p.stat().st_mtime) if fresh else None


def stall_when_started(
    runs: Path, since: float, reference: str, after: int, busy_s: float, done: threading.Event
) -> None:
    """Wait for the reference's server log to show `after` started requests, then keep every core busy `busy_s`."""
    while not done.is_set():
        run = newest_run(runs, since)
        log = run / "logs" / f"{reference}.server.log" if run else None
        if log and log.exists() and log.read_text(errors="replace").count(SLOT_STARTED) >= after:
            print(f"stall: {os.cpu_count()} busy loops for {busy_s:g} s from {time.strftime('%H:%M:%S')}", flush=True)
            pids = busy(busy_s, os.cpu_count() or 1)
            time.sleep(busy_s)
            stop(pids)
            return
        time.sleep(0.1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="configs/demo.yaml")
    ap.add_argument("--busy-s", type=float, default=10.0)
    ap.add_argument("--after", type=int, default=2, help="requests the reference's server has started first")
    args = ap.parse_args()
    cfg = yaml.safe_load(Path(args.config).read_text())
    reference = next(v["name"] for v in cfg["variants"] if v.get("reference"))
    with tempfile.TemporaryDirectory() as tmp:
        warehouse = Path(tmp) / "stall.duckdb"
        cfg["warehouse"] = str(warehouse)
        config = Path(tmp) / "stall.yaml"
        config.write_text(yaml.safe_dump(cfg, sort_keys=False))
        tradeoff = [sys.executable, "-m", "flows.cli"]
        done, t0 = threading.Event(), time.time()
        watcher = threading.Thread(
            target=stall_when_started, args=(ROOT / "runs", t0, reference, args.after, args.busy_s, done), daemon=True
        )
        watcher.start()
        rc = subprocess.run([*tradeoff, "run", str(config)], cwd=ROOT).returncode
        done.set()
        print(f"run: exit {rc}, {time.time() - t0:.0f} s")
        subprocess.run([*tradeoff, "recommend", "--warehouse", str(warehouse)], cwd=ROOT)
        con = duckdb.connect(str(warehouse), read_only=True)
        rows = con.execute(
            "select scenario, windows_kept, windows_remeasured, windows_disturbed, host_other_cpu_pct, "
            "host_noise_note from perf_summary where variant = ? order by scenario",
            [reference],
        ).fetchall()
        for r in rows:
            print(f"{reference} {r[0]}: {r[1]} windows kept, {r[2]} measured again, {r[3]} kept disturbed, "
                  f"others <= {r[4]} % of a core; {r[5]}")  # fmt: skip


if __name__ == "__main__":
    main()
