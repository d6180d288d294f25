"""Fault injection, failures are failures: endpoints that answer HTTP 500 fail variants, suites and nightlies
visibly, with the counts. One test per case, one line each:

- every variant's server answers HTTP 500   -> each variant failed with its counts; nightly state Failed
- one of two variants answers HTTP 500      -> that variant failed; nightly state Partial (FAILED type)
- a third of the sweep's requests fail      -> failed at the default 10 %, ok at perf.max_error_rate 0.5
- max_error_rate above 1 (perf, quality)   -> refused at config load, one line naming the field
- every suite request errors (tradeoff quality) -> error_rate 1 and suite_failed, no accuracy
- a quarter of the suite's requests error   -> errored samples unscored, accuracy over the answered ones
- every suite request errors (the nightly's measure_quality) -> suite_failed, logged at ERROR
- one variant's suite fails in a nightly          -> that variant failed naming the suite; nightly Partial, exit 1

The erroring servers are tests/stubs/stub_engine.py (every POST answered 500) and instruments/fault_proxy.py in
front of a real llama.cpp server on SmolLM2-135M, which answers the requests it lets through.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import ClassVar

import pytest
import yaml

from instruments.fault_proxy import start_proxy
from tasks.core.config import Variant
from tasks.core.errors import ConfigError
from tasks.core.registry import ENGINES
from tasks.loader import parse_config
from tests.helpers import q, smollm2
from tests.helpers.engines import StubTestEngine

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

SMOL = smollm2()
PERF = {"concurrency": [1, 2], "num_prompts": 2, "warmup_requests": 1, "input_len": 16, "output_len": 4}


class Http500Engine(StubTestEngine):
    """tests/stubs/stub_engine.py serving normally, asked for model 'http500': every completion is HTTP 500."""

    name: ClassVar[str] = "stub-http500"

    def served_model_name(self, variant: Variant) -> str:
        return "http500"


def dead(name: str, reference: bool = False) -> dict:
    return {
        "name": name,
        "model": "smol",
        "engine": "stub-http500",
        "quantization": "q4_1",
        "reference": reference,
        "engine_args": {"mode": "die-after-1000000"},
    }


def error_logs(flow_run_id) -> list[str]:
    """The flow run's log lines at ERROR and above, as the Prefect API holds them (what its UI shows)."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import LogFilter, LogFilterFlowRunId, LogFilterLevel
    from prefect.logging.handlers import APILogWorker

    APILogWorker.drain_all(timeout=30)  # logs reach the API in batches
    with get_client(sync_client=True) as client:
        logs = client.read_logs(
            LogFilter(flow_run_id=LogFilterFlowRunId(any_=[flow_run_id]), level=LogFilterLevel(ge_=logging.ERROR))
        )
    return [log.message for log in logs]


def run_nightly_state(config: dict, tmp: Path, monkeypatch):
    """The nightly flow in-process on CONFIG (runs, warehouse, builds under TMP); its final state."""
    path = tmp / f"{config['name']}.yaml"
    path.write_text(yaml.safe_dump(config))
    for key, value in {
        "TRADEOFF_RUNS_DIR": tmp / "runs",
        "TRADEOFF_WAREHOUSE": tmp / "wh.duckdb",
        "TRADEOFF_CACHE_DIR": tmp / "builds",
    }.items():
        monkeypatch.setenv(key, str(value))
    monkeypatch.setitem(ENGINES, "stub-http500", Http500Engine)
    from flows.nightly import nightly

    return nightly(config=str(path), return_state=True)


def smol_config(**extra):
    """One llama.cpp variant of SmolLM2-135M, the tiny sweep, and EXTRA sections."""
    return parse_config(
        {
            "models": {"smol": SMOL},
            "perf": PERF,
            **extra,
            "variants": [{"name": "q4_1", "model": "smol", "quantization": "q4_1", "reference": True}],
        }
    )


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    """A real llama.cpp server on SmolLM2-135M: (base_url, config, variant, artifact)."""
    from tasks.engines.base import engine_for

    cfg = smol_config()
    v = cfg.variant("q4_1")
    engine = engine_for("llama.cpp")
    art = engine.build(v, cfg.models["smol"], tmp_path_factory.mktemp("builds"))
    with engine.serving(art, v, cfg.models["smol"], tmp_path_factory.mktemp("srv") / "server.log", 120) as endpoint:
        yield endpoint.base_url, cfg, v, art


@pytest.fixture
def proxy(llama, request):
    """instruments/fault_proxy.py in front of the llama.cpp server; failing every N-th POST (the test's parameter)."""
    srv, url = start_proxy(llama[0], request.param)
    yield url
    srv.shutdown()
    srv.server_close()


# ---------------------------------------------------------------- variants and the nightly


