"""What else used the host during a perf window (issue 36), on a /proc written by the test: the arithmetic of others'
CPU, steal and load, the rule that calls a window disturbed, the guard's retries and budget, the stored columns."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tasks.core.config import PerfSpec
from tasks.perf.energy import EnergyReading
from tasks.perf.host_noise import HostGuard, HostNoise, HostWindow, NoiseRule
from tasks.perf.perf_run import host_noise_columns
from tasks.perf.sweep import Scenario, Step, StepRun

TICK = 100  # /proc's jiffies per second (USER_HZ)


def write_proc(root: Path, cpu: tuple[int, ...], procs: dict[int, tuple[int, int]], load1: float = 0.5) -> None:
    """A /proc with its first /proc/stat line `cpu` (user nice system idle iowait irq softirq steal) and the processes
    pid -> (parent, utime + stime jiffies)."""
    root.mkdir(exist_ok=True)
    (root / "stat").write_text("cpu  " + " ".join(map(str, cpu)) + " 0 0\ncpu0 1 2 3\n")
    (root / "loadavg").write_text(f"{load1} 0.40 0.30 1/100 4242\n")
    for d in root.iterdir():
        if d.name.isdigit() and int(d.name) not in procs:
            (d / "stat").unlink()
            d.rmdir()
    for pid, (ppid, ticks) in procs.items():
        (root / str(pid)).mkdir(exist_ok=True)
        # the command name holds a space and a parenthesis, as a real one may
        fields = ["S", str(ppid)] + ["0"] * 9 + [str(ticks), "0"] + ["0"] * 10
        (root / str(pid) / "stat").write_text(f"{pid} (py (x) y) " + " ".join(fields) + "\n")


def test_others_cpu_is_the_host_busy_time_less_the_engine_and_the_load_generator(tmp_path, monkeypatch):
    me = os.getpid()
    engine, engine_worker, neighbour = 1001, 1002, 2001
    proc = tmp_path / "proc"
    write_proc(proc, (1000, 0, 200, 5000, 0, 0, 0, 0), {me: (1, 100), engine: (1, 500), engine_worker: (engine, 50)})
    clock = iter([10.0, 12.0])  # a 2 s window
    monkeypatch.setattr("tasks.perf.host_noise.time.perf_counter", lambda: next(clock))
    with HostWindow({engine}, proc=proc) as w:
        # over 2 s: the engine's tree used 1.5 s (1.2 + 0.3), this process 0.2 s, a neighbour 1.0 s (it started
        # in the window), and one that ended inside the window 0.3 s (only /proc/stat still counts it); steal 0.1 s
        write_proc(
            proc,
            (1000 + 250, 0, 200 + 50, 5000 + 100, 0, 0, 0, 10),
            {me: (1, 120), engine: (1, 620), engine_worker: (engine, 80), neighbour: (1, 100)},
            load1=1.75,
        )
    n = w.noise
    # busy 300 jiffies - engine 150 - mine 20 = 130 jiffies = 1.3 s over 2 s: 65 % of one core
    assert n.other_cpu_pct == pytest.approx(65.0) and n.engine_cpu_pct == pytest.approx(75.0)
    assert n.steal_pct == pytest.approx(5.0) and n.load1 == 1.75 and n.window_s == 2.0 and n.note is None


def test_an_unknown_engine_or_no_proc_leaves_the_figures_null_with_the_reason(tmp_path):
    proc = tmp_path / "proc"
    write_proc(proc, (1, 0, 1, 1, 0, 0, 0, 0), {})
    with HostWindow({999_999}, proc=proc) as w:
        pass
    assert w.noise.other_cpu_pct is None and "engine's process on this host is unknown" in w.noise.note
    with HostWindow({1}, proc=tmp_path / "nowhere") as w:
        pass
    assert w.noise.other_cpu_pct is None and "no /proc/stat" in w.noise.note
    with HostWindow(off_reason="endpoint is not on this host") as w:
        pass
    assert w.noise.other_cpu_pct is None and w.noise.note == "endpoint is not on this host"


def test_the_rule_judges_others_and_steal_against_its_threshold():
    rule = NoiseRule(max_pct=25.0, retries=2)
    assert rule.judge(HostNoise(2.0, 24.9, 0.0, 1.0)) is None
    assert rule.judge(HostNoise(2.0, 187.0, 0.0, 1.0)) == "other processes used 187 % of a core (> 25 %)"
    assert rule.judge(HostNoise(2.0, 0.0, 30.0, 1.0)) == "steal took 30 % of a core (> 25 %)"
    assert rule.judge(HostNoise(2.0, None, None, None, note="unknown")) is None  # nothing to judge
    # a 20 ms window (a stub's errors): one 10 ms tick of anyone reads as 50 % of a core; recorded, not judged
    assert rule.judge(HostNoise(0.02, 371.0, 0.0, 7.7)) is None


def test_the_guard_retries_a_bounded_number_of_times_within_its_budget():
    loud = HostNoise(2.0, 150.0, 0.0, 2.0)
    guard = HostGuard(NoiseRule(25.0, retries=2), {1}, budget_s=60.0)
    assert [guard.retry_reason(loud, attempt) is not None for attempt in range(4)] == [True, True, False, False]
    assert guard.retry_reason(HostNoise(2.0, 5.0, 0.0, 0.1), 0) is None
    guard.spent_s = 60.0  # the variant's re-measuring time is spent: kept as it is
    assert guard.retry_reason(loud, 0) is None


def _run(repeat: int, noise: HostNoise | None, remeasured=(), disturbed=None) -> StepRun:
    return StepRun(
        Step("c1", "concurrency", 1),
        repeat,
        [],
        [],
        EnergyReading(None, None, None, "off"),
        noise=noise,
        remeasured=list(remeasured),
        disturbed=disturbed,
    )


def test_the_step_row_says_which_windows_it_rests_on_and_what_else_ran():
    spec = PerfSpec(host_noise_max_pct=30.0)
    sc = Scenario(
        Step("c1", "concurrency", 1),
        [
            _run(0, HostNoise(5.0, 12.0, 0.0, 1.1), remeasured=["other processes used 180 % of a core (> 30 %)"]),
            _run(1, HostNoise(5.0, 3.0, 1.0, 0.9)),
            _run(2, HostNoise(5.0, 45.0, 0.0, 2.0), disturbed="other processes used 45 % of a core (> 30 %)"),
        ],
    )
    cols = host_noise_columns(spec, sc)
    assert (cols["host_other_cpu_pct"], cols["host_steal_pct"], cols["host_load1"]) == (45.0, 1.0, 2.0)
    assert (cols["windows_kept"], cols["windows_remeasured"], cols["windows_disturbed"]) == (3, 1, 1)
    assert cols["host_noise_max_pct"] == 30.0
    assert cols["host_noise_note"] == (
        "repeat 0: measured again 1x (other processes used 180 % of a core (> 30 %)); "
        "repeat 2: kept disturbed (other processes used 45 % of a core (> 30 %))"
    )
    quiet = host_noise_columns(spec, Scenario(sc.step, [_run(0, None)]))
    assert quiet["host_other_cpu_pct"] is None and quiet["host_noise_note"] == "host use not recorded"


def test_a_window_measured_again_sends_other_prompts_of_the_same_shape(monkeypatch):
    """The same prompts again would be served from the prompt cache the disturbed window filled (the demo,
    2026-12-06: a c2 window measured again twice read 2.5 req/s against ~1.0): each window gets its own."""
    from tasks.perf import sweep
    from tasks.perf.workload import Prompt

    sent: list[list[str]] = []

    def window(spec, step, repeat, prompts, *rest):
        sent.append([p.text for p in prompts])
        return _run(repeat, HostNoise(2.0, 150.0, 0.0, 2.0))  # every window loud

    monkeypatch.setattr(sweep, "_run_window", window)
    monkeypatch.setattr(NoiseRule, "wait_quiet", lambda self, pids, probe_s=0.5: 0.0)
    make = lambda w: [Prompt(f"seed {sweep.window_seed(7, w)}", 2, 4, "approx_words")]
    guard = HostGuard(NoiseRule(25.0, retries=2), {1}, budget_s=60.0)
    run = sweep.run_step(PerfSpec(), Step("c1", "concurrency", 1), 0, sweep.fresh_prompts(make), "u", "m", None,
                         None, 0, 7, guard=guard)  # fmt: skip
    assert sent == [["seed 7"], [f"seed {7 * 7919 + 1}"], [f"seed {7 * 7919 + 2}"]]
    assert len(run.remeasured) == 2 and run.disturbed
