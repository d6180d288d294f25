"""Benchmark: can the quality gate say yes? Power and size of the gate's designs, simulated with known truth through
the pipeline's own path, against the exact figures of tasks/decision/design.py that `tradeoff check` states.

Every simulated sample is a set of paired right/wrong answers of a reference (right with p_ref) and a variant that
loses p_lost and gains p_gain of the pairs (absolute shares), judged as the nightly judges it:
tasks.quality.deltas.pairs_row (Tango's interval at the look's level) and tasks.decision.gate.judge, the looks of an
adaptive suite through tasks.quality.looks.sequential_gate with tasks.decision.design.look_schedule and
tasks.decision.gate.look_at (O'Brien-Fleming-type boundaries). "old adaptive" replays the design before issue 32
(doubling looks with a sliver last look, each at the linear alpha-spending level of its increment).

1. An equal variant (delta 0; discordance d, half each way) under the default gate (a 2-point margin): the chance
   it passes, fixed and adaptive (first look 40), simulated and exact; "old" at 99 % retention for comparison.
2. Size: a variant exactly at the margin (delta -2 points; the worst case of "worse"): goal <= 2.5 %.
3. Identical answers at p_ref 0.3 and 1,319 items (the case that passed 0 % adaptively before, 77 % fixed).
4. The "n needed" check: at n_for_power's n (the design in use), the simulated power is 80 +- 3 %.

Monte-Carlo error: +-1.96 sqrt(p (1 - p) / S): +-1.8 points at 80 % and S = 2,000, +-0.7 at 2.5 %.

Usage: .venv/bin/python benchmarks/gate_power.py [--sims 2000] [--seed 0] [--only power|size|identical|needed]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from gate_error import CONF, draw, row_of  # the same simulated pairs and rows as the false-pass benchmark

from tasks.decision.design import look_schedule, n_for_power, operating
from tasks.decision.gate import PASS, judge, look_at
from tasks.quality.looks import Look, sequential_gate

MARGIN = 2.0
FIRST = 40


def gate_at(ref: np.ndarray, var: np.ndarray, look: Look, target: float, margin: float | None) -> str:
    return judge(row_of(ref, var, look), target, margin, 30)


def old_levels(schedule: list[int]) -> list[float]:
    """The looks' levels before issue 32: linear alpha spending of each increment (a union bound)."""
    alpha, total = 1 - CONF, schedule[-1]
    return [1 - alpha * (n - (schedule[k - 1] if k else 0)) / total for k, n in enumerate(schedule)]


def old_schedule(first: int, last: int) -> list[int]:
    out = [first]
    while out[-1] < last:
        out.append(min(out[-1] * 2, last))
    return out


def run_design(
    ref: np.ndarray, var: np.ndarray, schedule: list[int], levels: list[float], target: float, margin: float | None
) -> str:
    looks = sequential_gate(
        schedule,
        lambda k: gate_at(
            ref[: schedule[k]], var[: schedule[k]], Look(levels[k], k + 1, len(schedule), schedule[0]), target, margin
        ),
        lambda _: True,
    )
    return looks[-1][1]


def simulate(
    sims: int, seed: list[int], n: int, p_ref: float, p_lost: float, p_gain: float, target: float, margin: float | None
) -> dict[str, float]:
    """Pass rates of the fixed design at n, the adaptive one (FIRST -> n) and the old adaptive one."""
    rng = np.random.default_rng(seed)
    new = look_schedule(FIRST, n)
    new_levels = [look_at(CONF, new, k).level for k in range(len(new))]
    old = old_schedule(FIRST, n)
    counts = {"fixed": 0, "adaptive": 0, "old adaptive": 0}
    for _ in range(sims):
        ref, var = draw(rng, n, p_ref, p_lost, p_gain)
        counts["fixed"] += gate_at(ref, var, Look.fixed(CONF), target, margin) == PASS
        counts["adaptive"] += run_design(ref, var, new, new_levels, target, margin) == PASS
        counts["old adaptive"] += run_design(ref, var, old, old_levels(old), target, margin) == PASS
    return {k: v / sims for k, v in counts.items()}


def exact(n: int, p_lost: float, p_gain: float, threshold: float) -> tuple[float, float]:
    fixed = operating(p_lost, p_gain, threshold, CONF, n, None, 30).passes
    return fixed, operating(p_lost, p_gain, threshold, CONF, n, FIRST, 30).passes


