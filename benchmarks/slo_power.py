"""Benchmark: the SLO claim's power and the design effect's bias, by truth (issue 47, items 1 and 2).

A step's claim "the p-th percentile of a latency is within its limit, at confidence c" is judged by
tasks.decision.slo.check_step: the order-statistic bound over n_eff = n / deff requests, deff estimated by
tasks.core.percentiles.effective_requests (Geyer's initial positive sequence over the ranks' autocorrelations,
floored at 1). Here the latencies of a step come from a known truth, one limited latency (the TTFT; an E2EL
limit alone is judged the same way):
- `iid`: independent lognormal latencies (sigma 0.6 on the log scale);
- `ar0.5`, `ar0.9`: log-latencies an AR(1) of that rho, stationary N(0, 1) scaled by sigma;
- `md1-<u>`, `mm1-<u>`: a one-slot FCFS queue (instruments/slo_server.py's server) at utilisation u, Poisson
  arrivals, deterministic (M/D/1) or exponential (M/M/1) service of mean 1; the latency is waiting + service,
  by Lindley's recursion, every chain started from the stationary wait (drawn from a long run's waits), so a
  step sees the queue in its steady state (a real rate step starts empty and drops a warm-up share).
Each step has `repeats` independent repeats of `per` requests in send order (the demo's 6 x 4: six stationary
stretches of 4). The true percentile is exact (lognormal: exp(sigma z_p); M/M/1: the sojourn is Exp(1 - u);
M/D/1: Erlang's waiting-time distribution, instruments.slo_server.md1_wait_cdf) and checked against the long run.

For each truth, percentile (p50, p75, p90, p99: the shipped configs' decision.percentile) and step size (the
demo's 6 x 4 at the demo's look-corrected 98.3 % and at 95 %, then 60, 299, 439 (p99's rate step in one repeat),
3 x 159 (nightly-gpu's p99 rate step) and 1000 requests at 95 %), the share of steps claimed `met` with the limit
set so the true percentile is 50 %, 80 % and 100 % of it (at 100 % the claim is just true: the share is the
false "meets" rate at the boundary, at most 1 - c for a continuous latency). "whole": the same counting every
request as independent (deff 1).

How it is judged: the latencies of all steps of a cell as one numpy array; n_eff by
effective_requests_rows (effective_requests a row at a time, the function check_step's count calls), the
`allowed` count by tasks.decision.slo.counted_thresholds (check_step's), `met` when the requests over the limit
are at most that (check_step's rule with one limit, no failures, not a rate step). The first 2 steps of every
cell are also judged by check_step itself on RequestRecords, and the script stops if any disagrees.

The design effect: for each truth and size, the estimate's mean and 10/50/90 % quantiles over the steps (a nan
deff, every latency equal, counts as 1, as check_step counts n then), against two truths:
- the finite-n design effect of the over count at each percentile: Var(over) / (n q (1 - q)) over the simulated
  steps with the limit at the true percentile (q = 1 - p/100): what the count should be divided by;
- the long-run design effect of the ranks (what Geyer's sum estimates) and of the indicators at each percentile,
  by batch means over one long run (CHAINS chains x LONG requests, batches of BATCH: deff = BATCH x the variance
  of the batch means / the variance of one request); for an AR(1) the ranks' is also exact:
  1 + 2 sum_k (6 / pi) arcsin(rho^k / 2) (the Spearman correlation of a Gaussian pair), near but below
  (1 + rho) / (1 - rho).
Monte-Carlo error of a share near 5 % from S steps: +-1.96 sqrt(0.05 x 0.95 / S) (+-0.7 % at 4000).

Usage: .venv/bin/python -m benchmarks.slo_power [--sims 4000] [--seed 0] [--only iid,ar0.5,...]
"""

from __future__ import annotations

import argparse
import math
import time
from functools import lru_cache

import numpy as np
from scipy import stats
from scipy.optimize import brentq

from instruments.slo_server import md1_wait_cdf
from tasks.core.percentiles import effective_requests_rows, look_confidence, min_requests
from tasks.decision.slo import check_step, counted_thresholds
from tasks.perf.metrics import RequestRecord

