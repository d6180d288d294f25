"""Jitter that measures the engine: a fixed-length workload, CVs per repeat, their median with an interval,
v_tradeoff's ttft_cv_pct / itl_cv_pct from it, and speculative variants' ITL jitter in the takeaways."""

from __future__ import annotations

import duckdb
import numpy as np
import pytest

from tasks.core.config import PerfSpec
from tasks.core.stat_tests import log_t_interval
from tasks.orchestration.folder_gate import expected_perf_rows
from tasks.perf.jitter import jitter_summary, needs_jitter_step, repeat_cvs
from tasks.perf.metrics import RequestRecord, cv_pct, summarize_repeats
from tasks.perf.perf_run import summarize_scenario
from tasks.perf.sweep import run_perf
from tasks.perf.workload import make_workload
from tasks.report.text import takeaways, tradeoff_frame
from tests.helpers.sample_run import write_sample_run
from tests.stubs.stub_server import start_stub
from warehouse.contract import write_table
from warehouse.db import load_run, open_warehouse


def rec(i, ttft, gaps, repeat=0):
    chunks = list(np.cumsum([ttft, *gaps]))
    return RequestRecord(
        index=i,
        status="ok",
        start_ms=1000.0 * i,
        ttft_ms=ttft,
        e2el_ms=chunks[-1],
        prompt_tokens=8,
        output_tokens=len(chunks),
        chunk_offsets_ms=chunks,
        repeat=repeat,
    )


# Three repeats whose TTFT level drifts (100, 150, 200 ms) but is steady within each (+-2 %), as a host
# that warms up does: pooled, the drift reads as ~28 % jitter; per repeat the engine's jitter is ~2 %.
DRIFT = [
    [
        rec(i, level * f, [10.0, 10.0 * g, 10.0], repeat=k)
        for i, (f, g) in enumerate([(0.98, 1.2), (1.0, 1.0), (1.02, 0.8)])
    ]
    for k, level in enumerate([100.0, 150.0, 200.0])
]


@pytest.mark.parametrize(
    "jitter,spread,dataset,expected",
    [
        ("auto", 0.0, None, False),
        ("auto", 0.2, None, True),
        ("auto", 0.0, "sg.json", True),
        ("always", 0.0, None, True),
        ("off", 0.2, None, False),
    ],
)
def test_the_jitter_step_runs_when_the_workload_is_not_fixed_length(jitter, spread, dataset, expected):
    spec = PerfSpec(jitter=jitter, len_spread=spread, dataset=dataset, concurrency=[1, 2])
    assert needs_jitter_step(spec) is expected
    assert expected_perf_rows(spec)["perf_summary"] == 2 + expected


def test_cvs_per_repeat_then_their_median_not_the_pooled_cv():
    ttft_cvs, itl_cvs = repeat_cvs(DRIFT)
    assert ttft_cvs == pytest.approx([2.0, 2.0, 2.0])  # std(0.98, 1, 1.02) / mean = 2 %
    pooled = cv_pct([r.ttft_ms for run in DRIFT for r in run])
    assert pooled > 25.0  # what the pooled figure says
    j = jitter_summary(DRIFT, 0.95, 200, seed=1)
    assert j["ttft_cv_pct_median"] == pytest.approx(2.0) and j["jitter_note"] is None
    assert j["itl_cv_pct_median"] == pytest.approx(itl_cvs[0])
    # the interval comes from the same helper and call shape as the other per-repeat intervals
    lo, hi, _ = log_t_interval(ttft_cvs, 0.95)
    assert (j["ttft_cv_pct_median_ci_low"], j["ttft_cv_pct_median_ci_high"]) == (lo, hi)
    assert j["ttft_cv_pct_median_ci_low"] <= j["ttft_cv_pct_median"] <= j["ttft_cv_pct_median_ci_high"]