def header() -> None:
    print(
        f"{'gate':>14} {'p_ref':>5} {'d':>5} {'n':>5} | {'fixed':>6} {'exact':>6} | {'adaptive':>8} {'exact':>6} "
        f"| {'old adaptive':>12}"
    )


def row(label: str, p_ref: float, d: float, n: int, sim: dict, ex: tuple[float, float]) -> None:
    print(
        f"{label:>14} {p_ref:>5} {d:>5.1%} {n:>5} | {sim['fixed']:>6.1%} {ex[0]:>6.1%} | {sim['adaptive']:>8.1%} "
        f"{ex[1]:>6.1%} | {sim['old adaptive']:>12.1%}",
        flush=True,
    )


def power(sims: int, seed: int) -> None:
    print(f"1. An equal variant under the default gate (margin {MARGIN:g} points): pass rate over {sims} simulations")
    header()
    for p_ref in (0.3, 0.6):
        for d in (0.02, 0.05):
            for n in (80, 240, 1319):
                sim = simulate(sims, [seed, 1, int(p_ref * 10), int(d * 1000), n], n, p_ref, d / 2, d / 2, 0.99, MARGIN)
                row(f"margin {MARGIN:g}", p_ref, d, n, sim, exact(n, d / 2, d / 2, -MARGIN / 100))
    print("   the same variants under 99 % retention (the default before): at 1,319 items")
    for p_ref in (0.3, 0.6):
        for d in (0.02, 0.05):
            sim = simulate(sims, [seed, 2, int(p_ref * 10), int(d * 1000)], 1319, p_ref, d / 2, d / 2, 0.99, None)
            row("retention 99 %", p_ref, d, 1319, sim, exact(1319, d / 2, d / 2, -0.01 * p_ref))
    print()


def size(sims: int, seed: int) -> None:
    print(f"2. A variant at the margin (delta -{MARGIN:g} points): false pass over {sims} simulations, goal <= 2.5 %")
    header()
    loss = MARGIN / 100
    for p_ref in (0.3, 0.6):
        for d in (0.02, 0.05, 0.15):
            p_gain = max(0.0, (d - loss) / 2)
            for n in (240, 1319):
                sim = simulate(
                    sims, [seed, 3, int(p_ref * 10), int(d * 1000), n], n, p_ref, loss + p_gain, p_gain, 0.99, MARGIN
                )
                row(f"margin {MARGIN:g}", p_ref, d, n, sim, exact(n, loss + p_gain, p_gain, -loss))
    print()


def identical(sims: int, seed: int) -> None:
    print("3. Answers identical to the reference's (no pair differs), p_ref 0.3, 1,319 items")
    header()
    for label, target, margin, threshold in (("retention 99 %", 0.99, None, -0.003), ("margin 2", 0.99, MARGIN, -0.02)):
        sim = simulate(min(sims, 200), [seed, 4], 1319, 0.3, 0.0, 0.0, target, margin)
        row(label, 0.3, 0.0, 1319, sim, exact(1319, 0.0, 0.0, threshold))
    print()


def needed(sims: int, seed: int) -> None:
    print("4. Running to the printed n needed (80 % power, the design in use): simulated power, goal 80 +- 3 %")
    print(f"{'design':>10} {'p_ref':>5} {'d':>5} {'n needed':>8} | {'simulated':>9}")
    for p_ref in (0.3, 0.6):
        for d in (0.01, 0.02, 0.05):
            for design in ("fixed", "adaptive"):
                first = FIRST if design == "adaptive" else None
                n = n_for_power(d / 2, d / 2, -MARGIN / 100, CONF, first=first, min_samples=30)
                rng = np.random.default_rng([seed, 5, int(p_ref * 10), int(d * 1000), first or 0])
                schedule = look_schedule(FIRST, n) if first else [n]
                levels = [look_at(CONF, schedule, k).level for k in range(len(schedule))]
                passes = 0
                for _ in range(sims):
                    ref, var = draw(rng, n, p_ref, d / 2, d / 2)
                    passes += run_design(ref, var, schedule, levels, 0.99, MARGIN) == PASS
                print(f"{design:>10} {p_ref:>5} {d:>5.1%} {n:>8,} | {passes / sims:>9.1%}", flush=True)
    print()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sims", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--only", choices=["power", "size", "identical", "needed"])
    args = ap.parse_args()
    started = time.time()
    for name, part in (("power", power), ("size", size), ("identical", identical), ("needed", needed)):
        if args.only in (None, name):
            part(args.sims, args.seed)
    print(f"done in {time.time() - started:.0f} s")


if __name__ == "__main__":
    main()
