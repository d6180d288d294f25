"""Paired statistics of quality deltas against the reference: intervals, exact tests, Holm, retention, verdicts.

Computed in Python, not SQL: at the end of each variant's quality suites (the reference is
measured first) from the per-sample rows of both variants, and stored as `quality_deltas`
rows (one Parquet part per variant, validated and loaded with the other tables). A bootstrap
in SQL would need a resample table of B x n rows per metric; numpy does it in milliseconds.

Each quality score says how it is computed from its suite's samples (`sample_stat`, e.g.
`mean(score)`, `p99(kl)`, `exp_mean_diff(nll_var,nll_ref) where task=gsm8k`), so the same
statistic is recomputed on the samples both variants share. Per metric (tasks.core.stat_tests):
- 0/1 scores under `mean`: Tango's paired score interval and the exact McNemar test;
- any other statistic: scipy's BCa bootstrap over pairs and a paired sign-flip permutation test.
The family for Holm's adjustment is every row of one variant (against the reference, in one
run) that carries a p-value; the verdict is `better`/`worse` only when the interval excludes 0
and the Holm-adjusted p is <= 1 - confidence. docs/statistics.md has the measured coverage.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import asdict, dataclass
from typing import Any, Callable

import numpy as np
from scipy import stats

from tasks.core.stat_tests import (
    PERMUTATIONS,
    holm,
    mcnemar_exact_p,
    paired_bootstrap_interval,
    sign_flip_p,
    tango_interval,
)
from tasks.quality.looks import Look

# Statistics over one axis of a 2-D array (resamples x samples), each a vector per resample.
_STATS: dict[str, tuple[int, Callable[..., np.ndarray]]] = {
    "mean": (1, lambda a: a.mean(axis=-1)),
    "p99": (1, lambda a: np.percentile(a, 99, axis=-1)),
    "median": (1, lambda a: np.median(a, axis=-1)),
    # perplexity ratio of two NLL columns of the same rows: exp(mean(a) - mean(b))
    "exp_mean_diff": (2, lambda a, b: np.exp(a.mean(axis=-1) - b.mean(axis=-1))),
}
_STAT_RE = re.compile(r"^\s*(\w+)\(\s*([\w.\-]+)(?:\s*,\s*([\w.\-]+))?\s*\)\s*(?:where\s+(.+))?$")


# A bootstrap cannot reach past the sample's extremes, so a tail quantile's interval under-covers
# until enough samples lie beyond it: with a lognormal KL, a p99 delta's BCa interval covered
# 39 % at n = 50, 85 % at 200, 94 % at 500 and at 1000 (docs/statistics.md). Below
# MIN_TAIL_SAMPLES beyond the quantile (n = 1000 for p99, a margin for heavier tails) there is
# no interval (verdict no_ci) and no test.
_TAIL_SHARE = {"p99": 0.01}
MIN_TAIL_SAMPLES = 10


@dataclass(frozen=True)
class SampleStat:
    """A parsed `sample_stat`: function, the sample fields it reads, and `where key=value` filters."""

    fn: str
    fields: tuple[str, ...]
    where: tuple[tuple[str, str], ...]

    def rows(self, samples: list[dict]) -> list[dict]:
        return [s for s in samples if all(str(_field(s, k)) == v for k, v in self.where)]

    def compute(self, *cols: np.ndarray) -> np.ndarray:
        return _STATS[self.fn][1](*cols)


def retention_interval(
    reference: float | None, ci_low: float | None, ci_high: float | None, higher_is_better: bool
) -> tuple[float | None, float | None]:
    """A delta interval as a retention interval, with v_retention's definition of retention.

    value / reference (higher is better): [(ref + lo) / ref, (ref + hi) / ref], the lower bound
    clipped at 0; reference / value (lower is better): [ref / (ref + hi), ref / (ref + lo)], an
    upper bound of None where ref + lo <= 0 (unbounded). None for both without an interval or a
    positive reference. The reference value is taken as known: its own sampling error enters
    the gate through (1 - target) x (estimate - truth) only, 1 % of its standard error at a 99 %
    target, which benchmarks/gate_error.py measures (the simulation draws the reference too).
    """
    if reference is None or reference <= 0 or ci_low is None or ci_high is None:
        return None, None
    if higher_is_better:
        return max((reference + ci_low) / reference, 0.0), (reference + ci_high) / reference
    low = reference / (reference + ci_high) if reference + ci_high > 0 else None
    high = reference / (reference + ci_low) if reference + ci_low > 0 else None
    return low, high


def flip_rate_high(same: int, n: int, confidence: float) -> float:
    """One-sided (1 + confidence) / 2 Clopper-Pearson upper bound on the share of outputs that differ.

    `same` of `n` greedy outputs were identical: 1 - alpha ** (1 / n) when all were (alpha =
    (1 - confidence) / 2), scipy's beta quantile otherwise; 1 without outputs.
    """
    differ = n - same
    if n <= 0:
        return 1.0
    if differ >= n:
        return 1.0
    return float(stats.beta.ppf(0.5 + confidence / 2.0, differ + 1, n - differ))


def identity_retention_low(reference: float | None, flip_high: float, higher_is_better: bool) -> float | None:
    """The retention a per-sample score in [0, 1] keeps at least when at most `flip_high` of its outputs differ.

    Only samples whose output differs can change score, each by at most 1, so |delta| <= flip_high:
    (ref - flip) / ref (higher is better, clipped at 0) or ref / (ref + flip) (lower is better).
    """
    if reference is None or reference <= 0:
        return None
    if higher_is_better:
        return max((reference - flip_high) / reference, 0.0)
    return reference / (reference + flip_high)


def parse_sample_stat(text: str) -> SampleStat:
    """`fn(field[,field2]) [where k=v [and k=v]]` -> SampleStat; ValueError naming the known functions."""
    m = _STAT_RE.match(text or "")
    if not m or m[1] not in _STATS:
        raise ValueError(f"sample_stat {text!r}: use fn(field) [where key=value], fn one of {', '.join(_STATS)}")
    fields = tuple(f for f in (m[2], m[3]) if f)
    if len(fields) != _STATS[m[1]][0]:
        raise ValueError(f"sample_stat {text!r}: {m[1]} takes {_STATS[m[1]][0]} field(s)")
    where = tuple(tuple(c.strip().split("=", 1)) for c in re.split(r"\s+and\s+", m[4])) if m[4] else ()
    if any(len(w) != 2 for w in where):
        raise ValueError(f"sample_stat {text!r}: write filters as key=value")
    return SampleStat(m[1], fields, where)  # type: ignore[arg-type]


def _field(sample: dict, name: str) -> Any:
    """A sample's column (score, valid, sample_id) or a key of its JSON details."""
    if name in ("score", "valid", "sample_id"):
        return sample.get(name)
    details = sample.get("_details")
    if details is None:
        raw = sample.get("details")
        details = json.loads(raw) if isinstance(raw, str) and raw else (raw or {})
        sample["_details"] = details
    return details.get(name)


