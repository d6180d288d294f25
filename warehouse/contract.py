"""The table contract: every result table declared once - its columns, their type, unit, meaning and checks.

Each run writes its results as Parquet parts (`runs/<run_id>/results/<table>/<part>.parquet`);
this module is the one declaration of those tables. From it come
- the Arrow schema every part is written and read with (`SCHEMAS`, `write_table`, `read_table`, `ResultTables`),
- the Great Expectations suite of the gate (`warehouse.gx_gate` turns each column's `checks` and the
  table's `checks` into expectations),
- the schema document (`python -m warehouse.contract > docs/schema.md`),
and the SQL migrations are tested against it (same columns, same order, compatible types).

Units are in the column names (`_ms`, `_s`, `_j`, `_w`, `_pct`, `_tok_s`); throughputs named as
in `vllm bench serve` are per second. The vocabularies a column may hold (statuses, units,
verdicts) are declared here too, and the code that writes them imports them from here.
"""

from __future__ import annotations

import difflib
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from warehouse.errors import WarehouseError

# ------------------------------------------------------------------ vocabularies

# Percentiles every latency distribution stores (more can be asked for in `tradeoff perf`'s JSON).
PERCENTILES = (50, 90, 95, 99)
STAT_NAMES = ("mean", "std", "min", "max") + tuple(f"p{p}" for p in PERCENTILES)
LATENCIES = ("ttft_ms", "tpot_ms", "itl_ms", "e2el_ms")
REQUEST_STATUSES = ("ok", "error", "incomplete")
# Units of a quality score: fraction in [0, 1], nats >= 0, ratio > 0, rating in [1, 10], distance in [0, 2], ...
UNITS = ("fraction", "nats", "ratio", "count", "tokens", "rating", "distance", "seconds")
VERDICTS = ("better", "worse", "inconclusive", "identical", "no_ci", "no_data")
ENGINE_STATS = ("mean", "max", "delta", "ratio", "count")
ENERGY_SOURCES = ("nvml", "rapl")
# Upper bound for "finite": no real latency (ms), throughput or energy comes near it; inf does.
MAX_FINITE = 1e9


# ------------------------------------------------------------------ declarations


@dataclass(frozen=True)
class Where:
    """A row condition: a check applies to the rows where `column <op> value` (op: ==, >, is_null, is_not_null),
    and `also` holds too when given."""

    column: str
    op: str
    value: Any = None
    also: "Where | None" = None

    def text(self) -> str:
        own = f"{self.column} {self.op.replace('_', ' ')}" + (f" {self.value!r}" if self.value is not None else "")
        return own + (f" and {self.also.text()}" if self.also else "")


OK = Where("status", "==", "ok")
MEASURED = Where("num_ok", ">", 0)


@dataclass(frozen=True)
class Check:
    """One data check; `warehouse.gx_gate` maps each kind to a GX expectation.

    kinds: not_null; between (min, max, strict_min, strict_max); in_set (values); at_least (other column,
    or_equal, ignore_missing: this column >= other); equal_sum (columns: this column == their sum);
    sum_between (min, max: the column's sum, e.g. booleans counted); rows (exactly `value` rows).
    """

    kind: str
    args: dict[str, Any] = field(default_factory=dict)
    where: Where | None = None


def not_null(where: Where | None = None) -> Check:
    return Check("not_null", where=where)


def between(
    lo: float | None = None,
    hi: float | None = None,
    strict_min: bool = False,
    strict_max: bool = False,
    where: Where | None = None,
) -> Check:
    return Check("between", {"min": lo, "max": hi, "strict_min": strict_min, "strict_max": strict_max}, where)


def in_set(values: tuple[str, ...] | list[str]) -> Check:
    return Check("in_set", {"values": list(values)})


def at_least(other: str, or_equal: bool = True, ignore_missing: bool = False, where: Where | None = None) -> Check:
    return Check("at_least", {"other": other, "or_equal": or_equal, "ignore_missing": ignore_missing}, where)


def positive_finite(where: Where | None = None) -> tuple[Check, Check]:
    """Present and in (0, MAX_FINITE] on the rows `where` selects."""
    return not_null(where), between(0, MAX_FINITE, strict_min=True, where=where)


@dataclass(frozen=True)
class Column:
    name: str
    type: pa.DataType
    unit: str | None
    description: str
    checks: tuple[Check, ...] = ()


@dataclass(frozen=True)
class Table:
    name: str
    grain: str  # one row per ...
    columns: tuple[Column, ...]
    checks: tuple[Check, ...] = ()  # table-level: rows, sum_between of a column, equal_sum

    def schema(self) -> pa.Schema:
        return pa.schema([(c.name, c.type) for c in self.columns])


def col(
    name: str, type_: pa.DataType, unit: str | None, description: str, *checks: Check | tuple[Check, ...]
) -> Column:
    flat: list[Check] = []
    for c in checks:
        flat.extend(c if isinstance(c, tuple) else (c,))
    return Column(name, type_, unit, description, tuple(flat))


S, I32, I64, F64, B = pa.string(), pa.int32(), pa.int64(), pa.float64(), pa.bool_()
TS = pa.timestamp("us", tz="UTC")
RUN_ID = col("run_id", S, None, "run id: UTC start, config name and a random suffix", not_null())
VARIANT = col("variant", S, None, "variant name from the config")


