"""Paired statistics of quality deltas: McNemar, bootstrap CIs, retention, verdicts, pairing by sample id."""

from __future__ import annotations

import json
import math
from fractions import Fraction

import numpy as np
import pytest

from tasks.core.stat_tests import holm, sign_flip_p, tango_interval
from tasks.quality.deltas import (
    bootstrap_delta_ci,
    delta_row,
    mcnemar_p,
    parse_sample_stat,
    quality_deltas,
    retention,
    verdict,
)


@pytest.mark.parametrize(
    "b, c, expected",
    [
        (0, 0, 1.0),
        (5, 5, 1.0),
        (10, 0, 2 * 0.5**10),  # all discordant pairs one way
        (1, 6, 2 * sum(math.comb(7, i) for i in range(2)) / 2**7),
        (30, 10, 2 * sum(math.comb(40, i) for i in range(11)) / 2**40),
    ],
)
def test_mcnemar_exact(b, c, expected):
    # b pairs: reference right, variant wrong; c: the other way; plus concordant pairs that must not matter
    ref = np.array([1] * b + [0] * c + [1, 1, 0])
    var = np.array([0] * b + [1] * c + [1, 1, 0])
    assert mcnemar_p(ref, var) == pytest.approx(expected)


@pytest.mark.parametrize(
    "text, fn, fields, where",
    [
        ("mean(score)", "mean", ("score",), ()),
        ("p99(kl)", "p99", ("kl",), ()),
        ("exp_mean_diff(nll_var,nll_ref)", "exp_mean_diff", ("nll_var", "nll_ref"), ()),
        (
            "mean(exact_match) where task=gsm8k and filter=strict-match",
            "mean",
            ("exact_match",),
            (("task", "gsm8k"), ("filter", "strict-match")),
        ),
    ],
)
def test_parse_sample_stat(text, fn, fields, where):
    s = parse_sample_stat(text)
    assert (s.fn, s.fields, s.where) == (fn, fields, where)


@pytest.mark.parametrize("text", ["avg(score)", "mean(a,b)", "exp_mean_diff(a)", "mean(score) where task", ""])
def test_bad_sample_stat(text):
    with pytest.raises(ValueError, match="sample_stat"):
        parse_sample_stat(text)


@pytest.mark.parametrize(
    "value, ref, hib, level, expected",
    [
        (0.80, 0.80, True, 0.99, True),
        (0.792, 0.80, True, 0.99, True),  # exactly 99 %
        (0.791, 0.80, True, 0.99, False),
        (0.7992, 0.80, True, 0.999, True),
        (1.01, 1.00, False, 0.99, True),  # lower is better: ref / value = 0.990
        (1.02, 1.00, False, 0.99, False),
        (0.02, 0.0, False, 0.99, None),  # KL of the reference is 0: no ratio
        (None, 0.5, True, 0.99, None),
    ],
)
def test_retention(value, ref, hib, level, expected):
    assert retention(value, ref, hib, level) is expected


@pytest.mark.parametrize(
    "delta, ci, n, hib, expected",
    [
        (-0.1, (-0.2, -0.05), 100, True, "worse"),
        (-0.1, (-0.2, -0.05), 100, False, "better"),
        (0.1, (0.02, 0.2), 100, True, "better"),
        (0.05, (-0.02, 0.12), 100, True, "inconclusive"),  # CI spans zero
        (-0.5, (-0.8, -0.2), 10, True, "inconclusive"),  # 10 samples: never a finding
        (0.0, (0.0, 0.0), 100, True, "identical"),
        (0.1, None, 100, True, "no_ci"),
        (None, None, 0, True, "no_data"),
    ],
)
def test_verdict(delta, ci, n, hib, expected):
    assert verdict(delta, ci, n, hib, min_samples=30) == expected


def _samples(variant, scores, **details):
    return [
        {
            "variant": variant,
            "suite": "arith",
            "sample_id": f"s{i}",
            "score": float(s),
            "valid": True,
            "details": json.dumps({k: v[i] for k, v in details.items()}),
        }
        for i, s in enumerate(scores)
    ]


def _score(variant, metric="accuracy", stat="mean(score)", value=0.5, hib=True):
    return {
        "run_id": "r",
        "variant": variant,
        "suite": "arith",
        "metric": metric,
        "unit": "fraction",
        "higher_is_better": hib,
        "value": value,
        "n": 100,
        "sample_stat": stat,
    }


def test_bootstrap_ci_covers_a_known_shift():
    rng = np.random.default_rng(1)
    ref = rng.normal(0.0, 1.0, 400)
    var = ref + 0.3 + rng.normal(0.0, 0.1, 400)  # paired: the noise of ref cancels
    lo, hi = bootstrap_delta_ci(parse_sample_stat("mean(x)"), ref[None, :], var[None, :], 2000, 0.95, seed=0)
    assert lo < 0.3 < hi and hi - lo < 0.05


