"""More interleaved rounds while the variants' ranking is unsettled (tasks.decision.ranking,
decision.extend.rank_budget_s): a pair is separated, equivalent within the tolerance, or unsettled; the looks and the
budget bound what is added; the rounds driver sends the added rounds to every live run."""

from __future__ import annotations

import numpy as np

from tasks.client import RequestRecord
from tasks.core.stat_tests import log_t_interval
from tasks.decision.ranking import RankExtension, pair_state, paired_ratio, standing, unsettled_pairs
from tasks.decision.slo import SloCheck
from tasks.perf.energy import EnergyReading
from tasks.perf.rounds import Round, interleave
from tasks.perf.sweep import JITTER_STEP, Scenario, Step, StepRun

C1, C2 = Step("c1", "concurrency", 1), Step("c2", "concurrency", 2)


def window(repeat: int, req_s: float, n: int = 4) -> StepRun:
    """A repeat of n requests back to back, completed at `req_s` requests/s."""
    gap = 1000.0 / req_s
    recs = [RequestRecord(i, "ok", i * gap, 10.0, gap, 8, 16, repeat=repeat) for i in range(n)]
    return StepRun(C2, repeat, [], recs, EnergyReading(None, None, None, "test"))


def scenario(step: Step, rates: list[float]) -> Scenario:
    return Scenario(step, [window(r, x) for r, x in enumerate(rates)])


def met(_sc) -> SloCheck:
    return SloCheck("met", None, 24, 0, 0)


def rounds(values: list[float], first: int = 0) -> dict[int, float]:
    return {first + r: v for r, v in enumerate(values)}


def test_pairs_are_separated_equivalent_or_unsettled():
    fast, slow = rounds([2.0, 2.1, 1.95, 2.05]), rounds([1.0, 1.05, 0.98, 1.02])
    assert pair_state(fast, slow, 0.95, 5) == "separated"
    same = [1.0, 1.004, 0.998, 1.002, 1.001, 0.999]
    assert pair_state(rounds(same), rounds(same[::-1]), 0.95, 5) == "equivalent"
    wide = [1.0, 1.3, 0.8, 1.1]
    assert pair_state(rounds(wide), rounds([x * 1.05 for x in reversed(wide)]), 0.95, 5) == "unsettled"
    assert pair_state(rounds([1.0]), rounds([2.0, 2.1]), 0.95, 5) == "unsettled"  # one round in common: no interval


def test_a_level_both_variants_share_in_a_round_cancels_in_the_pair():
    host = [1.0, 1.3, 0.8, 1.1, 0.9, 1.2]  # each round's host level, the same for both variants
    a = rounds([h * 1.10 * e for h, e in zip(host, (1.01, 0.99, 1.0, 1.02, 0.98, 1.0))])
    b = rounds(host)
    (alo, ahi, _), (blo, bhi, _) = log_t_interval(list(a.values()), 0.95), log_t_interval(host, 0.95)
    assert alo < bhi and blo < ahi  # the two variants' own intervals overlap: the rule before could not part them
    assert pair_state(a, b, 0.95, 5) == "separated"
    assert pair_state(b, a, 0.95, 5) == "separated"
    # rounds are matched by their index: b's rounds 4 and 5 against a's first two are not a pair
    assert paired_ratio(a, rounds([1.0, 1.2], first=4), 0.95)[3] == 2
    assert paired_ratio(a, rounds([1.0], first=5), 0.95) is None


def test_a_variant_stands_at_its_highest_step_met_with_every_lower_one_met():
    scs = [scenario(C1, [1.0, 1.1]), scenario(C2, [1.8, 1.9]), Scenario(JITTER_STEP, [window(0, 5.0)])]
    s = standing("a", scs, met, "request_throughput")
    assert s.step == "c2" and list(s.values) == [0, 1] and np.allclose(list(s.values.values()), [1.8, 1.9])
    only_c2 = lambda sc: SloCheck("met" if sc.step.label == "c2" else "missed", None, 24, 0, 0)
    assert standing("a", scs, only_c2, "request_throughput").step is None  # c1 missed: c2 does not count
    ranked = [standing(v, [scenario(C2, r)], met, "request_throughput") for v, r in
              (("a", [2.0, 2.1, 1.9]), ("b", [1.0, 1.3, 0.8]), ("c", [1.05, 1.2, 0.9]))]  # fmt: skip
    assert [(x.variant, y.variant) for x, y in unsettled_pairs(ranked, 0.95, 5)] == [("c", "b")]


def extension(**kw) -> RankExtension:
    args = dict(judge=met, optimise="rate", looks=3, level=0.9833, tolerance_pct=5, budget_s=60, rounds_per_look=2)
    return RankExtension(**{**args, **kw})


