"""Detection rate and false alarms of v_change_points over synthetic nightly histories (issue 25).

    python benchmarks/history_detection.py [--histories 100] [--nights 40] [--noise 0.03] [--seed 0]

Each history is instruments/synthetic_history.py's plan with its own seed: 40 nights of one config, the
reference q4_1 unchanged, q3_k_m's TPOT stepping up 10 % at night 30, q2_k losing 12 of 100 arithmetic items
from night 20, 3 % Gaussian noise on every perf figure, accuracy from per-item 0/1 scores with a few
items flipping at random. Every night goes through the real loader's path as `tradeoff warehouse rebuild`
takes it (Parquet parts -> warehouse.ingest.insert_run -> warehouse.history.update_history, so Otava runs after
each night as in the nightly), then v_change_points is read. Printed per rule (otava, band):
- detection: histories whose planted step was found at its night, and within one night of it;
- false alarms: change points anywhere else (other nights, other metrics, other variants), per history,
  and the share of histories with at least one on the unchanged reference;
- how many nights after the step Otava first reported it (first_seen_run_id).
"""

from __future__ import annotations

import argparse
import multiprocessing
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from instruments.synthetic_history import Plan, nights
from warehouse.db import open_warehouse
from warehouse.history import METHOD, update_history
from warehouse.ingest import insert_run, read_run_parts

PLANTED = {("q3_k_m", "tpot_ms_mean"): "tpot_step_night", ("q2_k", "arithmetic.accuracy"): "drop_night"}


def one_history(plan: Plan, tmp: Path) -> list[tuple]:
    """Load the plan's nights one by one as a rebuild does; v_change_points' rows with the night number."""
    con = open_warehouse(tmp / "wh.duckdb")
    con.execute("set enable_progress_bar = false")
    try:
        for folder in nights(tmp / "runs", plan):
            parts = read_run_parts(folder / "results")
            insert_run(con, parts)
            update_history(con, [parts.run_id])
        return con.execute("""
            select c.variant, c.metric, c.rule, c.direction, cast(right(c.run_id, 2) as integer) as night,
                   cast(right(c.first_seen_run_id, 2) as integer) as seen_night
            from v_change_points as c""").fetchall()
    finally:
        con.close()


def history(args_seed: tuple[int, int, float]) -> list[tuple]:
    """One history's v_change_points rows (variant, metric, rule, direction, night, night first seen)."""
    nights_, seed, noise = args_seed
    with tempfile.TemporaryDirectory() as tmp:
        return one_history(Plan(nights=nights_, noise=noise, seed=seed), Path(tmp))


class Tally:
    """Per history: was each planted step found at its night, or within one night; everything else by series."""

    def __init__(self) -> None:
        self.n = 0
        self.exact, self.near, self.repeats, self.false, self.ref_alarmed = (Counter() for _ in range(5))
        self.false_by_series: Counter = Counter()
        self.delay: dict[tuple[str, str], list[int]] = {}

    def add(self, found: list[tuple]) -> None:
        self.n += 1
        plan, hits, ref_hit = Plan(), Counter(), set()
        for variant, metric, rule, direction, night, seen in found:
            planted = PLANTED.get((variant, metric))
            at = getattr(plan, planted) if planted else None
            if at is not None and abs(night - at) <= 1 and direction == "regression":
                hits[(variant, metric, rule)] += 1
                self.exact[(variant, metric, rule)] += night == at
                if rule == "otava" and night == at:
                    self.delay.setdefault((variant, metric), []).append(seen - at)
                continue
            self.false[rule] += 1
            self.false_by_series[(variant, metric, rule)] += 1
            if variant == "q4_1":
                ref_hit.add(rule)
        for key, k in hits.items():
            self.near[key] += 1
            self.repeats[key[2]] += k - 1  # the same step flagged again within a night (the band on the next night)
        for rule in ref_hit:
            self.ref_alarmed[rule] += 1

    def report(self, args, seconds: float, out=sys.stdout) -> None:
        n = self.n

        def say(text: str) -> None:
            print(text, file=out, flush=True)

        say(
            f"{n} histories of {args.nights} nights, noise {args.noise:.0%}; {METHOD}; {seconds:.0f} s wall on "
            f"{args.jobs} processes (host shared)"
        )
        for (variant, metric), field in PLANTED.items():
            for rule in ("otava", "band"):
                key = (variant, metric, rule)
                say(
                    f"  {variant} {metric} step at night {getattr(Plan(), field)}, {rule}: found at that night in "
                    f"{self.exact[key]}/{n} ({self.exact[key] / n:.0%}), within one night in {self.near[key]}/{n} "
                    f"({self.near[key] / n:.0%})"
                )
            lags = sorted(self.delay.get((variant, metric), []))
            if lags:
                say(
                    f"    otava first reported it {lags[len(lags) // 2]} nights after the step (median; "
                    f"min {lags[0]}, max {lags[-1]})"
                )
        for rule in ("otava", "band"):
            where = ", ".join(f"{v} {m} {k}" for (v, m, r), k in self.false_by_series.most_common() if r == rule)
            say(
                f"  false alarms, {rule}: {self.false[rule]} in {n} histories ({self.false[rule] / n:.2f} per history, "
                f"over all its series{': ' + where if where else ''}); histories with one on the unchanged "
                f"reference: {self.ref_alarmed[rule]}/{n}; the same step flagged again a night later: "
                f"{self.repeats[rule]}"
            )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--histories", type=int, default=100)
    ap.add_argument("--nights", type=int, default=40)
    ap.add_argument("--noise", type=float, default=0.03)
    ap.add_argument("--seed", type=int, default=0, help="first history's seed; history i uses seed + i")
    ap.add_argument("--jobs", type=int, default=2, help="histories loaded at once (processes)")
    args = ap.parse_args()
    tally, t0 = Tally(), time.perf_counter()
    work = [(args.nights, args.seed + i, args.noise) for i in range(args.histories)]
    with multiprocessing.get_context("spawn").Pool(args.jobs) as pool:
        for found in pool.imap(history, work):
            tally.add(found)
            if tally.n % 10 == 0 and tally.n < args.histories:  # interim numbers, in case the run is cut short
                tally.report(args, time.perf_counter() - t0, sys.stderr)
    tally.report(args, time.perf_counter() - t0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