def test_accuracy_delta_pairs_by_sample_id_with_mcnemar():
    ref = _samples("ref", [1] * 80 + [0] * 20)
    var = _samples("var", [1] * 60 + [0] * 40)
    var.append({"variant": "var", "sample_id": "extra", "score": 1.0, "valid": True, "details": "{}"})  # unpaired
    row = delta_row(_score("var"), _score("ref"), ref, var, reference_variant="ref")
    assert row["n"] == 100 and row["reference_value"] == 0.8 and row["value"] == 0.6
    assert row["delta"] == pytest.approx(-0.2)
    assert row["ci_low"] < -0.2 < row["ci_high"] < 0
    assert row["p_value"] == pytest.approx(2 * 0.5**20)
    assert row["verdict"] == "worse" and row["retention_99"] is False
    assert "McNemar" in row["method"]


def test_small_delta_is_inconclusive_even_when_every_sample_flips():
    ref, var = _samples("ref", [1] * 10), _samples("var", [0] * 10)
    row = delta_row(_score("var"), _score("ref"), ref, var, reference_variant="ref")
    assert row["n"] == 10 and row["delta"] == -1.0 and row["verdict"] == "inconclusive"


def test_identical_outputs():
    # right/wrong scores: no pair differs, yet the interval is Tango's (+-7.1 points at n = 50), not [0, 0]
    ref, var = _samples("ref", [1, 0] * 25), _samples("var", [1, 0] * 25)
    row = delta_row(_score("var"), _score("ref"), ref, var, reference_variant="ref")
    assert (row["delta"], row["verdict"], row["p_value"], row["n_lost"], row["n_gained"]) == (
        0.0,
        "identical",
        1.0,
        0,
        0,
    )
    assert (row["ci_low"], row["ci_high"]) == tango_interval(0, 0, 50, 0.95)
    assert row["ci_low"] == pytest.approx(-(1.96**2) / (50 + 1.96**2), rel=1e-3)
    assert (row["retention_ci_low"], row["retention_ci_high"]) == (1 + row["ci_low"] / 0.5, 1 + row["ci_high"] / 0.5)
    # a continuous score: every pair identical gives a bootstrap no spread: [0, 0] stays, but it is no gate bound
    ref, var = _samples("ref", [1] * 40, x=[0.3] * 40), _samples("var", [1] * 40, x=[0.3] * 40)
    row = delta_row(_score("var", "x", "mean(x)"), _score("ref", "x", "mean(x)"), ref, var, reference_variant="ref")
    assert (row["ci_low"], row["ci_high"], row["verdict"]) == (0.0, 0.0, "identical")
    assert (row["retention_ci_low"], row["retention_ci_high"], row["n_lost"]) == (None, None, None)


def test_filtered_statistic_and_ratio_statistic():
    nll_ref = [1.0] * 50
    ref = _samples("ref", [1] * 50, ctx=[512, 1024] * 25, nll_var=nll_ref, nll_ref=nll_ref)
    var = _samples("var", [1, 0] * 25, ctx=[512, 1024] * 25, nll_var=[1.1] * 50, nll_ref=nll_ref)
    row = delta_row(
        _score("var", "acc_512", "mean(score) where ctx=512"),
        _score("ref", "acc_512", "mean(score) where ctx=512"),
        ref,
        var,
        reference_variant="ref",
        min_samples=10,
    )
    assert row["n"] == 25 and row["value"] == 1.0  # the ctx=512 samples are the ones the variant got right
    stat = "exp_mean_diff(nll_var,nll_ref)"
    row = delta_row(
        _score("var", "ppl_ratio", stat, hib=False),
        _score("ref", "ppl_ratio", stat, hib=False),
        ref,
        var,
        reference_variant="ref",
        min_samples=10,
    )
    assert row["reference_value"] == pytest.approx(1.0) and row["value"] == pytest.approx(math.exp(0.1))
    assert row["verdict"] == "worse" and row["retention_99"] is False


def test_metric_without_sample_stat_gets_no_ci():
    row = delta_row(
        _score("var", "kl_p99", None, value=0.3, hib=False),
        _score("ref", "kl_p99", None, value=0.0),
        [],
        [],
        reference_variant="ref",
    )
    assert row["delta"] == pytest.approx(0.3) and row["ci_low"] is None and row["verdict"] == "no_ci"


