"""One writer per run folder: `runs/<run_id>/.lock` names the holder (PID, host), taken by the nightly and `tradeoff
load`.

The lock file is created whole (written aside, then hard-linked into place, which fails when
one exists), so a reader never sees half a holder. A second writer is refused with one line
naming the holder. A lock left by a process that died on this host (its PID gone, or reused by
a process that started later) is taken over with a warning; a lock of another host cannot be
checked from here and is never taken over. Checking and taking over happen under an flock of
the run folder, so two processes on this host cannot both take over one stale lock.
"""

from __future__ import annotations

import fcntl
import json
import os
import platform
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path

LOCK_NAME = ".lock"


class RunLocked(RuntimeError):
    """The run folder is held by another writer; the message is one line naming it."""


@dataclass(frozen=True)
class Holder:
    pid: int
    host: str
    purpose: str  # nightly | load | ...
    since: str  # ISO 8601, UTC
    proc_start: int | None  # the process's start time in clock ticks after boot (/proc/<pid>/stat field 22)

    def describe(self) -> str:
        return f"PID {self.pid} on host {self.host} ({self.purpose}, since {self.since})"


def _proc_start(pid: int) -> int | None:
    """Start time of process `pid` in clock ticks after boot; None where /proc does not say."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        return int(stat.rsplit(")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None


def _alive(holder: Holder) -> bool:
    """Whether the holder's process (on this host) still runs: the PID exists, is no zombie and is not reused."""
    try:
        os.kill(holder.pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # another user's process: it exists
    try:
        state = Path(f"/proc/{holder.pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        if state in ("Z", "X"):
            return False
    except (OSError, IndexError):
        pass
    started = _proc_start(holder.pid)
    return holder.proc_start is None or started is None or started == holder.proc_start


def _read(path: Path) -> Holder | None:
    """The holder the lock file names; None when the file is gone."""
    try:
        data = json.loads(path.read_text())
        return Holder(
            int(data["pid"]),
            str(data["host"]),
            str(data.get("purpose", "?")),
            str(data.get("since", "?")),
            int(data["proc_start"]) if data.get("proc_start") is not None else None,
        )
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise RunLocked(
            f"run folder {path.parent} has an unreadable lock file {path} ({type(err).__name__}); "
            f"delete it if no nightly or load is writing this run"
        ) from None


def _create(path: Path, me: Holder) -> bool:
    """Create the lock file naming `me`; False when one exists."""
    tmp = path.with_name(f"{LOCK_NAME}.{me.pid}.tmp")
    try:
        tmp.write_text(json.dumps(asdict(me)) + "\n")
        os.link(tmp, path)
        return True
    except FileExistsError:
        return False
    except OSError as err:
        raise RunLocked(
            f"run folder {path.parent} is not writable ({err.strerror}): its lock and validation go "
            f"there; copy the folder somewhere writable and use that copy"
        ) from None
    finally:
        tmp.unlink(missing_ok=True)


@contextmanager
def _folder_flock(folder: Path) -> Iterator[None]:
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _warn_stderr(message: str) -> None:
    print(f"warning: {message}", file=sys.stderr)


def acquire(run_dir: Path, purpose: str, warn: Callable[[str], None] = _warn_stderr) -> Holder:
    """Take the run folder's lock for this process; raises RunLocked naming the holder when another has it."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise RunLocked(f"run folder {run_dir} does not exist; pass a folder under runs/ (runs/<run_id>)")
    path = run_dir / LOCK_NAME
    pid = os.getpid()
    me = Holder(
        pid, platform.node(), purpose, datetime.now(timezone.utc).isoformat(timespec="seconds"), _proc_start(pid)
    )
    with _folder_flock(run_dir):
        for _ in range(3):  # a holder may release between our attempt and our read: try again
            if _create(path, me):
                return me
            holder = _read(path)
            if holder is None:
                continue
            if holder.host != me.host:
                raise RunLocked(
                    f"run {run_dir.name} is being written by {holder.describe()}; wait for it, or if that "
                    f"host no longer runs it, delete {path}"
                )
            if _alive(holder):
                raise RunLocked(
                    f"run {run_dir.name} is being written by {holder.describe()}; wait for it to finish or stop it"
                )
            warn(f"run {run_dir.name}: taking over the lock of {holder.describe()}, which is no longer running")
            path.unlink(missing_ok=True)
    raise RunLocked(f"run {run_dir.name}: could not take the lock {path}; try again")


def release(run_dir: Path, me: Holder) -> None:
    """Remove the lock file if it still names `me` (never another writer's)."""
    path = Path(run_dir) / LOCK_NAME
    with _folder_flock(Path(run_dir)):
        try:
            holder = _read(path)
        except RunLocked:
            return
        if holder is not None and (holder.pid, holder.host, holder.proc_start) == (me.pid, me.host, me.proc_start):
            path.unlink(missing_ok=True)


@contextmanager
def run_lock(run_dir: Path, purpose: str, warn: Callable[[str], None] = _warn_stderr) -> Iterator[Holder]:
    """Hold the run folder's lock for the `with` block."""
    me = acquire(run_dir, purpose, warn)
    try:
        yield me
    finally:
        release(run_dir, me)
