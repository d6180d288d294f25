"""Variants measured in interleaved rounds (perf.interleave; issue 36, item 2).

Each variant's perf run is a generator of rounds (tasks.perf.sweep.perf_rounds: a round is every step once). Run one
after another, a variant's whole sweep is one stretch of the night, and a transient on the host (another job's
minute, a stall) lands in that variant's only window of a step, while slow drift (heat, a neighbour VM's evening)
favours the variants measured first. Interleaved, round r of every variant runs before round r + 1 of any, in an
order that reverses each round (A B, B A, A B: counterbalanced, so a linear drift costs every variant alike), and a
transient lands in one round of one variant, which the outlier rule (tasks.perf.outliers) can then measure again.
Anchors: Kalibera & Jones, "Rigorous benchmarking in reasonable time" (2013): repeat at the level that varies and
randomise or alternate the order of the systems compared; hyperfine and pyperf compare commands by repeated,
alternated runs rather than one long run each.

A variant whose run fails stops there and the others go on; what it measured before is kept by its own writer.

After the configured rounds, a run yields an open Round (its steps so far); when every live run has, `settle`
(tasks.decision.ranking.RankExtension: the ranking is not settled yet) may ask some of them for further rounds,
interleaved among them as the first ones, while the others wait at their open round; when it asks none (or with no
`settle`), each goes on to what it does after its last round.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Generator, Protocol, TypeVar

from tasks.perf.jitter import JITTER_LABEL

T = TypeVar("T")


def ranked(step: Any) -> bool:
    """A step the rounds may add to: a configured closed-loop step (not the jitter instrument, a rate, a trace)."""
    return step.kind == "concurrency" and step.label != JITTER_LABEL


class Extension(Protocol):
    """What the perf loop consults after a variant's configured windows (the decision's claim extension,
    tasks.decision.extend.StepExtension, handed in by the flow): the most looks an extendable step's claim gets, and
    `run`, which measures further repeats through `new_repeat` (step, repeat) and says whether any step changed."""

    looks: int

    def run(
        self,
        scenarios: dict[str, Any],
        new_repeat: Callable[[Any, int], Any],
        warn: Callable[[str], None] | None = None,
    ) -> bool: ...


@dataclass
class Round:
    """What a run yields after each round: the round's index, and at an open round (the configured rounds done, or
    the further ones last asked for) its steps by label, so that the caller may send back how many more it wants."""

    index: int
    scenarios: dict[str, Any] | None = None


def round_order(names: list[str], r: int) -> list[str]:
    """The order of round `r`: as given on even rounds, reversed on odd ones."""
    return list(names) if r % 2 == 0 else list(reversed(names))


def interleave(
    runs: dict[str, Generator[Any, int | None, T]],
    settle: Callable[[dict[str, dict[str, Any]]], dict[str, int]] | None = None,
) -> dict[str, T | Exception]:
    """Each run's next round, in round_order, until every run has returned; name -> what it returned, or the
    error that ended it. What a run does after its last round (re-measures, the load search) comes at its turn.
    When every live run is at an open Round, `settle` is given their steps and says how many further rounds each
    gets: those with none wait (parked) while the others measure theirs, until `settle` asks none."""
    out: dict[str, T | Exception] = {}
    send: dict[str, int | None] = {}
    parked: dict[str, dict[str, Any]] = {}  # at their open round, waiting while others add rounds
    r = 0
    while len(out) < len(runs):
        opened: dict[str, dict[str, Any]] = {}
        for name in round_order([n for n in runs if n not in out and n not in parked], r):
            try:
                got = runs[name].send(send.pop(name, None))
            except StopIteration as done:
                out[name] = done.value
                continue
            except Exception as err:  # noqa: BLE001 - one variant's failure is its own; the others go on
                out[name] = err
                continue
            if isinstance(got, Round) and got.scenarios is not None:
                opened[name] = got.scenarios
        live = [n for n in runs if n not in out]
        waiting = {**parked, **opened}
        if settle is not None and waiting and set(waiting) == set(live):
            more = {n: k for n, k in settle(waiting).items() if k and n in waiting}
            parked = {n: sc for n, sc in waiting.items() if n not in more} if more else {}
            send = more or {n: 0 for n in live}
        r += 1
    return {name: out[name] for name in runs}
