"""Child processes: why one died (by signal name and likely cause), and native work run where a crash is a report.

llama.cpp runs in this process for builds (requantization), fidelity and log-likelihood scoring.
A native crash there (SIGILL from a library built for another CPU, SIGSEGV, the OOM killer's
SIGKILL) would take the whole nightly, or pytest, down with it. `run_in_child` runs such work
in a spawned child and turns its death into `ChildDied`, naming the signal and its cause.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import traceback
from typing import Any, Callable

from tasks.core.lifecycle import set_parent_death_signal

# What a signal death most likely means, for the one-line errors users read.
SIGNAL_CAUSES: dict[int, str] = {
    signal.SIGILL: (
        "illegal instruction: a native library (llama.cpp?) was built for another CPU; rebuild it "
        "portable with `make setup` (see `tradeoff doctor`)"
    ),
    signal.SIGKILL: "killed: out of memory (the kernel's OOM killer; see `dmesg`) or stopped by another process",
    signal.SIGSEGV: "segmentation fault: a crash in native code",
    signal.SIGBUS: "bus error: a memory-mapped file (the model?) was truncated, or the disk is full",
    signal.SIGABRT: "aborted: a native assertion failed (see the log)",
    signal.SIGFPE: "arithmetic fault in native code",
    signal.SIGTERM: "terminated by another process",
    signal.SIGINT: "interrupted",
}


def exit_reason(returncode: int | None) -> str:
    """'exit code 3', or 'SIGILL (illegal instruction: ...)' for a negative (signal) return code."""
    if returncode is None:
        return "still running"
    if returncode >= 0:
        return f"exit code {returncode}"
    signum = -returncode
    try:
        name = signal.Signals(signum).name
    except ValueError:
        name = f"signal {signum}"
    cause = SIGNAL_CAUSES.get(signum)
    return f"{name} ({cause})" if cause else name


class ChildDied(RuntimeError):
    """A child process died before it returned (a native crash, the OOM killer, a timeout)."""

    def __init__(self, what: str, returncode: int | None):
        self.returncode = returncode
        super().__init__(
            f"{what} died by {exit_reason(returncode)}"
            if returncode is not None and returncode < 0
            else f"{what} ended with {exit_reason(returncode)} before returning a result"
        )


class ChildError(RuntimeError):
    """The function raised in the child; the message is its exception's, the child's traceback is kept."""

    def __init__(self, message: str, child_traceback: str):
        self.child_traceback = child_traceback
        super().__init__(message)


def _worker_main(conn, factory: Callable[..., Any], args: tuple, kwargs: dict, parent_pid: int | None = None) -> None:
    # Ctrl-C reaches the terminal's whole process group, this child too: the parent decides (it stops the child).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if parent_pid is not None:  # native work that never outlives the run (tasks.core.lifecycle)
        set_parent_death_signal(parent_pid)
    try:
        obj = factory(*args, **kwargs)
        conn.send(("ok", None))
    except BaseException as err:  # noqa: BLE001
        conn.send(("error", (type(err).__name__, str(err), traceback.format_exc())))
        conn.close()
        return
    while True:
        try:
            request = conn.recv()
        except EOFError:
            break
        if request is None:
            break
        method, margs, mkwargs = request
        try:
            conn.send(("ok", getattr(obj, method)(*margs, **mkwargs)))
        except BaseException as err:  # noqa: BLE001
            conn.send(("error", (type(err).__name__, str(err), traceback.format_exc())))
    close = getattr(obj, "close", None)
    if callable(close):
        close()
    conn.close()


class ChildWorker:
    """An object that lives in a spawned child process; `call` runs one of its methods there.

    For native state that many calls share (a loaded model): built once by `factory(*args)` in
    the child; when the child dies, the pending call (and every later one) raises ChildDied.
    """

    def __init__(self, factory: Callable[..., Any], *args: Any, what: str | None = None, **kwargs: Any):
        self.what = what or getattr(factory, "__qualname__", "child")
        ctx = multiprocessing.get_context("spawn")
        self._conn, child = ctx.Pipe()
        self._proc = ctx.Process(target=_worker_main, args=(child, factory, args, kwargs, os.getpid()), daemon=True)
        self._proc.start()
        child.close()
        self._receive()  # the factory's outcome

    def _receive(self) -> Any:
        try:
            status, payload = self._conn.recv()
        except (EOFError, OSError):
            self._proc.join(timeout=30)
            raise ChildDied(self.what, self._proc.exitcode) from None
        except BaseException:  # Ctrl-C, a stop signal, a task's timeout: the answer is lost, the child stops now
            self._proc.kill()
            self._proc.join()
            raise
        if status == "ok":
            return payload
        name, message, tb = payload
        raise ChildError(f"{self.what}: {name}: {message}" if message else f"{self.what}: {name}", tb)

    def call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        try:
            self._conn.send((method, args, kwargs))
        except (BrokenPipeError, OSError):
            self._proc.join(timeout=30)
            raise ChildDied(self.what, self._proc.exitcode) from None
        return self._receive()

    def close(self, grace_s: float = 30.0) -> None:
        """Ask the child to finish (its object's `close` runs there), then make sure it is gone."""
        if self._proc.is_alive():
            try:
                self._conn.send(None)
            except (BrokenPipeError, OSError):
                pass
            self._proc.join(timeout=grace_s)
            if self._proc.is_alive():
                self._proc.kill()
                self._proc.join()
        self._conn.close()


class _Function:
    """A plain function as a ChildWorker's object."""

    def __init__(self, fn: Callable[..., Any]):
        self.fn = fn

    def run(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **kwargs)


def run_in_child(fn: Callable[..., Any], *args: Any, what: str | None = None, **kwargs: Any) -> Any:
    """`fn(*args, **kwargs)` in a spawned child process: its result, or ChildDied / ChildError.

    `fn`, the arguments and the result must pickle (a module-level function, plain data). Spawn,
    not fork: the parent has threads (Prefect, HTTP clients) that a fork would copy half-way.
    """
    worker = ChildWorker(_Function, fn, what=what or getattr(fn, "__qualname__", "child"))
    try:
        return worker.call("run", *args, **kwargs)
    finally:
        worker.close()
