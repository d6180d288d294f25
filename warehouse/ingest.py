"""A run folder's Parquet results, checked and then inserted by DuckDB's own Parquet reader.

`read_run_parts` looks only at the files' footers and their `run_id` columns, so a bad part is
named before any warehouse is opened. `insert_run` then has DuckDB read the parts itself
(`insert ... select ... from read_parquet([...])`): no pyarrow -> pandas -> DuckDB copies.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from warehouse.contract import RENAMED, SCHEMAS, TABLES, table_parts
from warehouse.errors import WarehouseError


@dataclass(frozen=True)
class RunParts:
    """The Parquet parts of one run, per table, and the contract's columns they hold."""

    run_id: str
    results_dir: Path
    files: dict[str, list[Path]]
    columns: dict[str, list[str]]
    # per table: a contract column -> the SQL that reads it from the parts (its old name's, or both coalesced)
    sources: dict[str, dict[str, str]] = field(default_factory=dict)

    @property
    def bytes(self) -> int:
        """Total size of the parts on disk (bytes)."""
        return sum(p.stat().st_size for files in self.files.values() for p in files)


def _first_line(err: Exception) -> str:
    return str(err).splitlines()[0] if str(err) else type(err).__name__


def _same_kind(got: pa.DataType, want: pa.DataType) -> bool:
    """Whether DuckDB can insert a Parquet column of type `got` into the contract's `want` without loss of meaning."""
    if pa.types.is_dictionary(got):
        got = got.value_type
    checks = (
        pa.types.is_integer,
        pa.types.is_floating,
        pa.types.is_boolean,
        pa.types.is_timestamp,
        lambda t: pa.types.is_string(t) or pa.types.is_large_string(t),
        lambda t: pa.types.is_list(t) or pa.types.is_large_list(t),
    )
    if pa.types.is_integer(got) and pa.types.is_floating(want):
        return True
    return got.equals(want) or any(c(got) and c(want) for c in checks)


def _table_columns(results_dir: Path, name: str, files: list[Path]) -> tuple[list[str], dict[str, str]]:
    """The contract's columns present in the table's parts, and the SQL reading each one that is present only or
    also under its old name (RENAMED); names a part whose footer or column types are bad."""
    schema, present, old_present = SCHEMAS[name], set(), set()
    renamed = RENAMED.get(name, {})
    for part in files:
        try:
            got = pq.read_schema(part)
        except Exception as e:  # any reader error: name the part
            raise WarehouseError(
                f"table {name} of {results_dir} is unreadable: {part} ({_first_line(e)}); nothing loaded"
            ) from e
        for field_ in schema:
            for column, seen in ((field_.name, present), (renamed.get(field_.name), old_present)):
                i = got.get_field_index(column) if column else -1
                if i < 0:
                    continue
                if not _same_kind(got.field(i).type, field_.type):
                    raise WarehouseError(
                        f"table {name} of {results_dir} is unreadable: {part} (column {column} is "
                        f"{got.field(i).type}, the contract says {field_.type}); nothing loaded"
                    )
                seen.add(field_.name)
    if files and "run_id" not in present:
        raise WarehouseError(f"table {name} of {results_dir} has no run_id column ({files[0]}); nothing loaded")
    sources = {c: (f'coalesce("{c}", "{renamed[c]}")' if c in present else f'"{renamed[c]}"') for c in old_present}
    return [f.name for f in schema if f.name in present | old_present], sources


def _run_ids(results_dir: Path, name: str, part: Path) -> pa.Array:
    try:
        return pc.unique(pq.read_table(part, columns=["run_id"]).column("run_id"))
    except Exception as e:  # any reader error: name the part
        raise WarehouseError(
            f"table {name} of {results_dir} is unreadable: {part} ({_first_line(e)}); nothing loaded"
        ) from e


def read_run_parts(results_dir: str | Path) -> RunParts:
    """The run's parts, checked: readable footers, the contract's column types, one run id shared by every row."""
    results_dir = Path(results_dir)
    files = {name: table_parts(results_dir, name) for name in TABLES}
    found = {name: _table_columns(results_dir, name, files[name]) for name in TABLES}
    columns = {name: cols for name, (cols, _) in found.items()}
    sources = {name: src for name, (_, src) in found.items()}
    runs = [rid for part in files["runs"] for rid in pq.read_table(part, columns=["run_id"]).column(0).to_pylist()]
    if len(runs) != 1 or runs[0] is None:
        raise WarehouseError(f"{results_dir}/runs must hold exactly one run, found {len(runs)} rows; nothing loaded")
    run_id = runs[0]
    for name in TABLES:
        others = {v for part in files[name] for v in _run_ids(results_dir, name, part).to_pylist()} - {run_id}
        if others:
            raise WarehouseError(
                f"table {name} of {results_dir} has rows of other runs {sorted(map(str, others))}; nothing loaded"
            )
    return RunParts(run_id, results_dir, files, columns, sources)


def _sql_list(paths: list[Path]) -> str:
    return "[" + ", ".join("'" + str(p).replace("'", "''") + "'" for p in paths) + "]"


def insert_run(
    con: duckdb.DuckDBPyConnection, parts: RunParts, only: list[str] | None = None, atomic: bool = True
) -> dict[str, int]:
    """Replace the run's rows in each table (or those in `only`) by its parts' rows; returns rows inserted per table.

    `atomic`: one transaction, so on any error nothing of the run changes. A caller that writes a
    private copy it throws away on error (load_run) passes False: each statement then commits on its
    own, which took a third less CPU when a reload replaced 1,000,000 rows (5.5 s instead of 8.5 s:
    delete and insert of the same primary keys in one transaction cost more). The error propagates.
    """
    names = [name for name in TABLES if only is None or name in only]
    counts: dict[str, int] = {}
    if atomic:
        con.begin()
    try:
        for name in names:
            con.execute(f"delete from {name} where run_id = ?", [parts.run_id])
        for name in names:
            if not parts.files[name]:
                counts[name] = 0
                continue
            cols = ", ".join(f'"{c}"' for c in parts.columns[name])
            reads = ", ".join(parts.sources.get(name, {}).get(c, f'"{c}"') for c in parts.columns[name])
            # hive_partitioning off: a `key=value` folder in the run's path must not become a column.
            ((inserted,),) = con.execute(
                f"insert into {name} ({cols}) select {reads} from read_parquet({_sql_list(parts.files[name])}, "
                f"union_by_name = true, hive_partitioning = false)"
            ).fetchall()
            counts[name] = int(inserted)
        if atomic:
            con.commit()
    except Exception:
        if atomic:
            try:
                con.rollback()
            except duckdb.Error:
                pass  # a database invalidated by the failure (e.g. a full disk) has nothing to roll back
        raise
    return counts
