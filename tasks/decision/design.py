"""The quality gate's design before the evidence: its looks, their boundaries, its power, the n it needs.

A gate on a right/wrong metric passes a variant when its paired interval of the delta (Tango's score
interval, tasks.core.stat_tests) clears a threshold: -margin (`margin_points`) or (target - 1) x the
reference's score (`retention`). Whether a truly equal variant can pass is a property of the design alone:
the items it plans (a fixed n, or the looks of an adaptive suite), the threshold, and how often a variant's
answers differ from the reference's (the discordance). This module computes it exactly, before any item is
answered, so `tradeoff check`, the nightly's first log lines and the report can say it.

- **Looks** (`look_schedule`): an adaptive suite looks at its sample at `first`, doubling, up to
  `max_items`; a last doubling that would leave a sliver (less than half the step before it) is merged into
  the last look (40 ... 640, 1319; not 640, 1280, 1319).
- **Boundaries** (`boundaries`, `look_levels`): each look's interval is taken at a level from the joint
  distribution of the looks' statistics (Lan & DeMets 1983 alpha spending, O'Brien-Fleming-type by default,
  Pocock-type on request): the one-sided alpha = (1 - confidence) / 2 of a false pass is spent over the
  information fractions t = n / max, and boundary k solves P(no pass before k, pass at k) = alpha(t_k) -
  alpha(t_(k-1)) for the canonical joint distribution (independent increments, corr(Z_i, Z_j) =
  sqrt(t_i / t_j)), by recursive numerical integration (Armitage, McPherson & Rowe 1969; Jennison &
  Turnbull 2000, ch. 19). The looks' fail side ("the upper bound is below the threshold") is non-binding and
  spends nothing, so the false pass stays <= alpha whether or not a suite stops on it. Before, each look
  spent its linear share with a union bound: the last look of (40, ..., 1280, 1319) was a 99.85 % interval
  and an equal variant that passes 77 % of the time with a fixed 1,319 passed 0 % adaptively.
- **Power** (`pass_probability`): the chance a design passes (and fails) a variant with known loss and gain
  rates, computed exactly over every (losses, gains) count the looks can reach (trinomial counts, carried
  from look to look by convolution of the increments, decided mass removed at each look), with the
  pipeline's own rule at each look (Tango's statistic at the threshold against the look's z).
- **n needed** (`n_for_power`): the smallest planned n (fixed) or last look (adaptive, the same first look)
  whose power reaches the target (0.8), by bisection over that exact power.

benchmarks/gate_power.py checks every figure against simulations through the pipeline's own judge.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Literal

import numpy as np
from scipy import optimize, signal, stats

from tasks.core.config import DEFAULT_POWER
from tasks.core.stat_tests import tango_z

Spending = Literal["obf", "pocock"]
# A boundary above this passes nothing in practice (one-sided 1.3e-12); the look's level is capped there so
# that its interval stays finite.
Z_CAP = 7.0
_GRID = 1601  # points of the recursive integration's grid per look (boundaries accurate to ~1e-6)
_WIDTH = 9.0  # standard deviations of a count's distribution kept (the mass cut off is < 1e-18)


def look_schedule(first: int, max_items: int | None) -> list[int]:
    """The planned sample sizes of an adaptive suite: `first`, doubling, up to `max_items` (its last look).

    A doubling that would leave less than half of its own step to the last look is replaced by the last look.
    """
    if max_items is None or max_items <= first:
        return [first]
    out = [first]
    while out[-1] < max_items:
        nxt = out[-1] * 2
        if nxt >= max_items or max_items - nxt < (nxt - out[-1]) / 2:
            nxt = max_items
        out.append(nxt)
    return out


def spent(t: float, alpha: float, spending: Spending = "obf") -> float:
    """One-sided alpha spent by information fraction t (Lan-DeMets): O'Brien-Fleming- or Pocock-type."""
    if t <= 0:
        return 0.0
    t = min(t, 1.0)
    if spending == "pocock":
        return alpha * math.log(1.0 + (math.e - 1.0) * t)
    return float(2.0 * stats.norm.sf(stats.norm.isf(alpha / 2.0) / math.sqrt(t)))


