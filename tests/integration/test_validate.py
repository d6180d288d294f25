"""The Great Expectations gate on small realistic result tables: a valid run passes, each corruption fails by name."""

from __future__ import annotations

import json

import pytest

from tests.helpers.gate_tables import (
    add_second_reference,
    drop_energy_note,
    drop_request,
    expected_rows,
    miscount_requests,
    set_fraction_above_one,
    set_inf_ttft,
    set_negative_kl,
    set_ttft_after_e2el,
    set_zero_output_tokens,
    valid_tables,
    write_results,
)
from warehouse.contract import TABLES
from warehouse.gx_gate import validate_results


def test_valid_run_passes_quietly_and_writes_validation_json(tmp_path, capfd):
    tables = valid_tables()
    results = write_results(tmp_path, tables)
    report = validate_results(results, expected_rows(tables))
    out, err = capfd.readouterr()
    assert "Calculating Metrics" not in out + err  # GX progress bars are off
    assert report.failures() == []
    assert report.success
    assert [t.table for t in report.tables] == list(TABLES)
    assert {t.table: t.rows for t in report.tables} == expected_rows(tables)
    saved = json.loads((results.parent / "validation.json").read_text())
    assert saved["success"] is True and len(saved["tables"]) == len(TABLES)


@pytest.mark.parametrize(
    "corrupt, table, expectation",
    [
        (set_inf_ttft, "perf_requests", "expect_column_values_to_be_between(ttft_ms where status == 'ok')"),
        (
            set_ttft_after_e2el,
            "perf_requests",
            "expect_column_pair_values_a_to_be_greater_than_b(e2el_ms, ttft_ms where status == 'ok')",
        ),
        (
            set_zero_output_tokens,
            "perf_requests",
            "expect_column_values_to_be_between(output_tokens where status == 'ok')",
        ),
        (
            set_fraction_above_one,
            "quality_scores",
            "expect_column_values_to_be_between(value where unit == 'fraction')",
        ),
        (set_negative_kl, "quality_scores", "expect_column_values_to_be_between(value where unit == 'nats')"),
        (drop_request, "perf_requests", "expect_table_row_count_to_equal(): observed 15, expected 16"),
        (add_second_reference, "variants", "expect_column_sum_to_be_between(is_reference): observed 2, expected 1"),
        (
            drop_energy_note,
            "perf_summary",
            "expect_column_values_to_not_be_null(energy_note where energy_j_per_token is null)",
        ),
        (miscount_requests, "perf_summary", "expect_column_pair_values_to_be_equal(num_counted, num_requests)"),
    ],
    ids=lambda p: p.__name__ if callable(p) else None,
)
def test_corruption_fails_naming_the_expectation(tmp_path, corrupt, table, expectation):
    tables = valid_tables()
    expected = expected_rows(tables)
    corrupt(tables)
    report = validate_results(write_results(tmp_path, tables), expected)
    assert not report.success
    assert any(f.startswith(f"{table}: {expectation}") for f in report.failures()), report.failures()
    assert [t.table for t in report.tables if not t.success] == [table]


def test_empty_tables_fail_when_rows_are_expected(tmp_path):
    tables = valid_tables()
    expected = expected_rows(tables)
    tables["perf_requests"] = []
    report = validate_results(write_results(tmp_path, tables), expected)
    requests = next(t for t in report.tables if t.table == "perf_requests")
    assert not report.success and requests.rows == 0
    assert "expect_table_row_count_to_equal(): observed 0, expected 16" in requests.failures