def _latency_stats() -> list[Column]:
    names = {
        "ttft_ms": "time to first token",
        "tpot_ms": "time per output token after the first",
        "itl_ms": "inter-token latency (gap between chunks)",
        "e2el_ms": "end-to-end latency",
    }
    return [
        col(f"{m}_{s}", F64, "ms", f"{names[m]}: {s} over the scenario's ok requests (vLLM's definition)")
        for m in LATENCIES
        for s in STAT_NAMES
    ]


def _ci(metric: str, unit: str | None, what: str) -> list[Column]:
    return [
        col(
            f"{metric}_ci_low",
            F64,
            unit,
            f"lower bound of the {what} interval (ci_level, ci_method); NULL with fewer than 2 repeats",
        ),
        col(
            f"{metric}_ci_high",
            F64,
            unit,
            f"upper bound of the {what} interval",
            at_least(f"{metric}_ci_low", ignore_missing=True),
        ),
    ]


TABLES_DECLARED: tuple[Table, ...] = (
    Table(
        "runs",
        "run",
        (
            RUN_ID,
            col("config_name", S, None, "the config's name"),
            col("started_at", TS, "UTC", "start of the run's first attempt"),
            col("finished_at", TS, "UTC", "end of the latest attempt"),
            col("status", S, None, "ok | partial (some variants failed) | failed"),
            col("host", S, None, "host name of the nightly"),
            col("cpu", S, None, "CPU model"),
            col("cpu_count", I32, "count", "logical CPUs"),
            col("gpu", S, None, "GPU models; NULL when no GPU is visible"),
            col("hardware_id", S, None, "host/cpu/gpu fingerprint: 'same hardware' across runs"),
            col("library_versions", S, "JSON", "{package: version} of the measuring host"),
            col("git_sha", S, None, "commit of the tradeoff checkout"),
            col("config_json", S, "JSON", "the validated config"),
            col("reference_variant", S, None, "the variant every delta compares with"),
            col("primary_quality_metric", S, None, "'suite.metric' shown as the quality column"),
            col("error", S, None, "why the run failed or was partial"),
            col(
                "gate_plan_json",
                S,
                "JSON",
                "the quality gate's power stated before the evidence: per gating metric and variant, the items "
                "planned, the discordance assumed, the chance an equal variant passes, the items for 80 % "
                "(tasks/decision/gate_plan.py)",
            ),
        ),
        checks=(Check("rows", {"value": 1}),),
    ),
    Table(
        "variants",
        "variant of the run, failed ones included with their error",
        (
            RUN_ID,
            VARIANT,
            col("model", S, None, "model name from the config"),
            col("engine", S, None, "llama.cpp | vllm | tensorrt-llm | openai-compatible"),
            col("quantization", S, None, "weight format, e.g. q4_1, fp8, int4_awq"),
            col("speculative", S, None, "speculative decoding method; NULL when none"),
            col("is_reference", B, None, "the run's reference variant", not_null()),
            col("status", S, None, "ok | failed", not_null(), in_set(("ok", "failed"))),
            col("error", S, None, "why the variant failed (first line: type and message)"),
            col("artifact_path", S, None, "what the server loaded"),
            col("artifact_sha256", S, None, "content hash of the artifact"),
            col("artifact_bytes", I64, "bytes", "size of the artifact"),
            col("build_cached", B, None, "the build came from the content-addressed cache"),
            col("build_s", F64, "s", "build time (or cache lookup)"),
            col("server_startup_s", F64, "s", "server start until healthy; a hosted endpoint: until it first answered"),
            col("engine_args", S, "JSON", "the variant's engine options"),
            col("usd_per_hour", F64, "USD/h", "config cost: own hardware per hour"),
            col("usd_per_1m_input_tok", F64, "USD", "config cost: hosted price per 1M input tokens"),
            col("usd_per_1m_output_tok", F64, "USD", "config cost: hosted price per 1M output tokens"),
            col("engine_version", S, None, "e.g. vllm 0.32.0+cpu; NULL when unknown (a hosted API)"),
            col(
                "cpu_threads",
                S,
                "JSON",
                "the engine's CPU threads on this host: {decode, prompt, host_cores} (llama.cpp "
                "n_threads, n_threads_batch); NULL where not known (GPU engines, hosted APIs)",
            ),
        ),
        checks=(Check("sum_between", {"column": "is_reference", "min": 1, "max": 1}),),
    ),
    Table(
        "perf_requests",
        "request, warm-up included (flagged) so counts can be checked",
        (
            RUN_ID,
            VARIANT,
            col("scenario", S, None, "load step: c<N> (concurrency), r<R> (rate), sync, max, sweep<i>, trace"),
            col("concurrency", I32, "count", "requests in flight allowed", not_null(), between(1)),
            col("request_index", I32, None, "order within (scenario, repeat)"),
            col("is_warmup", B, None, "excluded from every statistic"),
            col(
                "status",
                S,
                None,
                "ok | error | incomplete (cut after its first chunk)",
                not_null(),
                in_set(REQUEST_STATUSES),
            ),
            col("error", S, None, "why the request failed"),
            col("start_s", F64, "s", "send time from the scenario's start"),
            col("ttft_ms", F64, "ms", "time to first token (first text chunk read)", positive_finite(OK)),
            col("tpot_ms", F64, "ms", "(e2el - ttft) / (output tokens - 1)", between(0, MAX_FINITE, where=OK)),
            col(
                "e2el_ms",
                F64,
                "ms",
                "send until the read that carried [DONE]",
                positive_finite(OK),
                at_least("ttft_ms", where=OK),
            ),
            col("prompt_tokens", I32, "tokens", "prompt length", between(1, where=OK)),
            col(
                "output_tokens",
                I32,
                "tokens",
                "output length, reasoning included",
                not_null(OK),
                between(1, where=OK),
                at_least("reasoning_tokens", ignore_missing=True),
            ),
            col("output_tokens_source", S, None, "usage | max_tokens | tokenizer | approx_chunks"),
            col("chunk_offsets_ms", pa.list_(pa.float32()), "ms", "each text chunk's arrival from send"),
            col("repeat", I32, None, "0-based repeat of the scenario"),
            col("prompt_tokens_source", S, None, "usage | tokenizer | approx_words"),
            col("finish_reason", S, None, "the server's: length | stop | ..."),
            col("max_tokens", I32, "tokens", "output tokens asked for"),
            col(
                "ttft_answer_ms",
                F64,
                "ms",
                "send -> first answer (non-reasoning) chunk; NULL: all reasoning",
                at_least("ttft_ms", ignore_missing=True),
            ),  # the answer starts no earlier than the first output
            col("reasoning_tokens", I32, "tokens", "output tokens that were reasoning (0: no reasoning delta)"),
            col("answer_tokens", I32, "tokens", "output_tokens - reasoning_tokens"),
            col("reasoning_tokens_source", S, None, "usage | tokenizer | approx_chunks; NULL without reasoning"),
            col("end_s", F64, "s", "when the request returned, any status, from the scenario's start"),
            col(
                "prompt_tokens_asked",
                I32,
                "tokens",
                "prompt length as built: the workload's tokenizer's count (prompt_tokens: the server's, when given)",
            ),
            # 017_traffic: when a scheduled request was due (rate and trace steps); start_s - scheduled_s is its
            # send-time error
            col("scheduled_s", F64, "s", "when the schedule had it sent, from the scenario's start; NULL: closed loop"),
            col("session_id", S, None, "a replayed trace's session (multi-turn conversation); NULL: none"),
            col("turn", I32, None, "depth of the request in its session, 1-based (TTFT per turn depth)", between(1)),
        ),
    ),
    Table(
        "perf_summary",
        "(variant, scenario), over all its repeats",
        (
            RUN_ID,
            VARIANT,
            col("scenario", S, None, "load step"),
            col("concurrency", I32, "count", "requests in flight allowed (rate steps: the cap, or num_prompts)"),
            col("num_requests", I32, "count", "measured requests (warm-up excluded)"),
            col("num_ok", I32, "count", "completed requests"),
            col("num_errors", I32, "count", "failed requests"),
            col("num_incomplete", I32, "count", "requests cut after their first chunk"),
            col("duration_s", F64, "s", "sum over repeats of first send to last end of ok requests"),
            col("total_input_tokens", I64, "tokens", "prompt tokens of ok requests"),
            col("total_output_tokens", I64, "tokens", "output tokens of ok requests"),
            col(
                "request_throughput",
                F64,
                "req/s",
                "ok requests per second",
                positive_finite(MEASURED),
                at_least("request_goodput", ignore_missing=True),
            ),  # goodput never exceeds throughput
            col(
                "output_throughput",
                F64,
                "tok/s",
                "output tokens per second over the scenario",
                positive_finite(MEASURED),
            ),
            col("total_token_throughput", F64, "tok/s", "(input + output) tokens per second"),
            col("peak_output_throughput", F64, "tok/s", "output tokens per second in the best window (peak_window_s)"),
            col("peak_window_s", F64, "s", "window of the peak throughput"),
            *[
                c
                if c.name != "ttft_ms_mean"
                else Column(c.name, c.type, c.unit, c.description, positive_finite(MEASURED))
                for c in _latency_stats()
            ],
            col(
                "ttft_cv_pct_pooled",
                F64,
                "%",
                "TTFT coefficient of variation over every repeat's requests pooled: "
                "prompt-length spread and run-to-run drift included, not jitter (ttft_cv_pct_median is)",
                between(0, MAX_FINITE),
            ),
            col(
                "itl_cv_pct_pooled",
                F64,
                "%",
                "inter-token latency CV over every repeat's chunk gaps pooled, not jitter (itl_cv_pct_median is)",
            ),
            col("ttft_p99_p50_ratio", F64, "ratio", "TTFT tail: p99 / p50"),
            col("itl_p99_p50_ratio", F64, "ratio", "ITL tail: p99 / p50"),
            col("output_len_forced_by", S, None, "min_tokens | ignore_eos | NULL (the engine honours neither)"),
            col("energy_j", F64, "J", "energy of the measured windows (all repeats); NULL with energy_note"),
            col(
                "energy_j_per_token",
                F64,
                "J/token",
                "energy per output token",
                between(0, MAX_FINITE, strict_min=True),
                at_least("energy_j_per_token_above_idle", ignore_missing=True),
            ),
            col("mean_power_w", F64, "W", "energy / window time"),
            col("energy_source", S, None, "nvml | rapl | NULL"),
            col("energy_note", S, None, "why energy is NULL", not_null(Where("energy_j_per_token", "is_null"))),
            col("load_kind", S, None, "concurrency | rate | synchronous | throughput | trace"),
            col("request_rate", F64, "req/s", "target rate of a rate step; NULL otherwise"),
            col("burstiness", F64, None, "gamma shape of a rate step's arrivals (1 = Poisson)"),
            col("repeats", I32, "count", "times the scenario ran"),
            col("num_warmup", I32, "count", "requests excluded as warm-up (count and seconds), all repeats"),
            col("request_goodput", F64, "req/s", "requests per second meeting every SLO limit", between(0, MAX_FINITE)),
            col("num_good", I32, "count", "requests meeting every SLO limit"),
            col("goodput_slo", S, None, "the SLO preset's name or its limits"),
            col("slo_ttft_ms", F64, "ms", "SLO limit on TTFT"),
            col("slo_tpot_ms", F64, "ms", "SLO limit on TPOT"),
            col("slo_e2el_ms", F64, "ms", "SLO limit on end-to-end latency"),
            col("ci_level", F64, None, "confidence level of the intervals, e.g. 0.95"),
            col("ci_method", S, None, "how the intervals are computed"),
            *_ci("ttft_ms_mean", "ms", "mean TTFT"),
            col(
                "ttft_ms_p99_ci_low",
                F64,
                "ms",
                "lower bound of the p99 TTFT interval: distribution-free, an order "
                "statistic of the pooled requests (ci_level, ci_method); NULL below 368 requests at 95 %",
            ),
            col(
                "ttft_ms_p99_ci_high",
                F64,
                "ms",
                "upper bound of the p99 TTFT interval",
                at_least("ttft_ms_p99_ci_low", ignore_missing=True),
            ),
            *_ci("output_throughput", "tok/s", "output throughput"),
            col("tokens_per_j", F64, "tokens/J", "output tokens per joule", between(0, MAX_FINITE, strict_min=True)),
            col("energy_by_device_j", S, "JSON", "{device: joules}"),
            col("output_len_note", S, None, "why outputs may be shorter than asked; NULL when all were full"),
            col("model_bytes", I64, "bytes", "bytes read per decoded token at batch 1 (the artifact's size)"),
            col("mem_bandwidth_gb_s", F64, "GB/s", "host memory bandwidth (1e9 bytes/s), concurrency-1 rows"),
            col(
                "mem_bandwidth_method",
                S,
                None,
                "how the bandwidth was measured (or that it is a specification)",
                not_null(Where("mbu_pct", "is_not_null")),
            ),
            col(
                "mbu_pct",
                F64,
                "%",
                "model bandwidth utilisation, concurrency-1 rows",
                between(0, MAX_FINITE, strict_min=True),
            ),
            col("ttft_answer_ms_mean", F64, "ms", "time to the first answer (non-reasoning) token: mean"),
            col("ttft_answer_ms_p50", F64, "ms", "time to the first answer token: p50"),
            col("ttft_answer_ms_p99", F64, "ms", "time to the first answer token: p99"),
            col("total_reasoning_tokens", I64, "tokens", "reasoning tokens of ok requests"),
            col("total_answer_tokens", I64, "tokens", "answer tokens of ok requests"),
            col("ttft_cv_pct_median", F64, "%", "median over repeats of each repeat's TTFT CV (tasks.perf.jitter)"),
            *_ci("ttft_cv_pct_median", "%", "median TTFT CV (log-scale t interval over repeats, > 0)"),
            col("itl_cv_pct_median", F64, "%", "median over repeats of each repeat's ITL CV"),
            *_ci("itl_cv_pct_median", "%", "median ITL CV (log-scale t interval over repeats, > 0)"),
            col("jitter_note", S, None, "why a jitter figure or its interval is NULL"),
            # 008_engine_energy: the engine's own devices, an idle baseline, J/token above idle, MBU's bytes
            col("energy_devices", S, None, "what was metered: nvml gpu1,gpu3 (... UUIDs) | rapl package-0 | NULL"),
            col(
                "idle_power_w",
                F64,
                "W",
                "mean power of those devices, server up and idle, before the sweep",
                between(0, MAX_FINITE),
            ),
            col(
                "idle_window_s",
                F64,
                "s",
                "length of the idle baseline window",
                not_null(Where("idle_power_w", "is_not_null")),
                between(0, MAX_FINITE, strict_min=True),
            ),
            col("energy_above_idle_j", F64, "J", "energy_j - idle_power_w x the measured windows"),
            col(
                "energy_j_per_token_above_idle",
                F64,
                "J/token",
                "energy per output token above idle",
                between(0, MAX_FINITE, strict_min=True),
            ),
            col(
                "idle_note",
                S,
                None,
                "why the idle-subtracted columns are NULL",
                not_null(
                    Where("energy_devices", "is_not_null", also=Where("energy_j_per_token_above_idle", "is_null"))
                ),
            ),
            col(
                "model_bytes_method",
                S,
                None,
                "how model_bytes was counted (files, quantized when loading, engine files)",
                not_null(Where("model_bytes", "is_not_null")),
            ),
            # 010_slo_claims: the completed request rate's interval (ties of closed-loop steps are judged on it)
            *_ci("request_throughput", "req/s", "request throughput"),
            # 016_host_noise: what else used the host during the step's windows (tasks/perf/host_noise.py)
            col(
                "host_other_cpu_pct",
                F64,
                "%",
                "CPU of processes other than the engine and the load generator, % of one core: max over kept windows",
                between(0, MAX_FINITE),
            ),
            col("host_steal_pct", F64, "%", "CPU stolen by the hypervisor, % of one core: max over kept windows"),
            col("host_load1", F64, None, "1-minute load average at the kept windows' ends: max"),
            col("host_noise_max_pct", F64, "%", "threshold: a window whose others or steal exceed it is disturbed"),
            col("windows_kept", I64, None, "windows (repeats) the step's figures rest on"),
            col("windows_remeasured", I64, None, "disturbed windows dropped and measured again"),
            col("windows_disturbed", I64, None, "kept windows still over the threshold (no retry or time left)"),
            col("host_noise_note", S, None, "what was re-measured and why, or why the host's use is NULL"),
            col("prompt_len_note", S, None, "when the server counted prompts more than 1 token off their built length"),
            # 017_traffic: how faithfully a schedule (rate step, trace replay) was sent, and why a step stopped
            col("send_error_ms_p50", F64, "ms", "actual - scheduled send time, median; NULL: no schedule"),
            col("send_error_ms_p99", F64, "ms", "actual - scheduled send time, p99; NULL: no schedule"),
            col("send_error_ms_max", F64, "ms", "actual - scheduled send time, largest; NULL: no schedule"),
            col("saturated", B, None, "the step's queue kept growing (in flight and TTFT rising): stopped early"),
            col("stop_reason", S, None, "the stopping rule that ended the step early and why; NULL: ran out"),
            # 018_extend: a fixed step's claim gathered over looks (decision.extend; tasks/decision/extend.py)
            col(
                "slo_looks",
                I64,
                None,
                "most looks at the step's SLO claim; each judged at 1 - (1 - confidence) / slo_looks",
                between(1, 1000),
            ),
            col("repeats_added", I64, None, "repeats added to gather what the step's SLO claim lacked"),
            col("extend_note", S, None, "what the extension did to the step, or why it added nothing more"),
            # 019_gpu_neighbours: other processes on the engine's GPUs during the kept windows (NVML)
            col(
                "gpu_other_procs",
                I64,
                None,
                "processes on the engine's GPUs other than the engine's and the load generator's: max, kept windows",
                between(0, 1_000_000),
            ),
            col(
                "gpu_other_sm_pct",
                F64,
                "%",
                "their SM utilisation, % of a GPU (the most on any of the engine's): max over kept windows",
                between(0, MAX_FINITE),
            ),
            # 020_interleave: the variants whose perf ran in interleaved rounds with this one (tasks/perf/rounds.py)
            col("interleaved_with", S, None, "the other variants of the perf rounds (perf.interleave); NULL: alone"),
            # 021_rank_rounds: rounds added while the variants' ranking was unsettled (tasks/decision/ranking.py)
            col(
                "rounds_added",
                I64,
                None,
                "rounds added to the step while the variants' ranking was unsettled",
                between(0, 100_000),
            ),
            col("rank_note", S, None, "each look's reading of the ranking and what was done; NULL: not asked"),
        ),
        checks=(
            Check(
                "equal_sum",
                {"column": "num_requests", "parts": ["num_ok", "num_errors", "num_incomplete"], "as": "num_counted"},
            ),
        ),
    ),
    Table(
        "perf_power",
        "power sample of one device during one (scenario, repeat)",
        (
            RUN_ID,
            VARIANT,
            col("scenario", S, None, "load step"),
            col("repeat", I32, None, "0-based repeat"),
            col("device", S, None, "gpu0, package-0, ...", not_null()),
            col("source", S, None, "nvml | rapl", in_set(ENERGY_SOURCES)),
            col("sample_index", I32, None, "order within the device's samples"),
            col("t_s", F64, "s", "from the start of the measured window", between(0, MAX_FINITE)),
            col(
                "power_w",
                F64,
                "W",
                "NVML's reading, or RAPL's counter difference over the interval",
                between(0, MAX_FINITE),
            ),
            col("energy_j", F64, "J", "the device's counter since the window's start", between(0, MAX_FINITE)),
        ),
    ),
    Table(
        "quality_samples",
        "sample of one suite",
        (
            RUN_ID,
            VARIANT,
            col("suite", S, None, "suite key (its label, else its name)", not_null()),
            col("sample_id", S, None, "stable id within the suite", not_null()),
            col("prompt", S, None, "what was sent"),
            col("target", S, None, "the expected answer"),
            col("response", S, None, "what the variant answered"),
            col(
                "score",
                F64,
                "fraction",
                "in [0, 1]; NULL where a sample has several measures (see details)",
                between(0, 1),
            ),
            col(
                "valid",
                B,
                None,
                "False: empty/unparseable answer (scored wrong) or request error (unscored)",
                not_null(),
            ),
            col("details", S, "JSON", "suite-specific fields"),
        ),
    ),
    Table(
        "quality_scores",
        "metric of one suite",
        (
            RUN_ID,
            VARIANT,
            col("suite", S, None, "suite key", not_null()),
            col("suite_version", S, None, "bumped on any change that can move scores"),
            col("metric", S, None, "e.g. accuracy, kl_mean, gsm8k.exact_match.strict-match", not_null()),
            col(
                "value",
                F64,
                "unit",
                "the score, in `unit`; NULL says why in `note`",
                between(0, 1, where=Where("unit", "==", "fraction")),
                between(0, MAX_FINITE, where=Where("unit", "==", "nats")),
                between(0, MAX_FINITE, strict_min=True, where=Where("unit", "==", "ratio")),
                between(0, MAX_FINITE, where=Where("unit", "==", "count")),
                between(0, MAX_FINITE, where=Where("unit", "==", "tokens")),
                between(0, MAX_FINITE, where=Where("unit", "==", "seconds")),
                between(1, 10, where=Where("unit", "==", "rating")),
                between(0, 2, where=Where("unit", "==", "distance")),
            ),  # 1 - cosine similarity
            col("stderr", F64, "unit", "standard error of the value"),
            col("n", I32, "count", "samples behind the value", between(1)),
            col("unit", S, None, " | ".join(UNITS), in_set(UNITS)),
            col("higher_is_better", B, None, "direction of the metric"),
            col("is_primary", B, None, "the config's primary quality metric"),
            col(
                "sample_stat",
                S,
                None,
                "how value follows from the samples, e.g. mean(score), p99(kl) where ctx=512; "
                "NULL: no per-sample statistic (no CI on its delta)",
            ),
            col("note", S, None, "why value is NULL, or what to know about it", not_null(Where("value", "is_null"))),
        ),
    ),
    Table(
        "quality_deltas",
        "metric of a non-reference variant against the reference (paired interval and test)",
        (
            RUN_ID,
            VARIANT,
            col("reference_variant", S, None, "the variant compared with", not_null()),
            col("suite", S, None, "suite key"),
            col("metric", S, None, "metric name"),
            col("unit", S, None, "unit of value and delta"),
            col("higher_is_better", B, None, "direction of the metric"),
            col("reference_value", F64, "unit", "the reference's value on the samples both variants have"),
            col("value", F64, "unit", "the variant's value on the same samples"),
            col("delta", F64, "unit", "value - reference_value"),
            col(
                "ci_low",
                F64,
                "unit",
                "lower bound of the paired interval of delta: Tango's score interval (0/1 scores), else BCa bootstrap",
            ),
            col("ci_high", F64, "unit", "upper bound of the paired interval of delta", at_least("ci_low")),
            col(
                "confidence", F64, None, "confidence level, e.g. 0.95", between(0, 1, strict_min=True, strict_max=True)
            ),
            col(
                "p_value",
                F64,
                None,
                "raw two-sided p: exact McNemar (0/1 scores), else paired sign-flip test",
                between(0, 1),
            ),
            col("n", I32, "count", "paired samples", between(0)),
            col("retention_99", B, None, "keeps >= 99 % of the reference score (MLPerf)"),
            col("retention_999", B, None, "keeps >= 99.9 %"),
            col("verdict", S, None, " | ".join(VERDICTS), not_null(), in_set(VERDICTS)),
            col("method", S, None, "how the interval and test were computed"),
            col(
                "p_value_adjusted",
                F64,
                None,
                "Holm over the variant's rows that carry a p_value (the verdict uses it)",
                between(0, 1),
                at_least("p_value", ignore_missing=True),
                not_null(Where("p_value", "is_not_null")),
            ),
            col("p_family_size", I32, "count", "tests in that Holm family", between(1)),
            col(
                "n_lost",
                I32,
                "count",
                "0/1 metrics: pairs the reference got right and the variant wrong (an errored request counts as wrong)",
                between(0),
            ),
            col(
                "n_gained", I32, "count", "0/1 metrics: pairs the variant got right and the reference wrong", between(0)
            ),
            col(
                "retention_ci_low",
                F64,
                "ratio",
                "the quality gate's lower bound: the interval as retention (tasks/decision/gate.py); NULL: no bound",
                between(0),
            ),
            col(
                "retention_ci_high",
                F64,
                "ratio",
                "its upper bound; NULL: none (or unbounded)",
                at_least("retention_ci_low", ignore_missing=True),
            ),
            col(
                "look_confidence",
                F64,
                None,
                "two-sided level of this row's interval: `confidence`, or an adaptive "
                "suite's look level (alpha spent over its looks)",
                between(0, 1, strict_min=True, strict_max=True),
            ),
            col(
                "looks",
                I32,
                "count",
                "looks at the sample taken (an adaptive suite extends while its gate is undecided)",
                between(1),
            ),
            col("looks_planned", I32, "count", "looks its schedule plans (1: a fixed sample)", between(1)),
            col(
                "identity_n",
                I32,
                "count",
                "speculative variant whose plain decoding is the reference: greedy outputs compared (greedy_identity)",
                between(1),
            ),
            col("identity_same", I32, "count", "of those, identical to plain decoding", between(0)),
            col(
                "identity_flip_high",
                F64,
                "fraction",
                "one-sided upper bound on the share of outputs that differ (Clopper-Pearson at (1 + confidence) / 2)",
                between(0, 1),
            ),
            col(
                "identity_retention_low",
                F64,
                "ratio",
                "retention this metric keeps at least when at most identity_flip_high of outputs differ",
                between(0),
            ),
            col(
                "n_needed_threshold",
                F64,
                "unit",
                "0/1 gating metrics: the delta at the run's gate threshold (-margin, or (target - 1) x the reference's "
                "score) that n_needed and n_needed_if_equal are computed for",
            ),
            col(
                "n_needed_if_equal",
                I64,
                "count",
                "paired samples (the last look of the design in use) with which a truly equal variant with this "
                "row's discordance passes with 80 % power (tasks/decision/design.py, exact); NULL: not reachable",
                between(1),
            ),
            col(
                "n_needed",
                I64,
                "count",
                "the same for the observed loss and gain rates: samples to pass (or fail, when the estimate is "
                "past the threshold) with 80 % power",
                between(1),
            ),
        ),
    ),
    Table(
        "engine_metrics",
        "statistic of one engine metric over one phase (the server's own metrics)",
        (
            RUN_ID,
            VARIANT,
            col("engine", S, None, "engine name"),
            col("phase", S, None, "perf | quality | all"),
            col("metric", S, None, "e.g. kv_cache_usage_pct, requests_waiting, spec_acceptance_rate", not_null()),
            col("stat", S, None, " | ".join(ENGINE_STATS), in_set(ENGINE_STATS)),
            col(
                "value",
                F64,
                "unit",
                "in `unit`",
                not_null(),
                between(0, MAX_FINITE),
                between(0, 100, where=Where("unit", "==", "pct")),
                between(0, 1, where=Where("unit", "==", "fraction")),
            ),
            col("unit", S, None, "pct | count | tokens | fraction"),
            col("readings", I32, "count", "metric reads the value comes from"),
            col("window_s", F64, "s", "first to last read of the phase"),
            col("description", S, None, "what the metric means"),
            col("note", S, None, "what to know about the value"),
        ),
    ),
)

