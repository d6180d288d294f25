"""Quality suites on a scripted local endpoint: scoring, bad answers counted, a judge that is down, the code sandbox.

The stub answers like an oracle (it reads the answer out of the prompt), or badly (empty,
HTTP 500, a loop), so each suite's scoring is checked without a model. The real model is used
only where the suite computes from logits in-process (the log-likelihood scorer).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tasks.quality.base import suite_for
from tasks.quality.suites.code import code_problems, run_tests
from tests.helpers.oracle import CODE_BODIES, oracle_chat, oracle_completion
from tests.helpers.suites import suite_context
from tests.stubs.quality_stub import start


@pytest.fixture(scope="module")
def stub():
    srv, url = start(oracle_completion, oracle_chat)
    yield url
    srv.shutdown()


def run_suite(url: str, name: str, model: str, tmp_path: Path, limit: int | None = None, **params):
    ctx = suite_context(
        tmp_path / name,
        variant=model,
        base_url=url,
        served_model=model,
        limit=limit,
        params=params,
        n_ctx=2048,
        request_timeout_s=10,
    )
    return suite_for(name).run(ctx)


def scores(result) -> dict:
    return {s.metric: s for s in result.scores}


# ---------------------------------------------------------------- suites over the stub


@pytest.mark.parametrize(
    "model, accuracy, invalid",
    [("oracle", 1.0, 0.0), ("empty", 0.0, 1.0), ("http500", 0.0, 1.0), ("garbage", 0.0, 1.0)],
)
def test_arithmetic_counts_bad_answers_as_wrong(stub, tmp_path, model, accuracy, invalid):
    res = run_suite(stub, "arithmetic", model, tmp_path, limit=8)
    s = scores(res)
    assert s["accuracy"].value == accuracy and s["invalid_rate"].value == invalid
    if invalid:
        assert s["invalid_rate"].note == "8 of 8 answers empty, unparseable or errored"
    assert len(res.samples) == 8 and all(x["score"] in (0.0, 1.0) for x in res.samples)


def test_longctx_grid(stub, tmp_path):
    res = run_suite(
        stub, "longctx", "oracle", tmp_path, context_tokens=[256, 512, 4096], depths_pct=[0, 50, 100], trials=2
    )
    s = scores(res)
    assert len(res.samples) == 3 * 3 * 2 and s["accuracy"].value == 1.0
    assert set(s) >= {"accuracy_ctx256", "accuracy_ctx512", "accuracy_ctx2032"}
    assert s["accuracy"].note == "4096 clipped to 2032 (served context 2048)"
    cells = {(d["context_tokens"], d["depth_pct"]) for d in (json.loads(x["details"]) for x in res.samples)}
    assert len(cells) == 9
    assert s["accuracy_ctx512"].sample_stat == "mean(score) where context_tokens=512"


def test_multiturn(stub, tmp_path):
    res = run_suite(stub, "multiturn", "oracle", tmp_path, limit=10, distractor_turns=2)
    assert scores(res)["accuracy"].value == 1.0
    asked = {json.loads(x["details"])["asked"] for x in res.samples}
    assert asked == {"name", "pet", "city", "color", "number"}
    messages = json.loads(res.samples[0]["prompt"])
    assert len(messages) == 1 + 1 + 2 * 2 + 1


def test_code_validity(stub, tmp_path):
    res = run_suite(stub, "code", "oracle", tmp_path, limit=24)
    s = scores(res)
    names = [p.name for p in code_problems(24, 0)]
    assert s["parse_rate"].value == 1.0
    assert s["pass_rate"].value == pytest.approx(sum(n in CODE_BODIES for n in names) / 24)
    assert s["invalid_rate"].value == 0.0


def test_coherence_detects_a_loop_and_survives_a_dead_judge(stub, tmp_path):
    res = run_suite(
        stub,
        "coherence",
        "loop",
        tmp_path,
        limit=2,
        max_tokens=64,
        embeddings=False,
        judge={"base_url": "http://127.0.0.1:9", "model": "judge", "timeout_s": 2},
    )
    s = scores(res)
    assert s["loop_rate"].value == 1.0 and s["loop_start_tokens_median"].value is not None
    assert s["rep_rate_4"].value > 0.8 and s["distinct_2"].value < 0.2
    assert s["judge_score"].value is None and "judge endpoint http://127.0.0.1:9 failed" in s["judge_score"].note
    assert s["drift_mean"].value is None and s["drift_mean"].note == "embeddings off"
    assert json.loads(res.samples[0]["details"])["token_unit"] == "word"


def test_coherence_drift_with_minilm(stub, tmp_path):
    res = run_suite(stub, "coherence", "loop", tmp_path, limit=1, max_tokens=64, window_tokens=40)
    d = json.loads(res.samples[0]["details"])
    assert len(d["drift_windows"]) >= 2 and all(0.0 <= x <= 2.0 for x in d["drift_windows"])
    assert scores(res)["drift_mean"].value == pytest.approx(d["drift_mean"])


def test_empty_generations_are_counted(stub, tmp_path):
    res = run_suite(stub, "coherence", "empty", tmp_path, limit=2, embeddings=False)
    s = scores(res)
    assert s["invalid_rate"].value == 1.0 and s["invalid_rate"].note == "2 of 2 generations empty or errored"


# ---------------------------------------------------------------- the code sandbox (a jailed child process)


@pytest.mark.parametrize(
    "source, passed, error",
    [
        ("def f(x):\n    return x + 1\n", 2, None),
        ("def f(x):\n    return x\n", 0, None),
        ("def f(x):\n    while True:\n        pass\n", 0, "timeout after 1 s"),
        ("import socket\ndef f(x):\n    socket.create_connection(('127.0.0.1', 9))\n    return x + 1\n", 0, None),
        ("def f(x):\n    return open('/etc/hostname').read() and x + 1\n", 2, None),  # files: allowed, only no network
        ("raise SystemExit(3)\n", 0, "exit 3: (no output)"),
    ],
)
def test_code_sandbox(source, passed, error):
    assert run_tests(source, "f", [((1,), 2), ((5,), 6)], timeout_s=1) == (passed, error)


def test_tradeoff_quality_command(stub, tmp_path, capsys):
    from flows.cli import main

    assert (
        main(
            [
                "quality",
                "--endpoint",
                stub + "/v1",
                "--model",
                "oracle",
                "--suite",
                "arithmetic",
                "--limit",
                "4",
                "--output",
                str(tmp_path / "out"),
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "arithmetic (arithmetic v1) on oracle" in out and "accuracy" in out
    summary = json.loads((tmp_path / "out" / "scores.json").read_text())
    assert summary["samples"] == 4 and summary["scores"][0]["value"] == 1.0
    assert (tmp_path / "out" / "results" / "quality_samples" / "oracle.parquet").is_file()
    assert (
        main(
            [
                "quality",
                "--endpoint",
                stub,
                "--model",
                "oracle",
                "--suite",
                "longcontext",
                "--output",
                str(tmp_path / "bad"),
            ]
        )
        == 2
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "did you mean longctx" in err[0]
