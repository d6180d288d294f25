"""Benchmark: more interleaved rounds while two variants' ranking is unsettled, with the looks corrected (issue 36,
item 3; tasks/decision/ranking.py).

Known truth: two variants' per-repeat objective (completed requests/s of a closed-loop step) is log-normal with a
coefficient of variation `sigma` per repeat, variant a's mean `ratio` times b's; optionally each round shares a
host level (`round_sd`, the same for both variants of a round: what interleaving makes common). A night starts with
`repeats` rounds; each look reads the pair (separated, equivalent within the 5 % tie tolerance, or unsettled) and,
while unsettled and looks are left, adds ceil(repeats / 2) rounds to both. The decision calls a variant faster
exactly when the pair is separated at the last look (v_recommendation's tie rule). Two rules of reading a pair:

- `paired`: tasks.decision.ranking.pair_state, what tradeoff does: the interval of the ratio paired round by round
  (warehouse.pairs.ratio_interval, stored in perf_pairs) excludes 1 (separated) or lies within the tolerance;
- `overlap`: the rule before it: the two variants' own log-scale intervals (stat_tests.log_t_interval) apart, or the
  Welch interval of their ratio within the tolerance.

and three ways of looking:

- `one look`: the configured rounds only, at 95 % (what a night without rank_budget_s does);
- `K looks, uncorrected`: extended, every look at 95 % (the error the correction guards against);
- `K looks, corrected`: extended, every look at 1 - 0.05 / K (what tradeoff does).

Printed per row, as % of the simulated nights:
- `f.fast` (false faster): separated in the wrong order (with ratio 1: separated at all); goal <= 5 %;
- `f.tie` (false tie): read equivalent though the truth is beyond the tolerance; goal <= 5 %;
- `fast`: separated in the right order (power);
- `equi`: read as a tie within the tolerance;
- `rnds`: the mean rounds measured (the cost).

Usage: .venv/bin/python -m benchmarks.rank_extension [--sims 4000] [--looks 3] [--repeats 6] [--seed 0]
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np
from scipy import stats

from tasks.core.config import DecisionSpec
from tasks.core.percentiles import look_confidence
from tasks.core.stat_tests import log_t_interval
from tasks.decision.ranking import pair_state

CONF = 0.95
TOLERANCE_PCT = DecisionSpec().tie_tolerance_pct  # the decision's default
ROWS = (  # (sigma, round_sd, ratio)
    (0.05, 0.0, 1.0),
    (0.05, 0.0, 1.03),
    (0.05, 0.0, 1.06),
    (0.05, 0.0, 1.10),
    (0.15, 0.0, 1.0),
    (0.15, 0.0, 1.10),
    (0.15, 0.0, 1.20),
    (0.15, 0.0, 1.40),
    (0.08, 0.0, 1.0),
    (0.08, 0.0, 1.10),
    (0.05, 0.10, 1.0),
    (0.05, 0.10, 1.10),
)
PROCEDURES = (  # (rule, looks: 1 or K, corrected)
    ("overlap", "K", True),
    ("paired", "1", False),
    ("paired", "K", False),
    ("paired", "K", True),
)


def overlap_state(a: np.ndarray, b: np.ndarray, level: float) -> str:
    """The rule before the paired one: both log-scale intervals apart, or the Welch ratio interval within the
    tolerance."""
    (alo, ahi, _), (blo, bhi, _) = log_t_interval(list(a), level), log_t_interval(list(b), level)
    if ahi < blo or bhi < alo:
        return "separated"
    la, lb = np.log(a), np.log(b)
    va, vb = la.var(ddof=1) / la.size, lb.var(ddof=1) / lb.size
    df = (va + vb) ** 2 / (va**2 / (la.size - 1) + vb**2 / (lb.size - 1))
    half = float(stats.t.ppf(0.5 + level / 2.0, df)) * math.sqrt(va + vb)
    d, bound = float(la.mean() - lb.mean()), math.log1p(TOLERANCE_PCT / 100.0)
    return "equivalent" if -bound <= d - half and d + half <= bound else "unsettled"


def night(
    rng: np.random.Generator,
    sigma: float,
    round_sd: float,
    ratio: float,
    repeats: int,
    looks: int,
    level: float,
    rule: str,
) -> tuple[str, int]:
    """(the pair's state at the last look, rounds measured) of one simulated night."""
    s = math.sqrt(math.log1p(sigma * sigma))  # log-normal with that coefficient of variation

    def rounds(k: int) -> tuple[np.ndarray, np.ndarray]:
        host = rng.normal(0.0, round_sd, k)
        return (
            np.exp(math.log(ratio) + host + rng.normal(0.0, s, k)),
            np.exp(host + rng.normal(0.0, s, k)),
        )

    a, b = rounds(repeats)
    for look in range(1, looks + 1):
        if rule == "paired":
            state = pair_state(dict(enumerate(a)), dict(enumerate(b)), level, TOLERANCE_PCT)
        else:
            state = overlap_state(a, b, level)
        if state != "unsettled" or look == looks:
            wrong = state == "separated" and (ratio == 1.0 or np.log(a).mean() < np.log(b).mean())
            return ("wrong" if wrong else state), len(a)
        more_a, more_b = rounds(math.ceil(repeats / 2))
        a, b = np.concatenate([a, more_a]), np.concatenate([b, more_b])
    raise AssertionError("unreachable")


def row(args: argparse.Namespace, sigma: float, round_sd: float, ratio: float) -> list[str]:
    cells = []
    for rule, k, corrected in PROCEDURES:
        looks = 1 if k == "1" else args.looks
        level = look_confidence(CONF, looks) if corrected else CONF
        rng = np.random.default_rng(args.seed)
        states, used = [], []
        for _ in range(args.sims):
            st, n = night(rng, sigma, round_sd, ratio, args.repeats, looks, level, rule)
            states.append(st)
            used.append(n)
        states = np.array(states)
        faster, wrong = np.mean(states == "separated") * 100, np.mean(states == "wrong") * 100
        equivalent = np.mean(states == "equivalent") * 100
        beyond = abs(math.log(ratio)) > math.log1p(TOLERANCE_PCT / 100)
        false_tie = equivalent if beyond else 0.0
        cells.append(f"{wrong:5.1f} {false_tie:5.1f} {faster:5.1f} {equivalent:5.1f} {np.mean(used):4.1f}")
    return cells


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sims", type=int, default=4000)
    p.add_argument("--looks", type=int, default=3)
    p.add_argument("--repeats", type=int, default=6)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    t0 = time.time()
    head = "f.fast f.tie  fast  equi rnds"
    print(f"{args.sims} nights a row; {args.repeats} rounds to start; tie tolerance {TOLERANCE_PCT:g} %; % of nights")
    names = {("1", False): "one look, 95 %", ("K", False): "K looks, uncorrected", ("K", True): "K looks, corrected"}
    titles = [f"{rule}: {names[(k, corrected)]}" for rule, k, corrected in PROCEDURES]
    print(f"{'sigma':>5} {'round':>5} {'ratio':>5} | " + " | ".join(f"{t:^28}" for t in titles))
    print(f"{'':>5} {'':>5} {'':>5} | " + " | ".join(head for _ in PROCEDURES))
    for sigma, round_sd, ratio in ROWS:
        print(f"{sigma:5.2f} {round_sd:5.2f} {ratio:5.2f} | " + " | ".join(row(args, sigma, round_sd, ratio)))
    print(f"({time.time() - t0:.0f} s)")


if __name__ == "__main__":
    main()
