"""The one perf run: build the workload, sweep the load steps, summarise each scenario (metrics, energy, MBU) and write
its rows; the nightly and `tradeoff perf` both call it."""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Generator
from urllib.parse import urlparse

from tasks.client import api_root, check_endpoint
from tasks.core.config import ModelSpec, PerfSpec, Variant
from tasks.core.credentials import error_excerpt
from tasks.core.errors import ConfigError
from tasks.engines.base import Artifact, engine_for
from tasks.engines.tokenizer import Tokenizer, load_tokenizer, open_tokenizer, server_tokenizer
from tasks.perf.energy import EnergyReading, per_token
from tasks.perf.energy_scope import EnergyScope, IdleBaseline, idle_baseline, idle_columns, scope_for
from tasks.perf.error_share import request_counts
from tasks.perf.host_noise import GpuWatch, HostGuard, NoiseRule, engine_process_ids
from tasks.perf.host_share import local_server_threads, sharing_notes
from tasks.perf.jitter import jitter_summary
from tasks.perf.metrics import RequestRecord, summarize_repeats
from tasks.perf.options import is_local, spec_from_args
from tasks.perf.roofline import Bandwidth, host_bandwidth, mbu_pct, roofline_inputs
from tasks.perf.rounds import Extension, Round
from tasks.perf.sweep import Scenario, Step, StepRun, drain, perf_rounds
from tasks.perf.trace import send_error_stats, trace_replays
from tasks.perf.vllm_json import vllm_result
from tasks.perf.workload import make_workload
from warehouse.contract import SCHEMAS, write_tables

# The decision's sustainable-load search (tasks.decision.load_search): after the sweep, more steps as Scenarios.
# Called with keywords energy_off_reason and meter_opener too: its steps are metered as the sweep's.
Search = Callable[..., list[Scenario]]

FORCE_LABEL = {"min_tokens": "min_tokens", "ignore_eos": "ignore_eos", "both": "min_tokens,ignore_eos"}


def prompt_len_note(records: list[RequestRecord], built_by: str | None) -> str | None:
    """Why the server's prompt lengths differ from the asked ones (more than 1 token on a request); None when they
    agree or the server gave no count. `built_by`: what counted the built prompts (a tokenizer's label, or words)."""
    pairs = [
        (r.prompt_tokens_asked, r.prompt_tokens)
        for r in records
        if r.status == "ok" and not r.is_warmup and r.prompt_tokens_source == "usage" and r.prompt_tokens_asked
    ]
    diffs = [server - asked for asked, server in pairs]
    if not diffs or max(abs(d) for d in diffs) <= 1:
        return None
    asked, server = [a for a, _ in pairs], [b for _, b in pairs]
    return (
        f"the server counted {min(server)}-{max(server)} prompt tokens for prompts built to {min(asked)}-{max(asked)} "
        f"by {built_by or 'words (no tokenizer)'}: {min(diffs):+d} to {max(diffs):+d} on {len(pairs)} requests"
    )


def output_len_note(records: list[RequestRecord], force: str | None) -> str | None:
    """Why output lengths may differ from the asked ones; None when every ok request got its length."""
    ok = [r for r in records if r.status == "ok" and not r.is_warmup]
    short = [r for r in ok if r.max_tokens and r.output_tokens is not None and r.output_tokens < r.max_tokens]
    if not force:
        return "output length not forced (the engine honours neither min_tokens nor ignore_eos)"
    if short:
        return (
            f"{len(short)} of {len(ok)} requests stopped before max_tokens: the server did not honour "
            f"{FORCE_LABEL[force]}"
        )
    return None


