"""Report: latest run, takeaway sentences and the text table, over runs loaded into a temporary warehouse."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

import pandas as pd
import pytest

from tasks.report.text import format_report, latest_run_id, takeaways, tradeoff_frame
from tests.helpers.sample_run import write_sample_run
from warehouse.db import WarehouseError, load_run, open_warehouse

Q2_K = "q2_k vs q4_1: 1.30x tokens/s, TTFT -10 %, TTFT jitter 2.0x, arithmetic_accuracy -12.0 points, energy n/a"
Q8_0 = "q8_0: failed (server exited with code 1)"


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "tradeoff.duckdb"
    load_run(write_sample_run(tmp_path), path)
    return path


@pytest.fixture
def frame(db: Path) -> pd.DataFrame:
    with open_warehouse(db, read_only=True) as con:
        return tradeoff_frame(con, "r1")


def test_latest_run_id(tmp_path: Path) -> None:
    path = tmp_path / "tradeoff.duckdb"
    with open_warehouse(path) as con:
        assert latest_run_id(con) is None
    # Loaded newest first: the order of loading must not matter.
    load_run(write_sample_run(tmp_path, "new", datetime(2025, 3, 1, tzinfo=timezone.utc)), path)
    load_run(write_sample_run(tmp_path, "old", datetime(2025, 1, 1, tzinfo=timezone.utc)), path)
    with open_warehouse(path, read_only=True) as con:
        assert latest_run_id(con) == "new"


def test_frame_reference_first(frame: pd.DataFrame) -> None:
    assert list(frame["variant"]) == ["q4_1", "q2_k", "q8_0"]


def test_takeaways(frame: pd.DataFrame) -> None:
    assert takeaways(frame, "fraction") == [Q2_K, Q8_0]


@pytest.mark.parametrize(
    "column, value, expected",
    [
        (
            "ttft_change_pct_vs_reference",
            None,
            "q2_k vs q4_1: 1.30x tokens/s, TTFT jitter 2.0x, arithmetic_accuracy -12.0 points, energy n/a",
        ),
        (
            "speedup_vs_reference",
            None,
            "q2_k vs q4_1: TTFT -10 %, TTFT jitter 2.0x, arithmetic_accuracy -12.0 points, energy n/a",
        ),
        ("quality_delta_vs_reference", None, "q2_k vs q4_1: 1.30x tokens/s, TTFT -10 %, TTFT jitter 2.0x, energy n/a"),
        (
            "energy_j_per_token",
            0.24,
            "q2_k vs q4_1: 1.30x tokens/s, TTFT -10 %, TTFT jitter 2.0x, arithmetic_accuracy -12.0 points, "
            "energy 0.80x J/token",
        ),
    ],
)
def test_takeaway_clauses(frame: pd.DataFrame, column: str, value: float | None, expected: str) -> None:
    frame.loc[frame["variant"] == "q2_k", column] = value
    assert takeaways(frame, "fraction")[0] == expected


def test_takeaway_quality_delta_carries_its_interval_and_verdict(frame: pd.DataFrame) -> None:
    assert "quality_delta_ci_low" in frame.columns and "quality_verdict" in frame.columns
    q2 = frame["variant"] == "q2_k"
    frame.loc[q2, ["quality_delta_ci_low", "quality_delta_ci_high"]] = [-0.2, -0.04]
    frame.loc[q2, "quality_verdict"] = "worse"
    assert "arithmetic_accuracy -12.0 points (95 % CI -20.0..-4.0, worse), energy" in takeaways(frame, "fraction")[0]
    frame.loc[q2, "quality_delta_ci_high"] = 0.05
    frame.loc[q2, "quality_verdict"] = "inconclusive"
    assert "(95 % CI -20.0..+5.0, inconclusive)" in takeaways(frame, "fraction")[0]


@pytest.mark.parametrize(
    "unit, clause",
    [
        ("fraction", "arithmetic_accuracy -12.0 points"),
        ("count", "arithmetic_accuracy -0.12 count"),
        (None, "arithmetic_accuracy -0.12,"),
    ],
)
def test_quality_delta_units(frame: pd.DataFrame, unit: str | None, clause: str) -> None:
    assert clause in takeaways(frame, unit)[0]


def test_report_nats_metric(tmp_path: Path) -> None:
    path = tmp_path / "tradeoff.duckdb"
    load_run(write_sample_run(tmp_path, primary="fidelity.kl-mean"), path)
    with open_warehouse(path, read_only=True) as con:
        text = format_report(con)
    assert "fidelity.kl-mean" in text
    want = "- q2_k vs q4_1: 1.30x tokens/s, TTFT -10 %, TTFT jitter 2.0x, fidelity_kl_mean +0.031 nats, energy n/a"
    assert want in text


def test_format_report(db: Path) -> None:
    with open_warehouse(db, read_only=True) as con:
        text = format_report(con, "r1")
    lines = text.splitlines()
    assert lines[0] == "run r1, started 2025-01-02 03:04:05 UTC"
    header = next(line for line in lines if "variant" in line)
    assert [c.strip() for c in header.strip("| ").split("|")] == [
        "variant",
        "engine",
        "quant",
        "spec",
        "peak tok/s",
        "best tok/s",
        "TTFT ms mean",
        "TTFT ms p99",
        "TTFT CV %",
        "arithmetic.accuracy",
        "energy J/token",
    ]
    q2 = next(line for line in lines if line.startswith("| q2_k"))
    assert [c.strip() for c in q2.strip("| ").split("|")] == [
        "q2_k",
        "llama.cpp",
        "q2_k",
        "",
        "170.0",
        "156.0",
        "90.0",
        "120.0",
        "20.0",
        "0.680",
        "NULL",
    ]
    # q8_0 failed: energy NULL too, but with no note there is nothing to footnote.
    assert [line for line in lines if line.startswith("energy NULL")] == [
        "energy NULL for q2_k: RAPL not readable: permission denied"
    ]
    assert lines[-2:] == [f"- {Q2_K}", f"- {Q8_0}"]
    # the batching knee: each variant's closed-loop steps by concurrency, throughput over its lowest's
    knee = lines.index("Output throughput by concurrency (closed-loop steps; x: over the lowest concurrency):")
    assert lines[knee + 1 : knee + 3] == [
        "q2_k: c1 65.0 tok/s (1.00x), TPOT 14.0 ms; c4 156.0 tok/s (2.40x), TPOT 24.0 ms",
        "q4_1: c1 50.0 tok/s (1.00x), TPOT 19.0 ms; c4 120.0 tok/s (2.40x), TPOT 29.0 ms",
    ]


def test_report_empty_warehouse(tmp_path: Path) -> None:
    path = tmp_path / "empty.duckdb"
    with open_warehouse(path) as con, pytest.raises(WarehouseError) as e:
        format_report(con)
    assert str(e.value) == f"no runs in {path}; run `tradeoff run configs/demo.yaml` first"


def test_report_unknown_run(db: Path) -> None:
    with open_warehouse(db, read_only=True) as con, pytest.raises(WarehouseError) as e:
        format_report(con, "nope")
    assert str(e.value) == f"no run nope in {db}; latest runs: r1"


def test_failed_requests_are_counted_by_cause_per_variant_and_step(tmp_path: Path) -> None:
    """The nightly's report says why requests failed (issue 49): a count per cause, per variant and step."""
    from tasks.report.text import error_lines

    path = tmp_path / "tradeoff.duckdb"
    load_run(write_sample_run(tmp_path), path)
    with open_warehouse(path) as con:
        assert error_lines(con, "r1") == []  # none failed
        con.execute(
            'update perf_requests set status = \'error\', error = \'HTTP 503: {"error": {"message": "overloaded"}}\' '
            "where variant = 'q2_k' and not is_warmup and request_index % 2 = 0"
        )
        n = con.execute(
            "select count(*) from perf_requests where variant = 'q2_k' and status = 'error' and not is_warmup"
        ).fetchone()[0]
        scenario = con.execute("select min(scenario) from perf_requests where variant = 'q2_k'").fetchone()[0]
        lines = error_lines(con, "r1")
        assert n > 0 and lines and all(line.startswith("errors: q2_k ") for line in lines)
        assert f"errors: q2_k {scenario}: HTTP 503 overloaded x" in lines[0]
        assert sum(int(line.rsplit(" x", 1)[1]) for line in lines) == n
        assert any(line in format_report(con, "r1").splitlines() for line in lines)


def test_brief_report_keeps_the_table_takeaways_and_power_and_leaves_the_evidence(tmp_path: Path, capsys) -> None:
    """`make demo`'s short report before the recommendation's screen: `tradeoff report --brief` leaves out the
    evidence lines (here: the host's), keeps the rest of the report as it is."""
    from flows.cli import main

    path = tmp_path / "tradeoff.duckdb"
    load_run(write_sample_run(tmp_path), path)
    with open_warehouse(path) as con:  # a window measured again: the host's evidence lines
        con.execute(
            "update perf_summary set windows_kept = 3, windows_remeasured = 1, windows_disturbed = 0, "
            "host_noise_note = 'repeat 0: measured again 1x', host_other_cpu_pct = 3, host_steal_pct = 0, "
            "host_noise_max_pct = 25 where variant = 'q2_k'"
        )
        full, brief = format_report(con, "r1").splitlines(), format_report(con, "r1", brief=True).splitlines()
    host = [ln for ln in full if ln.startswith("host:")]
    assert host and [ln for ln in full if ln not in host] == brief
    assert main(["report", "--warehouse", str(path), "--run", "r1", "--brief"]) == 0
    assert capsys.readouterr().out.splitlines() == brief