# Tables the loader derives from the result tables in Python after each load (warehouse/history.py,
# warehouse/pairs.py); not written as Parquet parts, so neither gated nor read from a run folder. Migrations 012 and
# 022 create them.
DERIVED_TABLES: tuple[Table, ...] = (
    Table(
        "series_keys",
        "(run, variant, scope): the series the run's values belong to, keyed on what was measured",
        (
            RUN_ID,
            VARIANT,
            col("scope", S, None, "'perf', or the quality suite key whose metrics the key covers"),
            col("series_key", S, None, "sha256[:16] of variant_key, hardware_id and workload_key"),
            col(
                "variant_key",
                S,
                None,
                "sha256[:16] of what served: artifact hash (hosted: the model), engine, "
                "quantization, speculative decoding, engine options; not the engine version",
            ),
            col(
                "workload_key",
                S,
                None,
                "sha256[:16] of what was run: the perf sweep's defining fields, or the suite's "
                "name, version, limit, seed and parameters",
            ),
        ),
    ),
    Table(
        "perf_pairs",
        "(run, variant, step, other variant, its step): two closed-loop steps' throughputs compared round by round",
        (
            RUN_ID,
            VARIANT,
            col("scenario", S, None, "the variant's closed-loop step"),
            col("other_variant", S, None, "the variant it is compared with"),
            col("other_scenario", S, None, "that variant's step"),
            col("n_pairs", I32, "count", "rounds (repeat indices) both steps measured"),
            col("ci_level", F64, None, "the lower of the two steps' perf_summary.ci_level"),
            *(
                c
                for m, words in (
                    ("request_throughput", "completed requests/s"),
                    ("output_throughput", "output tokens/s"),
                )
                for c in (
                    col(
                        f"{m}_ratio", F64, "ratio", f"geometric mean of the per-round ratio of {words}, variant / other"
                    ),
                    col(
                        f"{m}_ratio_ci_low", F64, "ratio", "Student's paired t interval of it (log scale), at ci_level"
                    ),
                    col(f"{m}_ratio_ci_high", F64, "ratio", "its upper bound"),
                )
            ),
        ),
    ),
    Table(
        "change_points",
        "(series, metric, run where it changed): Apache Otava's e-divisive change points",
        (
            col("series_key", S, None, "series_keys.series_key"),
            col("metric", S, None, "as in v_history"),
            col("run_id", S, None, "the first run after the change"),
            col("method", S, None, "otava e-divisive and its settings (max p-value, min magnitude)"),
            col("mean_before", F64, "unit", "mean of the segment before the change (the metric's unit)"),
            col("mean_after", F64, "unit", "mean of the segment after it, up to the next change point"),
            col("std_before", F64, "unit", "population std of the segment before"),
            col("std_after", F64, "unit", "population std of the segment after"),
            col("n_before", I32, "count", "nights in the segment before"),
            col("n_after", I32, "count", "nights in the segment after"),
            col("change_pct", F64, "%", "(mean_after / mean_before - 1) * 100"),
            col("p_value", F64, None, "Otava's two-sided t-test between the two segments"),
            col("first_seen_run_id", S, None, "the run whose load first reported the change point"),
        ),
    ),
)