def summarize_scenario(
    spec: PerfSpec,
    sc: Scenario,
    force: str | None,
    model_bytes: int | None = None,
    bandwidth: Bandwidth | None = None,
    model_bytes_method: str | None = None,
    scope: EnergyScope | None = None,
    idle: IdleBaseline | None = None,
    built_by: str | None = None,
) -> dict:
    """The scenario's summary: metrics over its repeats, energy over its windows, load, SLO and roofline; with the
    energy `scope`, also what was metered and the energy above its `idle` baseline (migration 008)."""
    slo = spec.slo.limits() if spec.slo else None
    level = sc.ci_level or spec.confidence
    s = summarize_repeats([run.measured for run in sc.runs], spec.peak_window_s, spec.percentiles, slo, level)
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
        energy_cols = {
            "energy_j": energy,
            "energy_j_per_token": j_per_token,
            "tokens_per_j": tokens_per_j,
            "mean_power_w": energy / window if window else None,
            "energy_source": readings[0].source,
            "energy_note": None if j_per_token is not None else "no output tokens in the window",
            "energy_by_device_j": by_device,
        }
    else:
        note = next((e.note for e in readings if e.energy_j is None), None)
        energy_cols = {
            "energy_j": None,
            "energy_j_per_token": None,
            "tokens_per_j": None,
            "mean_power_w": None,
            "energy_source": None,
            "energy_note": note,
            "energy_by_device_j": None,
        }
    if scope is not None:
        energy_cols.update(idle_columns(energy_cols, [e.window_s for e in readings], scope, idle, tokens))
    s.update(host_noise_columns(spec, sc))
    s.update(send_error_stats([r.start_ms - r.scheduled_ms for r in measured if r.scheduled_ms is not None]))
    watched = [run.saturated for run in sc.runs if run.saturated is not None]
    reasons = [f"repeat {run.repeat}: {run.stop_reason}" for run in sc.runs if run.stop_reason]
    s["saturated"] = any(watched) if watched else None
    s["stop_reason"] = "; ".join(reasons)[:1000] if reasons else None
    s.update(extend_columns(sc))
    mbu = (
        mbu_pct(s["tpot_ms_mean"], model_bytes, bandwidth.gb_s if bandwidth else None)
        if step.concurrency == 1
        else None
    )
    s.update(
        {
            "scenario": step.label,
            "load_kind": step.kind,
            "concurrency": step.concurrency or spec.num_prompts,
            "request_rate": step.rate,
            "burstiness": spec.burstiness if step.rate else None,
            "peak_window_s": spec.peak_window_s,
            "num_warmup": sum(len(run.warmup) + sum(r.is_warmup for r in run.measured) for run in sc.runs),
            "output_len_forced_by": FORCE_LABEL.get(force) if force else None,
            "output_len_note": output_len_note(measured, force),
            "prompt_len_note": prompt_len_note(measured, built_by),
            "goodput_slo": spec.slo.label() if spec.slo else None,
            **{f"slo_{k}": (slo or {}).get(k) for k in ("ttft_ms", "tpot_ms", "e2el_ms")},
            **energy_cols,
            "model_bytes": model_bytes,
            "model_bytes_method": model_bytes_method if model_bytes else None,
            "mem_bandwidth_gb_s": bandwidth.gb_s if bandwidth and step.concurrency == 1 else None,
            "mem_bandwidth_method": bandwidth.method if bandwidth and step.concurrency == 1 else None,
            "mbu_pct": mbu,
        }
    )
    return s


def extend_columns(sc: Scenario) -> dict:
    """The looks planned at the step's SLO claim and what decision.extend added to it (migrations 018, 021)."""
    return {
        "slo_looks": sc.looks,
        "repeats_added": sc.repeats_added,
        "extend_note": sc.extend_note,
        "rounds_added": sc.rounds_added,
        "rank_note": sc.rank_note,
    }


def host_noise_columns(spec: PerfSpec, sc: Scenario) -> dict:
    """What else used the host during the scenario's kept windows, and which windows they are (migration 016)."""

    def worst(name: str) -> float | None:
        vals = [getattr(run.noise, name) for run in sc.runs if run.noise and getattr(run.noise, name) is not None]
        return max(vals) if vals else None

    events = [
        f"repeat {run.repeat}: measured again {len(run.remeasured)}x ({'; '.join(run.remeasured)})"
        for run in sc.runs
        if run.remeasured
    ] + [f"repeat {run.repeat}: kept disturbed ({run.disturbed})" for run in sc.runs if run.disturbed]
    unknown = next((run.noise.note for run in sc.runs if run.noise and run.noise.other_cpu_pct is None), None)
    if not any(run.noise for run in sc.runs):
        unknown = "host use not recorded"
    gpu_notes = sorted({run.noise.gpu_note for run in sc.runs if run.noise and run.noise.gpu_note})
    return {
        "host_other_cpu_pct": worst("other_cpu_pct"),
        "host_steal_pct": worst("steal_pct"),
        "host_load1": worst("load1"),
        "host_noise_max_pct": spec.host_noise_max_pct,
        "windows_kept": len(sc.runs),
        "windows_remeasured": sum(len(run.remeasured) for run in sc.runs),
        "windows_disturbed": sum(run.disturbed is not None for run in sc.runs),
        "host_noise_note": "; ".join(events + ([unknown] if unknown else []) + gpu_notes) or None,
        "gpu_other_procs": worst("gpu_other_procs"),
        "gpu_other_sm_pct": worst("gpu_other_sm_pct"),
    }


