"""Result tables: the columns each run writes as Parquet into `runs/<run_id>/results/<table>.parquet`.

These schemas are the contract between the tasks that measure, the Great Expectations
gate and the warehouse loader. Units are in the column names (`_ms`, `_s`, `_j`, `_w`,
`_tok_s`, `_pct`); throughputs named as in `vllm bench serve` are per second.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from tasks.metrics import STAT_NAMES

_STAT_COLS = [(f"{m}_{s}", pa.float64()) for m in ("ttft_ms", "tpot_ms", "itl_ms", "e2el_ms") for s in STAT_NAMES]

SCHEMAS: dict[str, pa.Schema] = {
    # One row per run.
    "runs": pa.schema([
        ("run_id", pa.string()),
        ("config_name", pa.string()),
        ("started_at", pa.timestamp("us", tz="UTC")),
        ("finished_at", pa.timestamp("us", tz="UTC")),
        ("status", pa.string()),  # ok | partial | failed
        ("host", pa.string()),
        ("cpu", pa.string()),
        ("cpu_count", pa.int32()),
        ("gpu", pa.string()),  # NULL when no GPU is visible
        ("hardware_id", pa.string()),  # host/cpu/gpu fingerprint: "same hardware" across runs
        ("library_versions", pa.string()),  # JSON {package: version}
        ("git_sha", pa.string()),
        ("config_json", pa.string()),
        ("reference_variant", pa.string()),
        ("primary_quality_metric", pa.string()),  # 'suite.metric'
        ("error", pa.string()),
    ]),
    # One row per variant of the run (failed ones included, with their error).
    "variants": pa.schema([
        ("run_id", pa.string()),
        ("variant", pa.string()),
        ("model", pa.string()),
        ("engine", pa.string()),
        ("quantization", pa.string()),
        ("speculative", pa.string()),  # method, NULL when none
        ("is_reference", pa.bool_()),
        ("status", pa.string()),  # ok | failed
        ("error", pa.string()),
        ("artifact_path", pa.string()),
        ("artifact_sha256", pa.string()),
        ("artifact_bytes", pa.int64()),
        ("build_cached", pa.bool_()),
        ("build_s", pa.float64()),
        ("server_startup_s", pa.float64()),
        ("engine_args", pa.string()),  # JSON
        ("usd_per_hour", pa.float64()),  # config cost: hardware USD/hour
        ("usd_per_1m_input_tok", pa.float64()),  # config cost: hosted USD per 1M input tokens
        ("usd_per_1m_output_tok", pa.float64()),  # config cost: hosted USD per 1M output tokens
    ]),
    # One row per request, warm-up included (flagged) so counts can be checked.
    "perf_requests": pa.schema([
        ("run_id", pa.string()),
        ("variant", pa.string()),
        ("scenario", pa.string()),  # e.g. c1, c4
        ("concurrency", pa.int32()),
        ("request_index", pa.int32()),
        ("is_warmup", pa.bool_()),
        ("status", pa.string()),  # ok | error | incomplete
        ("error", pa.string()),
        ("start_s", pa.float64()),  # send time from the scenario's start
        ("ttft_ms", pa.float64()),
        ("tpot_ms", pa.float64()),
        ("e2el_ms", pa.float64()),
        ("prompt_tokens", pa.int32()),
        ("output_tokens", pa.int32()),
        ("output_tokens_source", pa.string()),  # usage | max_tokens | tokenizer | chunks
        ("chunk_offsets_ms", pa.list_(pa.float32())),  # each text chunk's arrival from send
    ]),
    # One row per (variant, scenario).
    "perf_summary": pa.schema([
        ("run_id", pa.string()),
        ("variant", pa.string()),
        ("scenario", pa.string()),
        ("concurrency", pa.int32()),
        ("num_requests", pa.int32()),
        ("num_ok", pa.int32()),
        ("num_errors", pa.int32()),
        ("num_incomplete", pa.int32()),
        ("duration_s", pa.float64()),
        ("total_input_tokens", pa.int64()),
        ("total_output_tokens", pa.int64()),
        ("request_throughput", pa.float64()),  # requests/s
        ("output_throughput", pa.float64()),  # output tokens/s over the scenario
        ("total_token_throughput", pa.float64()),  # (input + output) tokens/s
        ("peak_output_throughput", pa.float64()),  # output tokens/s in the best window
        ("peak_window_s", pa.float64()),
        *_STAT_COLS,
        ("ttft_cv_pct", pa.float64()),  # jitter
        ("itl_cv_pct", pa.float64()),
        ("ttft_p99_p50_ratio", pa.float64()),
        ("itl_p99_p50_ratio", pa.float64()),
        ("output_len_forced_by", pa.string()),  # min_tokens | ignore_eos | NULL (engine cannot)
        ("energy_j", pa.float64()),
        ("energy_j_per_token", pa.float64()),
        ("mean_power_w", pa.float64()),
        ("energy_source", pa.string()),  # nvml | rapl | NULL
        ("energy_note", pa.string()),  # why energy is NULL
    ]),
    # One row per (variant, suite, sample).
    "quality_samples": pa.schema([
        ("run_id", pa.string()),
        ("variant", pa.string()),
        ("suite", pa.string()),
        ("sample_id", pa.string()),
        ("prompt", pa.string()),
        ("target", pa.string()),
        ("response", pa.string()),
        ("score", pa.float64()),
        ("valid", pa.bool_()),  # False: empty/unparseable answer or request error (scored wrong)
        ("details", pa.string()),  # JSON
    ]),
    # One row per (variant, suite, metric).
    "quality_scores": pa.schema([
        ("run_id", pa.string()),
        ("variant", pa.string()),
        ("suite", pa.string()),
        ("suite_version", pa.string()),
        ("metric", pa.string()),
        ("value", pa.float64()),
        ("stderr", pa.float64()),
        ("n", pa.int32()),
        ("unit", pa.string()),  # fraction | nats | ratio | count
        ("higher_is_better", pa.bool_()),
        ("is_primary", pa.bool_()),
    ]),
}

TABLES = tuple(SCHEMAS)


def to_table(name: str, rows: list[dict]) -> pa.Table:
    """Rows -> Arrow table with exactly the contract's columns (missing ones NULL)."""
    schema = SCHEMAS[name]
    cols = {f.name: [r.get(f.name) for r in rows] for f in schema}
    return pa.Table.from_pydict(cols, schema=schema)


def write_table(results_dir: Path, name: str, part: str, rows: list[dict]) -> Path:
    """Write (replace) one part of a result table, `results/<table>/<part>.parquet`.

    Each variant writes its own part as soon as it has it, so a later failure loses no
    completed result. The write is atomic: a crash leaves the old file or none.
    """
    d = results_dir / name
    d.mkdir(parents=True, exist_ok=True)
    path = d / f"{part}.parquet"
    tmp = d / f".{part}.parquet.tmp"
    pq.write_table(to_table(name, rows), tmp)
    tmp.replace(path)
    return path


def table_parts(results_dir: Path, name: str) -> list[Path]:
    return sorted((results_dir / name).glob("*.parquet"))


def read_table(results_dir: Path, name: str) -> pd.DataFrame:
    """All parts of one result table as one DataFrame (empty, with the contract's columns, when none)."""
    parts = [pq.read_table(p, schema=SCHEMAS[name]) for p in table_parts(results_dir, name)]
    table = pa.concat_tables(parts) if parts else SCHEMAS[name].empty_table()
    return table.to_pandas()
