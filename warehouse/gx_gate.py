"""The Great Expectations gate: one suite per result table, run on a run's Parquet results. Plain Python.

The suites are built from the table contract (`warehouse.contract`: each column's checks and each
table's), so a table's checks are declared once, next to its columns. Each table is read whole
(all parts, once: a caller that read some already hands them over as `ResultTables`) and validated
as a pandas dataframe in an ephemeral GX context; nothing is stored in a GX project. Latency and throughput
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
from typing import Any

import pandas as pd

from warehouse.contract import CONTRACT, TABLES, Check, ResultTables, Where

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


def _condition(where: Where | None):
    """A contract row condition as GX's row_condition."""
    if where is None:
        return None
    _, _, column = _gx()
    c = column(where.column)
    if where.op == "is_null":
        cond = c.is_null()
    elif where.op == "is_not_null":
        cond = c.is_not_null()
    elif where.op == "==":
        cond = c == where.value
    elif where.op == ">":
        cond = c > where.value
    else:
        raise ValueError(f"row condition operator {where.op!r} has no GX equivalent")
    return cond & _condition(where.also) if where.also else cond


def _expectation(check: Check, column: str | None, expected_rows: int | None) -> list:
    """The GX expectation(s) of one contract check."""
    _, gxe, _ = _gx()
    a, where = check.args, _condition(check.where)
    if check.kind == "not_null":
        return [gxe.ExpectColumnValuesToNotBeNull(column=column, row_condition=where)]
    if check.kind == "between":
        kw = {k: v for k, v in (("min_value", a["min"]), ("max_value", a["max"])) if v is not None}
        return [
            gxe.ExpectColumnValuesToBeBetween(
                column=column, strict_min=a["strict_min"], strict_max=a["strict_max"], row_condition=where, **kw
            )
        ]
    if check.kind == "in_set":
        return [gxe.ExpectColumnValuesToBeInSet(column=column, value_set=a["values"])]
    if check.kind == "at_least":
        kw = {"ignore_row_if": "either_value_is_missing"} if a["ignore_missing"] else {}
        return [
            gxe.ExpectColumnPairValuesAToBeGreaterThanB(
                column_A=column, column_B=a["other"], or_equal=a["or_equal"], row_condition=where, **kw
            )
        ]
    if check.kind == "rows":
        return [gxe.ExpectTableRowCountToEqual(value=a["value"])]
    if check.kind == "sum_between":  # the sum of a boolean column counts its True values
        return [gxe.ExpectColumnSumToBeBetween(column=a["column"], min_value=a["min"], max_value=a["max"])]
    if check.kind == "equal_sum":  # GX has no row-wise "a + b + c == d": `prepare` adds the sum as a column
        return [gxe.ExpectColumnPairValuesToBeEqual(column_A=a["as"], column_B=a["column"])]
    raise ValueError(f"contract check kind {check.kind!r} has no GX equivalent")


def expectation_suite_for(name: str, expected_rows: int | None):
    """The table's GX suite: its row count (when known), the table's checks, then each column's."""
    gx, gxe, _ = _gx()
    table = CONTRACT[name]
    fixed = any(c.kind == "rows" for c in table.checks)
    expectations = [] if expected_rows is None or fixed else [gxe.ExpectTableRowCountToEqual(value=expected_rows)]
    for check in table.checks:
        expectations += _expectation(check, None, expected_rows)
    for c in table.columns:
        for check in c.checks:
            expectations += _expectation(check, c.name, expected_rows)
    return gx.ExpectationSuite(name=name, expectations=expectations)


def prepare(name: str, df: pd.DataFrame) -> pd.DataFrame:
    """The dataframe GX checks: with the helper columns of `equal_sum` checks."""
    for check in CONTRACT[name].checks:
        if check.kind == "equal_sum":
            df = df.assign(**{check.args["as"]: sum(df[p] for p in check.args["parts"])})
    return df


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
    suite = context.suites.add(expectation_suite_for(name, expected))
    definition = context.validation_definitions.add(gx.ValidationDefinition(name=name, data=batch, suite=suite))
    result = definition.run(batch_parameters={"dataframe": df}, result_format="SUMMARY")
    failures = [_describe_failure(r) for r in result.results if not r.success]
    return TableValidation(table=name, success=bool(result.success), rows=len(df), failures=failures)


def validate_results(results: Path | ResultTables, expected_rows: dict[str, int | None]) -> ValidationReport:
    """Validate every result table of a run (empty ones too); write `validation.json` beside the results folder.

    `results`: the results folder, or the tables the calling step already read from it (read once, not again).
    """
    read = results if isinstance(results, ResultTables) else ResultTables(results)
    context = _context()
    source = context.data_sources.add_pandas("results")
    tables = []
    for name in TABLES:
        df = prepare(name, read[name])
        tables.append(validate_table(context, source, name, df, expected_rows.get(name)))
    report = ValidationReport(success=all(t.success for t in tables), tables=tables)
    (read.results_dir.parent / "validation.json").write_text(report.to_json())
    return report