def _number(x: Any) -> float | None:
    if x is None or isinstance(x, str):
        return None
    x = float(x)
    return None if math.isnan(x) else x


def errored(sample: dict) -> bool:
    """Whether the sample's request errored at the endpoint (tasks.quality.suite_failures marks it `errored` = 1)."""
    return bool(_field(sample, "errored"))


def paired_columns(
    stat: SampleStat, ref_samples: list[dict], var_samples: list[dict], errored_as: float | None = None
) -> tuple[list[str], np.ndarray, np.ndarray]:
    """The sample ids both sides have (with numeric fields), and their field columns: arrays (fields x n).

    An errored sample has no score; with `errored_as` it takes that value (the worst outcome of a
    0/1 metric) instead of dropping out of the pairs, so a variant that errors on hard items does
    not look better than one that answers them.
    """

    def table(samples: list[dict]) -> dict[str, tuple[float, ...]]:
        out = {}
        for s in stat.rows(samples):
            vals = tuple(_number(_field(s, f)) for f in stat.fields)
            if errored_as is not None and any(v is None for v in vals) and errored(s):
                vals = tuple(errored_as if v is None else v for v in vals)
            if all(v is not None for v in vals):
                out[s["sample_id"]] = vals
        return out

    ref, var = table(ref_samples), table(var_samples)
    ids = sorted(set(ref) & set(var))
    k = len(stat.fields)
    r = np.array([ref[i] for i in ids], dtype=float).reshape(len(ids), k).T
    v = np.array([var[i] for i in ids], dtype=float).reshape(len(ids), k).T
    return ids, r, v


