"""The processes of a Prefect cluster for tradeoff: the server, the workers of the `control` and `gpu` queues, their
environments, a health wait and a stop by PID. scripts/cluster.py (the Makefile's `server`, `pool` and `worker`)
runs them; tests/e2e/test_cluster.py starts the same commands."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tasks.client import NotReady, wait_ready
from tasks.core.runinfo import PROJECT_ROOT

POOL = "tradeoff"
CONTROL_QUEUE, GPU_QUEUE = "control", "gpu"


def prefect_bin() -> str:
    return str(Path(sys.executable).parent / "prefect")


def server_command(host: str = "127.0.0.1", port: int = 4200) -> list[str]:
    return [prefect_bin(), "server", "start", "--host", host, "--port", str(port)]


def server_env(base: dict[str, str] | None = None) -> dict[str, str]:
    # Telemetry off: the server would otherwise phone home (no network here) and log errors.
    # Concurrency leases on disk (PREFECT_HOME/concurrency_leases) instead of in the server's memory:
    # after a server restart, the GPU slots of a holder that died still expire and are given back.
    return {
        **(base or os.environ),
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "PREFECT_SERVER_CONCURRENCY_LEASE_STORAGE": "prefect.server.concurrency.lease_storage.filesystem",
    }


def worker_command(pool: str, queue: str, name: str, limit: int | None) -> list[str]:
    cmd = [prefect_bin(), "worker", "start", "--pool", pool, "--work-queue", queue, "--name", name, "--type", "process"]
    return cmd + (["--limit", str(limit)] if limit else [])


def worker_env(gpu_host: str | None, base: dict[str, str] | None = None) -> dict[str, str]:
    """A worker's environment: its GPU host name and the checkout its flow runs use."""
    env = dict(base or os.environ)
    env.setdefault("TRADEOFF_HOME", str(PROJECT_ROOT))
    if gpu_host:
        env["TRADEOFF_GPU_HOST"] = gpu_host
    return env


def wait_healthy(api_url: str, timeout_s: float, proc: subprocess.Popen | None = None) -> float:
    """Wait until the Prefect API answers /health; returns the seconds it took."""
    t0 = time.monotonic()

    def alive() -> None:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"prefect server exited with code {proc.returncode} before it was healthy")

    try:
        wait_ready(api_url, "/health", timeout_s, interval_s=0.5, headers={}, alive=alive)
    except NotReady:
        raise TimeoutError(f"Prefect API at {api_url} not healthy after {timeout_s:.0f} s") from None
    return time.monotonic() - t0


def stop(proc: subprocess.Popen, grace_s: float = 15.0) -> None:
    """Stop a process we started, by its own PID: SIGTERM, then SIGKILL after `grace_s`."""
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=grace_s)
