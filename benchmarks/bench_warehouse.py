"""Warehouse benchmark (prints numbers; not a test).

1. Load one run with 1,000,000 perf_requests rows through `load_run` (parts checked, then DuckDB's
   read_parquet into a copy of the warehouse swapped in when complete). Goal: < 5 s on a 2-core
   machine. Process CPU seconds are printed too: on a shared machine they vary less than wall time.
2. Query v_tradeoff over 1,000 synthetic runs (4 variants, 2 scenarios each), all runs and one
   run. Goal: < 100 ms.

Usage: python benchmarks/bench_warehouse.py [--rows 1000000] [--runs 1000]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from warehouse.contract import SCHEMAS, write_table
from warehouse.db import load_run, open_warehouse

VARIANTS = ("q4_1", "q3_k_m", "q2_k", "q4_1-spec")


def big_run(root: Path, n_rows: int) -> Path:
    """One run whose perf_requests part holds `n_rows` requests with 32 chunk timings each."""
    run_dir = root / "big"
    res = run_dir / "results"
    write_table(
        res,
        "runs",
        "run",
        [
            {
                "run_id": "big",
                "config_name": "bench",
                "started_at": datetime.now(timezone.utc),
                "status": "ok",
                "reference_variant": "q4_1",
                "primary_quality_metric": "arithmetic.accuracy",
            }
        ],
    )
    write_table(
        res,
        "variants",
        "run",
        [
            {
                "run_id": "big",
                "variant": v,
                "engine": "llama.cpp",
                "quantization": v,
                "is_reference": v == "q4_1",
                "status": "ok",
            }
            for v in VARIANTS
        ],
    )
    rng = np.random.default_rng(0)
    ttft = rng.gamma(4.0, 25.0, n_rows)
    offsets = pa.array(
        [ttft[i] + np.arange(32, dtype=np.float32) * 20 for i in range(0, n_rows)], type=pa.list_(pa.float32())
    )
    idx = np.arange(n_rows)
    cols = {
        "run_id": pa.array(["big"] * n_rows),
        "variant": pa.array([VARIANTS[i % 4] for i in idx]),
        "scenario": pa.array([f"c{1 + (i // 4) % 8}" for i in idx]),
        "concurrency": pa.array((1 + (idx // 4) % 8).astype(np.int32)),
        "request_index": pa.array((idx // 32).astype(np.int32)),
        "is_warmup": pa.array(np.zeros(n_rows, bool)),
        "status": pa.array(["ok"] * n_rows),
        "ttft_ms": pa.array(ttft),
        "e2el_ms": pa.array(ttft + 640.0),
        "output_tokens": pa.array(np.full(n_rows, 32, np.int32)),
        "chunk_offsets_ms": offsets,
    }
    schema = SCHEMAS["perf_requests"]
    table = pa.table({f.name: cols.get(f.name, pa.nulls(n_rows, f.type)) for f in schema}, schema=schema)
    (res / "perf_requests").mkdir(parents=True, exist_ok=True)
    pq.write_table(table, res / "perf_requests" / "all.parquet")
    return run_dir


def synthetic_runs(db: Path, n_runs: int) -> None:
    """`n_runs` small runs inserted with SQL (4 variants x 2 scenarios, 2 quality metrics each)."""
    con = open_warehouse(db)
    t0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
    con.execute(
        """
        insert into runs (run_id, config_name, started_at, status, hardware_id, reference_variant,
                          primary_quality_metric)
        select 'run' || i, 'bench', ?::timestamptz + i * interval 1 day, 'ok', 'hw', 'q4_1', 'arithmetic.accuracy'
        from range(?) t(i)""",
        [t0, n_runs],
    )
    con.execute(
        """
        insert into variants (run_id, variant, engine, quantization, is_reference, status)
        select 'run' || i, v, 'llama.cpp', v, v = 'q4_1', 'ok'
        from range(?) t(i), unnest(?::varchar[]) u(v)""",
        [n_runs, list(VARIANTS)],
    )
    con.execute(
        """
        insert into perf_summary (run_id, variant, scenario, concurrency, num_requests, num_ok, output_throughput,
                                  peak_output_throughput, ttft_ms_mean, ttft_ms_p99, ttft_cv_pct_median)
        select 'run' || i, v, 'c' || c, c, 10, 10, 40 + random() * 40, 90, 100 + random() * 50, 200, 10
        from range(?) t(i), unnest(?::varchar[]) u(v), (values (1), (2)) s(c)""",
        [n_runs, list(VARIANTS)],
    )
    con.execute(
        """
        insert into quality_scores (run_id, variant, suite, metric, value, n, unit, higher_is_better, is_primary)
        select 'run' || i, v, s, m, random(), 80, 'fraction', true, s = 'arithmetic'
        from range(?) t(i), unnest(?::varchar[]) u(v),
             (values ('arithmetic', 'accuracy'), ('fidelity', 'top1_agreement')) q(s, m)""",
        [n_runs, list(VARIANTS)],
    )
    from warehouse.db import refresh_views

    refresh_views(con)
    con.close()


def timed(fn, repeat: int = 5) -> float:
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--runs", type=int, default=1_000)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        run_dir = big_run(tmp, args.rows)
        db = tmp / "load.duckdb"
        t, c = time.perf_counter(), time.process_time()
        counts = load_run(run_dir, db)
        first, first_cpu = time.perf_counter() - t, time.process_time() - c
        t, c = time.perf_counter(), time.process_time()
        load_run(run_dir, db)  # idempotent reload: delete + insert
        again, again_cpu = time.perf_counter() - t, time.process_time() - c
        print(
            f"load {counts['perf_requests']:,} perf_requests rows: {first:.2f} s (reload {again:.2f} s; goal < 5 s); "
            f"CPU {first_cpu:.2f} s (reload {again_cpu:.2f} s)"
        )
        db2 = tmp / "query.duckdb"
        synthetic_runs(db2, args.runs)
        con = open_warehouse(db2, read_only=True)
        all_runs = timed(lambda: con.execute("select * from v_tradeoff").fetchall())
        one_run = timed(lambda: con.execute("select * from v_tradeoff where run_id = 'run500'").fetchall())
        ((n,),) = con.execute("select count(*) from v_tradeoff").fetchall()
        print(
            f"v_tradeoff over {args.runs:,} runs ({n:,} rows): all {all_runs * 1000:.1f} ms, one run "
            f"{one_run * 1000:.1f} ms "
            f"(best of 5; goal < 100 ms)"
        )
        con.close()


if __name__ == "__main__":
    main()