def discordant(ref: np.ndarray, var: np.ndarray) -> tuple[int, int]:
    """(losses, gains) of paired 0/1 outcomes: reference right and variant wrong, and the other way round."""
    return int(np.sum((ref == 1) & (var == 0))), int(np.sum((ref == 0) & (var == 1)))


def mcnemar_p(ref: np.ndarray, var: np.ndarray) -> float:
    """Exact two-sided McNemar p-value for paired 0/1 outcomes (scipy's binomial test on the discordant pairs)."""
    return mcnemar_exact_p(*discordant(ref, var))


def _delta_of(stat: SampleStat, ref: np.ndarray, var: np.ndarray) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    """stat(variant rows) - stat(reference rows) over index arrays into both sides stacked (see
    tasks.core.stat_tests)."""
    both = np.concatenate([ref, var], axis=1)  # fields x 2n: the reference's n rows, then the variant's

    def delta(ref_idx: np.ndarray, var_idx: np.ndarray) -> np.ndarray:
        return stat.compute(*(f[var_idx] for f in both)) - stat.compute(*(f[ref_idx] for f in both))

    return delta


def bootstrap_delta_ci(
    stat: SampleStat, ref: np.ndarray, var: np.ndarray, resamples: int, confidence: float, seed: int
) -> tuple[float, float]:
    """BCa bootstrap CI of stat(var) - stat(ref) over paired resamples (the same sample ids on both sides)."""
    lo, hi, _ = paired_bootstrap_interval(_delta_of(stat, ref, var), ref.shape[1], resamples, confidence, seed)
    return lo, hi


def retention(value: float | None, reference: float | None, higher_is_better: bool, level: float) -> bool | None:
    """MLPerf-style: the variant keeps >= `level` of the reference score.

    The one definition, the same as v_retention's: value / reference for higher-is-better
    metrics, reference / value for lower-is-better ones, compared with `level` as plain IEEE
    doubles (no tolerance, so SQL's `>=` gives the same answer); NULL when a side is NULL or a
    denominator is 0 (KL of the reference). The scores are the row's `value` and
    `reference_value` (on the samples both variants have).
    """
    if value is None or reference is None:
        return None
    num, den = (value, reference) if higher_is_better else (reference, value)
    if den == 0 or reference == 0:
        return None
    return bool(num / den >= level)


def verdict(
    delta: float | None,
    ci: tuple[float, float] | None,
    n: int,
    higher_is_better: bool,
    min_samples: int,
    p_value: float | None = None,
    alpha: float = 0.05,
    identical: bool | None = None,
) -> str:
    """better | worse | inconclusive | identical | no_ci | no_data.

    A finding needs the interval to exclude zero on the side of `delta` AND, where the metric
    carries a test, its (Holm-adjusted) `p_value` <= `alpha`; otherwise it is inconclusive.
    `identical`: whether no paired sample differs (None: read it from a [0, 0] interval and a 0
    delta, which a bootstrap of a median can also give when a few samples differ).
    """
    if n == 0 or delta is None:
        return "no_data"
    if ci is None:
        return "no_ci"
    if n < min_samples:
        return "inconclusive"  # too few samples for any finding, whatever the CI says
    lo, hi = ci
    if (lo == hi == delta == 0) if identical is None else identical:
        return "identical"
    if lo <= 0 <= hi or math.copysign(1.0, lo) != np.sign(delta):
        return "inconclusive"  # spans zero, or the estimate lies on the other side (BCa can do that)
    if p_value is not None and not p_value <= alpha:
        return "inconclusive"  # the exact test does not reject: the interval alone is no finding
    return "better" if (delta > 0) == higher_is_better else "worse"


