"""The trade-off report of one run: its variants side by side from v_tradeoff, then one takeaway each.

Plain Python over a warehouse connection (no Prefect), so the CLI, the flows' artifacts and
tests all print the same text.
"""

from __future__ import annotations

import io
import json
import re
from typing import Any

import duckdb
import pandas as pd
from rich import box
from rich.console import Console
from rich.table import Table

from tasks.decision.gate_plan import GatePlan, plan_lines
from tasks.perf.error_share import causes_text, count_causes
from tasks.report.history import flip_lines, flips_frame
from warehouse.db import WarehouseError, identifier

_MD_SPECIAL = re.compile(r"([\\`<>\[\]|&])")


def md_escape(text: str) -> str:
    """`text` (an error, a server's words) as literal Markdown inline text: its first line, with the marks that
    open a code span, an HTML tag or entity, a link or image, or a table cell backslash-escaped, so a Prefect
    artifact shows it and never renders markup of its own (emphasis marks are left: they change no meaning)."""
    line = text.splitlines()[0] if text else ""
    return _MD_SPECIAL.sub(r"\\\1", line)


def cell_value(x: Any) -> Any:
    """A DataFrame cell with NaN/NaT/NA/None as None, so a clause can test for a missing value (lists and arrays
    are values)."""
    if x is None or isinstance(x, str) or hasattr(x, "__len__"):
        return x
    return None if pd.isna(x) else x


def warehouse_path(con: duckdb.DuckDBPyConnection) -> str:
    """The file `con` reads, for errors that name it."""
    return con.execute("select path from duckdb_databases() where database_name = current_database()").fetchall()[0][0]


def _latest_run_ids(con: duckdb.DuckDBPyConnection, limit: int) -> list[str]:
    return [
        r
        for (r,) in con.execute(
            "select run_id from runs order by started_at desc nulls last, run_id desc limit ?", [limit]
        ).fetchall()
    ]


def latest_run_id(con: duckdb.DuckDBPyConnection) -> str | None:
    """The run that started last, None in an empty warehouse."""
    ids = _latest_run_ids(con, 1)
    return ids[0] if ids else None


def tradeoff_frame(con: duckdb.DuckDBPyConnection, run_id: str) -> pd.DataFrame:
    """The run's rows of v_tradeoff, reference first."""
    return con.execute("select * from v_tradeoff where run_id = ? order by is_reference desc, variant", [run_id]).df()


def quality_unit(con: duckdb.DuckDBPyConnection, run_id: str, metric: str | None) -> str | None:
    """Unit of a 'suite.metric' in the run's quality_scores (fraction | nats | ratio | count)."""
    row = con.execute(
        "select unit from quality_scores where run_id = ? and suite || '.' || metric = ? and unit is not null limit 1",
        [run_id, metric],
    ).fetchall()
    return row[0][0] if row else None


def _quality_clause(
    label: str, delta: float, unit: str | None, ci: tuple[Any, Any] = (None, None), verdict: str | None = None
) -> str:
    """'<metric> -4.6 points (95 % CI -9.0..-0.2, worse)'; the interval and verdict only where they exist."""
    scale, fmt = (100, ".1f") if unit == "fraction" else (1, ".3g")
    text = f"{label} {delta * scale:+{fmt}}" + (" points" if unit == "fraction" else f" {unit}" if unit else "")
    extra = []
    if ci[0] is not None and ci[1] is not None:
        extra.append(f"95 % CI {ci[0] * scale:+{fmt}}..{ci[1] * scale:+{fmt}}")
    if verdict:
        extra.append(verdict)
    return text + (f" ({', '.join(extra)})" if extra else "")


def _energy_clause(j_per_token: float | None, reference_j_per_token: float | None) -> str:
    # Said even when missing: readers expect energy, and "n/a" tells them it was not measured.
    if j_per_token is None:
        return "energy n/a"
    if reference_j_per_token:
        return f"energy {j_per_token / reference_j_per_token:.2f}x J/token"
    return f"energy {j_per_token:.3g} J/token"


