"""Prefect tasks that build a variant and measure it behind its server: perf sweep and quality suites.

Each task writes its own Parquet part as soon as it has it (see tasks.tables), so a
failure later in the run loses no completed result.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict
from pathlib import Path

from prefect import get_run_logger, task
from prefect.cache_policies import NONE

from tasks.config import PerfSpec, RunConfig, Variant
from tasks.engines import Artifact, engine_for
from tasks.loadgen import Scenario, Step, StepRun, fixed_steps, make_workload, run_perf, summarize_scenario
from tasks.metrics import RequestRecord
from tasks.energy_scope import EnergyScope, IdleBaseline, idle_baseline, idle_columns, scope_for
from tasks.engines.artifacts import roofline_inputs
from tasks.quality import Score, SuiteContext, SuiteResult, suite_for
from tasks.tables import write_table
from tasks.model_tokenizer import open_tokenizer


@task(name="build-variant", retries=1, retry_delay_seconds=2, cache_policy=NONE)
def build_variant(cfg: RunConfig, variant: Variant, cache_dir: Path) -> Artifact:
    """Build (or reuse from the content-addressed cache) the artifact a variant's server loads."""
    return engine_for(variant.engine).build(variant, cfg.models[variant.model], cache_dir)


def request_row(run_id: str, variant: str, step: Step, concurrency: int, r: RequestRecord) -> dict:
    return {"run_id": run_id, "variant": variant, "scenario": step.label, "concurrency": concurrency,
            "request_index": r.index, "is_warmup": r.is_warmup, "status": r.status, "error": r.error,
            "start_s": r.start_ms / 1000.0, "ttft_ms": r.ttft_ms, "tpot_ms": r.tpot_ms, "e2el_ms": r.e2el_ms,
            "prompt_tokens": r.prompt_tokens, "output_tokens": r.output_tokens,
            "output_tokens_source": r.output_tokens_source, "chunk_offsets_ms": r.chunk_offsets_ms,
            "repeat": r.repeat, "prompt_tokens_source": r.prompt_tokens_source, "finish_reason": r.finish_reason,
            "max_tokens": r.max_tokens}


def power_rows(run_id: str, variant: str, run: StepRun) -> list[dict]:
    per_device: dict[str, int] = {}
    rows = []
    for p in run.power:
        i = per_device[p.device] = per_device.get(p.device, -1) + 1
        rows.append({"run_id": run_id, "variant": variant, "scenario": run.step.label, "repeat": run.repeat,
                     "device": p.device, "source": run.energy.source, "sample_index": i, "t_s": p.t_s,
                     "power_w": p.power_w, "energy_j": p.energy_j})
    return rows


def summary_row(run_id: str, variant: str, summary: dict) -> dict:
    by_device = summary.get("energy_by_device_j")
    return {"run_id": run_id, "variant": variant, **summary,
            "energy_by_device_j": json.dumps(by_device, sort_keys=True) if by_device is not None else None}


def output_force(perf: PerfSpec, engine_forces: str | None) -> str | None:
    """How to force the output length: the config's choice, or ('auto') what the engine honours."""
    if perf.force_output_len == "auto":
        return engine_forces
    return None if perf.force_output_len == "none" else perf.force_output_len


def expected_perf_rows(perf: PerfSpec) -> dict[str, int | None]:
    """Rows one variant writes per perf table; None where the count depends on timing (a sweep's steps are
    known in advance, a time limit's requests are not)."""
    n_steps = len(fixed_steps(perf)) + (2 + perf.sweep if perf.sweep is not None else 0)
    requests = n_steps * perf.repeats * (perf.warmup_requests + perf.num_prompts)
    return {"perf_requests": None if perf.max_duration_s else requests, "perf_summary": n_steps, "perf_power": None}


def measure_scenario(cfg: RunConfig, variant: Variant, artifact: Artifact, base_url: str,
                     progress: bool | None = False, on_scenario=None) -> list[Scenario]:
    """Every step of the perf sweep against the variant's server, summarised (with MBU from the artifact's size)."""
    perf = cfg.perf
    engine = engine_for(variant.engine)
    # The tokenizer the engine's server uses: a GGUF's or an HF checkpoint's (None: a hosted model without one,
    # then lengths are approximate and say so).
    tok_ref = engine.tokenizer(artifact, cfg.models[variant.model])
    tok = open_tokenizer(tok_ref) if tok_ref else None
    force = output_force(perf, engine.forces_output_len)
    workload = make_workload(perf, *((tok.encode, tok.decode, tok.count) if tok else ()))
    # Measured once per run, before the first request; the engine's own devices (tasks.energy_scope).
    model_bytes, bytes_method, bandwidth = roofline_inputs(engine, variant, artifact)
    scope = scope_for(engine, variant, artifact)
    idle = idle_baseline(scope, perf.idle_baseline_s)
    scenarios = run_perf(perf, base_url, engine.served_model_name(variant), workload, force, tok.count if tok else None,
                         progress=progress, on_scenario=on_scenario, energy_off_reason=scope.off_reason,
                         meter_opener=scope.open_meter)
    for sc in scenarios:
        sc.summary = summarize_scenario(perf, sc, force, model_bytes, bandwidth)
        sc.summary.update(engine_energy_columns(sc, scope, idle), model_bytes_method=bytes_method if model_bytes else None)
    return scenarios


def engine_energy_columns(sc: Scenario, scope: EnergyScope, idle: IdleBaseline) -> dict:
    """What was metered, the idle baseline and J/token above idle (migration 009) of one scenario."""
    tokens = sum(r.output_tokens or 0 for run in sc.runs for r in run.measured if r.status == "ok")
    return idle_columns(sc.summary, [run.energy.window_s for run in sc.runs], scope, idle, tokens)


