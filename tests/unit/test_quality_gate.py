"""The quality gate's bounds and rule (tasks/decision/gate.py), errored samples in the pairs, and the looks of an
adaptive suite (tasks/decision/adaptive.py): pure functions on tiny inputs."""

from __future__ import annotations

import json

import numpy as np
import pytest
from scipy import stats

from tasks.core.stat_tests import tango_interval
from tasks.decision.design import boundaries, look_level, look_schedule
from tasks.decision.gate import FAIL, PASS, judge, look_at
from tasks.quality.deltas import (
    add_identity_bounds,
    delta_row,
    flip_rate_high,
    identity_retention_low,
    retention_interval,
)
from tasks.quality.looks import UNDECIDED, Budget, Look, sequential_gate


def _samples(variant, scores, errored=()):
    out = []
    for i, s in enumerate(scores):
        bad = i in errored
        out.append(
            {
                "variant": variant,
                "suite": "arith",
                "sample_id": f"s{i}",
                "score": None if bad else float(s),
                "valid": not bad,
                "details": json.dumps(
                    {"errored": int(bad), "invalid": int(bad), "error": "ReadTimeout" if bad else None}
                ),
            }
        )
    return out


def _score(variant, metric="accuracy", stat="mean(score)", hib=True):
    return {
        "run_id": "r",
        "variant": variant,
        "suite": "arith",
        "metric": metric,
        "unit": "fraction",
        "higher_is_better": hib,
        "value": 0.5,
        "n": 100,
        "sample_stat": stat,
    }


def test_errored_requests_count_as_wrong_not_as_absent():
    # The variant times out on 8 items the reference got right and answers the rest as the reference does:
    # dropped, they would leave 92 identical pairs (retention 100 %); counted, they are 8 losses.
    ref = _samples("ref", [1] * 50 + [0] * 50)
    var = _samples("var", [1] * 50 + [0] * 50, errored=range(8))
    row = delta_row(_score("var"), _score("ref"), ref, var, reference_variant="ref")
    assert (row["n"], row["n_lost"], row["n_gained"]) == (100, 8, 0)
    assert row["value"] == pytest.approx(0.42) and row["delta"] == pytest.approx(-0.08)
    assert (row["ci_low"], row["ci_high"]) == tango_interval(8, 0, 100, 0.95)
    assert "errored requests count as wrong (reference 0, variant 8)" in row["method"]
    # the reference erring counts against the reference alike; a lower-is-better 0/1 metric counts an error as 1
    inv_ref, inv_var = (_samples(v, [0] * 100) for v in ("ref", "var"))
    for s in inv_var[:3]:
        s["score"], s["details"] = None, json.dumps({"errored": 1})
    row = delta_row(
        _score("var", "invalid_rate", "mean(score)", hib=False),
        _score("ref", "invalid_rate", hib=False),
        inv_ref,
        inv_var,
        reference_variant="ref",
    )
    assert (row["delta"], row["n_lost"], row["n_gained"]) == (pytest.approx(0.03), 0, 3)


def test_retention_interval_maps_both_directions_and_clips():
    assert retention_interval(0.5, -0.1, 0.05, True) == (pytest.approx(0.8), pytest.approx(1.1))
    assert retention_interval(0.5, -0.7, -0.3, True) == (0.0, pytest.approx(0.4))
    # lower is better: reference / value; the upper bound is unbounded where the value may reach 0
    assert retention_interval(0.2, -0.05, 0.05, False) == (pytest.approx(0.8), pytest.approx(0.2 / 0.15))
    assert retention_interval(0.2, -0.3, 0.05, False) == (pytest.approx(0.8), None)
    assert retention_interval(0.0, -0.1, 0.1, True) == (None, None)
    assert retention_interval(0.5, None, None, True) == (None, None)


