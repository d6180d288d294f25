"""Benchmark: do the decision's perf claims keep their promises? (issue 24, the perf half)

Simulates requests with a known truth and runs the pipeline's own functions on them
(tasks.decision.slo.check_step, tasks.core.percentiles, tasks.decision.load_search.search_rates and chain,
tasks.perf.sweep.arrival_offsets_s), printing:

1. The SLO check's false "meets": latencies lognormal (sigma 0.5), the limit set so the true p-th percentile is
   1.1x and 1.25x the limit, n = 12 ... 3000 requests: the share of steps judged `met` (goal <= 5 %: the
   bound is one-sided at 95 %), next to the old rule (numpy's linear percentile <= the limit), for p99 and p90;
   and its power: the share `met` when the true percentile is 0.9x, 0.75x and 0.5x the limit.
1b. The same check on latencies of a queue (the one-slot server of 3 and 4 below): requests that wait together are
   late together, which the binomial bound (like LoadGen's early stopping) does not assume: the share `met` at
   rates around the true highest rate, n = 200, 1000, 3000.
2. Perf p99 intervals: coverage of the true p99 by the order-statistic interval over pooled requests (what
   perf_summary writes now) and by the t-interval over the repeats' own p99s (what it wrote before),
   3 repeats of 4, 100 and 200 requests, with and without 15 % run-to-run noise.
3. Sustained load: a one-slot server of fixed service time under Poisson arrivals (an M/D/1 queue, simulated
   request by request with the sweep's own arrival times), 200 measured requests after a 10 % warm-up: the
   share of steps judged not sustained (achieved < 95 % of offered) at utilisation 0.5 ... 1.25.
4. The search by simulation: the nightly test's case (instruments/slo_server.py SEARCH_CASE: 40 ms, p90 TTFT <= 240
   ms: true highest rate 19.99 req/s by Erlang's formula, capacity 25), a sweep at 12 and 30 req/s then
   search_rates' bracket-and-bisect (4 steps at most, 12 % tolerance), 300 measured requests a step, as the test
   runs it: the distribution of the
   sustainable rate it reports (the offered rate of the highest step met with every lower one met) against the
   true rate and the capacity. No host stalls here: the measured nightly
   (tests/integration/test_recommend.py) adds them.

Monte-Carlo error: a share near 5 % from S simulations is +- 1.96 sqrt(0.05 * 0.95 / S) (+- 1.0 % at 2000).

Usage: .venv/bin/python benchmarks/slo_check.py [--sims 2000] [--searches 300] [--seed 0] [--only 1|2|3|4]
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np

from instruments.slo_server import SEARCH_CASE, md1_highest_rate
from tasks.core.config import LoadSearchSpec
from tasks.core.percentiles import interval
from tasks.core.stat_tests import t_interval
from tasks.decision.load_search import chain, search_rates
from tasks.decision.slo import check_step, linear_percentile
from tasks.perf.metrics import RequestRecord
from tasks.perf.sweep import arrival_offsets_s

SIGMA = 0.5  # lognormal latency spread
NS = (12, 32, 100, 300, 1000, 3000)


def records(ttfts: np.ndarray) -> list[RequestRecord]:
    return [
        RequestRecord(i, "ok", 0.0, ttft_ms=float(t), e2el_ms=float(t) + 1.0, output_tokens=1)
        for i, t in enumerate(ttfts)
    ]


def claims(sims: int, seed: int) -> None:
    from scipy import stats

    print(
        f"\n1. The SLO check: share of steps judged 'met' (95 % confidence; lognormal latencies, sigma {SIGMA}); "
        f"{sims} simulations per cell"
    )
    rng = np.random.default_rng(seed)
    for pct in (99.0, 90.0):
        z = stats.norm.ppf(pct / 100)
        true_pct = math.exp(SIGMA * z)  # of lognormal(0, SIGMA)
        print(
            f"\n   p{pct:g}: true percentile / limit | "
            + " ".join(f"n={n:>5}" for n in NS)
            + " | old rule (linear pctl)"
        )
        for ratio in (1.25, 1.1, 1.0, 0.9, 0.75, 0.5):
            limit = {"ttft_ms": true_pct / ratio}
            new, old = [], []
            for n in NS:
                s = sims if n <= 1000 else max(sims // 4, 200)
                met = old_met = 0
                for _ in range(s):
                    x = rng.lognormal(0.0, SIGMA, n)
                    met += check_step([records(x)], limit, pct, 0.95).met
                    old_met += linear_percentile(list(x), pct) <= limit["ttft_ms"]
                new.append(met / s)
                old.append(old_met / s)
            kind = "false 'meets'" if ratio >= 1 else "power        "
            print(
                f"   {kind} {ratio:>5.2f}x          | "
                + " ".join(f"{v:>7.1%}" for v in new)
                + " | "
                + " ".join(f"{v:.0%}" for v in old)
            )


def queued_claims(sims: int, seed: int) -> None:
    """The same check on latencies of a queue: requests late together are not independent, as the bound assumes."""
    service, limit, pct = 50.0, 300.0, 90.0
    true = md1_highest_rate(service / 1000, limit / 1000, pct)
    print(
        f"\n1b. The same check on queued requests (one slot, {service:g} ms, Poisson arrivals; p{pct:g} TTFT <= "
        f"{limit:g} ms, true at {true:.2f} req/s): share judged 'met'; {sims} simulations per cell"
    )
    print("   rate / true highest | " + " ".join(f"n={n:>5}" for n in (200, 1000, 3000)))
    for ratio in (0.75, 0.9, 1.0, 1.06, 1.13):
        shares = []
        for n in (200, 1000, 3000):
            s = sims if n <= 1000 else max(sims // 4, 50)
            met = sum(
                check_step(
                    [md1_step(true * ratio, n, service, seed * 1_000_003 + i)],
                    {"ttft_ms": limit},
                    pct,
                    0.95,
                    rate_step=True,
                ).met
                for i in range(s)
            )
            shares.append(met / s)
        print(f"   {ratio:>19.2f} | " + " ".join(f"{v:>7.1%}" for v in shares))


def p99_intervals(sims: int, seed: int) -> None:
    print(f"\n2. Perf p99 intervals (95 %): coverage of the true p99, 3 repeats; {sims} simulations per row")
    rng = np.random.default_rng(seed)
    print("   requests/repeat run-to-run | order statistic (pooled): covers  none | old t over repeats: covers")
    for requests in (4, 100, 200):
        for run_cv in (0.0, 0.15):
            # truth: the p99 of the population of requests over many nights (each night's level varies by run_cv)
            big = rng.lognormal(0.0, SIGMA, (4000, 500)) * (1 + run_cv * rng.standard_normal((4000, 1)))
            true = float(np.percentile(big, 99))
            cov = none = cov_old = 0
            for _ in range(sims):
                levels = 1 + run_cv * rng.standard_normal(3)
                groups = [rng.lognormal(0.0, SIGMA, requests) * lv for lv in levels]
                lo, hi = interval([float(v) for g in groups for v in g], 99.0, 0.95)
                none += lo is None
                cov += lo is not None and lo <= true <= hi
                olo, ohi, _ = t_interval([float(np.percentile(g, 99)) for g in groups], 0.95)
                cov_old += olo is not None and olo <= true <= ohi
            print(
                f"   {requests:>15} {run_cv:>11.0%} | {cov / sims:>30.1%} {none / sims:>5.0%} | {cov_old / sims:>21.1%}"
            )


def md1_step(
    rate: float, measured: int, service_ms: float, seed: int, warmup_share: float = 0.1
) -> list[RequestRecord]:
    """One simulated rate step of a one-slot server (first come, first served): the sweep's own Poisson send
    times, each request served `service_ms` after the previous one left; TTFT = wait + service."""
    head = math.ceil(warmup_share * measured - 1e-9)
    offsets = arrival_offsets_s(head + measured, rate, 1.0, seed)
    free, out = 0.0, []
    for i, a in enumerate(offsets):
        start = max(a * 1000, free)
        free = start + service_ms
        ttft = free - a * 1000
        out.append(
            RequestRecord(
                i,
                "ok",
                a * 1000,
                ttft_ms=ttft,
                e2el_ms=ttft + 0.1,
                output_tokens=4,
                end_ms=free + 0.1,
                is_warmup=i < head,
            )
        )
    return out


def sustained(sims: int, seed: int) -> None:
    print(
        f"\n3. Sustained load: share of M/D/1 steps (200 measured after a 10 % warm-up) judged not sustained "
        f"(achieved < 95 % of offered); {sims} simulations per row"
    )
    for rho in (0.5, 0.7, 0.8, 0.9, 0.95, 1.0, 1.05, 1.1, 1.25):
        bad = sum(
            check_step(
                [md1_step(rho / 0.05, 200, 50.0, seed * 100_003 + i)], {"ttft_ms": 1e12}, 90, 0.95, rate_step=True
            ).status
            == "not_sustained"
            for i in range(sims)
        )
        print(f"   utilisation {rho:>4.2f}: not sustained {bad / sims:>6.1%}")


def search(searches: int, seed: int) -> None:
    c = SEARCH_CASE
    service, limit, pct, n = c["service_ms"], c["limit_ms"], c["percentile"], c["requests"]
    true = md1_highest_rate(service / 1000, limit / 1000, pct)
    capacity = 1000 / service
    spec = LoadSearchSpec(budget_s=86_400, max_steps=c["max_steps"], tolerance_pct=c["tolerance_pct"])
    found = []
    for k in range(searches):
        tried: list[float] = []

        def met(rate: float) -> bool:
            tried.append(rate)
            return check_step(
                [md1_step(rate, n, service, seed * 7_919 + k * 1_009 + len(tried))],
                {"ttft_ms": limit},
                pct,
                0.95,
                rate_step=True,
            ).met

        judged = [(r, met(r)) for r in c["rates"]]
        lo, hi = chain(judged)
        judged += search_rates(lo, hi, spec, met, clock=lambda: 0.0)
        found.append(chain(judged)[0] or 0.0)  # v_slo_steps.load_req_s: the rate the step offered
    f = np.array(found) / true
    print(
        f"\n4. The search by simulation ({searches} searches): one slot, {service:g} ms, p{pct:g} TTFT <= {limit:g} "
        f"ms, "
        f"rates {c['rates'][0]:g} and {c['rates'][1]:g}, {n} requests a step; true highest rate {true:.2f} req/s "
        f"(Erlang), capacity {capacity:.1f}"
    )
    print(
        f"   sustainable / true: min {f.min():.2f}, 5th pct {np.percentile(f, 5):.2f}, median {np.median(f):.2f}, "
        f"max {f.max():.2f}; >= 0.6: {np.mean(f >= 0.6):.1%}; >= 0.8: {np.mean(f >= 0.8):.1%}; "
        f"above the true rate: {np.mean(f > 1):.1%}; "
        f"above capacity: {np.mean(np.array(found) > capacity):.1%}"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sims", type=int, default=2000)
    ap.add_argument("--searches", type=int, default=300)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--only", choices=("1", "1b", "2", "3", "4"))
    a = ap.parse_args()
    t0 = time.monotonic()
    for key, run in (
        ("1", lambda: claims(a.sims, a.seed)),
        ("1b", lambda: queued_claims(a.sims // 8, a.seed)),
        ("2", lambda: p99_intervals(a.sims, a.seed)),
        ("3", lambda: sustained(a.sims // 4, a.seed)),
        ("4", lambda: search(a.searches, a.seed)),
    ):
        if a.only in (None, key):
            run()
    print(f"\n{time.monotonic() - t0:.0f} s")


if __name__ == "__main__":
    main()