def test_quality_deltas_only_for_metrics_both_sides_have():
    ref_scores = [_score("ref")]
    var_scores = [_score("var"), _score("var", "only_here")]
    rows = quality_deltas(
        ref_scores, _samples("ref", [1] * 40), var_scores, _samples("var", [1] * 40), reference_variant="ref"
    )
    assert [(r["metric"], r["verdict"]) for r in rows] == [("accuracy", "identical")]


# --- issue 15: exact tests, intervals valid at small n, Holm, one retention definition ---


def _flips(n, losses, gains):
    """Paired 0/1 samples: `losses` pairs the variant gets wrong that the reference got right, `gains` the reverse."""
    same = [i % 2 for i in range(n - losses - gains)]  # concordant pairs, right and wrong alike
    ref = [1] * losses + [0] * gains + same
    var = [0] * losses + [1] * gains + same
    return _samples("ref", ref), _samples("var", var)


def test_mcnemar_does_not_overflow_on_large_benchmarks():
    # 1,100 discordant pairs: 2.0 ** 1100 overflowed a float (OverflowError on the old code)
    exact = 2 * Fraction(sum(math.comb(1100, i) for i in range(501)), 2**1100)
    assert mcnemar_p(np.array([1] * 600 + [0] * 500), np.array([0] * 600 + [1] * 500)) == pytest.approx(float(exact))
    ref, var = _flips(2000, 600, 500)
    row = delta_row(_score("var"), _score("ref"), ref, var, reference_variant="ref")
    assert row["p_value"] == pytest.approx(float(exact)) and row["n"] == 2000


@pytest.mark.parametrize(
    "n, losses, gains, p",
    [
        (50, 4, 0, 0.125),  # the old percentile bootstrap said "worse" from 4 one-way flips
        (100, 5, 0, 0.0625),
        (100, 7, 1, 0.0703125),
    ],
)
def test_few_flips_are_not_a_finding(n, losses, gains, p):
    ref, var = _flips(n, losses, gains)
    row = delta_row(_score("var"), _score("ref"), ref, var, reference_variant="ref")
    assert row["p_value"] == pytest.approx(p) and row["verdict"] == "inconclusive"
    assert row["ci_low"] <= row["delta"] <= row["ci_high"]


def test_enough_one_way_flips_are_worse():
    ref, var = _flips(100, 8, 0)  # p = 2 / 2**8 = 0.0078
    row = delta_row(_score("var"), _score("ref"), ref, var, reference_variant="ref")
    assert row["verdict"] == "worse" and row["ci_high"] < 0 and "Tango" in row["method"]


def test_tango_interval_matches_the_published_example():
    # Fagerland, Lydersen & Laake (2014), Bentur et al. data: n12 = 1, n21 = 7, N = 21 -> -0.517 to -0.026
    lo, hi = tango_interval(losses=7, gains=1, n=21, confidence=0.95)
    assert (round(lo, 3), round(hi, 3)) == (-0.517, -0.026)


@pytest.mark.parametrize("losses, gains, n", [(7, 1, 21), (16, 6, 161), (4, 0, 50), (0, 0, 50), (3, 9, 40)])
def test_tango_limits_invert_the_score_test_with_a_numeric_mle(losses, gains, n):
    """At each limit the score statistic, with p21 maximised numerically under H0, is exactly +-z."""
    from scipy import optimize, stats

    z = stats.norm.ppf(0.975)

    def score(delta):
        # multinomial log-likelihood over (p12, p21, p_concordant) with p12 = p21 + delta
        def nll(p21):
            p12, rest = p21 + delta, 1 - 2 * p21 - delta
            return -(gains * math.log(p12) + losses * math.log(p21) + (n - gains - losses) * math.log(rest))

        lo, hi = max(0.0, -delta) + 1e-12, (1 - delta) / 2 - 1e-12
        p21 = optimize.minimize_scalar(nll, bounds=(lo, hi), method="bounded", options={"xatol": 1e-13}).x
        return (gains - losses - n * delta) / math.sqrt(n * (2 * p21 + delta * (1 - delta)))

    lo, hi = tango_interval(losses, gains, n, 0.95)
    assert score(lo) == pytest.approx(z, abs=1e-4) and score(hi) == pytest.approx(-z, abs=1e-4)


@pytest.mark.parametrize("n", [6, 12])
def test_sign_flip_p_equals_scipys_exact_permutation_test(n):
    from scipy import stats

    rng = np.random.default_rng(n)
    ref, var = rng.normal(0, 1, n), rng.normal(0.5, 1, n)
    both = np.concatenate([ref, var])
    ours = sign_flip_p(lambda r, v: both[v].mean(-1) - both[r].mean(-1), n)
    theirs = stats.permutation_test(
        (ref, var), lambda x, y, axis: y.mean(axis) - x.mean(axis), vectorized=True, permutation_type="samples"
    ).pvalue
    assert ours == pytest.approx(theirs, abs=1e-12)


