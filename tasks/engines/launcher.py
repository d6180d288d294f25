"""The one server launcher: start an engine's server on a free loopback port, wait for health, stop it by PID."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from tasks.client import NotReady, wait_ready
from tasks.core.lifecycle import die_with_parent, hold_stop_signals
from tasks.core.process import exit_reason


class ServerError(RuntimeError):
    """A server that did not come up or did not stay up; the message carries its log's last lines."""


class ServerStartTimeout(ServerError):
    """The server was still not healthy at the start-up timeout (worth a retry: slow load, busy host)."""


class PortInUse(ServerError):
    """The server lost the race for its free port to another process (worth a retry on a new port)."""


class ServerDied(ServerError):
    """The server process ended: its exit code, or the signal that killed it and the likely cause."""

    def __init__(self, returncode: int, during: str, log_path: Path):
        self.returncode = returncode
        what = (
            f"server died by {exit_reason(returncode)}" if returncode < 0 else f"server exited with code {returncode}"
        )
        super().__init__(f"{what} {during}: {_last_line(log_path)} (log: {log_path})\n{log_tail(log_path)}")


@dataclass
class Server:
    base_url: str
    pid: int
    log_path: Path
    startup_s: float
    proc: subprocess.Popen

    def alive(self) -> bool:
        return self.proc.poll() is None


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


# A line of an HTTP access log (uvicorn's, vLLM's): says a request was answered, never why a server died.
ACCESS_LOG = re.compile(r'"(GET|POST|PUT|PATCH|DELETE|HEAD|OPTIONS) \S+ HTTP/[\d.]+" \d{3}')


def log_tail(path: Path, lines: int = 15) -> str:
    """The last `lines` lines of a server log that are not access-log lines."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "(no log)"
    kept = [ln for ln in text.splitlines() if ln.strip() and not ACCESS_LOG.search(ln)]
    return "\n".join(kept[-lines:])


def _last_line(path: Path) -> str:
    tail = log_tail(path, 1).strip()
    return tail[:300] if tail else "(empty log)"


def start_server(
    cmd: list[str],
    base_url: str,
    log_path: Path,
    timeout_s: float,
    health_path: str = "/v1/models",
    env: dict[str, str] | None = None,
) -> Server:
    """Start `cmd` (an argument list, no shell), logging to `log_path`; wait until `health_path` answers 200."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    release = hold_stop_signals()  # Ctrl-C waits until `server` is held below, inside the block that stops it
    try:
        with open(log_path, "ab") as log:
            log.write(f"$ {' '.join(cmd)}\n".encode())
            log.flush()
            proc = subprocess.Popen(
                cmd,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env={**os.environ, **(env or {})},
                start_new_session=True,
                preexec_fn=die_with_parent(),
            )  # tasks.core.lifecycle: never outlives this process
    except BaseException:
        release()
        raise
    server = Server(base_url, proc.pid, log_path, 0.0, proc)

    def alive() -> None:
        if proc.poll() is not None:
            if "address already in use" in log_tail(log_path, 40).lower():
                raise PortInUse(
                    f"port of {base_url} taken by another process before the server bound it: "
                    f"{_last_line(log_path)} (log: {log_path})"
                )
            raise ServerDied(proc.returncode, "before it was healthy", log_path)

    try:
        release()  # a stop signal that came while the server started is raised here
        wait_ready(base_url, health_path, timeout_s, interval_s=0.25, headers={}, alive=alive)
    except NotReady:
        stop_server(server)
        raise ServerStartTimeout(
            f"server not healthy after {timeout_s:.0f} s: {_last_line(log_path)} "
            f"(log: {log_path})\n{log_tail(log_path)}"
        ) from None
    except BaseException:
        stop_server(server)  # died, Ctrl-C, a cancelled task: never leave the server behind
        raise
    server.startup_s = time.perf_counter() - t0
    return server


def stop_server(server: Server, grace_s: float = 10.0) -> None:
    """Stop the server by its own PID (SIGTERM, then SIGKILL after `grace_s`).

    The server leads its own session (process group id = its PID), so workers it spawned (vLLM's
    engine core) are stopped through that group when they outlive it.
    """
    if server.proc.poll() is None:
        os.kill(server.pid, signal.SIGTERM)
        try:
            server.proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            os.kill(server.pid, signal.SIGKILL)
            server.proc.wait(timeout=grace_s)
    stop_group(server.pid, grace_s)


def stop_group(pgid: int, grace_s: float) -> None:
    """SIGTERM, then SIGKILL, what is left of the process group `pgid` that the server led."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(pgid, sig)
        except (ProcessLookupError, PermissionError):
            return  # nothing left
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline:
            try:
                os.killpg(pgid, 0)
            except (ProcessLookupError, PermissionError):
                return
            time.sleep(0.2)


@contextmanager
def serving(cmd: list[str], base_url: str, log_path: Path, timeout_s: float) -> Iterator[Server]:
    """Context manager: the server runs inside the block and is stopped on success and on failure."""
    server = start_server(cmd, base_url, log_path, timeout_s)
    try:
        yield server
    finally:
        stop_server(server)
