"""Keep the last good warehouse: every write goes to a copy that replaces the file (os.replace) only when complete.

DuckDB can leave its file unopenable when a checkpoint hits a full disk (duckdb issue #9667), so
a load never writes the warehouse in place: it copies the file next to it, writes the copy,
checkpoints and closes it, and swaps it in with one rename. A crash, a full disk or a failed
insert at any point leaves the previous file untouched (the partial copy is removed then, or
by the next writer). Writers (loads and rebuilds) take an flock on `.<name>.writer` one at a
time; readers keep reading the previous file until they reopen. A DuckDB process that writes
the file during a load (a shell) is detected by the file's stamp and its lock, and the load
then stops instead of overwriting it.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import struct
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from warehouse.errors import WarehouseError

WRITER_WAIT_S = 600.0  # a load of 1,000,000 requests takes seconds; a rebuild of years of nights, minutes
# The file grows by about the size of the Parquet it loads (DuckDB's compression is close to Parquet's;
# measured 0.88x for perf_requests, see docs/warehouse-operations.md), and a reload keeps the replaced
# rows' blocks until they are reused, so a load needs the copy plus that.
GROWTH_PER_PARQUET_BYTE = 1.0
# DuckDB allocates 256 KiB blocks per column segment: a small night grows a small warehouse by a few MiB
# whatever its Parquet size (measured 3.4-3.8 MiB for 52 KB of Parquet).
MARGIN_BYTES = 8 * 2**20
_FLOCK = struct.Struct("hhqqi4x")  # struct flock on Linux: l_type, l_whence, l_start, l_len, l_pid


def wal_of(path: Path) -> Path:
    return path.with_name(path.name + ".wal")


def target_file(db: Path) -> Path:
    """The file a swap must replace: the target of a symlink, not the link."""
    return db.resolve() if db.is_symlink() else db


def temp_path(db: Path, purpose: str) -> Path:
    """Where a writer builds the next warehouse file: hidden, beside the file, so os.replace is one rename."""
    return db.with_name(f".{db.name}.{purpose}-{os.getpid()}.tmp")


def discard(path: Path) -> None:
    """Remove a temporary warehouse file and its WAL."""
    for p in (path, wal_of(path)):
        p.unlink(missing_ok=True)


def _human(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


@contextmanager
def writer_lock(db: Path, wait_s: float = WRITER_WAIT_S) -> Iterator[None]:
    """Be the warehouse's only writer (an flock beside it); removes temporary copies that dead writers left."""
    db.parent.mkdir(parents=True, exist_ok=True)
    side = db.with_name(f".{db.name}.writer")
    fd = os.open(side, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        deadline = time.monotonic() + wait_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "?"
                    raise WarehouseError(
                        f"warehouse {db} is being written by process {holder} (a load or rebuild); "
                        f"wait for it to finish"
                    ) from None
                time.sleep(0.2)
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        for stale in db.parent.iterdir():  # every writer holds this lock: temporary copies found now are orphans
            if stale.name.startswith(f".{db.name}.") and ".tmp" in stale.name and stale.is_file():
                stale.unlink(missing_ok=True)
        yield
    finally:
        os.close(fd)


def check_free_space(db: Path, incoming_bytes: int, copy: bool = True) -> None:
    """Refuse (one line) when the disk clearly cannot hold the copy of the warehouse plus what the load adds."""
    size = db.stat().st_size if copy and db.exists() else 0
    needed = size + int(incoming_bytes * GROWTH_PER_PARQUET_BYTE) + MARGIN_BYTES
    free = shutil.disk_usage(db.parent).free
    if free < needed:
        raise WarehouseError(
            f"not enough disk space to load into {db}: {_human(free)} free, about {_human(needed)} needed "
            f"(a copy of the {_human(size)} warehouse and {_human(incoming_bytes)} of Parquet); free some space "
            f"or set TRADEOFF_WAREHOUSE to a file on a larger disk; the warehouse is unchanged"
        )


def _stamp(db: Path) -> tuple:
    """What changes when anyone writes the file or its WAL: inode, size and mtime of each (None when absent)."""
    out = []
    for p in (db, wal_of(db)):
        try:
            st = p.stat()
            out.append((st.st_ino, st.st_size, st.st_mtime_ns))
        except FileNotFoundError:
            out.append(None)
    return tuple(out)


def duckdb_writer(db: Path) -> int | None:
    """PID of another process holding DuckDB's write lock on `db` (readers hold a shared lock), or None.

    Only F_GETLK: it takes no lock, so closing the descriptor cannot drop one this process holds.
    """
    try:
        fd = os.open(db, os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        got = fcntl.fcntl(fd, fcntl.F_GETLK, _FLOCK.pack(fcntl.F_WRLCK, os.SEEK_SET, 0, 0, 0))
        l_type, _, _, _, pid = _FLOCK.unpack(got)
        return pid if l_type == fcntl.F_WRLCK else None
    finally:
        os.close(fd)


def _fsync(path: Path, directory: bool = False) -> None:
    fd = os.open(path, os.O_RDONLY | (os.O_DIRECTORY if directory else 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _changed(db: Path) -> WarehouseError:
    return WarehouseError(
        f"warehouse {db} was written by another process during the load (a DuckDB shell?); "
        f"nothing loaded; run the load again"
    )


def install(tmp: Path, db: Path, stamp: tuple) -> None:
    """Swap the finished copy in for `db`, unless someone else wrote `db` since `stamp` was taken."""
    if wal_of(tmp).exists():
        raise WarehouseError(
            f"the new warehouse file {tmp} was not checkpointed (disk full?); the warehouse {db} is unchanged"
        )
    _fsync(tmp)
    writer = duckdb_writer(db)
    if writer is not None:
        raise WarehouseError(
            f"warehouse {db} is open for writing by process {writer} (a DuckDB shell?); "
            f"nothing loaded; close it and run the load again"
        )
    if _stamp(db) != stamp:
        raise _changed(db)
    os.replace(tmp, db)
    _fsync(db.parent, directory=True)


@contextmanager
def writable_copy(db: Path, incoming_bytes: int) -> Iterator[Path]:
    """A copy of the warehouse (or a new file) to write; it replaces `db` when the block succeeds, and is
    removed whatever happens. Call with the writer lock held and `db` free of a WAL."""
    check_free_space(db, incoming_bytes)
    tmp = temp_path(db, "load")
    stamp = _stamp(db)
    try:
        if db.exists():
            shutil.copyfile(db, tmp)
            shutil.copymode(db, tmp)
            if _stamp(db) != stamp:
                raise _changed(db)
        yield tmp
        install(tmp, db, stamp)
    finally:
        discard(tmp)


def replace_keeping_previous(tmp: Path, db: Path) -> Path | None:
    """Swap a rebuilt file in for `db`; the previous file (and its WAL) stay as `<db>.before-rebuild`."""
    kept = db.with_name(db.name + ".before-rebuild")
    writer = duckdb_writer(db)
    if writer is not None:
        raise WarehouseError(
            f"warehouse {db} is open for writing by process {writer} (a DuckDB shell?); "
            f"close it and run the rebuild again"
        )
    if wal_of(tmp).exists():
        raise WarehouseError(
            f"the rebuilt file {tmp} was not checkpointed (disk full?); the warehouse {db} is unchanged"
        )
    _fsync(tmp)
    previous = None
    if db.exists():
        discard(kept)
        os.link(db, kept)  # db stays in place until the rename below
        if wal_of(db).exists():
            os.replace(wal_of(db), wal_of(kept))
        previous = kept
    os.replace(tmp, db)
    _fsync(db.parent, directory=True)
    return previous