def _itl_jitter_clause(row: pd.Series) -> str | None:
    """Speculative variants only: their ITL jitter against the reference's, the figure speculation moves
    (accepted drafts arrive in bursts, rejected ones stall), with its interval over repeats where there is one."""
    ratio, cv = cell_value(row.get("itl_cv_ratio_vs_reference")), cell_value(row.get("itl_cv_pct"))
    if not cell_value(row.get("speculative")) or cv is None:
        return None
    lo, hi = cell_value(row.get("itl_cv_pct_ci_low")), cell_value(row.get("itl_cv_pct_ci_high"))
    interval = f", CI {lo:.0f}..{hi:.0f}" if lo is not None and hi is not None else ""
    return (
        f"ITL jitter {ratio:.1f}x ({cv:.0f} % CV{interval})"
        if ratio is not None
        else f"ITL jitter {cv:.0f} % CV{interval}"
    )


def takeaways(df: pd.DataFrame, quality_unit: str | None = None) -> list[str]:
    """One sentence per variant of a tradeoff_frame: failed ones say why, ok ones compare with the reference.

    A clause whose value is NULL is left out. `quality_unit` is the primary metric's unit:
    'fraction' deltas are printed in points (x100), others in their unit.
    """
    is_ref = [bool(cell_value(x)) for x in df["is_reference"]]
    refs = df[is_ref]
    ref = refs.iloc[0] if len(refs) == 1 else None
    ref_name = ref["variant"] if ref is not None else "reference"
    ref_energy = cell_value(ref["energy_j_per_token"]) if ref is not None else None
    out = []
    for (_, row), row_is_ref in zip(df.iterrows(), is_ref):
        if row["status"] != "ok":
            error = cell_value(row["error"])
            out.append(f"{row['variant']}: failed" + (f" ({error.strip().splitlines()[0]})" if error else ""))
            continue
        if row_is_ref:
            continue
        speedup, ttft, jitter, dq = (
            cell_value(row[f"{c}_vs_reference"])
            for c in ("speedup", "ttft_change_pct", "ttft_cv_ratio", "quality_delta")
        )
        clauses = [
            f"{speedup:.2f}x tokens/s" if speedup is not None else None,
            f"TTFT {ttft:+.0f} %" if ttft is not None else None,
            f"TTFT jitter {jitter:.1f}x" if jitter is not None else None,
            _itl_jitter_clause(row),
            _quality_clause(
                identifier(row["quality_metric"]),
                dq,
                quality_unit,
                (cell_value(row.get("quality_delta_ci_low")), cell_value(row.get("quality_delta_ci_high"))),
                cell_value(row.get("quality_verdict")),
            )
            if dq is not None
            else None,
            _energy_clause(cell_value(row["energy_j_per_token"]), ref_energy),
        ]
        out.append(f"{row['variant']} vs {ref_name}: " + ", ".join(c for c in clauses if c))
    return out


def fmt_or_null(x: Any, spec: str) -> str:
    """`x` formatted by `spec`, 'NULL' where the cell is missing (the text tables say so)."""
    x = cell_value(x)
    return "NULL" if x is None else format(x, spec)


