"""The decision explorer of the HTML report: `tradeoff recommend` answered ahead of time for a grid of its flags.

"What if our TTFT limit were 1 s, or p90, or a 1-point margin?" is asked of the page instead of the command line.
At render time the report takes a few values per control (each SLO limit around the run's own, a few percentiles,
a few quality margins and the run's own gate, each objective the run has figures for), turns every combination
into the flags `tradeoff recommend` would be given, and decides each one as the command does: the flags read by
overrides_from_args, validated by `settings`, the v_decision columns
`apply_overrides` would set (decision_columns), read back by `recommendation_frame` and said by `summary_lines`.
The results go into the page as JSON; the page's controls snap to the grid and only look results up, so no rule
of the decision is written twice.

The grid is decided in one pass, not one query per setting (each query costs ~0.2 s however small the run): the
run's rows are copied under one run id per setting ('<run>#<i>', temp views that shadow this connection's tables,
as pick_stability's replicates do) with each copy's v_decision row set as its flags set it. Every view the decision
reads joins on run_id, so a copy is decided as the run itself is under its flags. The temp views are dropped after;
the stored warehouse is never written.
"""

from __future__ import annotations

import argparse
import itertools
import math
import shlex
import time
from dataclasses import dataclass
from typing import Any

import duckdb
import pandas as pd

from tasks.decision.what_if import decision_columns
from tasks.report.recommend import RECOMMENDATION_ORDER, overrides_from_args, recommendation_frame, settings
from tasks.report.sentences import summary_lines

# The values each control offers beside the run's own: a limit as a multiple of the run's, percentiles, gates.
LIMIT_SCALES = {"ttft_ms": (0.25, 0.5, 1.0, 2.0), "tpot_ms": (0.5, 1.0), "e2el_ms": (0.5, 1.0)}
PERCENTILES = (50.0, 75.0, 90.0, 99.0)
MARGINS_POINTS = (1.0, 2.0, 5.0)
RETENTIONS = (0.99,)  # MLPerf's 99 % class
# Objectives offered where some variant has the figure they rank on under the run's own settings (rate and tps:
# always), and the run's own.
OBJECTIVE_FIGURE = {"rate": None, "tps": None, "cost": "usd_per_1m_output_tok", "energy": "j_per_1m_output_tok"}
RETENTION = ("retention", "retention_ci_low", "retention_ci_high")
SPEED = ("sustainable_output_tok_s", "sustainable_output_tok_s_ci_low", "sustainable_output_tok_s_ci_high")
PAGE_COLUMNS = ("variant", "verdict", "verdict_reason", "n_needed_slo", "is_reference", *SPEED)
# The columns of v_decision that v_slo_steps reads (its `decision` CTE; tests/integration/test_explorer.py checks):
# settings equal in these are judged the same on the SLO.
SLO_COLUMNS = ("slo_percentile", "slo_confidence", "min_rate_ratio", "slo_ttft_ms", "slo_tpot_ms", "slo_e2el_ms")
# Settings decided per query: the copies of a large run stay within memory.
CHUNK = 128


@dataclass(frozen=True)
class Control:
    """One control of the page: its values (a limit in ms or None for no limit, a percentile, a gate as
    ('margin_points' | 'retention', value), an objective), how each is shown and keyed in the page's URL fragment,
    and which of them is the run's own setting."""

    key: str
    label: str
    values: tuple[Any, ...]
    labels: tuple[str, ...]
    keys: tuple[str, ...]
    default: int


def _round(x: float) -> float:
    """Three significant digits: a limit a person would type (0.25 x 450 ms -> 112 ms)."""
    return float(f"{x:.3g}")


def _limit_control(key: str, label: str, own: float | None) -> Control:
    values = (None,) if own is None else tuple(sorted({_round(own * s) for s in LIMIT_SCALES[key]} | {own}))
    shown = tuple("none" if v is None else f"{v:g}" for v in values)
    return Control(key, label, values, shown, shown, values.index(own))


