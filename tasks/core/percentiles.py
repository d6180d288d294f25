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
does the arithmetic; tasks/decision/sql/v_slo_steps.sql computes the same two counts from the binomial
probabilities in SQL (DuckDB has no binomial quantile), and tests hold the two equal.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import math
import os
from functools import lru_cache
from pathlib import Path

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


# The farthest lag whose autocorrelation the design effect sums (v_slo_steps.sql's `lags` the same): Geyer's
# sequence stops earlier on any step but one whose requests drift for over 64 requests in a row.
MAX_LAG = 64


def effective_requests(series: list[list[float]]) -> tuple[int, float | None]:
    """(n_eff, deff): the requests a step's percentile claim counts when its requests are correlated, and the
    design effect n / n_eff they are counted by. tasks.decision.slo and v_slo_steps count a step's requests so.

    `series` holds each repeat's latencies in send order (inf for a failed request). The autocorrelation at lag k
    is that of their ranks (pooled over the step, so heavy tails and failures weigh as ranks, and a repeat whose
    level differs from the others' counts as correlated within itself), summed over each repeat's pairs k apart.
    The design effect is Geyer's initial positive sequence estimator (Geyer 1992, as Stan's and ArviZ's effective
    sample size): deff = -1 + 2 (G_0 + ... + G_m), G_j = rho_2j + rho_2j+1 (rho_0 = 1), summed while G_j > 0
    (lags up to MAX_LAG; a lag without pairs is 0). It fits both shapes a step shows: requests in flight together
    (a cluster of c is worth about one: rho_1 high, rho_2 near 0) and a neighbour's slow drift (an AR(1) with rho
    0.9 is worth (1 - rho) / (1 + rho) of its count), where one lag's autocorrelation extrapolated would count a
    cluster of 2 as a ninth. n_eff = floor(n / deff), at least 1, at most n (deff >= 1). No test of independence
    comes first: below ~30 requests it cannot see a drift (benchmarks/slo_dependence.py measured 21 % false claims
    with one), so independent requests lose some count by chance, the price of a safe claim (sized_requests
    sizes rate steps for it).
    """
    lengths = [len(s) for s in series]
    if not lengths:
        return 0, None
    steps = np.concatenate([np.asarray(s, dtype=float) for s in series])[None, :]
    n_eff, deff = effective_requests_rows(steps, lengths)
    return int(n_eff[0]), None if math.isnan(deff[0]) else float(deff[0])