def test_one_repeat_has_a_figure_but_no_interval_and_says_why():
    j = jitter_summary(DRIFT[:1])
    assert j["ttft_cv_pct_median"] == pytest.approx(2.0)
    assert j["ttft_cv_pct_median_ci_low"] is None and j["itl_cv_pct_median_ci_high"] is None
    assert "TTFT CV: 1 of 1 repeats had one (>= 2 ok requests); an interval needs 2 such repeats" in j["jitter_note"]


@pytest.fixture(scope="module")
def stub():
    srv, url = start_stub()
    yield url
    srv.shutdown()


def test_the_jitter_scenario_is_fixed_length_while_the_workload_spreads(stub):
    words = (lambda s: s.split()), (lambda ids: " ".join(ids))
    spec = PerfSpec(
        concurrency=[1],
        len_spread=0.5,
        num_prompts=6,
        warmup_requests=0,
        input_len=20,
        output_len=6,
        repeats=2,
        bootstrap_resamples=100,
    )
    scenarios = run_perf(spec, stub, "ok", make_workload(spec, *words), None)
    assert [sc.step.label for sc in scenarios] == ["jitter", "c1"]
    jitter, c1 = scenarios
    assert {r.prompt_tokens for r in jitter.records} == {20} and {r.max_tokens for r in jitter.records} == {6}
    assert len({r.prompt_tokens for r in c1.records}) > 1  # the configured spread
    s = summarize_scenario(spec, jitter, None)
    assert (s["scenario"], s["concurrency"], s["repeats"]) == ("jitter", 1, 2)
    assert s["ttft_cv_pct_median"] is not None and s["ttft_cv_pct_median_ci_low"] is not None


def test_v_tradeoff_takes_jitter_from_the_jitter_scenario_and_nothing_else(tmp_path):
    """A `jitter` row with the per-repeat medians: ttft_cv_pct/itl_cv_pct come from it, speed and
    latency still from the configured steps; the reference's ITL CV gives the speculative ratio."""
    run_dir = write_sample_run(tmp_path)
    res = run_dir / "results"
    for variant, ttft_cv, itl_cv, spec in [("q4_1", 4.0, 10.0, None), ("q2_k", 3.0, 25.0, "prompt-lookup")]:
        import pyarrow.parquet as pq

        rows = pq.read_table(res / "perf_summary" / f"{variant}.parquet").to_pylist()
        s = summarize_repeats([DRIFT[0]])
        rows.append(
            {
                **{k: s.get(k) for k in rows[0]},
                "run_id": "r1",
                "variant": variant,
                "scenario": "jitter",
                "concurrency": 1,
                "output_throughput": 999.0,
                "peak_output_throughput": 999.0,
                "ttft_ms_mean": 1.0,
                "ttft_cv_pct_pooled": 40.0,
                "ttft_cv_pct_median": ttft_cv,
                "ttft_cv_pct_median_ci_low": ttft_cv - 1,
                "ttft_cv_pct_median_ci_high": ttft_cv + 1,
                "itl_cv_pct_median": itl_cv,
                "itl_cv_pct_median_ci_low": itl_cv - 5,
                "itl_cv_pct_median_ci_high": itl_cv + 5,
            }
        )
        write_table(res, "perf_summary", variant, rows)
        if spec:
            write_table(
                res,
                "variants",
                variant,
                [
                    {
                        "run_id": "r1",
                        "variant": variant,
                        "model": "smollm2-135m",
                        "engine": "llama.cpp",
                        "quantization": variant,
                        "speculative": spec,
                        "is_reference": False,
                        "status": "ok",
                    }
                ],
            )
    db = tmp_path / "wh.duckdb"
    load_run(run_dir, db)
    with open_warehouse(db, read_only=True) as con:
        df = tradeoff_frame(con, "r1")
    got = {r["variant"]: r for r in df.to_dict("records")}
    q2 = got["q2_k"]
    assert (q2["ttft_cv_pct"], q2["itl_cv_pct"]) == (3.0, 25.0)  # not the pooled 40 %
    assert (q2["ttft_cv_pct_ci_low"], q2["itl_cv_pct_ci_high"], q2["jitter_scenario"]) == (2.0, 30.0, "jitter")
    assert (q2["best_output_tok_s"], q2["peak_output_tok_s"], q2["ttft_ms_mean"]) == (
        156.0,
        170.0,
        90.0,
    )  # never from `jitter`
    assert q2["itl_cv_ratio_vs_reference"] == pytest.approx(2.5)
    assert got["q8_0"]["ttft_cv_pct"] is None or np.isnan(got["q8_0"]["ttft_cv_pct"])
    assert takeaways(df, "fraction")[0] == (
        "q2_k vs q4_1: 1.30x tokens/s, TTFT -10 %, TTFT jitter 0.8x, "
        "ITL jitter 2.5x (25 % CV, CI 20..30), arithmetic_accuracy -12.0 points, "
        "energy n/a"
    )


