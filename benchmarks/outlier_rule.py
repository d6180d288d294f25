"""Benchmark: the outlier rule for a step's repeats (tasks.perf.outliers; issue 36, item 2), with known truth.

Each repeat's requests share one level (its window's host state): level = exp(N(0, cv)) on the log scale, with
cv the run-to-run noise (~15 % on TTFT measured on these hosts), and 4 requests per repeat with 3 % spread around
it. With no disturbance, how often does the rule flag a repeat of a step (false alarms: each costs one repeat
measured again)? With one repeat slowed by a factor (a stall, a busy neighbour), how often is that repeat flagged
(and so measured again later)? Through the pipeline's own function on RequestRecords.

Usage: .venv/bin/python benchmarks/outlier_rule.py [--sims 4000] [--seed 0]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from tasks.perf.metrics import RequestRecord
from tasks.perf.outliers import outlier_repeats


def step(rng: np.random.Generator, repeats: int, cv: float, slow: float) -> list[list[RequestRecord]]:
    levels = np.exp(rng.normal(0.0, cv, repeats)) * 400.0
    levels[0] *= slow  # the disturbed repeat (none when slow = 1)
    runs = []
    for level in levels:
        ttft = level * np.exp(rng.normal(0.0, 0.03, 4))
        runs.append(
            [
                RequestRecord(i, "ok", i * 1000.0, ttft_ms=t, e2el_ms=t + 31 * 15.0, output_tokens=32)
                for i, t in enumerate(ttft)
            ]
        )
    return runs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sims", type=int, default=4000)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    t0 = time.perf_counter()
    print(f"{args.sims} steps per cell; 4 requests a repeat; the share of steps")
    print(f"{'repeats':>7} {'cv':>5} | {'false alarm':>11} | {'caught 1.25x':>12} {'1.5x':>6} {'2x':>6} {'10x':>6}")
    for repeats in (3, 6):
        for cv in (0.05, 0.15, 0.25):
            rng = np.random.default_rng([args.seed, repeats, int(cv * 100)])
            alarm = np.mean([bool(outlier_repeats(step(rng, repeats, cv, 1.0))) for _ in range(args.sims)])
            caught = [
                np.mean([0 in outlier_repeats(step(rng, repeats, cv, f)) for _ in range(args.sims)])
                for f in (1.25, 1.5, 2.0, 10.0)
            ]
            print(
                f"{repeats:>7} {cv:>5} | {alarm:>11.1%} | "
                + " ".join(f"{c:>{w}.1%}" for c, w in zip(caught, (12, 6, 6, 6)))
            )
    print(f"total {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