def _table(df: pd.DataFrame, quality_header: str) -> str:
    """The variants as a markdown-shaped text table."""
    table = Table(box=box.MARKDOWN, show_edge=True)
    headers = [
        "variant",
        "engine",
        "quant",
        "spec",
        "peak tok/s",
        "best tok/s",
        "TTFT ms mean",
        "TTFT ms p99",
        "TTFT CV %",
        quality_header,
        "energy J/token",
    ]
    for i, h in enumerate(headers):
        table.add_column(h, justify="left" if i < 4 else "right")
    for _, r in df.iterrows():
        table.add_row(
            r["variant"],
            cell_value(r["engine"]) or "",
            cell_value(r["quantization"]) or "",
            cell_value(r["speculative"]) or "",
            fmt_or_null(r["peak_output_tok_s"], ".1f"),
            fmt_or_null(r["best_output_tok_s"], ".1f"),
            fmt_or_null(r["ttft_ms_mean"], ".1f"),
            fmt_or_null(r["ttft_ms_p99"], ".1f"),
            fmt_or_null(r["ttft_cv_pct"], ".1f"),
            fmt_or_null(r["quality"], ".3f"),
            fmt_or_null(r["energy_j_per_token"], ".4g"),
        )
    console = Console(file=io.StringIO(), width=240, color_system=None)
    console.print(table)
    # rich pads lines to the width and draws an empty top edge for this box: drop both.
    return "\n".join(line.rstrip() for line in console.file.getvalue().splitlines() if line.strip())


def _energy_footnotes(df: pd.DataFrame) -> list[str]:
    """One line per distinct reason energy is NULL, naming the variants it applies to."""
    missing = df[df["energy_j_per_token"].isna() & df["energy_note"].notna()]
    groups = missing.groupby("energy_note", sort=False)
    return [f"energy NULL for {', '.join(g['variant'])}: {note}" for note, g in groups]


def _threads_footnotes(con: duckdb.DuckDBPyConnection, run_id: str) -> list[str]:
    """What the load generator shared the host with: the engines' CPU threads per group of variants."""
    if "cpu_threads" not in {
        c
        for (c,) in con.execute(
            "select column_name from information_schema.columns where table_name = 'variants'"
        ).fetchall()
    }:
        return []
    rows = con.execute(
        "select cpu_threads, string_agg(variant, ', ' order by variant) from variants "
        "where run_id = ? and cpu_threads is not null group by cpu_threads",
        [run_id],
    ).fetchall()
    out = []
    for threads, variants in rows:
        t = json.loads(threads)
        out.append(
            f"CPU threads of {variants}: decode {t.get('decode')}, prompt {t.get('prompt')}, on a host of "
            f"{t.get('host_cores')} cores (the load generator ran on the same host)"
        )
    return out


def host_noise_rows(con: duckdb.DuckDBPyConnection, run_id: str) -> list[tuple]:
    """Each perf step's host record (perf_summary, migration 016): variant, scenario, windows_kept,
    windows_remeasured, windows_disturbed, host_noise_note, host_other_cpu_pct, host_steal_pct, host_noise_max_pct,
    gpu_other_procs, gpu_other_sm_pct, interleaved_with; none for runs recorded before 016."""
    return con.execute(
        "select variant, scenario, windows_kept, windows_remeasured, windows_disturbed, host_noise_note, "
        "host_other_cpu_pct, host_steal_pct, host_noise_max_pct, gpu_other_procs, gpu_other_sm_pct, interleaved_with "
        "from perf_summary where run_id = ? "
        "and windows_kept is not null order by variant, scenario",
        [run_id],
    ).fetchall()


