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
