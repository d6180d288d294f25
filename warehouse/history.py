"""Nights as a history: each value keyed into a series by what was measured, and the series' change points.

After each run's load (`warehouse.db.load_run`, and run by run in `tradeoff warehouse rebuild`),
`update_history` writes the run's `series_keys` (which series each variant's perf figures and each
suite's scores belong to) and recomputes the change points of every series the run touches into
`change_points`, with Apache Otava's e-divisive method (Hunter: Fleming et al., ICPE 2023; MongoDB's
performance CI). DuckDB views cannot call Otava, so this runs in Python at load time; the views
(`v_history`, `stg_band`, `v_change_points`, `v_regressions`) read the two tables.

A series is keyed on what was measured, not on a config's or variant's name: what served (the artifact's
content hash, or the hosted model; engine, quantization, speculative decoding, engine options), the
hardware, and the workload (the perf sweep's defining fields; a suite's name, version, limit, seed and
parameters). Renaming a config or a variant keeps the series; a new model starts a new one. The engine's
version is deliberately left out of the key: an engine upgrade is exactly the step a history should show,
so it stays in the series and is marked as a known cause (`v_history.known_cause`).

Otava is installed by `make setup` with --no-deps into a folder of the venv that pip does not list
(`OTAVA_DIR`): its wheel pins numpy 2.2 / scipy 1.16 and pulls BigQuery, Slack and Postgres clients, none
of which its analysis imports (it needs numpy and scipy only), so a normal install would downgrade the
project's numpy and scipy and leave `pip check` complaining. Otava ignores a metric's direction;
`v_change_points` decides which sign is a regression.
"""

from __future__ import annotations

import hashlib
import json
import sys
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb

OTAVA_VERSION = "0.8.0"
# Where `make setup` puts Otava (pip install --no-deps --target): inside the venv, outside its site-packages.
OTAVA_DIR = Path(sys.prefix) / "otava"
# Otava's significance level for a split (its default is 1e-3). Measured by benchmarks/history_detection.py on
# 40-night histories with 3 % Gaussian noise: 1e-4 kept 0 of 300 flat series flagged against 10 of 300 at 1e-3,
# and still found 98 % of 10 % steps within a night.
MAX_PVALUE = 1e-4
# Changes smaller than this (relative) are merged away: not a step anyone acts on.
MIN_MAGNITUDE = 0.02
# Fewer nights than this in a series: the band rule alone (stg_band) judges it.
MIN_NIGHTS = 6
METHOD = f"otava {OTAVA_VERSION} e-divisive, p < {MAX_PVALUE:g}, change > {MIN_MAGNITUDE:.0%}, >= {MIN_NIGHTS} nights"

# The perf sweep's fields that change what is measured (config.PerfSpec); other fields (timeouts, SLOs,
# interval settings) do not start a new series. A field added to PerfSpec later joins here only on purpose.
PERF_WORKLOAD_FIELDS = (
    "concurrency",
    "rates",
    "sweep",
    "burstiness",
    "max_concurrency",
    "num_prompts",
    "max_duration_s",
    "warmup_requests",
    "warmup_s",
    "repeats",
    "input_len",
    "output_len",
    "len_spread",
    "dataset",
    "endpoint",
    "unique_prompts",
    "force_output_len",
    "seed",
    "jitter",
    "peak_window_s",
)


def _otava():
    """otava.series from this environment, else from OTAVA_DIR (see the module's docstring)."""
    try:
        import otava.series as series
    except ImportError:
        if OTAVA_DIR.is_dir() and str(OTAVA_DIR) not in sys.path:
            sys.path.append(str(OTAVA_DIR))
        import otava.series as series
    return series


def otava_available() -> str | None:
    """None when Otava imports, else why not (one line)."""
    try:
        _otava()
    except ImportError as err:
        return (
            f"apache-otava {OTAVA_VERSION} not importable ({err}); run `make setup` (it installs it into {OTAVA_DIR})"
        )
    return None


# ------------------------------------------------------------------ change points of one series


@dataclass(frozen=True)
class Change:
    """One change point: the series changed at `index` (the first night after the change)."""

    index: int
    mean_before: float
    mean_after: float
    std_before: float
    std_after: float
    n_before: int
    n_after: int
    change_pct: float | None
    p_value: float


