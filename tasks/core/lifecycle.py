"""No orphans: every process a run starts ends with it, however the run ends.

- Servers (engines, helm-run, spawned llama.cpp workers, Prefect's ephemeral API) get a
  parent-death signal (Linux `prctl(PR_SET_PDEATHSIG)`): the kernel sends them SIGTERM the
  moment the process that started them dies, even by SIGKILL, the OOM killer or a native crash.
- The CLI turns SIGTERM and SIGHUP into the same orderly stop as Ctrl-C (KeyboardInterrupt):
  `finally` blocks stop the servers and Prefect's exit hook stops its ephemeral API.
- Prefect's ephemeral API (a uvicorn child that Prefect starts lazily, from whichever thread first
  needs a client, and stops only from an `atexit` hook) is started by the CLI from its main thread,
  with the parent-death signal.

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

import ctypes
import os
import signal
import subprocess
import sys
import threading
from typing import Any, Callable

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
    """Inside the block SIGTERM and SIGHUP raise KeyboardInterrupt, as Ctrl-C does; `signum` is the first received.

    Prefect's flow engine installs its own SIGTERM handler while a flow runs; after its crash
    handling it restores this one and sends the signal again, which lands here.
    """

    HANDLED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

    def __init__(self) -> None:
        self.signum: int | None = None
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> "StopSignals":
        if threading.current_thread() is threading.main_thread():  # signals can only be handled there
            self._previous = {sig: signal.signal(sig, self._raise) for sig in self.HANDLED}
        return self

    def __exit__(self, *exc: Any) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)

    def _raise(self, signum: int, frame: Any) -> None:
        self.signum = self.signum or signum
        raise KeyboardInterrupt(signal.Signals(signum).name)

    @property
    def name(self) -> str:
        return signal.Signals(self.signum or signal.SIGINT).name

    @property
    def exit_code(self) -> int:
        """128 + the signal's number, as a shell reports a process stopped by it."""
        return 128 + int(self.signum or signal.SIGINT)


class _PopenDyingWithParent:
    """Stands in for the `subprocess` module inside Prefect's server module: its Popen children die with us."""

    def __init__(self, module: Any):
        self._module = module

    def __getattr__(self, name: str) -> Any:
        return getattr(self._module, name)

    def Popen(self, *args: Any, **kwargs: Any) -> subprocess.Popen:  # noqa: N802 - the module's name
        kwargs.setdefault("preexec_fn", die_with_parent())
        return self._module.Popen(*args, **kwargs)


def tie_prefect_api() -> bool:
    """Give the ephemeral Prefect API that this process starts (SubprocessASGIServer) a parent-death signal.

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
