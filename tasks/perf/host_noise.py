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
On a GPU host (GpuWatch, NVML) also, on the engine's GPUs:
- `gpu_other_procs`: processes with a context on them that are neither the engine's nor the load generator's
  (nvmlDeviceGetComputeRunningProcesses and ...GraphicsRunningProcesses, at the window's start and end);
- `gpu_other_sm_pct`: those processes' SM utilisation over the window (nvmlDeviceGetProcessUtilization's samples
  since the window's start: the mean of each process's samples, summed over processes, the most on any GPU).
NVML reports the host's process IDs; in a container with its own PID namespace they match none of the engine's, and
the figures are then None with that note rather than counting the engine as a neighbour.

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
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

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
    gpu_other_procs: int | None = None  # other processes on the engine's GPUs (None: no GPU watched, or unknown)
    gpu_other_sm_pct: float | None = None  # their SM utilisation over the window, % of a GPU (most on any GPU)
    gpu_note: str | None = None  # why the GPU figures are None on a watched GPU

    def describe(self) -> str:
        if self.other_cpu_pct is None:
            text = self.note or "host use unknown"
        else:
            text = (
                f"other processes {self.other_cpu_pct:.0f} % of a core, steal {self.steal_pct:.0f} %, "
                f"load {self.load1 if self.load1 is not None else float('nan'):.2f} over {self.window_s:.1f} s"
            )
        if self.gpu_other_procs is not None:
            sm = "unknown" if self.gpu_other_sm_pct is None else f"{self.gpu_other_sm_pct:.0f} %"
            text += f"; {self.gpu_other_procs} other process(es) on the engine's GPUs, SM {sm}"
        elif self.gpu_note:
            text += f"; {self.gpu_note}"
        return text


def _nvml_pids(nvml: Any, handle: Any) -> set[int]:
    """PIDs with a compute or graphics context on the GPU (NVML's view: the host's PID namespace)."""
    pids: set[int] = set()
    for name in ("nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetGraphicsRunningProcesses"):
        try:
            pids |= {int(p.pid) for p in getattr(nvml, name)(handle)}
        except Exception:  # noqa: BLE001 - not supported on this GPU or driver: the other list still counts
            continue
    return pids


class GpuWatch:
    """Other processes on the engine's GPUs over a window (module doc). `nvml` is pynvml (tests pass a stand-in),
    `indices` the engine's GPUs by NVML index."""

    def __init__(self, nvml: Any, indices: list[int]) -> None:
        self.nvml = nvml
        self.handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in indices]
        self._since_us = 0
        self._pids0: list[set[int]] = []

    def start(self) -> None:
        self._since_us = int(time.time() * 1_000_000)
        self._pids0 = [_nvml_pids(self.nvml, h) for h in self.handles]

    def finish(self, engine: set[int], mine: set[int]) -> tuple[int | None, float | None, str | None]:
        """(other processes, their SM % at most on any GPU, why None) over the window since `start`."""
        seen = [a | _nvml_pids(self.nvml, h) for a, h in zip(self._pids0, self.handles)]
        every = set().union(*seen) if seen else set()
        if every and not every & engine:
            return (
                None,
                None,
                (
                    "GPU processes not matched to the engine's (NVML's process IDs are another PID namespace's: a "
                    "container?): other GPU processes not separated"
                ),
            )
        others = every - engine - mine
        worst = 0.0
        for h, pids in zip(self.handles, seen):
            theirs = pids - engine - mine
            if not theirs:
                continue
            try:
                samples = self.nvml.nvmlDeviceGetProcessUtilization(h, self._since_us)
            except Exception as err:  # noqa: BLE001 - NOT_FOUND: no process ran on the SMs in the window
                if "NotFound" not in type(err).__name__:
                    return len(others), None, f"other GPU processes' utilisation not read: {type(err).__name__}"
                samples = []
            by_pid: dict[int, list[float]] = {}
            for smp in samples:
                if int(smp.pid) in theirs and smp.timeStamp >= self._since_us:
                    by_pid.setdefault(int(smp.pid), []).append(float(smp.smUtil))
            worst = max(worst, sum(sum(v) / len(v) for v in by_pid.values()))
        return len(others), worst, None


class HostWindow:
    """Context manager: `noise` is what processes outside the engine's and this process's trees used over the block.

    `engine_pids` are the engine's root processes (the endpoint's listener); None or empty with `off_reason`
    set: the endpoint is not on this host and nothing is read."""

    def __init__(
        self,
        engine_pids: set[int] | None = None,
        off_reason: str | None = None,
        proc: Path = PROC,
        gpu: GpuWatch | None = None,
    ) -> None:
        self.engine_pids = set(engine_pids or ())
        self.off_reason = off_reason
        self.proc = proc
        self.gpu = None if off_reason else gpu
        self.noise = HostNoise(0.0, None, None, None, note=off_reason)

    def _read(self) -> tuple[float, tuple[int, int, int] | None, dict[int, int], dict[int, int]]:
        t = time.perf_counter()
        host = _host_ticks(self.proc)
        table = _proc_table(self.proc) if host else {}
        return t, host, _tree_ticks(table, self.engine_pids), _tree_ticks(table, {os.getpid()})

    def __enter__(self) -> "HostWindow":
        self._start = None if self.off_reason else self._read()
        if self.gpu is not None:
            self.gpu.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._start is None:
            return
        end = self._read()
        self._cpu(self._start, end)
        if self.gpu is not None:
            (_, _, e0, s0), (_, _, e1, s1) = self._start, end
            procs, sm, why = self.gpu.finish(set(e0) | set(e1) | self.engine_pids, set(s0) | set(s1))
            self.noise = replace(self.noise, gpu_other_procs=procs, gpu_other_sm_pct=sm, gpu_note=why)

    def _cpu(self, start: tuple, end: tuple) -> None:
        """`noise` from the two _read()s: what the host's other processes used between them."""
        (t0, h0, e0, s0), (t1, h1, e1, s1) = start, end
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
        """Why the window is disturbed, or None (also when host use is unknown or the window too short to judge).
        On a watched GPU, other processes' SM utilisation above `max_pct` % of the GPU disturbs it too."""
        if noise.window_s < self.min_window_s:
            return None
        worst = [
            (what, v, "of a core")
            for what, v in (("other processes used", noise.other_cpu_pct), ("steal took", noise.steal_pct))
            if v is not None and v > self.max_pct
        ]
        if noise.gpu_other_sm_pct is not None and noise.gpu_other_sm_pct > self.max_pct:
            worst.append(("other processes used", noise.gpu_other_sm_pct, "of the engine's GPU's SMs"))
        if not worst:
            return None
        return "; ".join(f"{what} {v:.0f} % {unit} (> {self.max_pct:g} %)" for what, v, unit in worst)

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
    gpu: GpuWatch | None = None  # the engine's GPUs, watched for other processes (None: a CPU engine, no NVML)

    def window(self) -> HostWindow:
        return HostWindow(self.engine_pids, self.off_reason, gpu=self.gpu)

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
