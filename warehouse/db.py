"""Open the DuckDB warehouse (migrated, views fresh) and load one run's Parquet results into it.

The schema lives in `migrations/NNN_name.sql`, applied in order and recorded in
`schema_version`; views live in `views/staging/stg_*.sql` (shared definitions) and
`views/marts/v_*.sql` (what users query) and are recreated after every write
so views that depend on the data (the wide quality columns) follow it.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

import duckdb

from tasks.decision import SQL_DIR as DECISION_SQL_DIR
from tasks.decision.defaults import VIEW as DECISION_DEFAULTS
from tasks.decision.defaults import defaults_sql
from warehouse.errors import WarehouseError, damaged, is_damaged
from warehouse.history import update_history
from warehouse.ingest import insert_run, read_run_parts
from warehouse.pairs import update_pairs
from warehouse.swap import target_file, wal_of, writable_copy, writer_lock

MIGRATIONS_DIR = Path(__file__).parent / "migrations"
VIEWS_DIR = Path(__file__).parent / "views"
# The decision's views (the ship rules) live beside their Python twins, in tasks/decision/sql/, and read its defaults
# (decision_defaults, created first): this module opens the store with them, a layer above the decision.
VIEW_DIRS = (VIEWS_DIR / "staging", VIEWS_DIR / "marts", DECISION_SQL_DIR)
# Creation order: a view comes after the views it selects from. staging/ (stg_*) owns the shared
# definitions (the headline scenario, the primary quality metric, the band rule over v_history); marts/ (v_*) are
# what users query.
VIEWS = (
    "stg_headline_scenario",
    "stg_primary_quality",
    "stg_primary_delta",
    "v_quality_wide",
    "v_tradeoff",
    "v_pareto",
    "v_retention",
    "v_history",
    "stg_band",
    "v_change_points",
    "v_regressions",
    "v_quality_flips",
    "v_energy",
    "v_cost",
    "v_quality_deltas",
    "v_longctx_grid",
    "v_engine_metrics",
    "v_greedy_agreement",
    "v_decision",
    "v_slo_steps",
    "v_quality_gate",
    "v_recommendation",
    "v_recommendation_history",
)
# Placeholder in v_quality_wide.sql that refresh_views fills with one column per metric.
METRIC_COLUMNS = "/* metric_columns */"

_MIGRATION_NAME = re.compile(r"^(\d{3})_(\w+)\.sql$")


def migrations() -> list[tuple[int, str, Path]]:
    """(version, name, file) of every migration file, in version order."""
    found = [(int(m[1]), m[2], p) for p in MIGRATIONS_DIR.glob("*.sql") if (m := _MIGRATION_NAME.match(p.name))]
    return sorted(found)


def _connect(path: Path, read_only: bool, retry_s: float) -> duckdb.DuckDBPyConnection:
    """duckdb.connect, waiting up to `retry_s` while another process holds the file's lock."""
    deadline = time.monotonic() + retry_s
    while True:
        try:
            con = duckdb.connect(str(path), read_only=read_only)
            # No progress bar: a slow load (a busy host) would print one into the command's own output.
            con.execute("set enable_progress_bar = false")
            return con
        except duckdb.Error as e:
            msg = str(e)
            if is_damaged(msg):
                raise damaged(path, msg) from e
            if not isinstance(e, duckdb.IOException):
                raise
            if "read-only mode: database does not exist" in msg:
                raise WarehouseError(f"no warehouse at {path}; run `tradeoff run configs/demo.yaml` first") from e
            if "lock" not in msg.lower():
                raise WarehouseError(f"cannot open warehouse {path}: {msg.splitlines()[0]}") from e
            if time.monotonic() >= deadline:
                pid = re.search(r"\(PID (\d+)\)", msg)
                holder = f"process {pid[1]}" if pid else "another process"
                raise WarehouseError(
                    f"warehouse {path} is locked by {holder} (a running flow or a DuckDB shell?); "
                    f"wait for it or close it, or set TRADEOFF_WAREHOUSE to another file"
                ) from e
            time.sleep(0.2)


def _schema_version(con: duckdb.DuckDBPyConnection) -> int:
    has_table = con.execute(
        "select count(*) from duckdb_tables()"
        " where table_name = 'schema_version' and database_name = current_database()"
    ).fetchall()[0][0]
    if not has_table:
        return 0
    return con.execute("select coalesce(max(version), 0) from schema_version").fetchall()[0][0]


def _migrate(con: duckdb.DuckDBPyConnection, path: Path, read_only: bool) -> None:
    """Apply the migrations the database lacks; refuse a database newer than this code."""
    current, known = _schema_version(con), max(v for v, _, _ in migrations())
    if current > known:
        raise WarehouseError(
            f"warehouse {path} has schema version {current} but this tradeoff knows up to {known}; "
            f"upgrade tradeoff or use another TRADEOFF_WAREHOUSE"
        )
    if read_only:
        return
    # applied_at is UTC.
    con.execute(
        "create table if not exists schema_version (version integer primary key, name varchar, applied_at timestamp)"
    )
    applied = {v for (v,) in con.execute("select version from schema_version").fetchall()}
    # Apply every migration not yet recorded (not just those above the highest one), so a
    # migration numbered below one already applied on a development database is not skipped.
    for version, name, file in migrations():
        if version in applied:
            continue
        con.begin()
        try:
            con.execute(file.read_text())
            con.execute("insert into schema_version values (?, ?, timezone('UTC', current_timestamp))", [version, name])
            con.commit()
        except Exception:
            con.rollback()
            raise


