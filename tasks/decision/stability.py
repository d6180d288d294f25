"""How often the same variant would be shipped if the perf side were measured again: the pick's stability.

`tradeoff recommend` says it in one line ("Stability: q4_1 is the pick in 97 % of 200 resamples ...",
tasks.report.sentences.stability_text). pick_stability decides `resamples` bootstrap replicates of the run with
v_recommendation itself: each step's repeats are drawn again with replacement (a cluster bootstrap, the requests of
one repeat kept together), a closed-loop step's throughputs and paired ratios recomputed from its drawn repeats, and
the quality side, the settings and everything else held as measured. The replicates are temp views on this
connection only; the warehouse is never written.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import duckdb

from tasks.decision.what_if import literal
from warehouse.pairs import COLUMNS as PAIR_COLUMNS
from warehouse.pairs import FIGURES, REPEAT_RATES_SQL, Steps, pair_rows, rates

if TYPE_CHECKING:  # pandas loads when replicates are decided, not with the CLI's flags (--stability's default)
    import pandas as pd

# Bootstrap replicates of the perf side behind "q4_1 is the pick in 97 % of resamples" (`--stability`).
STABILITY_RESAMPLES = 200
# perf_summary's columns a stability replicate takes from its drawn repeats (resampled_throughputs)
REDRAWN = [f"{m}{end}" for m in ("request_throughput", "output_throughput") for end in ("", "_ci_low", "_ci_high")]


def pick_stability(
    con: duckdb.DuckDBPyConnection, run_id: str, resamples: int = STABILITY_RESAMPLES, seed: int = 0
) -> dict[str | None, int]:
    """How often each variant (None: none) is the pick when the perf side is measured again: `resamples` bootstrap
    replicates of the run in which every step's repeats are drawn anew with replacement, each with its requests as
    measured (a cluster bootstrap: the requests of one repeat share its host state and batches, and the claim
    counts them so, docs/statistics.md 1c; a step of one repeat is held as measured), the quality side, the
    settings and everything else held as measured, each decided by v_recommendation itself. A closed-loop step's
    throughputs and their intervals (the objective and the tie rule) are those of its drawn repeats
    (resampled_throughputs), so a pick that rests on two overlapping intervals is seen to move. The replicates are
    temp views that shadow this connection's tables (as the overrides shadow v_decision): the run copied under the
    ids '<run>#<b>', perf_requests resampled, perf_summary's throughputs from the drawn repeats; they are dropped
    after."""
    db = con.execute("select current_database()").fetchall()[0][0].replace('"', '""')
    tables = [
        t
        for (t,) in con.execute(
            "select distinct c.table_name from duckdb_columns() as c join duckdb_tables() as t "
            "on c.database_name = t.database_name and c.schema_name = t.schema_name and c.table_name = t.table_name "
            "where c.database_name = current_database() and c.schema_name = 'main' and c.column_name = 'run_id'"
        ).fetchall()
    ]
    run, b = literal(run_id), int(resamples)
    views = []
    try:
        # the run's requests with each step's repeats numbered 0..m-1 (k_), and each replicate's draw: the repeat
        # `src` that stands in slot rep_ of replicate b
        con.execute(
            f"""create or replace temp view stability_base_ as
                select *, dense_rank() over (partition by variant, scenario order by coalesce(repeat, 0)) - 1 as k_
                from "{db}".main.perf_requests where run_id = {run}"""
        )
        views.append("stability_base_")
        con.execute(
            f"""create or replace temp view stability_draws_ as
                with reps as (
                    select variant, scenario, rep_, k_, count(*) over w as m_
                    from (select distinct variant, scenario, coalesce(repeat, 0) as rep_, k_ from stability_base_)
                    window w as (partition by variant, scenario))
                select r.b, p.variant, p.scenario, p.rep_,
                       hash({int(seed)}, r.b, p.rep_) % p.m_ as src
                from reps as p cross join range({b}) as r(b)"""
        )
        views.append("stability_draws_")
        steps, levels = drawn_figures(con, db, run_id)
        for t in tables:
            name = t.replace('"', '""')
            if t == "perf_requests":
                body = """
                    select s.* exclude (k_) replace (s.run_id || '#' || d.b as run_id, d.rep_ as repeat)
                    from stability_draws_ as d join stability_base_ as s
                      on s.variant = d.variant and s.scenario = d.scenario and s.k_ = d.src"""
            elif t == "perf_summary":
                con.register("stability_throughputs_", resampled_throughputs(run_id, steps, levels))
                views.append("stability_throughputs_")
                redrawn = ", ".join(f"case when x.variant is null then t.{c} else x.{c} end as {c}" for c in REDRAWN)
                body = f"""
                    select t.* replace (t.run_id || '#' || r.b as run_id, {redrawn})
                    from "{db}".main.perf_summary as t cross join range({b}) as r(b)
                    left join stability_throughputs_ as x
                      on x.run_id = t.run_id || '#' || r.b and x.variant = t.variant and x.scenario = t.scenario
                    where t.run_id = {run}"""
            elif t == "perf_pairs":
                con.register("stability_pairs_", resampled_pairs(run_id, steps, levels))
                views.append("stability_pairs_")
                body = "select * from stability_pairs_"
            else:
                body = (
                    f'select t.* replace (t.run_id || \'#\' || r.b as run_id) from "{db}".main."{name}" as t '
                    f"cross join range({b}) as r(b) where t.run_id = {run}"
                )
            con.execute(f'create or replace temp view "{name}" as {body}')
            views.append(name)
        picks = con.execute(
            "select run_id, any_value(recommended_variant) from v_recommendation "
            "where starts_with(run_id, ?) group by run_id",
            [run_id + "#"],
        ).fetchall()
    finally:
        for name in views:
            if name in ("stability_throughputs_", "stability_pairs_"):
                con.unregister(name)
            else:
                con.execute(f'drop view if exists temp.main."{name}"')
    out: dict[str | None, int] = {}
    for _, pick in picks:
        out[pick] = out.get(pick, 0) + 1
    return out


def drawn_figures(con: duckdb.DuckDBPyConnection, db: str, run_id: str) -> tuple[Steps, dict[tuple[str, str], float]]:
    """Each closed-loop step's figures in every replicate (pick_stability's stability_draws_): per step, per slot
    (the repeat a replicate's draw stands in for), an array (replicates, 2) of completed requests/s and output
    tokens/s, as summarize_repeats computes them from the measured repeats (warehouse.pairs.REPEAT_RATES_SQL, read
    once for each measured repeat); and each step's stored level. No step whose requests carry no send times (it is
    held as measured)."""
    import numpy as np

    measured = REPEAT_RATES_SQL.format(source="stability_base_", summary=f'"{db}".main.perf_summary')
    per = con.execute(
        f"""
        with measured as ({measured})
        select d.b, m.variant, m.scenario, d.rep_, m.level, m.ok_n, m.out_tokens, m.duration_s
        from stability_draws_ as d
        join measured as m on m.variant = d.variant and m.scenario = d.scenario and m.k_ = d.src""",
        [run_id],
    ).fetchall()
    replicates = 1 + max((row[0] for row in per), default=0)
    steps: Steps = {}
    levels: dict[tuple[str, str], float] = {}
    for b, variant, scenario, slot, level, ok_n, out_tokens, duration_s in per:
        slots = steps.setdefault((variant, scenario), {})
        if slot not in slots:
            slots[slot] = np.full((replicates, 2), np.nan)
        slots[slot][b] = rates(ok_n, out_tokens, duration_s)
        levels[(variant, scenario)] = float(level)
    return steps, levels


def resampled_throughputs(run_id: str, steps: Steps, levels: dict[tuple[str, str], float]) -> pd.DataFrame:
    """Each replicate's closed-loop step throughputs from its drawn repeats (drawn_figures): the mean of its drawn
    repeats' and their log-scale t interval at the step's stored level. Columns run_id ('<run>#<b>'), variant,
    scenario and perf_summary's six throughput columns."""
    import numpy as np
    import pandas as pd

    from tasks.core.stat_tests import log_t_interval

    rows = []
    for (variant, scenario), slots in steps.items():
        drawn = np.stack(list(slots.values()), axis=1)  # (replicates, slots, 2)
        for b in range(drawn.shape[0]):
            row = {"run_id": f"{run_id}#{b}", "variant": variant, "scenario": scenario}
            for f, name in enumerate(FIGURES):
                values = [None if np.isnan(v) else float(v) for v in drawn[b, :, f]]
                known = [v for v in values if v is not None]
                lo, hi, _ = log_t_interval(values, levels[(variant, scenario)])
                row.update(
                    {name: sum(known) / len(known) if known else None, f"{name}_ci_low": lo, f"{name}_ci_high": hi}
                )
            rows.append(row)
    return pd.DataFrame(rows, columns=["run_id", "variant", "scenario", *REDRAWN])


def resampled_pairs(run_id: str, steps: Steps, levels: dict[tuple[str, str], float]) -> pd.DataFrame:
    """Each replicate's perf_pairs rows from its drawn rounds (drawn_figures; warehouse.pairs.pair_cells)."""
    import pandas as pd

    return pd.DataFrame(pair_rows(lambda b: f"{run_id}#{b}", steps, levels), columns=PAIR_COLUMNS)
