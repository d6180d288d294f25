"""The quality gate as the nightly's quality loop consults it while an adaptive suite grows
(tasks.quality.looks.SuiteGate): the flow makes one from the run's config and hands it to
tasks.quality.suite_loop.run_suites, which imports nothing of the decision."""

from __future__ import annotations

from tasks.core.config import RunConfig
from tasks.decision.adaptive import adaptive_suites, judge_rows
from tasks.decision.design import look_schedule
from tasks.decision.gate import look_at
from tasks.decision.gate_plan import add_design_needs
from tasks.quality.looks import Look


class AdaptiveGate:
    """The gate as the nightly's quality loop consults it (tasks.quality.looks.SuiteGate), handed in by the flow:
    which suites extend, their looks' schedule and levels, the gate on a look's delta rows, and the rows' design
    needs."""

    def __init__(self, cfg: RunConfig) -> None:
        self.cfg = cfg
        self.suites = adaptive_suites(cfg)

    def schedule(self, first: int, most: int | None) -> list[int]:
        adaptive = self.cfg.quality.adaptive
        assert adaptive is not None
        return look_schedule(first, min(adaptive.max_items, most) if most else adaptive.max_items)

    def look(self, schedule: list[int], k: int) -> Look:
        return look_at(self.cfg.quality.confidence, schedule, k)

    def judge(self, rows: list[dict], metrics: list[str]) -> str:
        return judge_rows(rows, metrics, self.cfg)

    def annotate(self, rows: list[dict], looks: dict[str, Look] | None) -> None:
        add_design_needs(rows, self.cfg, looks)
