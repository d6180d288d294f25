"""Nights as a history in words: `tradeoff history` (by default what changed, newest first, one line per
change; `--all` each series and its change points; v_history and v_change_points), the change points a night's
load found (for notifications), and the items a variant lost against the reference (v_quality_flips) for the
text and HTML reports.

Plain Python over a warehouse connection (no Prefect), as tasks/report/text.py.
"""

from __future__ import annotations

import json
from datetime import date

import duckdb
import pandas as pd

from tasks.core.errors import ConfigError
from warehouse.errors import WarehouseError
from warehouse.history import MIN_NIGHTS

# The series `tradeoff history` and the HTML report show first (v_history.metric); quality metrics follow.
HEADLINE_METRICS = (
    "best_output_tok_s",
    "peak_output_tok_s",
    "ttft_ms_mean",
    "ttft_ms_p50",
    "ttft_ms_p99",
    "tpot_ms_mean",
    "ttft_cv_pct",
    "energy_j_per_token",
)


def parse_day(flag: str, text: str | None) -> date | None:
    """A day given on the command line (YYYY-MM-DD, UTC); None stays None."""
    if text is None:
        return None
    try:
        return date.fromisoformat(text)
    except ValueError:
        raise ConfigError(f"{flag}: {text!r} is not a day; write it as YYYY-MM-DD, e.g. {flag} 2026-01-20") from None


def history_frame(
    con: duckdb.DuckDBPyConnection,
    config: str | None = None,
    variant: str | None = None,
    metric: str | None = None,
    since: date | None = None,
) -> pd.DataFrame:
    """v_history's points of every series that matches: a series matches a config when any of its nights ran
    under that config name (so a renamed config shows its whole history), a variant likewise; with `since`, only
    the nights from that day (UTC) on."""
    return con.execute(
        """
        with matching as (
            select distinct series_key, metric from v_history
            where (? is null or config_name = ?) and (? is null or variant = ?) and (? is null or metric = ?)
        )
        select h.* from v_history as h join matching as m using (series_key, metric)
        where ?::date is null or h.started_at >= ?::date
        order by h.variant, h.metric, h.series_key, h.started_at, h.run_id""",
        [config, config, variant, variant, metric, metric, since, since],
    ).df()


def change_points_frame(con: duckdb.DuckDBPyConnection, series_keys: list[str]) -> pd.DataFrame:
    """v_change_points of these series, oldest first."""
    return con.execute(
        """
        select * from v_change_points where list_contains(?::varchar[], series_key)
        order by series_key, metric, started_at, rule""",
        [series_keys],
    ).df()


def _num(x) -> str:
    return "NULL" if x is None or pd.isna(x) else f"{x:.4g}"


def _text(x) -> str | None:
    """A text cell, None for NULL/NaN."""
    return x if isinstance(x, str) and x else None


def variant_text(r: pd.Series) -> str:
    """What served a series, in words: engine and quantization, then what else sets it apart (speculative
    decoding, engine options), so a speculative variant is not read as its plain twin."""
    parts = [str(r.engine), str(r.quantization)]
    if _text(r.get("speculative")):
        parts.append(f"speculative {r.speculative}")
    args = _text(r.get("engine_args"))
    if args:
        try:
            parsed = json.loads(args)
        except ValueError:
            parsed = args
        if isinstance(parsed, dict):
            parts += [f"{k}={json.dumps(v) if not isinstance(v, str) else v}" for k, v in sorted(parsed.items())]
        elif parsed:
            parts.append(f"engine args {parsed}")
    return " ".join(parts)


def evidence(c: pd.Series) -> str:
    """How a change point was found: Otava's test and its segments, or the band and its nights."""
    if c.rule == "otava":
        return f"Otava p={c.p_value:.1e}, {int(c.n_before)} nights before / {int(c.n_after)} after"
    return f"band of {int(c.n_before)} previous nights, series of {int(c.night)} nights: Otava needs {MIN_NIGHTS}"


def change_line(c: pd.Series) -> str:
    """One change point in words: where, from what to what, by which rule and how sure."""
    change = f"{c.change_pct:+.1f} %" if not pd.isna(c.change_pct) else "n/a"
    cause = f"; known cause: {c.known_cause}" if isinstance(c.known_cause, str) else ""
    return (
        f"{c.direction or 'change'} at run {c.run_id} ({c.started_at:%Y-%m-%d}): {_num(c.mean_before)} -> "
        f"{_num(c.mean_after)} ({change}; {evidence(c)}){cause}"
    )