def open_warehouse(path: str | Path, read_only: bool = False, retry_s: float = 10.0) -> duckdb.DuckDBPyConnection:
    """Connect to the warehouse at `path`, migrated to this code's schema with fresh views.

    A read-only connection is only checked: it neither migrates nor recreates views (it cannot
    write), it sees the views as the last writer left them.
    """
    path = Path(path)
    if not read_only:
        path.parent.mkdir(parents=True, exist_ok=True)
    con = _connect(path, read_only, retry_s)
    try:
        _migrate(con, path, read_only)
        if not read_only:
            refresh_views(con)
    except Exception:
        con.close()
        raise
    return con


def identifier(text: str) -> str:
    """`text` as a plain lowercase identifier: non-alphanumerics -> `_` ('fidelity.kl-mean' -> 'fidelity_kl_mean')."""
    return re.sub(r"[^0-9a-zA-Z]", "_", text).lower()


def _sql_str(s: str) -> str:
    return "'" + s.replace("'", "''") + "'"


def _metric_columns(con: duckdb.DuckDBPyConnection) -> str:
    """One `max(value) filter (...) as "<suite>_<metric>"` select item per metric in quality_scores."""
    pairs = con.execute("select distinct suite, metric from quality_scores order by suite, metric").fetchall()
    items, used = [], set()
    for suite, metric in pairs:
        name = identifier(f"{suite}_{metric}")
        # Distinct metrics can sanitize to one name ('kl-mean' vs 'kl_mean'); keep both columns.
        while name in used:
            name += "_"
        used.add(name)
        where = f"suite = {_sql_str(suite)} and metric = {_sql_str(metric)}"
        items.append(f',\n        max(value) filter (where {where}) as "{name}"')
    return "".join(items)


def refresh_views(con: duckdb.DuckDBPyConnection) -> None:
    """(Re)create every view of VIEW_DIRS (views/ and the decision's sql/), in the order of VIEWS, after the
    decision's defaults (tasks.decision.defaults)."""
    paths = {p.stem: p for d in VIEW_DIRS for p in d.glob("*.sql")}
    files = set(paths)
    if files != set(VIEWS):
        raise WarehouseError(
            f"views/ and tasks/decision/sql/ hold {sorted(files)} but db.VIEWS lists {list(VIEWS)}; list each view "
            "once, in order"
        )
    metric_columns = _metric_columns(con)
    con.execute(f"create or replace view {DECISION_DEFAULTS} as {defaults_sql()}")  # what v_decision falls back on
    for view in VIEWS:
        sql = paths[view].read_text().replace(METRIC_COLUMNS, metric_columns)
        con.execute(f"create or replace view {view} as\n{sql}")


def _settle(path: Path, retry_s: float = 10.0) -> None:
    """Check that the warehouse opens (waiting for another writer) and that this code knows its schema, naming the
    user's file (the load then writes a temporary copy); fold a WAL a crashed writer left into the file."""
    if not path.exists():
        return
    con = _connect(path, read_only=not wal_of(path).exists(), retry_s=retry_s)
    try:
        _migrate(con, path, read_only=True)  # only checks: a newer schema is refused here, not in the copy
        if not wal_of(path).exists():
            return
        con.execute("checkpoint")
    finally:
        con.close()


def load_run(run_dir: str | Path, warehouse_path: str | Path, only: list[str] | None = None) -> dict[str, int]:
    """Replace the run's rows in every table with those of `run_dir/results/`; returns rows inserted per table.

    `only` limits the load to some tables (the nightly loads only `runs` and `variants`
    of a run whose results failed validation, so the failure is on record).

    The parts are checked before the warehouse is touched; DuckDB then reads them itself into a
    copy of the warehouse that replaces the file only when complete (warehouse.swap), so a failed
    insert, a full disk or a crash leaves the previous file as it was. Delete-then-insert makes a
    reload idempotent. Readers keep reading the previous file meanwhile.
    """
    parts = read_run_parts(Path(run_dir) / "results")
    path = target_file(Path(warehouse_path))
    with writer_lock(path):
        _settle(path)
        try:
            with writable_copy(path, parts.bytes) as copy:
                con = open_warehouse(copy)
                try:
                    counts = insert_run(con, parts, only, atomic=False)  # the swap makes it all-or-nothing
                    update_history(con, [parts.run_id])
                    update_pairs(con, [parts.run_id])
                    refresh_views(con)
                    con.execute("checkpoint")
                finally:
                    con.close()
        except (duckdb.Error, OSError) as e:
            if is_damaged(str(e)):  # a damaged block of the warehouse met by the delete: the copy has it too
                raise damaged(path, str(e)) from e
            first = str(e).splitlines()[0] if str(e) else type(e).__name__
            raise WarehouseError(
                f"cannot load run {parts.run_id} into {warehouse_path}: {first}; nothing loaded, "
                f"the warehouse is unchanged"
            ) from e
    return counts
