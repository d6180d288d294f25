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


def test_effective_requests_keeps_independent_requests_and_shrinks_a_drifting_step():
    """Issue 36, item 4: the lag-1 rank autocorrelation of a step's latencies (per repeat, in send order) shrinks the
    requests a percentile claim counts, n (1 - r) / (1 + r), only when r is significant."""
    import numpy as np

    from tasks.core.percentiles import effective_requests, shown_within

    rng = np.random.default_rng(3)
    independent = [list(rng.lognormal(0, 0.3, 100)) for _ in range(3)]
    n_eff, r = effective_requests(independent)
    assert n_eff == 300 and abs(r) < 0.1
    z = np.zeros(300)
    for t in range(1, 300):
        z[t] = 0.9 * z[t - 1] + np.sqrt(1 - 0.81) * rng.standard_normal()
    n_eff, r = effective_requests([list(np.exp(0.3 * z))])
    assert 0.7 < r < 0.97 and n_eff == int(300 * (1 - r) / (1 + r)) and n_eff < 60
    # 0 of 299 over shows a p99 for independent requests, not for 299 drifting ones counted as n_eff
    assert shown_within(0, 299, 299, 99.0, 0.95) and not shown_within(0, 299, n_eff, 99.0, 0.95)
    # the over count is scaled with n: 1 of 473 shows it independent; counted as 300 it would be 1 of 300: no
    assert shown_within(1, 473, 473, 99.0, 0.95) and not shown_within(1, 473, 300, 99.0, 0.95)
    assert effective_requests([[1.0, 2.0]]) == (2, None)  # too few pairs to say