@functools.lru_cache(maxsize=256)
def boundaries(fractions: tuple[float, ...], alpha: float, spending: Spending = "obf") -> tuple[float, ...]:
    """Upper z boundaries of looks at information fractions `fractions` (increasing, the last 1) that spend the
    one-sided `alpha` as `spending` does, under the joint distribution of the looks (recursive integration of
    the continuation density of W_k = Z_k sqrt(t_k), a Brownian motion in t). Capped at Z_CAP."""
    out: list[float] = []
    prev_t, prev_spent = 0.0, 0.0
    w = dens = weights = None
    for t in fractions:
        target = spent(t, alpha, spending) - prev_spent
        prev_spent += target
        if w is None:
            b = Z_CAP if target <= stats.norm.sf(Z_CAP) else min(float(stats.norm.isf(target)), Z_CAP)
            w = np.linspace(-_WIDTH * math.sqrt(t), b * math.sqrt(t), _GRID)
            dens = stats.norm.pdf(w / math.sqrt(t)) / math.sqrt(t)
        else:
            sd = math.sqrt(t - prev_t)
            mass = dens * weights

            def exit_prob(b: float) -> float:
                return float(np.sum(mass * stats.norm.sf((b * math.sqrt(t) - w) / sd)))

            if exit_prob(Z_CAP) >= target:
                b = Z_CAP
            else:
                b = float(optimize.brentq(lambda x: exit_prob(x) - target, -_WIDTH, Z_CAP, xtol=1e-9))
            new_w = np.linspace(min(-_WIDTH * math.sqrt(t), float(w[0])), b * math.sqrt(t), _GRID)
            dens = (stats.norm.pdf((new_w[:, None] - w[None, :]) / sd) / sd) @ mass
            w = new_w
        weights = np.full(_GRID, w[1] - w[0])
        weights[[0, -1]] /= 2.0  # the trapezoid rule
        out.append(b)
        prev_t = t
    return tuple(out)


def look_levels(confidence: float, schedule: list[int] | tuple[int, ...], spending: Spending = "obf") -> list[float]:
    """Two-sided confidence of each look's interval: 2 Phi(b_k) - 1 for the boundaries spending (1 - confidence)
    / 2 over the looks. One look: `confidence` itself (the fixed design)."""
    if len(schedule) == 1:
        return [confidence]
    total = schedule[-1]
    zs = boundaries(tuple(n / total for n in schedule), (1.0 - confidence) / 2.0, spending)
    return [1.0 - 2.0 * float(stats.norm.sf(z)) for z in zs]


def look_level(confidence: float, schedule: list[int], k: int, spending: Spending = "obf") -> float:
    """Two-sided confidence of look `k`'s interval (look_levels)."""
    return look_levels(confidence, schedule, spending)[k]


def _trinomial(m: int, p_lost: float, p_gain: float) -> tuple[np.ndarray, int, int]:
    """(pmf[losses - c0, gains - g0], c0, g0): the counts of lost and gained pairs among m, truncated to
    _WIDTH standard deviations of each."""

    def span(p: float) -> tuple[int, int]:
        if p <= 0:
            return 0, 0
        mean, sd = m * p, math.sqrt(m * p * (1 - p))
        return max(0, math.floor(mean - _WIDTH * sd - 1)), min(m, math.ceil(mean + _WIDTH * sd + 1))

    (c0, c1), (g0, g1) = span(p_lost), span(p_gain)
    losses, gains = np.arange(c0, c1 + 1), np.arange(g0, g1 + 1)
    q = p_gain / (1.0 - p_lost) if p_lost < 1 else 0.0
    pmf = stats.binom.pmf(losses, m, p_lost)[:, None] * stats.binom.pmf(gains[None, :], m - losses[:, None], q)
    return pmf, c0, g0


@dataclass(frozen=True)
class Operating:
    """What a design does to a variant of known loss and gain rates: the chance it passes, the chance it fails
    (the rest stays undecided), and the items it answers on average."""

    passes: float
    fails: float
    expected_n: float