@dataclass
class Delta:
    run_id: str
    variant: str
    reference_variant: str
    suite: str
    metric: str
    unit: str | None
    higher_is_better: bool
    reference_value: float | None
    value: float | None
    delta: float | None
    ci_low: float | None
    ci_high: float | None
    confidence: float
    p_value: float | None
    n: int
    retention_99: bool | None
    retention_999: bool | None
    verdict: str
    method: str
    p_value_adjusted: float | None = None  # Holm over the variant's tested metrics (p_family_size of them)
    p_family_size: int | None = None
    # 0/1 metrics: pairs the reference got right and the variant wrong (lost), and the reverse (gained)
    n_lost: int | None = None
    n_gained: int | None = None
    # the gate's bounds (tasks.decision.gate): the interval as retention; None where it is no bound
    retention_ci_low: float | None = None
    retention_ci_high: float | None = None
    # the look this interval was taken at (adaptive suites: 1..looks_planned) and its own two-sided level
    look_confidence: float | None = None
    looks: int | None = None
    looks_planned: int | None = None
    # identity evidence of a speculative variant whose plain decoding is the reference (add_identity_bounds)
    identity_n: int | None = None
    identity_same: int | None = None
    identity_flip_high: float | None = None
    identity_retention_low: float | None = None
    # samples a decision needs under the design in use, for the run's gate threshold (tasks.decision.gate_plan)
    n_needed_threshold: float | None = None
    n_needed_if_equal: int | None = None
    n_needed: int | None = None


def _zero_one(stat: SampleStat, samples: list[dict]) -> bool:
    """Whether the statistic is a mean of one field whose values are all 0 or 1 (a right/wrong metric)."""
    if stat.fn != "mean" or len(stat.fields) != 1:
        return False
    vals = [v for v in (_number(_field(s, stat.fields[0])) for s in stat.rows(samples)) if v is not None]
    return bool(vals) and all(v in (0.0, 1.0) for v in vals)


def delta_row(
    score: dict,
    ref_score: dict,
    ref_samples: list[dict],
    var_samples: list[dict],
    *,
    reference_variant: str,
    resamples: int = 2000,
    confidence: float = 0.95,
    min_samples: int = 30,
    seed: int = 0,
    look: Look | None = None,
) -> dict:
    """One quality_deltas row: a variant's score against the reference's, paired over shared samples.

    `look`: the look of an adaptive suite (its interval at the look's own level, tasks.decision.gate);
    None: the fixed design, one look at `confidence`. For 0/1 metrics an errored request counts as a
    wrong answer (a 1 for lower-is-better ones such as invalid_rate) on either side.
    """
    look = look or Look.fixed(confidence)
    hib = bool(score["higher_is_better"])
    common = dict(
        run_id=score["run_id"],
        variant=score["variant"],
        reference_variant=reference_variant,
        suite=score["suite"],
        metric=score["metric"],
        unit=score.get("unit"),
        higher_is_better=hib,
        confidence=confidence,
        look_confidence=look.level,
        looks=look.number,
        looks_planned=look.planned,
    )
    text = score.get("sample_stat")
    if not text:
        value, ref_value = _number(score.get("value")), _number(ref_score.get("value"))
        d = value - ref_value if value is not None and ref_value is not None else None
        n = int(min(score.get("n") or 0, ref_score.get("n") or 0))
        return asdict(
            Delta(
                **common,
                reference_value=ref_value,
                value=value,
                delta=d,
                ci_low=None,
                ci_high=None,
                p_value=None,
                n=n,
                retention_99=retention(value, ref_value, hib, 0.99),
                retention_999=retention(value, ref_value, hib, 0.999),
                verdict=verdict(d, None, n, hib, min_samples),
                method="no per-sample statistic",
            )
        )
    stat = parse_sample_stat(text)
    zero_one = _zero_one(stat, ref_samples + var_samples)
    errored_as = (0.0 if hib else 1.0) if zero_one else None
    ids, ref, var = paired_columns(stat, ref_samples, var_samples, errored_as)
    note = ""
    if errored_as is not None:
        paired = set(ids)
        counts = [
            sum(errored(s) for s in stat.rows(side) if s["sample_id"] in paired) for side in (ref_samples, var_samples)
        ]
        if any(counts):
            note = (
                f"errored requests count as {'wrong' if hib else int(errored_as)} (reference {counts[0]}, variant "
                f"{counts[1]})"
            )
    return pairs_row(
        common, stat, text, ref, var, resamples=resamples, min_samples=min_samples, seed=seed, look=look, note=note
    )


