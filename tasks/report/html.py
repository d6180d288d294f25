"""The HTML report of one run: one self-contained page (inline CSS, SVG plots and one inline script, no
external resources) with the trade-off table, takeaways and the plots an inference team reads.

First the decision (v_recommendation: which variant to ship, its frontier plot with intervals on both axes), then
its explorer: the decision under other SLO limits, percentiles, gates and objectives, precomputed for a grid of
`tradeoff recommend`'s flags (tasks.report.explorer) and looked up by the page's script (explorer.js).
Plots: tokens/s vs quality with the Pareto frontier, TTFT and ITL CDFs per variant, jitter bars,
throughput and latency vs concurrency, energy per token, the long-context length x depth grid.
Then nights as a history: the headline series across nights with their change points marked (v_change_points),
the pick of each night (v_recommendation_history), and per variant the items it lost against the reference
(v_quality_flips, in <details>). A plot with no data says why instead of drawing nothing.
"""

from __future__ import annotations

import html
import io
import json
from dataclasses import dataclass
from pathlib import Path

import duckdb
import numpy as np
import pandas as pd

from tasks.core.errors import ConfigError
from tasks.report.explorer import explorer_data
from tasks.report.history import flips_frame
from tasks.report.recommend import recommendation_frame
from tasks.report.sentences import summary_lines
from tasks.report.text import (
    claim_lines,
    error_lines,
    gate_plan_lines,
    host_noise_lines,
    quality_unit,
    takeaways,
    trace_lines,
    tradeoff_frame,
)

CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px auto;max-width:1340px;color:#222}
h1{font-size:22px}h2{font-size:18px;margin-top:32px;border-bottom:1px solid #ddd}
.scroll{overflow-x:auto}table{border-collapse:collapse;font-size:13px;margin:8px 0}
th,td{border:1px solid #ccc;padding:4px 5px;text-align:right}
th{background:#f3f3f3}td.l,th.l{text-align:left}.note{color:#666;font-size:13px}
.grid{display:grid;grid-template-columns:1fr 1fr;gap:16px}.fig{border:1px solid #eee;padding:8px}
.fig h3{font-size:14px;margin:0 0 4px}.bad{color:#b00}.good{color:#070}h3{font-size:15px}
summary{cursor:pointer;margin:6px 0}table.people{width:100%;font-size:12.5px}table.people td{white-space:nowrap}
table.people td.l{white-space:normal}th{font-weight:600;vertical-align:bottom}
th.grp{text-align:center;background:#e6e6e6}small.ci{color:#666}th[title]{cursor:help}
.explorer-controls{display:flex;flex-wrap:wrap;gap:8px 18px;font-size:13px;margin:8px 0}
.explorer-controls select{font-size:13px;margin-left:4px}#explorer-flags{font-size:12px}
.explorer-body{display:grid;grid-template-columns:590px 1fr;gap:16px;align-items:start}
"""
# The explorer's script (tasks/report/explorer.js), inlined into the page.
EXPLORER_JS = Path(__file__).with_name("explorer.js")


def _svg(fig) -> str:
    """A matplotlib figure as inline SVG (closed afterwards)."""
    import matplotlib.pyplot as plt

    buf = io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight")
    plt.close(fig)
    svg = buf.getvalue()
    return svg[svg.index("<svg") :]


def _figure(title: str, body: str) -> str:
    return f'<div class="fig"><h3>{html.escape(title)}</h3>{body}</div>'


def _note(text: str) -> str:
    return f'<p class="note">{html.escape(text)}</p>'


def _axes(w: float = 5.6, h: float = 3.6):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(w, h))
    ax.grid(alpha=0.3)
    return fig, ax


def pareto_plot(con: duckdb.DuckDBPyConnection, run_id: str) -> str:
    df = con.execute("select * from v_pareto where run_id = ? and quality is not null", [run_id]).df()
    if df.empty:
        return _note("no variant has both tokens/s and a primary quality metric")
    fig, ax = _axes()
    on = df[df.on_quality_frontier]
    ax.scatter(
        df.best_output_tok_s, df.quality, c=["#1f77b4" if f else "#aaa" for f in df.on_quality_frontier], zorder=3
    )
    for _, r in df.iterrows():
        ax.annotate(r.variant, (r.best_output_tok_s, r.quality), textcoords="offset points", xytext=(4, 4), fontsize=8)
    front = on.sort_values("best_output_tok_s")
    ax.plot(front.best_output_tok_s, front.quality, "-", color="#1f77b4", alpha=0.6, label="Pareto frontier")
    ax.set_xlabel("output tokens/s (best sustained)")
    ax.set_ylabel(df.quality_metric.iloc[0])
    ax.legend(fontsize=8)
    return _svg(fig)


def _headline_requests(con: duckdb.DuckDBPyConnection, run_id: str) -> pd.DataFrame:
    """The ok requests of each variant's headline scenario (stg_headline_scenario, as v_tradeoff's latencies)."""
    return con.execute(
        """
        select r.variant, r.concurrency, r.ttft_ms, r.chunk_offsets_ms
        from perf_requests as r
        join stg_headline_scenario as h using (run_id, variant, scenario)
        where r.run_id = ? and r.status = 'ok' and not r.is_warmup
        order by r.variant""",
        [run_id],
    ).df()


def cdf_plots(con: duckdb.DuckDBPyConnection, run_id: str) -> tuple[str, str]:
    df = _headline_requests(con, run_id)
    if df.empty:
        return _note("no successful requests"), _note("no successful requests")
    out = []
    for what in ("ttft", "itl"):
        fig, ax = _axes()
        for variant, g in df.groupby("variant"):
            if what == "ttft":
                vals = np.sort(g.ttft_ms.to_numpy(dtype=float))
            else:
                vals = np.sort(
                    np.concatenate(
                        [np.diff(np.asarray(c, dtype=float)) for c in g.chunk_offsets_ms if len(c) > 1]
                        or [np.array([])]
                    )
                )
            if vals.size:
                ax.step(vals, np.arange(1, vals.size + 1) / vals.size, where="post", label=variant)
        ax.set_xlabel("TTFT (ms)" if what == "ttft" else "inter-token latency (ms)")
        ax.set_ylabel("fraction of requests" if what == "ttft" else "fraction of gaps")
        ax.set_xscale("log")
        ax.legend(fontsize=8)
        out.append(_svg(fig))
    return out[0], out[1]


def jitter_plot(con: duckdb.DuckDBPyConnection, run_id: str) -> str:
    # v_tradeoff's jitter figures: per-repeat CVs of the fixed-length jitter workload (tasks.perf.jitter)
    s = con.execute(
        """
        select variant, ttft_cv_pct, itl_cv_pct from v_tradeoff where run_id = ? and status = 'ok'
        order by variant""",
        [run_id],
    ).df()
    if s.empty:
        return _note("no perf summary")
    fig, ax = _axes()
    x = np.arange(len(s))
    ax.bar(x - 0.2, s.ttft_cv_pct.fillna(0), 0.4, label="TTFT CV %")
    ax.bar(x + 0.2, s.itl_cv_pct.fillna(0), 0.4, label="ITL CV %")
    ax.set_xticks(x, s.variant, rotation=20, fontsize=8)
    ax.set_ylabel("coefficient of variation (%)")
    ax.legend(fontsize=8)
    return _svg(fig)


def concurrency_plots(con: duckdb.DuckDBPyConnection, run_id: str) -> tuple[str, str]:
    s = con.execute(
        "select variant, concurrency, output_throughput, ttft_ms_mean, ttft_ms_p99 from perf_summary "
        "where run_id = ? order by variant, concurrency",
        [run_id],
    ).df()
    if s.empty:
        return _note("no perf summary"), _note("no perf summary")
    figs = []
    for col, label in (("output_throughput", "output tokens/s"), ("ttft_ms_mean", "TTFT mean (ms)")):
        fig, ax = _axes()
        for variant, g in s.groupby("variant"):
            ax.plot(g.concurrency, g[col], "o-", label=variant)
        ax.set_xlabel("concurrency")
        ax.set_ylabel(label)
        ax.legend(fontsize=8)
        figs.append(_svg(fig))
    return figs[0], figs[1]


def energy_plot(df: pd.DataFrame) -> str:
    ok = df[df.energy_j_per_token.notna()]
    if ok.empty:
        notes = sorted({n for n in df.energy_note.dropna()})
        return _note("energy not measured: " + ("; ".join(notes) or "no perf results"))
    fig, ax = _axes()
    ax.bar(ok.variant, ok.energy_j_per_token)
    ax.set_ylabel("J per output token")
    ax.tick_params(axis="x", rotation=20, labelsize=8)
    return _svg(fig)


def long_context_plot(con: duckdb.DuckDBPyConnection, run_id: str) -> str:
    """Accuracy per (context length, depth) for the reference and the worst-scoring variant."""
    s = con.execute(
        """
        select variant, try_cast(json_extract(details, '$.context_tokens') as integer) as length_tokens,
               try_cast(json_extract(details, '$.depth_pct') as double) as depth_pct, score
        from quality_samples where run_id = ? and json_extract(details, '$.depth_pct') is not null""",
        [run_id],
    ).df()
    s = s.dropna(subset=["length_tokens", "depth_pct"])
    if s.empty:
        return _note("no long-context retrieval suite in this run")
    grid = s.groupby(["variant", "length_tokens", "depth_pct"]).score.mean().reset_index()
    variants = sorted(grid.variant.unique())
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(variants), figsize=(2.6 * len(variants) + 1, 2.8), squeeze=False)
    for ax, v in zip(axes[0], variants):
        g = grid[grid.variant == v].pivot(index="depth_pct", columns="length_tokens", values="score")
        im = ax.imshow(g.to_numpy(), vmin=0, vmax=1, cmap="viridis", aspect="auto", origin="lower")
        ax.set_xticks(range(len(g.columns)), [str(c) for c in g.columns], fontsize=7, rotation=45)
        ax.set_yticks(range(len(g.index)), [f"{d:.0f}" for d in g.index], fontsize=7)
        ax.set_title(v, fontsize=9)
        ax.set_xlabel("context (tokens)", fontsize=8)
    axes[0][0].set_ylabel("needle depth (%)", fontsize=8)
    fig.colorbar(im, ax=axes[0].tolist(), shrink=0.8, label="accuracy")
    return _svg(fig)


def _run_series(con: duckdb.DuckDBPyConnection, run_id: str, metric: str) -> pd.DataFrame:
    """v_history of `metric` for the series of this run's variants (keyed on what was measured: a renamed config
    keeps its nights), up to this run."""
    return con.execute(
        """
        with this as (select distinct series_key from v_history where run_id = ? and metric = ?)
        select h.* from v_history as h join this using (series_key)
        where h.metric = ? and h.started_at <= (select timezone('UTC', started_at) from runs where run_id = ?)
        order by h.variant, h.started_at, h.run_id""",
        [run_id, metric, metric, run_id],
    ).df()


def history_plot(con: duckdb.DuckDBPyConnection, run_id: str, metric: str) -> str:
    """One headline series per variant across nights, its change points marked: Otava's as a dashed line at the
    first night after the change with the means either side, the band rule's as a ring; engine version changes
    as a grey tick."""
    h = _run_series(con, run_id, metric)
    if h.run_id.nunique() < 2:
        return _note(f"{metric}: fewer than two nights in this run's series yet")
    cps = con.execute(
        """select * from v_change_points where metric = ? and list_contains(?::varchar[], series_key)
                         and started_at <= (select timezone('UTC', started_at) from runs where run_id = ?)""",
        [metric, sorted(h.series_key.unique()), run_id],
    ).df()
    fig, ax = _axes(6.4, 3.8)
    for (variant, key), g in h.groupby(["variant", "series_key"]):
        (line,) = ax.plot(g.started_at, g.value, "o-", ms=3, label=variant)
        for _, c in cps[(cps.series_key == key) & (cps.rule == "otava")].iterrows():
            ax.axvline(c.started_at, ls="--", color=line.get_color(), alpha=0.7)
            before = g[g.started_at < c.started_at].tail(int(c.n_before))
            after = g[g.started_at >= c.started_at].head(int(c.n_after))
            ax.plot(before.started_at, [c.mean_before] * len(before), "-", color=line.get_color(), lw=2, alpha=0.4)
            ax.plot(after.started_at, [c.mean_after] * len(after), "-", color=line.get_color(), lw=2, alpha=0.4)
            ax.annotate(
                f"{c.change_pct:+.0f} % ({c.direction}, p={c.p_value:.0e})",
                (c.started_at, c.mean_after),
                textcoords="offset points",
                xytext=(4, 6),
                fontsize=7,
                color=line.get_color(),
            )
        band = cps[(cps.series_key == key) & (cps.rule == "band")]
        pts = g[g.run_id.isin(band.run_id)]
        ax.scatter(pts.started_at, pts.value, s=80, facecolors="none", edgecolors=line.get_color(), zorder=4)
        for _, p in g[g.known_cause.notna()].iterrows():
            ax.axvline(p.started_at, color="#999", lw=0.8, alpha=0.6)
    ax.set_ylabel(metric)
    ax.tick_params(axis="x", rotation=20, labelsize=7)
    ax.legend(fontsize=7)
    return _svg(fig)


def pick_timeline(picks: pd.DataFrame) -> str:
    """The pick of each night (v_recommendation_history) as a timeline: one row per variant picked (and 'no
    pick'), a dot per night, a dashed line and the new pick's name where the pick changed."""
    if picks.run_id.nunique() < 2:
        return _note("fewer than two nights of picks yet")
    picks = picks.sort_values("started_at")
    names = picks.recommended_variant.fillna("no pick")
    rows = sorted(names.unique(), key=lambda v: (v == "no pick", v))
    fig, ax = _axes(6.4, 0.6 + 0.45 * len(rows))
    y = names.map({v: i for i, v in enumerate(rows)})
    ax.step(picks.started_at, y, where="post", color="#999", lw=1)
    ax.scatter(picks.started_at, y, s=14, zorder=3, color="#1f77b4")
    for (_, p), yy in zip(
        picks[picks.pick_changed.fillna(False).astype(bool)].iterrows(),
        y[picks.pick_changed.fillna(False).astype(bool)],
    ):
        ax.axvline(p.started_at, ls="--", color="#d62728", alpha=0.6)
        ax.annotate(f"-> {names[p.name]}", (p.started_at, yy), textcoords="offset points", xytext=(3, 5), fontsize=7)
    ax.set_yticks(range(len(rows)), rows, fontsize=8)
    ax.set_ylim(-0.6, len(rows) - 0.4)
    ax.tick_params(axis="x", rotation=20, labelsize=7)
    return _svg(fig)


def history_section(con: duckdb.DuckDBPyConnection, run_id: str, metric: str | None) -> str:
    """The headline series across nights with their change points, the change points themselves, and the pick
    of each night (v_recommendation_history)."""
    keys = con.execute("select distinct series_key from v_history where run_id = ?", [run_id]).df().series_key.tolist()
    cps = con.execute(
        """
        select variant, metric, run_id, started_at, rule, direction, mean_before, mean_after, change_pct, p_value,
               known_cause, first_seen_run_id
        from v_change_points where list_contains(?::varchar[], series_key)
            and started_at <= (select timezone('UTC', started_at) from runs where run_id = ?)
        order by started_at desc, variant, metric, rule""",
        [keys, run_id],
    ).df()
    # the headline series, then every other metric with a change point: each change listed has its plot
    metrics = ["best_output_tok_s", "tpot_ms_mean", "ttft_ms_p99"] + ([metric] if metric else [])
    metrics += sorted(set(cps.metric) - set(metrics))
    figs = "".join(
        _figure(
            f"History: {m} across nights (dashed: Otava change point; ring: band rule)", history_plot(con, run_id, m)
        )
        for m in metrics
    )
    cps["p_value"] = cps.p_value.map(_p_text)
    picks = con.execute(
        """
        with this as (select series_key from v_recommendation_history where run_id = ?)
        select h.started_at, h.run_id, h.config_name, h.recommended_variant, h.load_req_s, h.retention,
               h.retention_ci_low, h.retention_ci_high, h.pick_changed
        from v_recommendation_history as h join this using (series_key)
        where h.started_at <= (select timezone('UTC', started_at) from runs where run_id = ?)
        order by h.started_at desc""",
        [run_id, run_id],
    ).df()
    timeline = _figure("The pick over the nights (dashed: the pick changed)", pick_timeline(picks))
    changed = picks[picks.pick_changed.fillna(False).astype(bool)]
    picks = picks.head(30)
    cp_table = (
        _table(
            cps,
            [
                ("started_at", "night"),
                ("run_id", "run where it changed"),
                ("variant", "variant"),
                ("metric", "metric"),
                ("rule", "rule"),
                ("direction", "direction"),
                ("mean_before", "before"),
                ("mean_after", "after"),
                ("change_pct", "change %"),
                ("p_value", "p-value"),
                ("known_cause", "known cause"),
                ("first_seen_run_id", "first seen with run"),
            ],
        )
        if not cps.empty
        else _note("no change point in this run's series (or fewer than two nights)")
    )
    pick_table = (
        _table(
            picks,
            [
                ("started_at", "night"),
                ("run_id", "run"),
                ("config_name", "config"),
                ("recommended_variant", "pick"),
                ("load_req_s", "load req/s"),
                ("retention", "retention"),
                ("retention_ci_low", "CI low"),
                ("retention_ci_high", "CI high"),
                ("pick_changed", "changed"),
            ],
        )
        if not picks.empty
        else _note("no recommendation history")
    )
    return (
        f'<div class="grid">{figs}</div><h3>Change points of these series</h3><div class="scroll">{cp_table}</div>'
        f'<h3>The pick of each night</h3><div class="grid">{timeline}</div>'
        + (
            _note(
                "the pick changed: "
                + "; ".join(
                    f"{r.started_at:%Y-%m-%d} to {r.recommended_variant or 'no pick'}" for _, r in changed.iterrows()
                )
            )
            if not changed.empty
            else _note("the pick did not change")
        )
        + f'<h3>The pick of each night (latest 30)</h3><div class="scroll">{pick_table}</div>'
    )


def flips_section(con: duckdb.DuckDBPyConnection, run_id: str) -> str:
    """Per variant, the items it got wrong that the reference got right, with the text and the item's history."""
    df = flips_frame(con, run_id)
    if df.empty:
        return _note("no item lost against the reference (or no per-sample scores)")
    out = []
    for variant, g in df.groupby("variant", sort=True):
        kinds = ", ".join(f"{n} {k}" for k, n in g.item_history.value_counts().items())
        table = _table(
            g,
            [
                ("suite", "suite"),
                ("sample_id", "sample"),
                ("item_history", "across nights"),
                ("nights_lost", "nights lost"),
                ("nights", "nights"),
                ("prompt", "prompt"),
                ("target", "expected"),
                ("reference_response", g.reference_variant.iloc[0]),
                ("response", variant),
            ],
        )
        out.append(
            f"<details><summary>{html.escape(variant)}: {len(g)} item(s) lost ({html.escape(kinds)})"
            f'</summary><div class="scroll">{table}</div></details>'
        )
    return "".join(out)


def decision_section(con: duckdb.DuckDBPyConnection, run_id: str) -> str:
    """The decision (v_recommendation): the sentences, then sustainable output tokens/s vs retention of the gating
    metric with both intervals as error bars, the frontier and the recommended variant marked, then the rows."""
    df = recommendation_frame(con, run_id)
    if df.empty:
        return _note("no variants")
    # what else used the host too, and what correlated requests of a sustainable step are worth
    lines = (
        summary_lines(df)
        + trace_lines(df)
        + host_noise_lines(con, run_id)
        + error_lines(con, run_id)
        + claim_lines(con, run_id)
    )
    text = f"<p><b>{html.escape(lines[0])}</b></p><ul>{''.join(f'<li>{html.escape(t)}</li>' for t in lines[1:])}</ul>"
    plan = gate_plan_lines(con, run_id)
    if plan:
        items = "".join(f"<li>{html.escape(t.removeprefix('- '))}</li>" for t in plan)
        text += f"<p>The quality gate's power, stated before the evidence:</p><ul>{items}</ul>"
    plot = _decision_plot(df)
    table = _grouped_table(df, DECISION_GROUPS)
    return (
        f'{text}<div class="grid">{_figure("Sustainable tokens/s vs retention (the star: ship this)", plot)}</div>'
        f'<div class="scroll">{table}</div>'
        + _note(
            "Why each verdict: the sentences above (v_recommendation.verdict_reason). Small type under a value: "
            "its 95 % interval. Hover a heading for the column's name in the warehouse (v_recommendation)."
        )
    )


def explorer_section(con: duckdb.DuckDBPyConnection, run_id: str) -> str:
    """The decision under other settings: controls for the SLO's limits, its percentile, the quality gate and the
    objective, snapping to a grid decided as `tradeoff recommend` decides it (tasks.report.explorer); the page's
    script shows the setting's pick, each variant's verdict and reason, and the frontier. Data and script inline."""
    try:
        data = explorer_data(con, run_id)
    except ConfigError as err:  # a setting of the grid the run's own settings make invalid: the page still renders
        return _note(f"no explorer: {err}")
    if data is None:
        return _note("no variants")
    # inside a script element, '<' may only start its end: written as the JSON escape it is
    payload = json.dumps(data, separators=(",", ":")).replace("<", "\\u003c")
    return (
        _note(
            f"What if the SLO, the gate or the objective were different? Each control offers a few values around "
            f"the run's own; every one of their {len(data['points'])} combinations was decided, when this report "
            f"was written ({data['seconds']:g} s), by the code of tradeoff recommend with the flags shown under the "
            f"pick, so the page and the command agree. A link to the page ending in #percentile=90 (any control's "
            f"name and value) opens it at that setting."
        )
        + '<div id="explorer"><noscript><p class="note">The explorer needs JavaScript.</p></noscript></div>'
        + f'<script type="application/json" id="explorer-data">{payload}</script>'
        + f"<script>{EXPLORER_JS.read_text()}</script>"
    )


def _decision_plot(df: pd.DataFrame) -> str:
    """Sustainable output tokens/s vs retention with both intervals as error bars; the frontier and the
    recommended variant marked; the variants left out named."""
    pts = df[df.sustainable_output_tok_s.notna() & df.retention.notna()]
    left_out = sorted(set(df.variant) - set(pts.variant))
    if pts.empty:
        return _note("no variant has both a sustainable load and a retention to plot")
    fig, ax = _axes(6.4, 4.0)
    x, y = pts.sustainable_output_tok_s.astype(float), pts.retention.astype(float) * 100
    xerr = [
        (x - pts.sustainable_output_tok_s_ci_low.astype(float).fillna(x)).clip(lower=0),
        (pts.sustainable_output_tok_s_ci_high.astype(float).fillna(x) - x).clip(lower=0),
    ]
    yerr = [
        (y - pts.retention_ci_low.astype(float).fillna(y / 100) * 100).clip(lower=0),
        (pts.retention_ci_high.astype(float).fillna(y / 100) * 100 - y).clip(lower=0),
    ]
    colors = {
        "recommended": "#2ca02c",
        "passes": "#1f77b4",
        "fails_gate": "#d62728",
        "not_enough_evidence": "#ff7f0e",
        "not_ranked": "#7f7f7f",
    }
    for verdict, g in pts.groupby("verdict"):
        i = g.index
        ax.errorbar(
            x[i],
            y[i],
            xerr=[xerr[0][i], xerr[1][i]],
            yerr=[yerr[0][i], yerr[1][i]],
            fmt="o",
            color=colors.get(verdict, "#7f7f7f"),
            capsize=3,
            label=verdict,
            zorder=3,
        )
    chosen = pts[pts.verdict == "recommended"]
    if not chosen.empty:
        ax.scatter(
            x[chosen.index],
            y[chosen.index],
            marker="*",
            s=260,
            color="#2ca02c",
            edgecolor="black",
            zorder=4,
            label="ship this",
        )
    # frontier: no other point has both more tokens/s and a higher retention
    front = pts[[not ((x > x[i]) & (y >= y[i]) | (x >= x[i]) & (y > y[i])).any() for i in pts.index]]
    front = front.assign(_x=x[front.index], _y=y[front.index]).sort_values("_x")
    ax.plot(front._x, front._y, "-", color="#1f77b4", alpha=0.5, label="frontier")
    target = float(df.retention_target.dropna().iloc[0]) * 100 if df.retention_target.notna().any() else None
    if target is not None:
        ax.axhline(target, ls="--", color="#d62728", alpha=0.6, label=f"retention target {target:g} %")
    for i in pts.index:
        ax.annotate(pts.variant[i], (x[i], y[i]), textcoords="offset points", xytext=(5, 5), fontsize=8)
    ax.set_xlabel("output tokens/s at the sustainable load (95 % CI where >= 2 repeats)")
    ax.set_ylabel(
        f"retention of {pts.gate_metric.dropna().iloc[0] if pts.gate_metric.notna().any() else 'quality'} (%)"
    )
    ax.legend(fontsize=7)
    return _svg(fig) + (
        _note(f"not plotted (no sustainable load or no retention): {', '.join(left_out)}") if left_out else ""
    )


def _missing(x) -> bool:
    return x is None or (not isinstance(x, str) and pd.isna(x))


def _sig(x: float) -> str:
    """A number to 3 significant digits, thousands separated, a typographic minus; no exponent between 1e-3 and
    1e6 (0.3399 -> 0.340, 18.3288 -> 18.3, -1784.49 -> −1,780)."""
    x = float(x)
    if x == 0 or not np.isfinite(x):
        return "0" if x == 0 else str(x)
    mag = int(np.floor(np.log10(abs(x))))
    if mag >= 6 or mag < -3:
        text = f"{x:.2e}"
    else:
        decimals = max(0, 2 - mag)
        text = f"{round(x, 2 - mag):,.{decimals}f}"
    return text.replace("-", "\u2212")


def _fmt(x) -> str:
    """A cell: NULL as an em dash, booleans as yes/blank, numbers to 3 significant digits, text escaped."""
    if _missing(x):
        return "\u2014"
    if isinstance(x, (bool, np.bool_)):
        return "yes" if x else ""
    if isinstance(x, (int, np.integer)):
        return f"{int(x):,}"
    if isinstance(x, (float, np.floating)):
        return _sig(x)
    if isinstance(x, pd.Timestamp):
        return html.escape(f"{x:%Y-%m-%d %H:%M}")
    return html.escape(str(x))


def _p_text(p) -> str | None:
    """A p-value as text: small ones in scientific notation."""
    return None if p is None or pd.isna(p) else f"{p:.1e}"


def _table(df: pd.DataFrame, cols: list[tuple[str, str]]) -> str:
    """cols: (column, heading with its unit); numbers to 3 significant digits, text left-aligned, the column's
    raw name in the heading's tooltip."""
    head = "".join(
        f'<th class="{"l" if df[c].dtype == object else ""}" title="{html.escape(c)}">{html.escape(h)}</th>'
        for c, h in cols
    )
    rows = []
    for _, r in df.iterrows():
        cells = "".join(f'<td class="{"l" if df[c].dtype == object else ""}">{_fmt(r[c])}</td>' for c, _ in cols)
        rows.append(f"<tr>{cells}</tr>")
    return f"<table><tr>{head}</tr>{''.join(rows)}</table>"


@dataclass(frozen=True)
class Col:
    """One column of a grouped table: a value of `key` (times `scale`), its interval from `lo`..`hi` in small
    type beneath it, a label with its unit; the raw column names go to the heading's tooltip."""

    key: str
    label: str
    lo: str | None = None
    hi: str | None = None
    scale: float = 1.0
    text: bool = False
    breaks: bool = True  # text may wrap after '_', '.' and '-'


def _interval(r: pd.Series, c: Col) -> str:
    if c.lo is None or _missing(r.get(c.lo)) or _missing(r.get(c.hi)):
        return ""
    return f'<br><small class="ci">{_fmt(r[c.lo] * c.scale)}\u2009\u2013\u2009{_fmt(r[c.hi] * c.scale)}</small>'


def _breakable(text: str) -> str:
    """Escaped text that may wrap after '_', '.' and '-' (not_enough_evidence, arithmetic.accuracy)."""
    for ch in "_.-":
        text = text.replace(ch, ch + "<wbr>")
    return text


def _cell(r: pd.Series, c: Col) -> str:
    x = r.get(c.key)
    value = _fmt(x * c.scale if isinstance(x, (float, np.floating)) and c.scale != 1 else x)
    value = _breakable(value) if c.text and c.breaks else value
    return f'<td class="{"l" if c.text else ""}">{value}{_interval(r, c)}</td>'


def _grouped_table(df: pd.DataFrame, groups: list[tuple[str, list[Col]]]) -> str:
    """A table for people: a heading row of groups (speed, latency, ...), then labels with units; numbers to 3
    significant digits, intervals as 'a–b' under their value; raw column names in the headings' tooltips."""
    top = "".join(
        f'<th colspan="{len(cols)}" class="grp">{html.escape(name)}</th>'
        if name
        else f'<th colspan="{len(cols)}"></th>'
        for name, cols in groups
    )
    flat = [c for _, cols in groups for c in cols]
    labels = "".join(
        f'<th class="{"l" if c.text else ""}" title="{html.escape(", ".join(k for k in (c.key, c.lo, c.hi) if k))}">'
        f"{html.escape(c.label)}</th>"
        for c in flat
    )
    rows = "".join(f"<tr>{''.join(_cell(r, c) for c in flat)}</tr>" for _, r in df.iterrows())
    return f'<table class="people"><tr>{top}</tr><tr>{labels}</tr>{rows}</table>'


def _quality_table(df: pd.DataFrame, cols: list[str]) -> str:
    """Every quality metric of the run (v_tradeoff's wide columns), one row per metric, one column per variant:
    as many suites as the run has never widen the page."""
    if not cols:
        return _note("no quality metric")
    variants = df.variant.tolist()
    head = '<th class="l">metric (own unit)</th>' + "".join(f"<th>{html.escape(str(v))}</th>" for v in variants)
    rows = "".join(
        f'<tr><td class="l" title="{html.escape(c)}">{html.escape(c.replace("_", " "))}</td>'
        + "".join(f"<td>{_fmt(x)}</td>" for x in df[c])
        + "</tr>"
        for c in cols
    )
    return f'<table class="people"><tr>{head}</tr>{rows}</table>'


# The decision table (v_recommendation), grouped for people; raw names in the headings' tooltips.
DECISION_GROUPS = [
    ("", [Col("variant", "variant", text=True), Col("verdict", "verdict", text=True)]),
    (
        "load at the SLO",
        [
            Col("sustainable_scenario", "step", text=True),
            Col("sustainable_req_s", "load (req/s)", "sustainable_req_s_ci_low", "sustainable_req_s_ci_high"),
            Col(
                "sustainable_output_tok_s",
                "speed (tok/s)",
                "sustainable_output_tok_s_ci_low",
                "sustainable_output_tok_s_ci_high",
            ),
            Col("sustainable_ttft_ms_pctl", "TTFT at the SLO pctl (ms)"),
            Col("sustainable_tpot_ms_pctl", "TPOT at the SLO pctl (ms)"),
        ],
    ),
    (
        "quality gate",
        [
            Col("gate", "gate", text=True),
            Col("gate_metric", "metric", text=True),
            Col("retention", "retention (%)", "retention_ci_low", "retention_ci_high", scale=100),
            Col("n", "pairs"),
            Col("n_needed_if_equal", "pairs needed if equal"),
            Col("n_needed", "pairs needed at observed"),
        ],
    ),
    (
        "cost per 1M output tokens",
        [
            Col("j_per_1m_output_tok", "energy (J)"),
            Col("gco2e_per_1m_output_tok", "carbon (gCO2e)"),
            Col("usd_per_1m_output_tok", "price (USD)"),
        ],
    ),
]


def render_html(con: duckdb.DuckDBPyConnection, run_id: str) -> str:
    """The whole page for one run."""
    df = tradeoff_frame(con, run_id)
    run = con.execute("select * from runs where run_id = ?", [run_id]).df().iloc[0]
    metric = run.primary_quality_metric
    lines = takeaways(df, quality_unit(con, run_id, metric))
    wide = con.execute("select * from v_quality_wide limit 0").df().columns
    quality_cols = [c for c in wide if c not in ("run_id", "variant") and c in df.columns]
    shown = df.assign(setup=df.apply(_setup_text, axis=1) if not df.empty else None)
    table = _grouped_table(shown, tradeoff_groups(metric, quality_unit(con, run_id, metric)))
    quality_table = _quality_table(df, quality_cols)
    figs = _plots(con, run_id, df)
    meta = _run_meta(run)
    retention = retention_section(con, run_id)
    regressions = regressions_section(con, run_id)
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><link rel="icon" href="data:,">
<title>tradeoff report {html.escape(run_id)}</title><style>{CSS}</style></head><body>
<h1>tradeoff: run {html.escape(run_id)} ({html.escape(str(run.config_name))}, {html.escape(str(run.status))})</h1>
<p class="note">started {_fmt(run.started_at)} UTC · reference {html.escape(str(run.reference_variant))} · {meta}</p>
<h2>Decision: which variant to ship</h2>{decision_section(con, run_id)}
<h2>Explore the decision: other limits, percentiles, gates and objectives</h2>{explorer_section(con, run_id)}
<h2>Trade-off table</h2><div class="scroll">{table}</div>
<p class="note">Small type under a value: its 95 % interval. Hover a heading for the column's name in the
warehouse (v_tradeoff).</p>
<h3>Every quality metric</h3><div class="scroll">{quality_table}</div>
<h2>Takeaways (against the reference)</h2><ul>{"".join(f"<li>{html.escape(t)}</li>" for t in lines)}</ul>
<h2>Plots</h2><div class="grid">{"".join(figs)}</div>
<h2>Quality retention (MLPerf classes)</h2>{retention}
<h2>Regressions against previous nights</h2>{regressions}
<h2>History: the series across nights, their change points and the pick of each night</h2>
{history_section(con, run_id, metric)}
<h2>Items lost against the reference</h2>{flips_section(con, run_id)}
</body></html>
"""


def tradeoff_groups(quality_metric: str | None, quality_unit: str | None) -> list[tuple[str, list[Col]]]:
    """The trade-off table (v_tradeoff), grouped: speed, latency, jitter, quality (the primary metric against the
    reference), cost; every other quality metric is in the quality table below it."""
    unit = f" ({quality_unit})" if quality_unit else ""
    return [
        ("", [Col("variant", "variant", text=True), Col("setup", "engine, quant, spec", text=True, breaks=False)]),
        (
            "speed",
            [
                Col("peak_output_tok_s", "peak (tok/s)"),
                Col("best_output_tok_s", "sustained (tok/s)"),
                Col("speedup_vs_reference", "vs reference (x)"),
                Col("goodput_req_s", "goodput (req/s)"),
            ],
        ),
        (
            "latency (headline step)",
            [
                Col("ttft_ms_mean", "TTFT mean (ms)", "ttft_ms_mean_ci_low", "ttft_ms_mean_ci_high"),
                Col("ttft_ms_p99", "TTFT p99 (ms)"),
                Col("tpot_ms_mean", "TPOT (ms/token)"),
                Col("itl_ms_mean", "ITL mean (ms)"),
            ],
        ),
        (
            "jitter",
            [
                Col("ttft_cv_pct", "TTFT CV (%)", "ttft_cv_pct_ci_low", "ttft_cv_pct_ci_high"),
                Col("itl_cv_pct", "ITL CV (%)", "itl_cv_pct_ci_low", "itl_cv_pct_ci_high"),
            ],
        ),
        (
            "quality",
            [
                Col("quality", f"{quality_metric or 'primary metric'}{unit}"),
                Col(
                    "quality_delta_vs_reference",
                    "vs reference",
                    "quality_delta_ci_low",
                    "quality_delta_ci_high",
                ),
                Col("quality_verdict", "verdict", text=True),
            ],
        ),
        ("cost", [Col("energy_j_per_token", "energy (J/token)"), Col("mbu_pct", "bandwidth used (MBU %)")]),
    ]


def _setup_text(r: pd.Series) -> str:
    """engine, quantization and speculative decoding of a v_tradeoff row, with a failed variant's status."""
    parts = [str(x) for x in (r.engine, r.quantization, r.speculative) if not _missing(x)]
    return " ".join(parts) + ("" if r.status == "ok" else f" ({r.status})")


def _plots(con: duckdb.DuckDBPyConnection, run_id: str, df: pd.DataFrame) -> list[str]:
    """The page's figures, in order."""
    ttft_cdf, itl_cdf = cdf_plots(con, run_id)
    tput, lat = concurrency_plots(con, run_id)
    return [
        _figure("Tokens/s vs quality (Pareto frontier in blue)", pareto_plot(con, run_id)),
        _figure("Jitter at the lowest concurrency", jitter_plot(con, run_id)),
        _figure("TTFT CDF (lowest concurrency)", ttft_cdf),
        _figure("Inter-token latency CDF (lowest concurrency)", itl_cdf),
        _figure("Throughput vs concurrency", tput),
        _figure("Latency vs concurrency", lat),
        _figure("Energy per output token", energy_plot(df)),
        _figure("Long-context retrieval: accuracy by length x depth", long_context_plot(con, run_id)),
    ]


def _run_meta(run: pd.Series) -> str:
    """Host, CPU, GPU, git commit and library versions of the run, escaped."""
    versions = json.loads(run.library_versions or "{}")
    return (
        f"host {html.escape(str(run.host))} · CPU {html.escape(str(run.cpu))} ({run.cpu_count} cores) · "
        f"GPU {html.escape(str(run.gpu or 'none'))} · git {html.escape(str(run.git_sha or 'n/a'))[:12]} · "
        + " · ".join(f"{html.escape(k)} {html.escape(v)}" for k, v in sorted(versions.items()))
    )


def retention_section(con: duckdb.DuckDBPyConnection, run_id: str) -> str:
    """Quality retention against the reference (v_retention, fraction-valued metrics) with MLPerf's classes."""
    ret = con.execute(
        """select variant, suite || '.' || metric as metric, reference_value, value, retention, retention_class
                         from v_retention where run_id = ? and unit = 'fraction' order by metric, variant""",
        [run_id],
    ).df()
    if ret.empty:
        return _note("no fraction-valued quality metric")
    return _table(
        ret,
        [
            ("variant", "variant"),
            ("metric", "metric"),
            ("reference_value", "reference"),
            ("value", "value"),
            ("retention", "retention"),
            ("retention_class", "class"),
        ],
    )


def regressions_section(con: duckdb.DuckDBPyConnection, run_id: str) -> str:
    """The run's regressions against previous nights (v_regressions): the band rule and Otava's change points."""
    reg = con.execute(
        """select variant, metric, rule, value, prior_mean, band_low, band_high, change_pct, otava_change_pct,
                                otava_p_value, known_cause
                         from v_regressions where run_id = ? and is_regression order by variant, metric""",
        [run_id],
    ).df()
    if reg.empty:
        return _note("none flagged (or no previous night in this run's series)")
    reg["otava_p_value"] = reg.otava_p_value.map(_p_text)
    return _table(
        reg,
        [
            ("variant", "variant"),
            ("metric", "metric"),
            ("rule", "rule"),
            ("value", "value"),
            ("prior_mean", "prior mean"),
            ("band_low", "band low"),
            ("band_high", "band high"),
            ("change_pct", "change %"),
            ("otava_change_pct", "Otava change %"),
            ("otava_p_value", "Otava p"),
            ("known_cause", "known cause"),
        ],
    )


def write_html(con: duckdb.DuckDBPyConnection, run_id: str, path: str | Path) -> Path:
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(render_html(con, run_id))
    return p