CONTRACT: dict[str, Table] = {t.name: t for t in TABLES_DECLARED}
SCHEMAS: dict[str, pa.Schema] = {t.name: t.schema() for t in TABLES_DECLARED}
TABLES = tuple(CONTRACT)


# ------------------------------------------------------------------ Parquet parts


class UnknownColumns(ValueError):
    """Rows carry a key the table's contract does not declare (a misspelt column would be written as NULL)."""


def unknown_columns_message(name: str, unknown: list[str], known: list[str]) -> str:
    """One line naming the table, each unknown key and its closest declared column."""

    def one(key: str) -> str:
        close = difflib.get_close_matches(key, known, n=1)
        return f"'{key}'" + (f" (did you mean '{close[0]}'?)" if close else "")

    return (
        f"table {name}: {len(unknown)} key{'s' if len(unknown) != 1 else ''} not in its contract: "
        f"{', '.join(map(one, unknown))}; declare the column in warehouse/contract.py or drop the key"
    )


def to_table(name: str, rows: list[dict]) -> pa.Table:
    """Rows -> Arrow table with exactly the contract's columns (missing ones NULL); a key the contract does
    not declare raises UnknownColumns (never dropped silently: a misspelt column would become NULL)."""
    schema = SCHEMAS[name]
    known = set(schema.names)
    unknown = sorted({k for r in rows for k in r if k not in known})
    if unknown:
        raise UnknownColumns(unknown_columns_message(name, unknown, schema.names))
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