def effective_requests_rows(steps: np.ndarray, lengths: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """effective_requests of each row of `steps` (one step a row, its repeats of `lengths` requests side by side
    in send order): (n_eff, deff) arrays, deff nan where too few requests say (n_eff n there). Row-wise so a
    simulation of many steps (sized_requests, the benchmarks) counts them as the claim does, at numpy's speed."""
    n = sum(lengths)
    rows = steps.shape[0]
    none = (np.full(rows, n), np.full(rows, math.nan))
    if n < 3 or max(lengths, default=0) < 2:
        return none
    ranks = stats.rankdata(steps, axis=1)
    centred = ranks - ranks.mean(axis=1, keepdims=True)
    den = np.sum(centred**2, axis=1)
    parts = np.split(centred, np.cumsum(lengths)[:-1], axis=1)
    top = min(max(lengths) - 1, MAX_LAG)
    live = np.nonzero(den > 0)[0]

    def rho(k: int, at: np.ndarray) -> np.ndarray:
        if k > top:
            return np.zeros(at.size)
        return sum((c[at, :-k] * c[at, k:]).sum(axis=1) for c in parts if c.shape[1] > k) / den[at]

    deff = np.full(rows, -1.0)
    at = live
    for j in range(0, top + 1, 2):  # Geyer's sequence, each row until its first G_j <= 0
        if not at.size:
            break
        g = (1.0 if j == 0 else rho(j, at)) + rho(j + 1, at)
        deff[at[g > 0]] += 2.0 * g[g > 0]
        at = at[g > 0]
    deff = np.maximum(deff, 1.0)
    n_eff = np.clip(np.floor(n / deff + EPS), 1, n).astype(int)
    dead = den <= 0
    n_eff[dead], deff[dead] = n, math.nan
    return n_eff, deff


# Rate steps are sized so that a step of independent requests, every one within the limits, is counted as enough
# to show its percentile (n_eff >= min_requests) this often: Geyer's estimate scatters above 1 on independent
# requests, so a step of exactly min_requests is counted short of it ~60 % of the time (docs/statistics.md 1).
COUNT_POWER = 0.95
# Steps simulated per size: the Monte-Carlo error of a share near 95 % is +-0.7 %.
COUNT_SIMS = 4000


@lru_cache(maxsize=1024)
def counted_share(per: int, repeats: int, need: int) -> float:
    """The share of steps of `repeats` x `per` independent requests that effective_requests counts as at least
    `need`. Exact up to Monte-Carlo error for any continuous latency distribution (the ranks of independent
    requests are a uniformly random order); seeded, so the same number every time."""
    rng = np.random.default_rng([per, repeats])
    n_eff, _ = effective_requests_rows(rng.random((COUNT_SIMS, repeats * per)), [per] * repeats)
    return float(np.mean(n_eff >= need))


def sizing_cache_path() -> Path:
    """Where sized_requests keeps its answers across processes (per user, beside the build caches)."""
    from tasks.core.runinfo import user_cache_dir

    return user_cache_dir() / "sizing.json"


@lru_cache(maxsize=1)
def _sizing_version() -> str | None:
    """A digest of the code and constants an answer of sized_requests depends on: a changed count, simulation or
    bound makes every cached answer stale (a new key), never wrong. None where the source cannot be read (no file
    is kept then)."""
    try:
        parts = [inspect.getsource(f) for f in (min_requests, effective_requests_rows, counted_share, _sized)]
    except OSError:
        return None
    parts += [repr((COUNT_SIMS, COUNT_POWER, MAX_LAG, EPS, np.__version__))]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


@lru_cache(maxsize=256)
def sized_requests(pct: float, confidence: float, repeats: int = 1, latencies: int = 1) -> int | None:
    """The fewest requests, `repeats` x per, with which a step of independent requests every one within its
    limits is counted as enough to show the pct-th percentile at least COUNT_POWER of the time, on each of its
    `latencies` limited latencies at 1 - (1 - COUNT_POWER) / latencies (Bonferroni: n_eff is the fewest over
    them); at least min_requests. None for pct 100.

    The simulation takes seconds for p99 (~5 s on 2 cores) and every process that loads a config with an SLO asks
    it, so its answers are kept in a file (sizing_cache_path), keyed by the arguments and a digest of the code
    (_sizing_version); an unreadable file is computed again, never trusted."""
    version = _sizing_version()
    if version is None:
        return _sized(pct, confidence, repeats, latencies)
    key = f"{version}|{pct!r}|{confidence!r}|{repeats}|{latencies}"
    path = sizing_cache_path()
    try:
        known = json.loads(path.read_text())
    except (OSError, ValueError):
        known = {}
    known = known if isinstance(known, dict) else {}
    hit = known.get(key)
    if type(hit) is int and hit > 0:
        return hit
    answer = _sized(pct, confidence, repeats, latencies)
    try:  # a whole file or none: written aside, then renamed over
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps({**known, key: answer}, sort_keys=True))
        os.replace(tmp, path)
    except OSError:
        pass  # a read-only home only costs the seconds again
    return answer


def _sized(pct: float, confidence: float, repeats: int, latencies: int) -> int | None:
    need = min_requests(pct, confidence)
    if need is None:
        return None
    share = 1.0 - (1.0 - COUNT_POWER) / max(latencies, 1)
    enough = lambda per: counted_share(per, repeats, need) >= share
    lo = hi = math.ceil(need / repeats)
    while not enough(hi):
        lo, hi = hi + 1, hi * 2
    while lo < hi:  # the share grows with the size, up to Monte-Carlo noise
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if enough(mid) else (mid + 1, hi)
    return repeats * hi


def look_confidence(confidence: float, looks: int) -> float:
    """The confidence each of `looks` planned looks at one claim is judged at so that together they keep
    `confidence` (Bonferroni: the chance that any look claims falsely is at most 1 - confidence)."""
    return 1.0 - (1.0 - confidence) / max(looks, 1)
