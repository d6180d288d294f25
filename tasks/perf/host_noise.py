"""What else used the host during a perf window, and the rule that re-measures a window a neighbour disturbed.

A perf window on a CPU host shares it with whatever else runs there: another developer's test suite, a
backup, a second nightly. On 2 cores, one other process busy on one core made an all-core llama.cpp
decode 17x slower (~200 ms a token against 12 ms), and one stalled window decided a night (issue 36).
So every window records, from Linux's /proc, over exactly its span:

- `other_cpu_pct`: CPU time of every process other than the engine and the load generator, in % of one
  core (100: one core busy the whole window, as `top` counts): the host's busy time (/proc/stat: user,
  nice, system, irq, softirq) less that of the engine's process tree (the process listening on the
  endpoint's port and its descendants) and of the load generator's (this process and its descendants: a
  server it launched is the engine's as well). A process that started and ended inside the window is
  counted: /proc/stat keeps its time after it is gone.
- `steal_pct`: time the hypervisor gave another guest (/proc/stat steal), in % of one core;
- `load1`: the 1-minute load average at the window's end (/proc/loadavg; it lags: context, not a test).
Off Linux, or for an endpoint not on this host, the figures are None and `note` says why.

`NoiseRule` is the stopping rule (STYLE 16) the sweep asks after each window: it has a name, reads the
window's figures and says why the window is disturbed (others or steal above `max_pct`), or None. The
sweep then waits for the host to calm down and measures the window again (tasks.perf.sweep), at most
`retries` times; what it kept and what it measured again is stored with the step (migration 016).
The anchors: pyperf warns when a benchmark's spread says the system was busy and asks for
`pyperf system tune` (CPU isolation) instead of trusting the run; hyperfine warns on statistical
outliers "caused by interference from other programs" and suggests re-running on a quiet system;
Kalibera & Jones ("Rigorous benchmarking in reasonable time", ISMM 2013) repeat at the level whose
variation dominates (here: whole windows, re-measured, not single requests filtered out).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

PROC = Path("/proc")
_TICK_S = 1.0 / (os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100)


def _host_ticks(proc: Path = PROC) -> tuple[int, int, int] | None:
    """(busy, steal, total) jiffies of every CPU from /proc/stat's first line; None off Linux."""
    try:
        f = (proc / "stat").read_text().splitlines()[0].split()
    except (OSError, IndexError):
        return None
    v = [int(x) for x in f[1:9]] + [0] * max(0, 8 - len(f[1:9]))
    user, nice, system, idle, iowait, irq, softirq, steal = v[:8]
    busy = user + nice + system + irq + softirq  # guest time is already inside user
    return busy, steal, busy + idle + iowait + steal


def _proc_table(proc: Path = PROC) -> dict[int, tuple[int, int]]:
    """pid -> (parent pid, utime + stime jiffies) of every process readable now."""
    out = {}
    for d in proc.iterdir():
        if not d.name.isdigit():
            continue
        try:
            raw = (d / "stat").read_text()
        except OSError:
            continue
        rest = raw[raw.rfind(")") + 2 :].split()  # the command name may hold spaces and parentheses
        try:
            out[int(d.name)] = (int(rest[1]), int(rest[11]) + int(rest[12]))
        except (IndexError, ValueError):
            continue
    return out


def _tree_ticks(table: dict[int, tuple[int, int]], roots: set[int]) -> dict[int, int]:
    """pid -> CPU jiffies of every process in the trees rooted at `roots` (the roots included)."""
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    seen, stack = {}, [r for r in roots if r in table]
    while stack:
        pid = stack.pop()
        if pid in seen:
            continue
        seen[pid] = table[pid][1]
        stack.extend(children.get(pid, []))
    return seen


