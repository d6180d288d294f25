"""The GX gate's perf checks added with issue #3: power samples, goodput, interval order, MBU."""

from __future__ import annotations

import pytest

from tests.helpers.gate_tables import RUN_ID, expected_rows, valid_tables, write_results
from warehouse.gx_gate import validate_results


def with_perf_extras() -> dict[str, list[dict]]:
    t = valid_tables()
    t["perf_power"] = [
        {
            "run_id": RUN_ID,
            "variant": "f16",
            "scenario": "c1",
            "repeat": 0,
            "device": "gpu0",
            "source": "nvml",
            "sample_index": i,
            "t_s": 0.1 * (i + 1),
            "power_w": 80.0 + i,
            "energy_j": 8.0 * (i + 1),
        }
        for i in range(3)
    ]
    for row in t["perf_summary"]:
        row.update(
            {
                "request_goodput": row["request_throughput"] * 0.5,
                "ttft_ms_mean_ci_low": 30.0,
                "ttft_ms_mean_ci_high": 70.0,
            }
        )
        if row["concurrency"] == 1:
            row.update({"mbu_pct": 40.0, "mem_bandwidth_gb_s": 25.0, "mem_bandwidth_method": "cpu: copy"})
    return t


def negative_power(t):
    t["perf_power"][1]["power_w"] = -3.0


def goodput_above_throughput(t):
    row = t["perf_summary"][0]
    row["request_goodput"] = row["request_throughput"] * 2


def inverted_interval(t):
    t["perf_summary"][0].update({"ttft_ms_mean_ci_low": 90.0, "ttft_ms_mean_ci_high": 20.0})


def mbu_without_method(t):
    t["perf_summary"][0]["mem_bandwidth_method"] = None


def test_perf_extras_pass(tmp_path):
    tables = with_perf_extras()
    report = validate_results(write_results(tmp_path, tables), expected_rows(tables))
    assert report.failures() == []


@pytest.mark.parametrize(
    "corrupt, table, expectation",
    [
        (negative_power, "perf_power", "expect_column_values_to_be_between(power_w)"),
        (
            goodput_above_throughput,
            "perf_summary",
            "expect_column_pair_values_a_to_be_greater_than_b(request_throughput, request_goodput)",
        ),
        (
            inverted_interval,
            "perf_summary",
            "expect_column_pair_values_a_to_be_greater_than_b(ttft_ms_mean_ci_high, ttft_ms_mean_ci_low)",
        ),
        (mbu_without_method, "perf_summary", "expect_column_values_to_not_be_null(mem_bandwidth_method"),
    ],
    ids=lambda p: p.__name__ if callable(p) else None,
)
def test_perf_corruption_fails_naming_the_expectation(tmp_path, corrupt, table, expectation):
    tables = with_perf_extras()
    expected = expected_rows(tables)
    corrupt(tables)
    report = validate_results(write_results(tmp_path, tables), expected)
    assert any(f.startswith(f"{table}: {expectation}") for f in report.failures()), report.failures()
    assert [t.table for t in report.tables if not t.success] == [table]
