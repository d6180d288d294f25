"""What n requests support about a percentile (tasks.core.percentiles), the decision's step sizes (RunConfig), and
the search's bracket (tasks.decision.load_search): pure functions, by hand and against MLPerf LoadGen's figures."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from scipy import stats

from tasks.core.config import LoadSearchSpec, RunConfig
from tasks.core.errors import ConfigError
from tasks.core.percentiles import (
    COUNT_POWER,
    allowed_over,
    bound,
    counted_share,
    effective_requests,
    effective_requests_rows,
    interval,
    min_requests,
    missed_over,
    requests_needed,
    sized_requests,
    sizing_cache_path,
)


def test_the_fewest_requests_that_show_a_percentile() -> None:
    # p99 at 95 %: 0.99^299 = 0.0495 <= 0.05 < 0.99^298 = 0.0500
    assert 0.99**299 <= 0.05 < 0.99**298
    assert [min_requests(p, 0.95) for p in (99, 95, 90, 75, 50)] == [299, 59, 29, 11, 5]
    # MLPerf LoadGen (confidence 0.99, tolerance 0): a server run of 21 queries "would need to run at least 438
    # more queries" with none over the latency: 459 in all; one over needs h + t of its find_min_passing
    assert min_requests(99, 0.99) == 459
    assert requests_needed(1, 99, 0.95) == 473 and requests_needed(2, 99, 0.95) == 628
    assert min_requests(100, 0.95) is None  # no sample bounds a maximum


@pytest.mark.parametrize(
    "n, pct, conf",
    [(12, 99, 0.95), (300, 99, 0.95), (473, 99, 0.95), (100, 90, 0.99), (1000, 50, 0.9), (5000, 99.9, 0.975)],
)
def test_the_counts_are_binomial_tails(n: int, pct: float, conf: float) -> None:
    q = 1 - pct / 100
    a, m = allowed_over(n, pct, conf), missed_over(n, pct, conf)
    if a >= 0:
        assert stats.binom.cdf(a, n, q) <= 1 - conf < stats.binom.cdf(a + 1, n, q)
    else:
        assert stats.binom.cdf(0, n, q) > 1 - conf
    assert stats.binom.sf(m - 1, n, q) <= 1 - conf < stats.binom.sf(m - 2, n, q)
    assert a < m  # a step cannot be shown both within and above a limit


def test_the_bounds_are_order_statistics() -> None:
    xs = [float(i) for i in range(1, 501)]  # 500 requests, 1 ... 500 ms
    # p99 at 95 %: at most allowed_over(500) = 1 over, so the bound is the 499th smallest
    assert allowed_over(500, 99, 0.95) == 1 and bound(xs, 99, 0.95) == 499.0
    assert bound(xs[:12], 99, 0.95) is None  # 12 cannot bound a p99
    assert bound(xs, 99, 0.95, upper=False) == 500 - missed_over(500, 99, 0.95) + 1
    lo, hi = interval(xs, 99, 0.95)
    assert lo <= 495 <= hi and interval(xs[:300], 99, 0.95) == (None, None)  # 368 needed at 95 %
    assert interval(xs[:-1] + [math.inf], 99, 0.95) == (None, None)  # a failed request as a bound: no interval


BASE = {
    "models": {"m": {"path": __file__}},
    "variants": [{"name": "a", "model": "m", "quantization": "q4_1", "reference": True}],
}


def test_rate_steps_are_sized_from_the_percentile() -> None:
    cfg = RunConfig.model_validate({**BASE, "perf": {"rates": [1.0, 2.0], "num_prompts": 8, "repeats": 3}})
    # p99 at 95 % needs 299 a step counted, so 3 x 159 (TTFT and TPOT limited): independent requests are counted as
    # 299 on both 95 % of the time; after a 10 % warm-up share of the stream
    assert len(cfg.decision.slo_limits()) == 2 and sized_requests(99.0, 0.95, 3, 2) == 477
    assert (cfg.perf.rate_requests, cfg.perf.rate_warmup_share, cfg.perf.stream_requests()) == (159, 0.1, 175)
    again = RunConfig.model_validate(cfg.model_dump(mode="json"))  # the recorded config reloads the same
    assert (again.perf.rate_requests, again.perf.stream_requests()) == (159, 175)
    p90 = RunConfig.model_validate(
        {**BASE, "perf": {"rates": [1.0]}, "decision": {"percentile": 90, "min_requests": 50}}
    )
    assert p90.perf.rate_requests == 50
    closed = RunConfig.model_validate({**BASE, "perf": {"concurrency": [1, 2], "num_prompts": 4}})
    assert (closed.perf.rate_requests, closed.perf.rate_warmup_share) == (None, 0.0)  # closed-loop steps: as asked


@pytest.mark.parametrize("pct, repeats", [(99.0, 1), (90.0, 1), (90.0, 3), (75.0, 6), (50.0, 1)])
def test_rate_steps_get_the_fewest_requests_counted_as_enough_95_percent_of_the_time(pct, repeats) -> None:
    """Geyer's design effect scatters above 1 on independent requests, so a step of exactly min_requests is counted
    short of them most of the time; sized_requests is the fewest (per repeat) counted as enough COUNT_POWER of it."""
    need = min_requests(pct, 0.95)
    n = sized_requests(pct, 0.95, repeats)
    assert n % repeats == 0 and n > need
    assert counted_share(n // repeats, repeats, need) >= COUNT_POWER > counted_share(n // repeats - 1, repeats, need)
    assert counted_share(-(-need // repeats), repeats, need) < 0.8  # at the minimum: short of it often
    assert sized_requests(pct, 0.95, repeats, 3) >= n  # each of 3 latencies at 1 - 0.05 / 3


def test_sizes_are_kept_across_processes_and_a_bad_file_is_computed_again(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    path = sizing_cache_path()
    assert path == tmp_path / "tradeoff" / "sizing.json"
    sized_requests.cache_clear()
    n = sized_requests(90.0, 0.95, 2)
    (key,) = json.loads(path.read_text())  # the arguments and a digest of the code that answered
    assert key.endswith("|90.0|0.95|2|1") and json.loads(path.read_text())[key] == n
    for bad in ("{not json", json.dumps({key: -1}), json.dumps([n])):  # never trusted: computed again
        path.write_text(bad)
        sized_requests.cache_clear()
        assert sized_requests(90.0, 0.95, 2) == n and json.loads(path.read_text()) == {key: n}
    path.write_text(json.dumps({key: 7}))  # a kept answer is what a later process reads
    sized_requests.cache_clear()
    assert sized_requests(90.0, 0.95, 2) == 7
    sized_requests.cache_clear()


def test_the_share_counted_is_what_effective_requests_counts_on_independent_requests() -> None:
    """counted_share by the claim's own function, one step at a time (p90 at its size, one repeat): within
    Monte-Carlo error (+-2.7 % at 95 % from 250 steps, 3.5 sd) of the share sized_requests found."""
    n = sized_requests(90.0, 0.95)
    rng = np.random.default_rng(7)
    counted = [effective_requests([list(rng.lognormal(0, 1, n))])[0] >= 29 for _ in range(250)]
    assert abs(np.mean(counted) - counted_share(n, 1, 29)) < 0.045


def test_effective_requests_rows_count_each_step_as_effective_requests() -> None:
    rng = np.random.default_rng(3)
    for lengths in ([40], [7, 7, 7], [12, 5, 1], [2, 2]):
        steps = rng.lognormal(0, 1, (30, sum(lengths)))
        steps[::4] = np.round(steps[::4])  # ties
        steps[1::5, 0] = math.inf  # a failed request
        steps[2::5, :4] = np.cumsum(rng.standard_normal(4))  # a drift
        n_eff, deff = effective_requests_rows(steps, lengths)
        cuts = np.cumsum(lengths)[:-1]
        for row, e, d in zip(steps, n_eff, deff):
            want = effective_requests([list(p) for p in np.split(row, cuts)])
            assert (e, None if math.isnan(d) else d) == want


def test_a_percentile_of_100_is_refused_in_one_line() -> None:
    from tasks.loader import parse_config

    with pytest.raises(ConfigError, match=r"^decision.percentile: .*less than 100") as err:
        parse_config({**BASE, "decision": {"percentile": 100}})
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(
    "lo, hi, start, tried",
    [
        (4.0, None, None, [8.0, 16.0, 12.0, 14.0]),  # nothing failed yet: double, then bisect
        (None, 40.0, None, [20.0, 10.0, 15.0, 12.5]),  # nothing passed: halve, then bisect
        (None, None, 12.0, [12.0, 24.0, 18.0, 15.0]),  # no rate step at all: start at a closed-loop step's rate
    ],
)
def test_the_search_brackets_before_it_bisects(lo, hi, start, tried) -> None:
    from tasks.decision.load_search import search_rates

    got = search_rates(lo, hi, LoadSearchSpec(max_steps=4, tolerance_pct=1), lambda r: r <= 14.0, start=start)
    assert [r for r, _ in got] == tried


def test_the_chain_ignores_a_lucky_step_above_a_failure() -> None:
    from tasks.decision.load_search import chain

    assert chain([(4.0, True), (1.0, True), (2.0, False), (8.0, True)]) == (1.0, 2.0)
    assert chain([(1.0, False), (2.0, True)]) == (None, 1.0)
    assert chain([(1.0, True), (2.0, True)]) == (2.0, None)
