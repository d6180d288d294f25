"""`tradeoff recommend`'s answer on one screen, and the same decision as data (`--json`).

The default output: the verdict in at most two lines (the first names the variant to ship, or says there is none
and why), one short row per variant (verdict, sustainable load, speed against the reference with its paired
interval, quality change with its interval, the reason in a few words), then at most five notes. Every figure is a
column of the run's v_recommendation rows (recommend.decided_frame); a clause whose column is NULL is left out,
not guessed. The evidence in full (`--explain`) is recommend.format_recommendation.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import duckdb
import pandas as pd

from tasks.core.runinfo import RunPaths, runs_dir
from tasks.decision.stability import pick_stability
from tasks.report.recommend import FLAGS, decided_frame, gate_metrics, overridden_text
from tasks.report.sentences import AHEAD, num, reference_row, slo_text
from tasks.report.text import cell as _v
from tasks.report.text import correlated_claims, extended_claims, failed_request_rows, host_noise_rows

WIDTH = 160  # characters a line of the screen takes at most
LINES = 30  # lines the screen takes at most
REASON_CHARS = 40  # a table row's reason, at most


def clip(text: str, width: int = WIDTH) -> str:
    """`text`, cut to `width` characters ending in '...' where it was longer."""
    return text if len(text) <= width else text[: width - 3].rstrip() + "..."


def fitting(candidates: list[str], width: int = WIDTH) -> str:
    """The first of `candidates` (the fullest first) that fits in `width`; else the last, clipped."""
    return next((c for c in candidates if len(c) <= width), clip(candidates[-1], width))


def compared_load(row: pd.Series) -> float | None:
    """What a variant's load is compared on, as the explain text does: goodput on a replayed trace, else req/s."""
    return _v(row, "sustainable_goodput_req_s") if _v(row, "load_basis") == "trace" else _v(row, "sustainable_req_s")


def speed_vs_reference(row: pd.Series, ref: pd.Series | None) -> dict[str, Any] | None:
    """The variant's load over the reference's (`ratio`) and, for the best variant under a rate objective, the
    interval of that ratio paired round by round (`ci_low`, `ci_high`, `rounds`): v_recommendation pairs every
    variant with the best, so the reference's paired ratio, inverted, is the best's over the reference's. None
    without a single reference, or on the reference's own row."""
    if ref is None or row["variant"] == ref["variant"]:
        return None
    load, ref_load = compared_load(row), compared_load(ref)
    out: dict[str, Any] = {"ratio": float(load / ref_load) if load is not None and ref_load else None}
    out.update(ci_low=None, ci_high=None, rounds=None)
    lo, hi, rounds = (_v(ref, c) for c in ("paired_ratio_ci_low", "paired_ratio_ci_high", "paired_rounds"))
    # the best: rank 1 tied with none (in a tie the pick may be another than the best)
    best = _v(row, "rank") == 1 and _v(row, "tied_with") is None
    if best and _v(row, "optimise") == "rate" and lo and hi:
        out.update(ci_low=float(1 / hi), ci_high=float(1 / lo), rounds=None if rounds is None else int(rounds))
    return out


def speed_cell(speed: dict[str, Any] | None, is_reference: bool) -> str:
    """'1.22x (1.08-1.39)', '1.80x', 'reference' or '-'."""
    if is_reference:
        return "reference"
    if speed is None or speed["ratio"] is None:
        return "-"
    interval = f" ({speed['ci_low']:.2f}-{speed['ci_high']:.2f})" if speed["ci_low"] is not None else ""
    return f"{speed['ratio']:.2f}x{interval}"


def quality_cell(row: pd.Series) -> str:
    """The gating metric's change against the reference with its interval: '+0.0 pt (-1.6..+1.6)', '97.5 % (90.0-
    105.0)', '1474/1474 identical', 'reference' or '-'."""
    if _v(row, "is_reference"):
        return "reference"
    if _v(row, "gate_basis") == "identity" and _v(row, "gate") == "pass":
        return f"{_v(row, 'identity_same'):.0f}/{_v(row, 'identity_n'):.0f} identical"
    d, lo, hi = _v(row, "delta"), _v(row, "delta_ci_low"), _v(row, "delta_ci_high")
    if _v(row, "gate_basis") == "margin_points" and d is not None:
        interval = f" ({lo * 100:+.1f}..{hi * 100:+.1f})" if lo is not None and hi is not None else ""
        return f"{d * 100:+.1f} pt{interval}"
    ret, lo, hi = _v(row, "retention"), _v(row, "retention_ci_low"), _v(row, "retention_ci_high")
    if ret is None:
        return "-"
    interval = f" ({lo * 100:.1f}-{hi * 100:.1f})" if lo is not None and hi is not None else ""
    return f"{ret * 100:.1f} %{interval}"


