"""The quality gate: the bounds it rests on, its rule, and the looks of a sample that grows until it decides.

One home for each part. The bounds are computed here when a variant's deltas are computed and
stored in `quality_deltas` (retention_ci_low/_high, identity_*); they do not depend on the target,
so `tradeoff recommend --retention/--margin-points` re-judges a run without recomputing them.
The rule that compares them with the target is `judge` here and the `gated` CTE of
tasks/decision/sql/v_quality_gate.sql (the decision is made in SQL); a test holds the two equal
on every branch, as it holds v_slo_steps equal to tasks/decision/load_search.py. The nightly's
adaptive suites (tasks/decision/adaptive.py) and benchmarks/gate_error.py judge through `judge`.

Errors: the gate's error is a false pass (true retention below the target, gate says pass); each
side of the stored two-sided interval at `confidence` errs at most (1 - confidence) / 2 = 2.5 %.

Looks: an adaptive suite looks at its sample at planned sizes (`look_schedule`: doubling from the
first sample up to `max_items`, no sliver of a last look) and stops when the gate decides. Every look is a
chance of a false pass, so each look's interval is taken at the level of a group-sequential boundary
(`look_level`: Lan-DeMets O'Brien-Fleming-type spending of (1 - confidence) / 2 over the planned information
fractions, computed from the joint distribution of the looks, tasks/decision/design.py). A single look is the
fixed design: the full confidence.
"""

from __future__ import annotations

import math
from typing import Any, Mapping

from tasks.decision.design import look_level
from tasks.quality.looks import UNDECIDED, Look

PASS, FAIL = "pass", "fail"  # UNDECIDED (not_enough_evidence): tasks.quality.looks, whose loop stops on it
# IEEE slack where a bound equals the target by construction (e.g. retention 0.99 from 0.99 x 0.5 / 0.5).
_SLACK = 1e-12


def _get(row: Mapping[str, Any], key: str) -> Any:
    v = row.get(key)
    return None if v is None or (isinstance(v, float) and math.isnan(v)) else v


def margin_of(row: Mapping[str, Any], margin_points: float | None) -> float | None:
    """The non-inferiority margin in the metric's unit: `margin_points` / 100 for a fraction, else None."""
    return margin_points / 100.0 if margin_points is not None and row.get("unit") == "fraction" else None


def basis(row: Mapping[str, Any], margin_points: float | None, identity_gate: bool) -> str:
    """What the gate compares: identity (a lossless-by-construction variant's identity evidence),
    margin_points (the delta against an absolute margin, fraction metrics) or retention."""
    if identity_gate and _get(row, "identity_flip_high") is not None:
        return "identity"
    return "margin_points" if margin_of(row, margin_points) is not None else "retention"


def judge(
    row: Mapping[str, Any],
    target: float,
    margin_points: float | None = None,
    min_samples: int = 30,
    identity_gate: bool = False,
) -> str:
    """pass | fail | not_enough_evidence for one quality_deltas row (the rule of v_quality_gate's `gated` CTE).

    Pass when the gate's lower bound clears the threshold, fail when its upper bound is below it:
    on the retention scale (threshold `target`) or, with `margin_points` and a fraction metric, on
    the delta's (threshold -margin, signed so that higher is better). With `identity_gate`, a
    variant carrying identity evidence passes only on it (its flip-rate bound); its paired
    interval can still fail it. Undecided without a delta, an interval, a bound, or with fewer
    than `min_samples` pairs.
    """
    if row.get("is_reference"):
        return PASS
    n, delta = _get(row, "n") or 0, _get(row, "delta")
    if delta is None or n == 0:
        return UNDECIDED
    margin = margin_of(row, margin_points)
    how = basis(row, margin_points, identity_gate)
    hib = bool(row.get("higher_is_better", True))
    lo_d, hi_d = _get(row, "ci_low"), _get(row, "ci_high")
    if margin is not None:
        threshold = -margin
        low, high = (lo_d, hi_d) if hib else (None if hi_d is None else -hi_d, None if lo_d is None else -lo_d)
    else:
        threshold = target
        low, high = _get(row, "retention_ci_low"), _get(row, "retention_ci_high")
    if how == "identity":
        flip = _get(row, "identity_flip_high")
        id_low = -flip if margin is not None else _get(row, "identity_retention_low")
        if id_low is not None and id_low >= threshold - _SLACK:
            return PASS
    if lo_d is None or n < min_samples:
        return UNDECIDED
    if how != "identity" and low is not None and low >= threshold - _SLACK:
        return PASS
    if high is not None and high < threshold - _SLACK:
        return FAIL
    return UNDECIDED


def combine(gates: list[str]) -> str:
    """Several gating metrics: fail if any fails, undecided if any is undecided, else pass."""
    if FAIL in gates:
        return FAIL
    return UNDECIDED if UNDECIDED in gates or not gates else PASS


def look_at(confidence: float, schedule: list[int], k: int) -> Look:
    """Look k (0-based) of `schedule`, its interval at the group-sequential level (design.look_level)."""
    first = schedule[0] if len(schedule) > 1 else None
    return Look(look_level(confidence, schedule, k), k + 1, len(schedule), first)
