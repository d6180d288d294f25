"""What keeping the last good warehouse costs (prints numbers; not a test).

A warehouse of --runs runs of --rows perf_requests rows each gets one more such run, three ways:
1. in place: no protection (a full disk during the checkpoint can leave the file unopenable);
2. copy and swap: `load_run` as it is (copy the file, load the copy, os.replace it in);
3. snapshot, then in place: copy the file aside first, load in place, restore the copy on failure.
Each is timed (wall and process CPU seconds) --repeat times on a fresh copy of the same starting
file; the median is printed with the file sizes. The starting file comes from the page cache
in every case, as it would right after the previous night's load.

Usage: python -m benchmarks.bench_warehouse_safety [--rows 1000000] [--runs 4] [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from benchmarks.bench_warehouse import big_run
from warehouse.db import load_run, open_warehouse, refresh_views
from warehouse.ingest import insert_run, read_run_parts


def starting_warehouse(db: Path, run_dir: Path, n_runs: int) -> None:
    """`n_runs` copies of the big run under other run ids, loaded with SQL."""
    con = open_warehouse(db)
    res = run_dir / "results"
    for i in range(n_runs):
        for table in ("runs", "variants", "perf_requests"):
            files = sorted((res / table).glob("*.parquet"))
            con.execute(
                f"insert into {table} by name select * replace ('night{i}' as run_id) "
                f"from read_parquet({[str(f) for f in files]})"
            )
    refresh_views(con)
    con.execute("checkpoint")
    con.close()


def in_place(run_dir: Path, db: Path) -> None:
    parts = read_run_parts(run_dir / "results")
    con = open_warehouse(db)
    try:
        insert_run(con, parts)
        refresh_views(con)
        con.execute("checkpoint")
    finally:
        con.close()


def _copy_synced(src: Path, dst: Path) -> None:
    shutil.copyfile(src, dst)
    fd = os.open(dst, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def snapshot_then_in_place(run_dir: Path, db: Path) -> None:
    snap = db.with_name(db.name + ".snapshot")
    _copy_synced(db, snap)
    try:
        in_place(run_dir, db)
    except Exception:
        os.replace(snap, db)
        raise
    snap.unlink()


def copy_and_swap(run_dir: Path, db: Path) -> None:
    load_run(run_dir, db)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--runs", type=int, default=4)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        run_dir = big_run(tmp, args.rows)
        start = tmp / "start.duckdb"
        starting_warehouse(start, run_dir, args.runs)
        parquet = sum(p.stat().st_size for p in (run_dir / "results").rglob("*.parquet"))
        print(
            f"starting warehouse: {args.runs} runs x {args.rows:,} perf_requests rows, "
            f"{start.stat().st_size / 2**20:,.0f} MiB; the new run's Parquet {parquet / 2**20:,.0f} MiB"
        )
        for name, fn in (
            ("in place (unprotected)", in_place),
            ("copy and swap", copy_and_swap),
            ("snapshot, then in place", snapshot_then_in_place),
        ):
            walls, cpus, size = [], [], 0
            for _ in range(args.repeat):
                db = tmp / "work" / "tradeoff.duckdb"
                shutil.rmtree(db.parent, ignore_errors=True)
                db.parent.mkdir()
                _copy_synced(start, db)
                w, c = time.perf_counter(), time.process_time()
                fn(run_dir, db)
                walls.append(time.perf_counter() - w)
                cpus.append(time.process_time() - c)
                size = db.stat().st_size
            print(
                f"{name:24s}: {statistics.median(walls):6.2f} s wall, {statistics.median(cpus):6.2f} s CPU "
                f"(median of {args.repeat}; runs {', '.join(f'{w:.2f}' for w in walls)} s); "
                f"file after {size / 2**20:,.0f} MiB"
            )


if __name__ == "__main__":
    main()
