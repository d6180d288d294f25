"""More interleaved rounds while the variants' ranking is unsettled (decision.extend.rank_budget_s; issue 36, item 3).

After the configured rounds of an interleaved night (perf.interleave, tasks.perf.rounds), each variant's outlier
re-measures and the repeats its claims lacked (tasks.decision.extend), each variant's standing is read from what it
measured, as v_recommendation reads it on a closed-loop night: its sustainable step is the highest
closed-loop step whose SLO claim is met with every lower one met (tasks.decision.load_search.judge, at the looks'
corrected confidence), and its objective there is the per-repeat completed requests/s (optimise: rate) or output
tokens/s (tps, cost). The variants are ordered by that objective; each neighbouring pair is

- **equivalent** when the interval of the ratio of their objectives, paired round by round (warehouse.pairs.
  ratio_interval over the rounds both measured: the interval perf_pairs stores and v_recommendation's tie rule
  reads), lies within +-decision.tie_tolerance_pct: they tie, and more rounds would not change that;
- **separated** otherwise when that interval excludes 1: the decision ranks them;
- **unsettled** otherwise; so is a pair with fewer than 2 rounds in common (no interval).

A variant with no sustainable step is not ranked on speed (the SLO decides it) and pairs with none.
While a pair is unsettled, a look is left (decision.extend.looks, K, shared with the step's own claim: a look of
either kind counts) and the added rounds are estimated to fit rank_budget_s for each variant of an unsettled pair,
those variants get ceil(perf.repeats / 2) more rounds of their closed-loop steps, interleaved among them as the
first ones, while the others wait; then the pairs are read again. Stopping when the ranking settles is a sequential
test, as stopping a step's claim once it is met is (tasks.decision.extend), so the same correction holds: every look,
the first included, judges the SLO claims, the intervals and the ratio at 1 - (1 - c) / K (Bonferroni over looks
fixed before any evidence), and the steps' stored intervals are at that level too (perf_summary.ci_level), so a
"faster" or a "tie within the tolerance" read at any look keeps confidence c. benchmarks/rank_extension.py
simulates it with known truth.

Not extended: a night with rate steps (they rank by the bracket between a passing and a failing rate, which more
rounds of the same rates do not narrow), a trace-only night (its goodput is its offered rate), and the objectives
with no interval of their own (energy, cost per correct answer; cost, which divides each variant's own price by its
tokens/s or has none: the order of tokens/s is not the order of cost). A pair's variants get the rounds even when
the quality gate will later refuse one of them: the gate is read after perf.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Literal

import numpy as np

from tasks.decision.extend import window_s
from tasks.decision.slo import SloCheck
from tasks.perf.metrics import summarize
from tasks.perf.rounds import ranked
from warehouse.pairs import ratio_interval

# tasks.perf.sweep's Scenario (it drives the rounds: importing it here would be a cycle)
Scenario = Any

PairState = Literal["separated", "equivalent", "unsettled"]
RANKED_OBJECTIVE = {"rate": "request_throughput", "tps": "output_throughput"}
OBJECTIVE_WORDS = {"request_throughput": "completed requests/s", "output_throughput": "output tokens/s"}


@dataclass
class Standing:
    """One variant's place in the live ranking: its sustainable closed-loop step and the objective per repeat
    (repeat index -> value: a round of an interleaved night)."""

    variant: str
    step: str | None
    values: dict[int, float]

    @property
    def centre(self) -> float:
        return float(np.exp(np.mean(np.log(list(self.values.values()))))) if self.values else 0.0


def standing(variant: str, scenarios: list[Scenario], judge: Callable[[Scenario], SloCheck], figure: str) -> Standing:
    """`variant`'s sustainable closed-loop step (the highest met with every lower one met) and its objective per
    repeat there; step None when the lowest is not met."""
    best = None
    for sc in sorted((s for s in scenarios if ranked(s.step) and s.runs), key=lambda s: s.step.concurrency):
        if not judge(sc).met:
            break
        best = sc
    if best is None:
        return Standing(variant, None, {})
    values = {run.repeat: summarize(run.measured).get(figure) for run in best.runs}
    return Standing(variant, best.step.label, {r: float(v) for r, v in values.items() if v is not None and v > 0})


def paired_ratio(a: dict[int, float], b: dict[int, float], level: float) -> tuple[float, float, float, int] | None:
    """(ratio, low, high, rounds) of a / b over the rounds both measured (warehouse.pairs.ratio_interval); None
    with fewer than 2 rounds in common."""
    rounds = sorted(set(a) & set(b))
    if len(rounds) < 2:
        return None
    ratio, lo, hi = ratio_interval(np.array([a[r] for r in rounds]), np.array([b[r] for r in rounds]), level)
    return float(ratio), float(lo), float(hi), len(rounds)


def pair_state(a: dict[int, float], b: dict[int, float], level: float, tolerance_pct: float) -> PairState:
    """Whether two variants' per-round objectives are separated, equivalent within the tolerance, or neither, read
    at `level` (see the module docstring)."""
    got = paired_ratio(a, b, level)
    return "unsettled" if got is None else interval_state(got[1], got[2], tolerance_pct)


def interval_state(low: float, high: float, tolerance_pct: float) -> PairState:
    """The pair read from the interval of its ratio: v_recommendation's tie rule (`in_tie`, rule 5), where a pair
    that is not separated ties."""
    bound = 1.0 + tolerance_pct / 100.0
    if 1.0 / bound <= low and high <= bound:
        return "equivalent"  # even a lead shown, when it is within the tolerance: a tie (rule 5)
    return "separated" if high < 1.0 or low > 1.0 else "unsettled"


def unsettled_pairs(standings: list[Standing], level: float, tolerance_pct: float) -> list[tuple[Standing, Standing]]:
    """Neighbouring variants (by objective, those with a sustainable step) whose order is not settled."""
    on = sorted((s for s in standings if s.step is not None and s.values), key=lambda s: -s.centre)
    return [(x, y) for x, y in zip(on, on[1:]) if pair_state(x.values, y.values, level, tolerance_pct) == "unsettled"]


@dataclass
class RankExtension:
    """decision.extend.rank_budget_s for an interleaved night: `__call__` is tasks.perf.rounds.interleave's
    `settle`: given every live variant's steps after an open round, how many more rounds each gets, with the reason
    in `notes` (each ranked step's rank_note, migration 021), and each note to `log` as it is read."""

    judge: Callable[[Scenario], SloCheck]
    optimise: str
    looks: int
    level: float
    tolerance_pct: float
    budget_s: float
    rounds_per_look: int
    looks_taken: int = 1  # the ranking's reads so far
    notes: list[str] = field(default_factory=list)
    log: Callable[[str], None] | None = None

    def __call__(self, live: dict[str, dict[str, Scenario]]) -> dict[str, int]:
        """Variant -> the rounds it gets now (none at all: the ranking was read for the last time). A reading that
        fails ends the ranking with its reason: the variants' measurements go on to their summaries."""
        try:
            return self._read(live)
        except Exception as err:  # noqa: BLE001 - the ranking is an addition; what was measured is kept
            return self._end(live, f"not read: {type(err).__name__}: {err}")

    def _read(self, live: dict[str, dict[str, Scenario]]) -> dict[str, int]:
        figure = RANKED_OBJECTIVE.get(self.optimise)
        steps = {v: [sc for sc in scs.values() if ranked(sc.step)] for v, scs in live.items()}
        if figure is None:
            return self._end(live, f"not extended: optimise {self.optimise} has no interval to settle")
        if any(sc.step.kind == "rate" for scs in live.values() for sc in scs.values()):
            return self._end(live, "not extended: rate steps rank by their bracket, which more rounds do not narrow")
        if not any(steps.values()):
            return self._end(live, "not extended: no closed-loop step to rank on")
        standings = [standing(v, scs, self.judge, figure) for v, scs in steps.items()]
        open_pairs = unsettled_pairs(standings, self.level, self.tolerance_pct)
        look = f"look {self.looks_taken} of {self.looks}"
        if not open_pairs:
            on = sorted((s for s in standings if s.step), key=lambda s: -s.centre)
            off = [s.variant for s in standings if not s.step]
            said = [" > ".join(f"{s.variant} {s.step}" for s in on)] if on else []
            said += [f"{', '.join(off)}: no closed-loop step shown within the SLO"] if off else []
            return self._end(live, f"{look}: settled ({'; '.join(said)})")
        said = "; ".join(self._pair_text(x, y) for x, y in open_pairs)
        pairs = sorted({s.variant for pair in open_pairs for s in pair}, key=list(live).index)
        spent_looks = [f"{v} {sc.step.label}" for v in pairs for sc in steps[v] if sc.looks_taken >= self.looks]
        if self.looks_taken >= self.looks or spent_looks:
            whose = (
                f" ({', '.join(spent_looks)}: its claim's own looks took them)"
                if spent_looks and self.looks_taken < self.looks
                else ""
            )
            return self._end(live, f"{look}: unsettled ({said}); no look left{whose}")
        spent = {v: sum(window_s(run) for sc in steps[v] for run in sc.runs[len(sc.runs) - sc.rounds_added :])
                 for v in pairs}  # fmt: skip
        est = {v: self.rounds_per_look * sum(_mean_window(sc) for sc in steps[v]) for v in pairs}
        over = [v for v in pairs if spent[v] + est[v] > self.budget_s]
        if over:
            v = over[0]
            return self._end(
                live,
                f"{look}: unsettled ({said}); {self.rounds_per_look} more round(s) would take {v} ~{est[v]:.0f} s, "
                f"{max(self.budget_s - spent[v], 0):.0f} s of decision.extend.rank_budget_s left",
            )
        self.looks_taken += 1
        self._say(f"{look}: unsettled ({said}); {self.rounds_per_look} round(s) added to {', '.join(pairs)}")
        for v in pairs:
            for sc in steps[v]:
                sc.looks_taken += 1
        self._mark(live)
        return {v: self.rounds_per_look for v in pairs}

    def _pair_text(self, x: Standing, y: Standing) -> str:
        head = f"{x.variant} {x.step} vs {y.variant} {y.step}: {x.centre:.3g} vs {y.centre:.3g}"
        got = paired_ratio(x.values, y.values, self.level)
        if got is None:
            return f"{head}, fewer than 2 rounds in common: no interval"
        _, lo, hi, n = got
        return (
            f"{head}, ratio {lo:.2f}-{hi:.2f} over {n} paired rounds takes in 1 and is not within "
            f"+-{self.tolerance_pct:g} %, at {self.level * 100:.4g} %"
        )

    def _say(self, note: str) -> None:
        self.notes.append(note)
        if self.log:
            self.log(f"ranking (decision.extend.rank_budget_s): {note}")

    def _end(self, live: dict[str, dict[str, Scenario]], note: str) -> dict[str, int]:
        self._say(note)
        self._mark(live)
        return {}

    def _mark(self, live: dict[str, dict[str, Scenario]]) -> None:
        for scs in live.values():
            for sc in scs.values():
                if ranked(sc.step):
                    sc.rank_note = "; ".join(self.notes)[:2000]


def _mean_window(sc: Scenario) -> float:
    return sum(window_s(run) for run in sc.runs) / len(sc.runs) if sc.runs else 0.0
