"""Timing checks that tell a client's error from a host that kept the client or server off the CPU.

A test of the client's timing against a paced server (instruments/paced_server.py) checks milliseconds. On a
2-core host a process that is runnable but not running (another job on both cores, a kernel thread, the
hypervisor) delays a stamp or a write by exactly the time it waited, and that is the host's error, not the
client's. Linux counts it per thread: the second field of /proc/<pid>/task/<tid>/schedstat is the time the
thread spent runnable on a run queue (sched_info's run_delay, in ns); on an idle host a busy loop reads ~0.1 ms
a second of it, next to two other busy loops ~600 ms.

`measured_on_a_free_cpu` runs a measurement and its checks; when a check fails and the client's and server's
threads waited for a CPU more than `max_wait_ms_per_s` per second of the attempt (at least 20 ms) meanwhile, it
measures again (at most `tries` times in all). Measured here with the paced server: 5-20 ms a second on an idle
host (many short wake-ups), 35-125 ms a second with two busy loops beside them. A check that fails while
neither waited fails at once: that is the client's error. The last failure says how long they waited.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TypeVar

from tasks.perf.host_share import listener_pid

T = TypeVar("T")


def run_delay_ms(pids: Iterable[int]) -> float:
    """Milliseconds the threads of `pids` have spent waiting for a CPU so far (threads gone are not counted)."""
    total = 0
    for pid in set(pids):
        for task in Path(f"/proc/{pid}/task").glob("*"):
            try:
                total += int((task / "schedstat").read_text().split()[1])
            except (OSError, IndexError, ValueError):
                continue
    return total / 1e6


def server_pid(url: str) -> int:
    """The PID of the process serving `url` on this host (the paced server's own process)."""
    pid = listener_pid(int(url.rsplit(":", 1)[1].split("/")[0]))
    assert pid is not None, f"no process of this host listens for {url}"
    return pid


def measured_on_a_free_cpu(
    attempt: Callable[[], T], url: str, tries: int = 3, max_wait_ms_per_s: float = 25.0, pause_s: float = 2.0
) -> T:
    """attempt()'s result; measured again (after `pause_s`) only when it failed while the host kept the client
    (this process) or the server at `url` waiting for a CPU longer than the limit."""
    pids = {os.getpid(), server_pid(url)}
    for i in range(tries):
        before, t0 = run_delay_ms(pids), time.perf_counter()
        try:
            return attempt()
        except AssertionError as e:
            waited = run_delay_ms(pids) - before
            limit = max(20.0, max_wait_ms_per_s * (time.perf_counter() - t0))
            if waited <= limit or i == tries - 1:
                load = os.getloadavg()[0]
                raise AssertionError(
                    f"{e}\n(attempt {i + 1} of {tries}: the client and server waited {waited:.0f} ms for a CPU "
                    f"meanwhile (measured again above {limit:.0f} ms), load average {load:.1f})"
                ) from e
            time.sleep(pause_s)
    raise AssertionError("unreachable: tries must be >= 1")