def controls(default: pd.DataFrame) -> list[Control]:
    """The page's controls for the run whose decision under its own settings is `default` (recommendation_frame):
    the values around the run's own, the run's own among them."""
    first = default.iloc[0]
    own = {k: _present(first[f"slo_{k}"]) for k in LIMIT_SCALES}
    percentile = float(first["slo_percentile"])
    margin, retention = _present(first["margin_points"]), float(first["retention_target"])
    gate_own = ("margin_points", float(margin)) if margin is not None else ("retention", retention)
    gates = sorted({("margin_points", m) for m in MARGINS_POINTS} | {("retention", r) for r in RETENTIONS} | {gate_own})
    objectives = [o for o, col in OBJECTIVE_FIGURE.items() if col is None or default[col].notna().any()]
    objectives += [] if first["optimise"] in objectives else [first["optimise"]]
    percentiles = sorted(set(PERCENTILES) | {percentile})
    return [
        _limit_control("ttft_ms", "TTFT limit (ms)", own["ttft_ms"]),
        _limit_control("tpot_ms", "TPOT limit (ms)", own["tpot_ms"]),
        _limit_control("e2el_ms", "E2EL limit (ms)", own["e2el_ms"]),
        Control(
            "percentile",
            "percentile",
            tuple(percentiles),
            tuple(f"p{p:g}" for p in percentiles),
            tuple(f"{p:g}" for p in percentiles),
            percentiles.index(percentile),
        ),
        Control(
            "gate",
            "quality gate",
            tuple(gates),
            tuple(
                f"lose at most {v:g} point{'' if v == 1 else 's'}" if k == "margin_points" else f"keep {v * 100:g} %"
                for k, v in gates
            ),
            tuple(f"m{v:g}" if k == "margin_points" else f"r{v:g}" for k, v in gates),
            gates.index(gate_own),
        ),
        Control(
            "optimise",
            "objective",
            tuple(objectives),
            tuple(objectives),
            tuple(objectives),
            objectives.index(first["optimise"]),
        ),
    ]


def flags(choice: dict[str, Any]) -> list[str]:
    """The `tradeoff recommend` flags of one setting (a value per control key)."""
    limits = [f"{k}={choice[k]:g}" for k in LIMIT_SCALES if choice[k] is not None]
    kind, value = choice["gate"]
    gate = ["--margin-points", f"{value:g}"] if kind == "margin_points" else ["--retention", f"{value:g}"]
    return (
        (["--slo", ",".join(limits)] if limits else [])
        + ["--percentile", f"{choice['percentile']:g}"]
        + gate
        + ["--optimise", choice["optimise"]]
    )


def grid(ctrls: list[Control]) -> list[dict[str, Any]]:
    """Every combination of the controls' values, the last control varying fastest (the page's index)."""
    return [dict(zip((c.key for c in ctrls), combo)) for combo in itertools.product(*(c.values for c in ctrls))]


def parsed(argv: list[str]) -> argparse.Namespace:
    """A setting's flags (`flags`: each flag followed by its value) as the command's parser gives them to
    overrides_from_args: under each flag's dest, argparse's default ('--margin-points' -> margin_points).
    tests/integration/test_explorer.py holds each setting's decision equal to the command's."""
    return argparse.Namespace(**{f.removeprefix("--").replace("-", "_"): v for f, v in zip(argv[::2], argv[1::2])})


def decide(con: duckdb.DuckDBPyConnection, run_id: str, argvs: list[list[str]]) -> list[pd.DataFrame]:
    """recommendation_frame of the run under each list of `tradeoff recommend` flags, in order: the flags read as
    the command reads them, each setting validated as the command validates it, decided CHUNK settings at a time."""
    overrides = [overrides_from_args(parsed(a)) for a in argvs]
    columns = [decision_columns(settings(con, run_id, o), o) for o in overrides]
    frames: list[pd.DataFrame] = []
    for start in range(0, len(columns), CHUNK):
        frames += _decide_chunk(con, run_id, columns[start : start + CHUNK])
    return frames


