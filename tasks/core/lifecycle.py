"""No orphans: every process a run starts ends with it, however the run ends.

- Servers (engines, helm-run, spawned llama.cpp workers, Prefect's ephemeral API) get a
  parent-death signal (Linux `prctl(PR_SET_PDEATHSIG)`): the kernel sends them SIGTERM the
  moment the process that started them dies, even by SIGKILL, the OOM killer or a native crash.
- The CLI turns SIGTERM and SIGHUP into the same orderly stop as Ctrl-C (KeyboardInterrupt):
  `finally` blocks stop the servers and Prefect's exit hook stops its ephemeral API. A second
  signal exits at once (the parent-death signal then stops the children).
- Ctrl-C reaches the whole foreground process group. Servers run in sessions of their own, so
  only the command gets it and stops them in order; above all Prefect's ephemeral API, which the
  command still needs while it records the Crashed states: stopped by the same Ctrl-C, every
  later call of Prefect's client retried a refused connection with backoff (2+4+8+16+32 s per
  call), and the command hung for minutes (issue 28).
- Prefect's ephemeral API (a uvicorn child that Prefect starts lazily, from whichever thread first
  needs a client, and stops only from an `atexit` hook) is started by the CLI from its main thread,
  with the parent-death signal, in a session of its own.

Why a parent-death signal and not a reaper of recorded PIDs on the next start: it acts at once,
on every way the parent can die, so a GPU server never keeps its memory until some later run; a
reaper acts only if and when tradeoff runs again on that host, and a PID recorded hours earlier
may by then belong to an unrelated process. Its limits: Linux only (elsewhere nothing is set and
the orderly stop is all there is); the signal follows the *thread* that started the child, so a
server must be started from a thread that lives as long as it does (flows run in the main thread;
the ephemeral API is started from the main thread for this reason); it is not inherited by
grandchildren (stop_server stops the server's process group; vLLM sets its own on its workers).
"""

from __future__ import annotations

import asyncio
import ctypes
import os
import signal
import subprocess
import sys
import threading
from typing import Any, Callable, Coroutine, TypeVar

T = TypeVar("T")

PR_SET_PDEATHSIG = 1
_LIBC = ctypes.CDLL(None, use_errno=True) if sys.platform.startswith("linux") else None


def set_parent_death_signal(parent_pid: int, sig: int = signal.SIGTERM) -> None:
    """In a child: ask the kernel for `sig` when the parent dies; take it now if the parent is already gone."""
    if _LIBC is None:
        return
    _LIBC.prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
    if os.getppid() != parent_pid:  # the parent died between fork and prctl
        os.kill(os.getpid(), sig)


def die_with_parent(sig: int = signal.SIGTERM) -> Callable[[], None] | None:
    """A Popen `preexec_fn` that gives the child a parent-death signal (None where the OS has none)."""
    if _LIBC is None:
        return None
    parent = os.getpid()
    return lambda: set_parent_death_signal(parent, sig)


class StopSignals:
    """Inside the block SIGINT, SIGTERM and SIGHUP stop the command: the first raises KeyboardInterrupt, as Ctrl-C
    does, so `finally` blocks stop what was started; a second one exits at once. `signum` is the first received.

    Prefect's flow engine installs its own SIGTERM handler while a flow runs; after its crash
    handling it restores this one and sends the signal again, which lands here (as the first).

    The stop is kept until the block ends (`stop_requested`): native code that checks for signals
    itself turns the KeyboardInterrupt raised inside it into an error of its own (DuckDB raises
    RuntimeError('Query interrupted')), which code that isolates failures must not take for one.

    `owns_process`: after a stop the block leaves its handlers in place, so that a second signal
    during the rest of the exit (Prefect's exit hooks stop its API) still exits at once; for the
    command's own process, not for a caller (a test) that goes on after the block.
    """

    HANDLED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    _active: "StopSignals | None" = None  # the innermost block that handles signals

    def __init__(self, owns_process: bool = False) -> None:
        self.signum: int | None = None
        self.owns_process = owns_process
        self._previous: dict[int, Any] = {}
        self._outer: StopSignals | None = None

    def __enter__(self) -> "StopSignals":
        if threading.current_thread() is threading.main_thread():  # signals can only be handled there
            self._previous = {sig: signal.signal(sig, self._raise) for sig in self.HANDLED}
            self._outer, StopSignals._active = StopSignals._active, self
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.signum is not None and self.owns_process:
            return  # stopping: a second signal exits at once until the process ends
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        if self._previous:
            StopSignals._active = self._outer

    def _raise(self, signum: int, frame: Any) -> None:
        self.note(signum)
        raise KeyboardInterrupt(signal.Signals(signum).name)

    def note(self, signum: int) -> None:
        """Record a stop signal; a second one exits at once."""
        if self.signum is not None:
            self._exit_now(signum)
        self.signum = signum

    def _exit_now(self, signum: int) -> None:
        """A second signal while the first one's stop runs: leave now. The kernel sends the children their
        parent-death signal (SIGTERM) as this process ends."""
        os.write(2, f"\nstopped at once by a second {signal.Signals(signum).name}; the servers get SIGTERM from "
                    f"the kernel as this process ends\n".encode())
        os._exit(self.exit_code)

    @property
    def name(self) -> str:
        return signal.Signals(self.signum or signal.SIGINT).name

    @property
    def exit_code(self) -> int:
        """128 + the signal's number, as a shell reports a process stopped by it."""
        return 128 + int(self.signum or signal.SIGINT)


