"""The sustainable-load search: after the sweep, rate steps between the last step that meets the decision's
SLO and the first one above it that misses it, halving the gap each time, within a time budget.

A step meets the SLO when the SLO percentile (p99 by default) of its measured requests' TTFT, TPOT and
E2EL is within each limit given; a request that errored or did not complete is a miss (an infinite
latency). v_slo_steps applies the same rule to the stored requests, so a step the search measured is
judged the same way later (tests/integration/test_recommend.py checks that they agree). The percentile is numpy's
linear one, as everywhere else in tradeoff.

The search needs the live endpoint, so it runs inside the variant's perf measurement
(tasks.orchestration.tasks.measure_perf hands `search_load` to tasks.perf.run.measure, which calls it after the sweep); its steps are ordinary rate steps
(`search1`, `search2`, ...) stored with the others, and v_recommendation takes the sustainable load
from all of them.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Callable

from tasks.core.config import LoadSearchSpec, RunConfig
from tasks.perf.metrics import RequestRecord, summarize
from tasks.perf.sweep import Scenario, Step, run_step
from tasks.perf.workload import Workload

LATENCIES = {"ttft_ms": "TTFT", "tpot_ms": "TPOT", "e2el_ms": "E2EL"}
# Seeds of search steps start past any sweep step's index, so their prompts differ from the sweep's.
_SEED_OFFSET = 10_000


def percentile_with_misses(values: list[float], misses: int, p: float) -> float | None:
    """numpy's linear percentile of `values` plus `misses` infinite values; inf when it falls on a miss."""
    xs = sorted(values) + [math.inf] * misses
    if not xs:
        return None
    h = (len(xs) - 1) * p / 100.0
    i = math.floor(h)
    f = h - i
    if f == 0 or xs[i] == xs[i + 1]:
        return xs[i]
    return xs[i] + f * (xs[i + 1] - xs[i])


@dataclass(frozen=True)
class SloCheck:
    met: bool
    reason: str | None  # why not, in words
    percentiles_ms: dict[str, float | None]  # latency at the percentile; inf when it falls on a miss


def check_step(records: list[RequestRecord], limits: dict[str, float], percentile: float) -> SloCheck:
    """Whether a step's measured (non-warm-up) requests meet every limit at `percentile` (misses count)."""
    measured = [r for r in records if not r.is_warmup]
    ok = [r for r in measured if r.status == "ok"]
    misses = len(measured) - len(ok)
    values = {"ttft_ms": [r.ttft_ms for r in ok if r.ttft_ms is not None],
              "tpot_ms": [r.tpot_ms or 0.0 for r in ok],  # one-token answers: TPOT 0, as for goodput
              "e2el_ms": [r.e2el_ms for r in ok if r.e2el_ms is not None]}
    pct = {k: percentile_with_misses(values[k], misses, percentile) for k in limits}
    missed = [k for k, limit in limits.items() if pct[k] is None or pct[k] > limit]
    if not measured:
        return SloCheck(False, "no measured request", pct)
    if not missed:
        return SloCheck(True, None, pct)
    parts = [f"{misses} of {len(measured)} requests failed or did not complete"] if misses else []
    parts += [f"p{percentile:g} {LATENCIES[k]} {pct[k]:.0f} ms > {limits[k]:g} ms" for k in missed
              if pct[k] is not None and math.isfinite(pct[k])]
    return SloCheck(False, "; ".join(parts), pct)


def step_load(sc: Scenario) -> float | None:
    """A step's load in requests/s: the rate it offered, else the mean of its repeats' completed requests/s."""
    if sc.step.rate is not None and math.isfinite(sc.step.rate):
        return sc.step.rate
    rates = [summarize(run.measured)["request_throughput"] for run in sc.runs]
    rates = [r for r in rates if r]
    return sum(rates) / len(rates) if rates else None


def bracket(scenarios: list[Scenario], limits: dict[str, float], percentile: float) -> tuple[float, float] | None:
    """(load of the highest step that meets the SLO, load of the lowest step above it that misses); None when
    no step meets it or none above misses it (nothing to search)."""
    judged = [(step_load(sc), check_step([r for run in sc.runs for r in run.measured], limits, percentile).met)
              for sc in scenarios]
    passing = [load for load, met in judged if met and load]
    if not passing:
        return None
    lo = max(passing)
    above = [load for load, met in judged if not met and load and load > lo]
    return (lo, min(above)) if above else None


def search_rates(lo: float, hi: float, spec: LoadSearchSpec, measure: Callable[[float], bool],
                 clock: Callable[[], float] = time.monotonic) -> list[tuple[float, bool]]:
    """Bisect between a passing load `lo` and a failing load `hi` (requests/s): `measure(rate)` runs one step
    and says whether it met the SLO. Stops at `max_steps`, when the gap is within `tolerance_pct` of `hi`, or
    when the next step would likely end past `budget_s` (it is assumed to take as long as the last one)."""
    t0, last_s, done = clock(), 0.0, []
    while len(done) < spec.max_steps and (hi - lo) / hi > spec.tolerance_pct / 100.0:
        if clock() - t0 + last_s > spec.budget_s:
            break
        rate = (lo + hi) / 2.0
        started = clock()
        met = measure(rate)
        last_s = clock() - started
        done.append((rate, met))
        lo, hi = (rate, hi) if met else (lo, rate)
    return done


def search_load(cfg: RunConfig, base_url: str, model: str, workload: Workload, force: str | None,
                count_tokens: Callable[[str], int] | None, scenarios: list[Scenario],
                on_scenario: Callable[[list[Scenario]], None] | None = None, energy_off_reason: str | None = None,
                meter_opener: Callable | None = None) -> list[Scenario]:
    """The search's extra rate steps (each run `perf.repeats` times, as the sweep's, metered as the sweep's: the
    engine's own devices), as Scenarios; none when `decision.search` is unset, there is no SLO, or the sweep
    leaves nothing to bracket."""
    search, perf = cfg.decision.search, cfg.perf
    limits = cfg.decision.slo_limits(perf)
    if search is None or not limits:
        return []
    span = bracket(scenarios, limits, cfg.decision.percentile)
    if span is None:
        print("sustainable-load search: nothing to bracket (no step meets the SLO, or none above the best misses it)")
        return []
    added: list[Scenario] = []

    def measure(rate: float) -> bool:
        k = len(added) + 1
        sc = Scenario(Step(f"search{k}", "rate", perf.max_concurrency, rate), [])
        for repeat in range(perf.repeats):
            seed = perf.seed * 1_000_003 + (_SEED_OFFSET + k) * 1009 + repeat
            prompts = workload(seed, perf.warmup_requests + perf.num_prompts)
            first = sum(len(r.warmup) + len(r.measured) for r in sc.runs)
            sc.runs.append(run_step(perf, sc.step, repeat, prompts, base_url, model, force, count_tokens, first, seed,
                                    energy_off_reason=energy_off_reason, meter_opener=meter_opener))
        added.append(sc)
        if on_scenario:
            on_scenario(scenarios + added)
        check = check_step([r for run in sc.runs for r in run.measured], limits, cfg.decision.percentile)
        print(f"sustainable-load search: {sc.step.label} at {rate:.3g} req/s "
              + ("meets the SLO" if check.met else f"misses it ({check.reason})"))
        return check.met

    search_rates(*span, search, measure)
    return added
