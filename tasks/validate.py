"""The Great Expectations gate: one suite per result table, run on a run's Parquet results. Plain Python.

Each table of `tasks.tables` is read whole (all parts) and validated as a pandas dataframe
in an ephemeral GX context; nothing is stored in a GX project. Latency and throughput
checks apply to successful requests only (`status == "ok"`, `num_ok > 0`), because errored
and incomplete requests have NULL latencies by design. The report lists each failed
expectation in one line and is written next to the results as `validation.json`.

GX takes seconds to import, so it is imported on first use, not with this module.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable

import pandas as pd

from tasks.tables import TABLES, read_table

# Upper bound for "finite": no real latency (ms), throughput or energy comes near it; inf does.
MAX_FINITE = 1e9
MAX_UNEXPECTED_SHOWN = 5


@dataclass
class TableValidation:
    table: str
    success: bool
    rows: int
    failures: list[str]  # "<expectation type>(<column(s)>): <observed / unexpected sample>"


@dataclass
class ValidationReport:
    success: bool
    tables: list[TableValidation]

    def failures(self) -> list[str]:
        return [f"{t.table}: {f}" for t in self.tables for f in t.failures]

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2)


def _gx():
    """great_expectations, its expectations module and the row-condition `Column`, imported on first use."""
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")
    import great_expectations as gx
    import great_expectations.expectations as gxe
    from great_expectations.expectations.row_conditions import Column

    return gx, gxe, Column


def _row_count(expected: int | None) -> list:
    _, gxe, _ = _gx()
    return [] if expected is None else [gxe.ExpectTableRowCountToEqual(value=expected)]


def _positive_finite(column: str, where=None) -> list:
    """`column` present and in (0, MAX_FINITE] on the rows `where` selects."""
    _, gxe, _ = _gx()
    return [gxe.ExpectColumnValuesToNotBeNull(column=column, row_condition=where),
            gxe.ExpectColumnValuesToBeBetween(column=column, min_value=0, max_value=MAX_FINITE, strict_min=True,
                                              row_condition=where)]


def runs_suite(expected: int | None = None):
    """Exactly one row per run, whatever `expected` says."""
    gx, gxe, _ = _gx()
    return gx.ExpectationSuite(name="runs", expectations=[
        gxe.ExpectTableRowCountToEqual(value=1),
        gxe.ExpectColumnValuesToNotBeNull(column="run_id"),
    ])


def variants_suite(expected: int | None):
    gx, gxe, _ = _gx()
    return gx.ExpectationSuite(name="variants", expectations=[
        *_row_count(expected),
        gxe.ExpectColumnValuesToNotBeNull(column="status"),
        gxe.ExpectColumnValuesToBeInSet(column="status", value_set=["ok", "failed"]),
        gxe.ExpectColumnValuesToNotBeNull(column="is_reference"),
        # The sum of a boolean column counts its True values: exactly one reference.
        gxe.ExpectColumnSumToBeBetween(column="is_reference", min_value=1, max_value=1),
    ])


def perf_requests_suite(expected: int | None):
    gx, gxe, col = _gx()
    ok = col("status") == "ok"
    return gx.ExpectationSuite(name="perf_requests", expectations=[
        *_row_count(expected),
        gxe.ExpectColumnValuesToNotBeNull(column="status"),
        gxe.ExpectColumnValuesToBeInSet(column="status", value_set=["ok", "error", "incomplete"]),
        *_positive_finite("ttft_ms", ok),
        *_positive_finite("e2el_ms", ok),
        gxe.ExpectColumnValuesToBeBetween(column="tpot_ms", min_value=0, max_value=MAX_FINITE, row_condition=ok),
        gxe.ExpectColumnPairValuesAToBeGreaterThanB(column_A="e2el_ms", column_B="ttft_ms", or_equal=True,
                                                    row_condition=ok),
        gxe.ExpectColumnValuesToNotBeNull(column="output_tokens", row_condition=ok),
        gxe.ExpectColumnValuesToBeBetween(column="output_tokens", min_value=1, row_condition=ok),
        gxe.ExpectColumnValuesToBeBetween(column="prompt_tokens", min_value=1, row_condition=ok),
        gxe.ExpectColumnValuesToNotBeNull(column="concurrency"),
        gxe.ExpectColumnValuesToBeBetween(column="concurrency", min_value=1),
    ])


def perf_summary_suite(expected: int | None):
    gx, gxe, col = _gx()
    measured = col("num_ok") > 0
    return gx.ExpectationSuite(name="perf_summary", expectations=[
        *_row_count(expected),
        # GX has no row-wise "a + b + c == d"; `num_counted` is that sum, added by `_with_num_counted`.
        gxe.ExpectColumnPairValuesToBeEqual(column_A="num_counted", column_B="num_requests"),
        *_positive_finite("output_throughput", measured),
        *_positive_finite("request_throughput", measured),
        *_positive_finite("ttft_ms_mean", measured),
        gxe.ExpectColumnPairValuesAToBeGreaterThanB(column_A="ttft_ms_p99", column_B="ttft_ms_p50", or_equal=True,
                                                    row_condition=measured),
        gxe.ExpectColumnValuesToBeBetween(column="ttft_cv_pct", min_value=0, max_value=MAX_FINITE),
        gxe.ExpectColumnValuesToBeBetween(column="energy_j_per_token", min_value=0, max_value=MAX_FINITE,
                                          strict_min=True),
        gxe.ExpectColumnValuesToNotBeNull(column="energy_note", row_condition=col("energy_j_per_token").is_null()),
        # 002_perf: goodput never exceeds throughput; intervals are ordered; roofline and energy ratios positive.
        gxe.ExpectColumnValuesToBeBetween(column="request_goodput", min_value=0, max_value=MAX_FINITE),
        gxe.ExpectColumnPairValuesAToBeGreaterThanB(column_A="request_throughput", column_B="request_goodput",
                                                    or_equal=True, ignore_row_if="either_value_is_missing"),
        *[gxe.ExpectColumnPairValuesAToBeGreaterThanB(column_A=f"{m}_ci_hi", column_B=f"{m}_ci_lo", or_equal=True,
                                                      ignore_row_if="either_value_is_missing")
          for m in ("ttft_ms_mean", "ttft_ms_p99", "output_throughput", "ttft_cv_pct", "itl_cv_pct")],
        gxe.ExpectColumnValuesToBeBetween(column="mbu_pct", min_value=0, max_value=MAX_FINITE, strict_min=True),
        gxe.ExpectColumnValuesToBeBetween(column="tokens_per_j", min_value=0, max_value=MAX_FINITE, strict_min=True),
        gxe.ExpectColumnValuesToNotBeNull(column="mem_bandwidth_method", row_condition=col("mbu_pct").is_not_null()),
        # 009_engine_energy: idle power a power; above idle never above the whole; NULLs say why.
        gxe.ExpectColumnValuesToBeBetween(column="idle_power_w", min_value=0, max_value=MAX_FINITE),
        gxe.ExpectColumnValuesToNotBeNull(column="idle_window_s", row_condition=col("idle_power_w").is_not_null()),
        gxe.ExpectColumnValuesToBeBetween(column="idle_window_s", min_value=0, max_value=MAX_FINITE, strict_min=True),
        gxe.ExpectColumnValuesToBeBetween(column="energy_j_per_token_above_idle", min_value=0, max_value=MAX_FINITE,
                                          strict_min=True),
        gxe.ExpectColumnPairValuesAToBeGreaterThanB(column_A="energy_j_per_token", column_B="energy_j_per_token_above_idle",
                                                    or_equal=True, ignore_row_if="either_value_is_missing"),
        gxe.ExpectColumnValuesToNotBeNull(column="idle_note", row_condition=(
            col("energy_devices").is_not_null() & col("energy_j_per_token_above_idle").is_null())),
        gxe.ExpectColumnValuesToNotBeNull(column="model_bytes_method", row_condition=col("model_bytes").is_not_null()),
    ])


def perf_power_suite(expected: int | None):
    gx, gxe, _ = _gx()
    return gx.ExpectationSuite(name="perf_power", expectations=[
        *_row_count(expected),
        gxe.ExpectColumnValuesToNotBeNull(column="device"),
        gxe.ExpectColumnValuesToBeInSet(column="source", value_set=["nvml", "rapl"]),
        gxe.ExpectColumnValuesToBeBetween(column="t_s", min_value=0, max_value=MAX_FINITE),
        gxe.ExpectColumnValuesToBeBetween(column="power_w", min_value=0, max_value=MAX_FINITE),
        gxe.ExpectColumnValuesToBeBetween(column="energy_j", min_value=0, max_value=MAX_FINITE),
    ])


def quality_samples_suite(expected: int | None):
    gx, gxe, _ = _gx()
    return gx.ExpectationSuite(name="quality_samples", expectations=[
        *_row_count(expected),
        gxe.ExpectColumnValuesToBeBetween(column="score", min_value=0, max_value=1),
        gxe.ExpectColumnValuesToNotBeNull(column="valid"),
        gxe.ExpectColumnValuesToNotBeNull(column="suite"),
        gxe.ExpectColumnValuesToNotBeNull(column="sample_id"),
    ])


def quality_scores_suite(expected: int | None):
    gx, gxe, col = _gx()
    from tasks.quality import UNITS

    unit = col("unit")
    return gx.ExpectationSuite(name="quality_scores", expectations=[
        *_row_count(expected),
        gxe.ExpectColumnValuesToBeInSet(column="unit", value_set=list(UNITS)),
        gxe.ExpectColumnValuesToBeBetween(column="value", min_value=0, max_value=1, row_condition=unit == "fraction"),
        gxe.ExpectColumnValuesToBeBetween(column="value", min_value=0, max_value=MAX_FINITE,
                                          row_condition=unit == "nats"),
        gxe.ExpectColumnValuesToBeBetween(column="value", min_value=0, max_value=MAX_FINITE, strict_min=True,
                                          row_condition=unit == "ratio"),
        gxe.ExpectColumnValuesToBeBetween(column="value", min_value=0, max_value=MAX_FINITE,
                                          row_condition=unit == "count"),
        gxe.ExpectColumnValuesToBeBetween(column="value", min_value=0, max_value=MAX_FINITE,
                                          row_condition=unit == "tokens"),
        gxe.ExpectColumnValuesToBeBetween(column="value", min_value=0, max_value=MAX_FINITE,
                                          row_condition=unit == "seconds"),
        gxe.ExpectColumnValuesToBeBetween(column="value", min_value=1, max_value=10, row_condition=unit == "rating"),
        # 1 - cosine similarity
        gxe.ExpectColumnValuesToBeBetween(column="value", min_value=0, max_value=2, row_condition=unit == "distance"),
        # A NULL score says why (e.g. the judge endpoint was down).
        gxe.ExpectColumnValuesToNotBeNull(column="note", row_condition=col("value").is_null()),
        gxe.ExpectColumnValuesToBeBetween(column="n", min_value=1),
        gxe.ExpectColumnValuesToNotBeNull(column="metric"),
        gxe.ExpectColumnValuesToNotBeNull(column="suite"),
    ])


def quality_deltas_suite(expected: int | None):
    gx, gxe, _ = _gx()
    from tasks.stats import VERDICTS

    return gx.ExpectationSuite(name="quality_deltas", expectations=[
        *_row_count(expected),
        gxe.ExpectColumnValuesToNotBeNull(column="verdict"),
        gxe.ExpectColumnValuesToBeInSet(column="verdict", value_set=list(VERDICTS)),
        gxe.ExpectColumnValuesToBeBetween(column="p_value", min_value=0, max_value=1),
        gxe.ExpectColumnPairValuesAToBeGreaterThanB(column_A="ci_high", column_B="ci_low", or_equal=True),
        gxe.ExpectColumnValuesToBeBetween(column="confidence", min_value=0, max_value=1, strict_min=True,
                                          strict_max=True),
        gxe.ExpectColumnValuesToBeBetween(column="n", min_value=0),
        gxe.ExpectColumnValuesToNotBeNull(column="reference_variant"),
    ])


def engine_metrics_suite(expected: int | None):
    gx, gxe, col = _gx()
    unit = col("unit")
    return gx.ExpectationSuite(name="engine_metrics", expectations=[
        *_row_count(expected),
        gxe.ExpectColumnValuesToNotBeNull(column="metric"),
        gxe.ExpectColumnValuesToNotBeNull(column="value"),
        gxe.ExpectColumnValuesToBeInSet(column="stat", value_set=["mean", "max", "delta", "ratio", "count"]),
        gxe.ExpectColumnValuesToBeBetween(column="value", min_value=0, max_value=MAX_FINITE),
        gxe.ExpectColumnValuesToBeBetween(column="value", min_value=0, max_value=100, row_condition=unit == "pct"),
        gxe.ExpectColumnValuesToBeBetween(column="value", min_value=0, max_value=1, row_condition=unit == "fraction"),
    ])


SUITES: dict[str, Callable[[int | None], Any]] = {
    "runs": runs_suite,
    "variants": variants_suite,
    "perf_requests": perf_requests_suite,
    "perf_summary": perf_summary_suite,
    "perf_power": perf_power_suite,
    "quality_samples": quality_samples_suite,
    "quality_scores": quality_scores_suite,
    "quality_deltas": quality_deltas_suite,
    "engine_metrics": engine_metrics_suite,
}


def _with_num_counted(df: pd.DataFrame) -> pd.DataFrame:
    return df.assign(num_counted=df["num_ok"] + df["num_errors"] + df["num_incomplete"])


PREPARE: dict[str, Callable[[pd.DataFrame], pd.DataFrame]] = {"perf_summary": _with_num_counted}


def _plain(value: Any) -> Any:
    """numpy scalars -> Python values, so failure lines read `inf`, not `np.float64(inf)`."""
    if isinstance(value, (list, tuple)):
        return type(value)(_plain(v) for v in value)
    return value.item() if hasattr(value, "item") else value


def _condition_text(cond: Any) -> str:
    if not isinstance(cond, dict):
        return str(cond)
    name = cond.get("column", {}).get("name")
    if cond.get("type") == "nullity":
        return f"{name} is {'null' if cond['is_null'] else 'not null'}"
    if cond.get("type") == "comparison":
        return f"{name} {cond['operator']} {cond['parameter']!r}"
    return str(cond)


def _expected_text(kw: dict) -> str:
    if "value" in kw:
        return str(kw["value"])
    lo, hi = kw.get("min_value"), kw.get("max_value")
    return f"{lo:g}" if lo is not None and lo == hi else f"[{lo}, {hi}]"


def _describe_failure(result: Any) -> str:
    """One line: `<expectation type>(<column(s)>[ where <condition>]): <observed / unexpected sample>`."""
    kw = result.expectation_config.kwargs
    cols = [kw[k] for k in ("column", "column_A", "column_B") if kw.get(k)] + list(kw.get("column_list") or [])
    where = f" where {_condition_text(kw['row_condition'])}" if kw.get("row_condition") else ""
    head = f"{result.expectation_config.type}({', '.join(cols)}{where})"
    info = result.exception_info or {}
    if info.get("raised_exception"):
        return f"{head}: error: {info.get('exception_message')}"
    res = result.result or {}
    if "observed_value" in res:
        return f"{head}: observed {_plain(res['observed_value'])}, expected {_expected_text(kw)}"
    sample = [_plain(v) for v in (res.get("partial_unexpected_list") or [])[:MAX_UNEXPECTED_SHOWN]]
    return f"{head}: {res.get('unexpected_count')} of {res.get('element_count')} unexpected, e.g. {sample}"


def _context():
    """An ephemeral GX context without progress bars."""
    gx, _, _ = _gx()
    from great_expectations.data_context.types.base import ProgressBarsConfig

    context = gx.get_context(mode="ephemeral")
    context.variables.progress_bars = ProgressBarsConfig(globally=False, metric_calculations=False)
    return context


def validate_table(context: Any, source: Any, name: str, df: pd.DataFrame, expected: int | None) -> TableValidation:
    """Run the table's suite on `df` through a dataframe asset of `source`."""
    gx, _, _ = _gx()
    batch = source.add_dataframe_asset(name).add_batch_definition_whole_dataframe("all")
    suite = context.suites.add(SUITES[name](expected))
    definition = context.validation_definitions.add(gx.ValidationDefinition(name=name, data=batch, suite=suite))
    result = definition.run(batch_parameters={"dataframe": df}, result_format="SUMMARY")
    failures = [_describe_failure(r) for r in result.results if not r.success]
    return TableValidation(table=name, success=bool(result.success), rows=len(df), failures=failures)


def validate_results(results_dir: Path, expected_rows: dict[str, int | None]) -> ValidationReport:
    """Validate every result table of a run (empty ones too); write `validation.json` beside `results_dir`."""
    results_dir = Path(results_dir)
    context = _context()
    source = context.data_sources.add_pandas("results")
    tables = []
    for name in TABLES:
        df = PREPARE.get(name, lambda d: d)(read_table(results_dir, name))
        tables.append(validate_table(context, source, name, df, expected_rows.get(name)))
    report = ValidationReport(success=all(t.success for t in tables), tables=tables)
    (results_dir.parent / "validation.json").write_text(report.to_json())
    return report
