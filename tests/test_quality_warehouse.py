"""Quality deltas from Parquet parts to the warehouse: the GX gate, the loader, v_quality_deltas and v_longctx_grid."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path

import duckdb
import pytest

from tasks.stats import quality_deltas
from tasks.tables import write_table
from tasks.validate import validate_results
from warehouse.db import load_run, open_warehouse

RUN = "r-quality"


def _samples(variant: str, suite: str, scores: list[float], details: list[dict] | None = None) -> list[dict]:
    details = details or [{} for _ in scores]
    return [{"run_id": RUN, "variant": variant, "suite": suite, "sample_id": f"{suite}-{i}", "score": s, "valid": True,
             "details": json.dumps(d)} for i, (s, d) in enumerate(zip(scores, details))]


def _scores(variant: str, samples: list[dict], suite: str) -> list[dict]:
    acc = sum(s["score"] for s in samples) / len(samples)
    return [{"run_id": RUN, "variant": variant, "suite": suite, "suite_version": "1", "metric": "accuracy", "value": acc,
             "n": len(samples), "unit": "fraction", "higher_is_better": True, "sample_stat": "mean(score)"}]


def write_quality_run(root: Path, verdict_override: str | None = None) -> Path:
    """A run with reference q4_1 and variant q2_k: arithmetic (100 samples) and a 2 x 2 longctx grid."""
    res = root / RUN / "results"
    write_table(res, "runs", "run", [{"run_id": RUN, "config_name": "t", "started_at": datetime(2025, 1, 1, tzinfo=timezone.utc),
                                      "status": "ok", "reference_variant": "q4_1"}])
    grid = [{"context_tokens": c, "depth_pct": d, "prompt_tokens": c - 10} for c in (512, 1024) for d in (0.0, 100.0)]
    parts = {}
    for variant, arith, passkey in (("q4_1", [1.0] * 80 + [0.0] * 20, [1.0, 1.0, 1.0, 1.0]),
                                    ("q2_k", [1.0] * 55 + [0.0] * 45, [1.0, 1.0, 1.0, 0.0])):
        write_table(res, "variants", variant, [{"run_id": RUN, "variant": variant, "is_reference": variant == "q4_1",
                                                "status": "ok", "quantization": variant}])
        samples = _samples(variant, "arithmetic", arith) + _samples(variant, "longctx", passkey, grid)
        scores = _scores(variant, samples[:100], "arithmetic") + _scores(variant, samples[100:], "longctx")
        write_table(res, "quality_samples", variant, samples)
        write_table(res, "quality_scores", variant, scores)
        parts[variant] = (samples, scores)
    rows = quality_deltas(parts["q4_1"][1], parts["q4_1"][0], parts["q2_k"][1], parts["q2_k"][0],
                          reference_variant="q4_1")
    if verdict_override:
        rows[0]["verdict"] = verdict_override
    write_table(res, "quality_deltas", "q2_k", rows)
    return root / RUN


def test_deltas_pass_the_gate_and_load_into_the_view(tmp_path):
    run_dir = write_quality_run(tmp_path)
    report = validate_results(run_dir / "results", {})
    quality = [t for t in report.tables if t.table.startswith("quality")]
    assert [t.table for t in quality] == ["quality_samples", "quality_scores", "quality_deltas"]
    assert all(t.success for t in quality), report.failures()
    db = tmp_path / "wh.duckdb"
    counts = load_run(run_dir, db)
    assert counts["quality_deltas"] == 2
    with open_warehouse(db, read_only=True) as con:
        cols = [d[0] for d in con.execute("select * from v_quality_deltas").description]
        rows = con.execute("select suite, metric, reference_value, value, delta, ci_low, ci_high, p_value, n, "
                           "retention_99, retention_999, verdict from v_quality_deltas order by suite").fetchall()
        grid = con.execute("select variant, context_tokens, depth_pct, n, accuracy from v_longctx_grid "
                           "order by variant, context_tokens, depth_pct").fetchall()
    assert cols[:14] == ["run_id", "variant", "suite", "metric", "reference_value", "value", "delta", "ci_low",
                         "ci_high", "p_value", "n", "retention_99", "retention_999", "verdict"]
    arith, longctx = rows
    assert arith[:4] == ("arithmetic", "accuracy", 0.8, 0.55) and arith[4] == pytest.approx(-0.25)
    assert arith[5] < -0.25 < arith[6] < 0 and arith[7] == pytest.approx(2 * 0.5**25)
    assert (arith[8], arith[9], arith[10], arith[11]) == (100, False, False, "worse")
    assert longctx[8] == 4 and longctx[11] == "inconclusive"  # 4 samples: never a finding
    assert grid[:4] == [("q2_k", 512, 0.0, 1, 1.0), ("q2_k", 512, 100.0, 1, 1.0), ("q2_k", 1024, 0.0, 1, 1.0),
                        ("q2_k", 1024, 100.0, 1, 0.0)]


def test_gate_rejects_an_unknown_verdict(tmp_path):
    run_dir = write_quality_run(tmp_path, verdict_override="probably worse")
    report = validate_results(run_dir / "results", {})
    assert [t.table for t in report.tables if not t.success] == ["quality_deltas"]
    assert any("expect_column_values_to_be_in_set(verdict)" in f for f in report.failures())


def test_null_score_needs_a_note(tmp_path):
    run_dir = write_quality_run(tmp_path)
    res = run_dir / "results"
    write_table(res, "quality_scores", "q4_1", [{"run_id": RUN, "variant": "q4_1", "suite": "coherence",
                                                 "metric": "judge_score", "value": None, "n": 2, "unit": "rating"}])
    report = validate_results(res, {})
    assert any(f.startswith("quality_scores: expect_column_values_to_not_be_null(note where value is null)")
               for f in report.failures()), report.failures()


def test_migration_adds_quality_columns(tmp_path):
    with open_warehouse(tmp_path / "w.duckdb") as con:
        cols = [r[0] for r in con.execute("select column_name from duckdb_columns() where table_name = 'quality_scores'").fetchall()]
        assert cols[-2:] == ["sample_stat", "note"]
        assert con.execute("select count(*) from quality_deltas").fetchone() == (0,)
    with duckdb.connect(str(tmp_path / "w.duckdb"), read_only=True) as con:
        assert (3, "quality") in con.execute("select version, name from schema_version").fetchall()