def test_identity_bounds():
    # all of n identical: 1 - alpha ** (1/n) with alpha = 2.5 % (one-sided), Clopper-Pearson otherwise
    assert flip_rate_high(300, 300, 0.95) == pytest.approx(1 - 0.025 ** (1 / 300))
    assert flip_rate_high(95, 100, 0.95) == pytest.approx(stats.beta.ppf(0.975, 6, 95))
    assert flip_rate_high(0, 0, 0.95) == 1.0
    assert identity_retention_low(0.5, 0.01, True) == pytest.approx(0.98)
    assert identity_retention_low(0.2, 0.01, False) == pytest.approx(0.2 / 0.21)
    rows = [{"n_lost": 0, "reference_value": 0.25, "higher_is_better": True}, {"n_lost": None, "reference_value": 1.0}]
    add_identity_bounds(rows, 6, 6, 0.95)
    assert rows[0]["identity_n"] == 6 and rows[0]["identity_flip_high"] == pytest.approx(1 - 0.025 ** (1 / 6))
    assert "identity_n" not in rows[1]  # not a 0/1 metric: |delta| <= flip does not hold


def _row(**kw):
    base = dict(
        n=80,
        delta=0.0,
        unit="fraction",
        higher_is_better=True,
        ci_low=-0.05,
        ci_high=0.05,
        retention_ci_low=0.8,
        retention_ci_high=1.2,
    )
    return {**base, **kw}


@pytest.mark.parametrize(
    "row, settings, expected",
    [
        (_row(), {}, UNDECIDED),
        (_row(retention_ci_low=0.99), {}, PASS),  # exactly the target clears it
        (_row(retention_ci_low=0.98999), {}, UNDECIDED),
        (_row(retention_ci_high=0.98), {}, FAIL),
        (_row(retention_ci_high=None, retention_ci_low=0.5), {}, UNDECIDED),  # unbounded above: no fail
        (_row(n=20, retention_ci_low=0.995), {}, UNDECIDED),  # below min_samples
        (_row(ci_low=None, ci_high=None), {}, UNDECIDED),  # no interval
        (_row(retention_ci_low=None, retention_ci_high=None), {}, UNDECIDED),  # no bound (e.g. an old row)
        (_row(delta=None, n=0), {}, UNDECIDED),
        ({"is_reference": True}, {}, PASS),
        # margin_points: the delta against -margin (2 points)
        (_row(ci_low=-0.019), {"margin_points": 2}, PASS),
        (_row(ci_low=-0.021), {"margin_points": 2}, UNDECIDED),
        (_row(ci_high=-0.03, ci_low=-0.1), {"margin_points": 2}, FAIL),
        (_row(higher_is_better=False, ci_low=-0.05, ci_high=0.019), {"margin_points": 2}, PASS),  # a rate of failures
        (_row(higher_is_better=False, ci_low=0.03, ci_high=0.1), {"margin_points": 2}, FAIL),
        (_row(unit="nats", retention_ci_low=0.995), {"margin_points": 2}, PASS),  # not a fraction: retention applies
        # identity: passes on the identity bound alone; the paired interval can still fail it
        (_row(identity_flip_high=0.002, identity_retention_low=0.992), {"identity_gate": True}, PASS),
        (_row(identity_flip_high=0.002, identity_retention_low=0.992, n=10), {"identity_gate": True}, PASS),
        (
            _row(identity_flip_high=0.3, identity_retention_low=0.4, retention_ci_low=0.995),
            {"identity_gate": True},
            UNDECIDED,
        ),
        (
            _row(identity_flip_high=0.3, identity_retention_low=0.4, retention_ci_high=0.9),
            {"identity_gate": True},
            FAIL,
        ),
        (_row(identity_flip_high=0.3, identity_retention_low=0.4, retention_ci_low=0.995), {}, PASS),  # not asked for
        (_row(identity_flip_high=0.015, identity_retention_low=0.4), {"identity_gate": True, "margin_points": 2}, PASS),
    ],
)
def test_judge(row, settings, expected):
    assert (
        judge(
            row, settings.get("target", 0.99), settings.get("margin_points"), 30, settings.get("identity_gate", False)
        )
        == expected
    )


