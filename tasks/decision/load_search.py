"""The sustainable-load search: after the sweep, rate steps that bracket the highest sustainable request rate
and bisect the bracket, within a time budget.

A rate step passes when tasks.decision.slo judges it `met`: its requests show the decision's percentile within
every limit (an order-statistic bound at decision.confidence; failed requests are misses) and its load was
sustained (it achieved decision.min_rate_ratio of its offered rate: its queue did not grow, and the
over-saturation rule did not stop it: tasks.perf.stopping). The sustainable
rate is the highest passing rate step with every lower rate step passing too (a lucky step above a failing
one does not count); v_slo_steps and v_recommendation apply the same rules to the stored requests.

The bracket: the highest such rate (lo) and the first rate step above it that does not pass (hi). When the
sweep has no passing rate step the search halves the lowest one until a step passes; when none fails it
doubles the highest; with no rate step at all it starts at the completed requests/s of the lowest-concurrency
closed-loop step. Then it bisects until `max_steps`, until the gap is within `tolerance_pct`, or until the
next step would likely end past `budget_s`. Each step runs `perf.repeats` times with the rate steps' size
(perf.rate_requests, raised by the config to what the percentile needs, after its warm-up share).

The search needs the live endpoint, so it runs inside the variant's perf measurement
(tasks.orchestration.prefect_tasks.measure_perf hands `search_load` to tasks.perf.perf_run.measure, which calls it
after the sweep); its steps are ordinary rate steps (`search1`, `search2`, ...) stored with the others.
"""

from __future__ import annotations

import time
from typing import Callable

from tasks.core.config import LoadSearchSpec, RunConfig
from tasks.core.percentiles import look_confidence
from tasks.decision.slo import SloCheck, check_step
from tasks.perf.host_noise import HostGuard
from tasks.perf.metrics import summarize
from tasks.perf.sweep import Scenario, Step, fresh_prompts, is_rate_step, run_step, step_prompts, window_seed
from tasks.perf.workload import Workload

# Seeds of search steps start past any sweep step's index, so their prompts differ from the sweep's.
_SEED_OFFSET = 10_000


def judge(sc: Scenario, cfg: RunConfig) -> SloCheck:
    """One measured step judged as v_slo_steps judges it: the decision's SLO, percentile and confidence (each look's
    where the step has several: decision.extend), and for a rate step whether its load was sustained."""
    d = cfg.decision
    return check_step(
        [run.measured for run in sc.runs],
        d.slo_limits() or {},
        d.percentile,
        look_confidence(d.confidence, sc.looks),
        is_rate_step(sc.step),
        d.min_rate_ratio,
        "; ".join(run.stop_reason for run in sc.runs if run.saturated and run.stop_reason) or None,
    )


def bracket(scenarios: list[Scenario], cfg: RunConfig) -> tuple[float | None, float | None, float | None]:
    """(lo, hi, start) in requests/s: the highest rate step that passes with every lower rate step passing, the
    first rate step above it that does not pass (None: every one passes, or none does); `start`, with no rate
    step at all, the completed requests/s of the lowest-concurrency closed-loop step (else None)."""
    rated = sorted((sc for sc in scenarios if is_rate_step(sc.step)), key=lambda sc: (sc.step.rate, sc.step.label))
    if not rated:
        closed = sorted((sc for sc in scenarios if sc.runs), key=lambda sc: (sc.step.concurrency or 0, sc.step.label))
        rates = [summarize(run.measured)["request_throughput"] for sc in closed[:1] for run in sc.runs]
        rates = [r for r in rates if r]
        return None, None, (sum(rates) / len(rates) if rates else None)
    return (*chain([(sc.step.rate, judge(sc, cfg).met) for sc in rated]), None)


def chain(judged: list[tuple[float, bool]]) -> tuple[float | None, float | None]:
    """(the highest rate that passed with every lower one passing, the first rate that did not pass); None where
    there is none. v_recommendation's sustainable load is the first (with the second as its bracket)."""
    lo = None
    for rate, met in sorted(judged):
        if not met:
            return lo, rate
        lo = rate
    return lo, None


