"""Statistical procedures behind quality deltas and perf intervals: exact tests, intervals, Holm.

Pure functions over counts, arrays and callables (no rows, no tables), so tasks.quality.deltas (quality
deltas) and tasks.perf.metrics (perf intervals) share one checked implementation, and
benchmarks/stats_coverage.py measures exactly what the pipeline runs. Where scipy has the
procedure it is scipy's: the binomial test, the BCa bootstrap and Student's t quantiles.
What scipy lacks (Tango's paired score interval, Holm's step-down adjustment) is written out
here with its source, and so is the sign-flip test (scipy's is 10x slower at n = 10,000; the
tests check both give the same p).

Sign convention: a paired delta is variant - reference. For 0/1 outcomes, `losses` are pairs
the reference got right and the variant wrong, `gains` the other way round, `n` all pairs.
"""

from __future__ import annotations

import math
import warnings
from typing import Callable, Sequence

import numpy as np
from scipy import optimize, stats

# Resamples of the sign-flip test: its smallest two-sided p is 2 / (B + 1) ~ 2e-4, so Holm can
# still reject at 5 % in a family of up to ~250 tested metrics.
PERMUTATIONS = 9999
# Keep each vectorised batch near this many array elements, whatever n is.
_BATCH_ELEMENTS = 2_000_000


def mcnemar_exact_p(losses: int, gains: int) -> float:
    """Exact two-sided McNemar p: scipy's binomial test of `gains` among the discordant pairs at 1/2.

    Exact at any size ((600, 500) discordant pairs included); 1.0 when no pair is discordant.
    """
    discordant = losses + gains
    if discordant == 0:
        return 1.0
    return float(stats.binomtest(gains, discordant, 0.5).pvalue)


def tango_z(delta: float, losses, gains, n: int):
    """Tango's score statistic for H0: p_variant - p_reference = delta (see tango_interval).

    `losses` and `gains` may be numbers or numpy arrays of counts (tasks.quality.power evaluates it over every
    count a design can reach); a float for numbers, an array for arrays.
    """
    # Tango (1998) in Fagerland, Lydersen & Laake's notation: n12 = gains (variant right,
    # reference wrong), n21 = losses; p21 is estimated by its maximum likelihood under H0.
    losses, gains = np.asarray(losses, dtype=float), np.asarray(gains, dtype=float)
    a = 2.0 * n
    b = -gains - losses + (2.0 * n - gains + losses) * delta
    c = -losses * delta * (1.0 - delta)
    p21 = (np.sqrt(np.maximum(b * b - 4.0 * a * c, 0.0)) - b) / (2.0 * a)
    var = n * (2.0 * p21 + delta * (1.0 - delta))
    num = gains - losses - n * delta
    with np.errstate(divide="ignore", invalid="ignore"):
        z = np.where(var > 0.0, num / np.sqrt(np.where(var > 0.0, var, 1.0)), np.sign(num) * np.inf)
    z = np.where((var <= 0.0) & (num == 0.0), 0.0, z)
    return float(z) if z.ndim == 0 else z


def tango_interval(losses: int, gains: int, n: int, confidence: float) -> tuple[float, float]:
    """Tango's asymptotic score interval for the paired difference of proportions (variant - reference).

    Source: T. Tango, "Equivalence test and confidence interval for the difference in
    proportions for the paired-sample design", Statistics in Medicine 17 (1998) 891-908,
    eqs. (3)-(5); the form used is that of M. W. Fagerland, S. Lydersen, P. Laake,
    "Recommended tests and confidence intervals for paired binomial proportions",
    Statistics in Medicine 33 (2014) 2850-2875, section 4.2, who recommend it for small and
    large n alike. The interval is every delta whose score statistic
        Z(delta) = (n12 - n21 - n delta) / sqrt(n (2 p21~ + delta (1 - delta)))
    lies within +-z_{1-alpha/2}, with p21~ = (sqrt(B^2 - 4AC) - B) / 2A, A = 2n,
    B = -n12 - n21 + (2n - n12 + n21) delta, C = -n21 delta (1 - delta). At delta = 0 the
    statistic is McNemar's (n12 - n21) / sqrt(n12 + n21), so the interval excludes 0 exactly
    when the asymptotic McNemar test rejects.
    """
    if n <= 0 or losses < 0 or gains < 0 or losses + gains > n:
        raise ValueError(f"tango_interval: need 0 <= losses + gains <= n, got {losses}, {gains}, {n}")
    z = float(stats.norm.ppf(0.5 + confidence / 2.0))
    est = (gains - losses) / n
    edge = 1e-12

    def lower(d: float) -> float:
        return tango_z(d, losses, gains, n) - z

    def upper(d: float) -> float:
        return tango_z(d, losses, gains, n) + z

    # Z decreases in delta and is 0 at the estimate: each limit is the one root on its side.
    lo = -1.0 if est <= -1.0 or lower(-1.0 + edge) <= 0 else optimize.brentq(lower, -1.0 + edge, est, xtol=1e-12)
    hi = 1.0 if est >= 1.0 or upper(1.0 - edge) >= 0 else optimize.brentq(upper, est, 1.0 - edge, xtol=1e-12)
    return float(lo), float(hi)