def test_looks_have_no_sliver_and_one_look_is_the_fixed_design():
    assert look_schedule(80, None) == [80] and look_schedule(80, 80) == [80] and look_schedule(80, 50) == [80]
    assert look_schedule(40, 120) == [40, 80, 120] and look_schedule(40, 100) == [40, 80, 100]
    # the last doubling would leave a sliver (1,280 -> 1,319; 960 -> 1,000): merged into the last look
    assert look_schedule(40, 1319) == [40, 80, 160, 320, 640, 1319]
    assert look_schedule(30, 1000) == [30, 60, 120, 240, 480, 1000]
    assert look_level(0.95, [80], 0) == 0.95 and Look.fixed(0.95) == Look(0.95, 1, 1)
    schedule = look_schedule(30, 1000)
    assert look_at(0.95, schedule, 2) == Look(look_level(0.95, schedule, 2), 3, 6, 30)


def test_boundaries_are_lan_demets_obrien_fleming_and_pocock():
    # Five equally spaced looks, one-sided 0.025: the published O'Brien-Fleming-type boundaries (Jennison &
    # Turnbull 2000, table 7.6; gsDesign's sfLDOF) and Pocock-type (sfLDPocock).
    obf = boundaries((0.2, 0.4, 0.6, 0.8, 1.0), 0.025)
    assert obf == pytest.approx((4.877, 3.357, 2.680, 2.290, 2.031), abs=2e-3)
    pocock = boundaries((0.2, 0.4, 0.6, 0.8, 1.0), 0.025, "pocock")
    assert pocock == pytest.approx((2.438, 2.427, 2.410, 2.397, 2.389), abs=5e-3)
    # every look's level is below the confidence, the last one nearly the fixed design's
    levels = [look_level(0.95, [40, 80, 160, 320, 640, 1319], k) for k in range(6)]
    assert all(x > 0.95 for x in levels) and levels[-1] < 0.952


@pytest.mark.parametrize("spending", ["obf", "pocock"])
def test_the_looks_together_spend_alpha_under_their_joint_distribution(spending):
    # A random walk with the looks' information: the chance that some look crosses its boundary is alpha (not
    # the union bound's less), 400,000 paths.
    fractions = (40 / 1319, 80 / 1319, 160 / 1319, 320 / 1319, 640 / 1319, 1.0)
    zs = np.array(boundaries(fractions, 0.025, spending))
    rng = np.random.default_rng(0)
    t = np.array(fractions)
    steps = rng.standard_normal((400_000, len(t))) * np.sqrt(np.diff(t, prepend=0.0))
    z = np.cumsum(steps, axis=1) / np.sqrt(t)
    crossed = float(np.mean((z >= zs).any(axis=1)))
    assert crossed == pytest.approx(0.025, abs=0.0015)


def test_sequential_gate_stops_when_decided_out_of_budget_or_at_the_last_look():
    gates = iter([UNDECIDED, UNDECIDED, PASS])
    extended = []
    looks = sequential_gate([40, 80, 160, 320], lambda k: next(gates), lambda n: extended.append(n) or True)
    assert looks == [(40, UNDECIDED), (80, UNDECIDED), (160, PASS)] and extended == [80, 160]
    looks = sequential_gate([40, 80, 160], lambda k: UNDECIDED, lambda n: n <= 80)
    assert looks == [(40, UNDECIDED), (80, UNDECIDED)]
    assert sequential_gate([40, 80], lambda k: UNDECIDED, lambda n: True) == [(40, UNDECIDED), (80, UNDECIDED)]


def test_budget_starts_a_batch_only_when_it_would_end_in_time():
    now = [0.0]
    b = Budget(30.0, items=40, seconds=10.0, clock=lambda: now[0])  # 0.25 s per item so far
    assert b.allows(120) and not b.allows(121)
    now[0] = 20.0
    b.spent(40, 20.0)  # the batch was slower: 30 s for 80 items
    assert b.per_item_s() == pytest.approx(0.375) and b.allows(26) and not b.allows(27)