SIGMA = 0.6  # log-scale spread of the lognormal and AR(1) truths (benchmarks/slo_dependence.py's)
CONF = 0.95
DEMO_CONF = look_confidence(CONF, 3)  # configs/demo.yaml: decision.extend, 3 looks (DecisionSpec.fixed_step_confidence)
TRUTHS = ("iid", "ar0.5", "ar0.9", "md1-0.2", "md1-0.5", "md1-0.8", "mm1-0.2", "mm1-0.5", "mm1-0.8")
PCTS = (50.0, 75.0, 90.0, 99.0)
# (label, repeats, per, confidence)
SIZES = (
    ("6x4@98.3", 6, 4, DEMO_CONF),
    ("6x4", 6, 4, CONF),
    ("60", 1, 60, CONF),
    ("299", 1, 299, CONF),
    ("439", 1, 439, CONF),
    ("3x159", 3, 159, CONF),
    ("1000", 1, 1000, CONF),
)
FACTORS = (0.5, 0.8, 1.0)  # the true percentile / the limit
CHAINS, LONG, BATCH, BURN = 200, 40_000, 2_000, 5_000
CHECKED = 2  # steps per cell judged by check_step too


def true_percentile(truth: str, pct: float) -> float:
    p = pct / 100.0
    if truth == "iid" or truth.startswith("ar"):
        return math.exp(SIGMA * stats.norm.ppf(p))
    u = float(truth.split("-")[1])
    if truth.startswith("mm1"):
        return -math.log(1.0 - p) / (1.0 - u)  # FCFS M/M/1 sojourn ~ Exp(mu - lambda), mu = 1
    f = lambda t: md1_wait_cdf(t, u, 1.0) - p
    if f(0.0) >= 0:
        return 1.0  # on the atom: no wait (P(W = 0) = 1 - u >= p)
    hi = 1.0
    while f(hi) < 0:
        hi *= 2
    return brentq(f, 0.0, hi, xtol=1e-10) + 1.0


def ar1(rng: np.random.Generator, rows: int, k: int, rho: float) -> np.ndarray:
    z = np.empty((rows, k))
    z[:, 0] = rng.standard_normal(rows)
    scale = math.sqrt(1 - rho * rho)
    for t in range(1, k):
        z[:, t] = rho * z[:, t - 1] + scale * rng.standard_normal(rows)
    return z


def queue(
    rng: np.random.Generator, w0: np.ndarray, k: int, util: float, exp_service: bool
) -> tuple[np.ndarray, np.ndarray]:
    """(latencies = wait + service, waits) of len(w0) FCFS one-slot chains of k requests (Lindley's recursion),
    the first request waiting w0."""
    rows = w0.size
    lat, waits = np.empty((rows, k)), np.empty((rows, k))
    w = w0.copy()
    for t in range(k):
        s = rng.exponential(1.0, rows) if exp_service else 1.0
        waits[:, t] = w
        lat[:, t] = w + s
        w = np.maximum(0.0, w + s - rng.exponential(1.0 / util, rows))
    return lat, waits


def long_run(rng: np.random.Generator, truth: str) -> tuple[np.ndarray, np.ndarray | None]:
    """(CHAINS x LONG latencies in steady state, the stationary waits seen: a queue's pool of starting waits)."""
    if truth == "iid" or truth.startswith("ar"):
        rho = 0.0 if truth == "iid" else float(truth[2:])
        return np.exp(SIGMA * ar1(rng, CHAINS, LONG, rho)), None
    lat, waits = queue(rng, np.zeros(CHAINS), BURN + LONG, float(truth.split("-")[1]), truth.startswith("mm1"))
    return lat[:, BURN:], waits[:, BURN:].ravel()


