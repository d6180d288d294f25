"""Failures are failures in the quality suites: errored requests are counted apart (`error_rate`), left unscored, a
suite above `quality.max_error_rate` (or one that raised) is suite_failed, and a variant with a suite_failed fails,
naming the suite (`check_suites`), so the nightly does not end green."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from typing import Any

import numpy as np

from tasks.quality.base import Score, SuiteResult
from tasks.quality.deltas import parse_sample_stat


def _details(sample: dict) -> dict:
    raw = sample.get("details")
    try:
        return json.loads(raw) if isinstance(raw, str) and raw else dict(raw or {})
    except ValueError:
        return {}


def request_errored(sample: dict) -> bool:
    """Whether the sample's request failed at the endpoint (no answer to score), as every suite records it:
    `valid` false with the request's `error` in its details (HELM: status 'error')."""
    d = _details(sample)
    return d.get("status") == "error" or (not sample.get("valid") and bool(d.get("error")))


def _field(sample: dict, details: dict, name: str) -> Any:
    """A sample's column (score, valid, sample_id) or a key of its details, as tasks.quality.deltas reads a
    sample_stat."""
    return sample.get(name) if name in ("score", "valid", "sample_id") else details.get(name)


def _number(x: Any) -> float | None:
    if x is None or isinstance(x, str):
        return None
    x = float(x)
    return None if math.isnan(x) else x


def _rescored(score: Score, kept: list[dict], errored: int, total: int) -> Score:
    """`score` recomputed from its sample_stat over the samples whose request did not error."""
    try:
        stat = parse_sample_stat(score.sample_stat or "")
    except ValueError:
        return score  # no recipe: the suite's own value stands
    rows = [(s, _details(s)) for s in kept]
    rows = [r for r in rows if all(str(_field(*r, k)) == v for k, v in stat.where)]
    cols = [[_number(_field(*r, f)) for r in rows] for f in stat.fields]
    keep = [i for i in range(len(rows)) if all(c[i] is not None for c in cols)]
    left_out = f"{errored} of {total} samples errored at the endpoint and are left out"
    if not keep:
        return replace(score, value=None, stderr=None, n=0, note=f"no sample left: {left_out}")
    arr = [np.array([c[i] for i in keep], dtype=float) for c in cols]
    value = float(stat.compute(*arr))
    stderr = score.stderr
    if stderr is not None:
        stderr = float(arr[0].std(ddof=1) / math.sqrt(len(keep))) if stat.fn == "mean" and len(keep) > 1 else None
    if score.metric.endswith("invalid_rate"):
        bad = int(round(value * len(keep)))
        note = f"{bad} of {len(keep)} answers empty or unparseable; {left_out}" if bad else left_out
    else:
        note = left_out + (f"; the suite's note (all samples): {score.note}" if score.note else "")
    return replace(score, value=value, stderr=stderr, n=len(keep), note=note)


class SuiteFailed(RuntimeError):
    """A quality suite of the variant ended suite_failed (the message names each such suite and why)."""


def check_suites(failed: dict[str, str]) -> None:
    """Raise SuiteFailed naming every failed suite (suite -> its suite_failed note), after all of them ran."""
    if failed:
        raise SuiteFailed("; ".join(f"suite {key} failed: {why.splitlines()[0][:200]}" for key, why in failed.items()))


def account_errors(result: SuiteResult, max_error_rate: float) -> tuple[SuiteResult, str | None]:
    """The suite's result with errored requests counted apart, and a one-line failure when above the threshold.

    Every sample gets `errored` (0/1) in its details; errored ones lose their score. An
    `error_rate` score is added. Above `max_error_rate` the scores are `error_rate` and
    `suite_failed` (its note has the counts and the first error), so no score stands for a model
    that was never asked.
    """
    n = len(result.samples)
    if n == 0:
        return result, None
    samples, kept, first = [], [], None
    for s in result.samples:
        bad = request_errored(s)
        d = _details(s)
        if bad:
            first = first or str(d.get("error") or "request failed")
        samples.append(
            {
                **s,
                "score": None if bad else s.get("score"),
                "details": json.dumps({**d, "errored": int(bad)}, default=str),
            }
        )
        if not bad:
            kept.append(samples[-1])
    errored = n - len(kept)
    rate = errored / n
    error_rate = Score(
        "error_rate",
        rate,
        None,
        n,
        "fraction",
        False,
        None,
        note=f"{errored} of {n} requests errored at the endpoint; first: {first.splitlines()[0][:200]}"
        if errored
        else None,
    )
    if rate > max_error_rate:
        line = (
            f"{errored} of {n} requests errored at the endpoint ({rate:.1%} > max_error_rate "
            f"{max_error_rate:.1%}); first: {first.splitlines()[0][:200]}"
        )
        return SuiteResult(
            samples, [error_rate, Score("suite_failed", 1.0, None, 1, "count", False, None, note=line[:300])]
        ), line
    scores = [_rescored(s, kept, errored, n) if errored else s for s in result.scores]
    return SuiteResult(samples, [*scores, error_rate]), None
