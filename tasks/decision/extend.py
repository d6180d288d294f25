"""Extending a step that lacks requests for its SLO claim, with the looks corrected (issue 36, item 3).

A fixed step (a configured concurrency or rate, a sweep rate) or a replayed trace whose percentile claim is shown
neither way (tasks.decision.slo: `not_enough_requests`, the requests it counts too few, e.g. correlated ones) gets more
repeats after the variant's other windows (a trace is replayed again), within a time budget
(decision.extend.budget_s), and is judged again: the perf twin of the adaptive quality suites. Judging a growing
step again and stopping once it shows "meets" is a sequential test; uncorrected, every look is another chance of a
false "meets". The correction is Bonferroni over the planned looks (decision.extend.looks, K, fixed before any
evidence): every look of such a step, its first included, is judged at 1 - (1 - c) / K, so the chance that any of
its looks claims falsely is at most 1 - c, whichever look it stops at and whatever stopped it (the budget, a miss,
another limit). The price is paid on every extendable step, extended or not: p50 at 95 % needs 5 requests with
none over, at 98.3 % (K = 3) 6. benchmarks/slo_extension.py simulates it with known truth.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any, Callable

from tasks.decision.slo import SloCheck
from tasks.perf.metrics import failed_requests

# tasks.perf.sweep's Scenario, Step and StepRun (it runs the extension: importing them here would be a cycle)
Scenario = StepRun = Step = Any


def repeats_to_add(needed: int | None, n: int, per_repeat: int, most: int) -> int:
    """Repeats the next look adds: those that bring the step to the requests it needs (every further one within the
    limits), at least 1 and at most `most` (the repeats of the step's first look: a look at most doubles it)."""
    short = max((needed or 0) - n, 0)
    return min(max(math.ceil(short / max(per_repeat, 1)), 1), max(most, 1))


def window_s(run: StepRun) -> float:
    """Wall seconds one repeat took, warm-up included (first send to last return)."""
    recs = run.warmup + run.measured
    ends = [r.start_ms + (r.e2el_ms or 0.0) for r in recs]
    return (max(ends) - min(r.start_ms for r in recs)) / 1000.0 if recs else 0.0


@dataclass
class StepExtension:
    """decision.extend for one variant's perf run: `judge` says what a step's claim shows at its looks' confidence
    (tasks.decision.load_search.judge), `looks` and `budget_s` bound what is added."""

    judge: Callable[[Scenario], SloCheck]
    looks: int
    budget_s: float
    spent_s: float = 0.0

    def run(
        self,
        scenarios: dict[str, Scenario],
        new_repeat: Callable[[Step, int], StepRun],
        warn: Callable[[str], None] | None = None,
    ) -> bool:
        """Looks 2..`looks` at each extendable step (Scenario.looks > 1) still `not_enough_requests`: the repeats its
        n_needed asks for (repeats_to_add) measured now, the highest-throughput steps first, while the repeats'
        estimated time fits what is left of the budget; each step's `extend_note` says what was done or why not.
        Whether any step changed (a repeat added, or a note)."""
        changed = False
        steps = sorted(
            (sc for sc in scenarios.values() if sc.looks > 1 and sc.runs),
            key=lambda sc: -(sc.summary.get("request_throughput") or 0.0),
        )
        for look in range(2, self.looks + 1):
            for sc in steps:
                check = self.judge(sc)
                if check.status != "not_enough_requests":
                    continue
                failed = failed_requests(r for run in sc.runs for r in run.warmup + run.measured)
                if failed:  # a broken server's requests are not sent again (docs/failures.md)
                    note = f"not extended: {failed} of its requests failed (sent again they would fail again)"
                    changed = changed or sc.extend_note != note
                    sc.extend_note = note
                    continue
                first_look = len(sc.runs) - sc.repeats_added  # a look adds at most as many repeats as the first had
                k = repeats_to_add(check.n_needed, check.n, check.n // len(sc.runs), first_look)
                est = k * sum(window_s(run) for run in sc.runs) / len(sc.runs)
                if self.spent_s + est > self.budget_s:
                    changed = True  # nothing measured, but the note is new
                    sc.extend_note = (
                        f"look {look} of {self.looks} not taken: {k} more repeat(s) would take ~{est:.0f} s, "
                        f"{max(self.budget_s - self.spent_s, 0):.0f} s of decision.extend.budget_s left"
                    )
                    continue
                t0 = time.perf_counter()
                first = max(run.repeat for run in sc.runs) + 1
                for r in range(first, first + k):
                    sc.runs.append(new_repeat(sc.step, r))
                self.spent_s += time.perf_counter() - t0
                sc.looks_taken, sc.repeats_added = look, sc.repeats_added + k
                after = self.judge(sc)
                sc.extend_note = (
                    f"look {look} of {self.looks}: {after.status} after {sc.repeats_added} added repeat(s) "
                    f"({check.n} requests had, {check.n_needed} needed)"
                )
                changed = True
                if warn:
                    warn(f"{sc.step.label}: {sc.extend_note}")
        return changed