def test_without_a_jitter_scenario_the_headline_gives_the_figure(tmp_path):
    """Without a `jitter` scenario the lowest-concurrency step's per-repeat figure is the jitter (its workload is
    fixed-length); a row with only the CV pooled over repeats and prompt lengths (loaded before 007) gives none."""
    db = tmp_path / "wh.duckdb"
    load_run(write_sample_run(tmp_path), db)
    with open_warehouse(db, read_only=True) as con:
        got = con.execute(
            "select variant, ttft_cv_pct, jitter_scenario from v_tradeoff where status = 'ok' order by variant"
        ).fetchall()
    assert got == [("q2_k", 20.0, "single"), ("q4_1", 10.0, "single")]
    with duckdb.connect(str(db)) as con:
        con.execute("update perf_summary set ttft_cv_pct_pooled = ttft_cv_pct_median, ttft_cv_pct_median = null")
    with open_warehouse(db, read_only=True) as con:
        got = con.execute("select ttft_cv_pct from v_tradeoff where status = 'ok'").fetchall()
    assert got == [(None,), (None,)]


def answer_before_first_output(t):
    row = next(r for r in t["perf_requests"] if r["status"] == "ok")
    row.update({"ttft_answer_ms": row["ttft_ms"] - 5.0, "reasoning_tokens": 0})


def more_reasoning_than_output(t):
    row = next(r for r in t["perf_requests"] if r["status"] == "ok")
    row.update({"ttft_answer_ms": row["ttft_ms"] + 5.0, "reasoning_tokens": row["output_tokens"] + 1})


def inverted_jitter_interval(t):
    t["perf_summary"][0].update(
        {"itl_cv_pct_median": 20.0, "itl_cv_pct_median_ci_low": 30.0, "itl_cv_pct_median_ci_high": 10.0}
    )


@pytest.mark.parametrize(
    "corrupt, table, expectation",
    [
        (
            answer_before_first_output,
            "perf_requests",
            "expect_column_pair_values_a_to_be_greater_than_b(ttft_answer_ms, ttft_ms)",
        ),
        (
            more_reasoning_than_output,
            "perf_requests",
            "expect_column_pair_values_a_to_be_greater_than_b(output_tokens, reasoning_tokens)",
        ),
        (
            inverted_jitter_interval,
            "perf_summary",
            "expect_column_pair_values_a_to_be_greater_than_b(itl_cv_pct_median_ci_high, itl_cv_pct_median_ci_low)",
        ),
    ],
    ids=lambda p: p.__name__ if callable(p) else None,
)
def test_the_gate_checks_the_timing_columns(tmp_path, corrupt, table, expectation):
    from tests.helpers.gate_tables import expected_rows, valid_tables, write_results
    from warehouse.gx_gate import validate_results

    tables = valid_tables()
    expected = expected_rows(tables)
    corrupt(tables)
    report = validate_results(write_results(tmp_path, tables), expected)
    assert any(f.startswith(f"{table}: {expectation}") for f in report.failures()), report.failures()
    assert [t.table for t in report.tables if not t.success] == [table]