def pass_probability(
    schedule: list[int] | tuple[int, ...],
    levels: list[float] | tuple[float, ...],
    p_lost: float,
    p_gain: float,
    threshold: float,
    min_samples: int = 1,
) -> Operating:
    """Exact operating characteristics of the gate's looks at `schedule` (each at its two-sided level) for pairs
    whose variant loses with probability `p_lost` and gains with `p_gain` (absolute shares of pairs): at each
    look, pass when Tango's statistic at `threshold` (the delta at the target) is >= the look's z, fail when it
    is < -z (the interval's upper bound below the threshold), as tasks.decision.gate.judge; a look with fewer
    than `min_samples` pairs decides nothing; the looks stop at the first decision."""
    passes = fails = expected = 0.0
    mass, c0, g0 = _trinomial(schedule[0], p_lost, p_gain)
    for k, (n, level) in enumerate(zip(schedule, levels)):
        if n >= min_samples:
            z = float(stats.norm.isf((1.0 - level) / 2.0))
            losses = np.arange(c0, c0 + mass.shape[0])[:, None]
            stat = tango_z(threshold, losses, np.arange(g0, g0 + mass.shape[1])[None, :], n)
            up, down = stat >= z, stat < -z
            passed, failed = float(mass[up].sum()), float(mass[down].sum())
            passes, fails, expected = passes + passed, fails + failed, expected + n * (passed + failed)
            mass = np.where(up | down, 0.0, mass)
        if k + 1 == len(schedule):
            expected += n * float(mass.sum())
            break
        inc, ic, ig = _trinomial(schedule[k + 1] - n, p_lost, p_gain)
        mass, c0, g0 = _trim(np.clip(signal.fftconvolve(mass, inc), 0.0, None), c0 + ic, g0 + ig)
    return Operating(passes, fails, expected)


def _trim(mass: np.ndarray, c0: int, g0: int, eps: float = 1e-30) -> tuple[np.ndarray, int, int]:
    """Drop outer rows and columns that carry no mass (keeps the grids small as the looks go on)."""
    rows, cols = np.nonzero(mass.sum(axis=1) > eps)[0], np.nonzero(mass.sum(axis=0) > eps)[0]
    if rows.size == 0 or cols.size == 0:
        return mass[:1, :1] * 0.0, c0, g0
    return mass[rows[0] : rows[-1] + 1, cols[0] : cols[-1] + 1], c0 + int(rows[0]), g0 + int(cols[0])


@functools.lru_cache(maxsize=4096)
def operating(
    p_lost: float,
    p_gain: float,
    threshold: float,
    confidence: float,
    last: int,
    first: int | None = None,
    min_samples: int = 1,
    spending: Spending = "obf",
) -> Operating:
    """pass_probability of the design a config plans: one look at `last` (fixed), or looks from `first` up to
    `last` (look_schedule) at their boundaries' levels."""
    schedule = look_schedule(first, last) if first is not None and first < last else [last]
    return pass_probability(
        schedule, look_levels(confidence, schedule, spending), p_lost, p_gain, threshold, min_samples
    )


@functools.lru_cache(maxsize=1024)
def n_for_power(
    p_lost: float,
    p_gain: float,
    threshold: float,
    confidence: float,
    power: float = DEFAULT_POWER,
    first: int | None = None,
    min_samples: int = 1,
    spending: Spending = "obf",
    cap: int = 50_000,
    decide: Literal["pass", "fail"] = "pass",
) -> int | None:
    """The smallest last look (the fixed n when `first` is None; else the maximum of an adaptive design with that
    first look) whose exact chance to `decide` (pass, or fail) reaches `power`, by bisection; None when even `cap`
    items do not (the exact computation grows with n: past 50,000 pairs a normal approximation is as good)."""

    def power_at(n: int) -> float:
        got = operating(p_lost, p_gain, threshold, confidence, n, first, min_samples, spending)
        return got.passes if decide == "pass" else got.fails

    lo = max(min_samples, first or 1, 1)
    if power_at(lo) >= power:
        return lo
    hi = lo
    while power_at(hi) < power:
        lo, hi = hi, hi * 2
        if hi > cap:
            return None if power_at(cap) < power else _bisect(power_at, power, lo, cap)
    return _bisect(power_at, power, lo, hi)


def _bisect(power_at, power: float, lo: int, hi: int) -> int:
    """Smallest n in (lo, hi] with power_at(n) >= power, power_at(lo) < power <= power_at(hi) (bisection)."""
    while hi - lo > max(1, lo // 200):  # to within 0.5 % of n: the power moves by less than its own saw-tooth
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if power_at(mid) >= power else (mid, hi)
    return hi