def _batch(n: int) -> int:
    return max(1, _BATCH_ELEMENTS // max(n, 1))


def paired_bootstrap_interval(
    delta_of: Callable[[np.ndarray, np.ndarray], np.ndarray], n: int, resamples: int, confidence: float, seed: int
) -> tuple[float, float, str]:
    """scipy's BCa bootstrap interval of a paired delta; (lo, hi, method).

    `delta_of(ref_idx, var_idx)` takes index arrays (..., n) into the stacked rows of both
    sides (0..n-1 the reference's, n..2n-1 the variant's, pair i at i and n + i) and returns
    the delta per leading index; resampling pair indices keeps each pair together.
    Where BCa is undefined (every resample gives the same delta, or the jackknife has no
    spread) the percentile interval of the same resamples is returned and `method` says so.
    """
    if n < 2:
        raise ValueError("paired_bootstrap_interval: needs two or more pairs")

    def statistic(idx: np.ndarray, axis: int = -1) -> np.ndarray:
        idx = np.moveaxis(np.asarray(idx), axis, -1).astype(np.intp)
        return delta_of(idx, idx + n)

    with warnings.catch_warnings():  # a degenerate BCa (0 / 0 in its acceleration) is handled below
        warnings.simplefilter("ignore", stats.DegenerateDataWarning)
        warnings.simplefilter("ignore", RuntimeWarning)
        res = stats.bootstrap(
            (np.arange(n),),
            statistic,
            n_resamples=resamples,
            batch=_batch(n),
            vectorized=True,
            confidence_level=confidence,
            method="BCa",
            rng=np.random.default_rng(seed),
        )
    lo, hi = float(res.confidence_interval.low), float(res.confidence_interval.high)
    if math.isfinite(lo) and math.isfinite(hi):
        return lo, hi, f"BCa bootstrap B={resamples}"
    dist = np.asarray(res.bootstrap_distribution, dtype=float)
    tail = (1.0 - confidence) / 2.0
    lo, hi = np.quantile(dist, [tail, 1.0 - tail])
    return float(lo), float(hi), f"percentile bootstrap B={resamples} (BCa undefined: no spread)"


def sign_flip_p(
    delta_of: Callable[[np.ndarray, np.ndarray], np.ndarray], n: int, resamples: int = PERMUTATIONS, seed: int = 0
) -> float:
    """Two-sided p of the paired permutation (sign-flip) test: swap the two sides within random pairs.

    H0: within each pair, reference and variant are exchangeable (the variant changes
    nothing). `delta_of` as in paired_bootstrap_interval: a flipped pair i reads row n + i on
    the reference's side and row i on the variant's. The p-value follows
    scipy.stats.permutation_test(permutation_type='samples') exactly (tests check the two
    agree): all 2**n flips when 2**n <= resamples, else `resamples` random ones with the
    observed statistic counted (p >= 1 / (B + 1), Phipson & Smyth 2010); two-sided as twice
    the smaller tail, ties within 100 ulp counted. Written out because scipy's version
    stacks and sorts a (B, n, 2) array: ~20 s for B = 9999 at n = 10,000 against ~2 s here.
    """
    if n < 2:
        raise ValueError("sign_flip_p: needs two or more pairs")
    idx = np.arange(n)
    observed = float(delta_of(idx[None, :], idx[None, :] + n)[0])
    exact = n < 62 and 2**n <= resamples
    total = 2**n if exact else resamples
    gamma = abs(observed) * np.finfo(float).eps * 100
    rng = np.random.default_rng(seed)
    less = greater = 0
    step = _batch(2 * n)
    for start in range(0, total, step):
        k = min(step, total - start)
        if exact:
            flip = ((np.arange(start, start + k)[:, None] >> idx) & 1).astype(bool)
        else:
            flip = rng.random((k, n)) < 0.5
        null = delta_of(np.where(flip, idx + n, idx), np.where(flip, idx, idx + n))
        less += int(np.count_nonzero(null <= observed + gamma))
        greater += int(np.count_nonzero(null >= observed - gamma))
    adjust = 0 if exact else 1
    p = 2.0 * min(less + adjust, greater + adjust) / (total + adjust)
    return float(min(1.0, p))


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values, in the input's order.

    Holm, "A simple sequentially rejective multiple test procedure", Scandinavian Journal of
    Statistics 6 (1979) 65-70: with p(1) <= ... <= p(m), the adjusted p(i) is
    max over j <= i of min(1, (m - j + 1) p(j)); rejecting where it is <= alpha keeps the
    family-wise error rate <= alpha under any dependence between the tests.
    """
    p = np.asarray(pvalues, dtype=float)
    m = p.size
    order = np.argsort(p, kind="stable")
    stepped = np.maximum.accumulate(np.minimum(1.0, (m - np.arange(m)) * p[order]))
    out = np.empty(m)
    out[order] = stepped
    return [float(x) for x in out]


def t_interval(values: Sequence[float | None], confidence: float) -> tuple[float | None, float | None, str | None]:
    """Student's t interval of the mean of independent per-repeat values: (lo, hi, None), or (None, None, reason).

    mean +- t_{(1+confidence)/2, k-1} * s / sqrt(k), with s the sample standard deviation of
    the k values; the reason is 'n too small' when fewer than 2 values exist.
    """
    x = np.asarray([v for v in values if v is not None and math.isfinite(v)], dtype=float)
    if x.size < 2:
        return None, None, f"n too small: {x.size} value(s), a t-interval needs >= 2"
    half = float(stats.t.ppf(0.5 + confidence / 2.0, x.size - 1) * x.std(ddof=1) / math.sqrt(x.size))
    mean = float(x.mean())
    return mean - half, mean + half, None


def log_t_interval(values: Sequence[float | None], confidence: float) -> tuple[float | None, float | None, str | None]:
    """Interval of the mean of independent positive per-repeat values, on the log scale: (lo, hi, None), or
    (None, None, reason). Both bounds are positive: a latency, a rate or a throughput never gets a bound below 0.

    The modified Cox interval for the mean of a log-normal variable, with Student's t quantile (U. Olsson,
    "Confidence intervals for the mean of a log-normal distribution", Journal of Statistics Education 13(1),
    2005, eq. 5; E. L. Crow and K. Shimizu, "Lognormal distributions", 1988): with y = log x over k values,
        exp(ybar + s^2/2 +- t_{(1+confidence)/2, k-1} * sqrt(s^2/k + s^4/(2(k-1)))).
    It targets the same quantity as `t_interval` (the long-run average of the per-repeat figure); a skewed or
    heavy-tailed set of repeats (one stalled repeat at 7x the others) widens it upwards instead of below 0.
    A value <= 0 cannot be on the log scale: (None, None, reason).
    """
    x = np.asarray([v for v in values if v is not None and math.isfinite(v)], dtype=float)
    if x.size < 2:
        return None, None, f"n too small: {x.size} value(s), an interval needs >= 2"
    if np.any(x <= 0):
        return None, None, f"{int(np.sum(x <= 0))} value(s) <= 0: no log-scale interval"
    y = np.log(x)
    k, s2 = x.size, float(y.var(ddof=1))
    half = float(stats.t.ppf(0.5 + confidence / 2.0, k - 1)) * math.sqrt(s2 / k + s2 * s2 / (2.0 * (k - 1)))
    centre = float(y.mean()) + s2 / 2.0
    return math.exp(centre - half), math.exp(centre + half), None
