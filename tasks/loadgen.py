"""Load patterns and the perf run: steps (concurrency, Poisson rate, sweep), warm-up, repeats, energy.

A step is one load pattern:
- `c<N>`: fixed concurrency, N requests in flight until `num_prompts` are done;
- `r<R>`: request rate R/s, arrival gaps drawn from a gamma distribution of shape
  `burstiness` and mean 1/R (shape 1 = Poisson, as `vllm bench serve --burstiness`),
  optionally capped at `max_concurrency` in flight;
- the sweep (as guidellm): `sync` (one request at a time), `max` (all at once: the
  maximum throughput), then `sweep<i>`: `sweep` rates evenly spaced strictly between
  the two measured request rates.

Each (step, repeat) sends `warmup_requests` first, one by one, then the measured
requests inside an energy window; requests sent in the first `warmup_s` seconds of the
measured part are flagged as warm-up too. No new request is sent after `max_duration_s`.
Prompts are seeded per (step, repeat), so a rerun sends the same requests. Repeats
interleave (every step once, then again) so slow drift does not favour one step.
"""

from __future__ import annotations

import asyncio
import math
import sys
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from tasks.config import PerfSpec
from tasks.energy import EnergyReading, EnergyWindow, PowerSample, per_token
from tasks.metrics import RequestRecord, summarize_repeats
from tasks.perf import Prompt, load_sharegpt, run_load, synthetic_prompts
from tasks.roofline import Bandwidth, mbu_pct


@dataclass(frozen=True)
class Step:
    label: str  # scenario name: c4, r2.5, sync, max, sweep1
    kind: str  # concurrency | rate | synchronous | throughput
    concurrency: int | None  # cap on requests in flight; None: no cap
    rate: float | None = None  # target requests/s; None: no schedule (as fast as the cap allows)


@dataclass
class StepRun:
    """One repeat of one step."""

    step: Step
    repeat: int
    warmup: list[RequestRecord]
    measured: list[RequestRecord]
    energy: EnergyReading
    power: list[PowerSample] = field(default_factory=list)


@dataclass
class Scenario:
    """One step over all its repeats, with its summary."""

    step: Step
    runs: list[StepRun]
    summary: dict = field(default_factory=dict)

    @property
    def records(self) -> list[RequestRecord]:
        return [r for run in self.runs for r in run.warmup + run.measured]


Workload = Callable[[int, int], list[Prompt]]  # (seed, n) -> prompts


def fixed_steps(spec: PerfSpec) -> list[Step]:
    """The configured concurrency and rate steps, in order."""
    steps = [Step(f"c{c}", "concurrency", c) for c in spec.concurrency or []]
    steps += [Step(f"r{r:g}", "rate", spec.max_concurrency, r) for r in spec.rates]
    return steps


SYNC_STEP = Step("sync", "synchronous", 1)


def max_step(spec: PerfSpec) -> Step:
    return Step("max", "throughput", spec.max_concurrency)


def sweep_rates(sync_rps: float, max_rps: float, n: int) -> list[float]:
    """`n` request rates evenly spaced strictly between the synchronous and the maximum rate."""
    return [float(r) for r in np.linspace(sync_rps, max_rps, n + 2)[1:-1]]


def arrival_offsets_s(n: int, rate: float | None, burstiness: float = 1.0, seed: int = 0) -> list[float] | None:
    """Send times (s from the start) of `n` requests at `rate`/s; gaps ~ Gamma(burstiness, 1/(rate*burstiness)).

    The first request goes at 0, as in vLLM. None for no schedule (rate None or inf).
    """
    if rate is None or math.isinf(rate):
        return None
    gaps = np.random.default_rng(seed).gamma(shape=burstiness, scale=1.0 / (rate * burstiness), size=n)
    return [0.0] + np.cumsum(gaps[:-1]).tolist()


def make_workload(spec: PerfSpec, encode: Callable[[str], list[int]] | None = None,
                  decode: Callable[[list[int]], str] | None = None,
                  count_tokens: Callable[[str], int] | None = None) -> Workload:
    """Prompts for each (step, repeat): synthetic (seeded, unique starts) or from the ShareGPT file.

    From a file, output lengths are the dataset's unless `output_len` was set explicitly
    (as vLLM's --sharegpt-output-len); every (step, repeat) sends the same file prompts.
    """
    if spec.dataset:
        fixed_out = spec.output_len if "output_len" in spec.model_fields_set else None
        cache: dict[int, list[Prompt]] = {}

        def from_file(seed: int, n: int) -> list[Prompt]:
            if n not in cache:
                cache[n] = load_sharegpt(spec.dataset, n, spec.seed, count_tokens, fixed_out)
            return cache[n]

        return from_file

    def synthetic(seed: int, n: int) -> list[Prompt]:
        return synthetic_prompts(n, spec.input_len, seed, spec.unique_prompts, encode, decode,
                                 spec.output_len, spec.len_spread)

    return synthetic