def host_noise_lines(con: duckdb.DuckDBPyConnection, run_id: str) -> list[str]:
    """What else used the host during the perf windows (perf_summary, migration 016; tasks/perf/host_noise.py): the
    steps with a window measured again or kept disturbed, each with its note, then the worst of the kept windows
    against the threshold; nothing for runs recorded before 016."""
    rows = host_noise_rows(con, run_id)
    if not rows:
        return []
    out = [
        f"host: {v} {sc}: {kept} windows kept, {again} measured again, {bad} kept disturbed ({note})"
        for v, sc, kept, again, bad, note, *_ in rows
        if again or bad
    ]
    others = [r[6] for r in rows if r[6] is not None]
    steal = [r[7] for r in rows if r[7] is not None]
    threshold = rows[0][8]
    if others:
        out.append(
            f"host: in the kept windows, other processes used at most {max(others):.0f} % of a core and steal "
            f"{max(steal, default=0.0):.0f} % (a window over {threshold:g} % is disturbed and measured again)"
        )
    else:
        out.append(f"host: other processes' CPU not measured ({next((r[5] for r in rows if r[5]), 'unknown')})")
    gpu = [r for r in rows if r[9] is not None]
    if gpu:
        sm = [r[10] for r in gpu if r[10] is not None]
        out.append(
            f"host: on the engines' GPUs, at most {max(r[9] for r in gpu)} other process(es) in a kept window, using "
            + (f"at most {max(sm):.0f} % of the SMs" if sm else "SMs not read")
            + f" (over {threshold:g} % is disturbed)"
        )
    rounds = sorted({v for v, *_, together in rows if together})
    if rounds:
        out.append(
            f"host: perf measured in interleaved rounds (perf.interleave): {', '.join(rounds)}; round r of each "
            "before round r + 1 of any, the order reversed each round, so a transient lands in one round of one variant"
        )
    return out


def failed_request_rows(con: duckdb.DuckDBPyConnection, run_id: str) -> list[tuple[str, str, str | None]]:
    """The run's measured requests that failed: (variant, scenario, error), in the order they were sent."""
    return con.execute(
        "select variant, scenario, error from perf_requests where run_id = ? and not is_warmup and status <> 'ok' "
        "order by variant, scenario, request_index",
        [run_id],
    ).fetchall()


def error_lines(con: duckdb.DuckDBPyConnection, run_id: str) -> list[str]:
    """The measured requests that failed, per variant and step, counted by cause (tasks.perf.error_share): 'errors:
    q2_k c2: HTTP 503 overloaded x4'; nothing when none failed."""
    rows = failed_request_rows(con, run_id)
    groups: dict[tuple[str, str], list[str | None]] = {}
    for variant, scenario, error in rows:
        groups.setdefault((variant, scenario), []).append(error)
    return [
        f"errors: {variant} {scenario}: {causes_text(count_causes(errors))}"
        for (variant, scenario), errors in groups.items()
    ]


def correlated_claims(con: duckdb.DuckDBPyConnection, run_id: str) -> list[tuple[str, str, int, float, float]]:
    """The variants whose sustainable step's requests are correlated (v_slo_steps.n_effective below num_measured):
    (variant, scenario, requests, what the claim counted them as, design effect), the recommended first."""
    return con.execute(
        "select r.variant, s.scenario, s.num_measured, s.n_effective, s.requests_deff "
        "from v_recommendation as r join v_slo_steps as s on s.run_id = r.run_id and s.variant = r.variant "
        "and s.scenario = r.sustainable_scenario where r.run_id = ? and s.n_effective < s.num_measured "
        "order by r.rank nulls last, r.variant",
        [run_id],
    ).fetchall()


def extended_claims(con: duckdb.DuckDBPyConnection, run_id: str) -> list[tuple[str, str, str, int, float]]:
    """The steps decision.extend added requests to, or could not: (variant, scenario, its note, the looks planned,
    the confidence each look was judged at)."""
    return con.execute(
        "select variant, scenario, extend_note, slo_looks, claim_confidence from v_slo_steps "
        "where run_id = ? and extend_note is not null order by variant, scenario",
        [run_id],
    ).fetchall()


