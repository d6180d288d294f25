"""The bounded YAML reader (tasks.core.bounds): the shipped configs read as safe_load reads them; what is refused."""

from __future__ import annotations

import pytest
import yaml

from tasks.core.bounds import data_problem, load_yaml
from tests.helpers import ROOT


@pytest.mark.parametrize("name", sorted(p.name for p in (ROOT / "configs").glob("*.yaml")))
def test_shipped_configs_read_as_safe_load_reads_them(name):
    text = (ROOT / "configs" / name).read_text()
    assert load_yaml(text) == yaml.safe_load(text)  # anchors, aliases and merge keys included


@pytest.mark.parametrize(
    "text, problem",
    [
        ("a: &a [1, *a]\n", "a YAML alias refers to a node that contains it (a recursive alias); write the values out"),
        ("a: " + "[" * 40 + "]" * 40 + "\n", "config: nested deeper than 32 levels; flatten it"),
        ("a: " + "[" * 5000 + "]" * 5000 + "\n", "config: nested too deeply to read (limit 32 levels)"),
        (
            "a: " + "9" * 5000 + "\n",
            "config: a value cannot be read (Exceeds the limit (4300 digits) for integer string "
            "conversion: value has 5000 digits; use sys.set_int_max_str_digits() to increase the "
            "limit; fix it",
        ),
    ],
)
def test_refused_documents_say_why_in_one_line(text, problem):
    with pytest.raises(ValueError) as e:
        load_yaml(text)
    assert str(e.value).startswith(problem[:100]) and "\n" not in str(e.value)


def test_a_shared_list_is_counted_once_per_reference():
    shared = list(range(60_000))
    assert data_problem({"a": shared}) is None
    assert (
        data_problem({"a": shared, "b": shared})
        == "config: more than 100000 values (shared references expanded); trim it"
    )
    loop: list = []
    loop.append(loop)  # a cycle stops at the depth limit
    assert data_problem({"a": loop}) == "config: nested deeper than 32 levels; flatten it"


def test_effective_requests_counts_clusters_drifts_and_repeat_levels():
    """Issue 36, item 4: the design effect of a step's latencies (Geyer's initial positive sequence over the ranks'
    autocorrelations, per repeat in send order) keeps most of independent requests, counts a pair of requests in
    flight together about once, a drift far less, and a step whose repeats sit at different levels as few."""
    import numpy as np

    from tasks.core.percentiles import effective_requests
    from tasks.decision.slo import counted_thresholds

    rng = np.random.default_rng(3)
    n_eff, deff = effective_requests([list(rng.lognormal(0, 0.3, 100)) for _ in range(3)])
    assert n_eff >= 220 and 1.0 <= deff < 1.4
    pairs = [list(np.repeat(rng.lognormal(0, 0.3, 50), 2) * (1 + 1e-3 * rng.random(100))) for _ in range(3)]
    n_eff, deff = effective_requests(pairs)
    assert 100 <= n_eff <= 180 and 1.6 < deff < 3.0  # about n / 2 (a lag-1 AR(1) extrapolation: n / 9)
    z = np.zeros(300)
    for t in range(1, 300):
        z[t] = 0.9 * z[t - 1] + np.sqrt(1 - 0.81) * rng.standard_normal()
    n_eff, deff = effective_requests([list(np.exp(0.3 * z))])
    assert n_eff < 40 and deff > 7  # the truth: (1 - 0.9) / (1 + 0.9) of 300, 15
    levels = [list(rng.lognormal(0, 0.05, 8) * level) for level in (1.0, 1.3, 1.7)]
    assert effective_requests(levels)[0] <= 6  # three host states, not 24 independent requests
    # 0 of 299 over shows a p99 counted as 299 independent requests, not counted as 30; and the over count is
    # scaled with n: 1 of 473 shows it (1 allowed), counted as 300 it is 1 of 300 (none allowed)
    assert counted_thresholds(299, 299, 99.0, 0.95)[0] == 0 and counted_thresholds(299, 30, 99.0, 0.95)[0] == -1
    assert counted_thresholds(473, 473, 99.0, 0.95)[0] == 1 and counted_thresholds(473, 300, 99.0, 0.95)[0] == 0
    assert effective_requests([[1.0, 2.0]]) == (2, None)  # too few requests to say
