"""Benchmark: how often does the quality gate pass a variant it should not, and how often does it pass an equal one?

Simulates paired right/wrong answers of a reference and a variant with a known truth, and judges
them with the code the pipeline runs (issue 24, items 3 and 4):

- tasks.quality.deltas.pairs_row: the quality_deltas row (Tango's interval, the gate's bounds) that
  delta_row computes once the samples are paired; delta_row itself, with errored requests, in table 3;
- tasks.decision.gate.judge: the gate's rule (v_quality_gate applies the same rule; `--sql-check`
  puts simulated rows through the view itself and counts disagreements, which must be 0);
- tasks.quality.looks.sequential_gate with tasks.decision.design.look_schedule / Look.at: the looks
  of an adaptive suite, from the first n to 4 x n (looks at n, 2n, 4n), alpha spent over them.

The reference is drawn too (its right answers with probability p_ref), so its own sampling error is
in every figure: the gate takes the reference value as known (tasks/decision/gate.py) and this
measures what that costs.

1. False pass: true retention at the target (the worst case of "below": the false pass can only
   fall as the truth moves away) and below it, at n = 30, 80, 200, 1000, with losses only (the
   variant never gains) and mixed discordance (15 % of pairs differ), for retention 99 % (the
   demo's p_ref 0.25, and 0.6), retention 90 % (p_ref 0.6: the reference's error weighs 10x more)
   and a 5-point margin (margin_points). Goal: <= 2.5 % (one-sided, the interval's lower side);
   "old" is the rule before this change ([0, 0] when no pair differs), fixed design. 1b: at the
   target exactly, with many more simulations: the test's size, where a false pass is likeliest.
2. Power: a truly equal variant (delta 0; 2 % or 10 % of pairs differ, half each way) at
   n = 80 ... 5000, fixed and adaptive.
3. Survivor bias: a variant that answers as the reference but errors on 8 % of items the
   reference gets right; errored requests dropped from the pairs (before) or counted as wrong (now).

Monte-Carlo error: with S simulations a rate near 2.5 % is +-1.96 sqrt(0.025 * 0.975 / S) (+-0.7 % at
S = 2000); the "max95" column is the one-sided 95 % Clopper-Pearson upper bound of each false-pass rate.

Usage: .venv/bin/python benchmarks/gate_error.py [--sims 2000] [--boundary-sims 20000] [--seed 0]
       [--only false|boundary|power|survivor] [--sql-check 500]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import numpy as np
from scipy import stats

from tasks.decision.design import look_schedule
from tasks.decision.gate import PASS, judge, look_at
from tasks.quality.deltas import delta_row, pairs_row, parse_sample_stat
from tasks.quality.looks import Look, sequential_gate

CONF = 0.95
MEAN = parse_sample_stat("mean(score)")
COMMON = dict(
    run_id="sim",
    variant="var",
    reference_variant="ref",
    suite="arithmetic",
    metric="accuracy",
    unit="fraction",
    higher_is_better=True,
    confidence=CONF,
)
NS = (30, 80, 200, 1000)
# (label, p_ref, retention target, margin points): the gate settings simulated
SETTINGS = (
    ("retention 99 %", 0.25, 0.99, None),
    ("retention 99 %", 0.6, 0.99, None),
    ("retention 90 %", 0.6, 0.90, None),
    ("margin 5 points", 0.6, 0.99, 5.0),
)
ROWS: list[dict] = []  # every simulated row with its Python gate, for --sql-check


def draw(rng: np.random.Generator, n: int, p_ref: float, p_lost: float, p_gain: float) -> tuple[np.ndarray, np.ndarray]:
    """n pairs: the reference right with p_ref; of those the variant loses p_lost (absolute), of the others gains
    p_gain."""
    ref = (rng.random(n) < p_ref).astype(float)
    u = rng.random(n)
    var = ref.copy()
    var[(ref == 1) & (u < p_lost / p_ref)] = 0.0
    var[(ref == 0) & (u < p_gain / (1 - p_ref))] = 1.0
    return ref, var


def row_of(ref: np.ndarray, var: np.ndarray, look: Look) -> dict:
    return pairs_row(
        dict(COMMON, look_confidence=look.level, looks=look.number, looks_planned=look.planned),
        MEAN,
        "mean(score)",
        ref[None, :],
        var[None, :],
        resamples=2000,
        min_samples=30,
        seed=0,
        look=look,
    )


def gate_of(row: dict, target: float, margin: float | None, keep: bool = False) -> str:
    g = judge(row, target, margin, 30)
    if keep and len(ROWS) < 100_000:
        ROWS.append({**row, "_target": target, "_margin": margin, "_gate": g})
    return g


def old_gate(ref: np.ndarray, var: np.ndarray, target: float, margin: float | None) -> str:
    """The rule before: the same interval, except [0, 0] when no pair differs (retention [100, 100] %)."""
    row = row_of(ref, var, Look.fixed(CONF))
    if row["n_lost"] == 0 and row["n_gained"] == 0:
        row.update(ci_low=0.0, ci_high=0.0, retention_ci_low=1.0, retention_ci_high=1.0)
    return judge(row, target, margin, 30)


def fixed(ref: np.ndarray, var: np.ndarray, n: int, target: float, margin: float | None) -> str:
    return gate_of(row_of(ref[:n], var[:n], Look.fixed(CONF)), target, margin, keep=True)


def adaptive(ref: np.ndarray, var: np.ndarray, n: int, target: float, margin: float | None) -> tuple[str, int]:
    """The looks at n, 2n, 4n through sequential_gate; (final gate, items used)."""
    schedule = look_schedule(n, 4 * n)
    looks = sequential_gate(
        schedule,
        lambda k: gate_of(
            row_of(ref[: schedule[k]], var[: schedule[k]], look_at(CONF, schedule, k)), target, margin, keep=True
        ),
        lambda _: True,
    )
    return looks[-1][1], looks[-1][0]


def cells(p_ref: float, loss: float, pattern: str) -> tuple[float, float]:
    """(p_lost, p_gain) for an absolute loss `loss` (true delta -loss) and a discordance pattern."""
    if pattern == "losses only":
        return loss, 0.0
    gain = max(0.0, (0.15 - loss) / 2)
    return loss + gain, gain


def cp_high(k: int, n: int) -> float:
    return 1.0 if k == n else float(stats.beta.ppf(0.95, k + 1, n - k))


def false_pass(sims: int, seed: int) -> None:
    print("1. False pass (goal <= 2.5 %): true retention at or below the target; pass rates over", sims, "simulations")
    print(
        f"{'gate':>16} {'p_ref':>5} {'truth':>12} {'discordance':>12} {'n':>5} | {'old':>6} {'fixed':>6} {'max95':>6} "
        f"| "
        f"{'adaptive':>8} {'max95':>6} {'mean n':>7}"
    )
    worst = (0.0, "")
    for label, p_ref, target, margin in SETTINGS:
        if margin is None:
            truths = [(f"ret {r:.0%}", (1 - r) * p_ref) for r in ((target, target - 0.03, target - 0.08))]
        else:
            truths = [(f"{-m:+g} points", m / 100) for m in (margin, margin + 2, margin + 5)]
        for name, loss in truths:
            for pattern in ("losses only", "mixed 15 %"):
                p_lost, p_gain = cells(p_ref, loss, pattern)
                for n in NS:
                    rng = np.random.default_rng(
                        [seed, int(p_ref * 100), int(target * 1000), int(loss * 1e5), n, pattern == "losses only"]
                    )
                    old = fix = ada = used = 0
                    for _ in range(sims):
                        ref, var = draw(rng, 4 * n, p_ref, p_lost, p_gain)
                        old += old_gate(ref[:n], var[:n], target, margin) == PASS
                        fix += fixed(ref, var, n, target, margin) == PASS
                        g, items = adaptive(ref, var, n, target, margin)
                        ada += g == PASS
                        used += items
                    print(
                        f"{label:>16} {p_ref:>5} {name:>12} {pattern:>12} {n:>5} | {old / sims:>6.1%} "
                        f"{fix / sims:>6.1%} "
                        f"{cp_high(fix, sims):>6.1%} | {ada / sims:>8.1%} {cp_high(ada, sims):>6.1%} "
                        f"{used / sims:>7.0f}",
                        flush=True,
                    )
                    for rate, what in ((fix / sims, "fixed"), (ada / sims, "adaptive")):
                        if rate > worst[0]:
                            worst = (rate, f"{label}, p_ref {p_ref}, {name}, {pattern}, n {n}, {what}")
    print(f"highest false pass: {worst[0]:.2%} ({worst[1]})\n")


def boundary(sims: int, seed: int) -> None:
    """The size of the test: true retention exactly at the target, mixed discordance, many simulations."""
    print(
        "1b. At the target exactly (the test's size, nominal 2.5 %), mixed 15 % discordance; over", sims, "simulations"
    )
    print(f"{'gate':>16} {'p_ref':>5} {'n':>5} | {'fixed':>6} {'+-95%':>6} | {'adaptive':>8} {'+-95%':>6}")
    for label, p_ref, target, margin in SETTINGS:
        loss = margin / 100 if margin is not None else (1 - target) * p_ref
        p_lost, p_gain = cells(p_ref, loss, "mixed 15 %")
        for n in NS:
            rng = np.random.default_rng([seed, 11, int(p_ref * 100), int(target * 1000), int(loss * 1e5), n])
            fix = ada = 0
            for _ in range(sims):
                ref, var = draw(rng, 4 * n, p_ref, p_lost, p_gain)
                fix += fixed(ref, var, n, target, margin) == PASS
                ada += adaptive(ref, var, n, target, margin)[0] == PASS
            err = lambda k: 1.96 * np.sqrt(k / sims * (1 - k / sims) / sims)
            print(
                f"{label:>16} {p_ref:>5} {n:>5} | {fix / sims:>6.2%} {err(fix):>6.2%} | {ada / sims:>8.2%} "
                f"{err(ada):>6.2%}",
                flush=True,
            )
    print()


def power(sims: int, seed: int) -> None:
    print(
        "2. Power: a truly equal variant (delta 0), pass rates over", sims, "simulations; adaptive: looks at n, 2n, 4n"
    )
    print(
        f"{'gate':>16} {'p_ref':>5} {'discordance':>11} | "
        + " ".join(f"{f'n={n}':>9} {'adapt.':>7}" for n in (80, 200, 1000, 5000))
    )
    for label, p_ref, target, margin in (
        ("retention 99 %", 0.25, 0.99, None),
        ("retention 99 %", 0.6, 0.99, None),
        ("margin 5 points", 0.6, 0.99, 5.0),
        ("margin 2 points", 0.6, 0.99, 2.0),
    ):
        for disc in (0.02, 0.10):
            out = []
            for n in (80, 200, 1000, 5000):
                rng = np.random.default_rng([seed, 7, int(p_ref * 100), int(disc * 100), n, int(margin or 0)])
                fix = ada = 0
                for _ in range(sims):
                    ref, var = draw(rng, 4 * n, p_ref, disc / 2, disc / 2)
                    fix += fixed(ref, var, n, target, margin) == PASS
                    ada += adaptive(ref, var, n, target, margin)[0] == PASS
                out.append(f"{fix / sims:>9.1%} {ada / sims:>7.1%}")
            print(f"{label:>16} {p_ref:>5} {disc:>11.0%} | " + " ".join(out), flush=True)
    print()


def survivor(sims: int, seed: int) -> None:
    """Through delta_row with sample rows: errored requests dropped from the pairs (before) or counted as wrong
    (now)."""
    print("3. Survivor bias: the variant answers as the reference but errors on 8 % of items the reference gets right")
    print(
        "   (p_ref 0.6: true retention 86.7 % counting errors as wrong; the gate's target 99 %); pass rates over",
        sims,
        "simulations",
    )
    print(f"{'n':>5} | {'dropped, old [0,0]':>18} {'dropped, Tango':>14} {'counted as wrong':>16}")
    score = {
        "run_id": "sim",
        "suite": "arithmetic",
        "metric": "accuracy",
        "unit": "fraction",
        "higher_is_better": True,
        "value": None,
        "n": 0,
        "sample_stat": "mean(score)",
    }
    for n in (80, 200, 1000):
        rng = np.random.default_rng([seed, 3, n])
        counts = [0, 0, 0]
        for _ in range(sims):
            ref = (rng.random(n) < 0.6).astype(float)
            err = (ref == 1) & (rng.random(n) < 0.08 / 0.6)
            rows = lambda v, x, bad: [
                {
                    "variant": v,
                    "suite": "arithmetic",
                    "sample_id": f"s{i}",
                    "score": None if bad[i] else x[i],
                    "valid": not bad[i],
                    "details": json.dumps({"errored": int(bad[i])}),
                }
                for i in range(n)
            ]
            r, v = rows("ref", ref, np.zeros(n, bool)), rows("var", ref, err)
            now = delta_row({**score, "variant": "var"}, {**score, "variant": "ref"}, r, v, reference_variant="ref")
            kept = [s for s in v if s["score"] is not None]  # before: errored samples left out of the pairs
            before = delta_row(
                {**score, "variant": "var"}, {**score, "variant": "ref"}, r, kept, reference_variant="ref"
            )
            shortcut = dict(before, retention_ci_low=1.0, retention_ci_high=1.0) if before["n_lost"] == 0 else before
            counts[0] += judge(shortcut, 0.99) == PASS
            counts[1] += judge(before, 0.99) == PASS
            counts[2] += judge(now, 0.99) == PASS
        print(f"{n:>5} | {counts[0] / sims:>18.1%} {counts[1] / sims:>14.1%} {counts[2] / sims:>16.1%}", flush=True)
    print()


def sql_check(k: int) -> None:
    """Put k simulated rows through v_quality_gate (a temporary warehouse) and compare with the Python gate."""
    from warehouse.contract import write_table
    from warehouse.db import load_run, open_warehouse

    rng = np.random.default_rng(0)
    picked = [ROWS[i] for i in rng.choice(len(ROWS), size=min(k, len(ROWS)), replace=False)]
    columns = (
        "reference_value",
        "value",
        "delta",
        "ci_low",
        "ci_high",
        "confidence",
        "p_value",
        "n",
        "verdict",
        "method",
        "p_value_adjusted",
        "p_family_size",
        "n_lost",
        "n_gained",
        "retention_ci_low",
        "retention_ci_high",
        "look_confidence",
        "looks",
        "looks_planned",
    )
    bad = 0
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "wh.duckdb"
        groups: dict[tuple, list[dict]] = {}
        for r in picked:
            groups.setdefault((r["_target"], r["_margin"]), []).append(r)
        for g, (key, rows) in enumerate(groups.items()):
            run = f"sim{g}"
            res = Path(tmp) / run / "results"
            decision = {"retention": key[0], "margin_points": key[1]}
            write_table(
                res,
                "runs",
                "run",
                [
                    {
                        "run_id": run,
                        "config_name": "sim",
                        "status": "ok",
                        "reference_variant": "ref",
                        "primary_quality_metric": "arithmetic.accuracy",
                        "config_json": json.dumps({"decision": decision}),
                    }
                ],
            )
            names = ["ref"] + [f"v{i}" for i in range(len(rows))]
            for name in names:
                write_table(
                    res,
                    "variants",
                    name,
                    [{"run_id": run, "variant": name, "is_reference": name == "ref", "status": "ok"}],
                )
            for i, r in enumerate(rows):
                write_table(
                    res,
                    "quality_deltas",
                    f"v{i}",
                    [
                        {
                            **{c: r[c] for c in columns},
                            "run_id": run,
                            "variant": f"v{i}",
                            "reference_variant": "ref",
                            "suite": "arithmetic",
                            "metric": "accuracy",
                            "unit": "fraction",
                            "higher_is_better": True,
                        }
                    ],
                )
            load_run(Path(tmp) / run, db)
            with open_warehouse(db, read_only=True) as con:
                got = dict(con.execute("select variant, gate from v_quality_gate where run_id = ?", [run]).fetchall())
            bad += sum(got[f"v{i}"] != r["_gate"] for i, r in enumerate(rows))
    print(f"SQL check: {len(picked)} simulated rows through v_quality_gate, {bad} judged differently from Python\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sims", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--only", choices=("false", "boundary", "power", "survivor"))
    ap.add_argument("--boundary-sims", type=int, default=20000, help="simulations per cell at the target exactly")
    ap.add_argument("--sql-check", type=int, default=300, help="simulated rows put through v_quality_gate (0: none)")
    args = ap.parse_args()
    t0 = time.monotonic()
    if args.only in (None, "false"):
        false_pass(args.sims, args.seed)
    if args.only in (None, "boundary"):
        boundary(args.boundary_sims, args.seed)
    if args.only in (None, "power"):
        power(args.sims, args.seed)
    if args.only in (None, "survivor"):
        survivor(min(args.sims, 500), args.seed)
    if args.sql_check and ROWS:
        sql_check(args.sql_check)
    print(f"{time.monotonic() - t0:.0f} s")


if __name__ == "__main__":
    main()