def test_every_variant_erroring_fails_the_nightly(prefect_harness, tmp_path, monkeypatch) -> None:
    """Every variant's server answers HTTP 500: each failed with its counts, the nightly's state is Failed."""
    state = run_nightly_state(
        {"name": "all-500", "models": {"smol": SMOL}, "variants": [dead("a", True), dead("b")], "perf": PERF},
        tmp_path,
        monkeypatch,
    )
    assert state.is_failed() and state.name == "Failed"  # was Completed: green
    from tasks.orchestration.run_outcome import run_summary

    assert all(part in state.message for part in ("all 2 variants failed", "a: PerfFailed", "b: PerfFailed"))
    summary = run_summary(state)
    assert summary["status"] == "failed" and sorted(summary["failed_variants"]) == ["a", "b"]
    rows = dict(q(tmp_path / "wh.duckdb", "select variant, error from variants where status = 'failed'"))
    assert sorted(rows) == ["a", "b"]
    for error in rows.values():
        assert error.startswith(
            "PerfFailed: perf: 4 of 4 measured requests failed (4 errored, 0 incomplete, 0 ok): "
            "100.0% > perf.max_error_rate 10.0%; no ok request in step c1, c2; first error: HTTP 500"
        )
    logged = error_logs(state.state_details.flow_run_id)
    assert any(m.startswith("a: FAILED") for m in logged) and any(m.startswith("b: FAILED") for m in logged)


def test_one_variant_erroring_makes_the_nightly_partial(prefect_harness, tmp_path, monkeypatch) -> None:
    """One of two variants answers HTTP 500: it alone failed, the nightly's state is Partial (FAILED type: red)."""
    state = run_nightly_state(
        {
            "name": "one-500",
            "models": {"smol": SMOL},
            "perf": PERF,
            "variants": [{"name": "q4_1", "model": "smol", "quantization": "q4_1", "reference": True}, dead("dead")],
        },
        tmp_path,
        monkeypatch,
    )
    assert state.is_failed() and state.name == "Partial"  # was Completed: green
    from tasks.orchestration.run_outcome import run_summary

    assert state.message.startswith(
        f"run {run_summary(state)['run_id']}: 1 of 2 variants failed: dead: PerfFailed: perf: "
    )
    assert run_summary(state)["status"] == "partial" and run_summary(state)["failed_variants"] == ["dead"]
    assert dict(q(tmp_path / "wh.duckdb", "select variant, status from variants")) == {"q4_1": "ok", "dead": "failed"}
    assert [m.split(":")[0] for m in error_logs(state.state_details.flow_run_id) if ": FAILED" in m] == ["dead"]


@pytest.fixture(scope="module")
def third_failing(llama, tmp_path_factory) -> dict:
    """Request counts of a sweep through the fault proxy failing every 3rd POST (the first POST is the warm-up,
    so measured requests 2 and 5 of 6 fail)."""
    from tasks.orchestration.prefect_tasks import measure_perf

    _, _, v, art = llama
    srv, url = start_proxy(llama[0], 3)
    try:
        cfg = smol_config(perf={**PERF, "concurrency": [1], "num_prompts": 6})
        return measure_perf.fn(cfg, "r1", v, art, url, tmp_path_factory.mktemp("results"))["request_counts"]
    finally:
        srv.shutdown()
        srv.server_close()


@pytest.mark.parametrize(
    "max_error_rate, outcome",
    [
        (
            None,
            "perf: 2 of 6 measured requests failed (2 errored, 0 incomplete, 4 ok): 33.3% > perf.max_error_rate 10.0%; "
            "first error: HTTP 500: injected fault",
        ),  # the default share (10 %): failed, with the counts
        (0.5, None),  # the same faults under perf.max_error_rate: 0.5: ok
    ],
)
def test_the_error_share_decides(third_failing, max_error_rate, outcome) -> None:
    from tasks.perf.error_share import perf_failure

    assert (third_failing["requests"], third_failing["ok"], third_failing["errored"]) == (6, 4, 2)
    perf = smol_config(perf={**PERF, **({"max_error_rate": max_error_rate} if max_error_rate else {})}).perf
    assert perf_failure(third_failing, perf.max_error_rate) == outcome


@pytest.mark.parametrize("section", ["perf", "quality"])
def test_a_share_above_one_is_refused_in_one_line(section) -> None:
    with pytest.raises(ConfigError) as e:
        smol_config(**{section: {"max_error_rate": 1.5}})
    assert str(e.value) == f"{section}.max_error_rate: input should be less than or equal to 1 (got 1.5); fix the value"


# ---------------------------------------------------------------- quality suites


@pytest.mark.parametrize("proxy", [1], indirect=True)
def test_a_suite_against_an_erroring_endpoint_is_suite_failed(llama, proxy, tmp_path, capsys) -> None:
    """tradeoff quality, every request HTTP 500: error_rate 1 and suite_failed, no accuracy; exit 1 (a failed
    suite is a failure, as a perf scenario without an ok request is for `tradeoff perf`), its tables written."""
    from flows.cli import main

    assert (
        main(
            [
                "quality",
                "--endpoint",
                proxy,
                "--model",
                "q4_1",
                "--suite",
                "arithmetic",
                "--limit",
                "6",
                "--output",
                str(tmp_path),
            ]
        )
        == 1
    )
    scores = {s["metric"]: s for s in json.loads((tmp_path / "scores.json").read_text())["scores"]}
    assert sorted(scores) == ["error_rate", "suite_failed"]
    assert scores["error_rate"]["value"] == 1.0 and scores["error_rate"]["n"] == 6
    assert scores["suite_failed"]["note"].startswith(
        "6 of 6 requests errored at the endpoint (100.0% > max_error_rate "
        "10.0%); first: HTTPStatusError: Server error '500 Internal Server Error'"
    )
    assert "6 errored at the endpoint" in capsys.readouterr().out


