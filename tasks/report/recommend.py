"""The decision in words: which variant to ship under the run's SLO and quality gate, at what load and cost.

The decision is made once, in SQL (warehouse/views: v_decision -> v_slo_steps and v_quality_gate ->
v_recommendation), so `select * from v_recommendation` and `tradeoff recommend` cannot disagree. This
module reads those rows and says them in words, plain language first ("Ship q4_1: ..."); it applies
command-line overrides of the run's `decision:` block (validated by DecisionSpec, then a temp view that
shadows v_decision for this connection only), and renders the markdown of the nightly's artifact. Plain
Python over a warehouse connection: the CLI, the nightly's artifact, the HTML report and the
notification all print the same sentences.
"""

from __future__ import annotations

import io
import json
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from tasks.core.config import SLO_PRESETS, DecisionSpec
from tasks.core.errors import ConfigError
from tasks.decision.stability import STABILITY_RESAMPLES, pick_stability
from tasks.decision.what_if import LIMIT_NAMES, apply_overrides, literal
from tasks.report.text import (
    cell_value,
    claim_lines,
    fmt_or_null,
    host_noise_lines,
    md_escape,
    trace_lines,
    warehouse_path,
)
from tasks.report.text import cell as _v
from tasks.report.text import resolve_run as run_id_of
from warehouse.db import WarehouseError