def pairs_row(
    common: dict,
    stat: SampleStat,
    text: str,
    ref: np.ndarray,
    var: np.ndarray,
    *,
    resamples: int,
    min_samples: int,
    seed: int,
    look: Look,
    note: str = "",
) -> dict:
    """The quality_deltas row of paired columns (fields x n, pair i at column i of both): delta_row after pairing.

    benchmarks/gate_error.py calls it on simulated columns: the same interval, test, verdict and gate bounds.
    """
    hib = common["higher_is_better"]
    n = ref.shape[1]
    if n == 0:
        return asdict(
            Delta(
                **common,
                reference_value=None,
                value=None,
                delta=None,
                ci_low=None,
                ci_high=None,
                p_value=None,
                n=0,
                retention_99=None,
                retention_999=None,
                verdict="no_data",
                method=f"paired: {text}",
            )
        )
    ref_value, value = float(stat.compute(*ref)), float(stat.compute(*var))
    d = value - ref_value
    identical = bool(np.array_equal(ref, var))
    zero_one = (
        stat.fn == "mean"
        and len(stat.fields) == 1
        and bool(np.isin(ref, (0.0, 1.0)).all() and np.isin(var, (0.0, 1.0)).all())
    )
    ci, p, method = paired_test(stat, ref, var, resamples, look.level, seed)
    lost, gained = discordant(ref[0], var[0]) if zero_one else (None, None)
    # every pair identical on a continuous statistic: a bootstrap has no spread, [0, 0] bounds nothing
    bounded = ci is not None and (zero_one or not identical)
    ret_low, ret_high = retention_interval(ref_value, *ci, hib) if bounded else (None, None)
    if note:
        method += f"; {note}"
    if look.planned > 1:
        method += f"; look {look.number} of {look.planned} at {look.level:.4%}"
    return asdict(
        Delta(
            **common,
            reference_value=ref_value,
            value=value,
            delta=d,
            ci_low=ci[0] if ci else None,
            ci_high=ci[1] if ci else None,
            p_value=p,
            n=n,
            retention_99=retention(value, ref_value, hib, 0.99),
            retention_999=retention(value, ref_value, hib, 0.999),
            verdict=verdict(d, ci, n, hib, min_samples, p, 1.0 - look.level, identical=identical),
            method=f"{method} over {text}",
            p_value_adjusted=p,
            p_family_size=1 if p is not None else None,
            n_lost=lost,
            n_gained=gained,
            retention_ci_low=ret_low,
            retention_ci_high=ret_high,
        )
    )


def paired_test(
    stat: SampleStat, ref: np.ndarray, var: np.ndarray, resamples: int, confidence: float, seed: int
) -> tuple[tuple[float, float] | None, float | None, str]:
    """(interval of the delta, raw two-sided p, method) for paired columns (fields x n) of both sides.

    0/1 scores under `mean`: Tango's score interval and exact McNemar, also when no pair differs
    (0 discordant pairs of 80: +-4.6 points, not [0, 0]). Other identical samples: [0, 0] and p = 1
    (nothing differs to resample or test; the gate takes no bound from it). Otherwise: BCa
    bootstrap and sign-flip test, except a tail quantile with too few samples beyond it (no
    interval, no test; see _TAIL_SHARE).
    """
    n = ref.shape[1]
    if stat.fn == "mean" and np.isin(ref, (0.0, 1.0)).all() and np.isin(var, (0.0, 1.0)).all():
        losses, gains = discordant(ref[0], var[0])
        how = "identical paired samples; " if losses + gains == 0 else ""
        return (
            tango_interval(losses, gains, n, confidence),
            mcnemar_exact_p(losses, gains),
            f"{how}Tango score interval; exact McNemar (binomtest)",
        )
    if np.array_equal(ref, var):
        return (0.0, 0.0), 1.0, "identical paired samples"
    if n < 2:
        return None, None, "one paired sample: no interval"
    tail = _TAIL_SHARE.get(stat.fn)
    if tail and n * tail < MIN_TAIL_SAMPLES:
        need = math.ceil(MIN_TAIL_SAMPLES / tail)
        return None, None, f"no interval: {stat.fn} needs >= {need} paired samples ({MIN_TAIL_SAMPLES} beyond it)"
    delta_of = _delta_of(stat, ref, var)
    lo, hi, how = paired_bootstrap_interval(delta_of, n, resamples, confidence, seed)
    permutations = max(resamples, PERMUTATIONS)
    p = sign_flip_p(delta_of, n, permutations, seed)
    return (lo, hi), p, f"{how}; sign-flip permutation test B={permutations}"


