"""`tradeoff recommend`: a run's decision, read under the command line's settings and said in full.

The decision is made once, in SQL (tasks/decision/sql: v_decision -> v_slo_steps and v_quality_gate ->
v_recommendation), so `select * from v_recommendation` and `tradeoff recommend` cannot disagree. This module turns
the flags into overrides of the run's `decision:` block (validated by DecisionSpec; tasks.decision.what_if shadows
v_decision with them for this connection only), reads the run's rows, and renders them: the evidence in full
(`--explain`: the sentences of tasks.report.sentences, then the table) and the markdown of the nightly's artifact.
The one-screen default and `--json` are tasks.report.screen's.
"""

from __future__ import annotations

import io
import json
from typing import Any

import duckdb
import pandas as pd
from pydantic import ValidationError

from tasks.core.config import SLO_PRESETS, DecisionSpec
from tasks.core.errors import ConfigError
from tasks.decision.stability import pick_stability
from tasks.decision.what_if import LIMIT_NAMES, apply_overrides
from tasks.report.sentences import num, pct, slo_text, stability_text, summary_lines
from tasks.report.text import cell as _v
from tasks.report.text import (
    cell_value,
    claim_lines,
    fmt_or_null,
    host_noise_lines,
    md_escape,
    trace_lines,
    warehouse_path,
)
from tasks.report.text import resolve_run as run_id_of
from warehouse.db import WarehouseError

# Command-line flag of each DecisionSpec field, for one-line errors.
FLAGS = {
    "slo": "--slo",
    "percentile": "--percentile",
    "gate_metrics": "--gate",
    "retention": "--retention",
    "margin_points": "--margin-points",
    "identity_gate": "--identity-gate",
    "optimise": "--optimise",
    "grid_gco2e_per_kwh": "--grid-gco2e-per-kwh",
}


def parse_slo(text: str) -> dict[str, Any]:
    """`--slo`: a preset name, or limits as 'ttft_ms=500,tpot_ms=50'; ConfigError naming the fix otherwise."""
    text = text.strip()
    if text in SLO_PRESETS:
        return {"preset": text}
    out: dict[str, Any] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, sep, value = part.partition("=")
        if not sep or key.strip() not in LIMIT_NAMES:
            raise ConfigError(
                f"--slo: '{part}' is neither a preset ({', '.join(SLO_PRESETS)}) nor a limit; "
                f"write e.g. ttft_ms=500,tpot_ms=50"
            )
        try:
            out[key.strip()] = float(value)
        except ValueError:
            raise ConfigError(
                f"--slo: {key.strip()}={value!r} is not a number of ms; write e.g. {key.strip()}=500"
            ) from None
    if not out:
        raise ConfigError(f"--slo: empty; give a preset ({', '.join(SLO_PRESETS)}) or limits such as ttft_ms=500")
    return out


