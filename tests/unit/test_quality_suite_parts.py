"""The quality suites' pure parts: passkey prompts and the context grid, loop and repetition counts, code bodies
and problems, suite names and suite configs (the suites against a scripted endpoint, and the code sandbox:
tests/integration/test_quality_suites.py)."""

from __future__ import annotations

import pytest

from tasks.core.errors import close_matches
from tasks.quality.base import suite_for
from tasks.quality.suites.code import code_problems, extract_body, parses
from tasks.quality.suites.coherence import distinct_n, loop_start, repetition_rate
from tasks.quality.suites.longctx import LongCtxParams, grid, passkey_prompt
from tests.helpers import ROOT


@pytest.mark.parametrize("depth, where", [(0.0, "start"), (50.0, "middle"), (100.0, "end")])
def test_passkey_needle_depth(depth, where):
    prompt = passkey_prompt(None, 1024, depth, 12345)
    body = prompt[: prompt.index("What is the pass key?")]
    at = body.index("The pass key is 12345") / len(body)
    assert {"start": at < 0.2, "middle": 0.4 < at < 0.6, "end": at > 0.8}[where]
    assert 900 <= len(prompt) // 4 <= 1040  # ~4 characters per token without the model's tokenizer


def test_grid_clips_to_the_served_context():
    lengths, notes = grid(LongCtxParams(context_tokens=[512, 8192, 16384]), 2048)
    assert lengths == [512, 2032] and len(notes) == 2


@pytest.mark.parametrize(
    "tokens, start",
    [
        (list("abcdefghij") + list("xyz") * 10, 10),
        (list("abcdefghijklmnopqrstuvwxyz"), None),
        (list("ab") + ["q"] * 30, 2),
        (list("abcabcab"), None),  # too short to call a loop
    ],
)
def test_loop_start(tokens, start):
    assert loop_start(tokens, min_repeats=3, min_tokens=8) == start


@pytest.mark.parametrize(
    "tokens, n, rep, distinct",
    [
        (list("abcd"), 1, 0.0, 1.0),
        (list("aaaa"), 1, 0.75, 0.25),
        (list("abab"), 2, 1 / 3, 2 / 3),
    ],
)
def test_repetition_and_distinct(tokens, n, rep, distinct):
    assert repetition_rate(tokens, n) == pytest.approx(rep) and distinct_n(tokens, n) == pytest.approx(distinct)


@pytest.mark.parametrize(
    "completion, body",
    [
        ("\n    return x + 1\n\n\nprint(f(2))", "    return x + 1"),
        ("\n    y = x\n\n    return y\nz = 3", "    y = x\n\n    return y"),
        ("\n# usage\nprint(1)", ""),
        (" and more docstring\n    return 1", ""),
    ],
)
def test_extract_body(completion, body):
    assert extract_body(completion) == body


def test_code_problems_are_seeded():
    a, b, c = code_problems(10, 0), code_problems(10, 0), code_problems(10, 1)
    assert [(p.header, p.tests) for p in a] == [(p.header, p.tests) for p in b] != [(p.header, p.tests) for p in c]
    assert all(parses(p.header + "\n    pass\n", p.name) for p in a)


def test_unknown_suite_names_close_matches():
    with pytest.raises(ValueError) as e:
        suite_for("longcontext")
    assert "did you mean longctx" in str(e.value) and "\n" not in str(e.value)
    assert close_matches("zz", ["a", "b"], "suite") == "unknown suite 'zz'; known: a, b"


# ---------------------------------------------------------------- config: suites and their params


@pytest.mark.parametrize(
    "suite, expect",
    [
        (
            {"name": "longctx", "params": {"context_token": [512]}},
            "(longctx).params.context_token: unknown parameter of suite "
            "longctx; known: context_tokens, depths_pct, trials",
        ),
        (
            {"name": "arithmetic", "label": "arith2", "params": {"tasks": ["2D*"]}},
            "(arith2).params: unknown arithmetic task '2D*' (did you mean 2Dx",
        ),
        (
            {"name": "coherence", "params": {"judge": {"model": "x"}}},
            "(coherence).params.judge.base_url: required; add it",
        ),
        (
            {"name": "code", "params": {"timeout_s": -1}},
            "(code).params.timeout_s: input should be greater than 0 (got -1)",
        ),
        ({"name": "code", "variants": ["q9"]}, "variants: unknown variant 'q9'"),
        ({"name": "arithmetic"}, "suite 'arithmetic' is listed twice; give one a label"),
        ({"name": "multiturn", "limit": 0}, "quality.suites.2.limit:"),
    ],
)
def test_bad_suite_config_fails_in_one_line(suite, expect):
    import copy

    import yaml

    from tasks.core.errors import ConfigError
    from tasks.loader import parse_config

    cfg = yaml.safe_load((ROOT / "configs" / "demo.yaml").read_text())
    cfg = copy.deepcopy(cfg)
    cfg["quality"]["suites"] = [{"name": "arithmetic"}, {"name": "fidelity"}, suite]
    with pytest.raises(ConfigError) as e:
        parse_config(cfg)
    assert expect in str(e.value) and "\n" not in str(e.value)