def summary_line(c: pd.Series) -> str:
    """One change of `tradeoff history`'s summary: night, variant and what sets it apart, metric, before -> after
    with the unit, and the evidence."""
    unit = f" {c.unit}" if _text(c.unit) else ""
    change = f"{c.change_pct:+.1f} %" if not pd.isna(c.change_pct) else "n/a"
    seen = (
        f", first seen {c.first_seen_at:%Y-%m-%d}"
        if c.rule == "otava" and not pd.isna(c.first_seen_at) and c.first_seen_at != c.started_at
        else ""
    )
    cause = f"; known cause: {c.known_cause}" if _text(c.known_cause) else ""
    return (
        f"{c.started_at:%Y-%m-%d} {c.variant} [{variant_text(c)}] {c.metric}: {c.direction or 'change'} "
        f"{_num(c.mean_before)} -> {_num(c.mean_after)}{unit} ({change}; {evidence(c)}{seen}){cause}"
    )


def _marks(points: pd.DataFrame, changes: pd.DataFrame) -> dict[str, str]:
    by_run = {}
    for _, c in changes.iterrows():
        by_run.setdefault(c.run_id, []).append(
            f"<- {c.rule}: {c.direction} {c.change_pct:+.1f} %" + (f" (p={c.p_value:.1e})" if c.rule == "otava" else "")
        )
    for _, p in points.iterrows():
        if isinstance(p.known_cause, str):
            by_run.setdefault(p.run_id, []).append(f"[{p.known_cause}]")
    return {r: " ".join(m) for r, m in by_run.items()}


def _no_match(con: duckdb.DuckDBPyConnection, asked: dict) -> WarehouseError:
    what = ", ".join(f"{k} {v}" for k, v in asked.items() if v)
    known = con.execute("select string_agg(distinct config_name, ', ' order by config_name) from v_history").fetchall()
    return WarehouseError(f"no history matches {what or 'anything'}; configs with history: {known[0][0] or 'none'}")


def format_history(
    con: duckdb.DuckDBPyConnection,
    config: str | None = None,
    variant: str | None = None,
    metric: str | None = None,
    since: date | None = None,
    show_all: bool = False,
) -> str:
    """`tradeoff history`: a summary (nights, series, then one line per change, newest first); with `show_all`,
    per series a header, its change points, and (for one metric) each night."""
    points = history_frame(con, config, variant, metric, since)
    if points.empty:
        raise _no_match(con, {"config": config, "variant": variant, "metric": metric, "since": since})
    changes = change_points_frame(con, sorted(points.series_key.unique()))
    if since is not None:
        changes = changes[changes.started_at >= pd.Timestamp(since)]
    # only the metrics of the series asked for (a series key covers every metric of its scope)
    changes = changes.merge(points[["series_key", "metric"]].drop_duplicates(), on=["series_key", "metric"])
    if not show_all:
        return _summary(points, changes)
    show_nights = metric is not None or points.metric.nunique() == 1
    order = {m: i for i, m in enumerate(HEADLINE_METRICS)}
    lines = []
    groups = sorted(
        points.groupby(["variant", "metric", "series_key"], sort=False),
        key=lambda g: (g[0][0], order.get(g[0][1], len(order)), g[0][1]),
    )
    for (v, m, key), g in groups:
        c = changes[(changes.series_key == key) & (changes.metric == m)]
        names = ", ".join(sorted(g.config_name.unique()))
        first, last = g.iloc[0], g.iloc[-1]
        lines.append(
            f"{v} {m} [series {key}: {variant_text(last)}, hardware "
            f"{first.hardware_id}, config {names}]: {len(g)} nights {first.started_at:%Y-%m-%d}.."
            f"{last.started_at:%Y-%m-%d}, latest {_num(last.value)}, "
            f"{'higher' if last.higher_is_better else 'lower'} is better"
        )
        lines += [f"  {change_line(r)}" for _, r in c.iterrows()] or ["  no change point"]
        if show_nights:
            marks = _marks(g, c)
            lines += [
                f"    {p.started_at:%Y-%m-%d} {p.run_id}  {_num(p.value):>10}  {marks.get(p.run_id, '')}".rstrip()
                for _, p in g.iterrows()
            ]
    return "\n".join(lines)