def test_holm_against_a_hand_computed_example():
    # sorted: 0.005 x 4 = 0.02; 0.01 x 3 = 0.03; 0.03 x 2 = 0.06; 0.04 x 1 = 0.04 -> raised to 0.06 (monotone)
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert holm([]) == [] and holm([0.7]) == [0.7]


def test_verdict_uses_the_holm_adjusted_p_of_the_variants_family():
    ref, var = _flips(100, 6, 0)  # alone: p = 2 / 2**6 = 0.031 -> worse
    alone = delta_row(_score("var"), _score("ref"), ref, var, reference_variant="ref")
    assert alone["verdict"] == "worse" and alone["p_value_adjusted"] == alone["p_value"]
    same = _samples("ref", [1, 0] * 50)  # a second tested metric on which nothing differs: p = 1
    for s in same:
        s["details"] = json.dumps({"other": s["score"]})
    ref_scores = [_score("ref"), _score("ref", "other", "mean(other)")]
    var_scores = [_score("var"), _score("var", "other", "mean(other)")]
    rows = quality_deltas(
        ref_scores,
        [*ref, *[{**s, "sample_id": "o" + s["sample_id"]} for s in same]],
        var_scores,
        [*var, *[{**s, "variant": "var", "sample_id": "o" + s["sample_id"]} for s in same]],
        reference_variant="ref",
    )
    acc, other = rows
    assert acc["p_value"] == pytest.approx(2 / 2**6) and acc["p_value_adjusted"] == pytest.approx(2 * 2 / 2**6)
    assert (acc["p_family_size"], other["p_family_size"]) == (2, 2)
    assert acc["verdict"] == "inconclusive" and other["verdict"] == "identical"


def test_verdict_needs_the_test_to_reject():
    assert verdict(-0.1, (-0.2, -0.05), 100, True, 30, p_value=0.2) == "inconclusive"
    assert verdict(-0.1, (-0.2, -0.05), 100, True, 30, p_value=0.01) == "worse"
    assert verdict(0.1, (-0.2, -0.05), 100, True, 30, p_value=0.01) == "inconclusive"  # estimate off the interval


def test_continuous_metric_gets_bca_and_a_sign_flip_test():
    rng = np.random.default_rng(3)
    kl = rng.lognormal(-3, 1, 60)
    ref = _samples("ref", [1] * 60, kl=[0.0] * 60)
    var = _samples("var", [1] * 60, kl=list(kl))
    row = delta_row(
        _score("var", "kl_mean", "mean(kl)", hib=False),
        _score("ref", "kl_mean", "mean(kl)", hib=False),
        ref,
        var,
        reference_variant="ref",
    )
    assert "BCa" in row["method"] and "sign-flip" in row["method"]
    assert 0 < row["ci_low"] < kl.mean() < row["ci_high"] and row["p_value"] < 0.001 and row["verdict"] == "worse"


def test_retention_has_no_tolerance_below_the_level():
    # the old flag allowed 1e-12 below the level, v_retention none: they disagreed here
    assert retention(0.99 - 1e-13, 1.0, True, 0.99) is False
    assert retention(0.99, 1.0, True, 0.99) is True


@pytest.mark.parametrize("n, has_interval", [(999, False), (1000, True)])
def test_p99_interval_only_with_ten_samples_beyond_it(n, has_interval):
    rng = np.random.default_rng(4)
    ref = _samples("ref", [1] * n, kl=[0.0] * n)
    var = _samples("var", [1] * n, kl=list(rng.lognormal(-3, 1, n)))
    row = delta_row(
        _score("var", "kl_p99", "p99(kl)", hib=False),
        _score("ref", "kl_p99", "p99(kl)", hib=False),
        ref,
        var,
        reference_variant="ref",
    )
    if has_interval:
        assert row["ci_low"] < row["delta"] < row["ci_high"] and row["verdict"] == "worse"
    else:
        assert row["ci_low"] is None and row["p_value"] is None and row["verdict"] == "no_ci"
        assert "needs >= 1000 paired samples" in row["method"]


def test_identical_only_when_no_sample_differs():
    # a median over 40 samples of which 5 moved: every resample's delta is 0, yet the samples differ
    ref = _samples("ref", [1] * 40, x=[0.0] * 40)
    var = _samples("var", [1] * 40, x=[0.0] * 35 + [1.0] * 5)
    row = delta_row(
        _score("var", "x_median", "median(x)"),
        _score("ref", "x_median", "median(x)"),
        ref,
        var,
        reference_variant="ref",
    )
    assert (row["delta"], row["ci_low"], row["ci_high"]) == (0.0, 0.0, 0.0) and row["verdict"] == "inconclusive"
