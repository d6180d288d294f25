"""The decision in words: which variant to ship under the run's SLO and quality gate, at what load and cost.

The sentences of `tradeoff recommend --explain`, plain language first ("Ship q4_1: ..."), then one line per
variant that is not shipped and why; each is said from a run's rows of v_recommendation (the decision is made once,
in SQL), a clause whose column is NULL left out. The CLI, the nightly's artifact, the HTML report and the
notification all print these same sentences.
"""

from __future__ import annotations

import pandas as pd

from tasks.decision.what_if import LIMIT_NAMES
from tasks.report.text import cell as _v

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


def pct(x: float | None) -> str:
    """A share as '88.0 %', 'n/a' where it is missing."""
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
            else f"keeps at least {pct(_v(row, 'identity_retention_low'))} of {metric}"
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
    return f"keeps {pct(ret)} of {metric}{ci}"


def target_text(row: pd.Series) -> str:
    """'the 99.0 % target' or 'the 2-point margin'."""
    if _v(row, "gate_basis") == "margin_points":
        return f"the {_v(row, 'margin_points'):g}-point margin"
    return f"the {pct(_v(row, 'retention_target'))} target"


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
            f"retention target {pct(_v(first, 'retention_target'))})."
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
            else f"{pct(_v(row, 'retention_target'))} gate"
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
