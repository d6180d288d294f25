"""End to end: the real nightly flow on the real model (SmolLM2-135M via llama.cpp) at tiny sizes.

Builds real GGUF variants, serves each behind llama-cpp-python's server, measures,
validates with Great Expectations, loads DuckDB and reports. One variant is broken on
purpose (its server cannot start) and must be recorded as failed while the others go on.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tasks.engines.llama_cpp import SERVER_MODULE
from tests.helpers import q, run_nightly, smollm2

pytestmark = pytest.mark.e2e

TINY = {
    "name": "tiny",
    "models": {"smollm2-135m": smollm2()},
    "variants": [
        {"name": "q4_1", "model": "smollm2-135m", "quantization": "q4_1", "reference": True},
        {"name": "q2_k", "model": "smollm2-135m", "quantization": "q2_k"},
        {
            "name": "q4_1-spec",
            "model": "smollm2-135m",
            "quantization": "q4_1",
            "speculative": {"method": "prompt-lookup", "num_speculative_tokens": 4},
        },
        # The server rejects this value at start-up: the variant must fail alone.
        {"name": "broken", "model": "smollm2-135m", "quantization": "q4_1", "engine_args": {"n_threads": "many"}},
    ],
    # perf.interleave: the variants that start are served together, their perf measured in alternating rounds
    "perf": {
        "concurrency": [1, 2],
        "num_prompts": 3,
        "warmup_requests": 1,
        "input_len": 32,
        "output_len": 8,
        "repeats": 2,
        "interleave": True,
    },
    "quality": {
        "primary": "arithmetic.accuracy",
        "suites": [{"name": "arithmetic", "limit": 6}, {"name": "fidelity", "limit": 32}],
    },
    "server_start_timeout_s": 60,
}


@pytest.fixture(scope="module")
def nightly_run(tmp_path_factory, prefect_harness):
    tmp = tmp_path_factory.mktemp("e2e")
    mp = pytest.MonkeyPatch()
    mp.setenv("TRADEOFF_WAREHOUSE", str(tmp / "wh.duckdb"))  # `tradeoff load` / `report` below read it
    yield run_nightly(TINY, tmp), tmp
    mp.undo()


def test_run_is_partial_with_the_broken_variant_failed(nightly_run):
    summary, tmp = nightly_run
    assert summary["status"] == "partial" and summary["failed_variants"] == ["broken"]
    ((status, error),) = q(tmp / "wh.duckdb", "select status, error from variants where variant = 'broken'")
    assert status == "failed" and "server exited" in error
    log = (tmp / "runs" / summary["run_id"] / "logs" / "broken.server.log").read_text()
    assert "n_threads" in log  # the server's own complaint is kept in the run folder


def test_tradeoff_view_has_measured_values_for_every_ok_variant(nightly_run):
    summary, tmp = nightly_run
    rows = q(
        tmp / "wh.duckdb",
        """
        select variant, peak_output_tok_s, best_output_tok_s, ttft_ms_mean, ttft_ms_p99, ttft_cv_pct, quality,
               energy_j_per_token, energy_note, speedup_vs_reference, arithmetic_accuracy,
               fidelity_top1_agreement, fidelity_kl_mean
        from v_tradeoff where status = 'ok' order by variant""",
    )
    assert [r[0] for r in rows] == ["q2_k", "q4_1", "q4_1-spec"]
    for (
        variant,
        peak_output_tok_s,
        best_output_tok_s,
        ttft,
        ttft99,
        jitter,
        quality,
        energy,
        note,
        speedup,
        acc,
        top1,
        kl,
    ) in rows:
        assert peak_output_tok_s >= best_output_tok_s > 0 and ttft99 >= ttft > 0 and jitter >= 0, variant
        assert 0 <= quality <= 1 and quality == acc
        assert energy is None and note.startswith("no energy meter")  # no NVML/RAPL on CI machines
        assert speedup > 0 and 0 <= top1 <= 1 and kl >= 0
    ref = rows[1]
    assert ref[9] == pytest.approx(1.0) and ref[11] == 1.0 and ref[12] == pytest.approx(0.0, abs=1e-9)
    q2k = rows[0]
    assert q2k[12] > 0 and q2k[11] < 1  # requantizing to Q2_K really moves the distribution


def test_every_request_is_stored_with_forced_output_length(nightly_run):
    summary, tmp = nightly_run
    ((n,),) = q(tmp / "wh.duckdb", "select count(*) from perf_requests")
    assert n == 3 * 2 * 2 * (1 + 3)  # ok variants x scenarios x repeats x (warm-up + measured)
    rows = q(tmp / "wh.duckdb", "select variant, scenario, num_ok, output_len_forced_by from perf_summary order by all")
    assert len(rows) == 6 and all(r[2] == 2 * 3 and r[3] == "min_tokens" for r in rows)
    # min_tokens forces the output length: every request generated the asked 8 tokens, one chunk each
    rows = q(
        tmp / "wh.duckdb",
        "select distinct output_tokens, output_tokens_source, len(chunk_offsets_ms) from perf_requests where status = "
        "'ok'",
    )
    assert rows == [(8, "max_tokens", 8)]


def test_loading_again_changes_nothing_and_report_prints(nightly_run, capsys):
    summary, tmp = nightly_run
    from flows.cli import main

    counts = lambda: q(
        tmp / "wh.duckdb",
        "select (select count(*) from perf_requests), (select count(*) from quality_samples), (select count(*) from "
        "variants)",
    )
    before = counts()
    assert main(["load", summary["run_dir"]]) == 0
    assert counts() == before
    capsys.readouterr()
    assert main(["report"]) == 0
    out = capsys.readouterr().out
    for v in ("q4_1", "q2_k", "q4_1-spec"):
        assert v in out
    assert "x tokens/s" in out  # a takeaway sentence against the reference


def test_series_are_keyed_on_what_was_measured(nightly_run):
    """The real run's series keys: q4_1 and q4_1-spec serve the same file but differ in speculative decoding, so
    they are two series; every ok variant has a perf series and one per suite; the failed one has none in v_history."""
    _, tmp = nightly_run
    db = tmp / "wh.duckdb"
    keys = {
        (v, scope): (key, artifact)
        for v, scope, key, artifact in q(
            db,
            """
        select k.variant, k.scope, k.series_key, v.artifact_sha256 from series_keys as k
        join variants as v using (run_id, variant)""",
        )
    }
    assert {scope for v, scope in keys if v == "q4_1"} == {"perf", "arithmetic", "fidelity"}
    assert keys[("q4_1", "perf")][1] == keys[("q4_1-spec", "perf")][1]  # the same artifact ...
    assert keys[("q4_1", "perf")][0] != keys[("q4_1-spec", "perf")][0]  # ... another series
    assert q(db, "select distinct variant from v_history order by 1") == [("q2_k",), ("q4_1",), ("q4_1-spec",)]
    assert q(db, "select count(*) from v_history where known_cause is not null") == [(0,)]
    paired = q(db, "select count(*), count(distinct variant) from v_quality_flips where suite = 'arithmetic'")
    assert paired == [(12, 2)]  # 6 samples each of q2_k and q4_1-spec beside the reference's


def test_perf_ran_in_interleaved_rounds_of_the_variants_that_started(nightly_run, capsys):
    """The three variants that serve shared their rounds (the broken one could not start: its own flow failed it,
    see above); each step rests on both rounds; the report says how perf was measured."""
    summary, tmp = nightly_run
    rows = q(
        tmp / "wh.duckdb",
        "select variant, scenario, interleaved_with, windows_kept from perf_summary "
        f"where run_id = '{summary['run_id']}' order by variant, scenario",
    )
    assert [(v, sc) for v, sc, *_ in rows] == [(v, sc) for v in ("q2_k", "q4_1", "q4_1-spec") for sc in ("c1", "c2")]
    together = {v: w for v, _, w, _ in rows}
    assert together == {"q4_1": "q2_k, q4_1-spec", "q2_k": "q4_1, q4_1-spec", "q4_1-spec": "q4_1, q2_k"}
    assert all(kept == 2 for *_, kept in rows), rows
    from flows.cli import main

    capsys.readouterr()
    assert main(["report", "--run", summary["run_id"], "--warehouse", str(tmp / "wh.duckdb")]) == 0
    assert (
        "host: perf measured in interleaved rounds (perf.interleave): q2_k, q4_1, q4_1-spec" in capsys.readouterr().out
    )


def test_servers_are_stopped(nightly_run):
    """No llama.cpp server started by this process is still running."""
    import os

    children = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            ppid = int(stat.read_text().rsplit(")", 1)[1].split()[1])
            cmd = (stat.parent / "cmdline").read_bytes()
        except (OSError, IndexError, ValueError):
            continue
        if ppid == os.getpid() and SERVER_MODULE.encode() in cmd:
            children.append(stat.parent.name)
    assert not children


def test_builds_are_cached_by_content(nightly_run):
    _, tmp = nightly_run
    from tasks.engines.base import engine_for
    from tasks.loader import load_config

    cfg = load_config(tmp / "tiny.yaml")
    v = cfg.variant("q2_k")
    art = engine_for("llama.cpp").build(v, cfg.models[v.model], tmp / "builds")
    assert art.cached and art.path.is_relative_to(tmp / "builds")
