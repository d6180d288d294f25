"""Issue 36, item 3: a fixed step whose SLO claim lacks requests gets more repeats, its looks corrected.

decision.extend plans up to 3 looks at a step's claim, each judged at 1 - 0.05 / 3 = 98.3 %: p50 then needs 6
requests within the limits where 95 % needs 5. The paced server (instruments/paced_server.py) answers well within
the limits; a c1 step of 2 repeats of 2 requests lacks requests at its first look and gets the repeats its
`n_needed` asks for, measured after the variant's other windows (tasks.decision.extend).
"""

from __future__ import annotations

import re

import pytest

from instruments import paced_server
from tasks.core.config import DecisionSpec, PerfSpec
from tasks.core.percentiles import look_confidence, min_requests, sized_requests
from tasks.decision.extend import StepExtension, repeats_to_add
from tasks.decision.slo import check_step
from tasks.perf.perf_run import Target, measure
from tests.helpers.paced_steps import SMALL_STEPS, p50_judge

SPEC = SMALL_STEPS
LIMITS = {"ttft_ms": 2000.0}
judge = p50_judge(LIMITS)


def test_repeats_to_add_brings_the_step_to_what_it_needs_within_one_look():
    assert repeats_to_add(6, 4, 2, 2) == 1
    assert repeats_to_add(13, 4, 2, 2) == 2  # at most the configured repeats a look
    assert repeats_to_add(None, 4, 2, 2) == 1 and repeats_to_add(3, 4, 2, 2) == 1  # at least one
    assert look_confidence(0.95, 3) == pytest.approx(1 - 0.05 / 3) and look_confidence(0.95, 1) == 0.95


def test_the_config_states_the_looks_before_the_evidence():
    d = DecisionSpec.model_validate({"slo": LIMITS, "percentile": 50.0, "extend": {"budget_s": 60}})
    assert d.extend.looks == 3 and d.fixed_step_confidence() == pytest.approx(1 - 0.05 / 3)
    # rate steps are sized to the corrected claim (6 requests), with headroom for the count (independent requests
    # are counted as 6 95 % of the time)
    assert min_requests(50.0, d.fixed_step_confidence()) == 6
    assert d.step_requests(PerfSpec(repeats=1)) == sized_requests(50.0, d.fixed_step_confidence(), 1, 1) == 12
    with pytest.raises(ValueError, match="looks"):
        DecisionSpec.model_validate({"extend": {"budget_s": 60, "looks": 1}})


def test_a_step_lacking_requests_gets_more_repeats_and_says_so():
    warnings: list[str] = []
    extension = StepExtension(judge, looks=3, budget_s=60.0)
    with paced_server.running() as url:
        (sc,) = measure(
            PerfSpec(**SPEC), Target(url, "ttft=40,itl=5,jitter=0", on_host=False), warn=warnings.append,
            extension=extension,
        )  # fmt: skip
    s = sc.summary
    assert s["slo_looks"] == 3 and s["repeats_added"] >= 1 and s["windows_kept"] == 2 + s["repeats_added"], s
    assert sc.looks_taken >= 2 and s["extend_note"].startswith(f"look {sc.looks_taken} of 3: "), s
    assert sorted(run.repeat for run in sc.runs) == list(range(2 + s["repeats_added"]))
    assert len({r.index for run in sc.runs for r in run.warmup + run.measured}) == 3 * len(sc.runs)  # new indices
    assert any(w.startswith("c1: look 2 of 3: ") for w in warnings), warnings
    first = check_step([run.measured for run in sc.runs[:2]], LIMITS, 50.0, look_confidence(0.95, 3))
    assert first.status == "not_enough_requests" and first.n == 4  # what the first look lacked
    assert extension.spent_s > 0


def test_no_repeat_is_added_past_the_budget():
    with paced_server.running() as url:
        (sc,) = measure(
            PerfSpec(**SPEC), Target(url, "ttft=40,itl=5,jitter=0", on_host=False), warn=lambda _: None,
            extension=StepExtension(judge, looks=3, budget_s=0.001),
        )  # fmt: skip
    s = sc.summary
    assert s["repeats_added"] == 0 and s["windows_kept"] == 2 and s["slo_looks"] == 3, s
    # 1 more repeat, or 2 where the window's latencies read correlated (they count as fewer; seen in a loaded run)
    assert re.search(r"look 3 of 3 not taken: [12] more repeat\(s\) would take", s["extend_note"]), s
    assert judge(sc).status == "not_enough_requests"


def test_a_replayed_trace_is_extended_by_replaying_it_but_not_judged_an_outlier():
    from tasks.perf.sweep import JITTER_STEP, Step, extendable, fixed_load

    trace = Step("trace", "trace", 8)
    assert extendable(trace) and not fixed_load(trace)  # another replay, but replays are not alike repeats
    assert extendable(Step("c2", "concurrency", 2)) and fixed_load(Step("r1", "rate", None, 1.0))
    assert not extendable(JITTER_STEP) and not extendable(Step("sync", "synchronous", 1))
