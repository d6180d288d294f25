"""The small closed-loop perf config that decision.extend's tests run against the paced server, and the judge of a
step's p50 claim over its looks (tasks.decision.slo.check_step at 1 - 0.05 / looks)."""

from __future__ import annotations

from typing import Any, Callable

from tasks.core.percentiles import look_confidence
from tasks.decision.slo import SloCheck, check_step

SMALL_STEPS = dict(
    concurrency=[1],
    num_prompts=2,
    repeats=2,
    warmup_requests=1,
    input_len=8,
    output_len=4,
    jitter="off",
    idle_baseline_s=0,
)


def p50_judge(limits: dict[str, float]) -> Callable[[Any], SloCheck]:
    """A step's p50 claim under `limits`, at its own looks' corrected confidence."""

    def judge(sc: Any) -> SloCheck:
        return check_step([run.measured for run in sc.runs], limits, 50.0, look_confidence(0.95, sc.looks))

    return judge