def _number(flag: str, text: str, example: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise ConfigError(f"{flag}: '{text}' is not a number; write e.g. {flag} {example}") from None


def stability_from_args(args) -> int:
    """`--stability N`: bootstrap replicates of the perf side (0: off); one line naming the fix otherwise."""
    n = _number("--stability", args.stability, "200")
    if not n.is_integer() or not 0 <= n <= 10_000:
        raise ConfigError(
            f"--stability: {args.stability} is not a whole number of replicates from 0 to 10000; "
            f"write e.g. --stability 200"
        )
    return int(n)


def overrides_from_args(args) -> dict[str, Any]:
    """The DecisionSpec fields the command line sets (only those given), from `tradeoff recommend`'s parsed flags
    (flows.cli), or a namespace of only some of them."""
    given = vars(args)  # a flag the namespace lacks is not given (the explorer's settings set a few)
    out: dict[str, Any] = {}
    if given.get("slo") is not None:
        out["slo"] = parse_slo(given["slo"])
    if given.get("percentile") is not None:
        out["percentile"] = _number("--percentile", given["percentile"], "99")
    if given.get("gate"):
        out["gate_metrics"] = given["gate"]
    if given.get("retention") is not None:
        out["retention"] = _number("--retention", given["retention"], "0.99")
    if given.get("margin_points") is not None:
        out["margin_points"] = _number("--margin-points", given["margin_points"], "2")
    elif "retention" in out:
        out["margin_points"] = None  # --retention alone asks for the retention gate, whatever the run recorded
    if given.get("identity_gate"):
        out["identity_gate"] = True
    if given.get("optimise") is not None:
        out["optimise"] = given["optimise"]
    if given.get("grid") is not None:
        out["grid_gco2e_per_kwh"] = _number("--grid-gco2e-per-kwh", given["grid"], "400")
    return out


FIXES = {
    "slo": "give a preset or limits such as ttft_ms=500,tpot_ms=50",
    "percentile": "give e.g. 99",
    "gate_metrics": "give 'suite.metric'",
    "retention": "give a fraction such as 0.99 or 0.999",
    "margin_points": "give points of a fraction metric, e.g. 2 (0 < points <= 100)",
    "identity_gate": "a flag",
    "optimise": "use rate, tps, cost, energy or cost_per_correct",
    "grid_gco2e_per_kwh": "give gCO2e/kWh >= 0",
}


def settings(con: duckdb.DuckDBPyConnection, run_id: str, overrides: dict[str, Any]) -> DecisionSpec:
    """The run's `decision:` block (as recorded in runs.config_json) with `overrides`, validated once."""
    ((config_json,),) = con.execute("select config_json from runs where run_id = ?", [run_id]).fetchall()
    recorded = (json.loads(config_json or "{}") or {}).get("decision") or {}
    try:
        spec = DecisionSpec.model_validate({**recorded, **overrides})
    except ValidationError as err:
        e = err.errors()[0]
        field = str(e["loc"][0]) if e["loc"] else "decision"
        where = FLAGS.get(field, f"decision.{field}") if field in overrides else f"decision.{field} of run {run_id}"
        raise ConfigError(
            f"{where}: {e['msg'].removeprefix('Value error, ')} (got {e.get('input')!r}); {FIXES.get(field, 'fix it')}"
        ) from None
    known = {
        m
        for (m,) in con.execute(
            "select distinct suite || '.' || metric from quality_scores where run_id = ?", [run_id]
        ).fetchall()
    }
    unknown = [m for m in overrides.get("gate_metrics") or [] if m not in known]
    if unknown:
        raise ConfigError(
            f"--gate: '{unknown[0]}' is not a quality metric of run {run_id}; "
            f"known: {', '.join(sorted(known)) or 'none'}"
        )
    return spec


def resolve_run(con: duckdb.DuckDBPyConnection, run_id: str | None) -> str:
    """`run_id`, or the latest run, of a warehouse whose views include v_recommendation; one line otherwise."""
    run_id = run_id_of(con, run_id)
    path = warehouse_path(con)
    if not con.execute("select count(*) from duckdb_views() where view_name = 'v_recommendation'").fetchall()[0][0]:
        # a read-only connection sees the views as the last writer left them
        raise WarehouseError(
            f"{path} has no v_recommendation yet (an older tradeoff wrote it last); refresh its views "
            f"with `tradeoff load RUN_DIR` of any run"
        )
    return run_id


# The order of a run's rows of v_recommendation as the command shows them: the recommended variant first, then by
# verdict and rank (variant last: one order).
RECOMMENDATION_ORDER = """case verdict when 'recommended' then 0 when 'passes' then 1 when 'not_ranked' then 2
                 when 'not_enough_evidence' then 3 when 'fails_gate' then 4 when 'misses_slo' then 5 else 6 end,
                 rank nulls last, objective desc nulls last, variant"""


def recommendation_frame(con: duckdb.DuckDBPyConnection, run_id: str) -> pd.DataFrame:
    """The run's rows of v_recommendation: the recommended variant first, then by verdict and rank."""
    return con.execute(
        f"select * from v_recommendation where run_id = ? order by {RECOMMENDATION_ORDER}", [run_id]
    ).df()


def _table(df: pd.DataFrame) -> str:
    from rich import box
    from rich.console import Console
    from rich.table import Table

    table = Table(box=box.MARKDOWN, show_edge=True)
    headers = [
        "variant",
        "verdict",
        "sustainable",
        "req/s",
        "tok/s",
        "requests",
        "over",
        "TTFT bound ms",
        "TPOT bound ms",
        "gate",
        "retention",
        "95 % CI",
        "n needed (if equal / observed)",
        "J/1M tok",
        "gCO2e/1M tok",
        "USD/1M tok",
        "tok/correct",
    ]
    for i, h in enumerate(headers):
        table.add_column(h, justify="left" if i < 3 or h == "gate" else "right")
    for _, r in df.iterrows():
        lo, hi = cell_value(r["retention_ci_low"]), cell_value(r["retention_ci_high"])
        table.add_row(
            r["variant"],
            r["verdict"],
            cell_value(r["sustainable_scenario"]) or "",
            "NULL" if cell_value(r["sustainable_req_s"]) is None else num(r["sustainable_req_s"]),
            fmt_or_null(r["sustainable_output_tok_s"], ".1f"),
            fmt_or_null(r["sustainable_n"], ".0f")
            if cell_value(r["n_needed_slo"]) is None
            else f"needs {r['n_needed_slo']:.0f}",
            fmt_or_null(r["sustainable_over"], ".0f") if cell_value(r["sustainable_scenario"]) else "",
            fmt_or_null(r["sustainable_ttft_ms_bound"], ".0f"),
            fmt_or_null(r["sustainable_tpot_ms_bound"], ".1f"),
            cell_value(r["gate"]) or "",
            fmt_or_null(None if cell_value(r["retention"]) is None else r["retention"] * 100, ".1f"),
            f"{lo * 100:.1f}-{hi * 100:.1f}" if lo is not None and hi is not None else "",
            _needed_cell(r),
            fmt_or_null(r["j_per_1m_output_tok"], ".3g"),
            fmt_or_null(r["gco2e_per_1m_output_tok"], ".3g"),
            fmt_or_null(r["usd_per_1m_output_tok"], ".3g"),
            fmt_or_null(r["output_tok_per_correct"], ".1f"),
        )
    console = Console(file=io.StringIO(), width=260, color_system=None)
    console.print(table)
    return "\n".join(line.rstrip() for line in console.file.getvalue().splitlines() if line.strip())


def _needed_cell(r: pd.Series) -> str:
    """'15680 / 431' (paired samples if truly equal / at the observed effect), '1474 identical' (identity gate)."""
    if cell_value(r.get("identity_n_needed")) is not None:
        return f"{r['identity_n_needed']:.0f} identical"
    equal, observed = cell_value(r.get("n_needed_if_equal")), cell_value(r.get("n_needed"))
    if equal is None and observed is None:
        return ""
    return f"{'-' if equal is None else f'{equal:.0f}'} / {'-' if observed is None else f'{observed:.0f}'}"


def _notes(df: pd.DataFrame) -> list[str]:
    """One line per distinct reason a cost, energy, carbon or efficiency figure is NULL."""
    out = []
    for col, what in (
        ("carbon_note", "carbon"),
        ("cost_note", "cost"),
        ("efficiency_note", "per-correct-answer figures"),
    ):
        for note, g in df[df[col].notna()].groupby(col, sort=False):
            out.append(f"{what} NULL for {', '.join(g['variant'])}: {note}")
    return out


def format_recommendation(
    con: duckdb.DuckDBPyConnection,
    run_id: str | None = None,
    overrides: dict[str, Any] | None = None,
    stability: int = 0,
) -> str:
    """`tradeoff recommend`: the decision in words first (with `stability` resamples, how often the pick holds when
    the perf side is measured again), then the table and the reasons figures are NULL."""
    overrides = overrides or {}
    run_id, _, df = decided_frame(con, run_id, overrides)
    head = (
        f"run {run_id}: decision under {slo_text(df.iloc[0]) if len(df) else 'no SLO'}" if len(df) else f"run {run_id}"
    )
    if len(df):
        first = df.iloc[0]
        margin = _v(first, "margin_points")
        gate = (
            f"at most {margin:g} points lost (fraction metrics; else retention >= {pct(_v(first, 'retention_target'))})"
            if margin is not None
            else f"retention >= {pct(_v(first, 'retention_target'))}"
        )
        head += (
            f", {gate} on "
            f"{', '.join(gate_metrics(con, run_id)) or 'no metric'}, optimising {_v(first, 'optimise')}"
            + overridden_text(overrides)
        )
    lines = summary_lines(df) + trace_lines(df)
    if stability and len(df):
        lines.insert(1, stability_text(pick_stability(con, run_id, stability), _v(df.iloc[0], "recommended_variant")))
    lines += host_noise_lines(con, run_id) + claim_lines(con, run_id)
    return "\n".join([head, "", *lines, "", _table(df), *_notes(df)])


def decided_frame(
    con: duckdb.DuckDBPyConnection, run_id: str | None, overrides: dict[str, Any]
) -> tuple[str, DecisionSpec, pd.DataFrame]:
    """The run (`run_id` or the latest), its settings with `overrides` (validated, then shadowing v_decision on
    this connection) and its rows of v_recommendation under them: what every form of `tradeoff recommend` says."""
    run_id = resolve_run(con, run_id)
    spec = settings(con, run_id, overrides)
    apply_overrides(con, spec, overrides)
    return run_id, spec, recommendation_frame(con, run_id)


def overridden_text(overrides: dict[str, Any]) -> str:
    """' (overridden: --slo, --gate)': the flags that replaced the run's settings; '' when none did."""
    return " (overridden: " + ", ".join(FLAGS[k] for k in overrides) + ")" if overrides else ""


def gate_metrics(con: duckdb.DuckDBPyConnection, run_id: str) -> list[str]:
    """The gating quality metrics ('suite.metric') the decision was made on (v_decision, overrides included)."""
    rows = con.execute("select gate_metrics from v_decision where run_id = ?", [run_id]).fetchall()
    return list(rows[0][0] or []) if rows else []


def recommendation_markdown(con: duckdb.DuckDBPyConnection, run_id: str) -> str:
    """The nightly's `tradeoff-recommendation` artifact: the sentences, then one row per variant."""
    df = recommendation_frame(con, run_id)
    said = [md_escape(s) for s in summary_lines(df)]  # a failed variant's sentence quotes its error
    lines = [f"**{said[0]}**", ""] + [
        f"- {s}" for s in said[1:] + [md_escape(h) for h in host_noise_lines(con, run_id) + claim_lines(con, run_id)]
    ]
    lines += [
        "",
        "| variant | verdict | sustainable req/s | gate | retention (95 % CI) | reason |",
        "|---|---|---|---|---|---|",
    ]
    for _, r in df.iterrows():
        lo, hi, ret = cell_value(r["retention_ci_low"]), cell_value(r["retention_ci_high"]), cell_value(r["retention"])
        ci = f"{ret * 100:.1f} % ({lo * 100:.1f}-{hi * 100:.1f})" if None not in (lo, hi, ret) else ""
        rate = cell_value(r["sustainable_req_s"])
        lines.append(
            f"| {r['variant']} | {r['verdict']} | {'' if rate is None else num(rate)} | "
            f"{cell_value(r['gate']) or ''} | {ci} | {md_escape(cell_value(r['verdict_reason']) or '')} |"
        )
    return "\n".join(lines)