def host_guard(spec: PerfSpec, target: "Target", scope: EnergyScope | None = None) -> HostGuard:
    """The host-noise rule of one variant's perf run: its threshold, retries and budget, the engine's process
    (the endpoint's listener on this host; nothing is read for an endpoint elsewhere) and its GPUs (gpu_watch)."""
    rule = NoiseRule(spec.host_noise_max_pct, spec.host_noise_retries, spec.host_quiet_wait_s)
    if not target.on_host:
        return HostGuard(rule, set(), "endpoint is not on this host: host use not measured", spec.host_noise_budget_s)
    pids = engine_process_ids(urlparse(target.base_url).port)
    return HostGuard(rule, pids, None, spec.host_noise_budget_s, gpu=gpu_watch(scope) if scope else None)


def gpu_watch(scope: EnergyScope) -> GpuWatch | None:
    """The engine's GPUs, watched for other processes during each window: those its energy is metered on (every GPU
    NVML sees when the engine's are unknown); None for a CPU engine, one off this host, or a host without NVML."""
    if scope.off_reason or scope.gpu_count == 0:
        return None
    try:
        nvml, gpus = scope.engine_nvml()
    except Exception:  # noqa: BLE001 - no driver or no such GPUs: the energy note says which
        return None
    return GpuWatch(nvml, [g.index for g in gpus]) if gpus else None


def request_row(run_id: str, variant: str, step: Step, concurrency: int, r: RequestRecord) -> dict:
    return {
        "run_id": run_id,
        "variant": variant,
        "scenario": step.label,
        "concurrency": concurrency,
        "request_index": r.index,
        "is_warmup": r.is_warmup,
        "status": r.status,
        "error": error_excerpt(r.error),
        "start_s": r.start_ms / 1000.0,
        "ttft_ms": r.ttft_ms,
        "tpot_ms": r.tpot_ms,
        "e2el_ms": r.e2el_ms,
        "prompt_tokens": r.prompt_tokens,
        "output_tokens": r.output_tokens,
        "output_tokens_source": r.output_tokens_source,
        "chunk_offsets_ms": r.chunk_offsets_ms,
        "repeat": r.repeat,
        "prompt_tokens_source": r.prompt_tokens_source,
        "finish_reason": r.finish_reason,
        "max_tokens": r.max_tokens,
        "ttft_answer_ms": r.ttft_answer_ms,
        "reasoning_tokens": r.reasoning_tokens,
        "answer_tokens": r.answer_tokens,
        "reasoning_tokens_source": r.reasoning_tokens_source,
        "end_s": r.end_ms / 1000.0 if r.end_ms is not None else None,
        "scheduled_s": r.scheduled_ms / 1000.0 if r.scheduled_ms is not None else None,
        "session_id": r.session_id,
        "turn": r.turn,
        "prompt_tokens_asked": r.prompt_tokens_asked,
    }


def power_rows(run_id: str, variant: str, run: StepRun) -> list[dict]:
    per_device: dict[str, int] = {}
    rows = []
    for p in run.power:
        i = per_device[p.device] = per_device.get(p.device, -1) + 1
        rows.append(
            {
                "run_id": run_id,
                "variant": variant,
                "scenario": run.step.label,
                "repeat": run.repeat,
                "device": p.device,
                "source": run.energy.source,
                "sample_index": i,
                "t_s": p.t_s,
                "power_w": p.power_w,
                "energy_j": p.energy_j,
            }
        )
    return rows


# Statistics a summary holds that perf_summary has no column for: the answer-TTFT's spread and percentiles
# asked for beyond the warehouse's (`tradeoff perf --percentiles`); `tradeoff perf`'s JSON keeps them.
_UNSTORED_STAT = re.compile(r"(ttft_ms|tpot_ms|itl_ms|e2el_ms|ttft_answer_ms)_(mean|std|min|max|p\d+(\.\d+)?)")
_SUMMARY_COLUMNS = frozenset(SCHEMAS["perf_summary"].names)