def quality_clause(row: pd.Series) -> str | None:
    """The pick's quality in words: 'arithmetic.accuracy +0.0 points (-1.6..+1.6, 240 pairs)'; None unmeasured."""
    metric, n = _v(row, "gate_metric"), _v(row, "n")
    pairs = f", {n:,.0f} pairs" if n is not None else ""
    if metric is None:
        return None
    if _v(row, "gate_basis") == "identity" and _v(row, "gate") == "pass":
        return f"{metric} lossless: {_v(row, 'identity_same'):.0f} of {_v(row, 'identity_n'):.0f} outputs identical"
    d, lo, hi = _v(row, "delta"), _v(row, "delta_ci_low"), _v(row, "delta_ci_high")
    if _v(row, "gate_basis") == "margin_points" and d is not None:
        interval = f"{lo * 100:+.1f}..{hi * 100:+.1f}" if lo is not None and hi is not None else ""
        inside = ", ".join(filter(None, (interval, pairs.removeprefix(", "))))
        return f"{metric} {d * 100:+.1f} points" + (f" ({inside})" if inside else "")
    ret, lo, hi = _v(row, "retention"), _v(row, "retention_ci_low"), _v(row, "retention_ci_high")
    if ret is None:
        return None
    interval = f"{lo * 100:.1f}-{hi * 100:.1f} %" if lo is not None and hi is not None else ""
    inside = ", ".join(filter(None, (interval, pairs.removeprefix(", "))))
    return f"keeps {ret * 100:.1f} % of {metric}" + (f" ({inside})" if inside else "")


def load_cell(row: pd.Series) -> str:
    """'1.29 req/s c2', '>=4.50 req/s r4.5' (no rate step above it failed), '0.37 req/s trace' (goodput) or '-'."""
    if _v(row, "load_basis") == "trace":
        goodput = _v(row, "sustainable_goodput_req_s")
        return "-" if goodput is None else f"{num(goodput)} req/s trace"
    rate = _v(row, "sustainable_req_s")
    if rate is None:
        return "-"
    at_least = ">=" if _v(row, "load_basis") == "rate" and _v(row, "sustainable_is_lower_bound") else ""
    return f"{at_least}{num(rate)} req/s {_v(row, 'sustainable_scenario')}"


def load_clause(row: pd.Series, counts: bool = True) -> str:
    """The pick's load under the SLO: '1.29 req/s completed at concurrency 2 within p50 TTFT <= 2000 ms (24
    requests, 0 over a limit)'; without `counts`, the requests and those over a limit left out."""
    rate, basis = _v(row, "sustainable_req_s"), _v(row, "load_basis")
    if basis == "trace":
        load = f"goodput {num(_v(row, 'sustainable_goodput_req_s'))} req/s on the replayed trace"
    elif basis == "rate":
        load = f"{'at least ' if _v(row, 'sustainable_is_lower_bound') else ''}{num(rate)} req/s sustained"
    else:
        load = f"{num(rate)} req/s completed at concurrency {_v(row, 'sustainable_concurrency'):.0f}"
    n, over = _v(row, "sustainable_n"), _v(row, "sustainable_over")
    said = f" ({n:.0f} requests, {over:.0f} over a limit)" if counts and n is not None and over is not None else ""
    return f"{load} within {slo_text(row)}{said}"


