"""Paired statistics of quality deltas: McNemar, bootstrap CIs, retention, verdicts, pairing by sample id."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from tasks.stats import (bootstrap_delta_ci, delta_row, mcnemar_p, parse_sample_stat, quality_deltas, retention,
                         verdict)


@pytest.mark.parametrize("b, c, expected", [
    (0, 0, 1.0),
    (5, 5, 1.0),
    (10, 0, 2 * 0.5**10),                       # all discordant pairs one way
    (1, 6, 2 * sum(math.comb(7, i) for i in range(2)) / 2**7),
    (30, 10, 2 * sum(math.comb(40, i) for i in range(11)) / 2**40),
])
def test_mcnemar_exact(b, c, expected):
    # b pairs: reference right, variant wrong; c: the other way; plus concordant pairs that must not matter
    ref = np.array([1] * b + [0] * c + [1, 1, 0])
    var = np.array([0] * b + [1] * c + [1, 1, 0])
    assert mcnemar_p(ref, var) == pytest.approx(expected)


@pytest.mark.parametrize("text, fn, fields, where", [
    ("mean(score)", "mean", ("score",), ()),
    ("p99(kl)", "p99", ("kl",), ()),
    ("exp_mean_diff(nll_var,nll_ref)", "exp_mean_diff", ("nll_var", "nll_ref"), ()),
    ("mean(exact_match) where task=gsm8k and filter=strict-match", "mean", ("exact_match",),
     (("task", "gsm8k"), ("filter", "strict-match"))),
])
def test_parse_sample_stat(text, fn, fields, where):
    s = parse_sample_stat(text)
    assert (s.fn, s.fields, s.where) == (fn, fields, where)


@pytest.mark.parametrize("text", ["avg(score)", "mean(a,b)", "exp_mean_diff(a)", "mean(score) where task", ""])
def test_bad_sample_stat(text):
    with pytest.raises(ValueError, match="sample_stat"):
        parse_sample_stat(text)


@pytest.mark.parametrize("value, ref, hib, level, expected", [
    (0.80, 0.80, True, 0.99, True),
    (0.792, 0.80, True, 0.99, True),      # exactly 99 %
    (0.791, 0.80, True, 0.99, False),
    (0.7992, 0.80, True, 0.999, True),
    (1.01, 1.00, False, 0.99, True),      # lower is better: ref / value = 0.990
    (1.02, 1.00, False, 0.99, False),
    (0.02, 0.0, False, 0.99, None),       # KL of the reference is 0: no ratio
    (None, 0.5, True, 0.99, None),
])
def test_retention(value, ref, hib, level, expected):
    assert retention(value, ref, hib, level) is expected


@pytest.mark.parametrize("delta, ci, n, hib, expected", [
    (-0.1, (-0.2, -0.05), 100, True, "worse"),
    (-0.1, (-0.2, -0.05), 100, False, "better"),
    (0.1, (0.02, 0.2), 100, True, "better"),
    (0.05, (-0.02, 0.12), 100, True, "inconclusive"),   # CI spans zero
    (-0.5, (-0.8, -0.2), 10, True, "inconclusive"),     # 10 samples: never a finding
    (0.0, (0.0, 0.0), 100, True, "identical"),
    (0.1, None, 100, True, "no_ci"),
    (None, None, 0, True, "no_data"),
])
def test_verdict(delta, ci, n, hib, expected):
    assert verdict(delta, ci, n, hib, min_samples=30) == expected


def _samples(variant, scores, **details):
    return [{"variant": variant, "suite": "arith", "sample_id": f"s{i}", "score": float(s), "valid": True,
             "details": json.dumps({k: v[i] for k, v in details.items()})} for i, s in enumerate(scores)]


def _score(variant, metric="accuracy", stat="mean(score)", value=0.5, hib=True):
    return {"run_id": "r", "variant": variant, "suite": "arith", "metric": metric, "unit": "fraction",
            "higher_is_better": hib, "value": value, "n": 100, "sample_stat": stat}


def test_bootstrap_ci_covers_a_known_shift():
    rng = np.random.default_rng(1)
    ref = rng.normal(0.0, 1.0, 400)
    var = ref + 0.3 + rng.normal(0.0, 0.1, 400)   # paired: the noise of ref cancels
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
    ref, var = _samples("ref", [1, 0] * 25), _samples("var", [1, 0] * 25)
    row = delta_row(_score("var"), _score("ref"), ref, var, reference_variant="ref")
    assert (row["delta"], row["ci_low"], row["ci_high"], row["verdict"]) == (0.0, 0.0, 0.0, "identical")
    assert row["p_value"] == 1.0


def test_filtered_statistic_and_ratio_statistic():
    nll_ref = [1.0] * 50
    ref = _samples("ref", [1] * 50, ctx=[512, 1024] * 25, nll_var=nll_ref, nll_ref=nll_ref)
    var = _samples("var", [1, 0] * 25, ctx=[512, 1024] * 25, nll_var=[1.1] * 50, nll_ref=nll_ref)
    row = delta_row(_score("var", "acc_512", "mean(score) where ctx=512"),
                    _score("ref", "acc_512", "mean(score) where ctx=512"), ref, var, reference_variant="ref", min_samples=10)
    assert row["n"] == 25 and row["value"] == 1.0  # the ctx=512 samples are the ones the variant got right
    stat = "exp_mean_diff(nll_var,nll_ref)"
    row = delta_row(_score("var", "ppl_ratio", stat, hib=False), _score("ref", "ppl_ratio", stat, hib=False), ref, var,
                    reference_variant="ref", min_samples=10)
    assert row["reference_value"] == pytest.approx(1.0) and row["value"] == pytest.approx(math.exp(0.1))
    assert row["verdict"] == "worse" and row["retention_99"] is False


def test_metric_without_sample_stat_gets_no_ci():
    row = delta_row(_score("var", "kl_p99", None, value=0.3, hib=False), _score("ref", "kl_p99", None, value=0.0),
                    [], [], reference_variant="ref")
    assert row["delta"] == pytest.approx(0.3) and row["ci_low"] is None and row["verdict"] == "no_ci"


def test_quality_deltas_only_for_metrics_both_sides_have():
    ref_scores = [_score("ref")]
    var_scores = [_score("var"), _score("var", "only_here")]
    rows = quality_deltas(ref_scores, _samples("ref", [1] * 40), var_scores, _samples("var", [1] * 40),
                          reference_variant="ref")
    assert [(r["metric"], r["verdict"]) for r in rows] == [("accuracy", "identical")]
