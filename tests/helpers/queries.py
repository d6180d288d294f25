"""Reading a warehouse in tests: rows as dicts, row counts per run."""

from __future__ import annotations

from pathlib import Path

import duckdb

from warehouse.contract import TABLES


def rows(con: duckdb.DuckDBPyConnection, sql: str) -> list[dict]:
    """Rows of SQL on the connection CON, each a dict of column name -> value."""
    cur = con.execute(sql)
    names = [d[0] for d in cur.description]
    return [dict(zip(names, r)) for r in cur.fetchall()]


def per_run(db: Path) -> dict[str, dict[str, int]]:
    """run_id -> rows per table, read with a plain DuckDB connection."""
    with duckdb.connect(str(db), read_only=True) as con:
        out: dict[str, dict[str, int]] = {}
        for t in TABLES:
            for run_id, n in con.execute(f"select run_id, count(*) from {t} group by run_id").fetchall():
                out.setdefault(run_id, {})[t] = n
        return out