def reason_cell(row: pd.Series, pick_objective: float | None) -> str:
    """Why this verdict, in at most REASON_CHARS characters (the whole reason: --explain)."""
    verdict, optimise = _v(row, "verdict"), _v(row, "optimise")
    tied = _v(row, "tied_with")
    if verdict == "recommended":
        text = f"best {optimise}" + (f", tied with {', '.join(tied)}" if tied is not None else "")
    elif verdict == "passes":
        objective = _v(row, "objective")
        ratio = f"; {optimise} {objective / pick_objective:.2f}x the pick" if objective and pick_objective else ""
        text = f"passes{ratio}"
    elif verdict == "fails_gate":
        text = f"fails the gate: {_v(row, 'gate_metric')}"
    elif verdict == "not_enough_evidence":
        ident, need = _v(row, "identity_n_needed"), _v(row, "n_needed")
        text = (
            f"gate undecided: ~{ident:,.0f} identical needed"
            if ident is not None
            else f"gate undecided: ~{need:,.0f} pairs needed"
            if need is not None
            else "gate undecided"
        )
    elif verdict == "misses_slo":
        failing = _v(row, "next_failing_scenario")
        text = (
            "misses the SLO on the replayed trace"
            if _v(row, "sustainable_scenario") is not None
            else f"{failing} misses the SLO"
            if failing is not None
            else "meets the SLO at no step"
        )
    elif verdict == "not_enough_requests":
        need = _v(row, "n_needed_slo")
        text = "too few requests to show the SLO" + (f": ~{need:,.0f}" if need is not None else "")
    elif verdict == "not_ranked":
        text = f"no {optimise} value"
    else:
        text = _v(row, "verdict_reason") or verdict or ""
    return clip(text, REASON_CHARS)


def verdict_lines(df: pd.DataFrame) -> list[str]:
    """The answer in at most two lines, the first naming the variant to ship ('Ship q4_1-2s: 1.22x the
    reference's sustainable rate (paired 1.08-1.39x over 6 rounds), arithmetic.accuracy +0.0 points (-1.6..+1.6,
    240 pairs).') or saying there is none ('No variant to ship: <why>.')."""
    if df.empty:
        return ["No variant to ship: no variants in this run."]
    first = df.iloc[0]
    chosen, optimise = _v(first, "recommended_variant"), _v(first, "optimise")
    if chosen is None:
        return [clip(f"No variant to ship: {_v(first, 'decision_note')}.")]
    pick = df[df["variant"] == chosen].iloc[0]
    ref = reference_row(df)
    tied = _v(pick, "tied_with")
    tie = f"tied with {', '.join(tied)} on {optimise}" if tied is not None else ""
    load = load_clause(pick)
    if _v(pick, "is_reference") or ref is None:
        name = f"Ship {chosen}{' (the reference)' if _v(pick, 'is_reference') else ''}"
        loads = [load, load_clause(pick, counts=False)]
        line1 = fitting([f"{name}: {x}" + (f"; {tie}" if tie else "") + "." for x in loads])
        rest = []
    else:
        speed = speed_vs_reference(pick, ref)
        what = "goodput on the trace" if _v(pick, "load_basis") == "trace" else "sustainable rate"
        if speed is None or speed["ratio"] is None:
            speeds = [f"the reference ({ref['variant']}) sustains no load under this SLO"]
        else:
            ratio = f"{speed['ratio']:.2f}x the reference's {what}"
            speeds = [ratio]
            if speed["ci_low"] is not None:
                interval = f"{speed['ci_low']:.2f}-{speed['ci_high']:.2f}x"
                rounds = f" over {speed['rounds']} rounds" if speed["rounds"] is not None else ""
                speeds = [f"{ratio} (paired {interval}{rounds})", f"{ratio} (paired {interval})", ratio]
        quality = quality_clause(pick)
        line1 = fitting(
            [f"Ship {chosen}: {s}" + (f", {quality}" if quality else "") + "." for s in speeds]
            + [f"Ship {chosen}: {s}." for s in speeds]
        )
        rest = [fitting([load, load_clause(pick, counts=False)], WIDTH - 1)] + ([tie] if tie else [])
    ahead = [
        f"{r['variant']} ({r['verdict']})"  # its speed against the reference is in the table
        for _, r in df.iterrows()
        if _v(r, "beats_recommended") and _v(r, "objective") is not None and _v(pick, "objective")
    ]
    if ahead:
        rest.append(
            fitting(
                [
                    f"{AHEAD[optimise]} but not shipped: {', '.join(ahead[:k])}"
                    + (f" and {len(ahead) - k} more" if k < len(ahead) else "")
                    for k in range(len(ahead), 0, -1)
                ],
                WIDTH - 1,
            )
        )
    # as many of the second line's clauses as fit, in order
    line2 = ""
    for part in rest:
        joined = f"{line2}; {part}" if line2 else part[0].upper() + part[1:]
        if len(joined) + 1 > WIDTH:
            break
        line2 = joined
    return [line1] + ([line2 + "."] if line2 else [])


