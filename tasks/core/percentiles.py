"""What n requests support about a latency percentile: distribution-free order-statistic bounds. Pure functions.

The anchor is MLPerf LoadGen's early stopping (loadgen/early_stopping.cc, results.cc): a server run of n
queries with t over the latency limit is successful when, were the true share of queries within the limit
only p, seeing t or fewer over it would have a chance below 1 - c (the binomial lower tail; LoadGen's p is the
target percentile, c = 0.99, tolerance 0). Equivalently (it is the same event) the order statistic X_(n - t)
is a one-sided upper confidence bound at level c of the p-th percentile, and it is within the limit. Here:

- `allowed_over(n, pct, c)`: the most requests of n that may exceed a limit for the claim
  "pct-th percentile <= limit" at confidence c: the largest t with P(Binomial(n, 1 - pct/100) <= t) <= 1 - c;
  -1 when even t = 0 does not do (too few requests). pct = 99, c = 0.95: -1 up to n = 298, 0 from 299
  (0.99^299 = 0.0495), 1 from 473.
- `missed_over(n, pct, c)`: the fewest requests over a limit that show "pct-th percentile > limit" at
  confidence c: the smallest t with P(Binomial(n, 1 - pct/100) >= t) <= 1 - c; n + 1 when none does.
- `requests_needed(over, pct, c)`: the fewest requests with which `over` requests over the limit still allow the
  claim, every further request within it (LoadGen's "would need to run at least N more queries").
- `bound_index`: which order statistic is the upper (or lower) bound; `interval_indices`: a two-sided
  distribution-free interval of the percentile (each side at (1 + level) / 2).

Errors and incomplete requests count as over every limit (an infinite latency). scipy's binomial distribution
does the arithmetic; warehouse/views/marts/v_slo_steps.sql computes the same two counts from the binomial
probabilities in SQL (DuckDB has no binomial quantile), and tests hold the two equal.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np
from scipy import stats

# Probabilities this close to 1 - c count as equal to it (both here and in SQL, whose sums of lgamma terms
# differ from scipy's incomplete beta in the last digits).
EPS = 1e-9


def _q(pct: float) -> float:
    return 1.0 - pct / 100.0


@lru_cache(maxsize=4096)
def allowed_over(n: int, pct: float, confidence: float) -> int:
    """The most of n requests that may exceed a limit while the pct-th percentile is shown <= it; -1: none."""
    if n <= 0:
        return -1
    q = _q(pct)
    t = np.arange(n + 1)
    ok = np.nonzero(stats.binom.cdf(t, n, q) <= 1.0 - confidence + EPS)[0]
    return int(ok[-1]) if ok.size else -1


@lru_cache(maxsize=4096)
def missed_over(n: int, pct: float, confidence: float) -> int:
    """The fewest of n requests over a limit that show the pct-th percentile above it; n + 1: no count does."""
    if n <= 0:
        return 1
    q = _q(pct)
    t = np.arange(n + 1)
    ok = np.nonzero(stats.binom.sf(t - 1, n, q) <= 1.0 - confidence + EPS)[0]
    return int(ok[0]) if ok.size else n + 1


def min_requests(pct: float, confidence: float) -> int | None:
    """The fewest requests with which a step whose every request is within a limit shows the pct-th percentile
    <= it (pct 99 at 95 %: 299; 90: 29; 75: 11); None for pct 100 (no sample bounds a maximum)."""
    return requests_needed(0, pct, confidence)


def requests_needed(over: int, pct: float, confidence: float) -> int | None:
    """The fewest requests n >= over with allowed_over(n) >= over: what a step with `over` requests over a limit
    needs for the claim, every further request within it. None for pct 100."""
    if pct >= 100:
        return None
    q = _q(pct)
    lo = max(over, math.floor(math.log(1.0 - confidence) / math.log(1.0 - q)) - 1, 1)
    hi = lo
    while allowed_over(hi, pct, confidence) < over:
        lo, hi = hi, max(hi * 2, hi + 1)
    while lo < hi:  # allowed_over is non-decreasing in n
        mid = (lo + hi) // 2
        if allowed_over(mid, pct, confidence) >= over:
            hi = mid
        else:
            lo = mid + 1
    return hi


def bound_index(n: int, pct: float, confidence: float, upper: bool = True) -> int | None:
    """1-based rank (ascending) of the order statistic that bounds the pct-th percentile at `confidence`: from
    above (the n - allowed_over-th) or from below (the n - missed_over + 1-th); None when n cannot bound it."""
    k = n - allowed_over(n, pct, confidence) if upper else n - missed_over(n, pct, confidence) + 1
    return k if 1 <= k <= n else None


def bound(values: list[float], pct: float, confidence: float, upper: bool = True) -> float | None:
    """That order statistic of `values` (inf for a failed request); None when n cannot bound the percentile."""
    xs = sorted(values)
    k = bound_index(len(xs), pct, confidence, upper)
    return None if k is None else xs[k - 1]


def interval(values: list[float], pct: float, level: float) -> tuple[float | None, float | None]:
    """A distribution-free interval of the pct-th percentile at `level` (each side at (1 + level) / 2: coverage at
    least `level` for any continuous distribution of independent requests); (None, None) where n is too small
    for either side (p99 at 95 %: 368 requests) or a side falls on an infinite value."""
    side = (1.0 + level) / 2.0
    lo, hi = bound(values, pct, side, upper=False), bound(values, pct, side, upper=True)
    if lo is None or hi is None or not (math.isfinite(lo) and math.isfinite(hi)):
        return None, None
    return lo, hi


def effective_requests(series: list[list[float]], alpha: float = 0.05) -> tuple[int, float | None]:
    """(n_eff, r): the requests a step's percentile claim may count when its requests are correlated, and the
    lag-1 autocorrelation r it is computed from. tasks.perf.slo and v_slo_steps state it per step (n_effective);
    the SLO claim does not yet use it (docs/statistics.md, 1c).

    `series` holds each repeat's latencies in send order (inf for a failed request). r is the lag-1
    autocorrelation of their ranks (pooled over the step, so heavy tails and failures weigh as ranks), summed over
    each repeat's consecutive pairs. The order-statistic bound counts requests as independent; a step whose
    requests follow a slow drift (a neighbour, a cache filling) shows fewer independent looks than requests, and
    "0 of 299 over" then proves less than it says. For an AR(1)-like series the binomial count's variance grows
    by (1 + r) / (1 - r), so the claim counts n_eff = n (1 - r) / (1 + r) requests (and the requests over a limit
    scaled alike, rounded up). The correction applies only when r exceeds its one-sided 1 - alpha critical value
    under independence (z / sqrt(pairs)): independent requests keep their n but for alpha of the steps. The
    latencies' own correlation bounds that of the over-the-limit indicator from above (a thresholded Gaussian
    AR(1) is less correlated than the series), so the correction errs on the safe side.
    """
    lengths = [len(s) for s in series]
    n = sum(lengths)
    pairs = sum(max(k - 1, 0) for k in lengths)
    if n < 3 or pairs < 2:
        return n, None
    ranks = stats.rankdata(np.concatenate([np.asarray(s, dtype=float) for s in series]))
    centred = ranks - ranks.mean()
    den = float(np.sum(centred**2))
    if den == 0:
        return n, None
    num, start = 0.0, 0
    for k in lengths:
        c = centred[start : start + k]
        num += float(np.sum(c[:-1] * c[1:]))
        start += k
    r = num / den
    if r <= float(stats.norm.ppf(1 - alpha)) / math.sqrt(pairs):
        return n, r
    return max(1, math.floor(n * (1 - r) / (1 + r))), r


def shown_within(over: int, n: int, n_eff: int, pct: float, confidence: float) -> bool:
    """Whether `over` of n requests over a limit show the pct-th percentile within it, counted as n_eff requests
    (effective_requests): the over count scaled to n_eff (rounded up) against allowed_over(n_eff)."""
    scaled = math.ceil(over * n_eff / n - 1e-12) if n else over
    return scaled <= allowed_over(n_eff, pct, confidence)