def _load1(proc: Path = PROC) -> float | None:
    try:
        return float((proc / "loadavg").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


@dataclass(frozen=True)
class HostNoise:
    """What else used the host during one window (% of one core); None with `note` where unknown."""

    window_s: float
    other_cpu_pct: float | None
    steal_pct: float | None
    load1: float | None
    engine_cpu_pct: float | None = None  # the engine's own CPU, for context
    note: str | None = None

    def describe(self) -> str:
        if self.other_cpu_pct is None:
            return self.note or "host use unknown"
        return (
            f"other processes {self.other_cpu_pct:.0f} % of a core, steal {self.steal_pct:.0f} %, "
            f"load {self.load1 if self.load1 is not None else float('nan'):.2f} over {self.window_s:.1f} s"
        )


class HostWindow:
    """Context manager: `noise` is what processes outside the engine's and this process's trees used over the block.

    `engine_pids` are the engine's root processes (the endpoint's listener); None or empty with `off_reason`
    set: the endpoint is not on this host and nothing is read."""

    def __init__(self, engine_pids: set[int] | None = None, off_reason: str | None = None, proc: Path = PROC) -> None:
        self.engine_pids = set(engine_pids or ())
        self.off_reason = off_reason
        self.proc = proc
        self.noise = HostNoise(0.0, None, None, None, note=off_reason)

    def _read(self) -> tuple[float, tuple[int, int, int] | None, dict[int, int], dict[int, int]]:
        t = time.perf_counter()
        host = _host_ticks(self.proc)
        table = _proc_table(self.proc) if host else {}
        return t, host, _tree_ticks(table, self.engine_pids), _tree_ticks(table, {os.getpid()})

    def __enter__(self) -> "HostWindow":
        self._start = None if self.off_reason else self._read()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._start is None:
            return
        t0, h0, e0, s0 = self._start
        t1, h1, e1, s1 = self._read()
        window = t1 - t0
        if h0 is None or h1 is None or window <= 0:
            self.noise = HostNoise(window, None, None, None, note="no /proc/stat on this host: host use not measured")
            return
        if not e0 and not e1:
            self.noise = HostNoise(
                window,
                None,
                None,
                _load1(self.proc),
                note="the engine's process on this host is unknown: host use by others not separated from it",
            )
            return

        def used(before: dict[int, int], after: dict[int, int]) -> int:
            # a process new in the window counts from 0; one gone by its end is left to /proc/stat (as other)
            return sum(after[p] - before.get(p, 0) for p in after)

        engine = used(e0, e1)
        mine = used({p: v for p, v in s0.items() if p not in e0}, {p: v for p, v in s1.items() if p not in e1})
        busy = h1[0] - h0[0]
        pct = 100.0 * _TICK_S / window
        self.noise = HostNoise(
            window,
            max(busy - engine - mine, 0) * pct,
            (h1[1] - h0[1]) * pct,
            _load1(self.proc),
            engine * pct,
        )


@dataclass(frozen=True)
class NoiseRule:
    """Re-measure a window whose neighbours used more than `max_pct` % of a core (or the hypervisor stole it)."""

    max_pct: float  # others' CPU or steal, % of one core, above which a window is disturbed
    retries: int  # windows measured again per (step, repeat) before the last one is kept as it is
    quiet_wait_s: float = 20.0  # longest wait for a quiet host before measuring again
    # /proc counts CPU in 10 ms ticks: one tick of another process over a 20 ms window reads as 50 % of a core, so a
    # window shorter than this is recorded but not judged (its figures are not worth a re-measure either)
    min_window_s: float = 1.0
    name: str = "host_noise"

    def judge(self, noise: HostNoise) -> str | None:
        """Why the window is disturbed, or None (also when host use is unknown or the window too short to judge)."""
        if noise.window_s < self.min_window_s:
            return None
        worst = [
            (what, v)
            for what, v in (("other processes used", noise.other_cpu_pct), ("steal took", noise.steal_pct))
            if v is not None and v > self.max_pct
        ]
        if not worst:
            return None
        return "; ".join(f"{what} {v:.0f} % of a core (> {self.max_pct:g} %)" for what, v in worst)

    def wait_quiet(self, engine_pids: set[int], probe_s: float = 0.5) -> float:
        """Sleep in `probe_s` windows until one is quiet by this rule, at most `quiet_wait_s`; the seconds waited."""
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < self.quiet_wait_s:
            with HostWindow(engine_pids) as w:
                time.sleep(probe_s)
            if self.judge(w.noise) is None:
                break
        return time.perf_counter() - t0


@dataclass
class HostGuard:
    """The rule, the engine's processes and the re-measuring budget of one variant's perf run (shared by its sweep
    and its load search): a disturbed window is measured again only while `budget_s` (waits and windows measured
    again, together) is not spent, so a host that never calms down costs a bounded time and the windows kept
    say they were disturbed."""

    rule: NoiseRule
    engine_pids: set[int]
    off_reason: str | None = None  # the endpoint is not on this host: nothing is read or judged
    budget_s: float = 120.0
    spent_s: float = 0.0

    def window(self) -> HostWindow:
        return HostWindow(self.engine_pids, self.off_reason)

    def retry_reason(self, noise: HostNoise, attempt: int) -> str | None:
        """Why the window `attempt` (0: the first) is to be measured again, or None (quiet, or no retry left)."""
        why = self.rule.judge(noise)
        if why is None or attempt >= self.rule.retries or self.spent_s >= self.budget_s:
            return None
        return why


def engine_process_ids(port: int | None) -> set[int]:
    """The process listening on `port` of this host (the engine's root; its descendants are found per window)."""
    from tasks.perf.host_share import listener_pid

    pid = listener_pid(port) if port else None
    return {pid} if pid else set()