def write_tables(results_dir: Path, part: str, tables: dict[str, list[dict]]) -> None:
    """Write (replace) one part of each of `tables` (name -> rows), each as write_table writes it."""
    for name, rows in tables.items():
        write_table(results_dir, name, part, rows)


def table_parts(results_dir: Path, name: str) -> list[Path]:
    return sorted((results_dir / name).glob("*.parquet"))


# Columns renamed since a release wrote them, per table (new name -> old name; migration 009): results
# written before are read under the new names (warehouse.ingest, read_table).
RENAMED: dict[str, dict[str, str]] = {
    "perf_summary": {
        **{
            f"{m}_ci_{new}": f"{m}_ci_{old}"
            for m in ("ttft_ms_mean", "ttft_ms_p99", "output_throughput", "ttft_cv_pct_median", "itl_cv_pct_median")
            for new, old in (("low", "lo"), ("high", "hi"))
        },
        # 010_slo_claims: the CVs pooled over repeats and prompt lengths are not jitter
        "ttft_cv_pct_pooled": "ttft_cv_pct",
        "itl_cv_pct_pooled": "itl_cv_pct",
    },
}


def _read_part(path: Path, name: str) -> pa.Table:
    """One part under the contract's schema; a column written under its old name (RENAMED) is read as the new.
    A part that does not read (truncated, not Parquet) is a PartUnreadable naming it."""
    try:
        return _read_schema_part(path, name)
    except (OSError, pa.ArrowException) as err:
        first = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise PartUnreadable(
            f"table {name}: part {path} is unreadable ({first}); restore it from the results "
            f"location, or delete it and re-run its variant (tradeoff run --run-id)"
        ) from None


