"""`tradeoff load` and `tradeoff warehouse rebuild`: run folders through the nightly's gate into the warehouse.

A load holds the run folder's lock (tasks.orchestration.runlock), validates the results with the nightly's
suites and counts (tasks.orchestration.folder_gate) and refuses what the nightly refused, unless the expert says
--skip-validation (recorded in the run folder as UNVALIDATED, so a rebuild loads that run the same way). A
rebuild builds a new warehouse file from every run folder (local, or fetched from a results URL), each through
the same gate, and swaps it in for the old one, which it keeps beside it: the way back from a warehouse that
cannot be opened.
"""

from __future__ import annotations

import json
import re
import sys
import tempfile
import time
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import duckdb
import fsspec

from tasks.core.runinfo import RunPaths, runs_dir
from tasks.orchestration.folder_gate import gate_run
from tasks.orchestration.results import ResultsLocation
from tasks.orchestration.runlock import RunLocked, run_lock
from warehouse.db import load_run, open_warehouse, refresh_views
from warehouse.errors import WarehouseError
from warehouse.history import update_history
from warehouse.ingest import insert_run, read_run_parts
from warehouse.pairs import update_pairs
from warehouse.swap import check_free_space, discard, replace_keeping_previous, target_file, temp_path, writer_lock

# A folder name under a results URL that may be a run id: nothing that walks out of the folder.
_RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,199}")
# In a run folder: the expert loaded it with --skip-validation; a rebuild then loads it whole too (a later load
# that passes the gate removes it).
UNVALIDATED = "loaded-without-validation.json"


class GateRefused(WarehouseError):
    """The run's results fail the nightly's validation; the message is one line."""


def _stderr(message: str) -> None:
    print(f"warning: {message}", file=sys.stderr)


def load_checked(
    run_dir: str | Path, warehouse: str | Path, skip_validation: bool = False, warn: Callable[[str], None] = _stderr
) -> dict[str, int]:
    """Load one run folder as the nightly would: its lock held, its results through the GX gate; rows per table."""
    run_dir = Path(run_dir)
    if not (run_dir / "results").is_dir():
        raise WarehouseError(f"run_dir: {run_dir} has no results/ folder; pass a run folder such as runs/<run_id>")
    with run_lock(run_dir, "load", warn=warn):
        if skip_validation:
            warn(
                f"--skip-validation: loading run {run_dir.name} without the validation the nightly applies "
                f"(recorded in {run_dir / UNVALIDATED}: `tradeoff warehouse rebuild` loads it the same way)"
            )
            counts = load_run(run_dir, warehouse)
            (run_dir / UNVALIDATED).write_text(
                json.dumps({"loaded_at": datetime.now(timezone.utc).isoformat(), "warehouse": str(warehouse)}) + "\n"
            )
            return counts
        gate = gate_run(run_dir)
        if gate.note:
            warn(gate.note)
        if not gate.report.success:
            raise GateRefused(gate.refusal(run_dir))
        counts = load_run(run_dir, warehouse)
        (run_dir / UNVALIDATED).unlink(missing_ok=True)  # validated now
        return counts


@dataclass
class RebuildSummary:
    warehouse: Path
    loaded: list[str] = field(default_factory=list)
    unvalidated: list[str] = field(default_factory=list)  # of `loaded`, those an expert loaded with --skip-validation
    failed_validation: list[str] = field(default_factory=list)  # runs and variants rows only, as the nightly loads them
    skipped: dict[str, str] = field(default_factory=dict)  # run -> why
    previous: Path | None = None  # where the replaced file is kept
    seconds: float = 0.0

    def line(self) -> str:
        kept = f"; the previous file is kept as {self.previous}" if self.previous else ""
        unvalidated = (
            (f" ({len(self.unvalidated)} without validation, as `tradeoff load --skip-validation` loaded them)")
            if self.unvalidated
            else ""
        )
        return (
            f"rebuilt {self.warehouse} in {self.seconds:.1f} s: {len(self.loaded)} runs loaded{unvalidated}, "
            f"{len(self.failed_validation)} failed validation (recorded as failed, as the nightly does), "
            f"{len(self.skipped)} skipped{kept}"
        )


