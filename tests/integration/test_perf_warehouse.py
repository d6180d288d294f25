"""The perf tables of issue #3 in the warehouse: perf_power loads, v_tradeoff shows goodput, MBU and the TTFT
interval."""

from __future__ import annotations

import html

import duckdb
import pyarrow.parquet as pq
import pytest

from tests.helpers.sample_run import write_sample_run
from warehouse.contract import write_table
from warehouse.db import load_run, open_warehouse


def test_power_goodput_mbu_reach_the_views(tmp_path):
    run_dir = write_sample_run(tmp_path)
    res = run_dir / "results"
    rows = [r for r in pq.read_table(res / "perf_summary" / "q4_1.parquet").to_pylist()]
    for r in rows:  # the headline scenario is the concurrency-1 one
        r.update(
            {
                "request_goodput": 0.4 * r["concurrency"],
                "mbu_pct": 31.5 if r["concurrency"] == 1 else None,
                "ttft_ms_mean_ci_low": 90.0,
                "ttft_ms_mean_ci_high": 111.0,
            }
        )
    write_table(res, "perf_summary", "q4_1", rows)
    write_table(
        res,
        "perf_power",
        "q4_1",
        [
            {
                "run_id": "r1",
                "variant": "q4_1",
                "scenario": "single",
                "repeat": 0,
                "device": "gpu0",
                "source": "nvml",
                "sample_index": i,
                "t_s": 0.1 * i,
                "power_w": 250.0,
                "energy_j": 25.0 * i,
            }
            for i in range(4)
        ],
    )
    db = tmp_path / "wh.duckdb"
    assert load_run(run_dir, db)["perf_power"] == 4
    with open_warehouse(db, read_only=True) as con:
        got = con.execute(
            "select goodput_req_s, mbu_pct, ttft_ms_mean_ci_low, ttft_ms_mean_ci_high from v_tradeoff "
            "where variant = 'q4_1'"
        ).fetchall()
        assert got == [(pytest.approx(0.4), 31.5, 90.0, 111.0)]
        assert con.execute("select sum(energy_j) from perf_power").fetchall() == [(150.0,)]


def test_reload_replaces_power_samples(tmp_path):
    run_dir = write_sample_run(tmp_path)
    sample = {
        "run_id": "r1",
        "variant": "q2_k",
        "scenario": "single",
        "repeat": 0,
        "device": "package-0",
        "source": "rapl",
        "sample_index": 0,
        "t_s": 0.1,
        "power_w": 30.0,
        "energy_j": 3.0,
    }
    write_table(run_dir / "results", "perf_power", "q2_k", [sample])
    db = tmp_path / "wh.duckdb"
    load_run(run_dir, db)
    load_run(run_dir, db)
    with duckdb.connect(str(db), read_only=True) as con:
        assert con.execute("select count(*) from perf_power").fetchall() == [(1,)]


def test_what_else_used_the_host_reaches_the_warehouse_the_report_and_the_recommendation(tmp_path):
    """Migration 016: the host-noise columns of a step load, and the report and the recommendation say which windows
    were measured again, what was kept disturbed, and the threshold."""
    from tasks.report.html import decision_section
    from tasks.report.recommend import format_recommendation
    from tasks.report.text import format_report

    run_dir = write_sample_run(tmp_path)
    res = run_dir / "results"
    rows = pq.read_table(res / "perf_summary" / "q4_1.parquet").to_pylist()
    for i, r in enumerate(rows):
        r.update(
            {
                "host_other_cpu_pct": 12.0 + i,
                "host_steal_pct": 2.0,
                "host_load1": 1.2,
                "host_noise_max_pct": 25.0,
                "windows_kept": 3,
                "windows_remeasured": 1 if i == 0 else 0,
                "windows_disturbed": 0,
                "host_noise_note": "repeat 0: measured again 1x (other processes used 187 % of a core (> 25 %))"
                if i == 0
                else None,
            }
        )
    write_table(res, "perf_summary", "q4_1", rows)
    db = tmp_path / "wh.duckdb"
    load_run(run_dir, db)
    with open_warehouse(db, read_only=True) as con:
        got = con.execute(
            "select sum(windows_remeasured), max(host_other_cpu_pct), max(host_noise_max_pct) from perf_summary "
            "where variant = 'q4_1'"
        ).fetchall()
        assert got == [(1, 12.0 + len(rows) - 1, 25.0)]
        report = format_report(con)
        recommendation = format_recommendation(con)
        page = decision_section(con, "r1")
    said = (
        f"host: q4_1 {rows[0]['scenario']}: 3 windows kept, 1 measured again, 0 kept disturbed "
        "(repeat 0: measured again 1x (other processes used 187 % of a core (> 25 %)))"
    )
    worst = f"other processes used at most {12 + len(rows) - 1:.0f} % of a core and steal 2 % (a window over 25 %"
    for text in (report, recommendation, html.unescape(page)):
        assert said in text and worst in text, text