def claim_lines(con: duckdb.DuckDBPyConnection, run_id: str) -> list[str]:
    """How the SLO claims counted their requests: the variants whose sustainable step's requests are correlated
    (v_slo_steps.n_effective below num_measured: what the claim counted them as, and the design effect;
    docs/statistics.md, 1c), the steps decision.extend added repeats to or could not (its note, with the
    confidence every look was judged at), and what the interleaved rounds' ranking looks found (migration 021).
    Nothing when there is none of these."""
    parts = [
        f"{variant} {scenario}: {n} requests counted as {n_eff} (design effect {deff:.2f})"
        for variant, scenario, n, n_eff, deff in correlated_claims(con, run_id)
    ]
    out = []
    if parts:
        out.append(
            "correlated requests (in flight together, a repeat's shared host state, a drift; the SLO claim counts "
            "them as fewer, docs/statistics.md 1c): " + "; ".join(parts)
        )
    extended = extended_claims(con, run_id)
    if extended:
        looks, conf = extended[0][3], extended[0][4]
        out.append(
            f"requests gathered for claims that lacked them (decision.extend: up to {looks} looks, each judged at "
            f"{conf * 100:.4g} %): " + "; ".join(f"{v} {sc}: {note}" for v, sc, note, _, _ in extended)
        )
    ranking = con.execute(
        "select arg_max(rank_note, length(rank_note)), max(rounds_added) from perf_summary "
        "where run_id = ? and rank_note is not null",
        [run_id],
    ).fetchall()
    if ranking and ranking[0][0]:
        note, added = ranking[0]
        out.append(
            f"ranking over the interleaved rounds (decision.extend.rank_budget_s; at most {added or 0} round(s) "
            f"added to a variant's closed-loop steps): {note}"
        )
    return out


def cell(row: pd.Series, col: str) -> Any:
    """A row's value of `col`, None where it is NULL/NaN or the row has no such column."""
    return cell_value(row.get(col))


def trace_lines(df: pd.DataFrame) -> list[str]:
    """Under a replayed trace, every variant's SLO attainment on it, best first: 'On the replayed trace (0.39 req/s
    offered): q4_1 95 % of 21 requests within the SLO (goodput 0.37 req/s, met); ...'. None without a trace."""
    t = df[df["trace_n"].notna()] if "trace_n" in df else df.iloc[0:0]
    if t.empty:
        return []
    t = t.sort_values(["trace_slo_attainment_pct", "trace_goodput_req_s"], ascending=False, na_position="last")
    offered = cell(t.iloc[0], "trace_offered_req_s")
    parts = [
        f"{r['variant']} {fmt_or_null(cell(r, 'trace_slo_attainment_pct'), '.0f')} % of {cell(r, 'trace_n'):.0f} "
        f"requests within the SLO (goodput {fmt_or_null(cell(r, 'trace_goodput_req_s'), '.3f')} req/s, "
        f"{cell(r, 'trace_slo_status')}"
        + (
            f": {cell(r, 'trace_fail_reason')}"
            if cell(r, "trace_slo_status") != "met" and cell(r, "trace_fail_reason")
            else ""
        )
        + ")"
        for _, r in t.iterrows()
    ]
    err = t["trace_send_error_ms_p99"].dropna()
    fidelity = f"; send-time error p99 at most {err.max():.1f} ms" if len(err) else ""
    return [f"On the replayed trace ({fmt_or_null(offered, '.3f')} req/s offered{fidelity}): " + "; ".join(parts) + "."]


def trace_frame(con: duckdb.DuckDBPyConnection, run_id: str) -> pd.DataFrame:
    """The run's rows of v_recommendation that trace_lines reads."""
    return con.execute(
        "select variant, trace_n, trace_slo_attainment_pct, trace_goodput_req_s, trace_offered_req_s, "
        "trace_slo_status, trace_fail_reason, trace_send_error_ms_p99 from v_recommendation where run_id = ?",
        [run_id],
    ).df()