def test_unsettled_rounds_are_asked_until_the_looks_run_out_and_each_step_says_why():
    live = {"a": {"c2": scenario(C2, [1.0, 1.3, 0.8])}, "b": {"c2": scenario(C2, [1.05, 1.2, 0.9])}}
    ext = extension()
    assert ext(live) == {"a": 2, "b": 2} and ext.looks_taken == 2 and live["a"]["c2"].looks_taken == 2
    note = live["b"]["c2"].rank_note
    assert note.startswith("look 1 of 3: unsettled (b c2 vs a c2: 1.04 vs 1.01, ratio ")
    assert "over 3 paired rounds takes in 1 and is not within +-5 %, at 98.33 %" in note  # why it is not settled
    assert ext(live) == {"a": 2, "b": 2} and ext(live) == {}  # look 3 is the last: nothing more
    assert live["a"]["c2"].rank_note.endswith("no look left")


def test_a_step_whose_claim_took_every_look_gets_no_round():
    live = {"a": {"c2": scenario(C2, [1.0, 1.3, 0.8])}, "b": {"c2": scenario(C2, [1.05, 1.2, 0.9])}}
    live["b"]["c2"].looks_taken = 3  # decision.extend's own looks at its claim, before the ranking's first read
    assert extension()(live) == {}
    assert live["a"]["c2"].rank_note.endswith("no look left (b c2: its claim's own looks took them)")


def test_the_budget_and_a_settled_ranking_stop_the_rounds():
    live = {"a": {"c2": scenario(C2, [1.0, 1.3, 0.8])}, "b": {"c2": scenario(C2, [1.05, 1.2, 0.9])}}
    assert extension(budget_s=1)(live) == {}  # each round of c2 takes ~3 s here
    assert "decision.extend.rank_budget_s left" in live["a"]["c2"].rank_note
    apart = {"a": {"c2": scenario(C2, [2.0, 2.1, 1.9])}, "b": {"c2": scenario(C2, [1.0, 1.05, 0.95])}}
    assert extension()(apart) == {} and apart["b"]["c2"].rank_note == "look 1 of 3: settled (a c2 > b c2)"
    alone = {"a": {"c2": scenario(C2, [2.0, 2.1])}, "b": {"c1": scenario(C1, [1.0, 1.3])}}
    c2_only = lambda sc: SloCheck("met" if sc.step.label == "c2" else "missed", None, 9, 0, 0)
    assert extension(judge=c2_only)(alone) == {}  # b is not ranked on speed: the SLO decides it
    assert alone["b"]["c1"].rank_note == "look 1 of 3: settled (a c2; b: no closed-loop step shown within the SLO)"
    rated = {"a": {"r1": Scenario(Step("r1", "rate", None, 1.0), [window(0, 1.0)])}, "b": {}}
    assert extension()(rated) == {}
    assert extension(optimise="energy")(apart) == {} and "no interval" in apart["a"]["c2"].rank_note
    assert extension(optimise="cost")(apart) == {} and "no interval" in apart["a"]["c2"].rank_note
    one = {"a": {"c2": scenario(C2, [2.0])}, "b": {"c2": scenario(C2, [1.9, 2.1])}}
    assert (
        extension()(one) == {"a": 2, "b": 2}
        and "fewer than 2 rounds in common: no interval" in one["a"]["c2"].rank_note
    )
    broken = extension(judge=lambda sc: 1 / 0)  # a reading that fails ends the ranking, the night goes on
    assert broken(apart) == {} and apart["a"]["c2"].rank_note.startswith("not read: ZeroDivisionError")


def run(log: list[str], name: str, configured: int):
    """A run of `configured` rounds whose last is open, then the further rounds it is sent (as perf_rounds)."""
    r, more = 0, None
    for r in range(configured):
        log.append(f"{name}{r}")
        more = yield Round(r, {"c2": name} if r == configured - 1 else None)
    while more:
        for k in range(more):
            r += 1
            log.append(f"{name}{r}+")
            got = yield Round(r, {"c2": name} if k == more - 1 else None)
        more = got
    log.append(f"{name}-tail")
    return name


def test_the_driver_sends_the_added_rounds_at_the_open_round_and_the_others_wait():
    log: list[str] = []
    asked: list[dict] = []

    def settle(live):
        asked.append(dict(live))
        return {"a": 2, "c": 2} if len(asked) == 1 else {}

    out = interleave({name: run(log, name, 2) for name in "abc"}, settle)
    assert out == {"a": "a", "b": "b", "c": "c"}
    assert asked == [{"a": {"c2": "a"}, "b": {"c2": "b"}, "c": {"c2": "c"}}] * 2
    # b waits at its open round while a and c measure theirs, interleaved; then every tail
    assert log == ["a0", "b0", "c0", "c1", "b1", "a1", "a2+", "c2+", "c3+", "a3+", "a-tail", "b-tail", "c-tail"]


def test_a_run_failing_in_its_added_rounds_leaves_the_waiting_ones_to_finish():
    log: list[str] = []

    def dies():
        more = yield Round(0, {"c2": "a"})
        assert more == 1
        raise RuntimeError("server died in its added round")

    calls = []

    def settle(live):
        calls.append(sorted(live))
        return {"a": 1} if len(calls) == 1 else {}

    out = interleave({"a": dies(), "b": run(log, "b", 1)}, settle)
    assert isinstance(out["a"], RuntimeError) and out["b"] == "b"
    assert calls == [["a", "b"], ["b"]]  # b, waiting, is read again alone, then goes on
    assert log == ["b0", "b-tail"]