def _summary(points: pd.DataFrame, changes: pd.DataFrame) -> str:
    """The default `tradeoff history`: what the nights cover, then one line per change, newest first."""
    nights = points.drop_duplicates("run_id")
    series = points[["series_key", "metric"]].drop_duplicates()
    first_seen = dict(zip(points.run_id, points.started_at))
    changes = changes.assign(first_seen_at=changes.first_seen_run_id.map(first_seen))
    changes = changes.sort_values(["started_at", "variant", "metric"], ascending=[False, True, True])
    counts = changes.direction.value_counts()
    first, last = nights.started_at.min(), nights.started_at.max()
    span = f"{first:%Y-%m-%d}" if first.date() == last.date() else f"{first:%Y-%m-%d}..{last:%Y-%m-%d}"
    found = (
        f"{len(changes)} change(s): {counts.get('regression', 0)} regression(s), "
        f"{counts.get('improvement', 0)} improvement(s)"
        if len(changes)
        else "no change"
    )
    head = (
        f"{len(nights)} night{'s' if len(nights) != 1 else ''} {span}, {len(series)} series "
        f"({points.variant.nunique()} variants x {points.metric.nunique()} metrics), {found}"
    )
    lines = [head + (", newest first:" if len(changes) else "")]
    lines += [f"  {summary_line(c)}" for _, c in changes.iterrows()]
    lines.append("every series: --all; one series night by night: --all --variant V --metric M")
    return "\n".join(lines)


def new_change_points(con: duckdb.DuckDBPyConnection, run_id: str) -> list[str]:
    """One line per regression this night's load reported: Otava's change points first seen in this run (the
    change may lie a few nights back) and band flags of this night."""
    df = con.execute(
        """
        select * from v_change_points where first_seen_run_id = ? and direction = 'regression'
        order by variant, metric, rule""",
        [run_id],
    ).df()
    return [f"{r.variant} {r.metric}: {r.rule} {change_line(r)}" for _, r in df.iterrows()]


def flips_frame(con: duckdb.DuckDBPyConnection, run_id: str) -> pd.DataFrame:
    """The run's items each variant lost against the reference (v_quality_flips, change = 'lost'), with how the
    item fared across nights."""
    return con.execute(
        """
        select variant, reference_variant, suite, sample_id, prompt, target, reference_response, response,
               item_history, nights, nights_lost
        from v_quality_flips where run_id = ? and change = 'lost'
        order by variant, item_history = 'lost every night', suite, sample_id""",
        [run_id],
    ).df()


def _clip(text, n: int, tail: bool = False) -> str:
    """`text` on one line in at most n characters: its start, or with `tail` its end (a prompt's few-shot preamble
    is the same for every item; its question is at the end)."""
    text = "" if text is None or (not isinstance(text, str) and pd.isna(text)) else str(text)
    text = " ".join(text.split())
    if len(text) <= n:
        return text
    return "…" + text[-(n - 1) :] if tail else text[: n - 1] + "…"


def flip_lines(df: pd.DataFrame, per_variant: int = 5) -> list[str]:
    """Per variant: how many items it lost, split by their history, then the first few with their text."""
    out = []
    for variant, g in df.groupby("variant", sort=True):
        counts = g.item_history.value_counts()
        kinds = ", ".join(f"{n} {k}" for k, n in counts.items())
        out.append(f"{variant} lost {len(g)} item(s) {g.reference_variant.iloc[0]} got right ({kinds}):")
        for _, r in g.head(per_variant).iterrows():
            out.append(
                f"  {r.suite}/{r.sample_id} [{r.item_history}, lost {r.nights_lost} of {r.nights} nights]: "
                f"{_clip(r.prompt, 80, tail=True)!r} expected {_clip(r.target, 30)!r}, reference "
                f"{_clip(r.reference_response, 30)!r}, "
                f"{variant} {_clip(r.response, 30)!r}"
            )
        if len(g) > per_variant:
            out.append(f"  ... and {len(g) - per_variant} more (v_quality_flips)")
    return out
