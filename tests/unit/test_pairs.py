"""Two variants' closed-loop throughputs compared round by round (warehouse.pairs): the paired interval of their
ratio is Student's paired t interval on the logs, rounds are matched by index, and a replicate axis is read as
separate comparisons."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from warehouse.pairs import pair_cells, ratio_interval


def test_the_interval_is_students_paired_t_on_the_logs():
    a = np.array([1.10, 1.32, 0.85, 1.21, 0.99, 1.27])
    b = np.array([1.00, 1.20, 0.80, 1.10, 0.90, 1.15])
    ratio, lo, hi = ratio_interval(a, b, 0.95)
    want = stats.ttest_rel(np.log(a), np.log(b)).confidence_interval(0.95)
    assert (math.log(lo), math.log(hi)) == pytest.approx((want.low, want.high), rel=1e-9)
    assert ratio == pytest.approx(math.exp(np.mean(np.log(a / b))))
    assert np.isnan(ratio_interval(a[:1], b[:1], 0.95)[1])  # one round: no interval
    same = ratio_interval(b * 1.05, b, 0.95)
    assert same[1] == pytest.approx(1.05) and same[2] == pytest.approx(1.05)  # no spread: a point


def test_rounds_are_matched_by_index_in_both_orders_and_per_replicate():
    fig = lambda x: np.array([[x, 64 * x], [x * 1.1, 64 * x * 1.1]])  # two replicates of one round
    steps = {
        ("a", "c1"): {0: fig(1.0), 1: fig(1.2), 2: fig(0.9)},
        ("b", "c1"): {1: fig(1.0), 2: fig(0.8), 3: fig(2.0)},  # rounds 1 and 2 in common with a
        ("a", "c2"): {0: fig(1.5), 1: fig(1.6)},  # the same variant's other step: never paired with a's c1
    }
    cells = {key: (n, cells) for key, n, _, cells in pair_cells(steps, {k: 0.95 for k in steps})}
    assert sorted(cells) == [
        ("a", "c1", "b", "c1"),
        ("a", "c2", "b", "c1"),
        ("b", "c1", "a", "c1"),
        ("b", "c1", "a", "c2"),
    ]
    n, ab = cells[("a", "c1", "b", "c1")]
    assert n == 2 and ab.shape == (2, 6)
    want = ratio_interval(np.array([1.2, 0.9]), np.array([1.0, 0.8]), 0.95)
    assert ab[0, :3] == pytest.approx(want) and ab[1, :3] == pytest.approx(want)  # both replicates scale alike
    assert ab[0, 3:] == pytest.approx(want)  # output tokens/s: the same ratios
    assert cells[("b", "c1", "a", "c1")][1][0, 0] == pytest.approx(1 / ab[0, 0])
    n, one = cells[("a", "c2", "b", "c1")]
    assert n == 1 and np.isnan(one).all()  # one round in common: no ratio, no interval
