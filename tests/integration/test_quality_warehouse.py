"""Quality deltas from Parquet parts to the warehouse: the GX gate, the loader, v_quality_deltas and v_longctx_grid."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path

import duckdb
import pytest

from tasks.quality.deltas import quality_deltas
from warehouse.contract import read_table, write_table
from warehouse.db import load_run, open_warehouse
from warehouse.gx_gate import validate_results

RUN = "r-quality"


def _samples(variant: str, suite: str, scores: list[float], details: list[dict] | None = None) -> list[dict]:
    details = details or [{} for _ in scores]
    return [
        {
            "run_id": RUN,
            "variant": variant,
            "suite": suite,
            "sample_id": f"{suite}-{i}",
            "score": s,
            "valid": True,
            "details": json.dumps(d),
        }
        for i, (s, d) in enumerate(zip(scores, details))
    ]


def _scores(variant: str, samples: list[dict], suite: str) -> list[dict]:
    acc = sum(s["score"] for s in samples) / len(samples)
    return [
        {
            "run_id": RUN,
            "variant": variant,
            "suite": suite,
            "suite_version": "1",
            "metric": "accuracy",
            "value": acc,
            "n": len(samples),
            "unit": "fraction",
            "higher_is_better": True,
            "sample_stat": "mean(score)",
        }
    ]


def write_quality_run(root: Path, verdict_override: str | None = None) -> Path:
    """A run with reference q4_1 and variant q2_k: arithmetic (100 samples) and a 2 x 2 longctx grid."""
    res = root / RUN / "results"
    write_table(
        res,
        "runs",
        "run",
        [
            {
                "run_id": RUN,
                "config_name": "t",
                "started_at": datetime(2025, 1, 1, tzinfo=timezone.utc),
                "status": "ok",
                "reference_variant": "q4_1",
            }
        ],
    )
    grid = [{"context_tokens": c, "depth_pct": d, "prompt_tokens": c - 10} for c in (512, 1024) for d in (0.0, 100.0)]
    parts = {}
    for variant, arith, passkey in (
        ("q4_1", [1.0] * 80 + [0.0] * 20, [1.0, 1.0, 1.0, 1.0]),
        ("q2_k", [1.0] * 55 + [0.0] * 45, [1.0, 1.0, 1.0, 0.0]),
    ):
        write_table(
            res,
            "variants",
            variant,
            [
                {
                    "run_id": RUN,
                    "variant": variant,
                    "is_reference": variant == "q4_1",
                    "status": "ok",
                    "quantization": variant,
                }
            ],
        )
        samples = _samples(variant, "arithmetic", arith) + _samples(variant, "longctx", passkey, grid)
        scores = _scores(variant, samples[:100], "arithmetic") + _scores(variant, samples[100:], "longctx")
        write_table(res, "quality_samples", variant, samples)
        write_table(res, "quality_scores", variant, scores)
        parts[variant] = (samples, scores)
    rows = quality_deltas(
        parts["q4_1"][1], parts["q4_1"][0], parts["q2_k"][1], parts["q2_k"][0], reference_variant="q4_1"
    )
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
        rows = con.execute(
            "select suite, metric, reference_value, value, delta, ci_low, ci_high, p_value, n, "
            "retention_99, retention_999, verdict from v_quality_deltas order by suite"
        ).fetchall()
        grid = con.execute(
            "select variant, context_tokens, depth_pct, n, accuracy from v_longctx_grid "
            "order by variant, context_tokens, depth_pct"
        ).fetchall()
    assert cols[:14] == [
        "run_id",
        "variant",
        "suite",
        "metric",
        "reference_value",
        "value",
        "delta",
        "ci_low",
        "ci_high",
        "p_value",
        "n",
        "retention_99",
        "retention_999",
        "verdict",
    ]
    arith, longctx = rows
    assert arith[:4] == ("arithmetic", "accuracy", 0.8, 0.55) and arith[4] == pytest.approx(-0.25)
    assert arith[5] < -0.25 < arith[6] < 0 and arith[7] == pytest.approx(2 * 0.5**25)
    assert (arith[8], arith[9], arith[10], arith[11]) == (100, False, False, "worse")
    assert longctx[8] == 4 and longctx[11] == "inconclusive"  # 4 samples: never a finding
    assert grid[:4] == [
        ("q2_k", 512, 0.0, 1, 1.0),
        ("q2_k", 512, 100.0, 1, 1.0),
        ("q2_k", 1024, 0.0, 1, 1.0),
        ("q2_k", 1024, 100.0, 1, 0.0),
    ]


def test_gate_rejects_an_unknown_verdict(tmp_path):
    run_dir = write_quality_run(tmp_path, verdict_override="probably worse")
    report = validate_results(run_dir / "results", {})
    assert [t.table for t in report.tables if not t.success] == ["quality_deltas"]
    assert any("expect_column_values_to_be_in_set(verdict)" in f for f in report.failures())


def test_null_score_needs_a_note(tmp_path):
    run_dir = write_quality_run(tmp_path)
    res = run_dir / "results"
    write_table(
        res,
        "quality_scores",
        "q4_1",
        [
            {
                "run_id": RUN,
                "variant": "q4_1",
                "suite": "coherence",
                "metric": "judge_score",
                "value": None,
                "n": 2,
                "unit": "rating",
            }
        ],
    )
    report = validate_results(res, {})
    assert any(
        f.startswith("quality_scores: expect_column_values_to_not_be_null(note where value is null)")
        for f in report.failures()
    ), report.failures()


def test_migration_adds_quality_columns(tmp_path):
    with open_warehouse(tmp_path / "w.duckdb") as con:
        cols = [
            r[0]
            for r in con.execute(
                "select column_name from duckdb_columns() where table_name = 'quality_scores'"
            ).fetchall()
        ]
        assert cols[-2:] == ["sample_stat", "note"]
        assert con.execute("select count(*) from quality_deltas").fetchone() == (0,)
    with duckdb.connect(str(tmp_path / "w.duckdb"), read_only=True) as con:
        assert (3, "quality") in con.execute("select version, name from schema_version").fetchall()


def test_view_carries_raw_and_holm_adjusted_p(tmp_path):
    run_dir = write_quality_run(tmp_path)
    db = tmp_path / "wh.duckdb"
    load_run(run_dir, db)
    with open_warehouse(db, read_only=True) as con:
        got = con.execute(
            "select suite, p_value, p_value_adjusted, p_family_size from v_quality_deltas order by suite"
        ).fetchall()
    (_, p_arith, adj_arith, m1), (_, p_long, adj_long, m2) = got
    # the family is q2_k's two tested rows: Holm multiplies the smaller p by 2, the larger by 1 (never below the first)
    assert (m1, m2) == (2, 2) and p_arith == pytest.approx(2 * 0.5**25) and p_long == 1.0
    assert adj_arith == pytest.approx(2 * p_arith) and adj_long == 1.0


def test_gate_rejects_an_adjusted_p_below_the_raw_one(tmp_path):
    run_dir = write_quality_run(tmp_path)
    res = run_dir / "results"
    rows = read_table(res, "quality_deltas").astype(object).where(lambda df: df.notna(), None).to_dict("records")
    rows[0]["p_value_adjusted"] = rows[0]["p_value"] / 2
    write_table(res, "quality_deltas", "q2_k", rows)
    report = validate_results(res, {})
    assert any("p_value_adjusted, p_value" in f for f in report.failures()), report.failures()


def test_retention_is_one_definition_in_python_and_sql_at_exactly_99_pct(tmp_path):
    """The Python flag (quality_deltas) and v_retention read the same scores and compare the same way.

    accuracy: 792 of 1000 paired samples right against 800 (exactly 99 %); the variant also has 10
    unpaired wrong samples, so its full score is 792 / 1010 (the old view compared that: 98 %).
    judge: no per-sample statistic, 1e-13 below 99 % (the old Python flag allowed 1e-12 below).
    """
    res = tmp_path / RUN / "results"
    write_table(
        res,
        "runs",
        "run",
        [
            {
                "run_id": RUN,
                "config_name": "t",
                "status": "ok",
                "reference_variant": "ref",
                "started_at": datetime(2025, 1, 1, tzinfo=timezone.utc),
            }
        ],
    )
    parts = {}
    for variant, right, extra in (("ref", 800, 0), ("var", 792, 10)):
        write_table(
            res,
            "variants",
            variant,
            [
                {
                    "run_id": RUN,
                    "variant": variant,
                    "is_reference": variant == "ref",
                    "status": "ok",
                    "quantization": variant,
                }
            ],
        )
        samples = _samples(variant, "arithmetic", [1.0] * right + [0.0] * (1000 - right))
        samples += [
            {**s, "sample_id": f"extra-{i}"} for i, s in enumerate(_samples(variant, "arithmetic", [0.0] * extra))
        ]
        scores = _scores(variant, samples, "arithmetic")
        scores.append(
            {
                **scores[0],
                "metric": "judge",
                "value": 1.0 if variant == "ref" else 0.99 - 1e-13,
                "unit": "fraction",
                "sample_stat": None,
            }
        )
        write_table(res, "quality_samples", variant, samples)
        write_table(res, "quality_scores", variant, scores)
        parts[variant] = (samples, scores)
    deltas = quality_deltas(parts["ref"][1], parts["ref"][0], parts["var"][1], parts["var"][0], reference_variant="ref")
    write_table(res, "quality_deltas", "var", deltas)
    db = tmp_path / "wh.duckdb"
    load_run(tmp_path / RUN, db)
    with open_warehouse(db, read_only=True) as con:
        sql = dict(
            (
                (m, (r99, r999))
                for m, r99, r999 in con.execute(
                    "select metric, retention_99, retention_999 from v_retention where variant = 'var'"
                ).fetchall()
            )
        )
    python = {d["metric"]: (d["retention_99"], d["retention_999"]) for d in deltas}
    assert python == sql == {"accuracy": (True, False), "judge": (False, False)}
