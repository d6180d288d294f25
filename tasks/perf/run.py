"""The one perf run: build the workload, sweep the load steps, summarise each scenario (metrics, energy, MBU) and write its rows; the nightly and `tradeoff perf` both call it."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from tasks.client import api_root, check_endpoint
from tasks.core.config import PerfSpec, RunConfig, Variant
from tasks.core.credentials import error_excerpt
from tasks.core.errors import ConfigError
from tasks.engines.base import Artifact, engine_for
from tasks.engines.tokenizer import load_tokenizer
from tasks.perf.energy import per_token
from tasks.perf.jitter import jitter_summary
from tasks.perf.load_search import search_load
from tasks.perf.metrics import RequestRecord, summarize_repeats
from tasks.perf.options import is_local, spec_from_args
from tasks.perf.roofline import Bandwidth, host_bandwidth, mbu_pct
from tasks.perf.sweep import Scenario, Step, StepRun, run_perf
from tasks.perf.vllm_json import vllm_result
from tasks.perf.workload import make_workload

FORCE_LABEL = {"min_tokens": "min_tokens", "ignore_eos": "ignore_eos", "both": "min_tokens,ignore_eos"}


def output_len_note(records: list[RequestRecord], force: str | None) -> str | None:
    """Why output lengths may differ from the asked ones; None when every ok request got its length."""
    ok = [r for r in records if r.status == "ok" and not r.is_warmup]
    short = [r for r in ok if r.max_tokens and r.output_tokens is not None and r.output_tokens < r.max_tokens]
    if not force:
        return "output length not forced (the engine honours neither min_tokens nor ignore_eos)"
    if short:
        return (f"{len(short)} of {len(ok)} requests stopped before max_tokens: the server did not honour "
                f"{FORCE_LABEL[force]}")
    return None


def summarize_scenario(spec: PerfSpec, sc: Scenario, force: str | None, model_bytes: int | None = None,
                       bandwidth: Bandwidth | None = None) -> dict:
    """The scenario's summary: metrics over its repeats, energy over its windows, load, SLO and roofline."""
    slo = spec.slo.limits() if spec.slo else None
    s = summarize_repeats([run.measured for run in sc.runs], spec.peak_window_s, spec.percentiles, slo,
                          spec.confidence, spec.bootstrap_resamples, spec.seed)
    s.update(jitter_summary([run.measured for run in sc.runs], spec.confidence, spec.bootstrap_resamples, spec.seed))
    step = sc.step
    readings = [run.energy for run in sc.runs]
    measured = [r for run in sc.runs for r in run.measured]
    tokens = sum(r.output_tokens or 0 for r in measured if r.status == "ok")
    if all(e.energy_j is not None for e in readings):
        energy = sum(e.energy_j for e in readings)
        window = sum(e.window_s or 0 for e in readings)
        by_device: dict[str, float] = {}
        for e in readings:
            for d, j in e.by_device_j.items():
                by_device[d] = by_device.get(d, 0.0) + j
        j_per_token, tokens_per_j = per_token(energy, tokens)
        energy_cols = {"energy_j": energy, "energy_j_per_token": j_per_token, "tokens_per_j": tokens_per_j,
                       "mean_power_w": energy / window if window else None, "energy_source": readings[0].source,
                       "energy_note": None if j_per_token is not None else "no output tokens in the window",
                       "energy_by_device_j": by_device}
    else:
        note = next((e.note for e in readings if e.energy_j is None), None)
        energy_cols = {"energy_j": None, "energy_j_per_token": None, "tokens_per_j": None, "mean_power_w": None,
                       "energy_source": None, "energy_note": note, "energy_by_device_j": None}
    mbu = mbu_pct(s["tpot_ms_mean"], model_bytes, bandwidth.gb_s if bandwidth else None) \
        if step.concurrency == 1 else None
    s.update({"scenario": step.label, "load_kind": step.kind,
              "concurrency": step.concurrency or spec.num_prompts, "request_rate": step.rate,
              "burstiness": spec.burstiness if step.rate else None, "peak_window_s": spec.peak_window_s,
              "num_warmup": sum(len(run.warmup) + sum(r.is_warmup for r in run.measured) for run in sc.runs),
              "output_len_forced_by": FORCE_LABEL.get(force) if force else None,
              "output_len_note": output_len_note(measured, force),
              "goodput_slo": spec.slo.label() if spec.slo else None,
              **{f"slo_{k}": (slo or {}).get(k) for k in ("ttft_ms", "tpot_ms", "e2el_ms")},
              **energy_cols, "model_bytes": model_bytes,
              "mem_bandwidth_gb_s": bandwidth.gb_s if bandwidth and step.concurrency == 1 else None,
              "mem_bandwidth_method": bandwidth.method if bandwidth and step.concurrency == 1 else None,
              "mbu_pct": mbu})
    return s