def search_rates(
    lo: float | None,
    hi: float | None,
    spec: LoadSearchSpec,
    measure: Callable[[float], bool],
    clock: Callable[[], float] = time.monotonic,
    start: float | None = None,
    expected_s: Callable[[float], float] | None = None,
    on_stop: Callable[[str], None] | None = None,
) -> list[tuple[float, bool]]:
    """Bracket, then bisect, the highest passing rate (requests/s): `measure(rate)` runs one step and says whether
    it passed. With no failing rate (hi None) it doubles lo, with no passing one (lo None) it halves hi, with
    neither it tries `start`. Stops at `max_steps`, when the gap is within `tolerance_pct` of hi, or when the
    next step would likely end past `budget_s` (it is assumed to take as long as the last one, or
    `expected_s(rate)` when that is longer). `on_stop` hears why it stopped, in words."""
    t0, last_s, done = clock(), 0.0, []
    why = f"{spec.max_steps} steps (max_steps)"
    while len(done) < spec.max_steps:
        if lo is not None and hi is not None:
            if (hi - lo) / hi <= spec.tolerance_pct / 100.0:
                why = f"{lo:.3g} and {hi:.3g} req/s are within {spec.tolerance_pct:g} %"
                break
            rate = (lo + hi) / 2.0
        elif lo is not None:
            rate = lo * 2.0
        elif hi is not None:
            rate = hi / 2.0
        elif start is not None:
            rate = start
        else:
            why = "nothing to start from"
            break
        need = max(last_s, expected_s(rate) if expected_s else 0.0)
        if clock() - t0 + need > spec.budget_s:
            why = (
                f"a step at {rate:.3g} req/s (~{need:.0f} s) would end past the {spec.budget_s:g} s budget after "
                f"{clock() - t0:.0f} s"
            )
            break
        started = clock()
        met = measure(rate)
        last_s = clock() - started
        done.append((rate, met))
        lo, hi = (rate, hi) if met else (lo, rate)
    if on_stop:
        on_stop(why)
    return done


def search_load(
    cfg: RunConfig,
    base_url: str,
    model: str,
    workload: Workload,
    force: str | None,
    count_tokens: Callable[[str], int] | None,
    scenarios: list[Scenario],
    on_scenario: Callable[[list[Scenario]], None] | None = None,
    energy_off_reason: str | None = None,
    meter_opener: Callable | None = None,
    guard: HostGuard | None = None,
    warn: Callable[[str], None] | None = None,
) -> list[Scenario]:
    """The search's extra rate steps (each run `perf.repeats` times, as the sweep's, metered as the sweep's: the
    engine's own devices), as Scenarios; none when `decision.search` is unset, there is no SLO, or there is nothing
    to start from."""
    search, perf = cfg.decision.search, cfg.perf
    if search is None or not cfg.decision.slo_limits():
        return []
    lo, hi, start = bracket(scenarios, cfg)
    if lo is None and hi is None and start is None:
        print("sustainable-load search: nothing to start from (no rate step and no closed-loop step completed)")
        return []
    added: list[Scenario] = []

    def measure(rate: float) -> bool:
        k = len(added) + 1
        sc = Scenario(Step(f"search{k}", "rate", perf.max_concurrency, rate), [])
        for repeat in range(perf.repeats):
            seed = perf.seed * 1_000_003 + (_SEED_OFFSET + k) * 1009 + repeat
            n = step_prompts(perf, sc.step)
            prompts = fresh_prompts(lambda window, seed=seed, n=n: workload(window_seed(seed, window), n))
            first = sum(len(r.warmup) + len(r.measured) for r in sc.runs)
            sc.runs.append(
                run_step(
                    perf,
                    sc.step,
                    repeat,
                    prompts,
                    base_url,
                    model,
                    force,
                    count_tokens,
                    first,
                    seed,
                    energy_off_reason=energy_off_reason,
                    meter_opener=meter_opener,
                    guard=guard,
                    warn=warn,
                )
            )
        added.append(sc)
        if on_scenario:
            on_scenario(scenarios + added)
        check = judge(sc, cfg)
        print(
            f"sustainable-load search: {sc.step.label} at {rate:.3g} req/s "
            + ("meets the SLO, sustained" if check.met else f"does not pass ({check.status}: {check.reason})")
        )
        return check.met

    search_rates(
        lo,
        hi,
        search,
        measure,
        start=start,
        expected_s=lambda rate: perf.repeats * perf.stream_requests() / rate,
        on_stop=lambda why: print(f"sustainable-load search: {len(added)} step(s) added; stopped: {why}"),
    )
    return added