def summary_row(run_id: str, variant: str, summary: dict) -> dict:
    by_device = summary.get("energy_by_device_j")
    row = {
        "run_id": run_id,
        "variant": variant,
        **summary,
        "energy_by_device_j": json.dumps(by_device, sort_keys=True) if by_device is not None else None,
    }
    # Dropped here on purpose (the contract refuses unknown keys): only those statistics; any other key
    # the table does not declare still fails the write.
    return {k: v for k, v in row.items() if k in _SUMMARY_COLUMNS or not _UNSTORED_STAT.fullmatch(k)}


def output_force(perf: PerfSpec, engine_forces: str | None) -> str | None:
    """How to force the output length: the config's choice, or ('auto') what the engine honours."""
    if perf.force_output_len == "auto":
        return engine_forces
    return None if perf.force_output_len == "none" else perf.force_output_len


@dataclass
class Target:
    """What one perf run measures: an endpoint, and what is known about the model behind it."""

    base_url: str
    model: str  # the served model name
    tokenizer: Tokenizer | None = None  # the server's own tokenizer; None: lengths are approximate and say so
    forces_output_len: str | None = "both"  # what `force_output_len: auto` resolves to: what the server honours
    model_bytes: int | None = None  # weights read per decoded token (MBU); None: MBU is NULL
    on_host: bool = True  # energy and memory bandwidth describe this host: only measured for a server on it
    model_bytes_method: str | None = None  # how model_bytes was counted
    bandwidth: Bandwidth | None = None  # the engine's memory bandwidth; None: this host's, measured when needed
    scope: EnergyScope | None = None  # the devices metered; None: every device of this host (or off, not on it)
    cpu_threads: dict | None = None  # the server's CPU threads on this host (tasks.perf.host_share); None: unknown


def variant_target(variant: Variant, artifact: Artifact, base_url: str, model: ModelSpec | None = None) -> Target:
    """A built variant's endpoint: its engine says which tokenizer, which output-length switch, which devices
    (energy: its own GPUs or the CPU; MBU: what decoding reads over their bandwidth), whether it runs here."""
    engine = engine_for(variant.engine)
    tok_ref = engine.tokenizer(artifact, model)
    model_bytes, bytes_method, bandwidth = roofline_inputs(engine, variant, artifact)
    served = engine.served_model_name(variant)
    return Target(
        base_url,
        served,
        open_tokenizer(tok_ref) if tok_ref else server_tokenizer(base_url, served),
        engine.forces_output_len,
        model_bytes,
        engine.runs_on_host,
        bytes_method,
        bandwidth,
        scope_for(engine, variant, artifact),
        engine.cpu_threads(variant, model) if model else None,
    )


def warn_stderr(message: str) -> None:
    print(f"warning: {message}", file=sys.stderr)


def measure(*args, **kwargs) -> list[Scenario]:
    """measure_rounds (its arguments), every round one after another: the perf run of one endpoint on its own."""
    return drain(measure_rounds(*args, **kwargs))


