"""Two variants' closed-loop throughputs compared round by round: the paired ratio the ranking rests on (issue 36).

On an interleaved night (perf.interleave) round r of every variant runs before round r + 1 of any, so repeat r of
two variants shares what the host did in that stretch of the night (its heat, a neighbour VM's evening, a slow
minute). Two separate intervals, one per variant, carry that shared level twice and compare it with nothing; the
ratio of the two variants within each round cancels it (a paired design: Kalibera & Jones, "Rigorous benchmarking
in reasonable time", 2013, compare systems within the level that varies). `ratio_interval` is Student's paired
interval of the mean log ratio over the rounds both measured, as a ratio of geometric means; `update_pairs` writes
it into `perf_pairs` for every two closed-loop steps of different variants of a run (both figures,
completed requests/s and output tokens/s, per repeat as perf_summary computes them), and v_recommendation's tie
rule reads it: the best variant and another are tied unless the interval of their ratio excludes 1.

Compared with the two steps' own intervals apart (the rule before, still used where a run has no pair row: a run
loaded before migration 022, a step of one repeat), the paired interval is narrower twice over: one interval of a
difference is ~sqrt(2) narrower than two intervals that must not overlap, and the shared round level drops out
(benchmarks/rank_extension.py; docs/statistics.md 1e). On a night measured one variant after the other, repeat r
of two variants is not simultaneous; the pairs are then as independent as the repeats, and the interval stays
valid, only without the second gain.

Rounds are matched by their repeat index; a repeat only one of the two has (a claim's added repeats,
tasks.decision.extend) is left out of the pair. DuckDB views have no t quantile, so this runs in Python at load time
(`warehouse.db.load_run`, and run by run in `tradeoff warehouse rebuild`), as `warehouse.history` does.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import duckdb

from warehouse.contract import DERIVED_TABLES

if TYPE_CHECKING:  # numpy and scipy load when pairs are computed, not with the warehouse (the CLI imports it)
    import numpy as np

Steps = dict[tuple[str, str], dict[int, "np.ndarray"]]  # (variant, scenario) -> round -> figures, shape (B, 2)

FIGURES = ("request_throughput", "output_throughput")
COLUMNS = [c.name for t in DERIVED_TABLES if t.name == "perf_pairs" for c in t.columns]

# Per repeat of each closed-loop step of `{source}` (a run's perf_requests, with each repeat's number in a column
# `k_`): its ok requests and output tokens over its wall time, first send to the last
# return, as tasks.perf.metrics.summarize computes them. Rate steps (their objective is the offered rate) and a
# replayed trace are left out, and so is a step whose requests carry no send times.
REPEAT_RATES_SQL = """
    select q.variant, q.scenario, q.k_, coalesce(any_value(s.ci_level), 0.95) as level,
           count(*) filter (where q.status = 'ok') as ok_n,
           sum(coalesce(q.output_tokens, 0)) filter (where q.status = 'ok') as out_tokens,
           greatest(max(q.start_s + q.e2el_ms / 1000.0) filter (where q.status = 'ok'), max(q.end_s))
             - min(q.start_s) as duration_s
    from {source} as q
    join {summary} as s on s.run_id = ? and s.variant = q.variant and s.scenario = q.scenario
    where not coalesce(q.is_warmup, false) and s.load_kind is distinct from 'trace'
      and not coalesce(s.load_kind = 'rate' and isfinite(s.request_rate), false)
    group by all
    having count(*) filter (where q.start_s is null) = 0"""


def rates(ok_n: int | None, out_tokens: float | None, duration_s: float | None) -> tuple[float, float]:
    """(completed requests/s, output tokens/s) of one repeat; NaN with no ok request (summarize's rule: no rate)."""
    if not ok_n or duration_s is None:
        return math.nan, math.nan
    wall = max(duration_s, 1e-9)
    return ok_n / wall, (out_tokens or 0) / wall


def ratio_interval(x: np.ndarray, y: np.ndarray, level: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Paired rounds of two positive figures (last axis: the rounds; any leading axes are separate comparisons):
    (ratio, low, high) of geometric mean x / geometric mean y, Student's t interval of the mean per-round log ratio
    at `level` with n - 1 degrees of freedom. NaN where fewer than 2 rounds; zero spread gives a point."""
    import numpy as np
    from scipy import stats

    d = np.log(np.asarray(x, dtype=float)) - np.log(np.asarray(y, dtype=float))
    n = d.shape[-1]
    if n < 2:
        nan = np.full(d.shape[:-1], np.nan)
        return nan, nan, nan
    mean = d.mean(axis=-1)
    half = float(stats.t.ppf(0.5 + level / 2.0, n - 1)) * d.std(axis=-1, ddof=1) / math.sqrt(n)
    return np.exp(mean), np.exp(mean - half), np.exp(mean + half)


def pair_cells(steps: Steps, levels: dict[tuple[str, str], float]) -> list[tuple[tuple, int, float, np.ndarray]]:
    """For every ordered pair of steps of different variants: ((variant, scenario, other_variant, other_scenario),
    rounds paired, level, cells of shape (B, 6): ratio, low, high of each figure, variant / other). `steps` holds B
    replicates of each round's figures (B = 1: as measured); a figure is compared over the rounds both steps have
    it in every replicate (NaN: a repeat with no ok request)."""
    import numpy as np

    out = []
    keys = sorted(steps)
    for i, a in enumerate(keys):
        for b in keys[i + 1 :]:
            if a[0] == b[0]:
                continue
            common = sorted(set(steps[a]) & set(steps[b]))
            level = min(levels[a], levels[b])
            n_pairs, ab, ba = 0, [], []
            replicates = next(iter(steps[a].values())).shape[0]
            for f in range(len(FIGURES)):
                x = np.stack([steps[a][r][:, f] for r in common], axis=-1) if common else np.empty((replicates, 0))
                y = np.stack([steps[b][r][:, f] for r in common], axis=-1) if common else np.empty((replicates, 0))
                keep = ~(np.isnan(x) | np.isnan(y)).any(axis=0)
                x, y = x[:, keep], y[:, keep]
                n_pairs = max(n_pairs, int(keep.sum()))
                ab += ratio_interval(x, y, level)
                ba += ratio_interval(y, x, level)
            out.append(((*a, *b), n_pairs, level, np.stack(ab, axis=-1)))
            out.append(((*b, *a), n_pairs, level, np.stack(ba, axis=-1)))
    return out


def pair_rows(run_id_of: Callable[[int], str], steps: Steps, levels: dict[tuple[str, str], float]) -> list[tuple]:
    """perf_pairs' rows of pair_cells, one per replicate b under the run id run_id_of(b); NaN as NULL."""
    return [
        (run_id_of(b), *key, n, level, *(None if math.isnan(c) else float(c) for c in cells[b]))
        for key, n, level, cells in pair_cells(steps, levels)
        for b in range(cells.shape[0])
    ]


def repeat_figures(con: duckdb.DuckDBPyConnection, run_id: str, source: str, summary: str = "perf_summary") -> list:
    """REPEAT_RATES_SQL's rows over `source`: (variant, scenario, k_, level, ok_n, out_tokens, duration_s)."""
    return con.execute(REPEAT_RATES_SQL.format(source=source, summary=summary), [run_id]).fetchall()


def update_pairs(con: duckdb.DuckDBPyConnection, run_ids: Sequence[str]) -> int:
    """Recompute the runs' perf_pairs rows from their perf_requests; returns the rows written."""
    import numpy as np

    written = 0
    for run_id in run_ids:
        source = f"(select *, coalesce(repeat, 0) as k_ from perf_requests where run_id = '{_quoted(run_id)}')"
        steps: Steps = {}
        levels: dict[tuple[str, str], float] = {}
        for variant, scenario, k, level, ok_n, out_tokens, duration_s in repeat_figures(con, run_id, source):
            steps.setdefault((variant, scenario), {})[int(k)] = np.array([rates(ok_n, out_tokens, duration_s)])
            levels[(variant, scenario)] = float(level)
        rows = pair_rows(lambda _: run_id, steps, levels)
        con.execute("delete from perf_pairs where run_id = ?", [run_id])
        if rows:
            con.executemany(f"insert into perf_pairs values ({', '.join('?' * len(rows[0]))})", rows)
        written += len(rows)
    return written


def _quoted(text: str) -> str:
    return text.replace("'", "''")