@task(name="perf-sweep", cache_policy=NONE)
def measure_perf(cfg: RunConfig, run_id: str, variant: Variant, artifact: Artifact, base_url: str,
                 results_dir: Path) -> dict:
    """The whole perf sweep; writes perf_requests and perf_power after each (step, repeat), perf_summary at the end."""

    def write_partial(scenarios: list[Scenario]) -> None:
        write_table(results_dir, "perf_requests", variant.name,
                    [request_row(run_id, variant.name, sc.step, sc.step.concurrency or cfg.perf.num_prompts, r)
                     for sc in scenarios for r in sc.records])
        write_table(results_dir, "perf_power", variant.name,
                    [row for sc in scenarios for run in sc.runs for row in power_rows(run_id, variant.name, run)])

    scenarios = measure_scenario(cfg, variant, artifact, base_url, on_scenario=write_partial)
    summaries = [summary_row(run_id, variant.name, sc.summary) for sc in scenarios]
    write_table(results_dir, "perf_summary", variant.name, summaries)
    return {"requests": sum(len(sc.records) for sc in scenarios), "scenarios": len(summaries),
            "output_throughput": [s["output_throughput"] for s in summaries],
            "mbu_pct": [s["mbu_pct"] for s in summaries if s["mbu_pct"] is not None]}


@task(name="quality-suites", cache_policy=NONE)
def measure_quality(cfg: RunConfig, run_id: str, variant: Variant, artifact: Artifact, ref_artifact: Artifact | None,
                    base_url: str, work_dir: Path, results_dir: Path) -> dict:
    """Every configured suite against the variant, then its deltas against the reference.

    Writes quality_samples and quality_scores parts after each suite, and a quality_deltas part
    at the end. A suite that fails is recorded (metric `suite_failed`, with the error as its
    note) and the other suites go on.
    """
    samples: list[dict] = []
    scores: list[dict] = []
    engine = engine_for(variant.engine)
    in_process = engine.has_in_process_logits
    for spec in cfg.quality.suites:
        if spec.variants is not None and variant.name not in spec.variants:
            continue
        suite = suite_for(spec.name)
        ctx = SuiteContext(variant=variant.name, base_url=base_url, served_model=engine.served_model_name(variant),
                           artifact_path=artifact.path if in_process else None,
                           reference_artifact_path=ref_artifact.path if ref_artifact and in_process else None,
                           limit=spec.limit, seed=spec.seed, params=spec.params, work_dir=work_dir / spec.key,
                           n_ctx=cfg.models[variant.model].max_context, engine=variant.engine, artifact=artifact,
                           variant_spec=variant,
                           model_spec=cfg.models[variant.model], server_start_timeout_s=cfg.server_start_timeout_s,
                           request_timeout_s=cfg.perf.request_timeout_s,
                           tokenizer_ref=engine.tokenizer(artifact, cfg.models[variant.model]),
                           reference_artifact=ref_artifact)
        key = {"run_id": run_id, "variant": variant.name, "suite": spec.key}
        t0 = time.perf_counter()
        try:
            result = suite.run(ctx)
            get_run_logger().info("%s: suite %s, %d samples in %.1f s", variant.name, spec.key, len(result.samples),
                                  time.perf_counter() - t0)
        except Exception as err:  # noqa: BLE001 - one suite's failure is recorded; the others still run
            get_run_logger().warning("%s: suite %s failed: %s", variant.name, spec.key, err)
            result = SuiteResult(scores=[Score("suite_failed", 1.0, None, 1, "count", False, None,
                                               note=f"{type(err).__name__}: {err}".splitlines()[0][:300])])
        samples += [{**key, **s} for s in result.samples]
        scores += [{**key, "suite_version": suite.version, **asdict(s),
                    "is_primary": cfg.quality.primary == f"{spec.key}.{s.metric}"} for s in result.scores]
        write_table(results_dir, "quality_samples", variant.name, samples)
        write_table(results_dir, "quality_scores", variant.name, scores)
    deltas = write_quality_deltas(cfg, variant, samples, scores, results_dir)
    return {"samples": len(samples), "scores": {f"{s['suite']}.{s['metric']}": s["value"] for s in scores},
            "deltas": {f"{d['suite']}.{d['metric']}": d["verdict"] for d in deltas}}


def write_quality_deltas(cfg: RunConfig, variant: Variant, samples: list[dict], scores: list[dict],
                         results_dir: Path) -> list[dict]:
    """The variant's quality deltas against the reference (measured first), as a quality_deltas part."""
    from tasks.stats import quality_deltas
    from tasks.tables import read_table

    ref = cfg.reference.name
    if variant.name == ref:
        return []
    ref_scores = read_table(results_dir, "quality_scores")
    ref_samples = read_table(results_dir, "quality_samples")
    records = lambda df: df[df["variant"] == ref].astype(object).where(df.notna(), None).to_dict("records")  # noqa: E731
    q = cfg.quality
    rows = quality_deltas(records(ref_scores), records(ref_samples), [s for s in scores if s["metric"] != "suite_failed"],
                          samples, reference_variant=ref, resamples=q.bootstrap_resamples, confidence=q.confidence,
                          min_samples=q.min_samples)
    write_table(results_dir, "quality_deltas", variant.name, rows)
    return rows


def engine_args_json(variant: Variant) -> str:
    return json.dumps(variant.engine_args, sort_keys=True)