def batch_deff(x: np.ndarray) -> float:
    """BATCH x Var(batch means) / Var(x), x: CHAINS x LONG, batches within each chain."""
    means = x[:, : (x.shape[1] // BATCH) * BATCH].reshape(x.shape[0], -1, BATCH).mean(axis=2)
    var = x.var()
    return float(BATCH * means.var() / var) if var > 0 else math.nan


def ar_rank_deff(rho: float) -> float:
    k = np.arange(1, 2000)
    return float(1 + 2 * np.sum(6 / math.pi * np.arcsin(rho**k / 2)))


def steps(rng: np.random.Generator, truth: str, sims: int, repeats: int, per: int, waits) -> np.ndarray:
    """sims x (repeats * per) latencies: each repeat an independent stationary stretch of per requests."""
    rows = sims * repeats
    if truth == "iid" or truth.startswith("ar"):
        rho = 0.0 if truth == "iid" else float(truth[2:])
        lat = np.exp(SIGMA * (rng.standard_normal((rows, per)) if rho == 0 else ar1(rng, rows, per, rho)))
    else:
        w0 = rng.choice(waits, rows)
        lat = queue(rng, w0, per, float(truth.split("-")[1]), truth.startswith("mm1"))[0]
    return lat.reshape(sims, repeats * per)


@lru_cache(maxsize=None)
def allowed(n: int, n_eff: int, pct: float, conf: float) -> int:
    return counted_thresholds(n, n_eff, pct, conf)[0]


def records(lat: np.ndarray, repeats: int, per: int) -> list[list[RequestRecord]]:
    return [
        [
            RequestRecord(i, "ok", float(i), ttft_ms=float(lat[r * per + i]), e2el_ms=float(lat[r * per + i]) + 1.0)
            for i in range(per)
        ]
        for r in range(repeats)
    ]


def cell(truth: str, lat: np.ndarray, repeats: int, per: int, conf: float, truths: dict[float, float]):
    """(claims[pct] = (met at each factor), whole[pct] = (met at 0.5, 1.0), deff estimates, Var ratio[pct],
    check_step disagreements, check_step calls)."""
    sims, n = lat.shape
    n_eff, deff = effective_requests_rows(lat, [per] * repeats)
    claims, whole, ratio = {}, {}, {}
    bad = calls = 0
    for pct in PCTS:
        q = 1.0 - pct / 100.0
        cap = np.array([allowed(n, int(e), pct, conf) for e in n_eff])
        whole_cap = allowed(n, n, pct, conf)
        met = []
        for f in FACTORS:
            over = np.sum(lat > truths[pct] / f, axis=1)
            met.append(over <= cap)
            if f == 1.0:
                ratio[pct] = float(over.var() / (n * q * (1 - q)))
            if f in (0.5, 1.0):
                whole.setdefault(pct, []).append(float(np.mean(over <= whole_cap)))
            for i in range(min(CHECKED, sims)):
                c = check_step(records(lat[i], repeats, per), {"ttft_ms": truths[pct] / f}, pct, conf)
                calls += 1
                bad += c.met != bool(met[-1][i]) or c.n_effective != int(n_eff[i])
        claims[pct] = [float(np.mean(m)) for m in met]
    return claims, whole, np.where(np.isnan(deff), 1.0, deff), ratio, bad, calls


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sims", type=int, default=4000, help="steps per cell")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--only", help="comma-separated truths (default all)")
    args = ap.parse_args()
    truths = args.only.split(",") if args.only else list(TRUTHS)
    t_all = time.perf_counter()
    mc = 1.96 * math.sqrt(0.05 * 0.95 / args.sims) * 100
    print(f"{args.sims} steps per cell (Monte-Carlo error +-{mc:.1f} % near 5 %); sigma {SIGMA}; one limited latency")
    table, whole_t, deff_t, long_t = [], [], [], []
    bad_all = calls_all = 0
    for ti, truth in enumerate(truths):
        t0 = time.perf_counter()
        rng = np.random.default_rng([args.seed, ti])
        tp = {pct: true_percentile(truth, pct) for pct in PCTS}
        lat, waits = long_run(rng, truth)
        sim_tp = {pct: float(np.percentile(lat, pct)) for pct in PCTS}
        u = stats.rankdata(lat.ravel()).reshape(lat.shape) / lat.size
        rank_d = batch_deff(u)
        del u
        ind_d = {pct: batch_deff((lat > tp[pct]).astype(float)) for pct in PCTS}
        exact = f" (exact {ar_rank_deff(float(truth[2:])):.2f})" if truth.startswith("ar") else ""
        long_t.append(
            f"{truth:>8} | "
            + " ".join(f"p{p:g} {tp[p]:7.3f} ({sim_tp[p]:7.3f})" for p in PCTS)
            + f" | ranks {rank_d:5.2f}{exact:<13} | "
            + " ".join(f"{ind_d[p]:5.2f}" for p in PCTS)
        )
        del lat
        t_long = time.perf_counter() - t0
        rows: dict[float, list[str]] = {p: [] for p in PCTS}
        wrows: dict[float, list[str]] = {p: [] for p in PCTS}
        for si, (label, repeats, per, conf) in enumerate(SIZES):
            n = repeats * per
            lat = steps(np.random.default_rng([args.seed, ti, si]), truth, args.sims, repeats, per, waits)
            claims, whole, deff, ratio, bad, calls = cell(truth, lat, repeats, per, conf, tp)
            bad_all, calls_all = bad_all + bad, calls_all + calls
            for p in PCTS:
                need = min_requests(p, conf)
                if need is None or n < need:
                    rows[p].append(f"{'-':>11}")
                    wrows[p].append(f"{'-':>8}")
                else:
                    atom = truth.startswith("md1") and 1.0 - float(truth.split("-")[1]) > p / 100.0
                    cells = "/".join(f"{c * 100:3.0f}" for c in claims[p])
                    rows[p].append(f" {cells}" if not atom else f"{cells}*")
                    wrows[p].append(" " + "/".join(f"{c * 100:3.0f}" for c in whole[p]))
            if label != "6x4@98.3":  # the same requests as 6x4: one deff row
                q10, q50, q90 = np.quantile(deff, [0.1, 0.5, 0.9])
                deff_t.append(
                    f"{truth:>8} {label:>6} | {deff.mean():5.2f} {q10:5.2f} {q50:5.2f} {q90:5.2f} | "
                    + " ".join(f"{ratio[p]:5.2f}" for p in PCTS)
                )
        for p in PCTS:
            table.append(f"{truth:>8} p{p:<3g}|" + "".join(rows[p]))
            whole_t.append(f"{truth:>8} p{p:<3g}|" + "".join(wrows[p]))
        print(f"  {truth}: long run {t_long:.1f} s, steps {time.perf_counter() - t0 - t_long:.1f} s", flush=True)

    head = "".join(f"{label:>11}" for label, *_ in SIZES)
    print("\nclaimed `met`, % of steps, the true percentile at 50 / 80 / 100 % of the limit (-: n cannot show it)")
    print(f"{'truth':>8} pct |{head}")
    print("\n".join(table))
    print(
        "*: the percentile falls on M/D/1's atom at the service time (no wait, P = 1 - u > p): at 100 % of the limit "
        "P(latency > limit) = u < 1 - p, the claim is true and not at its boundary"
    )
    print("\nthe same counting every request (deff 1): % met at 50 / 100 % of the limit")
    print(f"{'truth':>8} pct |" + "".join(f"{label:>8}" for label, *_ in SIZES))
    print("\n".join(whole_t))
    print("\ndesign effect: the estimate over the steps (mean, q10, q50, q90) | the over count's Var / binomial at")
    quantiles = " ".join(f"{q:>5}" for q in ("mean", "q10", "q50", "q90"))
    print(f"{'truth':>8} {'n':>6} | {quantiles} | " + " ".join(f"{p:>5g}" for p in PCTS))
    print("\n".join(deff_t))
    print(
        f"\nlong run ({CHAINS} chains x {LONG} requests, batches of {BATCH}): true percentile (simulated) | deff of "
        "the ranks | deff of the indicators at each percentile"
    )
    print("\n".join(long_t))
    print(f"\ncheck_step on {calls_all} steps: {bad_all} disagree with the vectorised count")
    print(f"total {time.perf_counter() - t_all:.0f} s")
    if bad_all:
        raise SystemExit("the vectorised count disagrees with check_step")


if __name__ == "__main__":
    main()
