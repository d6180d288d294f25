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

- Children run to completion (builds, quantisation, hub downloads, version and health probes) go
  through `run_tied`: a small supervisor leads the child's own process group, carries the
  parent-death signal, and takes the whole group down (SIGTERM, then SIGKILL after a grace) when
  this process dies (even by SIGKILL), when it is stopped (SIGTERM, Ctrl-C, a Prefect timeout or
  cancel) and when the child ends, so nothing the child started outlives it.

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
import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import threading
import time
from typing import Any, Callable, Coroutine, TypeVar

T = TypeVar("T")

PR_SET_PDEATHSIG = 1
SUPERVISOR_PYTHON = sys.executable  # the supervisor's interpreter, whatever sys.executable is set to later
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
        os.write(
            2,
            f"\nstopped at once by a second {signal.Signals(signum).name}; the servers get SIGTERM from "
            f"the kernel as this process ends\n".encode(),
        )
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


def run_async(make: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """`asyncio.run(make())`, where a stop signal cancels the coroutine (and so the requests it has in flight) and
    KeyboardInterrupt follows once it has unwound: what asyncio.run does by itself for Ctrl-C under Python's
    default handler. A KeyboardInterrupt raised inside the loop lands in whichever task runs, which asyncio then
    reports as 'Task exception was never retrieved', with a traceback, after the command has stopped. `make` (not
    the coroutine itself) so that the coroutine is made under the stop handler."""
    stop = StopSignals._active
    if stop is None or threading.current_thread() is not threading.main_thread():
        return asyncio.run(make())
    started: list[tuple[asyncio.AbstractEventLoop, asyncio.Task]] = []

    def cancel(signum: int, frame: Any) -> None:
        stop.note(signum)
        if started:  # before the task exists the stop is only noted: the task is cancelled as it is made
            loop, task = started[0]
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                loop.call_soon_threadsafe(task.cancel)

    # Installed before the loop is made: a Ctrl-C inside the loop's own constructor left a half-made loop whose
    # __del__ printed a traceback after the command had stopped. Inside a flow this stands in for Prefect's
    # SIGTERM handler too, for the loop's time: the stop then reaches Prefect as the KeyboardInterrupt, which it
    # records as Crashed all the same.
    previous = {sig: signal.signal(sig, cancel) for sig in StopSignals.HANDLED}
    main = None
    try:
        main = make()  # made here, under the handler: a stop cannot leave it unawaited
        with asyncio.Runner() as runner:
            loop = runner.get_loop()
            task = loop.create_task(main)
            started.append((loop, task))
            if stop.signum is not None:
                task.cancel()
            try:
                return loop.run_until_complete(task)
            except asyncio.CancelledError:
                raise_if_stopping()
                raise
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if not started and main is not None:
            main.close()  # never scheduled: no 'coroutine was never awaited' warning
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

    def Popen(self, *args: Any, **kwargs: Any) -> subprocess.Popen:  # subprocess's name
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


# The supervisor: the first process of a tied child (run with `python -I -S -c`; argv: grace seconds, command...).
# It leads the group, forks the command into it (the command's own parent-death signal is the supervisor's
# death), and on SIGTERM/SIGHUP/SIGINT - the parent-death signal included - sends SIGTERM to the group, waits
# up to the grace for the command, then SIGKILLs every other live process of its session. When the command
# ends, what it left in the session is killed and the supervisor ends as the command did (same exit code, or
# same signal). A process that starts a session of its own (setsid) leaves it: builds and downloads do not.
_SUPERVISOR = r"""
import ctypes, os, signal, sys, time
grace, argv, me = float(sys.argv[1]), sys.argv[2:], os.getpid()
STOP = (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)
def members():
    out = []
    for e in os.listdir("/proc"):
        if e.isdigit() and int(e) != me:
            try:
                f = open(f"/proc/{e}/stat").read().rsplit(")", 1)[1].split()
                if f[0] != "Z" and int(f[3]) == me:  # alive, in this session (a setpgid child included)
                    out.append(int(e))
            except (OSError, IndexError, ValueError):
                pass
    return out
def sweep():
    for _ in range(100):
        left = members()
        if not left:
            return
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        time.sleep(0.02)
def stop(signum, frame):
    for s in STOP:
        signal.signal(s, signal.SIG_IGN)
    try:
        os.killpg(me, signal.SIGTERM)
    except OSError:
        pass
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        try:
            if os.waitpid(child, os.WNOHANG)[0]:
                break
        except ChildProcessError:
            break
        time.sleep(0.05)
    sweep()
    os._exit(128 + signum)
child = os.fork()
if child == 0:
    try:
        ctypes.CDLL(None).prctl(1, signal.SIGTERM, 0, 0, 0)  # PR_SET_PDEATHSIG: the supervisor's death
        if os.getppid() != me:
            os._exit(128 + signal.SIGTERM)
        os.execvp(argv[0], argv)
    except BaseException as err:
        os.write(2, f"cannot run {argv[0]}: {err}\n".encode())
    os._exit(127)
for s in STOP:
    signal.signal(s, stop)
while True:
    try:
        _, status = os.waitpid(child, 0)
        break
    except ChildProcessError:
        status = 127 << 8
        break
for s in STOP:
    signal.signal(s, signal.SIG_IGN)
sweep()
if os.WIFSIGNALED(status):
    if os.WTERMSIG(status) != signal.SIGKILL:
        signal.signal(os.WTERMSIG(status), signal.SIG_DFL)
    os.kill(me, os.WTERMSIG(status))
os._exit(os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 1)
"""


def popen_tied(cmd: list[str], grace_s: float = 10.0, **kwargs: Any) -> subprocess.Popen:
    """Start `cmd` (an argument list) under the supervisor, in its own process group and session, tied to this
    process (see the module doc); Popen's keyword arguments otherwise. `proc.pid` is the group's id."""
    if _LIBC is None:  # no parent-death signal here: still its own group, stopped by stop_tied
        return subprocess.Popen(cmd, start_new_session=True, **kwargs)
    sup = [SUPERVISOR_PYTHON, "-I", "-S", "-c", _SUPERVISOR, f"{grace_s:g}", *cmd]
    return subprocess.Popen(sup, start_new_session=True, preexec_fn=die_with_parent(), **kwargs)


def stop_tied(proc: subprocess.Popen, grace_s: float = 10.0) -> None:
    """Stop a tied child and everything in its group: SIGTERM (the supervisor passes it on), SIGKILL after the grace."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=grace_s + 5.0)
        except subprocess.TimeoutExpired:
            pass
    for sig in (signal.SIGTERM, signal.SIGKILL):  # the group, should the supervisor itself be gone
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            break
        time.sleep(0.1 if sig == signal.SIGTERM else 0)
    proc.wait()


def run_tied(
    cmd: list[str],
    timeout_s: float | None = None,
    grace_s: float = 10.0,
    capture_output: bool = False,
    text: bool = False,
    **kwargs: Any,
) -> subprocess.CompletedProcess:
    """Run `cmd` to completion tied to this process (popen_tied), as subprocess.run does; stdin is /dev/null unless
    given. On the timeout (subprocess.TimeoutExpired), Ctrl-C, SIGTERM or any exception while waiting, the child's
    whole group is stopped first, then the exception goes on."""
    kwargs.setdefault("stdin", subprocess.DEVNULL)
    if capture_output:
        kwargs.update(stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    release = hold_stop_signals()  # Ctrl-C waits until `proc` is held inside the block that stops it
    try:
        proc = popen_tied(cmd, grace_s, text=text, **kwargs)
    except BaseException:
        release()
        raise
    try:
        release()
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired as timeout:
        stop_tied(proc, grace_s)
        raise subprocess.TimeoutExpired(cmd, timeout.timeout) from None
    except BaseException:
        stop_tied(proc, grace_s)
        raise
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)
