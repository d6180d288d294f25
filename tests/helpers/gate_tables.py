"""The GX gate's small realistic run: its tables (valid_tables()), the row counts the gate expects, the
corruptions that each break one expectation, and the run folder as the nightly leaves it (night())."""

from __future__ import annotations

import math
from datetime import datetime, timezone
from pathlib import Path

from tasks.core.config import RunConfig
from tasks.perf.metrics import RequestRecord, summarize
from tasks.perf.perf_run import summary_row
from tests.helpers import smollm2
from warehouse.contract import TABLES, write_table

RUN_ID = "demo-20250101T000000"
VARIANTS = ("f16", "q4_0")  # f16 is the reference
SCENARIOS = {"c1": 1, "c2": 2}


def _records(variant: str, concurrency: int) -> list[RequestRecord]:
    """One warm-up and three measured requests; the reference's c2 has one error with NULL latencies."""
    slow = 1.5 if variant == "f16" else 1.0
    recs = []
    for i in range(4):
        ttft, out = (40.0 + 5 * i) * slow, 8 + i
        chunks = [ttft + 10.0 * slow * k for k in range(out)]
        recs.append(
            RequestRecord(
                index=i,
                status="ok",
                start_ms=100.0 * i,
                ttft_ms=ttft,
                e2el_ms=chunks[-1],
                prompt_tokens=32,
                output_tokens=out,
                output_tokens_source="usage",
                chunk_offsets_ms=chunks,
                is_warmup=i == 0,
            )
        )
    if variant == "f16" and concurrency == 2:
        recs[3] = RequestRecord(index=3, status="error", start_ms=300.0, error="HTTP 503: server busy")
    return recs


def _request_row(variant: str, scenario: str, concurrency: int, r: RequestRecord) -> dict:
    return {
        "run_id": RUN_ID,
        "variant": variant,
        "scenario": scenario,
        "concurrency": concurrency,
        "request_index": r.index,
        "is_warmup": r.is_warmup,
        "status": r.status,
        "error": r.error,
        "start_s": r.start_ms / 1000,
        "ttft_ms": r.ttft_ms,
        "tpot_ms": r.tpot_ms,
        "e2el_ms": r.e2el_ms,
        "prompt_tokens": r.prompt_tokens,
        "output_tokens": r.output_tokens,
        "output_tokens_source": r.output_tokens_source,
        "chunk_offsets_ms": r.chunk_offsets_ms,
    }


def _summary_row(variant: str, scenario: str, concurrency: int, recs: list[RequestRecord]) -> dict:
    s = summarize(recs)
    if variant == "f16":  # energy measured (NVML) for the reference only
        energy = {
            "energy_j": 12.0,
            "energy_j_per_token": 12.0 / s["total_output_tokens"],
            "mean_power_w": 80.0,
            "energy_source": "nvml",
        }
    else:
        energy = {"energy_note": "no GPU visible and RAPL not readable"}
    # through the nightly's own row builder: it keeps what perf_summary declares of the summary
    return summary_row(
        RUN_ID,
        variant,
        {"scenario": scenario, "concurrency": concurrency, "output_len_forced_by": "ignore_eos", **s, **energy},
    )


def _quality(variant: str) -> tuple[list[dict], list[dict]]:
    base = {"run_id": RUN_ID, "variant": variant}
    samples = [
        {
            **base,
            "suite": "arith",
            "sample_id": f"q{i}",
            "prompt": f"{i} + {i} =",
            "target": str(2 * i),
            "response": str(2 * i) if i != 2 else "",
            "score": float(i != 2),
            "valid": i != 2,
            "details": "{}",
        }
        for i in range(3)
    ]
    is_ref = variant == "f16"
    scores = [
        ("arith", "1", "accuracy", 2 / 3, 0.27, 3, "fraction", True, True),
        ("fidelity", "1", "top1_agreement", 1.0 if is_ref else 0.9, 0.02, 64, "fraction", True, False),
        ("fidelity", "1", "kl_mean", 0.0 if is_ref else 0.03, 0.004, 64, "nats", False, False),
        ("fidelity", "1", "ppl_ratio", 1.0 if is_ref else 1.04, None, 64, "ratio", False, False),
    ]
    keys = ("suite", "suite_version", "metric", "value", "stderr", "n", "unit", "higher_is_better", "is_primary")
    return samples, [{**base, **dict(zip(keys, s))} for s in scores]


