"""Benchmark: do the quality verdicts and the perf intervals keep their promises? (issue 15)

Simulates data with a known truth and runs the code the pipeline runs on it
(tasks.quality.deltas.paired_test and verdict, tasks.core.stat_tests, tasks.perf.metrics), printing:

1. Paired 0/1 scores (accuracy-like) at n = 50, 100, 500 and discordance rates 5, 15 and 25 %
   (the demo's arithmetic suite: q3_k_m and q2_k against q4_1 disagree on ~15-25 % of 80
   samples), true delta 0 and -5 points: the share of samples declared "worse" (at delta 0 a
   false alarm; goal <= 5 %; at -5 points the power), and how often Tango's interval covers
   the true delta (goal 93-97 %), next to the old percentile bootstrap with its CI-only verdict.
2. A family of 20 metrics with no true change (n = 100, 15 % discordance): how often at least
   one is called "worse" or "better", with raw p and with Holm's adjustment (goal <= 5 %).
3. Continuous per-sample scores: the BCa interval's coverage and the false-"worse" rate of
   BCa + sign-flip test, for a skewed score with a known mean shift (0 and +0.05) and a
   KL-like score (reference 0, variant lognormal; mean, and p99 at n = 50 to 1000: the
   pipeline writes no p99 interval below 1000 samples, this shows why).
4. Perf intervals with 2, 3 and 5 repeats under ~15 % run-to-run noise (normal, lognormal, and
   "stall": lognormal with one repeat in ten 7x slower, a neighbour's stall) and 30 requests per
   repeat with 30 % within-run spread: coverage of the log-scale t interval the pipeline writes
   (tasks.core.stat_tests.log_t_interval; TTFT mean, throughput) and of the plain t interval it
   replaced, against the long-run average of the per-repeat figure, with how often each has a
   bound below 0 (issue 36: "no latency, rate or throughput interval crosses zero"); next to the
   old cluster bootstrap (fewer simulations: it is slow).

Monte-Carlo error: with S simulations a coverage near 95 % is +- 1.96 sqrt(0.95 * 0.05 / S)
(+-1.0 % at S = 2000, +-1.4 % at 1000, +-2.1 % at 400); it is printed with each block.

The continuous false-alarm rate runs the permutation test only where the interval excludes 0:
elsewhere the verdict is inconclusive whatever the test says, so the rate is the pipeline's.

Usage: .venv/bin/python benchmarks/stats_coverage.py [--sims 2000] [--sims-continuous 1000]
       [--sims-old 400] [--families 1000] [--requests 30] [--seed 0] [--only binary|family|continuous|perf]
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np
from scipy import stats

from tasks.core.stat_tests import (
    holm,
    log_t_interval,
    paired_bootstrap_interval,
    sign_flip_p,
    t_interval,
    tango_interval,
)
from tasks.perf.metrics import bootstrap_ci  # (the old perf interval, kept for the jitter figures)
from tasks.quality.deltas import MIN_TAIL_SAMPLES, _delta_of, paired_test, parse_sample_stat, verdict

CONF = 0.95
ALPHA = 1 - CONF
MEAN = parse_sample_stat("mean(score)")
P99 = parse_sample_stat("p99(score)")


def mc_error(sims: int) -> str:
    return f"Monte-Carlo error +-{196 * math.sqrt(0.95 * 0.05 / sims):.1f} % on a coverage near 95 %"


def binary_pairs(rng: np.random.Generator, n: int, disc: float, delta: float) -> tuple[np.ndarray, np.ndarray]:
    """n pairs: losses (1, 0) with probability (disc - delta) / 2, gains (0, 1) with (disc + delta) / 2,
    concordant pairs right or wrong with even odds. True delta (variant - reference) = `delta`."""
    p_loss, p_gain = (disc - delta) / 2, (disc + delta) / 2
    u = rng.random(n)
    ref = np.where(u < p_loss, 1.0, np.where(u < p_loss + p_gain, 0.0, (rng.random(n) < 0.5) * 1.0))
    var = np.where(u < p_loss, 0.0, np.where(u < p_loss + p_gain, 1.0, ref))
    return ref[None, :], var[None, :]


def old_binary(rng: np.random.Generator, ref: np.ndarray, var: np.ndarray, resamples: int = 2000) -> tuple[str, tuple]:
    """a740071's verdict on 0/1 scores: percentile bootstrap of the paired delta, CI excluding 0 -> finding.
    Resampling n pairs of 0/1 outcomes is a multinomial draw of (losses, gains, ties): same distribution."""
    n = ref.shape[1]
    losses = int(np.sum((ref == 1) & (var == 0)))
    gains = int(np.sum((ref == 0) & (var == 1)))
    counts = rng.multinomial(n, [losses / n, gains / n, 1 - (losses + gains) / n], size=resamples)
    lo, hi = np.quantile((counts[:, 1] - counts[:, 0]) / n, [ALPHA / 2, 1 - ALPHA / 2])
    d = (gains - losses) / n
    return verdict(d, (float(lo), float(hi)), n, True, 30), (lo, hi)


def part_binary(sims: int, seed: int) -> None:
    print(f"\n1. Paired 0/1 scores, {sims} simulations per row ({mc_error(sims)})")
    print(
        f"{'n':>5} {'discord':>8} {'delta':>7} | {'worse new':>9} {'worse old':>9} | "
        f"{'cover Tango':>11} {'as written':>10} {'cover old':>9} | {'width Tango':>11}"
    )
    for n in (50, 100, 500):
        for disc in (0.05, 0.15, 0.25):
            for delta in (0.0, -0.05):
                rng = np.random.default_rng([seed, n, int(disc * 100), int(-delta * 100)])
                worse_new = worse_old = cover_tango = cover_written = cover_old = 0
                widths = []
                for _ in range(sims):
                    ref, var = binary_pairs(rng, n, disc, delta)
                    ci, p, _ = paired_test(MEAN, ref, var, 2000, CONF, 0)
                    d = float(var.mean() - ref.mean())
                    worse_new += verdict(d, ci, n, True, 30, p, ALPHA) == "worse"
                    cover_written += ci[0] <= delta <= ci[1]
                    lo, hi = tango_interval(int(np.sum(ref > var)), int(np.sum(var > ref)), n, CONF)
                    cover_tango += lo <= delta <= hi
                    widths.append(hi - lo)
                    v_old, (lo, hi) = old_binary(rng, ref, var)
                    worse_old += v_old == "worse"
                    cover_old += lo <= delta <= hi
                print(
                    f"{n:>5} {disc:>8.0%} {delta * 100:>+7.0f} | {worse_new / sims:>9.1%} {worse_old / sims:>9.1%} | "
                    f"{cover_tango / sims:>11.1%} {cover_written / sims:>10.1%} {cover_old / sims:>9.1%} | "
                    f"{np.median(widths) * 100:>9.1f} pt"
                )
    print(
        "(as written: the interval stored, [0, 0] where no sample differs, 'identical'; Tango's own interval"
        " is wider there)"
    )


def part_family(sims: int, seed: int, m: int = 20, n: int = 100, disc: float = 0.15) -> None:
    print(f"\n2. A family of {m} tested metrics with no true change (n = {n}, {disc:.0%} discordance), {sims} families")
    rng = np.random.default_rng([seed, 2])
    any_raw = any_holm = 0
    for _ in range(sims):
        rows = []
        for _ in range(m):
            ref, var = binary_pairs(rng, n, disc, 0.0)
            ci, p, _ = paired_test(MEAN, ref, var, 2000, CONF, 0)
            rows.append((float(var.mean() - ref.mean()), ci, p))
        adjusted = holm([p for _, _, p in rows])
        finding = ("worse", "better")
        any_raw += any(verdict(d, ci, n, True, 30, p, ALPHA) in finding for d, ci, p in rows)
        any_holm += any(verdict(d, ci, n, True, 30, a, ALPHA) in finding for (d, ci, _), a in zip(rows, adjusted))
    print(f"   at least one false 'worse'/'better': raw p {any_raw / sims:.1%}, Holm-adjusted p {any_holm / sims:.1%}")


def continuous_case(rng: np.random.Generator, kind: str, n: int, delta: float) -> tuple[np.ndarray, np.ndarray]:
    if kind == "skewed score":
        ref = rng.gamma(2.0, 0.1, n)  # e.g. a drift distance: mean 0.2, right-skewed
        noise = rng.gamma(1.0, 0.05, n) - 0.05  # paired change: skewed, mean 0
        return ref[None, :], (ref + delta + noise)[None, :]
    return np.zeros((1, n)), rng.lognormal(-3.0, 1.0, n)[None, :]  # KL-like: the reference's own KL is 0


def part_continuous(sims: int, seed: int, resamples: int = 2000) -> None:
    print(
        f"\n3. Continuous scores: BCa bootstrap (B = {resamples}) and sign-flip test, {sims} simulations per row "
        f"({mc_error(sims)})"
    )
    # p99 of the KL-like score: exp(-3 + z_0.99); but a sample p99 at small n is biased, so the truth
    # here is the population p99 (what the metric claims to estimate).
    truth = {("KL-like", "mean"): math.exp(-3.0 + 0.5), ("KL-like", "p99"): math.exp(-3.0 + stats.norm.ppf(0.99))}
    print(f"{'case':>14} {'stat':>5} {'n':>5} {'delta':>7} | {'worse':>7} {'cover BCa':>9}   (worse: at delta 0 only)")
    for kind, stat_name, deltas in (
        ("skewed score", "mean", (0.0, 0.05)),
        ("KL-like", "mean", (None,)),
        ("KL-like", "p99", (None,)),
    ):
        stat = MEAN if stat_name == "mean" else P99
        for n in (50, 100, 500) if stat_name == "mean" else (50, 200, 500, 1000):
            for delta in deltas:
                rng = np.random.default_rng([seed, 3, n, len(kind), len(stat_name), int((delta or 0) * 100)])
                true = truth.get((kind, stat_name), delta)
                worse = cover = 0
                for i in range(sims):
                    ref, var = continuous_case(rng, kind, n, delta or 0.0)
                    delta_of = _delta_of(stat, ref, var)
                    lo, hi, _ = paired_bootstrap_interval(delta_of, n, resamples, CONF, i)
                    cover += lo <= true <= hi
                    d = float(stat.compute(*var) - stat.compute(*ref))
                    if delta == 0 and not lo <= 0 <= hi:  # only then can the verdict be a (false) finding
                        p = sign_flip_p(delta_of, n, seed=i)
                        # higher is worse here (a distance, a KL): "worse" means the variant's score went up
                        worse += verdict(d, (lo, hi), n, False, 30, p, ALPHA) == "worse"
                label = f"{true:+.3f}" if delta is None else f"{delta:+.2f}"
                rate = f"{worse / sims:.1%}" if delta == 0 else "-"
                written = "" if stat_name != "p99" or n >= MIN_TAIL_SAMPLES * 100 else "  (not written: no_ci)"
                print(f"{kind:>14} {stat_name:>5} {n:>5} {label:>7} | {rate:>7} {cover / sims:>9.1%}{written}")


def repeat_ttfts(rng: np.random.Generator, k: int, requests: int, run_cv: float, noise: str) -> np.ndarray:
    """k repeats x `requests` TTFTs (ms): each repeat's level moves by ~run_cv, requests spread ~30 % within;
    "stall": as lognormal, and each repeat is 7x slower with probability 1/10 (a busy neighbour)."""
    if noise == "normal":
        level = 100.0 * (1 + run_cv * rng.standard_normal(k))
    else:  # lognormal with the same CV and mean 100
        s = math.sqrt(math.log(1 + run_cv**2))
        level = 100.0 * rng.lognormal(-s * s / 2, s, k)
        if noise == "stall":
            level *= np.where(rng.random(k) < 0.1, 7.0, 1.0)
    s_in = math.sqrt(math.log(1 + 0.3**2))
    return level[:, None] * rng.lognormal(-s_in * s_in / 2, s_in, (k, requests))


def part_perf(sims: int, sims_old: int, seed: int, requests: int = 30, run_cv: float = 0.15) -> None:
    old = f"{sims_old} ({mc_error(sims_old)})" if sims_old else "not run"
    print(
        f"\n4. Perf intervals over repeats: {run_cv:.0%} run-to-run noise, {requests} requests per repeat with 30 % "
        f"spread within; log-scale t (written) and plain t: {sims} simulations ({mc_error(sims)}), old cluster "
        f"bootstrap (1000 resamples): {old}"
    )
    print(
        f"{'noise':>9} {'repeats':>7} | {'TTFT mean log':>13} {'tput log':>8} {'<0 log':>6} | "
        f"{'TTFT mean t':>11} {'tput t':>6} {'<0 t':>6} | {'TTFT mean old':>13} {'tput old':>8} | "
        f"{'log width / mean':>16}"
    )
    for noise in ("normal", "lognormal", "stall"):
        # the long-run average of each per-repeat figure, from 200,000 simulated repeats
        rng = np.random.default_rng([seed, 4, len(noise)])
        big = repeat_ttfts(rng, 200_000, requests, run_cv, noise)
        true_mean = float(big.mean())
        true_tput = float((1000.0 / big.mean(axis=1)).mean())
        del big
        for k in (2, 3, 5):
            rng = np.random.default_rng([seed, 5, k, len(noise)])
            hit_log, hit_t, hit_old = np.zeros(2), np.zeros(2), np.zeros(2)
            below_log = below_t = 0
            widths = []
            for i in range(sims):
                groups = repeat_ttfts(rng, k, requests, run_cv, noise)
                figures = ([g.mean() for g in groups], [1000.0 / g.mean() for g in groups])
                for j, (vals, true) in enumerate(zip(figures, (true_mean, true_tput))):
                    lo, hi, _ = log_t_interval(vals, CONF)
                    hit_log[j] += lo <= true <= hi
                    below_log += lo <= 0
                    if j == 0:
                        widths.append((hi - lo) / true)
                    lo, hi, _ = t_interval(vals, CONF)
                    hit_t[j] += lo <= true <= hi
                    below_t += lo <= 0
                if i < sims_old:
                    units = [[[v] for v in g] for g in groups]
                    old = (
                        bootstrap_ci(units, np.mean, CONF, 1000, i),
                        bootstrap_ci([[[v]] for v in figures[1]], np.mean, CONF, 1000, i),
                    )
                    for j, ((lo, hi), true) in enumerate(zip(old, (true_mean, true_tput))):
                        hit_old[j] += lo <= true <= hi
            g, t = hit_log / sims, hit_t / sims
            o = [f"{x:.1%}" for x in hit_old / sims_old] if sims_old else ["-"] * 2
            print(
                f"{noise:>9} {k:>7} | {g[0]:>13.1%} {g[1]:>8.1%} {below_log / (2 * sims):>6.1%} | "
                f"{t[0]:>11.1%} {t[1]:>6.1%} {below_t / (2 * sims):>6.1%} | {o[0]:>13} {o[1]:>8} | "
                f"{np.median(widths):>15.0%}"
            )
    print(
        "(throughput per repeat: output tokens / time, modelled as 1000 / the repeat's mean TTFT; <0: share of"
        " intervals with a lower bound at or below 0; old throughput interval: percentile bootstrap of the"
        " repeats' figures; the TTFT p99 interval is order statistics of the pooled requests, never below the"
        " smallest TTFT)"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sims", type=int, default=2000, help="simulations per row for 0/1 scores and perf intervals")
    ap.add_argument("--sims-continuous", type=int, default=1000, help="simulations per row for continuous scores")
    ap.add_argument(
        "--sims-old", type=int, default=400, help="simulations per row for the old cluster bootstrap (0: skip it)"
    )
    ap.add_argument("--requests", type=int, default=30, help="measured requests per repeat in the perf part")
    ap.add_argument("--families", type=int, default=1000, help="simulated families of 20 metrics")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--only", choices=["binary", "family", "continuous", "perf"], help="run one part")
    args = ap.parse_args()
    for bad in ("sims", "sims_continuous", "families", "requests"):
        if getattr(args, bad) < 1:
            ap.error(f"--{bad.replace('_', '-')}: give a positive count")
    if args.sims_old < 0:
        ap.error("--sims-old: give 0 (skip) or a positive count")
    t0 = time.perf_counter()
    parts = {
        "binary": lambda: part_binary(args.sims, args.seed),
        "family": lambda: part_family(args.families, args.seed),
        "continuous": lambda: part_continuous(args.sims_continuous, args.seed),
        "perf": lambda: part_perf(args.sims, args.sims_old, args.seed, args.requests),
    }
    for name, run in parts.items():
        if args.only in (None, name):
            t = time.perf_counter()
            run()
            print(f"   ({time.perf_counter() - t:.0f} s)", flush=True)
    print(f"\ntotal {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