def hold_stop_signals() -> Callable[[], None]:
    """Hold stop signals back (recorded, not acted on) until the returned `release` is called.

    For starting a child: a KeyboardInterrupt raised between its fork and the moment the caller
    holds its handle inside a cleanup block (inside `subprocess.Popen` itself, as it waits for
    the exec) leaves the child running, with no handle to stop it by. `release` (once; later
    calls do nothing) puts the handlers back and sends each held signal again, to whichever
    handler is in place: ours raises KeyboardInterrupt there, Prefect's its TerminationSignal.
    """
    if threading.current_thread() is not threading.main_thread():  # handlers can only be changed there
        return lambda: None
    held: list[int] = []
    previous = {sig: signal.signal(sig, lambda signum, frame: held.append(signum)) for sig in StopSignals.HANDLED}

    def release() -> None:
        if not previous:
            return
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        previous.clear()
        for sig in dict.fromkeys(held):
            signal.raise_signal(sig)

    return release


def stop_requested() -> int | None:
    """The stop signal received inside the active StopSignals block, or None (none received, or no block)."""
    active = StopSignals._active
    return active.signum if active is not None else None


def run_async(main: Coroutine[Any, Any, T]) -> T:
    """`asyncio.run(main)`, where a stop signal cancels `main` (and so the requests it has in flight) and
    KeyboardInterrupt follows once it has unwound: what asyncio.run does by itself for Ctrl-C under Python's
    default handler. A KeyboardInterrupt raised inside the loop lands in whichever task runs, which asyncio then
    reports as 'Task exception was never retrieved', with a traceback, after the command has stopped."""
    stop = StopSignals._active
    if stop is None or threading.current_thread() is not threading.main_thread():
        return asyncio.run(main)
    with asyncio.Runner() as runner:
        loop = runner.get_loop()
        task = loop.create_task(main)

        def cancel(signum: int, frame: Any) -> None:
            stop.note(signum)
            loop.call_soon_threadsafe(task.cancel)

        # Inside a flow this stands in for Prefect's SIGTERM handler too, for the loop's time: the stop then reaches
        # Prefect as the KeyboardInterrupt, which it records as Crashed all the same.
        previous = {sig: signal.signal(sig, cancel) for sig in StopSignals.HANDLED}
        try:
            return loop.run_until_complete(task)
        except asyncio.CancelledError:
            raise_if_stopping()
            raise
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            raise_if_stopping()  # a signal that came as `main` ended


def raise_if_stopping() -> None:
    """Raise KeyboardInterrupt when a stop signal was received: for code that records a failure and goes on (a
    variant, a suite), so that an interruption a library turned into its own error still stops the command."""
    signum = stop_requested()
    if signum is not None:
        raise KeyboardInterrupt(signal.Signals(signum).name)


class _PopenDyingWithParent:
    """Stands in for the `subprocess` module inside Prefect's server module: its Popen children die with us, and
    run in a session of their own, so that Ctrl-C (sent to the terminal's whole foreground process group) reaches
    only the command, which still talks to the API while it stops and then stops the API itself."""

    def __init__(self, module: Any):
        self._module = module

    def __getattr__(self, name: str) -> Any:
        return getattr(self._module, name)

    def Popen(self, *args: Any, **kwargs: Any) -> subprocess.Popen:  # noqa: N802 - the module's name
        kwargs.setdefault("preexec_fn", die_with_parent())
        kwargs.setdefault("start_new_session", True)
        return self._module.Popen(*args, **kwargs)


def tie_prefect_api() -> bool:
    """Give the ephemeral Prefect API that this process starts (SubprocessASGIServer) a parent-death signal and a
    session of its own (Ctrl-C is the command's to handle, not the API's).

    Returns False when this Prefect has no such server module (then only the orderly stop applies).
    """
    try:
        import prefect.server.api.server as server_module
    except ImportError:
        return False
    if not hasattr(server_module, "SubprocessASGIServer") or not hasattr(server_module, "subprocess"):
        return False
    if not isinstance(server_module.subprocess, _PopenDyingWithParent):
        server_module.subprocess = _PopenDyingWithParent(server_module.subprocess)
    return True


def start_prefect_api() -> str | None:
    """Start Prefect's ephemeral API now, from this thread, tied to this process; None when a server is configured.

    Prefect would start it on first use, possibly from a worker thread (its events or logs
    client), whose exit would then fire the parent-death signal early. Its own `atexit` hook
    still stops it on an orderly exit.
    """
    from prefect.settings import PREFECT_API_URL, get_current_settings

    if PREFECT_API_URL.value() or not get_current_settings().server.ephemeral.enabled:
        return None
    if not tie_prefect_api():
        return None
    from prefect.server.api.server import SubprocessASGIServer

    server = SubprocessASGIServer()
    server.start()
    return server.api_url