def concurrency_lines(con: duckdb.DuckDBPyConnection, run_id: str) -> list[str]:
    """Per variant with closed-loop steps at more than one concurrency: output tok/s, its ratio to the lowest
    concurrency's and mean TPOT at each (an engine that batches gains throughput and each request's TPOT rises; one
    that queues keeps both flat and TTFT grows)."""
    rows = con.execute(
        "select variant, concurrency, output_throughput, tpot_ms_mean from perf_summary "
        "where run_id = ? and coalesce(load_kind, 'concurrency') = 'concurrency' and concurrency is not null "
        "and output_throughput > 0 order by variant, concurrency",
        [run_id],
    ).fetchall()
    steps: dict[str, list[tuple[int, float, float | None]]] = {}
    for variant, c, tok_s, tpot in rows:
        steps.setdefault(variant, []).append((c, tok_s, tpot))
    lines = []
    for variant, vs in steps.items():
        if len(vs) < 2:
            continue
        base = vs[0][1]
        cells = [
            f"c{c} {tok_s:.1f} tok/s ({tok_s / base:.2f}x), TPOT {fmt_or_null(tpot, '.1f')} ms" for c, tok_s, tpot in vs
        ]
        lines.append(f"{variant}: " + "; ".join(cells))
    if lines:
        lines.insert(0, "Output throughput by concurrency (closed-loop steps; x: over the lowest concurrency):")
    return lines


def resolve_run(con: duckdb.DuckDBPyConnection, run_id: str | None) -> str:
    """`run_id`, or the latest run; one line naming the latest runs when it is unknown."""
    path = warehouse_path(con)
    latest = _latest_run_ids(con, 5)
    if not latest:
        raise WarehouseError(f"no runs in {path}; run `tradeoff run configs/demo.yaml` first")
    run_id = run_id or latest[0]
    if not con.execute("select count(*) from runs where run_id = ?", [run_id]).fetchall()[0][0]:
        raise WarehouseError(f"no run {run_id} in {path}; latest runs: {', '.join(latest)}")
    return run_id


def gate_plan_lines(con: duckdb.DuckDBPyConnection, run_id: str) -> list[str]:
    """The gate plan the nightly stated before measuring (runs.gate_plan_json) in words; [] for a run without one."""
    (text,) = con.execute("select gate_plan_json from runs where run_id = ?", [run_id]).fetchone() or (None,)
    if not text:
        return []
    plans = [GatePlan(**p) for p in json.loads(text)]
    return [f"- {line}" for line in plan_lines(plans)]


def format_report(con: duckdb.DuckDBPyConnection, run_id: str | None = None, brief: bool = False) -> str:
    """The report of `run_id` (default: the latest run): header, table, energy footnotes, takeaways. `brief` (`make
    demo`, before the recommendation's screen): the table, the batching knee, the takeaways and the gates' power,
    without the evidence lines (host, trace, claims; `tradeoff recommend --explain` has them) and the items lost."""
    run_id = resolve_run(con, run_id)
    df = tradeoff_frame(con, run_id)
    metric = cell_value(df["quality_metric"].iloc[0]) if len(df) else None
    started = cell_value(df["started_at"].iloc[0]) if len(df) else None
    lines = [
        f"run {run_id}" + (f", started {started:%Y-%m-%d %H:%M:%S} UTC" if started is not None else ""),
        "",
        _table(df, metric or "quality"),
        *_energy_footnotes(df),
        *([] if brief else _threads_footnotes(con, run_id)),
        *([] if brief else host_noise_lines(con, run_id)),
        *error_lines(con, run_id),
        "",
    ]
    knee = concurrency_lines(con, run_id)
    lines += [*knee, ""] if knee else []
    # SLO attainment on a replayed trace, per variant; what correlated requests of a sustainable step are worth
    served = [] if brief else trace_lines(trace_frame(con, run_id)) + claim_lines(con, run_id)
    lines += [*served, ""] if served else []
    lines += [f"- {t}" for t in takeaways(df, quality_unit(con, run_id, metric))]
    plan = gate_plan_lines(con, run_id)
    if plan:
        lines += ["", "The quality gate's power, stated before the evidence (tradeoff check; docs/decision.md):", *plan]
    flips = [] if brief else flip_lines(flips_frame(con, run_id))
    if flips:
        lines += [
            "",
            "Items lost against the reference (v_quality_flips; across nights: lost every night, "
            "regression = lost from one night on, unstable = flips back and forth):",
            *flips,
        ]
    return "\n".join(lines)
