"""Perf statistics beyond the basics: percentiles on demand, goodput against SLOs, bootstrap intervals, repeats."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tasks.core.config import SLO_PRESETS, PerfSpec, SloSpec
from tasks.core.errors import ConfigError
from tasks.core.stat_tests import log_t_interval, t_interval
from tasks.loader import parse_config
from tasks.perf.metrics import RequestRecord, bootstrap_ci, describe, meets_slo, summarize, summarize_repeats


def rec(i, ttft, e2el, out=5, start=0.0, status="ok", warm=False, repeat=0):
    chunks = list(np.linspace(ttft, e2el, out)) if status == "ok" else []
    return RequestRecord(
        index=i,
        status=status,
        start_ms=start,
        ttft_ms=ttft if status == "ok" else None,
        e2el_ms=e2el if status == "ok" else None,
        prompt_tokens=10,
        output_tokens=out if status == "ok" else None,
        chunk_offsets_ms=chunks,
        is_warmup=warm,
        repeat=repeat,
    )


def test_describe_adds_requested_percentiles_with_vllm_names():
    d = describe([1.0, 2.0, 3.0, 4.0, 5.0], "ttft_ms", [25, 99.9])
    assert d["ttft_ms_p25"] == pytest.approx(2.0) and "ttft_ms_p99.9" in d and "ttft_ms_p50" in d


@pytest.mark.parametrize(
    "ttft,e2el,out,slo,good",
    [
        (100.0, 500.0, 5, {"ttft_ms": 200.0}, True),
        (300.0, 500.0, 5, {"ttft_ms": 200.0}, False),
        (100.0, 900.0, 5, {"ttft_ms": 200.0, "tpot_ms": 150.0}, False),  # TPOT (900-100)/4 = 200 > 150
        (100.0, 900.0, 5, {"ttft_ms": 200.0, "tpot_ms": 200.0}, True),  # limits are inclusive
        (100.0, 900.0, 1, {"tpot_ms": 1.0}, True),  # one token: TPOT counts as 0, as in vLLM
        (100.0, 900.0, 5, {"e2el_ms": 800.0}, False),
    ],
)
def test_meets_slo(ttft, e2el, out, slo, good):
    assert meets_slo(rec(0, ttft, e2el, out), slo) is good


def test_goodput_counts_requests_meeting_every_limit_over_the_duration():
    records = [
        rec(0, 100.0, 500.0, start=0.0),
        rec(1, 3000.0, 3500.0, start=500.0),
        rec(2, 0, 0, status="error", start=10.0),
    ]
    s = summarize(records, slo=SLO_PRESETS["mlperf-llama2-70b-server"])
    assert s["num_good"] == 1
    assert s["request_goodput"] == pytest.approx(1 / 4.0)  # 0 ms -> 500 + 3500 ms
    assert summarize(records)["request_goodput"] is None  # no SLO, no goodput


@pytest.mark.parametrize(
    "preset,ttft,tpot", [("mlperf-llama2-70b-server", 2000.0, 200.0), ("mlperf-llama2-70b-interactive", 450.0, 40.0)]
)
def test_mlperf_presets(preset, ttft, tpot):
    assert PerfSpec(slo=preset).slo.limits() == {"ttft_ms": ttft, "tpot_ms": tpot}
    assert SloSpec(preset=preset, ttft_ms=100.0).limits()["ttft_ms"] == 100.0  # explicit limits win


def test_bootstrap_is_seeded_and_brackets_the_estimate():
    rng = np.random.default_rng(1)
    groups = [[[v] for v in rng.normal(100, 10, 40)]]
    lo, hi = bootstrap_ci(groups, np.mean, 0.95, 500, seed=3)
    assert (lo, hi) == bootstrap_ci(groups, np.mean, 0.95, 500, seed=3)
    mean = np.mean([u[0] for u in groups[0]])
    assert lo < mean < hi and hi - lo < 10  # ~ 2 x 1.96 x 10 / sqrt(40) = 6.2
    assert bootstrap_ci([[[1.0]]], np.mean) == (None, None)


def test_cluster_bootstrap_widens_with_run_to_run_noise():
    """Two repeats that disagree: resampling repeats must show it; pooling requests alone hides it."""
    rng = np.random.default_rng(2)
    a = [[v] for v in rng.normal(100, 5, 30)]
    b = [[v] for v in rng.normal(130, 5, 30)]
    lo2, hi2 = bootstrap_ci([a, b], np.mean, 0.95, 1000, seed=0)
    lo1, hi1 = bootstrap_ci([a + b], np.mean, 0.95, 1000, seed=0)
    assert hi2 - lo2 > 2 * (hi1 - lo1)


def test_summarize_repeats_adds_counts_and_intervals():
    runs = [
        [rec(i, 100.0 + 10 * i + r, 600.0 + 10 * i, start=600.0 * i, repeat=r) for i in range(5)]
        + [rec(9, 0, 0, status="error", repeat=r)]
        for r in range(3)
    ]
    s = summarize_repeats(runs, slo={"ttft_ms": 125.0})
    assert (s["repeats"], s["num_requests"], s["num_ok"], s["num_errors"]) == (3, 18, 15, 3)
    per = [summarize(r)["output_throughput"] for r in runs]
    assert s["output_throughput"] == pytest.approx(np.mean(per))
    assert s["num_good"] == 9  # TTFT 100+r, 110+r, 120+r meet 125 ms; 130+r, 140+r do not
    for m in ("ttft_ms_mean", "request_throughput", "output_throughput"):
        assert s[f"{m}_ci_low"] <= s[f"{m}_ci_high"], m
    # 15 requests cannot bound a p99 (a 95 % interval needs 368): no interval, and the reason
    assert s["ttft_ms_p99_ci_low"] is None and "a 95 % interval of a p99 needs 368" in s["ci_method"]
    assert s["ttft_ms_mean_ci_low"] <= s["ttft_ms_mean"] <= s["ttft_ms_mean_ci_high"]
    one = summarize_repeats(runs[:1])
    assert one["output_throughput_ci_low"] is None and "1 value(s)" in one["ci_method"]
    # issue 15: one repeat holds no run-to-run variation, so no interval (was: a bootstrap over requests)
    assert one["ttft_ms_mean_ci_low"] is None and "n too small" in one["ci_method"]


@pytest.mark.parametrize(
    "perf,expect",
    [
        ({"rates": [0]}, "perf.rates.0: input should be greater than 0"),
        ({"rates": [-1.5]}, "perf.rates.0: input should be greater than 0"),
        ({"percentiles": [50, 101]}, "perf.percentiles.1: input should be less than or equal to 100"),
        ({"burstiness": 0}, "perf.burstiness: input should be greater than 0"),
        ({"len_spread": 1.0}, "perf.len_spread: input should be less than 1"),
        ({"slo": "mlperf-llama2-70b-server"}, "perf.slo: moved to decision.slo; write the SLO there"),
        ({"concurrency": []}, "perf.concurrency: no concurrency level"),
        ({"repeats": 0}, "perf.repeats: input should be greater than or equal to 1"),
    ],
)
def test_bad_perf_config_is_one_line(perf, expect):
    data = {
        "models": {"m": {"path": "/dev/null"}},
        "variants": [{"name": "a", "model": "m", "quantization": "q4_1", "reference": True}],
        "perf": perf,
    }
    with pytest.raises(ConfigError) as err:
        parse_config(data)
    assert str(err.value).startswith(expect) and "\n" not in str(err.value) and ";" in str(err.value)


@pytest.mark.parametrize(
    "perf,concurrency",
    [({}, [1, 2]), ({"rates": [1.0]}, []), ({"sweep": 3}, []), ({"rates": [1.0], "concurrency": [4]}, [4])],
)
def test_default_concurrency_only_without_other_steps(perf, concurrency):
    assert PerfSpec(**perf).concurrency == concurrency


# --- issue 15: honest intervals with few repeats ---

T975 = {1: 12.706204736174707, 2: 4.302652729749464}  # Student's t 97.5 % quantiles, 1 and 2 degrees of freedom


def test_t_interval_by_hand():
    lo, hi, why = t_interval([100.0, 130.0], 0.95)
    half = T975[1] * math.sqrt(450.0) / math.sqrt(2)  # s^2 = (15^2 + 15^2) / 1
    assert why is None and (lo, hi) == pytest.approx((115 - half, 115 + half))
    assert t_interval([100.0, None], 0.95) == (None, None, "n too small: 1 value(s), a t-interval needs >= 2")


def test_log_t_interval_by_hand():
    """The modified Cox interval (Olsson 2005, eq. 5): exp(ybar + s2/2 +- t sqrt(s2/k + s2^2/(2(k-1)))) over logs."""
    lo, hi, why = log_t_interval([100.0, 130.0], 0.95)
    y = np.log([100.0, 130.0])
    s2 = y.var(ddof=1)
    half = T975[1] * math.sqrt(s2 / 2 + s2 * s2 / 2)
    assert why is None and (lo, hi) == pytest.approx(
        (math.exp(y.mean() + s2 / 2 - half), math.exp(y.mean() + s2 / 2 + half))
    )
    assert log_t_interval([100.0, None], 0.95) == (None, None, "n too small: 1 value(s), an interval needs >= 2")
    assert log_t_interval([100.0, 0.0], 0.95)[:2] == (None, None)


def test_a_stalled_repeat_widens_the_interval_upwards_never_below_zero():
    """The issue's case: 3 repeats of TTFT means, one hit by a stall (7 s against ~0.5 s). The plain t interval
    reaches below 0 (an impossible latency); the log-scale one stays above 0 and still covers the three."""
    means = [470.0, 730.0, 7149.0]
    t_lo, _, _ = t_interval(means, 0.95)
    lo, hi, _ = log_t_interval(means, 0.95)
    assert t_lo < 0 < lo < min(means) and hi > max(means)


def test_repeat_intervals_are_log_t_intervals_over_each_repeats_figure():
    """Three repeats whose TTFTs sit at 100, 120 and 140 ms: the interval is over those three figures only."""
    runs = [
        [rec(i, base + i, base + 500.0 + i, start=600.0 * i, repeat=r) for i in range(5)]
        for r, base in enumerate((100.0, 120.0, 140.0))
    ]
    s = summarize_repeats(runs)
    per = [summarize(run) for run in runs]
    for name in ("ttft_ms_mean", "request_throughput", "output_throughput"):
        lo, hi, _ = log_t_interval([p[name] for p in per], 0.95)
        assert (s[f"{name}_ci_low"], s[f"{name}_ci_high"]) == pytest.approx((lo, hi)), name
        assert s[f"{name}_ci_low"] > 0
    # a percentile bootstrap never leaves the pooled TTFTs (100-144 ms); over 3 repeats the interval is wider
    assert s["ttft_ms_mean_ci_low"] < 100 and s["ttft_ms_mean_ci_high"] > 140
    assert "log-scale t interval" in s["ci_method"] and "run-to-run" in s["ci_method"]


def test_one_repeat_gives_null_intervals_with_the_reason():
    s = summarize_repeats([[rec(i, 100.0 + i, 600.0 + i, start=600.0 * i) for i in range(30)]])
    assert all(
        s[f"{m}_ci_{e}"] is None for m in ("ttft_ms_mean", "ttft_ms_p99", "output_throughput") for e in ("low", "high")
    )
    assert "n too small" in s["ci_method"]


def test_the_p99_interval_is_a_pair_of_order_statistics_of_the_pooled_requests():
    """400 requests (2 repeats of 200): the 97.5 % lower and upper order-statistic bounds of the p99, from scipy's
    binomial (the 392nd and 400th of 400 here), whatever the repeats' levels."""
    from tasks.core.percentiles import allowed_over, missed_over

    runs = [
        [rec(i, 100.0 + (i * 37) % 200 + 3 * r, 700.0 + i, start=800.0 * i, repeat=r) for i in range(200)]
        for r in range(2)
    ]
    s = summarize_repeats(runs)
    ttft = sorted(r.ttft_ms for run in runs for r in run)
    lo_k, hi_k = 400 - missed_over(400, 99, 0.975) + 1, 400 - allowed_over(400, 99, 0.975)
    assert (s["ttft_ms_p99_ci_low"], s["ttft_ms_p99_ci_high"]) == (ttft[lo_k - 1], ttft[hi_k - 1])
    assert s["ttft_ms_p99_ci_low"] <= s["ttft_ms_p99"] <= s["ttft_ms_p99_ci_high"]
    assert "order-statistic interval over the 400 pooled requests" in s["ci_method"]
