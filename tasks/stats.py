"""Paired statistics of quality deltas against the reference: bootstrap CIs, McNemar, retention, verdicts.

Computed in Python, not SQL: at the end of each variant's quality suites (the reference is
measured first) from the per-sample rows of both variants, and stored as `quality_deltas`
rows (one Parquet part per variant, validated and loaded with the other tables). A bootstrap
in SQL would need a resample table of B x n rows per metric; numpy does it in milliseconds.

Each quality score says how it is computed from its suite's samples (`sample_stat`, e.g.
`mean(score)`, `p99(kl)`, `exp_mean_diff(nll_var,nll_ref) where task=gsm8k`), so the same
statistic is recomputed on paired bootstrap resamples of the samples both variants share.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import asdict, dataclass
from typing import Any, Callable

import numpy as np

# Statistics over one axis of a 2-D array (resamples x samples), each a vector per resample.
_STATS: dict[str, tuple[int, Callable[..., np.ndarray]]] = {
    "mean": (1, lambda a: a.mean(axis=-1)),
    "p99": (1, lambda a: np.percentile(a, 99, axis=-1)),
    "median": (1, lambda a: np.median(a, axis=-1)),
    # perplexity ratio of two NLL columns of the same rows: exp(mean(a) - mean(b))
    "exp_mean_diff": (2, lambda a, b: np.exp(a.mean(axis=-1) - b.mean(axis=-1))),
}
_STAT_RE = re.compile(r"^\s*(\w+)\(\s*([\w.\-]+)(?:\s*,\s*([\w.\-]+))?\s*\)\s*(?:where\s+(.+))?$")

VERDICTS = ("better", "worse", "inconclusive", "identical", "no_ci", "no_data")


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


def paired_columns(stat: SampleStat, ref_samples: list[dict], var_samples: list[dict]) -> tuple[list[str], np.ndarray, np.ndarray]:
    """The sample ids both sides have (with numeric fields), and their field columns: arrays (fields x n)."""
    def table(samples: list[dict]) -> dict[str, tuple[float, ...]]:
        out = {}
        for s in stat.rows(samples):
            vals = tuple(_number(_field(s, f)) for f in stat.fields)
            if all(v is not None for v in vals):
                out[s["sample_id"]] = vals
        return out

    ref, var = table(ref_samples), table(var_samples)
    ids = sorted(set(ref) & set(var))
    k = len(stat.fields)
    r = np.array([ref[i] for i in ids], dtype=float).reshape(len(ids), k).T
    v = np.array([var[i] for i in ids], dtype=float).reshape(len(ids), k).T
    return ids, r, v


def mcnemar_p(ref: np.ndarray, var: np.ndarray) -> float:
    """Exact two-sided McNemar p-value for paired 0/1 outcomes (binomial test on the discordant pairs)."""
    b = int(np.sum((ref == 1) & (var == 0)))
    c = int(np.sum((ref == 0) & (var == 1)))
    n = b + c
    if n == 0:
        return 1.0
    k = min(b, c)
    tail = sum(math.comb(n, i) for i in range(k + 1)) / 2.0**n
    return min(1.0, 2.0 * tail)


def bootstrap_delta_ci(stat: SampleStat, ref: np.ndarray, var: np.ndarray, resamples: int, confidence: float,
                       seed: int) -> tuple[float, float]:
    """Percentile CI of stat(var) - stat(ref) over paired resamples (the same sample ids on both sides)."""
    n = ref.shape[1]
    rng = np.random.default_rng(seed)
    deltas = np.empty(resamples)
    # Chunks keep memory at ~chunk x n floats per field, whatever n is.
    chunk = max(1, min(resamples, 2_000_000 // max(n, 1)))
    for start in range(0, resamples, chunk):
        idx = rng.integers(0, n, size=(min(chunk, resamples - start), n))
        deltas[start:start + idx.shape[0]] = (stat.compute(*(var[i][idx] for i in range(var.shape[0])))
                                              - stat.compute(*(ref[i][idx] for i in range(ref.shape[0]))))
    alpha = 1.0 - confidence
    lo, hi = np.quantile(deltas, [alpha / 2, 1 - alpha / 2])
    return float(lo), float(hi)


def retention(value: float | None, reference: float | None, higher_is_better: bool, level: float) -> bool | None:
    """MLPerf-style: the variant keeps >= `level` of the reference score.

    As in v_retention: value / reference for higher-is-better metrics, reference / value for
    lower-is-better ones, NULL when a side is NULL or a denominator is 0 (KL of the reference).
    """
    if value is None or reference is None:
        return None
    num, den = (value, reference) if higher_is_better else (reference, value)
    if den == 0 or reference == 0:
        return None
    return bool(num / den >= level - 1e-12)


def verdict(delta: float | None, ci: tuple[float, float] | None, n: int, higher_is_better: bool,
            min_samples: int) -> str:
    """better | worse | inconclusive | identical | no_ci | no_data; a CI spanning zero is inconclusive."""
    if n == 0 or delta is None:
        return "no_data"
    if ci is None:
        return "no_ci"
    if n < min_samples:
        return "inconclusive"  # too few samples for any finding, whatever the CI says
    lo, hi = ci
    if lo == hi == delta == 0:
        return "identical"
    if lo <= 0 <= hi:
        return "inconclusive"
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


def delta_row(score: dict, ref_score: dict, ref_samples: list[dict], var_samples: list[dict], *,
              reference_variant: str, resamples: int = 2000, confidence: float = 0.95, min_samples: int = 30,
              seed: int = 0) -> dict:
    """One quality_deltas row: a variant's score against the reference's, paired over shared samples."""
    hib = bool(score["higher_is_better"])
    common = dict(run_id=score["run_id"], variant=score["variant"], reference_variant=reference_variant,
                  suite=score["suite"], metric=score["metric"], unit=score.get("unit"), higher_is_better=hib,
                  confidence=confidence)
    text = score.get("sample_stat")
    if not text:
        value, ref_value = _number(score.get("value")), _number(ref_score.get("value"))
        d = value - ref_value if value is not None and ref_value is not None else None
        n = int(min(score.get("n") or 0, ref_score.get("n") or 0))
        return asdict(Delta(**common, reference_value=ref_value, value=value, delta=d, ci_low=None, ci_high=None,
                            p_value=None, n=n, retention_99=retention(value, ref_value, hib, 0.99),
                            retention_999=retention(value, ref_value, hib, 0.999),
                            verdict=verdict(d, None, n, hib, min_samples), method="no per-sample statistic"))
    stat = parse_sample_stat(text)
    ids, ref, var = paired_columns(stat, ref_samples, var_samples)
    n = len(ids)
    if n == 0:
        return asdict(Delta(**common, reference_value=None, value=None, delta=None, ci_low=None, ci_high=None,
                            p_value=None, n=0, retention_99=None, retention_999=None, verdict="no_data",
                            method=f"paired: {text}"))
    ref_value, value = float(stat.compute(*ref)), float(stat.compute(*var))
    d = value - ref_value
    ci = bootstrap_delta_ci(stat, ref, var, resamples, confidence, seed)
    binary = stat.fn == "mean" and np.isin(ref, (0.0, 1.0)).all() and np.isin(var, (0.0, 1.0)).all()
    p = mcnemar_p(ref[0], var[0]) if binary else None
    method = f"paired bootstrap B={resamples} over {text}" + ("; exact McNemar" if binary else "")
    return asdict(Delta(**common, reference_value=ref_value, value=value, delta=d, ci_low=ci[0], ci_high=ci[1],
                        p_value=p, n=n, retention_99=retention(value, ref_value, hib, 0.99),
                        retention_999=retention(value, ref_value, hib, 0.999),
                        verdict=verdict(d, ci, n, hib, min_samples), method=method))


def quality_deltas(ref_scores: list[dict], ref_samples: list[dict], var_scores: list[dict], var_samples: list[dict],
                   *, reference_variant: str, resamples: int = 2000, confidence: float = 0.95,
                   min_samples: int = 30, seed: int = 0) -> list[dict]:
    """A delta row for every (suite, metric) that both the reference and the variant scored."""
    ref_by_key = {(s["suite"], s["metric"]): s for s in ref_scores}
    by_suite = lambda rows: {k: [r for r in rows if r["suite"] == k] for k in {r["suite"] for r in rows}}  # noqa: E731
    ref_s, var_s = by_suite(ref_samples), by_suite(var_samples)
    out = []
    for s in var_scores:
        ref = ref_by_key.get((s["suite"], s["metric"]))
        if ref is None:
            continue
        out.append(delta_row(s, ref, ref_s.get(s["suite"], []), var_s.get(s["suite"], []),
                             reference_variant=reference_variant, resamples=resamples, confidence=confidence,
                             min_samples=min_samples, seed=seed))
    return out
