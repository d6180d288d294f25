"""Issue 36, item 3: while two variants' ranking is unsettled, both get more interleaved rounds, the looks corrected
(decision.extend.rank_budget_s, tasks/perf/ranking.py); a ranking that is settled gets none.

Two "variants" are two pacings of the paced server (instruments/paced_server.py): the model name sets it. Their
perf runs are the nightly's generators of rounds (tasks.perf.perf_run.measure_rounds), driven by
tasks.perf.rounds.interleave with a RankExtension, as tasks.orchestration.prefect_tasks.measure_perf_rounds drives
them.
"""

from __future__ import annotations

import pytest

from instruments import paced_server
from tasks.core.config import PerfSpec
from tasks.core.percentiles import look_confidence
from tasks.perf.extend import StepExtension
from tasks.perf.perf_run import Target, measure_rounds
from tasks.perf.ranking import RankExtension
from tasks.perf.rounds import interleave
from tests.helpers.paced_steps import SMALL_STEPS, p50_judge

SPEC = {**SMALL_STEPS, "num_prompts": 4}
LIMITS = {"ttft_ms": 5000.0}
LEVEL = look_confidence(0.95, 3)
judge = p50_judge(LIMITS)


def night(url: str, pacings: dict[str, str], budget_s: float = 60.0, **spec) -> tuple[dict, RankExtension]:
    settle = RankExtension(judge, "rate", looks=3, level=LEVEL, tolerance_pct=5, budget_s=budget_s, rounds_per_look=1)
    runs = {
        name: measure_rounds(
            PerfSpec(**{**SPEC, **spec}),
            Target(url, pace, on_host=False),
            warn=lambda _: None,
            extension=StepExtension(judge, looks=3, budget_s=0.001),
            rank=True,
        )  # fmt: skip
        for name, pace in pacings.items()
    }
    return interleave(runs, settle), settle


def test_an_unsettled_ranking_gets_rounds_until_its_looks_run_out():
    noisy = "ttft=250,ttft_jitter=240,itl=5,jitter=0"  # the same pacing: a tie no 5 repeats can show within 5 %
    with paced_server.running() as url:
        out, settle = night(url, {"a": noisy, "b": noisy})
    assert not isinstance(out["a"], Exception) and not isinstance(out["b"], Exception), out
    for name in ("a", "b"):
        (c1,) = out[name]
        s = c1.summary
        assert c1.rounds_added == 2 and s["rounds_added"] == 2 and len(c1.runs) == 4, (name, s)
        assert sorted(run.repeat for run in c1.runs) == [0, 1, 2, 3]
        assert s["ci_level"] == pytest.approx(LEVEL) and c1.looks_taken == 3
        assert s["rank_note"].startswith("look 1 of 3: unsettled (") and s["rank_note"].endswith("no look left"), s
        assert s["repeats_added"] == 0  # its claim was met: the step's own extension took no look
    assert settle.looks_taken == 3


def test_a_settled_ranking_gets_no_round_and_says_which_is_faster():
    with paced_server.running() as url:
        out, _ = night(
            url, {"fast": "ttft=20,ttft_jitter=10,itl=2", "slow": "ttft=400,ttft_jitter=10,itl=20"}, repeats=3
        )
    (fast,), (slow,) = out["fast"], out["slow"]
    assert fast.rounds_added == slow.rounds_added == 0 and len(fast.runs) == 3
    assert slow.summary["rank_note"] == "look 1 of 3: settled (fast c1 > slow c1)"


def test_a_budget_that_cannot_hold_a_round_adds_none_and_says_so():
    noisy = "ttft=250,ttft_jitter=240,itl=5,jitter=0"
    with paced_server.running() as url:
        out, _ = night(url, {"a": noisy, "b": noisy}, budget_s=0.01)
    (a,) = out["a"]
    assert a.rounds_added == 0 and "decision.extend.rank_budget_s left" in a.summary["rank_note"], a.summary