def quality_deltas(
    ref_scores: list[dict],
    ref_samples: list[dict],
    var_scores: list[dict],
    var_samples: list[dict],
    *,
    reference_variant: str,
    resamples: int = 2000,
    confidence: float = 0.95,
    min_samples: int = 30,
    seed: int = 0,
    looks: dict[str, Look] | None = None,
) -> list[dict]:
    """A delta row for every (suite, metric) that both the reference and the variant scored.

    `looks`: suite -> the look its interval is taken at (adaptive suites); the others one look at `confidence`.
    """
    ref_by_key = {(s["suite"], s["metric"]): s for s in ref_scores}
    by_suite = lambda rows: {k: [r for r in rows if r["suite"] == k] for k in {r["suite"] for r in rows}}
    ref_s, var_s = by_suite(ref_samples), by_suite(var_samples)
    out = []
    for s in var_scores:
        ref = ref_by_key.get((s["suite"], s["metric"]))
        if ref is None:
            continue
        out.append(
            delta_row(
                s,
                ref,
                ref_s.get(s["suite"], []),
                var_s.get(s["suite"], []),
                reference_variant=reference_variant,
                resamples=resamples,
                confidence=confidence,
                min_samples=min_samples,
                seed=seed,
                look=(looks or {}).get(s["suite"]),
            )
        )
    return adjust_family(out, min_samples)


def adjust_family(rows: list[dict], min_samples: int) -> list[dict]:
    """Holm over the rows that carry a p-value (one variant's family); verdicts redone on the adjusted p."""
    tested = [r for r in rows if r["p_value"] is not None]
    for r, adjusted in zip(tested, holm([r["p_value"] for r in tested])):
        r["p_value_adjusted"], r["p_family_size"] = adjusted, len(tested)
        if r["verdict"] == "identical":
            continue  # nothing differs: no adjustment makes it a finding
        ci = (r["ci_low"], r["ci_high"]) if r["ci_low"] is not None else None
        level = r.get("look_confidence") or r["confidence"]
        r["verdict"] = verdict(
            r["delta"], ci, r["n"], r["higher_is_better"], min_samples, adjusted, 1.0 - level, identical=False
        )
    return rows


def add_identity_bounds(rows: list[dict], same: int, n: int, confidence: float) -> list[dict]:
    """Identity evidence on every 0/1 metric's row: `same` of `n` greedy outputs identical to plain decoding.

    For a speculative variant whose plain decoding is the reference (the caller checks): at most
    identity_flip_high of outputs differ (one-sided Clopper-Pearson), so a 0/1 score's delta is
    within +-identity_flip_high and its retention at least identity_retention_low. That assumes the
    identity prompts flip at least as often as the gating suite's; the gate uses it only when
    decision.identity_gate says the variant is lossless by construction.
    """
    flip = flip_rate_high(same, n, confidence)
    for r in rows:
        if r.get("n_lost") is None:
            continue
        r.update(
            identity_n=n,
            identity_same=same,
            identity_flip_high=flip,
            identity_retention_low=identity_retention_low(r["reference_value"], flip, r["higher_is_better"]),
        )
    return rows