class PartUnreadable(WarehouseError):
    """A result part that cannot be read; the message names the file."""


def _read_schema_part(path: Path, name: str) -> pa.Table:
    renamed = RENAMED.get(name, {})
    got = pq.read_schema(path).names
    legacy = {old: new for new, old in renamed.items() if old in got and new not in got}
    if not legacy:
        return pq.read_table(path, schema=SCHEMAS[name])
    table = pq.read_table(path)
    table = table.rename_columns([legacy.get(c, c) for c in table.column_names])
    schema = SCHEMAS[name]
    return pa.table(
        [
            table.column(f.name).cast(f.type) if f.name in table.column_names else pa.nulls(len(table), f.type)
            for f in schema
        ],
        schema=schema,
    )


def read_table(results_dir: Path, name: str) -> pd.DataFrame:
    """All parts of one result table as one DataFrame (empty, with the contract's columns, when none)."""
    parts = [_read_part(p, name) for p in table_parts(results_dir, name)]
    table = pa.concat_tables(parts) if parts else SCHEMAS[name].empty_table()
    return table.to_pandas()


class ResultTables:
    """One step's view of a run folder's result tables: each read (read_table) on first use, then kept.

    A step (the gate, a resume) makes one and hands it to the helpers that need rows, so no table is read
    twice in a step. A step that writes a table and needs it back makes a new one after the write.
    """

    def __init__(self, results_dir: Path) -> None:
        self.results_dir = Path(results_dir)
        self._read: dict[str, pd.DataFrame] = {}

    def __getitem__(self, name: str) -> pd.DataFrame:
        if name not in self._read:
            self._read[name] = read_table(self.results_dir, name)
        return self._read[name]