def _decide_chunk(con: duckdb.DuckDBPyConnection, run_id: str, columns: list[dict[str, str]]) -> list[pd.DataFrame]:
    """recommendation_frame of the run under each setting's v_decision columns (decision_columns), from copies of
    the run (copy i: run id '<run>#<i>', decided under setting i); the frames' run_id is the run's again.

    The SLO's claims (v_slo_steps, most of the work) are judged once per distinct SLO setting: v_slo_steps reads
    v_decision's SLO_COLUMNS alone, so settings that agree on them get the same rows. They stand in for v_slo_steps
    (a temp table of that name) while v_recommendation decides every setting."""
    db = con.execute("select current_database()").fetchall()[0][0].replace('"', '""')
    slo_keys = [tuple(c.get(k) for k in SLO_COLUMNS) for c in columns]
    distinct = list(dict.fromkeys(slo_keys))
    con.register("explorer_run_", pd.DataFrame({"run_id": [run_id]}))
    con.register("explorer_slo_", pd.DataFrame({"i": range(len(columns)), "j": [distinct.index(k) for k in slo_keys]}))
    made = ["explorer_run_", "explorer_slo_"]
    try:
        made += _shadow(con, db, [columns[slo_keys.index(k)] for k in distinct])
        con.execute(f'create or replace temp table explorer_slo_steps_ as select * from "{db}".main.v_slo_steps')
        made.append("table temp.main.explorer_slo_steps_")
        made += _shadow(con, db, columns)
        con.execute(
            "create or replace temp table v_slo_steps as "
            "select s.* replace (r.run_id || '#' || m.i as run_id) from explorer_slo_steps_ as s "
            "cross join explorer_run_ as r join explorer_slo_ as m on s.run_id = r.run_id || '#' || m.j"
        )
        made.append("table temp.main.v_slo_steps")
        every = con.execute(f'select * from "{db}".main.v_recommendation order by run_id, {RECOMMENDATION_ORDER}').df()
    finally:
        for what in reversed(dict.fromkeys(made)):
            if what.startswith("explorer_"):
                con.unregister(what)
            else:
                kind, name = what.split(maxsplit=1)
                con.execute(f"drop {kind} if exists {name}")
    by_copy = {k: g.reset_index(drop=True) for k, g in every.groupby("run_id", sort=False)}
    return [by_copy[f"{run_id}#{i}"].assign(run_id=run_id) for i in range(len(columns))]


def _shadow(con: duckdb.DuckDBPyConnection, db: str, columns: list[dict[str, str]]) -> list[str]:
    """Temp views that make this connection see the run (explorer_run_) once per setting: each table with a run_id
    copied under '<run>#<i>', and v_decision's row of copy i as apply_overrides writes it under setting i (one
    union arm per set of columns set: a margin sets one, a retention two). The views made, to drop."""
    made = []
    for t in _run_tables(con):
        name = t.replace('"', '""')
        con.execute(
            f"create or replace temp view \"{name}\" as select t.* replace (t.run_id || '#' || c.i as run_id) "
            f'from "{db}".main."{name}" as t join explorer_run_ as r using (run_id) '
            f"cross join range({len(columns)}) as c(i)"
        )
        made.append(f'view temp.main."{name}"')
    arms = []
    for cols in dict.fromkeys(tuple(c) for c in columns):
        rows = ", ".join(f"({', '.join([str(i), *c.values()])})" for i, c in enumerate(columns) if tuple(c) == cols)
        replace = f"replace ({', '.join(f'g.{k} as {k}' for k in cols)})" if cols else ""  # no flags: as recorded
        arms.append(
            f'select d.* {replace} from "{db}".main.v_decision as d cross join explorer_run_ as r '
            f"join (values {rows}) as g({', '.join(['i', *cols])}) on d.run_id = r.run_id || '#' || g.i"
        )
    con.execute("create or replace temp view v_decision as " + " union all ".join(arms))
    return made + ["view temp.main.v_decision"]