def _rebuild_one(
    con: duckdb.DuckDBPyConnection, run_dir: Path, lock: bool, summary: RebuildSummary, out: Callable[[str], None]
) -> None:
    """Gate one run folder and insert it: all of it when it passes, its runs and variants rows when it fails.

    A problem of the run (being written, unreadable, its rows refused by a constraint) skips it with
    the reason; a problem of the new file (disk full) propagates and ends the rebuild.
    """
    name = run_dir.name
    try:
        with run_lock(run_dir, "rebuild", warn=out) if lock else nullcontext():
            parts = read_run_parts(run_dir / "results")
            if (run_dir / UNVALIDATED).is_file():  # the expert's --skip-validation load, kept as it was
                counts = insert_run(con, parts)
                summary.loaded.append(parts.run_id)
                summary.unvalidated.append(parts.run_id)
                out(
                    f"{name}: loaded {sum(counts.values()):,} rows without validation, as `tradeoff load "
                    f"--skip-validation` did ({UNVALIDATED} in the run folder)"
                )
                return
            try:
                gate = gate_run(run_dir)
            except Exception as err:  # a gate that cannot judge the run lets nothing of it in
                raise WarehouseError(f"validation could not run ({type(err).__name__}: {err})") from err
            if gate.report.success:
                counts = insert_run(con, parts)
                update_history(con, [parts.run_id], warn=out)
                update_pairs(con, [parts.run_id])
                summary.loaded.append(parts.run_id)
                out(f"{name}: loaded {sum(counts.values()):,} rows" + (f" ({gate.note})" if gate.note else ""))
                return
            insert_run(con, parts, only=[t for t in ("runs", "variants") if t not in gate.bad_tables()])
            update_history(con, [parts.run_id], warn=out)
            summary.failed_validation.append(parts.run_id)
            out(
                f"{name}: fails validation ({'; '.join(gate.report.failures()[:2])}); only its runs and variants "
                f"rows loaded, as the nightly does"
            )
    except (RunLocked, WarehouseError, duckdb.ConstraintException, duckdb.ConversionException) as err:
        reason = str(err).splitlines()[0] if str(err) else type(err).__name__
        summary.skipped[name] = reason
        out(f"{name}: skipped: {reason}")


def _rebuild(folders: list[Path], db: Path, lock_runs: bool, out: Callable[[str], None]) -> RebuildSummary:
    t0 = time.perf_counter()
    summary = RebuildSummary(db)
    if not folders:
        raise WarehouseError(f"no run folders (folders with results/) found; nothing rebuilt, {db} is unchanged")
    with writer_lock(db):
        incoming = sum(p.stat().st_size for f in folders for p in (f / "results").rglob("*.parquet"))
        check_free_space(db, incoming, copy=False)
        tmp = temp_path(db, "rebuild")
        try:
            con = open_warehouse(tmp)
            try:
                for folder in folders:
                    _rebuild_one(con, folder, lock_runs, summary, out)
                if not summary.loaded and not summary.failed_validation:
                    raise WarehouseError(
                        f"none of the {len(folders)} run folders could be loaded (reasons above); "
                        f"nothing rebuilt, {db} is unchanged"
                    )
                refresh_views(con)
                con.execute("checkpoint")
            finally:
                con.close()
            summary.previous = replace_keeping_previous(tmp, db)
        except (duckdb.Error, OSError) as err:
            first = str(err).splitlines()[0] if str(err) else type(err).__name__
            raise WarehouseError(f"rebuild of {db} failed: {first}; the warehouse is unchanged") from err
        finally:
            discard(tmp)
    summary.seconds = time.perf_counter() - t0
    return summary


def _fetch_runs(url: str, dest: Path, out: Callable[[str], None]) -> list[Path]:
    """Copy every run folder under the results URL into `dest`; names that are no run id are skipped."""
    location = ResultsLocation.resolve(url)
    try:
        fs, root = fsspec.core.url_to_fs(location.url)
        entries = fs.ls(root, detail=True)
    except Exception as err:  # noqa: BLE001 - any backend's error, in one line
        first = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise WarehouseError(
            f"--results-url: cannot list {url} ({type(err).__name__}: {first}); give a folder or "
            f"URL that holds run folders"
        ) from None
    folders = []
    for entry in sorted(entries, key=lambda e: e["name"]):
        name = entry["name"].rstrip("/").rsplit("/", 1)[-1]
        if entry.get("type") != "directory" or name.startswith("."):
            continue
        if not _RUN_ID.fullmatch(name):
            out(f"{name!r}: skipped: not a run id")
            continue
        paths = RunPaths(name, dest / name)
        location.fetch(paths)
        folders.append(paths.root)
    return folders


def rebuild(
    warehouse: str | Path,
    runs: str | Path | None = None,
    results_url: str | None = None,
    out: Callable[[str], None] = print,
) -> RebuildSummary:
    """Build the warehouse anew from every run folder under `runs` (default: the runs folder) or `results_url`."""
    db = target_file(Path(warehouse))
    if results_url:
        db.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix=f".{db.name}.fetched-", dir=db.parent) as tmp:
            return _rebuild(_fetch_runs(results_url, Path(tmp), out), db, lock_runs=False, out=out)
    root = Path(runs) if runs else runs_dir()
    if not root.is_dir():
        raise WarehouseError(
            f"--runs-dir: {root} is not a folder; pass the folder that holds the run folders "
            f"(TRADEOFF_RUNS_DIR, default runs/) or --results-url"
        )
    folders = sorted(p for p in root.iterdir() if (p / "results").is_dir())
    return _rebuild(folders, db, lock_runs=True, out=out)