class _Progress:
    """A rich progress bar on stderr (requests done, output tokens/s, errors); a no-op when off."""

    def __init__(self, enabled: bool | None) -> None:
        self.enabled = sys.stderr.isatty() if enabled is None else enabled
        self._bar = None

    def __enter__(self) -> "_Progress":
        if self.enabled:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            self._bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                 TextColumn("{task.fields[tok_s]:>8.1f} tok/s  errors {task.fields[errors]}"),
                                 TimeElapsedColumn(), console=Console(stderr=True), transient=False)
            self._bar.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._bar:
            self._bar.__exit__(*exc)

    def track(self, description: str, total: int) -> Callable[[RequestRecord], None] | None:
        if not self._bar:
            return None
        bar = self._bar
        task = bar.add_task(description, total=total, tok_s=0.0, errors=0)
        state = {"tokens": 0, "errors": 0, "first_ms": None}

        def on_record(r: RequestRecord) -> None:
            state["tokens"] += r.output_tokens or 0
            state["errors"] += r.status != "ok"
            first = state["first_ms"] = r.start_ms if state["first_ms"] is None else min(state["first_ms"], r.start_ms)
            span_s = max((r.start_ms + (r.e2el_ms or 0) - first) / 1000, 1e-3)
            bar.update(task, advance=1, tok_s=state["tokens"] / span_s, errors=state["errors"])

        return on_record


def run_step(spec: PerfSpec, step: Step, repeat: int, prompts: list[Prompt], base_url: str, model: str,
             force: str | None, count_tokens: Callable[[str], int] | None, first_index: int,
             offsets_seed: int, on_record: Callable[[RequestRecord], None] | None = None,
             energy_off_reason: str | None = None, meter_opener: Callable | None = None) -> StepRun:
    """Warm-up one by one, then the measured requests of one step inside an energy window."""
    common = dict(kind=spec.endpoint, force=force, count_tokens=count_tokens, timeout_s=spec.request_timeout_s,
                  repeat=repeat)
    n_warm = spec.warmup_requests
    warm = asyncio.run(run_load(base_url, model, prompts[:n_warm], spec.output_len, concurrency=1,
                                first_index=first_index, **common))
    for r in warm:
        r.is_warmup = True
    todo = prompts[n_warm:]
    offsets = arrival_offsets_s(len(todo), step.rate, spec.burstiness, offsets_seed)
    with EnergyWindow(spec.power_interval_s, off_reason=energy_off_reason, opener=meter_opener) as window:
        measured = asyncio.run(run_load(base_url, model, todo, spec.output_len, concurrency=step.concurrency,
                                        offsets_s=offsets, max_duration_s=spec.max_duration_s,
                                        first_index=first_index + len(warm), on_record=on_record, **common))
    for r in measured:
        r.is_warmup = r.start_ms < spec.warmup_s * 1000.0
    return StepRun(step, repeat, warm, measured, window.reading, window.samples)


def run_perf(spec: PerfSpec, base_url: str, model: str, workload: Workload, force: str | None,
             count_tokens: Callable[[str], int] | None = None, progress: bool | None = False,
             on_scenario: Callable[[list[Scenario]], None] | None = None,
             energy_off_reason: str | None = None, meter_opener: Callable | None = None) -> list[Scenario]:
    """Every step of `spec`, `spec.repeats` times, interleaved; returns one Scenario per step (no summaries yet).

    `on_scenario` is called with everything measured so far after each (step, repeat), so
    callers can write partial results as they come.
    """
    steps = fixed_steps(spec) + ([SYNC_STEP, max_step(spec)] if spec.sweep is not None else [])
    sweep_pending = spec.sweep is not None
    scenarios: dict[str, Scenario] = {}
    with _Progress(progress) as bar:
        for repeat in range(spec.repeats):
            i = 0
            while i < len(steps):
                step = steps[i]
                seed = spec.seed * 1_000_003 + i * 1009 + repeat
                sc = scenarios.setdefault(step.label, Scenario(step, []))
                prompts = workload(seed, spec.warmup_requests + spec.num_prompts)
                tracker = bar.track(f"{step.label} ({repeat + 1}/{spec.repeats})", spec.num_prompts)
                sc.runs.append(run_step(spec, step, repeat, prompts, base_url, model, force, count_tokens,
                                        sum(len(r.warmup) + len(r.measured) for r in sc.runs), seed, tracker,
                                        energy_off_reason, meter_opener))
                if sweep_pending and step.label == "max":
                    # The sweep's rates lie between the measured synchronous and maximum request rates.
                    lo = _request_rate(scenarios["sync"].runs[0])
                    hi = _request_rate(sc.runs[0])
                    if lo and hi:
                        steps += [Step(f"sweep{k + 1}", "rate", spec.max_concurrency, rate)
                                  for k, rate in enumerate(sweep_rates(lo, hi, spec.sweep))]
                    sweep_pending = False
                if on_scenario:
                    on_scenario(list(scenarios.values()))
                i += 1
    return list(scenarios.values())


def _request_rate(run: StepRun) -> float | None:
    ok = [r for r in run.measured if r.status == "ok"]
    if not ok:
        return None
    span_ms = max(r.start_ms + r.e2el_ms for r in ok) - min(r.start_ms for r in ok)
    return len(ok) / (span_ms / 1000.0) if span_ms > 0 else None


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
