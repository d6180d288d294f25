"""Prefect tasks that build a variant and measure it behind its server: perf sweep and quality suites.

Each task writes its own Parquet part as soon as it has it (see tasks.tables), so a
failure later in the run loses no completed result.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import asdict
from pathlib import Path

from prefect import task
from prefect.cache_policies import NONE

from tasks.config import RunConfig, Variant
from tasks.energy import EnergyWindow
from tasks.engines import Artifact, engine_for
from tasks.metrics import RequestRecord, summarize
from tasks.perf import run_concurrency, synthetic_prompts
from tasks.quality import SuiteContext, suite_for
from tasks.tables import write_table
from tasks.tokenizer import load_tokenizer


@task(name="build-variant", retries=1, retry_delay_seconds=2, cache_policy=NONE)
def build_variant(cfg: RunConfig, variant: Variant, cache_dir: Path) -> Artifact:
    """Build (or reuse from the content-addressed cache) the artifact a variant's server loads."""
    return engine_for(variant.engine).build(variant, cfg.models[variant.model], cache_dir)


def request_row(run_id: str, variant: str, concurrency: int, r: RequestRecord) -> dict:
    return {"run_id": run_id, "variant": variant, "scenario": f"c{concurrency}", "concurrency": concurrency,
            "request_index": r.index, "is_warmup": r.is_warmup, "status": r.status, "error": r.error,
            "start_s": r.start_ms / 1000.0, "ttft_ms": r.ttft_ms, "tpot_ms": r.tpot_ms, "e2el_ms": r.e2el_ms,
            "prompt_tokens": r.prompt_tokens, "output_tokens": r.output_tokens,
            "output_tokens_source": r.output_tokens_source, "chunk_offsets_ms": r.chunk_offsets_ms}


def measure_scenario(cfg: RunConfig, variant: Variant, artifact: Artifact, base_url: str, concurrency: int,
                     seed: int) -> tuple[list[RequestRecord], dict]:
    """Warm-up one by one, then the measured requests at `concurrency` inside an energy window."""
    perf = cfg.perf
    engine = engine_for(variant.engine)
    tok = load_tokenizer(str(artifact.path))
    prompts = synthetic_prompts(perf.warmup_requests + perf.num_prompts, perf.input_len, seed,
                                perf.unique_prompts, tok.encode, tok.decode)
    common = dict(kind=perf.endpoint, force=engine.forces_output_len, count_tokens=tok.count,
                  timeout_s=perf.request_timeout_s)
    model = engine.served_model_name(variant)
    warm = asyncio.run(run_concurrency(base_url, model, prompts[: perf.warmup_requests], 1, perf.output_len, **common))
    for r in warm:
        r.is_warmup = True
    with EnergyWindow() as energy:
        measured = asyncio.run(run_concurrency(base_url, model, prompts[perf.warmup_requests:], concurrency,
                                               perf.output_len, first_index=len(warm), **common))
    summary = summarize(measured, perf.peak_window_s)
    e = energy.reading
    tokens = summary["total_output_tokens"] or 0
    summary.update({"concurrency": concurrency, "scenario": f"c{concurrency}", "peak_window_s": perf.peak_window_s,
                    "output_len_forced_by": engine.forces_output_len, "energy_j": e.energy_j,
                    "energy_j_per_token": e.energy_j / tokens if e.energy_j is not None and tokens else None,
                    "mean_power_w": e.mean_power_w, "energy_source": e.source, "energy_note": e.note})
    return warm + measured, summary


@task(name="perf-sweep", cache_policy=NONE)
def measure_perf(cfg: RunConfig, run_id: str, variant: Variant, artifact: Artifact, base_url: str,
                 results_dir: Path) -> dict:
    """Every concurrency level of the sweep; writes perf_requests and perf_summary parts after each level."""
    requests: list[dict] = []
    summaries: list[dict] = []
    for i, c in enumerate(cfg.perf.concurrency):
        records, summary = measure_scenario(cfg, variant, artifact, base_url, c, cfg.perf.seed * 1000 + i)
        requests += [request_row(run_id, variant.name, c, r) for r in records]
        summaries.append({"run_id": run_id, "variant": variant.name, **summary})
        write_table(results_dir, "perf_requests", variant.name, requests)
        write_table(results_dir, "perf_summary", variant.name, summaries)
    return {"requests": len(requests), "scenarios": len(summaries),
            "output_throughput": [s["output_throughput"] for s in summaries]}


@task(name="quality-suites", cache_policy=NONE)
def measure_quality(cfg: RunConfig, run_id: str, variant: Variant, artifact: Artifact, ref_artifact: Artifact | None,
                    base_url: str, work_dir: Path, results_dir: Path) -> dict:
    """Every configured suite against the variant; writes quality_samples and quality_scores parts after each suite."""
    samples: list[dict] = []
    scores: list[dict] = []
    engine = engine_for(variant.engine)
    for spec in cfg.quality.suites:
        suite = suite_for(spec.name)
        ctx = SuiteContext(variant=variant.name, base_url=base_url, served_model=engine.served_model_name(variant),
                           artifact_path=artifact.path if engine.has_in_process_logits else None,
                           reference_artifact_path=ref_artifact.path if ref_artifact and engine.has_in_process_logits else None,
                           limit=spec.limit, seed=spec.seed, params=spec.params, work_dir=work_dir / spec.name,
                           n_ctx=cfg.models[variant.model].max_context)
        result = suite.run(ctx)
        key = {"run_id": run_id, "variant": variant.name, "suite": spec.name}
        samples += [{**key, **s} for s in result.samples]
        scores += [{**key, "suite_version": suite.version, **asdict(s),
                    "is_primary": cfg.quality.primary == f"{spec.name}.{s.metric}"} for s in result.scores]
        write_table(results_dir, "quality_samples", variant.name, samples)
        write_table(results_dir, "quality_scores", variant.name, scores)
    return {"samples": len(samples), "scores": {f"{s['suite']}.{s['metric']}": s["value"] for s in scores}}


def engine_args_json(variant: Variant) -> str:
    return json.dumps(variant.engine_args, sort_keys=True)
