"""Open the DuckDB warehouse (migrated, views fresh) and load one run's Parquet results into it.

The schema lives in `migrations/NNN_name.sql`, applied in order and recorded in
`schema_version`; views live in `views/<view>.sql` and are recreated after every write
so views that depend on the data (the wide quality columns) follow it.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from tasks.tables import SCHEMAS, TABLES, read_table, table_parts

MIGRATIONS_DIR = Path(__file__).parent / "migrations"
VIEWS_DIR = Path(__file__).parent / "views"
# Creation order: a view comes after the views it selects from.
VIEWS = ("v_quality_wide", "v_tradeoff", "v_pareto", "v_retention", "v_history", "v_regressions", "v_energy", "v_cost",
         "v_quality_deltas", "v_longctx_grid", "v_engine_metrics", "v_greedy_agreement",
         "v_decision", "v_slo_steps", "v_quality_gate", "v_recommendation")
# Placeholder in v_quality_wide.sql that refresh_views fills with one column per metric.
METRIC_COLUMNS = "/* metric_columns */"

_MIGRATION_NAME = re.compile(r"^(\d{3})_(\w+)\.sql$")


class WarehouseError(RuntimeError):
    """A problem with the warehouse, with a one-line message meant for users."""


def migrations() -> list[tuple[int, str, Path]]:
    """(version, name, file) of every migration file, in version order."""
    found = [(int(m[1]), m[2], p) for p in MIGRATIONS_DIR.glob("*.sql") if (m := _MIGRATION_NAME.match(p.name))]
    return sorted(found)


def _connect(path: Path, read_only: bool, retry_s: float) -> duckdb.DuckDBPyConnection:
    """duckdb.connect, waiting up to `retry_s` while another process holds the file's lock."""
    deadline = time.monotonic() + retry_s
    while True:
        try:
            return duckdb.connect(str(path), read_only=read_only)
        except duckdb.IOException as e:
            msg = str(e)
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
    """(Re)create every view of `views/`, in the order of VIEWS."""
    files = {p.stem for p in VIEWS_DIR.glob("*.sql")}
    if files != set(VIEWS):
        raise WarehouseError(
            f"views/ holds {sorted(files)} but db.VIEWS lists {list(VIEWS)}; list each view once, in order"
        )
    metric_columns = _metric_columns(con)
    for view in VIEWS:
        sql = (VIEWS_DIR / f"{view}.sql").read_text().replace(METRIC_COLUMNS, metric_columns)
        con.execute(f"create or replace view {view} as\n{sql}")


def _read_results(results_dir: Path) -> dict[str, pa.Table]:
    """Every result table of a run as Arrow with the contract's types; names the part that is unreadable."""
    out = {}
    for name in TABLES:
        try:
            df = read_table(results_dir, name)
        except Exception as e:
            bad = next((p for p in table_parts(results_dir, name) if not _readable(p, name)), "a part")
            reason = str(e).splitlines()[0] if str(e) else type(e).__name__
            raise WarehouseError(
                f"table {name} of {results_dir} is unreadable: {bad} ({reason}); nothing loaded"
            ) from e
        out[name] = pa.Table.from_pandas(df, schema=SCHEMAS[name], preserve_index=False)
    return out


def _readable(part: Path, name: str) -> bool:
    try:
        pq.read_table(part, schema=SCHEMAS[name])
        return True
    except Exception:
        return False


def _run_id(tables: dict[str, pa.Table], results_dir: Path) -> str:
    """The run's id: the one row of `runs`, which every other table's rows must carry."""
    ids = tables["runs"].column("run_id").to_pylist()
    if len(ids) != 1 or ids[0] is None:
        raise WarehouseError(f"{results_dir}/runs must hold exactly one run, found {len(ids)} rows; nothing loaded")
    for name, table in tables.items():
        others = set(table.column("run_id").to_pylist()) - {ids[0]}
        if others:
            raise WarehouseError(
                f"table {name} of {results_dir} has rows of other runs {sorted(map(str, others))}; nothing loaded"
            )
    return ids[0]


def load_run(run_dir: str | Path, warehouse_path: str | Path, only: list[str] | None = None) -> dict[str, int]:
    """Replace the run's rows in every table with those of `run_dir/results/`; returns rows inserted per table.

    `only` limits the load to some tables (the nightly loads only `runs` and `variants`
    of a run whose results failed validation, so the failure is on record).

    Delete-then-insert in one transaction makes a reload idempotent, and a failure keeps
    the previous state. Everything is read before the warehouse is opened, so the write lock
    is held only for the transaction.
    """
    results_dir = Path(run_dir) / "results"
    tables = _read_results(results_dir)
    run_id = _run_id(tables, results_dir)
    if only is not None:
        tables = {name: t for name, t in tables.items() if name in only}
    con = open_warehouse(warehouse_path)
    try:
        con.begin()
        try:
            for name in tables:
                con.execute(f"delete from {name} where run_id = ?", [run_id])
            for name, table in tables.items():
                con.register("incoming", table)
                con.execute(f"insert into {name} by name select * from incoming")
                con.unregister("incoming")
            con.commit()
        except Exception as e:
            con.rollback()
            if isinstance(e, duckdb.Error):
                first = str(e).splitlines()[0]
                raise WarehouseError(f"cannot load run {run_id} into {warehouse_path}: {first}; nothing loaded") from e
            raise
        refresh_views(con)
    finally:
        con.close()
    return {name: table.num_rows for name, table in tables.items()}