def request_row(run_id: str, variant: str, step: Step, concurrency: int, r: RequestRecord) -> dict:
    return {"run_id": run_id, "variant": variant, "scenario": step.label, "concurrency": concurrency,
            "request_index": r.index, "is_warmup": r.is_warmup, "status": r.status, "error": error_excerpt(r.error),
            "start_s": r.start_ms / 1000.0, "ttft_ms": r.ttft_ms, "tpot_ms": r.tpot_ms, "e2el_ms": r.e2el_ms,
            "prompt_tokens": r.prompt_tokens, "output_tokens": r.output_tokens,
            "output_tokens_source": r.output_tokens_source, "chunk_offsets_ms": r.chunk_offsets_ms,
            "repeat": r.repeat, "prompt_tokens_source": r.prompt_tokens_source, "finish_reason": r.finish_reason,
            "max_tokens": r.max_tokens, "ttft_answer_ms": r.ttft_answer_ms, "reasoning_tokens": r.reasoning_tokens,
            "answer_tokens": r.answer_tokens, "reasoning_tokens_source": r.reasoning_tokens_source,
            "end_s": r.end_ms / 1000.0 if r.end_ms is not None else None}


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


def measure_scenario(cfg: RunConfig, variant: Variant, artifact: Artifact, base_url: str,
                     progress: bool | None = False, on_scenario=None) -> list[Scenario]:
    """Every step of the perf sweep against the variant's server, summarised (with MBU from the artifact's size)."""
    perf = cfg.perf
    engine = engine_for(variant.engine)
    # The engine says which local file holds the model's vocabulary (None: a hosted model without one,
    # then lengths are approximate and say so).
    tok_file = engine.tokenizer_file(artifact)
    tok = load_tokenizer(str(tok_file)) if tok_file else None
    force = output_force(perf, engine.forces_output_len)
    workload = make_workload(perf, *((tok.encode, tok.decode, tok.count) if tok else ()))
    bandwidth = host_bandwidth()  # measured once per run, before the first request
    scenarios = run_perf(perf, base_url, engine.served_model_name(variant), workload, force, tok.count if tok else None,
                         progress=progress, on_scenario=on_scenario)
    # decision.search: rate steps between the last step meeting the SLO and the first missing it (tasks/load_search.py)
    scenarios += search_load(cfg, base_url, engine.served_model_name(variant), workload, force,
                             tok.count if tok else None, scenarios, on_scenario)
    for sc in scenarios:
        sc.summary = summarize_scenario(perf, sc, force, artifact.bytes, bandwidth)
    return scenarios


def run_standalone(args: argparse.Namespace) -> list[dict]:
    """Validate the flags, reach the endpoint, run the sweep, write the JSON; returns the results.

    The file is rewritten after every (step, repeat), so what was measured is written even when
    the sweep stops early (Ctrl-C, a dead server).
    """
    spec = spec_from_args(args)  # bad flags fail here, before anything is sent
    endpoint = api_root(args.endpoint)  # given with or without /v1
    models = check_endpoint(endpoint, timeout_s=args.connect_timeout_s)
    model = args.model or (models[0] if models else None)
    if not model:
        raise ConfigError(f"--model: {endpoint}/v1/models lists no model; pass --model NAME")
    tok = None
    if args.tokenizer:

        tok = load_tokenizer(str(Path(args.tokenizer).resolve()))
    local = is_local(args.endpoint)
    model_bytes = args.model_bytes or (Path(args.tokenizer).stat().st_size if args.tokenizer else None)
    bandwidth = host_bandwidth() if model_bytes and local else None
    force = None if spec.force_output_len == "none" else ("both" if spec.force_output_len == "auto"
                                                          else spec.force_output_len)
    workload = make_workload(spec, tok.encode if tok else None, tok.decode if tok else None,
                             tok.count if tok else None)
    out = Path(args.output)
    out.parent.mkdir(parents=True, exist_ok=True)
    summarized: dict[tuple[str, int], dict] = {}  # (scenario, repeats done) -> its JSON object

    def write(scenarios: list[Scenario]) -> list[dict]:
        results = []
        for sc in scenarios:
            key = (sc.step.label, len(sc.runs))
            if key not in summarized:
                sc.summary = summarize_scenario(spec, sc, force, model_bytes, bandwidth)
                summarized[key] = vllm_result(spec, sc, model, args.tokenizer, args.detailed)
            results.append(summarized[key])
        tmp = out.with_name(f".{out.name}.tmp")
        tmp.write_text("".join(json.dumps(r) + "\n" for r in results))
        tmp.replace(out)  # atomic: a reader sees the previous complete file or this one
        return results

    scenarios = run_perf(spec, endpoint, model, workload, force, tok.count if tok else None,
                         progress=args.progress, on_scenario=write,
                         energy_off_reason=None if local else "endpoint is not on this host; energy not measured")
    return write(scenarios)