def _run_tables(con: duckdb.DuckDBPyConnection) -> list[str]:
    """The warehouse's tables with a run_id column: what a copy of a run copies."""
    return [
        t
        for (t,) in con.execute(
            "select distinct c.table_name from duckdb_columns() as c join duckdb_tables() as t "
            "on c.database_name = t.database_name and c.schema_name = t.schema_name and c.table_name = t.table_name "
            "where c.database_name = current_database() and c.schema_name = 'main' and c.column_name = 'run_id'"
        ).fetchall()
    ]


def _present(x: Any) -> Any:
    """A DataFrame cell with NaN, NA and None as None."""
    return None if x is None or (not isinstance(x, str) and pd.isna(x)) else x


def _num(x: Any, scale: float = 1.0) -> float | None:
    """A figure for the page (times `scale`): 4 significant digits, None where missing."""
    x = _present(x)
    return None if x is None or not math.isfinite(float(x)) else float(f"{float(x) * scale:.4g}")


class _Strings:
    """A table of the page's repeated texts: each kept once, cited by index."""

    def __init__(self) -> None:
        self.items: list[str] = []
        self._index: dict[str, int] = {}

    def __call__(self, text: str | None) -> int | None:
        if text is None:
            return None
        if text not in self._index:
            self._index[text] = len(self.items)
            self.items.append(text)
        return self._index[text]


def point(df: pd.DataFrame, variants: list[str], s: _Strings) -> dict[str, Any]:
    """One setting's decision for the page: the pick, the first sentence of `tradeoff recommend`, and per variant
    (in the command's order) its verdict, reason, requests needed for the SLO claim, and the frontier plot's
    coordinates: sustainable output tok/s, and the change in points (a margin gate) or the retention (%), with
    their intervals."""
    first = df.iloc[0]
    pick = _present(first["recommended_variant"])
    points = bool((df["gate_basis"] == "margin_points").any())
    gate = ("delta", "delta_ci_low", "delta_ci_high") if points else RETENTION
    rows = []
    for r in df[[*PAGE_COLUMNS, *gate]].to_dict("records"):
        y = [0.0, 0.0, 0.0] if points and _present(r["is_reference"]) else [_num(r[c], 100) for c in gate]
        rows.append(
            [
                variants.index(r["variant"]),
                s(r["verdict"]),
                s(_present(r["verdict_reason"])),
                _num(r["n_needed_slo"]),
                *(_num(r[c]) for c in SPEED),
                *y,  # a margin gate: the reference against itself
            ]
        )
    target = -float(first["margin_points"]) if points else float(first["retention_target"]) * 100
    return {
        "pick": None if pick is None else variants.index(pick),
        "head": s(summary_lines(df)[0]),
        "basis": "points" if points else "retention",
        "target": _num(target),
        "rows": rows,
    }


def explorer_data(con: duckdb.DuckDBPyConnection, run_id: str) -> dict[str, Any] | None:
    """The explorer's JSON for the run: its controls, every setting of their grid decided as `tradeoff recommend`
    decides it with that setting's flags (listed with each point), and the seconds that took. None: no variants."""
    began = time.perf_counter()
    default = recommendation_frame(con, run_id)
    if default.empty:
        return None
    ctrls = controls(default)
    argvs = [flags(c) for c in grid(ctrls)]
    frames = decide(con, run_id, argvs)
    variants = sorted(default["variant"])
    s = _Strings()
    points = [{**point(df, variants, s), "flags": shlex.join(a)} for df, a in zip(frames, argvs)]
    return {
        "run": run_id,
        "variants": variants,
        "controls": [
            {"key": c.key, "label": c.label, "labels": c.labels, "keys": c.keys, "default": c.default} for c in ctrls
        ],
        "strings": s.items,
        "points": points,
        "seconds": round(time.perf_counter() - began, 1),
    }