if TYPE_CHECKING:  # pandas, duckdb and rich load only when a recommendation is made, not with the CLI's flags
    import duckdb
    import pandas as pd


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
# How a variant that beats the recommended one on the objective is described.
AHEAD = {
    "rate": "faster",
    "tps": "faster",
    "cost": "cheaper",
    "energy": "more frugal",
    "cost_per_correct": "cheaper per correct answer",
}
OBJECTIVE_UNIT = {
    "rate": "req/s",
    "tps": "output tok/s",
    "cost": "USD/1M output tok",
    "energy": "J/1M output tok",
    "cost_per_correct": "USD per correct answer",
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


def add_arguments(p) -> None:
    """`tradeoff recommend`'s flags; values are checked by `overrides_from_args` and DecisionSpec, one line each."""
    p.add_argument("--run", help="run id (default: the latest)")
    p.add_argument(
        "--slo",
        help="a preset (mlperf-llama2-70b-server, mlperf-llama2-70b-interactive) or limits, "
        "e.g. ttft_ms=500,tpot_ms=50 (default: the run's decision.slo, else perf.slo)",
    )
    p.add_argument("--percentile", help="share of a step's requests that must meet each limit, e.g. 99 (default 99)")
    p.add_argument(
        "--gate",
        action="append",
        metavar="SUITE.METRIC",
        help="gating quality metric; repeatable (default: the run's decision.gate_metrics, else the primary)",
    )
    p.add_argument(
        "--retention", help="share of the reference's score each gating metric must keep, e.g. 0.99 or 0.999"
    )
    p.add_argument(
        "--margin-points",
        dest="margin_points",
        help="non-inferiority margin for fraction metrics instead of --retention: at most this many points lost",
    )
    p.add_argument(
        "--identity-gate",
        dest="identity_gate",
        action="store_true",
        default=None,
        help="a speculative variant whose plain decoding is the reference passes on its identity evidence",
    )
    p.add_argument("--optimise", help="rate | tps | cost | energy | cost_per_correct (default: rate)")
    p.add_argument("--grid-gco2e-per-kwh", dest="grid", help="grid carbon intensity (gCO2e/kWh) for carbon per token")
    p.add_argument("--warehouse", help="DuckDB file (default: TRADEOFF_WAREHOUSE or warehouse/tradeoff.duckdb)")
    layer = p.add_mutually_exclusive_group()
    layer.add_argument(
        "--explain",
        action="store_true",
        help="the evidence in full: every claim with its requests, looks, design effects, host and ranking",
    )
    layer.add_argument("--json", action="store_true", help="the same decision as one JSON object, for machines")
    p.add_argument(
        "--stability",
        default=str(STABILITY_RESAMPLES),
        metavar="N",
        help=f"replicates of the perf side for how often the pick holds (default {STABILITY_RESAMPLES}; 0: off)",
    )


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
    """The DecisionSpec fields the command line sets (only those given)."""
    out: dict[str, Any] = {}
    if args.slo is not None:
        out["slo"] = parse_slo(args.slo)
    if args.percentile is not None:
        out["percentile"] = _number("--percentile", args.percentile, "99")
    if args.gate:
        out["gate_metrics"] = args.gate
    if args.retention is not None:
        out["retention"] = _number("--retention", args.retention, "0.99")
    if getattr(args, "margin_points", None) is not None:
        out["margin_points"] = _number("--margin-points", args.margin_points, "2")
    elif "retention" in out:
        out["margin_points"] = None  # --retention alone asks for the retention gate, whatever the run recorded
    if getattr(args, "identity_gate", None):
        out["identity_gate"] = True
    if args.optimise is not None:
        out["optimise"] = args.optimise
    if args.grid is not None:
        out["grid_gco2e_per_kwh"] = _number("--grid-gco2e-per-kwh", args.grid, "400")
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


def slo_text(row: pd.Series) -> str:
    """'p99 TTFT <= 2000 ms, TPOT <= 200 ms': the percentile the decision was asked (the words say which)."""
    limits = [
        f"{name} <= {_v(row, f'slo_{k}'):g} ms" for k, name in LIMIT_NAMES.items() if _v(row, f"slo_{k}") is not None
    ]
    return f"p{_v(row, 'slo_percentile'):g} " + (", ".join(limits) if limits else "(no limits)")


def evidence_text(row: pd.Series) -> str:
    """What the sustainable step's claim rests on: '300 requests, 0 over a limit; 95 % upper bounds: p99 TTFT 480 ms,
    TPOT 19.9 ms'."""
    n, over = _v(row, "sustainable_n"), _v(row, "sustainable_over")
    conf = _v(row, "sustainable_confidence") or _v(row, "slo_confidence")  # each look's, where looks were corrected
    bounds = [
        f"{name} {_v(row, f'sustainable_{k}_bound'):{'.1f' if k == 'tpot_ms' else '.0f'}} ms"
        for k, name in LIMIT_NAMES.items()
        if _v(row, f"slo_{k}") is not None and _v(row, f"sustainable_{k}_bound") is not None
    ]
    over_text = f"{over:.0f} over a limit" if over is not None else "no limit"
    return (
        f"{n:.0f} requests, {over_text}; {conf * 100:.4g} % upper bounds: p{_v(row, 'slo_percentile'):g} "
        + ", ".join(bounds)
    )


def load_text(row: pd.Series) -> str:
    """The sustainable load and its evidence. Rate steps (open loop, Poisson arrivals): '4.50 req/s sustained (r4.5,
    288 output tok/s; 300 requests, ...); the next step, 5.00 req/s (search3), missed: the limit lies between'.
    Closed-loop steps: 'at concurrency 2, 0.80 req/s completed (c2, ...)' (no sustained-rate claim)."""
    rate, tps, sc = _v(row, "sustainable_req_s"), _v(row, "sustainable_output_tok_s"), _v(row, "sustainable_scenario")
    tok = f", {tps:.1f} output tok/s" if tps is not None else ""
    inner = f"({sc}{tok}; {evidence_text(row)})"
    nf, nf_rate, nf_status = (
        _v(row, c) for c in ("next_failing_scenario", "next_failing_req_s", "next_failing_status")
    )
    if _v(row, "load_basis") == "trace":
        return (
            f"serves the replayed trace at {num(rate)} req/s offered, {_v(row, 'trace_slo_attainment_pct'):.0f} % of "
            f"its requests within the SLO, goodput {num(_v(row, 'sustainable_goodput_req_s'))} req/s {inner}"
        )
    if _v(row, "load_basis") != "rate":
        top = ", the highest measured" if _v(row, "sustainable_is_lower_bound") else ""
        return f"at concurrency {_v(row, 'sustainable_concurrency'):.0f}{top}, {num(rate)} req/s completed {inner}"
    if _v(row, "sustainable_is_lower_bound"):
        return f"at least {num(rate)} req/s sustained {inner}: the highest rate measured"
    what = {
        "missed": "misses the SLO",
        "not_sustained": "is not sustained",
        "not_enough_requests": "has too few requests to show the SLO",
    }.get(nf_status, "does not meet it")
    return f"{num(rate)} req/s sustained {inner}; the next rate, {num(nf_rate)} req/s ({nf}), {what}"


def served_trace_text(row: pd.Series) -> str:
    """A run that replayed a trace beside other steps ships only a variant that serves it within the SLO:
    ', serves the replayed trace with 100 % of its 17 requests within the SLO'. '' otherwise."""
    if not _v(row, "trace_required") or _v(row, "trace_slo_status") != "met":
        return ""
    return (
        f", serves the replayed trace with {_v(row, 'trace_slo_attainment_pct'):.0f} % of its "
        f"{_v(row, 'trace_n'):.0f} requests within the SLO"
    )


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{x * 100:.1f} %"


def _evidence(row: pd.Series) -> str:
    """'95 % CI', its n and the looks it took: '95 % CI 86.4-127.0 %, 80 pairs' is built around it."""
    n, looks, planned = _v(row, "n"), _v(row, "looks"), _v(row, "looks_planned")
    pairs = f", {n:,.0f} pairs" if n is not None else ""
    if planned is not None and planned > 1:
        pairs += f" after {looks:.0f} of {planned:.0f} looks"
    return pairs


def _ci(row: pd.Series) -> str:
    conf = _v(row, "gate_confidence")
    return f"{conf * 100:g} % CI" if conf is not None else "CI"


def retention_text(row: pd.Series) -> str:
    """What the gate rests on, in words, with the n behind it: 'keeps 88.0 % of arithmetic.accuracy (95 % CI
    84.0-91.0 %, 80 pairs)', the change in points (margin_points), the identity evidence, or what stands in for it."""
    metric = _v(row, "gate_metric")
    if metric is None:
        return "no quality gate (no gating metric)"
    if _v(row, "is_reference"):
        return f"the reference for {metric}"
    basis = _v(row, "gate_basis")
    if basis == "identity" and _v(row, "gate") == "pass":
        same, n, flip = _v(row, "identity_same"), _v(row, "identity_n"), _v(row, "identity_flip_high")
        level = (1 + (_v(row, "gate_confidence") or 0.95)) / 2
        kept = (
            f"loses at most {flip * 100:.2f} points of {metric}"
            if _v(row, "margin_points") is not None
            else f"keeps at least {_pct(_v(row, 'identity_retention_low'))} of {metric}"
        )
        return (
            f"lossless by construction and shown so: {same:.0f} of {n:.0f} greedy outputs identical to plain "
            f"decoding, so at most {flip * 100:.2f} % of outputs differ ({level * 100:g} % upper bound) and it "
            f"{kept} (if its outputs on that suite differ no more often than on the identity prompts)"
        )
    if basis == "margin_points" and _v(row, "delta") is not None:
        lo, hi = _v(row, "delta_ci_low"), _v(row, "delta_ci_high")
        ci = (
            f" ({_ci(row)} {lo * 100:+.2f} to {hi * 100:+.2f} points{_evidence(row)})"
            if lo is not None
            else " (no interval)"
        )
        return f"changes {metric} by {_v(row, 'delta') * 100:+.2f} points{ci}"
    ret, lo, hi = (_v(row, c) for c in ("retention", "retention_ci_low", "retention_ci_high"))
    if ret is None:
        return f"{metric}: {_v(row, 'gate_reason') or 'not measured'}"
    if lo is not None or hi is not None:
        high = "inf" if hi is None else f"{hi * 100:.1f}"
        ci = f" ({_ci(row)} {(lo or 0) * 100:.1f}-{high} %{_evidence(row)})"
    else:
        ci = f" (no bound: {_v(row, 'gate_reason')})"
    return f"keeps {_pct(ret)} of {metric}{ci}"


def target_text(row: pd.Series) -> str:
    """'the 99.0 % target' or 'the 2-point margin'."""
    if _v(row, "gate_basis") == "margin_points":
        return f"the {_v(row, 'margin_points'):g}-point margin"
    return f"the {_pct(_v(row, 'retention_target'))} target"


def needed_text(row: pd.Series) -> str:
    """'; to decide: ~15,680 paired samples if it is truly equal (1.2 % of pairs differ), ~431 at the observed
    +1.25 points (have 80)', or the identical outputs an identity gate needs."""
    n, need, equal, ident = (_v(row, c) for c in ("n", "n_needed", "n_needed_if_equal", "identity_n_needed"))
    if ident is not None:
        return (
            f"; ~{ident:,.0f} identical greedy outputs of as many would pass it "
            f"(have {_v(row, 'identity_same'):.0f} of {_v(row, 'identity_n'):.0f} identical)"
        )
    lost, gained, d = _v(row, "n_lost"), _v(row, "n_gained"), _v(row, "delta")
    parts = []
    if equal is not None:
        if lost is not None and lost + gained == 0:
            parts.append(f"~{equal:,.0f} paired samples even if none of them differs")
        else:
            differ = f" ({(lost + gained) / n * 100:.3g} % of pairs differ)" if lost is not None and n else ""
            parts.append(f"~{equal:,.0f} paired samples if it is truly equal{differ}")
    if need is not None:
        at = (
            f" if the observed {d * 100:+.2f} points are the truth"
            if lost is not None and d is not None
            else " at the observed effect"
        )
        parts.append(f"~{need:,.0f}{' paired samples' if not parts else ''}{at}")
    return f"; to decide: {', '.join(parts)} (have {n:,.0f})" if parts else ""


def num(x: float) -> str:
    """Three significant figures without an exponent: 0.981, 1.00, 23.7, 115."""
    return f"{x:.0f}" if abs(x) >= 100 else f"{x:.1f}" if abs(x) >= 10 else f"{x:.2f}" if abs(x) >= 1 else f"{x:.3g}"


def energy_text(row: pd.Series) -> str:
    j, g = _v(row, "j_per_1m_output_tok"), _v(row, "gco2e_per_1m_output_tok")
    if j is None:
        return f"energy n/a ({_v(row, 'energy_note')})"
    carbon = f", {g:.3g} gCO2e per 1M tokens" if g is not None else f", carbon n/a ({_v(row, 'carbon_note')})"
    return f"{j / 1e6:.3g} J/token{carbon}"


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def reference_row(df: pd.DataFrame) -> pd.Series | None:
    """The reference variant's row; None when the run has none, or more than one."""
    refs = df[df["is_reference"].fillna(False).astype(bool)]
    return refs.iloc[0] if len(refs) == 1 else None


def summary_lines(df: pd.DataFrame) -> list[str]:
    """The decision in plain language: the recommendation (or why there is none), then one line per other variant."""
    if df.empty:
        return ["No variants in this run."]
    first = df.iloc[0]
    optimise, chosen = _v(first, "optimise"), _v(first, "recommended_variant")
    ref = reference_row(df)
    lines = []
    if chosen is None:
        lines.append(
            f"No variant to ship: {_v(first, 'decision_note')} ({slo_text(first)}, "
            f"retention target {_pct(_v(first, 'retention_target'))})."
        )
        best = None
    else:
        best = df[df["variant"] == chosen].iloc[0]
        vs_ref = ""
        if ref is not None and ref["variant"] != chosen and _v(best, "load_basis") == "trace":
            ratio = _ratio(_v(best, "sustainable_goodput_req_s"), _v(ref, "sustainable_goodput_req_s"))
            vs_ref = (
                f", {ratio:.2f}x the goodput of {ref['variant']} on it"
                if ratio is not None
                else f" ({ref['variant']} does not serve the trace within this SLO)"
            )
        elif ref is not None and ref["variant"] != chosen:
            ratio = _ratio(_v(best, "sustainable_req_s"), _v(ref, "sustainable_req_s"))
            vs_ref = (
                f", {ratio:.2f}x the sustainable rate of {ref['variant']}"
                if ratio is not None
                else f" ({ref['variant']} sustains no load under this SLO)"
            )
            if _v(ref, "trace_required") and _v(ref, "trace_slo_status") != "met":
                vs_ref += f" ({ref['variant']} does not serve the replayed trace within this SLO)"
        cost = _v(best, "usd_per_1m_output_tok")
        lines.append(
            f"Ship {chosen}{' (the reference)' if _v(best, 'is_reference') else ''}: "
            f"{load_text(best)}{vs_ref}{served_trace_text(best)} at {slo_text(best)}; {retention_text(best)}; "
            f"{energy_text(best)}"
            + (f"; {cost:.3g} USD per 1M output tokens" if cost is not None else "")
            + f". Chosen on {optimise} ({_v(best, 'verdict_reason')})."
        )
    for _, row in df.iterrows():
        if chosen is not None and row["variant"] == chosen:
            continue
        lines.append(variant_line(row, best, optimise))
    return lines


def variant_line(row: pd.Series, best: pd.Series | None, optimise: str) -> str:
    """One sentence on a variant that is not recommended: why not."""
    v, verdict = row["variant"], _v(row, "verdict")
    ahead = ""
    if _v(row, "beats_recommended") and best is not None:
        ratio = _ratio(_v(row, "objective"), _v(best, "objective"))
        ahead = f" is {AHEAD[optimise]}" + (f" ({ratio:.2f}x the {OBJECTIVE_UNIT[optimise]})" if ratio else "") + " but"
    if verdict == "failed":
        return f"{v} failed: {_v(row, 'verdict_reason').removeprefix('failed: ')}."
    unserved = _v(row, "trace_required") and _v(row, "trace_slo_status") != "met"
    if verdict in ("misses_slo", "not_enough_requests") and unserved and _v(row, "sustainable_scenario") is not None:
        return f"{v}{ahead} {_v(row, 'verdict_reason')}."
    if verdict == "misses_slo":
        return f"{v} sustains no load under the SLO: {_v(row, 'slo_note')}."
    if verdict == "not_enough_requests":
        return f"{v} cannot be judged on the SLO: {_v(row, 'slo_note')}."
    if verdict == "fails_gate":
        gate = (
            f"{_v(row, 'margin_points'):g}-point margin"
            if _v(row, "gate_basis") == "margin_points"
            else f"{_pct(_v(row, 'retention_target'))} gate"
        )
        return (
            f"{v}{ahead or ''} {retention_text(row)}: fails the {gate}"
            + (f" ({_v(row, 'gate_reason')})" if _v(row, "retention") is None else "")
            + "."
        )
    if verdict == "not_enough_evidence":
        reason = _v(row, "gate_reason") or ""
        if _v(row, "retention") is None and _v(row, "gate_basis") != "margin_points":
            detail = retention_text(row)
        elif "straddles" in reason:
            detail = f"{retention_text(row)}, which straddles {target_text(row)}"
        else:
            detail = f"{retention_text(row)}, but {reason}"
        return f"{v}{ahead or ''} is not measured well enough: {detail}{needed_text(row)}."
    if verdict == "not_ranked":
        return f"{v} meets the SLO and passes the gate but cannot be ranked: {_v(row, 'verdict_reason')}."
    return (
        f"{v} meets the SLO and passes the gate ({load_text(row)}; {retention_text(row)}); "
        f"{_v(row, 'verdict_reason').split('; ', 1)[-1]}."
    )


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
            fmt_or_null(r["sustainable_n"], ".0f") if cell_value(r["n_needed_slo"]) is None else f"needs {r['n_needed_slo']:.0f}",
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
            f"at most {margin:g} points lost (fraction metrics; else retention >= "
            f"{_pct(_v(first, 'retention_target'))})"
            if margin is not None
            else f"retention >= {_pct(_v(first, 'retention_target'))}"
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


def stability_text(counts: dict[str | None, int], chosen: str | None) -> str:
    """'Stability: q4_1 is the pick in 97 % of 200 resamples of the perf requests (q2_k 3 %).'"""
    total = sum(counts.values())
    if not total:
        return "Stability: not measured (no replicate could be decided)."
    share = lambda k: f"{counts.get(k, 0) / total * 100:.0f} %"
    others = sorted((k for k in counts if k != chosen), key=lambda k: (-counts[k], str(k)))
    rest = ", ".join(f"{k or 'none'} {share(k)}" for k in others)
    head = (
        f"{chosen} is the pick in {share(chosen)}" if chosen is not None else f"no variant is the pick in {share(None)}"
    )
    return (
        f"Stability: {head} of {total} resamples of the perf requests (each step's repeats drawn again, the "
        f"quality side as measured)" + (f"; otherwise {rest}" if rest else "") + "."
    )


def recommended_variant(con: duckdb.DuckDBPyConnection, run_id: str) -> str | None:
    rows = con.execute(
        "select any_value(recommended_variant) from v_recommendation where run_id = ?", [run_id]
    ).fetchall()
    return rows[0][0] if rows else None
