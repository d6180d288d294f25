"""The gate's design before the evidence (tasks/decision/design.py, tasks/decision/gate_plan.py): its exact power
against a brute-force enumeration through the pipeline's own interval and rule, and against random walks of the
paired counts; the n needed; the plan `tradeoff check` prints."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from flows.cli import main
from tasks.core.stat_tests import tango_interval, tango_z
from tasks.decision.design import look_levels, look_schedule, n_for_power, operating, pass_probability
from tasks.decision.gate_plan import Assumed, plan_config, plan_gate
from tasks.loader import load_config
from tests.helpers.configs import ROOT

DEMO = ROOT / "configs" / "demo.yaml"


def test_tango_z_on_arrays_is_the_scalar_statistic():
    losses, gains = np.array([[0, 3], [7, 1]]), np.array([[0, 2], [1, 9]])
    grid = tango_z(-0.02, losses, gains, 80)
    assert grid.shape == (2, 2)
    for i in range(2):
        for j in range(2):
            assert grid[i, j] == tango_z(-0.02, int(losses[i, j]), int(gains[i, j]), 80)


@pytest.mark.parametrize("p_lost,p_gain,threshold", [(0.05, 0.05, -0.05), (0.12, 0.02, -0.05), (0.0, 0.0, -0.1)])
def test_fixed_power_is_the_sum_over_every_count_the_interval_passes(p_lost, p_gain, threshold):
    # Brute force at n = 40: every (losses, gains), its trinomial probability, and the gate's own rule on Tango's
    # interval (lower bound >= threshold passes).
    n, want = 40, 0.0
    for lost in range(n + 1):
        for gained in range(n + 1 - lost):
            prob = stats.multinomial.pmf([lost, gained, n - lost - gained], n, [p_lost, p_gain, 1 - p_lost - p_gain])
            if prob and tango_interval(lost, gained, n, 0.95)[0] >= threshold:
                want += prob
    got = pass_probability([n], [0.95], p_lost, p_gain, threshold).passes
    assert got == pytest.approx(want, abs=1e-9)


def test_sequential_power_matches_random_walks_of_the_counts():
    schedule = [40, 80, 160]
    levels = look_levels(0.95, schedule)
    got = pass_probability(schedule, levels, 0.02, 0.01, -0.05, min_samples=30)
    rng = np.random.default_rng(1)
    sims = 40_000
    steps = [rng.multinomial(m, [0.02, 0.01, 0.97], size=sims) for m in np.diff([0, *schedule])]
    counts = np.cumsum(np.stack(steps), axis=0)
    decided = np.zeros(sims, dtype=bool)
    passed = np.zeros(sims, dtype=bool)
    for k, n in enumerate(schedule):
        z = stats.norm.isf((1 - levels[k]) / 2)
        stat = tango_z(-0.05, counts[k, :, 0], counts[k, :, 1], n)
        passed |= ~decided & (stat >= z)
        decided |= (stat >= z) | (stat < -z)
    assert got.passes == pytest.approx(passed.mean(), abs=0.01)
    assert 40 <= got.expected_n <= 160


def test_identical_answers_need_the_closed_form_of_tangos_interval():
    # No pair differs: Tango's lower bound is -z^2 / (n + z^2), so a 2-point margin needs z^2 (1 / 0.02 - 1) items.
    z2 = stats.norm.isf(0.025) ** 2
    assert n_for_power(0.0, 0.0, -0.02, 0.95) == math.ceil(z2 * (1 / 0.02 - 1)) == 189
    # the adaptive design from 40 needs a few more (its last look is a slightly stricter interval)
    assert 189 < n_for_power(0.0, 0.0, -0.02, 0.95, first=40) <= 210


def test_n_needed_reaches_the_power_and_one_less_does_not_by_much():
    n = n_for_power(0.01, 0.01, -0.02, 0.95, min_samples=30)
    assert operating(0.01, 0.01, -0.02, 0.95, n, None, 30).passes >= 0.8
    assert operating(0.01, 0.01, -0.02, 0.95, int(n * 0.95), None, 30).passes < 0.8
    # fail side: a variant 10 points worse is failed with 80 % by some n
    worse = n_for_power(0.12, 0.02, -0.02, 0.95, min_samples=30, decide="fail")
    assert operating(0.12, 0.02, -0.02, 0.95, worse, None, 30).fails >= 0.8


def test_adaptive_looks_keep_the_fixed_designs_power_at_their_maximum():
    for d in (0.02, 0.05):
        fixed = operating(d / 2, d / 2, -0.02, 0.95, 1319, None, 30).passes
        adaptive = operating(d / 2, d / 2, -0.02, 0.95, 1319, 40, 30).passes
        assert adaptive == pytest.approx(fixed, abs=0.05) and look_schedule(40, 1319)[-2] == 640


def test_the_demo_plan_warns_for_q2_k_only_and_check_prints_every_variant(capsys):
    cfg = load_config(DEMO)
    plans = {p.variant: p for p in plan_config(cfg)}
    assert set(plans) == {"q4_1-2s", "q2_k", "q4_1-spec"}
    assert plans["q2_k"].discordance == 0.05 and plans["q2_k"].fix() is not None
    assert plans["q4_1-2s"].discordance == 0.01 and plans["q4_1-2s"].fix() is None
    assert (plans["q4_1-2s"].first, plans["q4_1-2s"].last) == (40, 240)
    assert main(["check", str(DEMO)]) == 0
    out = capsys.readouterr().out.splitlines()
    gates = [line for line in out if line.startswith("gate arithmetic.accuracy")]
    assert len(gates) == 3 and all("if its quality is equal" in line and "80 % power at" in line for line in gates)
    (warning,) = [line for line in out if line.startswith("warning:")]
    assert "cannot pass q2_k even if its quality is equal" in warning and "fix: plan 1,055 items" in warning


def test_a_measured_discordance_replaces_the_assumption():
    cfg = load_config(DEMO)
    plan = plan_gate(cfg, "arithmetic.accuracy", Assumed(0.0, "measured: 0 of 480 pairs over 2 nights"), "q4_1-2s")
    assert plan.power == pytest.approx(1.0) and plan.n_needed == n_for_power(0.0, 0.0, -0.02, 0.95, first=40)
    assert "measured: 0 of 480 pairs" in plan.line()
