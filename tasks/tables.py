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
        # 005_engine_metrics
        ("engine_version", pa.string()),  # e.g. vllm 0.32.0+cpu; NULL when unknown (a hosted API)
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
        ("output_tokens_source", pa.string()),  # usage | max_tokens | tokenizer | approx_chunks
        ("chunk_offsets_ms", pa.list_(pa.float32())),  # each text chunk's arrival from send
        # 002_perf
        ("repeat", pa.int32()),  # 0-based repeat of the scenario
        ("prompt_tokens_source", pa.string()),  # usage | tokenizer | approx_words
        ("finish_reason", pa.string()),  # the server's: length | stop | ...
        ("max_tokens", pa.int32()),  # output tokens asked for
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
        # 002_perf: load pattern, repeats, goodput, confidence intervals, energy per device, roofline
        ("load_kind", pa.string()),  # concurrency | rate | synchronous | throughput
        ("request_rate", pa.float64()),  # target requests/s of a rate step; NULL otherwise
        ("burstiness", pa.float64()),  # gamma shape of a rate step's arrivals (1 = Poisson)
        ("repeats", pa.int32()),
        ("num_warmup", pa.int32()),  # requests excluded as warm-up (count and seconds), all repeats
        ("request_goodput", pa.float64()),  # requests/s meeting every SLO limit
        ("num_good", pa.int32()),
        ("goodput_slo", pa.string()),  # preset name or the limits
        ("slo_ttft_ms", pa.float64()),
        ("slo_tpot_ms", pa.float64()),
        ("slo_e2el_ms", pa.float64()),
        ("ci_level", pa.float64()),  # e.g. 0.95
        ("ci_method", pa.string()),
        ("ttft_ms_mean_ci_lo", pa.float64()),
        ("ttft_ms_mean_ci_hi", pa.float64()),
        ("ttft_ms_p99_ci_lo", pa.float64()),
        ("ttft_ms_p99_ci_hi", pa.float64()),
        ("output_throughput_ci_lo", pa.float64()),  # NULL with one repeat
        ("output_throughput_ci_hi", pa.float64()),
        ("ttft_cv_pct_ci_lo", pa.float64()),
        ("ttft_cv_pct_ci_hi", pa.float64()),
        ("itl_cv_pct_ci_lo", pa.float64()),
        ("itl_cv_pct_ci_hi", pa.float64()),
        ("tokens_per_j", pa.float64()),  # output tokens per joule
        ("energy_by_device_j", pa.string()),  # JSON {device: joules}
        ("output_len_note", pa.string()),  # why outputs may be shorter than asked; NULL when all were full
        ("model_bytes", pa.int64()),  # artifact size: bytes read per decoded token at batch 1
        ("mem_bandwidth_gb_s", pa.float64()),  # host memory bandwidth (1e9 bytes/s), concurrency-1 rows
        ("mem_bandwidth_method", pa.string()),  # how it was measured (or that it is a specification)
        ("mbu_pct", pa.float64()),  # model bandwidth utilisation, concurrency-1 rows
        # 009_engine_energy: the engine's own devices, an idle baseline, J/token above idle, MBU's bytes
        ("energy_devices", pa.string()),  # what was metered: nvml gpu1,gpu3 (...UUIDs) | rapl package-0 | NULL
        ("idle_power_w", pa.float64()),  # mean power of those devices, server up and idle, before the sweep
        ("idle_window_s", pa.float64()),  # length of the idle baseline window (s)
        ("energy_above_idle_j", pa.float64()),  # energy_j - idle_power_w x the measured windows (J)
        ("energy_j_per_token_above_idle", pa.float64()),  # J per output token above idle
        ("idle_note", pa.string()),  # why the idle-subtracted columns are NULL
        ("model_bytes_method", pa.string()),  # how model_bytes was counted (files, fp8 when loading, engine files)
    ]),
    # One row per (variant, scenario, repeat, device, sample): power at a fixed interval.
    "perf_power": pa.schema([
        ("run_id", pa.string()),
        ("variant", pa.string()),
        ("scenario", pa.string()),
        ("repeat", pa.int32()),
        ("device", pa.string()),  # gpu0, package-0, ...
        ("source", pa.string()),  # nvml | rapl
        ("sample_index", pa.int32()),
        ("t_s", pa.float64()),  # from the start of the measured window
        ("power_w", pa.float64()),  # NVML's reading, or RAPL's counter difference over the interval
        ("energy_j", pa.float64()),  # the device's counter since the window's start
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
        ("score", pa.float64()),  # in [0, 1]; NULL where a sample has several measures (see details)
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
        ("unit", pa.string()),  # fraction | nats | ratio | count | tokens | rating | distance
        ("higher_is_better", pa.bool_()),
        ("is_primary", pa.bool_()),
        # 003_quality: how value follows from the suite's samples (tasks.stats), and why it is NULL
        ("sample_stat", pa.string()),  # e.g. mean(score), p99(kl) where ctx=512; NULL: no per-sample statistic
        ("note", pa.string()),
    ]),
    # One row per (non-reference variant, suite, metric): the delta against the reference with a
    # paired bootstrap CI (tasks.stats), computed after the variant's suites.
    "quality_deltas": pa.schema([
        ("run_id", pa.string()),
        ("variant", pa.string()),
        ("reference_variant", pa.string()),
        ("suite", pa.string()),
        ("metric", pa.string()),
        ("unit", pa.string()),
        ("higher_is_better", pa.bool_()),
        ("reference_value", pa.float64()),  # on the samples both variants have, in `unit`
        ("value", pa.float64()),
        ("delta", pa.float64()),  # value - reference_value
        ("ci_low", pa.float64()),  # paired bootstrap percentile CI of delta
        ("ci_high", pa.float64()),
        ("confidence", pa.float64()),  # e.g. 0.95
        ("p_value", pa.float64()),  # exact McNemar, for 0/1 per-sample scores only
        ("n", pa.int32()),  # paired samples
        ("retention_99", pa.bool_()),  # keeps >= 99 % of the reference score (MLPerf)
        ("retention_999", pa.bool_()),  # keeps >= 99.9 %
        ("verdict", pa.string()),  # better | worse | inconclusive | identical | no_ci | no_data
        ("method", pa.string()),
    ]),
    # 005_engine_metrics: one row per (variant, phase, metric, stat), read from the server's own
    # metrics while it was measured (tasks.engines.metrics); none for engines that expose none.
    "engine_metrics": pa.schema([
        ("run_id", pa.string()),
        ("variant", pa.string()),
        ("engine", pa.string()),
        ("phase", pa.string()),  # perf | quality | all
        ("metric", pa.string()),  # e.g. kv_cache_usage_pct, requests_waiting, spec_acceptance_rate
        ("stat", pa.string()),  # mean | max (gauges) | delta (counters) | ratio | count
        ("value", pa.float64()),  # in `unit`
        ("unit", pa.string()),  # pct | count | tokens | fraction
        ("readings", pa.int32()),  # metric reads the value comes from
        ("window_s", pa.float64()),  # first to last read of the phase (s)
        ("description", pa.string()),
        ("note", pa.string()),
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