def measure_rounds(
    spec: PerfSpec,
    target: Target,
    progress: bool | None = False,
    on_scenario: Callable[[list[Scenario]], None] | None = None,
    search: Search | None = None,
    warn: Callable[[str], None] = warn_stderr,
    extension: Extension | None = None,
    rank: bool = False,
    on_record: Callable[[Step, RequestRecord], None] | None = None,
) -> Generator[Round, int | None, list[Scenario]]:
    """The one perf run, for the nightly and `tradeoff perf`: every step of the sweep, each scenario summarised
    (metrics, energy, MBU) as soon as a repeat of it ends, then `on_scenario` with everything measured so
    far, so a caller can write what it has (a failure later loses nothing). `search` adds steps after the
    sweep (the decision's sustainable-load search), `extension` repeats to fixed steps whose claim lacks requests
    (decision.extend), before the search. What the load generator shares the host with is
    `warn`ed about before the first request (tasks.perf.host_share). A generator of rounds, as perf_rounds: the
    nightly measures several variants' rounds in turn (tasks.perf.rounds); `measure` runs them all at once."""
    if target.on_host:
        for note in sharing_notes(target.cpu_threads):
            warn(note)
    tok = target.tokenizer
    count = tok.count if tok else None
    built_by = tok.label if tok else None
    force = output_force(spec, target.forces_output_len)
    workload = make_workload(spec, *((tok.encode, tok.decode, tok.count) if tok else ()))
    trace = trace_replays(spec, count, warn) if spec.trace else None
    # measured once per run, before the first request, and only where it describes the server's host
    bandwidth = target.bandwidth or (host_bandwidth() if target.on_host and target.model_bytes else None)
    scope = target.scope or EnergyScope(
        off_reason=None if target.on_host else "endpoint is not on this host; energy not measured"
    )
    idle = idle_baseline(scope, spec.idle_baseline_s)  # the server up and idle, before the first request
    guard = host_guard(spec, target, scope)
    summarized: dict[str, list] = {}  # scenario -> the windows its summary covers (one measured again replaces one)

    def summarize_new(scenarios: list[Scenario]) -> None:
        for sc in scenarios:
            done = summarized.get(sc.step.label, [])
            if len(done) != len(sc.runs) or any(a is not b for a, b in zip(done, sc.runs)):
                sc.summary = summarize_scenario(
                    spec, sc, force, target.model_bytes, bandwidth, target.model_bytes_method, scope, idle, built_by
                )
                summarized[sc.step.label] = list(sc.runs)
            else:
                sc.summary.update(extend_columns(sc))  # a note may change with no window added
        if on_scenario:
            on_scenario(scenarios)

    scenarios = yield from perf_rounds(
        spec,
        target.base_url,
        target.model,
        workload,
        force,
        count,
        progress=progress,
        on_scenario=summarize_new,
        energy_off_reason=scope.off_reason,
        meter_opener=scope.open_meter,
        trace=trace,
        guard=guard,
        warn=warn,
        extension=extension,
        rank=rank,
        on_record=on_record,
    )
    if search is not None:
        scenarios += search(
            target.base_url,
            target.model,
            workload,
            force,
            count,
            scenarios,
            summarize_new,
            energy_off_reason=scope.off_reason,
            meter_opener=scope.open_meter,
            guard=guard,
            warn=warn,
        )
    summarize_new(scenarios)
    for note in sorted({sc.summary.get("prompt_len_note") for sc in scenarios} - {None}):
        warn(f"prompt lengths: {note}")
    return scenarios


def perf_rows(spec: PerfSpec, run_id: str, variant: str, scenarios: list[Scenario], more: dict) -> dict[str, list]:
    """A variant's perf tables from what it measured so far: perf_requests, perf_power and perf_summary (each
    summary with the columns in `more`)."""
    return {
        "perf_requests": [
            request_row(run_id, variant, sc.step, sc.step.concurrency or spec.num_prompts, r)
            for sc in scenarios
            for r in sc.records
        ],
        "perf_power": [row for sc in scenarios for run in sc.runs for row in power_rows(run_id, variant, run)],
        "perf_summary": [summary_row(run_id, variant, {**sc.summary, **more}) for sc in scenarios],
    }


def measure_into_rounds(
    spec: PerfSpec,
    target: Target,
    run_id: str,
    variant: str,
    results_dir: Path,
    search: Search | None = None,
    warn: Callable[[str], None] = warn_stderr,
    extension: Extension | None = None,
    interleaved_with: list[str] | None = None,
    rank: bool = False,
) -> Generator[Round, int | None, dict]:
    """`measure_rounds`, writing the variant's perf tables (perf_rows) in one write after each (step, repeat): a
    failure later loses no finished window (docs/failures.md); returns a short summary for the run's log and the
    request counts the variant's failure check reads.
    `interleaved_with`: the other variants whose rounds alternate with this one's (tasks.perf.rounds), recorded."""
    rounds = {"interleaved_with": ", ".join(interleaved_with) if interleaved_with else None}

    def write(scenarios: list[Scenario]) -> None:
        write_tables(results_dir, variant, perf_rows(spec, run_id, variant, scenarios, rounds))

    scenarios = yield from measure_rounds(
        spec, target, on_scenario=write, search=search, warn=warn, extension=extension, rank=rank
    )
    summaries = [sc.summary for sc in scenarios]
    return {
        "requests": sum(len(sc.records) for sc in scenarios),
        "scenarios": len(summaries),
        "output_throughput": [s["output_throughput"] for s in summaries],
        "mbu_pct": [s["mbu_pct"] for s in summaries if s["mbu_pct"] is not None],
        "request_counts": request_counts(scenarios),
    }  # the variant fails above perf.max_error_rate