def change_points(values: Sequence[float]) -> list[Change]:
    """Otava's e-divisive change points of one series (nights in order, no missing values); [] under MIN_NIGHTS."""
    if len(values) < MIN_NIGHTS:
        return []
    series = _otava()
    options = series.AnalysisOptions()
    options.max_pvalue, options.min_magnitude = MAX_PVALUE, MIN_MAGNITUDE
    data = {"m": [float(v) for v in values]}
    found = series.Series("m", None, list(range(len(values))), {"m": series.Metric()}, data, {}).analyze(options)
    points = sorted(found.change_points["m"], key=lambda c: c.index)
    bounds = [0, *(int(c.index) for c in points), len(values)]
    out = []
    for i, c in enumerate(points):
        s = c.stats
        before, after = float(s.mean_1), float(s.mean_2)
        out.append(
            Change(
                int(c.index),
                before,
                after,
                float(s.std_1),
                float(s.std_2),
                bounds[i + 1] - bounds[i],
                bounds[i + 2] - bounds[i + 1],
                (after / before - 1) * 100 if before else None,
                float(s.pvalue),
            )
        )
    return out


# ------------------------------------------------------------------ series keys


def _short(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _config(text: str | None) -> dict:
    try:
        cfg = json.loads(text) if text else {}
    except ValueError:
        return {}
    return cfg if isinstance(cfg, dict) else {}


def perf_workload(config: dict) -> dict:
    """The perf sweep's defining fields of a config (as dumped in runs.config_json); missing ones None."""
    perf = config.get("perf") or {}
    return {f: perf.get(f) for f in PERF_WORKLOAD_FIELDS}


def suite_workload(config: dict, suite: str, version: str | None) -> dict:
    """A suite's spec (name, limit, seed, params) in the config, found by its key (label, else name), and version."""
    for spec in (config.get("quality") or {}).get("suites") or []:
        if (spec.get("label") or spec.get("name")) == suite:
            return {
                "name": spec.get("name"),
                "limit": spec.get("limit"),
                "seed": spec.get("seed"),
                "params": spec.get("params"),
                "version": version,
            }
    return {"name": suite, "version": version}


def variant_identity(config: dict, row: dict) -> dict:
    """What served: the artifact's hash (a hosted variant: its model's spec), engine, quantization, speculative
    decoding and engine options; from the variants row, the config's entry filling in the details."""
    spec = next((v for v in config.get("variants") or [] if v.get("name") == row["variant"]), {})
    artifact = row["artifact_sha256"] or {"model": (config.get("models") or {}).get(row["model"]) or row["model"]}
    try:
        engine_args = json.loads(row["engine_args"]) if row["engine_args"] else {}
    except ValueError:
        engine_args = row["engine_args"]
    return {
        "artifact": artifact,
        "engine": row["engine"],
        "quantization": row["quantization"],
        "speculative": spec.get("speculative") or row["speculative"],
        "engine_args": engine_args,
    }


def key_rows(con: duckdb.DuckDBPyConnection, run_ids: list[str]) -> list[tuple]:
    """series_keys rows (run_id, variant, scope, series_key, variant_key, workload_key) of the runs' variants."""
    cur = con.execute(
        """
        select v.run_id, v.variant, v.model, v.engine, v.quantization, v.speculative, v.engine_args,
               v.artifact_sha256, r.hardware_id, r.config_json
        from variants as v join runs as r on v.run_id = r.run_id
        where list_contains(?::varchar[], v.run_id)
        order by v.run_id, v.variant""",
        [run_ids],
    )
    names = [d[0] for d in cur.description]
    variants = [dict(zip(names, r)) for r in cur.fetchall()]
    suites = defaultdict(list)
    for run_id, variant, suite, version in con.execute(
        """
            select run_id, variant, suite, max(suite_version) from quality_scores
            where list_contains(?::varchar[], run_id) group by all order by all""",
        [run_ids],
    ).fetchall():
        suites[(run_id, variant)].append((suite, version))
    configs = {v["run_id"]: _config(v["config_json"]) for v in variants}
    identities = {(v["run_id"], v["variant"]): _short(variant_identity(configs[v["run_id"]], v)) for v in variants}
    # Two variants of one run that served the same thing (a control measured twice) stay two series: the
    # second of them, by name, gets its ordinal in the key.
    seen: dict[tuple[str, str], int] = defaultdict(int)
    out = []
    for v in variants:
        run_id, variant = v["run_id"], v["variant"]
        cfg = configs[run_id]
        ordinal = seen[(run_id, identities[(run_id, variant)])]
        seen[(run_id, identities[(run_id, variant)])] += 1
        variant_key = identities[(run_id, variant)] if not ordinal else _short([identities[(run_id, variant)], ordinal])
        scopes = [("perf", _short(perf_workload(cfg)))]
        scopes += [(suite, _short(suite_workload(cfg, suite, version))) for suite, version in suites[(run_id, variant)]]
        for scope, workload_key in scopes:
            series_key = _short([variant_key, v["hardware_id"], workload_key])
            out.append((run_id, variant, scope, series_key, variant_key, workload_key))
    return out


# ------------------------------------------------------------------ the load-time step


def _stderr(message: str) -> None:
    print(f"warning: {message}", file=sys.stderr)


def _recompute(con: duckdb.DuckDBPyConnection, series: set[str], seen_by: str, warn) -> int:
    """Recompute the change points of these series (every metric); a change point found before keeps its
    first_seen_run_id, a new one gets `seen_by`. Returns the number of change points now in these series.
    Without Otava (and a series long enough to need it) the table is left as it was and `warn` hears why."""
    if not series:
        return 0
    keys = sorted(series)
    points = con.execute(
        """
        select series_key, metric, run_id, value from v_history
        where list_contains(?::varchar[], series_key)
        order by series_key, metric, started_at, run_id""",
        [keys],
    ).fetchall()
    seen = {
        (s, m, r): first
        for s, m, r, first in con.execute(
            "select series_key, metric, run_id, first_seen_run_id from change_points "
            "where list_contains(?::varchar[], series_key)",
            [keys],
        ).fetchall()
    }
    histories: dict[tuple[str, str], list[tuple[str, float]]] = defaultdict(list)
    for s, m, run_id, value in points:
        histories[(s, m)].append((run_id, value))
    problem = otava_available() if any(len(h) >= MIN_NIGHTS for h in histories.values()) else None
    if problem:
        warn(f"change points not computed: {problem}")
        return 0
    rows = []
    for (s, m), nights in histories.items():
        for c in change_points([value for _, value in nights]):
            run_id = nights[c.index][0]
            rows.append(
                (
                    s,
                    m,
                    run_id,
                    METHOD,
                    c.mean_before,
                    c.mean_after,
                    c.std_before,
                    c.std_after,
                    c.n_before,
                    c.n_after,
                    c.change_pct,
                    c.p_value,
                    seen.get((s, m, run_id), seen_by),
                )
            )
    con.execute("delete from change_points where list_contains(?::varchar[], series_key)", [keys])
    if rows:
        con.executemany("insert into change_points values (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", rows)
    return len(rows)


def update_history(con: duckdb.DuckDBPyConnection, run_ids: list[str], warn=None) -> int:
    """Key the runs' variants into series (and any run loaded before this table existed), then recompute the
    change points of every series they touch, old keys included; returns the change points in those series.

    `warn(message)` hears why change points were not computed (Otava missing); the keys are written anyway.
    Otava is imported only once some series has MIN_NIGHTS nights.
    """
    backfill = [
        r
        for (r,) in con.execute(
            "select run_id from runs anti join series_keys using (run_id) order by started_at, run_id"
        ).fetchall()
    ]
    todo = sorted(set(run_ids) | set(backfill))
    if not todo:
        return 0
    old = {
        s
        for (s,) in con.execute(
            "select distinct series_key from series_keys where list_contains(?::varchar[], run_id)", [todo]
        ).fetchall()
    }
    rows = key_rows(con, todo)
    con.execute("delete from series_keys where list_contains(?::varchar[], run_id)", [todo])
    if rows:
        con.executemany("insert into series_keys values (?, ?, ?, ?, ?, ?)", rows)
    return _recompute(con, old | {r[3] for r in rows}, run_ids[-1] if run_ids else todo[-1], warn or _stderr)