# ------------------------------------------------------------------ the schema document


def _check_text(c: Check) -> str:
    where = f" where {c.where.text()}" if c.where else ""
    a = c.args
    if c.kind == "between":
        lo = "" if a["min"] is None else f"{a['min']:g} {'<' if a['strict_min'] else '<='} "
        hi = "" if a["max"] is None else f" {'<' if a['strict_max'] else '<='} {a['max']:g}"
        text = f"{lo}x{hi}"
    elif c.kind == "in_set":
        text = "in {" + ", ".join(a["values"]) + "}"
    elif c.kind == "at_least":
        text = f">{'=' if a['or_equal'] else ''} {a['other']}"
    else:
        text = c.kind.replace("_", " ")
    return text + where


def schema_markdown() -> str:
    """docs/schema.md: every table, its grain, columns with type, unit, meaning and checks."""
    out = [
        "# Warehouse schema",
        "",
        "Generated from `warehouse/contract.py` (`python -m warehouse.contract > docs/schema.md`); the SQL",
        "migrations create the same columns. Views are documented in their own `.sql` headers.",
        "",
    ]
    for t in TABLES_DECLARED + DERIVED_TABLES:
        derived = (
            " Derived at load time by `warehouse/history.py` or `warehouse/pairs.py` (not a Parquet part)."
            if t in DERIVED_TABLES
            else ""
        )
        out += [f"## `{t.name}`", "", f"One row per {t.grain}.{derived}"]
        table_checks = []
        for c in t.checks:
            if c.kind == "rows":
                table_checks.append(f"exactly {c.args['value']} row(s)")
            elif c.kind == "sum_between":
                table_checks.append(f"sum of {c.args['column']} in [{c.args['min']}, {c.args['max']}]")
            elif c.kind == "equal_sum":
                table_checks.append(f"{c.args['column']} = {' + '.join(c.args['parts'])}")
        if table_checks:
            out.append("Checks: " + "; ".join(table_checks) + ".")
        out += ["", "| column | type | unit | meaning | checks |", "|---|---|---|---|---|"]
        for c in t.columns:
            checks = "; ".join(_check_text(k) for k in c.checks)
            out.append(
                f"| `{c.name}` | {c.type} | {c.unit or ''} | {c.description.replace('|', '/')} | "
                f"{checks.replace('|', '/')} |"
            )
        out.append("")
    return "\n".join(out)


if __name__ == "__main__":
    sys.stdout.write(schema_markdown())