def run_standalone(args: argparse.Namespace) -> list[dict]:
    """`tradeoff perf`: validate the flags, reach the endpoint, run the sweep, write the JSON; returns the results.

    The file is rewritten after every (step, repeat), so what was measured is written even when
    the sweep stops early (a dead server). Stopped by a signal (Ctrl-C, SIGTERM) mid-window, it is written once
    more with the requests that window had answered, every line marked "interrupted" (interrupted_scenarios), and
    the stop goes on (the command exits non-zero).
    """
    spec = spec_from_args(args)  # bad flags fail here, before anything is sent
    endpoint = api_root(args.endpoint)  # given with or without /v1
    models = check_endpoint(endpoint, timeout_s=args.connect_timeout_s)
    model = args.model or (models[0] if models else None)
    if not model:
        raise ConfigError(f"--model: {endpoint}/v1/models lists no model; pass --model NAME")
    # no tokenizer given: the server's own, where it exposes one (prompts of input_len tokens as it counts them)
    tok = load_tokenizer(str(Path(args.tokenizer).resolve())) if args.tokenizer else server_tokenizer(endpoint, model)
    model_bytes = args.model_bytes or (Path(args.tokenizer).stat().st_size if args.tokenizer else None)
    how = ("--model-bytes" if args.model_bytes else "the --tokenizer GGUF's size") if model_bytes else None
    # An unknown server: `auto` asks for both min_tokens and ignore_eos.
    local = is_local(endpoint)
    target = Target(
        endpoint,
        model,
        tok,
        "both",
        model_bytes,
        local,
        how,
        cpu_threads=local_server_threads(urlparse(endpoint).port or 80) if local else None,
    )
    out = Path(args.output)
    out.parent.mkdir(parents=True, exist_ok=True)
    written: list[Scenario] = []  # what the file holds
    answered: dict[tuple[str, int, int], tuple[Step, RequestRecord]] = {}  # since then: (step, repeat, index) -> it

    def write(scenarios: list[Scenario], marks: dict | None = None) -> None:
        tmp = out.with_name(f".{out.name}.tmp")
        tmp.write_text(
            "".join(
                json.dumps(vllm_result(spec, sc, model, args.tokenizer, args.detailed) | (marks or {})) + "\n"
                for sc in scenarios
            )
        )
        tmp.replace(out)  # atomic: a reader sees the previous complete file or this one

    def on_scenario(scenarios: list[Scenario]) -> None:
        write(scenarios)
        written[:] = scenarios
        answered.clear()

    def on_record(step: Step, r: RequestRecord) -> None:
        answered[(step.label, r.repeat, r.index)] = (step, r)  # a window measured again replaces its answers

    try:
        scenarios = measure(spec, target, progress=args.progress, on_scenario=on_scenario, on_record=on_record)
    except KeyboardInterrupt:
        force = output_force(spec, target.forces_output_len)
        kept = interrupted_scenarios(spec, written, list(answered.values()), force)
        write(kept, {"interrupted": True})
        n = sum(len(run.measured) for sc in kept for run in sc.runs)
        print(f"interrupted: kept {n} answered requests in {len(kept)} scenario(s) in {out}", file=sys.stderr)
        raise
    return [vllm_result(spec, sc, model, args.tokenizer, args.detailed) for sc in scenarios]


def interrupted_scenarios(
    spec: PerfSpec, written: list[Scenario], answered: list[tuple[Step, RequestRecord]], force: str | None
) -> list[Scenario]:
    """The scenarios of a run stopped mid-window: those written, each step whose window was cut with that window's
    answered requests as one more run (its energy not metered: the window did not end), summarised again."""
    by_label = {sc.step.label: sc for sc in written}  # in the file's order; a step first seen cut goes last
    cut: dict[tuple[Step, int], list[RequestRecord]] = {}
    for step, r in answered:
        cut.setdefault((step, r.repeat), []).append(r)
    for (step, repeat), records in cut.items():
        run = StepRun(
            step, repeat, [], sorted(records, key=lambda r: r.index),
            EnergyReading(None, None, None, "interrupted: the window did not end"),
        )  # fmt: skip
        old = by_label.get(step.label)
        sc = Scenario(step, (old.runs if old else []) + [run])
        sc.summary = summarize_scenario(spec, sc, force)
        by_label[step.label] = sc
    return list(by_label.values())