def valid_tables() -> dict[str, list[dict]]:
    now = datetime(2025, 1, 1, tzinfo=timezone.utc)
    t: dict[str, list[dict]] = {name: [] for name in TABLES}
    t["runs"] = [
        {
            "run_id": RUN_ID,
            "config_name": "demo",
            "started_at": now,
            "finished_at": now,
            "status": "ok",
            "host": "ci",
            "cpu": "x86_64",
            "cpu_count": 2,
            "hardware_id": "abc123",
            "reference_variant": "f16",
            "primary_quality_metric": "arith.accuracy",
        }
    ]
    for v in VARIANTS:
        t["variants"].append(
            {
                "run_id": RUN_ID,
                "variant": v,
                "model": "smollm2-135m",
                "engine": "llama.cpp",
                "quantization": v,
                "is_reference": v == "f16",
                "status": "ok",
                "build_s": 3.2,
                "server_startup_s": 1.1,
                "engine_args": "{}",
            }
        )
        for scenario, c in SCENARIOS.items():
            recs = _records(v, c)
            t["perf_requests"] += [_request_row(v, scenario, c, r) for r in recs]
            t["perf_summary"].append(_summary_row(v, scenario, c, recs))
        samples, scores = _quality(v)
        t["quality_samples"] += samples
        t["quality_scores"] += scores
    return t


def write_tables(results: Path, tables: dict[str, list[dict]]) -> Path:
    """Each non-empty table as one part (part-0) under the results folder RESULTS; returns RESULTS."""
    for name, rows in tables.items():
        if rows:
            write_table(results, name, "part-0", rows)
    return results


def write_results(tmp_path: Path, tables: dict[str, list[dict]]) -> Path:
    """TABLES as the results folder of run RUN_ID under TMP_PATH/runs (nothing else of a run folder)."""
    return write_tables(tmp_path / "runs" / RUN_ID / "results", tables)


def expected_rows(tables: dict[str, list[dict]]) -> dict[str, int | None]:
    return {name: len(rows) for name, rows in tables.items()}


def row(t, table, **match) -> dict:
    return next(r for r in t[table] if all(r[k] == v for k, v in match.items()))


def _ok_request(t) -> dict:
    return row(t, "perf_requests", variant="q4_0", scenario="c1", request_index=1)


def set_inf_ttft(t):
    _ok_request(t)["ttft_ms"] = math.inf


def set_ttft_after_e2el(t):
    r = _ok_request(t)
    r["ttft_ms"] = r["e2el_ms"] + 5.0


def set_zero_output_tokens(t):
    _ok_request(t)["output_tokens"] = 0


def set_fraction_above_one(t):
    row(t, "quality_scores", variant="q4_0", metric="accuracy")["value"] = 1.5


def set_negative_kl(t):
    row(t, "quality_scores", variant="q4_0", metric="kl_mean")["value"] = -0.01


def drop_request(t):
    t["perf_requests"].pop()


def add_second_reference(t):
    row(t, "variants", variant="q4_0")["is_reference"] = True


def drop_energy_note(t):
    row(t, "perf_summary", variant="q4_0", scenario="c1")["energy_note"] = None


def miscount_requests(t):
    row(t, "perf_summary", variant="f16", scenario="c2")["num_errors"] = 0


# The config these tables were "measured" with: 2 variants x 2 scenarios x (1 warm-up + 3) requests,
# the counts valid_tables() holds.
NIGHT_CONFIG = {
    "name": "demo",
    "models": {"smollm2-135m": smollm2()},
    "variants": [
        {"name": "f16", "model": "smollm2-135m", "quantization": "f16", "reference": True},
        {"name": "q4_0", "model": "smollm2-135m", "quantization": "q4_0"},
    ],
    "perf": {"concurrency": [1, 2], "num_prompts": 3, "warmup_requests": 1, "input_len": 32, "output_len": 8},
}


def night(runs: Path, run_id: str, corrupt=None) -> Path:
    """A run folder as the nightly leaves it (results + the config in the runs row), optionally corrupted."""
    tables = valid_tables()
    for rows in tables.values():
        for r in rows:
            r["run_id"] = run_id
    tables["runs"][0]["config_json"] = RunConfig.model_validate(NIGHT_CONFIG).model_dump_json()
    if corrupt:
        corrupt(tables)
    run_dir = runs / run_id
    write_tables(run_dir / "results", tables)
    return run_dir