def table_lines(df: pd.DataFrame, rows_max: int) -> list[str]:
    """One row per variant (at most `rows_max` lines with the header): verdict, load, speed and quality against the
    reference with their intervals, and the reason in a few words; columns padded to their widest cell."""
    ref = reference_row(df)
    chosen = _v(df.iloc[0], "recommended_variant") if len(df) else None
    picked = df[df["variant"] == chosen]
    pick_objective = _v(picked.iloc[0], "objective") if len(picked) else None
    header = ["variant", "verdict", "load", "speed vs ref", "quality vs ref", "reason"]
    rows = [
        [
            str(r["variant"]),
            str(_v(r, "verdict")),
            load_cell(r),
            speed_cell(speed_vs_reference(r, ref), bool(_v(r, "is_reference"))),
            quality_cell(r),
            reason_cell(r, pick_objective),
        ]
        for _, r in df.iterrows()
    ]
    if len(rows) > rows_max - 1:  # the header takes a line
        left = len(rows) - (rows_max - 2)
        rows = rows[: rows_max - 2] + [[f"... {left} more variants: --explain", "", "", "", "", ""]]
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    return [clip("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip()) for r in [header, *rows]]


def settings_note(con: duckdb.DuckDBPyConnection, run_id: str, row: pd.Series, overrides: dict[str, Any]) -> str:
    """'run d1: p99 TTFT <= 2000 ms, TPOT <= 200 ms; gate: at most 2 points lost on arithmetic.accuracy; optimising
    rate': what the decision was made under, and which flags overrode the run's own settings."""
    margin, target = _v(row, "margin_points"), _v(row, "retention_target")
    gate = f"at most {margin:g} points lost" if margin is not None else f"retention >= {target * 100:.1f} %"
    metrics = ", ".join(gate_metrics(con, run_id)) or "no metric"
    return clip(
        f"run {run_id}: {slo_text(row)}; gate: {gate} on {metrics}; optimising {_v(row, 'optimise')}"
        + overridden_text(overrides)
    )


def stability_share(counts: dict[str | None, int]) -> list[dict[str, Any]]:
    """How often each variant (None: none) was the pick over the replicates, the most frequent first."""
    total = sum(counts.values())
    ordered = sorted(counts.items(), key=lambda kv: (-kv[1], str(kv[0])))
    return [{"variant": v, "count": n, "share": n / total} for v, n in ordered] if total else []


def stability_note(counts: dict[str | None, int], chosen: str | None) -> str:
    """'stability: q4_1-2s is the pick in 98 % of 200 resamples of the perf side (q4_1 2 %)'."""
    shares = stability_share(counts)
    if not shares:
        return "stability: not measured (no replicate could be decided)"
    share = {s["variant"]: s["share"] for s in shares}
    others = ", ".join(f"{s['variant'] or 'none'} {s['share'] * 100:.0f} %" for s in shares if s["variant"] != chosen)
    who = f"{chosen} is the pick" if chosen is not None else "no variant is the pick"
    return clip(
        f"stability: {who} in {share.get(chosen, 0) * 100:.0f} % of {sum(counts.values())} resamples of the perf side"
        + (f" ({others})" if others else "")
    )


def evidence_counts(con: duckdb.DuckDBPyConnection, run_id: str) -> dict[str, int]:
    """What --explain details, counted: claims whose requests count as fewer (correlated), claims extended by
    decision.extend, steps with a host-disturbed window (measured again or kept), failed measured requests."""
    host = host_noise_rows(con, run_id)
    return {
        "correlated_claims": len(correlated_claims(con, run_id)),
        "extended_claims": len(extended_claims(con, run_id)),
        "disturbed_steps": sum(1 for r in host if r[3] or r[4]),
        "windows_measured_again": sum(r[3] or 0 for r in host),
        "windows_kept_disturbed": sum(r[4] or 0 for r in host),
        "failed_requests": len(failed_request_rows(con, run_id)),
    }


def counted(n: int, thing: str) -> str:
    """'1 claim', '3 claims'."""
    return f"{n} {thing}{'' if n == 1 else 's'}"


def evidence_note(counts: dict[str, int]) -> str | None:
    """'evidence: 3 claims extended (decision.extend); host disturbed in 1 step (2 windows measured again, 0 kept)'
    and the like: what --explain details, counted; None when there is none of it."""
    parts = []
    if counts["extended_claims"]:
        parts.append(f"{counted(counts['extended_claims'], 'claim')} extended (decision.extend)")
    if counts["correlated_claims"]:
        parts.append(f"{counted(counts['correlated_claims'], 'claim')} count correlated requests as fewer")
    if counts["disturbed_steps"]:
        parts.append(
            f"host disturbed in {counted(counts['disturbed_steps'], 'step')} "
            f"({counted(counts['windows_measured_again'], 'window')} measured again, "
            f"{counts['windows_kept_disturbed']} kept)"
        )
    if counts["failed_requests"]:
        parts.append(f"{counted(counts['failed_requests'], 'measured request')} failed")
    return clip("evidence: " + "; ".join(parts)) if parts else None


def html_report(run_id: str) -> Path | None:
    """The run's HTML report where the nightly wrote it (runs/<run_id>/report.html), if it is on this host."""
    path = RunPaths(run_id, runs_dir() / run_id).report_html
    return path if path.is_file() else None


def more_note(run_id: str) -> str:
    """Where the rest is: the evidence, the data, the HTML report and the docs."""
    html = html_report(run_id)
    where = str(html) if html is not None else "tradeoff report --html FILE"
    return fitting(
        [
            f"more: tradeoff recommend --explain (evidence) | --json (data) | HTML report: {where} | docs/decision.md",
            f"more: tradeoff recommend --explain | --json | {where} | docs/decision.md",
            f"more: {where} | tradeoff recommend --explain | --json",
        ]
    )


def format_screen(
    con: duckdb.DuckDBPyConnection,
    run_id: str | None = None,
    overrides: dict[str, Any] | None = None,
    stability: int = 0,
) -> str:
    """`tradeoff recommend`: the verdict, the table and the notes in at most LINES lines of at most WIDTH
    characters (with `stability` resamples, how often the pick holds when the perf side is measured again)."""
    overrides = overrides or {}
    run_id, _, df = decided_frame(con, run_id, overrides)
    verdict = verdict_lines(df)
    notes = []
    if len(df):
        notes.append(settings_note(con, run_id, df.iloc[0], overrides))
        if stability:
            chosen = _v(df.iloc[0], "recommended_variant")
            notes.append(stability_note(pick_stability(con, run_id, stability), chosen))
    evidence = evidence_note(evidence_counts(con, run_id))
    notes += ([evidence] if evidence else []) + [more_note(run_id)]
    table = table_lines(df, LINES - len(verdict) - len(notes) - 2) if len(df) else []
    return "\n".join([*verdict, "", *table, "", *notes] if table else [*verdict, "", *notes])


def recommendation_data(
    con: duckdb.DuckDBPyConnection,
    run_id: str | None = None,
    overrides: dict[str, Any] | None = None,
    stability: int = 0,
) -> dict[str, Any]:
    """`tradeoff recommend --json`: the decision as one JSON-ready object: the run, its settings, the pick, and per
    variant every column of v_recommendation (NULL as None) with the screen's figures (`screen`)."""
    import json

    overrides = overrides or {}
    run_id, spec, df = decided_frame(con, run_id, overrides)
    ref = reference_row(df)
    first = df.iloc[0] if len(df) else None
    chosen = _v(first, "recommended_variant") if first is not None else None
    variants = json.loads(df.to_json(orient="records", date_format="iso", double_precision=15)) if len(df) else []
    pick_objective = _v(df[df["variant"] == chosen].iloc[0], "objective") if chosen is not None else None
    html = html_report(run_id)
    for item, (_, row) in zip(variants, df.iterrows()):
        item["screen"] = {
            "load": load_cell(row),
            "speed_vs_reference": speed_vs_reference(row, ref),
            "quality_vs_reference": quality_cell(row),
            "reason": reason_cell(row, pick_objective),
        }
    return {
        "run_id": run_id,
        "settings": {
            "decision": spec.model_dump(mode="json"),
            "slo": slo_text(first) if first is not None else None,
            "gate_metrics": gate_metrics(con, run_id),
            "optimise": _v(first, "optimise") if first is not None else spec.optimise,
            "overridden": [FLAGS[k] for k in overrides],
        },
        "pick": chosen,
        "decision_note": _v(first, "decision_note") if first is not None else None,
        "verdict": verdict_lines(df),
        "stability": stability_share(pick_stability(con, run_id, stability)) if stability and len(df) else None,
        "evidence": evidence_counts(con, run_id),
        "html_report": str(html) if html is not None else None,
        "variants": variants,
    }
