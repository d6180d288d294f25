"""Load patterns and the perf run: steps (concurrency, Poisson rate, sweep), warm-up, repeats, energy.

A step is one load pattern:
- `c<N>`: fixed concurrency, N requests in flight until `num_prompts` are done;
- `r<R>`: request rate R/s, arrival gaps drawn from a gamma distribution of shape
  `burstiness` and mean 1/R (shape 1 = Poisson, as `vllm bench serve --burstiness`),
  optionally capped at `max_concurrency` in flight;
- the sweep (as guidellm): `sync` (one request at a time), `max` (all at once: the
  maximum throughput), then `sweep<i>`: `sweep` rates evenly spaced strictly between
  the two measured request rates.

Each (step, repeat) sends `warmup_requests` first, one by one, then the measured
requests inside an energy window; requests sent in the first `warmup_s` seconds of the
measured part are flagged as warm-up too. A rate step sends `rate_requests` (default
`num_prompts`) measured requests, after `rate_warmup_share` of them more at the head of its
Poisson stream, flagged warm-up (its queue settles first, as in MLPerf's server scenario).
No new request is sent after `max_duration_s`.
- `trace`: a request trace (perf.trace) replayed at its own timestamps (scaled by its speed), each request with
  its own prompt and output length (tasks.perf.trace), optionally capped at `max_concurrency` in flight.
Every scheduled request (rate and trace steps) records when it was due (`scheduled_ms`), so the send-time error
(actual - scheduled send) is measured.
Prompts are seeded per (step, repeat), so a rerun sends the same requests. Repeats
interleave (every step once, then again) so slow drift does not favour one step.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import math
import sys
import time
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Callable, Generator, Sequence, TypeVar

import numpy as np

from tasks.client import endpoint_url, request_body, stream_request, stream_session
from tasks.core.config import PerfSpec
from tasks.core.lifecycle import run_async
from tasks.core.percentiles import look_confidence
from tasks.perf.energy import EnergyReading, EnergyWindow, PowerSample
from tasks.perf.host_noise import HostGuard, HostNoise
from tasks.perf.jitter import JITTER_LABEL, needs_jitter_step
from tasks.perf.metrics import RequestRecord, failed_requests
from tasks.perf.outliers import outlier_repeats
from tasks.perf.rounds import Extension, Round, ranked
from tasks.perf.stopping import OVER_SATURATION, LoadWatch, StopRule, stop_rules
from tasks.perf.workload import Prompt, Workload


@dataclass(frozen=True)
class Step:
    label: str  # scenario name: c4, r2.5, sync, max, sweep1
    kind: str  # concurrency | rate | synchronous | throughput | trace
    concurrency: int | None  # cap on requests in flight; None: no cap
    rate: float | None = None  # target requests/s; None: no schedule (as fast as the cap allows)


@dataclass
class StepRun:
    """One repeat of one step."""

    step: Step
    repeat: int
    warmup: list[RequestRecord]
    measured: list[RequestRecord]
    energy: EnergyReading
    power: list[PowerSample] = field(default_factory=list)
    stop_reason: str | None = None  # the stopping rule that ended it early (tasks.perf.stopping); None: ran out
    saturated: bool | None = None  # its queue kept growing; None: not watched (closed loop, or rules off)
    noise: HostNoise | None = None  # what else used the host during the measured window (tasks.perf.host_noise)
    disturbed: str | None = None  # why the kept window counts as disturbed (no retry or budget left); None: quiet
    remeasured: list[str] = field(default_factory=list)  # windows measured again before this one, and why


@dataclass
class Scenario:
    """One step over all its repeats, with its summary."""

    step: Step
    runs: list[StepRun]
    summary: dict = field(default_factory=dict)
    looks: int = 1  # most looks at its SLO claim (decision.extend: tasks.decision.extend), each at corrected confidence
    looks_taken: int = 1
    repeats_added: int = 0  # repeats measured to gather what its claim lacked
    extend_note: str | None = None  # what the extension did, or why it did not
    rounds_added: int = 0  # rounds added while the variants' ranking was unsettled (tasks.decision.ranking)
    rank_note: str | None = None  # what the ranking's looks found and did
    ci_level: float | None = None  # its intervals' level when not perf.confidence (the ranking's corrected looks)

    @property
    def records(self) -> list[RequestRecord]:
        return [r for run in self.runs for r in run.warmup + run.measured]


def is_rate_step(step: Step) -> bool:
    """An open-loop step: requests sent on a Poisson schedule, whatever the server does (its load can be sustained
    or not); the others hold a fixed number in flight (closed loop)."""
    return step.rate is not None and math.isfinite(step.rate)


def step_prompts(spec: PerfSpec, step: Step) -> int:
    """Prompts one repeat of `step` sends: the one-by-one warm-up, then its stream (rate steps: warm-up share too)."""
    return spec.warmup_requests + (spec.stream_requests() if is_rate_step(step) else spec.num_prompts)


def fixed_load(step: Step) -> bool:
    """A fixed step (configured concurrency or rate, a sweep rate): its repeats are alike, so one that stands apart
    from the others is measured again (measure_outliers_again)."""
    return step is not JITTER_STEP and step.kind in ("concurrency", "rate")


def extendable(step: Step) -> bool:
    """A step decision.extend may add repeats to (a fixed step, or a replayed trace: another replay), judging every
    look of it at a corrected confidence (tasks.decision.extend)."""
    return fixed_load(step) or step.kind == "trace"


def fixed_steps(spec: PerfSpec) -> list[Step]:
    """The configured concurrency and rate steps, in order."""
    steps = [Step(f"c{c}", "concurrency", c) for c in spec.concurrency or []]
    steps += [Step(f"r{r:g}", "rate", spec.max_concurrency, r) for r in spec.rates]
    return steps


SYNC_STEP = Step("sync", "synchronous", 1)

WATCH_INTERVAL_S = 0.25  # how often an open-loop step's outstanding requests are sampled and its rules asked


# The fixed-length concurrency-1 workload the jitter figure is measured on (tasks.perf.jitter).
JITTER_STEP = Step(JITTER_LABEL, "concurrency", 1)


def trace_step(spec: PerfSpec, n_requests: int) -> Step:
    """The trace replay: its own schedule; in flight at most max_concurrency (default: every request may be)."""
    return Step("trace", "trace", spec.max_concurrency or n_requests)


def max_step(spec: PerfSpec) -> Step:
    return Step("max", "throughput", spec.max_concurrency)


def sweep_rates(sync_rps: float, max_rps: float, n: int) -> list[float]:
    """`n` request rates evenly spaced strictly between the synchronous and the maximum rate."""
    return [float(r) for r in np.linspace(sync_rps, max_rps, n + 2)[1:-1]]


def arrival_offsets_s(n: int, rate: float | None, burstiness: float = 1.0, seed: int = 0) -> list[float] | None:
    """Send times (s from the start) of `n` requests at `rate`/s; gaps ~ Gamma(burstiness, 1/(rate*burstiness)).

    The first request goes at 0, as in vLLM. None for no schedule (rate None or inf).
    """
    if rate is None or math.isinf(rate):
        return None
    gaps = np.random.default_rng(seed).gamma(shape=burstiness, scale=1.0 / (rate * burstiness), size=n)
    return [0.0] + np.cumsum(gaps[:-1]).tolist()


class _Progress:
    """A rich progress bar on stderr (requests done, output tokens/s, errors); a no-op when off."""

    def __init__(self, enabled: bool | None) -> None:
        self.enabled = sys.stderr.isatty() if enabled is None else enabled
        self._bar = None

    def __enter__(self) -> "_Progress":
        if self.enabled:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            self._bar = Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("{task.fields[tok_s]:>8.1f} tok/s  errors {task.fields[errors]}"),
                TimeElapsedColumn(),
                console=Console(stderr=True),
                transient=False,
            )
            self._bar.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._bar:
            self._bar.__exit__(*exc)

    def track(self, description: str, total: int) -> Callable[[RequestRecord], None] | None:
        if not self._bar:
            return None
        bar = self._bar
        task = bar.add_task(description, total=total, tok_s=0.0, errors=0)
        state = {"tokens": 0, "errors": 0, "first_ms": None}

        def on_record(r: RequestRecord) -> None:
            state["tokens"] += r.output_tokens or 0
            state["errors"] += r.status != "ok"
            first = state["first_ms"] = r.start_ms if state["first_ms"] is None else min(state["first_ms"], r.start_ms)
            span_s = max((r.start_ms + (r.e2el_ms or 0) - first) / 1000, 1e-3)
            bar.update(task, advance=1, tok_s=state["tokens"] / span_s, errors=state["errors"])

        return on_record


def window_seed(seed: int, window: int) -> int:
    """The prompts' seed of a (step, repeat)'s `window`-th window: its own seed for the first, another for each one
    measured again."""
    return seed if window == 0 else seed * 7919 + window


def fresh_prompts(make: Callable[[int], list[Prompt]]) -> Callable[[], list[Prompt]]:
    """A (step, repeat)'s prompts for each window it measures, in turn: make(0) for the first, make(1) for the
    first measured again, and so on. A window measured again sends other prompts of the same shape: the same ones
    would be served from the prompt cache the window before filled (llama-server keeps each slot's prompt), and
    read fast (2026-12-06, the demo: a c2 window measured again twice completed 2.5 req/s against ~1.0)."""
    made = 0

    def next_window() -> list[Prompt]:
        nonlocal made
        made += 1
        return make(made - 1)

    return next_window


def run_step(
    spec: PerfSpec,
    step: Step,
    repeat: int,
    prompts: Callable[[], list[Prompt]],
    base_url: str,
    model: str,
    force: str | None,
    count_tokens: Callable[[str], int] | None,
    first_index: int,
    offsets_seed: int,
    on_record: Callable[[RequestRecord], None] | None = None,
    energy_off_reason: str | None = None,
    meter_opener: Callable | None = None,
    guard: HostGuard | None = None,
    warn: Callable[[str], None] | None = None,
) -> StepRun:
    """One (step, repeat): its window measured, and measured again while `guard` finds it disturbed by other
    processes on the host (waiting for a quiet host first; bounded by the guard's retries and budget). Each window
    sends `prompts()` (fresh_prompts: the same shape, other words) with the same request indices; the windows
    measured again are dropped, and the kept one says why each was (`remeasured`) and whether it is still disturbed
    (`disturbed`)."""
    dropped: list[str] = []
    while True:
        t0 = time.perf_counter()
        run = _run_window(
            spec, step, repeat, prompts(), base_url, model, force, count_tokens, first_index, offsets_seed,
            on_record, energy_off_reason, meter_opener, guard,
        )  # fmt: skip
        run.remeasured = dropped
        if guard is None or run.noise is None:
            return run
        why = guard.retry_reason(run.noise, len(dropped))
        failed = failed_requests(run.warmup + run.measured)
        if why is None or failed:
            run.disturbed = guard.rule.judge(run.noise)
            if run.disturbed and warn:
                kept = (
                    f"not measured again: {failed} of its requests failed (the server's doing: sent again they "
                    "would fail again)"
                    if failed
                    else f"no retry or re-measuring time left ({len(dropped)} measured again)"
                )
                warn(
                    f"{step.label} repeat {repeat}: window disturbed ({run.disturbed}; {run.noise.describe()}); "
                    f"kept as it is: {kept}"
                )
            return run
        waited = guard.rule.wait_quiet(guard.engine_pids)
        guard.spent_s += time.perf_counter() - t0
        dropped = dropped + [f"{why} ({run.noise.describe()})"]
        if warn:
            warn(
                f"{step.label} repeat {repeat}: window disturbed ({why}; {run.noise.describe()}); measuring it "
                f"again after {waited:.0f} s (retry {len(dropped)} of {guard.rule.retries})"
            )


def _run_window(
    spec: PerfSpec,
    step: Step,
    repeat: int,
    prompts: list[Prompt],
    base_url: str,
    model: str,
    force: str | None,
    count_tokens: Callable[[str], int] | None,
    first_index: int,
    offsets_seed: int,
    on_record: Callable[[RequestRecord], None] | None = None,
    energy_off_reason: str | None = None,
    meter_opener: Callable | None = None,
    guard: HostGuard | None = None,
) -> StepRun:
    """Warm-up one by one, then the measured requests of one step inside an energy window and a host window."""
    common = dict(
        kind=spec.endpoint,
        force=force,
        count_tokens=count_tokens,
        timeout_s=spec.request_timeout_s,
        repeat=repeat,
        deadline_s=spec.request_deadline_s,
    )
    n_warm = spec.warmup_requests
    warm = run_async(
        partial(
            run_load,
            base_url,
            model,
            prompts[:n_warm],
            spec.output_len,
            concurrency=1,
            first_index=first_index,
            **common,
        )
    )
    for r in warm:
        r.is_warmup = True
    todo = prompts[n_warm:]
    if step.kind == "trace":
        offsets = [p.at_s or 0.0 for p in todo]
    else:
        offsets = arrival_offsets_s(len(todo), step.rate, spec.burstiness, offsets_seed)
    open_loop = offsets is not None
    rules = stop_rules(spec.saturation) if open_loop else []
    watch = LoadWatch() if rules else None
    host = guard.window() if guard is not None else contextlib.nullcontext()
    with host, EnergyWindow(spec.power_interval_s, off_reason=energy_off_reason, opener=meter_opener) as window:
        measured = run_async(
            partial(
                run_load,
                base_url,
                model,
                todo,
                spec.output_len,
                concurrency=step.concurrency,
                offsets_s=offsets,
                max_duration_s=spec.max_duration_s,
                first_index=first_index + len(warm),
                on_record=on_record,
                watch=watch,
                rules=rules,
                **common,
            )
        )
    head = first_index + len(warm) + (spec.rate_warmup() if is_rate_step(step) else 0)  # the stream's warm-up share
    for r in measured:
        r.is_warmup = r.start_ms < spec.warmup_s * 1000.0 or r.index < head
    return StepRun(
        step,
        repeat,
        warm,
        measured,
        window.reading,
        window.samples,
        watch.stop_reason if watch else None,
        watch.saturated if watch else None,
        host.noise if guard is not None else None,
    )


T = TypeVar("T")


def drain(rounds: Generator[Round, int | None, T]) -> T:
    """Run a generator of rounds (perf_rounds, measure_rounds) to its end; what it returns."""
    while True:
        try:
            next(rounds)
        except StopIteration as done:
            return done.value


def run_perf(*args, **kwargs) -> list[Scenario]:
    """perf_rounds, every round one after another: the perf run of one endpoint on its own."""
    return drain(perf_rounds(*args, **kwargs))


def perf_rounds(
    spec: PerfSpec,
    base_url: str,
    model: str,
    workload: Workload,
    force: str | None,
    count_tokens: Callable[[str], int] | None = None,
    progress: bool | None = False,
    on_scenario: Callable[[list[Scenario]], None] | None = None,
    energy_off_reason: str | None = None,
    meter_opener: Callable | None = None,
    trace: Callable[[int, int], list[Prompt]] | None = None,
    guard: HostGuard | None = None,
    warn: Callable[[str], None] | None = None,
    extension: Extension | None = None,
    rank: bool = False,
    on_record: Callable[[Step, RequestRecord], None] | None = None,
) -> Generator[Round, int | None, list[Scenario]]:
    """Every step of `spec`, `spec.repeats` times, interleaved; returns one Scenario per step (no summaries yet).
    A generator: it yields the Round it has just measured once every step has had it, so a caller can measure
    other endpoints' rounds in between (tasks.perf.rounds). After the last round come the outlier re-measures and
    the extension, then an open Round: the caller may send back a number of further rounds of the closed-loop
    steps (tasks.decision.ranking), the last of which is open again; then it returns. With `rank` (the
    caller settles a ranking over looks, decision.extend.rank_budget_s), the closed-loop steps' intervals are at
    the looks' corrected level.
    With `guard`, a window disturbed by other processes on the host is measured again (see run_step), and a repeat
    of a fixed step that stands apart from the others is measured again after them (measure_outliers_again).
    With `extension` (decision.extend), a fixed step whose SLO claim lacks requests then gets more repeats, its
    looks corrected (tasks.decision.extend).

    `trace`: the trace's prompts for a replay and window (tasks.perf.trace.trace_replays), replayed as the step
    `trace` after the fixed steps.

    `on_scenario` is called with everything measured so far after each (step, repeat), so
    callers can write partial results as they come; `on_record` with each measured request as it is answered (its
    step's first windows and added repeats; not a window measured again after the others), so a caller stopped
    mid-window still has what that window answered (`tradeoff perf`'s interrupted file).
    """
    steps = (
        ([JITTER_STEP] if needs_jitter_step(spec) else [])
        + fixed_steps(spec)
        + ([trace_step(spec, len(trace(0)))] if trace else [])
        + ([SYNC_STEP, max_step(spec)] if spec.sweep is not None else [])
    )
    sweep_pending = spec.sweep is not None
    scenarios: dict[str, Scenario] = {}
    # (step, repeat): its windows' prompts (fresh_prompts), first request index, seed
    made: dict[tuple[str, int], tuple[Callable[[], list[Prompt]], int, int]] = {}

    def again(step: Step, repeat: int) -> StepRun:
        prompts, first, seed = made[(step.label, repeat)]
        return run_step(
            spec, step, repeat, prompts, base_url, model, force, count_tokens, first, seed, None,
            energy_off_reason, meter_opener, guard, warn,
        )  # fmt: skip

    index_of: dict[str, int] = {}  # step label -> its position, part of its prompts' seed

    def first_time(step: Step, i: int, repeat: int, tracker: Callable[[RequestRecord], None] | None) -> StepRun:
        seed = spec.seed * 1_000_003 + i * 1009 + repeat
        sc = scenarios[step.label]
        if on_record is not None:
            bar_tracker = tracker

            def tracker(r: RequestRecord) -> None:
                if bar_tracker is not None:
                    bar_tracker(r)
                on_record(step, r)

        def make(window: int) -> list[Prompt]:
            ws = window_seed(seed, window)
            if step.kind == "trace":
                return workload(ws, spec.warmup_requests, True) + (trace(repeat, window) if trace else [])
            n = step_prompts(spec, step)
            return workload(ws, n, True) if step is JITTER_STEP else workload(ws, n)

        prompts = fresh_prompts(make)
        first = sum(len(r.warmup) + len(r.measured) for r in sc.runs)
        made[(step.label, repeat)] = (prompts, first, seed)
        return run_step(
            spec, step, repeat, prompts, base_url, model, force, count_tokens, first, seed, tracker,
            energy_off_reason, meter_opener, guard, warn,
        )  # fmt: skip

    rounds = max(spec.repeats, spec.trace.repeats if spec.trace else 0)
    more: int | None = None  # further rounds the caller asks at the open round (tasks.decision.ranking)
    with _Progress(progress) as bar:
        for repeat in range(rounds):
            i = 0
            while i < len(steps):
                step = steps[i]
                times = spec.trace.repeats if step.kind == "trace" and spec.trace else spec.repeats
                if repeat >= times:
                    i += 1  # a trace is replayed trace.repeats times, every other step perf.repeats times
                    continue
                if step.label not in scenarios:
                    looks = extension.looks if extension is not None and extendable(step) else 1
                    level = look_confidence(spec.confidence, looks) if rank and ranked(step) else None
                    scenarios[step.label] = Scenario(step, [], looks=looks, ci_level=level)
                    index_of[step.label] = i
                sc = scenarios[step.label]
                n = len(trace(0)) if trace and step.kind == "trace" else step_prompts(spec, step) - spec.warmup_requests
                sc.runs.append(first_time(step, i, repeat, bar.track(f"{step.label} ({repeat + 1}/{times})", n)))
                if sweep_pending and step.label == "max":
                    # The sweep's rates lie between the measured synchronous and maximum request rates.
                    lo = _request_rate(scenarios["sync"].runs[0])
                    hi = _request_rate(sc.runs[0])
                    if lo and hi:
                        steps += [
                            Step(f"sweep{k + 1}", "rate", spec.max_concurrency, rate)
                            for k, rate in enumerate(sweep_rates(lo, hi, spec.sweep))
                        ]
                    sweep_pending = False
                if on_scenario:
                    on_scenario(list(scenarios.values()))
                i += 1
            yield Round(repeat)
        if measure_outliers_again(scenarios, again, guard, warn) and on_scenario:
            on_scenario(list(scenarios.values()))
        more_of = lambda step, repeat: first_time(step, index_of[step.label], repeat, None)
        if extension is not None and extension.run(scenarios, more_of, warn) and on_scenario:
            on_scenario(list(scenarios.values()))
        # open: the caller may ask further rounds of the closed-loop steps (tasks.decision.ranking), now that the
        # stalled windows are measured again and the claims that lacked requests have them
        more = yield Round(rounds, scenarios)
        added = 0
        while more:  # one round of every closed-loop step at a time, the last of them open again
            for k in range(more):
                added += 1
                for step in (st for st in steps if ranked(st) and st.label in scenarios):
                    sc = scenarios[step.label]
                    tracker = bar.track(f"{step.label} (+{added})", step_prompts(spec, step) - spec.warmup_requests)
                    repeat = max(run.repeat for run in sc.runs) + 1
                    sc.runs.append(first_time(step, index_of[step.label], repeat, tracker))
                    sc.rounds_added += 1
                    if on_scenario:
                        on_scenario(list(scenarios.values()))
                got = yield Round(rounds + added, scenarios if k == more - 1 else None)
            more = got
    return list(scenarios.values())


def measure_outliers_again(
    scenarios: dict[str, Scenario],
    again: Callable[[Step, int], StepRun],
    guard: HostGuard | None,
    warn: Callable[[str], None] | None,
) -> bool:
    """Each fixed step's repeats that stand apart from its others (tasks.perf.outliers) measured once more, now,
    after every repeat of the variant (later than the minute that stalled), while the guard's re-measuring budget
    lasts: the new window replaces the old, which its `remeasured` names; one that stands apart again, or that no
    budget is left for, is kept and marked `disturbed` (a new StepRun either way, so that its summary is made
    again). Whether any window was replaced."""
    replaced = False
    for sc in scenarios.values():
        if not fixed_load(sc.step):
            continue
        for i, why in sorted(outlier_repeats([run.measured for run in sc.runs]).items()):
            old = sc.runs[i]
            failed = failed_requests(old.warmup + old.measured)
            if guard is None or guard.spent_s >= guard.budget_s or failed:
                left = f"{failed} of its requests failed (not sent again)" if failed else "no re-measuring time left"
                sc.runs[i] = replace(old, disturbed=old.disturbed or f"{why}; {left}")
                replaced = True
                if warn:
                    warn(f"{sc.step.label} repeat {old.repeat}: {why}; kept: {left}")
                continue
            t0 = time.perf_counter()
            guard.rule.wait_quiet(guard.engine_pids)
            new = again(sc.step, old.repeat)
            guard.spent_s += time.perf_counter() - t0
            new.remeasured = old.remeasured + [f"{why}, measured again after the other repeats"] + new.remeasured
            sc.runs[i] = new
            replaced = True
            still = outlier_repeats([run.measured for run in sc.runs]).get(i)
            if still:
                new.disturbed = new.disturbed or still
            if warn:
                warn(
                    f"{sc.step.label} repeat {old.repeat}: {why}; measured again after the other repeats"
                    + (f", and it stands apart again ({still}): kept, marked disturbed" if still else "")
                )
    return replaced


def _request_rate(run: StepRun) -> float | None:
    ok = [r for r in run.measured if r.status == "ok"]
    if not ok:
        return None
    span_ms = max(r.start_ms + r.e2el_ms for r in ok) - min(r.start_ms for r in ok)
    return len(ok) / (span_ms / 1000.0) if span_ms > 0 else None


@contextlib.contextmanager
def frozen_heap():
    """Keep the garbage collector's full passes off a step's schedule: what the process holds before the step (a
    tokenizer, a flow's state, a test suite's objects) is collected once and then frozen (gc.freeze: no later
    collection walks it), so a collection during the step walks only the step's own new objects. A full pass over
    a large heap stops every coroutine for milliseconds: a scheduled send then leaves late."""
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


async def run_load(
    base_url: str,
    model: str,
    prompts: Sequence[Prompt],
    max_tokens: int,
    concurrency: int | None = None,
    offsets_s: Sequence[float] | None = None,
    max_duration_s: float | None = None,
    kind: str = "completions",
    force: str | None = None,
    count_tokens: Callable[[str], int] | None = None,
    timeout_s: float = 300.0,
    first_index: int = 0,
    repeat: int = 0,
    on_record: Callable[[RequestRecord], None] | None = None,
    deadline_s: float | None = None,
    watch: LoadWatch | None = None,
    rules: Sequence[StopRule] = (),
) -> list[RequestRecord]:
    """Send the prompts: prompt i at `offsets_s[i]` seconds (default: at once), with at most
    `concurrency` in flight (default: no cap). After `max_duration_s` no new request is sent;
    those in flight finish (bounded by `timeout_s` per wait for bytes and `deadline_s` per
    request). Records keep the prompts' order; unsent prompts have none.

    With `watch`, the requests outstanding (due and not returned, queued for a slot included) are sampled every
    WATCH_INTERVAL_S and each answered request's TTFT noted; `rules` (tasks.perf.stopping) are asked at each
    sample, and the first that gives a reason stops the sending (those in flight finish), noted in `watch`.
    """
    url = endpoint_url(base_url, kind)
    slots = min(concurrency or len(prompts), len(prompts)) + 1
    sem = asyncio.Semaphore(concurrency) if concurrency else None
    stop = asyncio.Event()
    outstanding = 0
    # a session's turn waits for its previous turn (Prompt.after) to return, then its think time
    returned = [asyncio.Event() for _ in prompts]
    ended_s: list[float | None] = [None] * len(prompts)
    streaming: dict[int, RequestRecord] | None = {} if watch is not None else None  # sent, not yet returned

    # timeout_s bounds each wait for bytes (as before: per read, not per request).
    with frozen_heap():
        async with stream_session(base_url, slots, timeout_s) as client:
            origin = time.perf_counter_ns()
            deadline = origin + int(max_duration_s * 1e9) if max_duration_s else None

            def late() -> bool:
                return stop.is_set() or (deadline is not None and time.perf_counter_ns() >= deadline)

            async def one(k: int, p: Prompt, at_s: float) -> RequestRecord | None:
                try:
                    return await send(k, p, at_s)
                finally:
                    ended_s[k] = (time.perf_counter_ns() - origin) / 1e9
                    returned[k].set()

            async def send(k: int, p: Prompt, at_s: float) -> RequestRecord | None:
                nonlocal outstanding
                i = first_index + k
                if p.after is not None:
                    await returned[p.after].wait()
                    at_s = max(at_s, (ended_s[p.after] or 0.0) + p.think_s)
                if max_duration_s and at_s >= max_duration_s:
                    return None  # due after the time limit: never sent (and not waited for)
                wait = at_s - (time.perf_counter_ns() - origin) / 1e9
                if wait > 0:
                    with contextlib.suppress(asyncio.TimeoutError):
                        await asyncio.wait_for(stop.wait(), wait)  # its time, or a stopping rule ended the step
                if stop.is_set():
                    return None
                outstanding += 1
                try:
                    async with sem or contextlib.nullcontext():
                        if late():
                            return None
                        body = request_body(kind, model, p.text, p.output_len or max_tokens, force)
                        rec = await stream_request(
                            client,
                            url,
                            body,
                            kind,
                            i,
                            origin,
                            count_tokens,
                            p.tokens,
                            p.tokens_source,
                            repeat,
                            deadline_s,
                            streaming,
                        )
                finally:
                    outstanding -= 1
                    if streaming is not None:
                        streaming.pop(i, None)
                if offsets_s is not None:
                    rec.scheduled_ms = at_s * 1000.0  # when it was due: start_ms - scheduled_ms is the send error
                rec.session_id, rec.turn = p.session_id, p.turn
                if watch is not None and rec.ttft_ms is not None:
                    watch.ttfts.append((rec.start_ms / 1000.0, rec.ttft_ms))
                if on_record:
                    on_record(rec)
                return rec

            async def monitor() -> None:
                while watch is not None:
                    await asyncio.sleep(WATCH_INTERVAL_S)
                    now_s = (time.perf_counter_ns() - origin) / 1e9
                    watch.in_flight.append((now_s, outstanding))
                    # the longest a sent request has waited for its first token so far (0: none waits)
                    waits = [now_s - r.start_ms / 1000.0 for r in (streaming or {}).values() if not r.chunk_offsets_ms]
                    watch.oldest_wait.append((now_s, max(waits, default=0.0) * 1000.0))
                    for rule in rules:
                        reason = rule.check(watch, now_s)
                        if reason:
                            watch.stop_reason, watch.stopped_at_s = f"{rule.name}: {reason}", now_s
                            watch.saturated = watch.saturated or rule.name == OVER_SATURATION
                            stop.set()
                            return

            watcher = asyncio.create_task(monitor())
            offsets = offsets_s or [0.0] * len(prompts)
            try:
                done = await asyncio.gather(*(one(k, p, t) for k, (p, t) in enumerate(zip(prompts, offsets))))
            finally:
                watcher.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await watcher
    return [r for r in done if r is not None]


async def run_concurrency(
    base_url: str,
    model: str,
    prompts: list[Prompt],
    concurrency: int,
    max_tokens: int,
    kind: str = "completions",
    force: str | None = None,
    count_tokens: Callable[[str], int] | None = None,
    timeout_s: float = 300.0,
    first_index: int = 0,
) -> list[RequestRecord]:
    """Send every prompt, with at most `concurrency` requests in flight; records keep the prompts' order."""
    return await run_load(
        base_url,
        model,
        prompts,
        max_tokens,
        concurrency=concurrency,
        kind=kind,
        force=force,
        count_tokens=count_tokens,
        timeout_s=timeout_s,
        first_index=first_index,
    )
