"""What if the decision's settings were others: the decision views re-applied for one connection.

`tradeoff recommend --slo ... --margin-points ...` and the report's explorer ask the run's decision again under
settings of their own (a DecisionSpec, validated by the command). The stored decision reads them from v_decision;
a temp view of that name, with the overridden columns replaced, shadows it on this connection only, so
v_slo_steps, v_quality_gate and v_recommendation decide again under the new settings while the warehouse and
other connections are untouched.
"""

from __future__ import annotations

from typing import Any

import duckdb

from tasks.core.config import DecisionSpec

# The SLO's limits (v_decision's slo_<key> columns), each with its name in words.
LIMIT_NAMES = {"ttft_ms": "TTFT", "tpot_ms": "TPOT", "e2el_ms": "E2EL"}


def literal(x: Any) -> str:
    """`x` as a SQL literal: NULL, true/false, a quoted string, a varchar[] of a list, an integer, else a double."""
    if x is None:
        return "null"
    if isinstance(x, bool):
        return "true" if x else "false"
    if isinstance(x, int):
        return str(x)
    if isinstance(x, str):
        return "'" + x.replace("'", "''") + "'"
    if isinstance(x, list):
        return "[" + ", ".join(literal(i) for i in x) + "]::varchar[]"
    return repr(float(x))


def apply_overrides(con: duckdb.DuckDBPyConnection, spec: DecisionSpec, overrides: dict[str, Any]) -> None:
    """Shadow v_decision for this connection with the overridden settings (a temp view: the warehouse is untouched).

    DuckDB resolves names in the temp catalog first, so v_slo_steps, v_quality_gate and v_recommendation read
    the temp view while it lives; the stored views and other connections are unaffected.
    """
    if not overrides:
        return
    cols = decision_columns(spec, overrides)
    db = con.execute("select current_database()").fetchall()[0][0].replace('"', '""')
    replace = ", ".join(f"{v} as {k}" for k, v in cols.items())
    con.execute(f'create or replace temp view v_decision as select * replace ({replace}) from "{db}".main.v_decision')


def decision_columns(spec: DecisionSpec, overrides: dict[str, Any]) -> dict[str, str]:
    """The v_decision columns that `overrides` set, each as a SQL literal of `spec`'s value: what apply_overrides
    replaces (and the report's explorer, for each setting of its grid)."""
    cols: dict[str, str] = {}
    if "slo" in overrides and spec.slo is not None:
        limits = spec.slo.limits()
        cols["slo_label"] = literal(spec.slo.label())
        cols.update({f"slo_{k}": literal(limits.get(k)) + "::double" for k in LIMIT_NAMES})
    if "percentile" in overrides:
        cols["slo_percentile"] = literal(spec.percentile)
    if "gate_metrics" in overrides:
        cols["gate_metrics"] = literal(spec.gate_metrics or [])
    if "retention" in overrides:
        cols["retention_target"] = literal(spec.retention)
    if "margin_points" in overrides:
        cols["margin_points"] = literal(spec.margin_points) + "::double"
    if "identity_gate" in overrides:
        cols["identity_gate"] = literal(spec.identity_gate)
    if "optimise" in overrides:
        cols["optimise"] = literal(spec.optimise)
    if "grid_gco2e_per_kwh" in overrides:
        cols["grid_gco2e_per_kwh"] = literal(spec.grid_gco2e_per_kwh) + "::double"
    return cols
