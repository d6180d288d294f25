"""How many nights after a step Otava first reports it, by step size and noise (issue 35).

    python benchmarks/history_delay.py [--seeds 30] [--before 29] [--after 8]

The load recomputes a series' change points with each new night (warehouse.history.update_history), so a step is
reported on the first night whose history already shows it to Otava. This replays that: per (step, noise) cell and
seed, a series of `before` nights at 100 with Gaussian noise (relative), then the step; after each new night from
the step on, warehouse.history.change_points over the nights so far, as the load calls it. Printed per cell: the
share reported on the step's own night (delay 0), within 2 nights, within `after`, and the median delay of those
found; a change point placed on another night does not count. Only Otava's rule: the band rule speaks on a
series' nights 3 to 5 only (stg_band).
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

from warehouse.history import METHOD, change_points

STEPS = (0.10, 0.15, 0.20, 0.30, 0.50)
NOISES = (0.03, 0.05, 0.10, 0.15)


def delay(step: float, noise: float, seed: int, before: int, after: int) -> int | None:
    """Nights after the step's own night until Otava places a change point on it (0: that night); None: not
    within `after` nights."""
    rng = np.random.default_rng([seed, int(step * 1000), int(noise * 1000)])
    values = 100 * (1 + noise * rng.standard_normal(before + after))
    values[before:] *= 1 + step
    for k in range(after):
        if any(c.index == before for c in change_points(list(values[: before + k + 1]))):
            return k
    return None


def share(delays: list[int], within: int, of: int) -> str:
    return f"{sum(d <= within for d in delays) / of:>8.0%}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=30)
    ap.add_argument("--before", type=int, default=29, help="nights before the step (the planted TPOT step: 29)")
    ap.add_argument("--after", type=int, default=8, help="nights after the step to wait for it")
    args = ap.parse_args()
    t0 = time.perf_counter()
    print(f"{METHOD}; {args.seeds} series per cell, {args.before} nights before the step")
    print(f"step  noise  same night  within 2  within {args.after}  median delay (nights)")
    for step in STEPS:
        for noise in NOISES:
            found = [delay(step, noise, s, args.before, args.after) for s in range(args.seeds)]
            seen = sorted(d for d in found if d is not None)
            median = f"{seen[len(seen) // 2]}" if seen else "-"
            print(
                f"{step:>4.0%}  {noise:>5.0%}  {share(seen, 0, args.seeds)}  {share(seen, 2, args.seeds)}"
                f"  {share(seen, args.after, args.seeds)}  {median:>6}",
                flush=True,
            )
    print(f"{time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