@pytest.mark.parametrize("proxy", [4], indirect=True)
def test_errored_samples_are_not_wrong_answers(llama, proxy, tmp_path) -> None:
    """A quarter of the suite's requests error (below a 50 % threshold): unscored, left out of accuracy."""
    import pandas as pd

    from flows.cli import main

    assert (
        main(
            [
                "quality",
                "--endpoint",
                proxy,
                "--model",
                "q4_1",
                "--suite",
                "arithmetic",
                "--limit",
                "8",
                "--max-error-rate",
                "0.5",
                "--output",
                str(tmp_path),
            ]
        )
        == 0
    )
    scores = {s["metric"]: s for s in json.loads((tmp_path / "scores.json").read_text())["scores"]}
    samples = pd.read_parquet(tmp_path / "results" / "quality_samples" / "q4_1.parquet")
    errored = samples["details"].map(lambda d: json.loads(d)["errored"]) == 1
    assert errored.sum() == 2 and samples.loc[errored, "score"].isna().all()  # requests 4 and 8: not scored at all
    answered = samples.loc[~errored, "score"]
    assert answered.notna().all() and scores["accuracy"]["n"] == 6
    assert scores["accuracy"]["value"] == pytest.approx(answered.mean())
    assert scores["error_rate"]["value"] == 0.25 and "suite_failed" not in scores


@pytest.mark.parametrize("proxy", [1], indirect=True)
def test_the_nightlys_suites_count_errors_apart(llama, proxy, tmp_path, prefect_harness) -> None:
    """measure_quality (the nightly's path), every request HTTP 500: suite_failed and error_rate, logged at ERROR."""
    from prefect import flow

    from tasks.orchestration.prefect_tasks import measure_quality
    from warehouse.contract import read_table

    _, _, v, art = llama
    cfg = smol_config(quality={"suites": [{"name": "arithmetic", "limit": 4}]})

    @flow
    def quality_only() -> None:
        measure_quality(cfg, "r1", v, art, art, proxy, tmp_path / "quality" / "q4_1", tmp_path / "results")

    state = quality_only(return_state=True)
    scores = read_table(tmp_path / "results", "quality_scores")
    assert sorted(scores["metric"]) == ["error_rate", "suite_failed"]
    assert scores.set_index("metric").loc["error_rate", "value"] == 1.0
    logged = error_logs(state.state_details.flow_run_id)
    assert any("suite arithmetic failed: 4 of 4 requests errored" in m for m in logged)


class StreamOnlyEngine(StubTestEngine):
    """tests/stubs/stub_engine.py: streams completions, and answers a plain (non-streaming) one with a stream that
    never closes the connection: every quality request errs at its deadline, the perf sweep is fine."""

    name: ClassVar[str] = "stub-stream-only"


def test_a_failed_suite_fails_its_variant_and_makes_the_nightly_partial(prefect_harness, tmp_path, monkeypatch) -> None:
    """Before (issue 26): a suite_failed score left the variant ok and the nightly Completed, exit 0."""
    monkeypatch.setitem(ENGINES, "stub-stream-only", StreamOnlyEngine)
    ok = {
        "model": "smol",
        "engine": "stub-stream-only",
        "quantization": "q4_1",
        "engine_args": {"mode": "die-after-1000000"},
    }
    state = run_nightly_state(
        {
            "name": "suite-fails",
            "models": {"smol": SMOL},
            "perf": {**PERF, "request_timeout_s": 2},
            "variants": [{"name": "a", "reference": True, **ok}, {"name": "b", **ok}],
            "quality": {"suites": [{"name": "arithmetic", "limit": 2, "variants": ["b"]}]},
        },
        tmp_path,
        monkeypatch,
    )
    from tasks.orchestration.run_outcome import run_summary

    assert state.is_failed() and state.name == "Partial"
    assert "1 of 2 variants failed: b: SuiteFailed: suite arithmetic failed: 2 of 2 requests errored" in state.message
    assert run_summary(state)["status"] == "partial"
    assert dict(q(tmp_path / "wh.duckdb", "select variant, status from variants")) == {"a": "ok", "b": "failed"}
    # measured and kept: b's perf sweep and its failed suite are in the warehouse
    assert q(tmp_path / "wh.duckdb", "select count(*) from perf_requests where variant = 'b'")[0][0] > 0
    assert q(
        tmp_path / "wh.duckdb", "select metric from quality_scores where variant = 'b' and metric = 'suite_failed'"
    )
