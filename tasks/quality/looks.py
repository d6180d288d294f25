"""The looks of an adaptive quality suite, as the quality loop takes them: the sample grows in planned sizes until the
gate (the decision's, handed in as a SuiteGate: tasks.decision.suite_gate.AdaptiveGate) is no longer undecided, within
a time budget. What a look is (its interval's level) is stored with the deltas; how a look is judged is the decision's.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, Protocol

UNDECIDED = "not_enough_evidence"  # the gate's verdict while the evidence is too thin either way


@dataclass(frozen=True)
class Look:
    """The look an interval is taken at: its own two-sided level, its number (1-based), the looks planned and the first
    look's items."""

    level: float
    number: int = 1
    planned: int = 1
    first: int | None = None  # items at the schedule's first look (None: a fixed sample)

    @staticmethod
    def fixed(confidence: float) -> "Look":
        return Look(confidence, 1, 1)


class SuiteGate(Protocol):
    """What the quality loop asks of the gate: `suites` (adaptive suite key -> its gating metrics), the looks'
    `schedule` from the first run's items up to `most` the suite has, look k's `look`, the gate on a look's delta rows
    (`judge`: pass, fail or UNDECIDED), and `annotate`, which adds the rows' design needs before they are written."""

    suites: dict[str, list[str]]

    def schedule(self, first: int, most: int | None) -> list[int]: ...

    def look(self, schedule: list[int], k: int) -> Look: ...

    def judge(self, rows: list[dict], metrics: list[str]) -> str: ...

    def annotate(self, rows: list[dict], looks: dict[str, Look] | None) -> None: ...


class Budget:
    """Seconds left for a suite's extension; a batch is started only when it would likely end within them.

    A batch is assumed to take its item count times the seconds per item measured so far (the first
    run's, then every batch's), so a budget is never overrun by more than the estimate's error.
    """

    def __init__(self, budget_s: float, items: int, seconds: float, clock: Callable[[], float] = time.monotonic):
        self.clock, self.started, self.budget_s = clock, clock(), budget_s
        self.items, self.seconds = items, seconds

    def per_item_s(self) -> float:
        return self.seconds / self.items if self.items else 0.0

    def left_s(self) -> float:
        return self.budget_s - (self.clock() - self.started)

    def allows(self, items: int) -> bool:
        return items * self.per_item_s() <= self.left_s()

    def spent(self, items: int, seconds: float) -> None:
        self.items += items
        self.seconds += seconds


def sequential_gate(
    schedule: list[int], judge_at: Callable[[int], str], extend_to: Callable[[int], bool]
) -> list[tuple[int, str]]:
    """Look at the sample at schedule[0], schedule[1], ... until the gate decides; (n, gate) of every look.

    `judge_at(k)` judges the sample of schedule[k] items at look k's level; `extend_to(n)` answers
    items up to n and says whether it did (False: no budget, no reference items, or a failure:
    the last look stands).
    """
    looks = []
    for k, n in enumerate(schedule):
        gate = judge_at(k)
        looks.append((n, gate))
        if gate != UNDECIDED or k + 1 == len(schedule) or not extend_to(schedule[k + 1]):
            break
    return looks
