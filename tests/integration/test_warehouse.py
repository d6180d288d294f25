"""Warehouse: migrations, the run loader (idempotent, all-or-nothing) and the views, on small hand-made runs."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import duckdb
import pyarrow as pa
import pytest

from tests.helpers import ROOT
from tests.helpers.queries import rows
from tests.helpers.sample_run import QUALITY, STARTED, write_sample_run
from warehouse.contract import DERIVED_TABLES, SCHEMAS, TABLES, table_parts, write_table
from warehouse.db import WarehouseError, identifier, load_run, migrations, open_warehouse


def counts(db: Path) -> dict[str, int]:
    with duckdb.connect(str(db), read_only=True) as con:
        return {t: con.execute(f"select count(*) from {t}").fetchall()[0][0] for t in TABLES}


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "wh" / "tradeoff.duckdb"


def test_migrations_applied_once(db: Path) -> None:
    for _ in range(2):
        open_warehouse(db).close()
    with duckdb.connect(str(db)) as con:
        applied = con.execute("select version, name from schema_version order by version").fetchall()
        assert applied == [(v, n) for v, n, _ in migrations()]
        tables = {t for (t,) in con.execute("select table_name from duckdb_tables()").fetchall()}
    assert tables == set(TABLES) | {t.name for t in DERIVED_TABLES} | {"schema_version"}


def test_tables_match_contract(db: Path) -> None:
    """Every column of warehouse/contract.py, in order, with a compatible type."""
    with open_warehouse(db) as con:
        for name, schema in {**SCHEMAS, **{t.name: t.schema() for t in DERIVED_TABLES}}.items():
            got = con.sql(f"select * from {name}").to_arrow_table().schema
            assert got.names == schema.names
            for f in schema:
                # DuckDB hands timestamptz back in its session time zone: compare the unit only.
                same = got.field(f.name).type.equals(f.type) or (
                    pa.types.is_timestamp(f.type) and got.field(f.name).type.unit == f.type.unit
                )
                assert same, (name, f.name, got.field(f.name).type)


@pytest.mark.parametrize("read_only", [False, True])
def test_newer_schema_refused(db: Path, read_only: bool) -> None:
    open_warehouse(db).close()
    with duckdb.connect(str(db)) as con:
        con.execute("insert into schema_version values (99, 'future', now()::timestamp)")
    known = max(v for v, _, _ in migrations())
    with pytest.raises(WarehouseError) as e:
        open_warehouse(db, read_only=read_only)
    assert str(e.value) == (
        f"warehouse {db} has schema version 99 but this tradeoff knows up to {known}; "
        f"upgrade tradeoff or use another TRADEOFF_WAREHOUSE"
    )


def test_change_points_of_the_old_jitter_name_keep_their_history(db: Path) -> None:
    """A warehouse from before 014 holds Otava's change points under v_history's old name `jitter_pct`;
    after the migration they belong to the series `ttft_cv_pct` that v_history now names."""
    open_warehouse(db).close()
    with duckdb.connect(str(db)) as con:
        con.execute("delete from schema_version where version = 14")
        con.execute("insert into change_points (series_key, metric, run_id) values ('s', 'jitter_pct', 'r2')")
        con.execute("insert into change_points (series_key, metric, run_id) values ('s', 'tpot_ms_mean', 'r2')")
    open_warehouse(db).close()
    with duckdb.connect(str(db)) as con:
        got = con.execute("select metric from change_points order by metric").fetchall()
    assert got == [("tpot_ms_mean",), ("ttft_cv_pct",)]


def test_read_only_does_not_migrate(db: Path) -> None:
    db.parent.mkdir(parents=True)
    duckdb.connect(str(db)).close()
    with open_warehouse(db, read_only=True) as con:
        assert con.execute("select count(*) from duckdb_tables()").fetchall()[0][0] == 0


def test_missing_warehouse_read_only(db: Path) -> None:
    with pytest.raises(WarehouseError, match="no warehouse at"):
        open_warehouse(db, read_only=True)


def test_locked_warehouse(db: Path) -> None:
    open_warehouse(db).close()
    hold = f"import duckdb, time; c = duckdb.connect({str(db)!r}); print('ready', flush=True); time.sleep(60)"
    with subprocess.Popen([sys.executable, "-c", hold], stdout=subprocess.PIPE, text=True) as holder:
        try:
            assert holder.stdout.readline().strip() == "ready"
            with pytest.raises(WarehouseError) as e:
                open_warehouse(db, retry_s=0.3)
        finally:
            holder.kill()
    msg = str(e.value)
    assert str(db) in msg and f"process {holder.pid}" in msg and "\n" not in msg


def test_load_is_idempotent(tmp_path: Path, db: Path) -> None:
    run_dir = write_sample_run(tmp_path)
    inserted = load_run(run_dir, db)
    # Tables the hand-made run leaves empty (perf_power, quality_deltas, engine_metrics, ...) load 0 rows.
    assert inserted == {
        **{t: 0 for t in TABLES},
        "runs": 1,
        "variants": 3,
        "perf_requests": 12,
        "perf_summary": 4,
        "quality_samples": 8,
        "quality_scores": 4,
    }
    assert counts(db) == inserted
    assert load_run(run_dir, db) == inserted
    assert counts(db) == inserted


def _legacy_part(run_dir: Path, variant: str, old: dict[str, float]) -> None:
    """Rewrite a perf_summary part as a release before migration 009 wrote it: bounds named *_ci_lo / *_ci_hi."""
    import pyarrow.parquet as pq

    path = next(p for p in table_parts(run_dir / "results", "perf_summary") if p.stem == variant)
    table = pq.read_table(path).drop_columns(
        [c.replace("_ci_lo", "_ci_low").replace("_ci_hi", "_ci_high") for c in old]
    )
    for name, value in old.items():
        table = table.append_column(name, pa.array([value] * len(table), pa.float64()))
    pq.write_table(table, path)


def test_parts_written_before_the_rename_load_under_the_new_names(tmp_path: Path, db: Path) -> None:
    from warehouse.contract import read_table

    run_dir = write_sample_run(tmp_path)
    _legacy_part(run_dir, "q4_1", {"ttft_ms_mean_ci_lo": 90.0, "ttft_ms_mean_ci_hi": 110.0})
    frame = read_table(run_dir / "results", "perf_summary")
    got = frame[frame.variant == "q4_1"][["ttft_ms_mean_ci_low", "ttft_ms_mean_ci_high"]].drop_duplicates()
    assert got.values.tolist() == [[90.0, 110.0]]
    load_run(run_dir, db)
    with open_warehouse(db, read_only=True) as con:
        got = con.execute(
            "select variant, min(ttft_ms_mean_ci_low), max(ttft_ms_mean_ci_high) from perf_summary "
            "group by variant order by variant"
        ).fetchall()
    assert got == [("q2_k", None, None), ("q4_1", 90.0, 110.0)]


def test_reload_replaces_the_run(tmp_path: Path, db: Path) -> None:
    load_run(write_sample_run(tmp_path / "a"), db)
    load_run(write_sample_run(tmp_path / "a", run_id="r2"), db)
    # r1 again, now without quality: its old quality rows go, r2's stay.
    load_run(write_sample_run(tmp_path / "b", quality={}), db)
    with duckdb.connect(str(db), read_only=True) as con:
        assert con.execute("select run_id, count(*) from quality_scores group by all").fetchall() == [("r2", 4)]


@pytest.mark.parametrize("table", ["perf_requests", "quality_scores", "runs"])
def test_corrupt_part_loads_nothing(tmp_path: Path, db: Path, table: str) -> None:
    load_run(write_sample_run(tmp_path / "a"), db)
    before = counts(db)
    run_dir = write_sample_run(tmp_path / "b", quality={**QUALITY, "q4_1": {("arithmetic", "accuracy"): 0.5}})
    bad = table_parts(run_dir / "results", table)[-1]
    bad.write_bytes(b"PAR1 this is not parquet")
    with pytest.raises(WarehouseError) as e:
        load_run(run_dir, db)
    assert f"table {table}" in str(e.value) and str(bad) in str(e.value)
    assert counts(db) == before


def test_failed_insert_rolls_back(tmp_path: Path, db: Path) -> None:
    load_run(write_sample_run(tmp_path / "a"), db)
    before = counts(db)
    run_dir = write_sample_run(tmp_path / "b")
    res = run_dir / "results" / "perf_summary"
    (res / "q2_k.parquet").rename(res / "copy.parquet")
    write_sample_run(tmp_path / "b")  # q2_k's summary now twice: a primary key violation after the deletes
    with pytest.raises(WarehouseError, match="cannot load run r1"):
        load_run(run_dir, db)
    assert counts(db) == before


@pytest.mark.parametrize("run_rows", [0, 2])
def test_runs_must_hold_one_row(tmp_path: Path, db: Path, run_rows: int) -> None:
    run_dir = write_sample_run(tmp_path)
    write_table(run_dir / "results", "runs", "run", [{"run_id": f"r{i}"} for i in range(run_rows)])
    with pytest.raises(WarehouseError, match=f"exactly one run, found {run_rows} rows"):
        load_run(run_dir, db)
    assert not db.exists()


def test_rows_of_another_run_refused(tmp_path: Path, db: Path) -> None:
    run_dir = write_sample_run(tmp_path)
    write_table(run_dir / "results", "variants", "stray", [{"run_id": "other", "variant": "x"}])
    with pytest.raises(WarehouseError, match="table variants .* other runs"):
        load_run(run_dir, db)


@pytest.mark.parametrize(
    "text, expected",
    [
        ("arithmetic_accuracy", "arithmetic_accuracy"),
        ("fidelity_kl-mean", "fidelity_kl_mean"),
        ("Fidelity.Top 1", "fidelity_top_1"),
        ("o'brien_a/b", "o_brien_a_b"),
    ],
)
def test_identifier(text: str, expected: str) -> None:
    assert identifier(text) == expected


def test_v_tradeoff_values(tmp_path: Path, db: Path) -> None:
    load_run(write_sample_run(tmp_path), db)
    with open_warehouse(db, read_only=True) as con:
        got = {r["variant"]: r for r in rows(con, "select * from v_tradeoff")}
    assert set(got) == {"q4_1", "q2_k", "q8_0"}
    q2 = got["q2_k"]
    expected = {
        "run_id": "r1",
        "started_at": STARTED.replace(tzinfo=None),
        "engine": "llama.cpp",
        "quantization": "q2_k",
        "is_reference": False,
        "status": "ok",
        "peak_output_tok_s": 170.0,  # max over scenarios, although the sustained best is "burst"
        "best_output_tok_s": 156.0,
        "ttft_ms_mean": 90.0,
        "ttft_ms_p99": 120.0,
        "ttft_cv_pct": 20.0,
        "itl_ms_mean": 15.0,
        "tpot_ms_mean": 14.0,
        "energy_j_per_token": None,
        "energy_note": "RAPL not readable: permission denied",
        "quality": 0.68,
        "quality_metric": "arithmetic.accuracy",
        "speedup_vs_reference": 156 / 120,
        "ttft_change_pct_vs_reference": -10.0,
        "ttft_cv_ratio_vs_reference": 2.0,
        "quality_delta_vs_reference": 0.68 - 0.80,
        "arithmetic_accuracy": 0.68,
        "fidelity_kl_mean": 0.031,
    }
    for col, want in expected.items():
        assert q2[col] == (pytest.approx(want) if isinstance(want, float) else want), col
    ref = got["q4_1"]
    assert (ref["best_output_tok_s"], ref["energy_j_per_token"], ref["ttft_ms_mean"]) == (120.0, 0.3, 100.0)
    assert (ref["speedup_vs_reference"], ref["quality_delta_vs_reference"]) == (1.0, 0.0)
    failed = got["q8_0"]
    assert failed["status"] == "failed" and failed["speculative"] == "ngram"
    assert failed["error"].startswith("server exited")
    assert all(
        failed[c] is None for c in ("best_output_tok_s", "quality", "speedup_vs_reference", "arithmetic_accuracy")
    )
    assert failed["quality_metric"] == "arithmetic.accuracy"


def test_v_tradeoff_columns(tmp_path: Path, db: Path) -> None:
    load_run(write_sample_run(tmp_path), db)
    with open_warehouse(db, read_only=True) as con:
        cols = [d[0] for d in con.execute("select * from v_tradeoff").description]
    assert cols == [
        "run_id",
        "started_at",
        "variant",
        "engine",
        "model",
        "quantization",
        "speculative",
        "is_reference",
        "status",
        "error",
        "peak_output_tok_s",
        "best_output_tok_s",
        "ttft_ms_mean",
        "ttft_ms_p99",
        "itl_ms_mean",
        "tpot_ms_mean",
        "energy_j_per_token",
        "energy_note",
        "quality",
        "quality_metric",
        "goodput_req_s",
        "mbu_pct",
        "ttft_ms_mean_ci_low",
        "ttft_ms_mean_ci_high",
        # 007_timing: jitter per repeat of the fixed-length jitter workload (tasks/perf/jitter.py)
        "ttft_cv_pct",
        "ttft_cv_pct_ci_low",
        "ttft_cv_pct_ci_high",
        "itl_cv_pct",
        "itl_cv_pct_ci_low",
        "itl_cv_pct_ci_high",
        "jitter_scenario",
        "jitter_note",
        "speedup_vs_reference",
        "ttft_change_pct_vs_reference",
        "ttft_cv_ratio_vs_reference",
        "itl_cv_ratio_vs_reference",
        "quality_delta_vs_reference",
        "quality_delta_ci_low",
        "quality_delta_ci_high",
        "quality_delta_n",
        "quality_verdict",
        "arithmetic_accuracy",
        "fidelity_kl_mean",
    ]


def test_quality_columns_follow_the_data(tmp_path: Path, db: Path) -> None:
    load_run(write_sample_run(tmp_path / "a", quality={}), db)
    with open_warehouse(db, read_only=True) as con:
        assert [d[0] for d in con.execute("select * from v_quality_wide").description] == ["run_id", "variant"]
        assert con.execute("select count(*) from v_tradeoff").fetchall()[0][0] == 3
    odd = {("o'brien", "a/b"): 2.0, ("arithmetic", "accuracy"): 0.5}
    load_run(write_sample_run(tmp_path / "b", run_id="r2", quality={"q4_1": odd, "q2_k": odd}), db)
    with open_warehouse(db, read_only=True) as con:
        wide = rows(con, "select * from v_quality_wide order by variant")
    assert list(wide[0]) == ["run_id", "variant", "arithmetic_accuracy", "o_brien_a_b"]
    assert [(r["variant"], r["arithmetic_accuracy"], r["o_brien_a_b"]) for r in wide] == [
        ("q2_k", 0.5, 2.0),
        ("q4_1", 0.5, 2.0),
    ]


def test_two_references_compare_with_none(tmp_path: Path, db: Path) -> None:
    run_dir = write_sample_run(tmp_path)
    write_table(
        run_dir / "results",
        "variants",
        "q2_k",
        [{"run_id": "r1", "variant": "q2_k", "is_reference": True, "status": "ok"}],
    )
    load_run(run_dir, db)
    with open_warehouse(db, read_only=True) as con:
        speedups = con.execute("select speedup_vs_reference from v_tradeoff").fetchall()
    assert len(speedups) == 3 and all(s is None or math.isnan(s) for (s,) in speedups)


def test_schema_document_is_the_contract() -> None:
    """docs/schema.md is generated from warehouse/contract.py: regenerate it when a table changes."""
    from warehouse.contract import schema_markdown

    doc = ROOT / "docs" / "schema.md"
    assert doc.read_text() == schema_markdown(), "run: python -m warehouse.contract > docs/schema.md"


def test_every_contract_check_becomes_an_expectation() -> None:
    from warehouse.contract import CONTRACT
    from warehouse.gx_gate import expectation_suite_for

    for name, table in CONTRACT.items():
        declared = sum(len(c.checks) for c in table.columns) + len(table.checks)
        assert declared > 0, name
        assert len(expectation_suite_for(name, None).expectations) == declared, name
