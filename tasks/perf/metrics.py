"""Latency and throughput metrics with vLLM's `bench serve` definitions, plus jitter. Plain Python.

Definitions (times in ms, measured at the client):
- TTFT: send -> first chunk carrying output: answer text or reasoning (as vLLM: any output).
  TTFT of the answer (`ttft_answer_ms`): send -> first chunk of answer (non-reasoning) text.
- E2EL: send -> the read that carried [DONE].
- TPOT: per request (E2EL - TTFT) / (output_tokens - 1); requests with one token have none.
- ITL: the gaps between successive output chunks, pooled over all requests. Reasoning tokens
  are output tokens: TPOT and ITL run over all of them.
- duration: the measured wall interval, first send to the last request's return whatever
  its status (vLLM's benchmark duration); throughputs divide by it, so failures at the tail
  cannot inflate them.
- pooled CV (`ttft_cv_pct_pooled`, `itl_cv_pct_pooled`): sample std / mean in % over every measured
  request of every repeat together: it mixes prompt-length spread and run-to-run drift with the engine's
  jitter, so it is not the jitter figure (tasks.perf.jitter is: per repeat, on a fixed-length workload);
  and p99/p50.
- peak output tokens/s: the most output tokens that arrived in any window of `window_s`
  seconds (sliding, starting at a chunk arrival, fully inside the measured interval),
  divided by the window; a chunk's tokens are its request's output tokens spread evenly
  over its chunks. When the interval is shorter than one window it is the mean throughput.
- goodput (`request_goodput`): requests/s that met every SLO limit at once (TTFT, TPOT,
  E2EL, whichever are set), over the same duration as `request_throughput`; a request
  with one output token has TPOT 0 for this test, as in vLLM.
- confidence intervals of TTFT mean, request and output throughput: a log-scale t interval
  (the modified Cox interval, tasks.core.stat_tests.log_t_interval) over the repeats' own figures
  (each repeat's mean, throughput), so they hold run-to-run variation only (~15 % on TTFT here; the
  requests' spread enters through each repeat's figure) and never reach 0 or below (a plain t
  interval over 3 repeats, one of them stalled, gave a TTFT mean's lower bound of -1,784 ms);
  NULL with "n too small" in `ci_method` under two repeats. They bound the long-run average of the
  per-repeat figure (docs/statistics.md gives their measured coverage). TTFT p99: a
  distribution-free order-statistic interval over the pooled requests
  (tasks.core.percentiles.interval: it covers the p99 itself at the level or more);
  NULL below the 368 requests a 95 % interval of a p99 needs.
Only requests with status 'ok' enter any statistic; errors and incomplete ones are counted apart.
"""

from __future__ import annotations

import math
from typing import Callable, Iterable, Sequence

import numpy as np

from tasks.client import RequestRecord  # made by the client, read here
from tasks.core.percentiles import interval as percentile_interval
from tasks.core.stat_tests import log_t_interval
from warehouse.contract import PERCENTILES


def pct_name(p: float) -> str:
    """'p99', 'p99.9': the percentile's key part, as vLLM writes it."""
    return f"p{int(p)}" if float(p).is_integer() else f"p{p}"


def describe(values: Iterable[float], prefix: str, percentiles: Iterable[float] = ()) -> dict[str, float | None]:
    """mean, std (sample), min, max and percentiles of `values`, keyed `{prefix}_{stat}`; None when empty.

    The warehouse's percentiles (PERCENTILES) are always there; `percentiles` adds more.
    """
    ps = sorted(set(PERCENTILES) | {float(p) for p in percentiles}, key=float)
    arr = np.asarray([v for v in values if v is not None], dtype=float)
    if arr.size == 0:
        return {f"{prefix}_{s}": None for s in ("mean", "std", "min", "max", *map(pct_name, ps))}
    out = {
        f"{prefix}_mean": float(arr.mean()),
        f"{prefix}_std": float(arr.std(ddof=1)) if arr.size > 1 else 0.0,
        f"{prefix}_min": float(arr.min()),
        f"{prefix}_max": float(arr.max()),
    }
    for p, v in zip(ps, np.percentile(arr, ps)):
        out[f"{prefix}_{pct_name(p)}"] = float(v)
    return out


def cv_pct(values: Sequence[float]) -> float | None:
    """Coefficient of variation in % (sample std / mean); None for fewer than 2 values or mean 0."""
    arr = np.asarray(values, dtype=float)
    if arr.size < 2 or arr.mean() == 0:
        return None
    return float(arr.std(ddof=1) / arr.mean() * 100.0)


def peak_tokens_per_s(
    events: list[tuple[float, float]], start_ms: float, end_ms: float, window_s: float
) -> float | None:
    """Most tokens in any `window_s` window that lies inside [start_ms, end_ms], per second.

    `events` are (arrival_ms, tokens). See the module docstring for the definition.
    """
    if not events or end_ms <= start_ms:
        return None
    total = sum(t for _, t in events)
    span_ms = end_ms - start_ms
    w_ms = window_s * 1000.0
    if span_ms <= w_ms:
        return total / (span_ms / 1000.0)
    events = sorted(events)
    times = np.array([e[0] for e in events])
    toks = np.cumsum([0.0] + [e[1] for e in events])
    best = 0.0
    for i, t0 in enumerate(times):
        t0 = min(t0, end_ms - w_ms)  # keep the window inside the interval
        lo = int(np.searchsorted(times, t0, side="left"))
        hi = int(np.searchsorted(times, t0 + w_ms, side="left"))
        best = max(best, toks[hi] - toks[lo])
    return best / window_s


def within_slo(values: dict[str, float | None], slo: dict[str, float]) -> bool:
    """Whether `values` ({'ttft_ms': .., 'tpot_ms': .., 'e2el_ms': ..}) meet every limit of `slo` (None: not met)."""
    return all(values.get(k) is not None and values[k] <= limit for k, limit in slo.items())


def failed_requests(records: Iterable[RequestRecord]) -> int:
    """Requests the server failed (errored, cut short, past their deadline), warm-ups included. A window or step
    holding one is never measured again nor extended (docs/failures.md, "What is measured again"): sent again,
    the requests of a broken server fail again, each at the cost of its deadline."""
    return sum(r.status != "ok" for r in records)


def meets_slo(r: RequestRecord, slo: dict[str, float]) -> bool:
    """Whether an ok request met every limit of `slo` (TPOT 0 for a one-token answer, as vLLM)."""
    return r.status == "ok" and within_slo(
        {"ttft_ms": r.ttft_ms, "tpot_ms": r.tpot_ms or 0.0, "e2el_ms": r.e2el_ms}, slo
    )


def summarize(
    records: list[RequestRecord],
    window_s: float = 1.0,
    percentiles: Iterable[float] = (),
    slo: dict[str, float] | None = None,
) -> dict[str, float | int | None]:
    """Scenario summary from its measured (non-warm-up) requests."""
    measured = [r for r in records if not r.is_warmup]
    ok = [r for r in measured if r.status == "ok"]
    out: dict[str, float | int | None] = {
        "num_requests": len(measured),
        "num_ok": len(ok),
        "num_errors": sum(r.status == "error" for r in measured),
        "num_incomplete": sum(r.status == "incomplete" for r in measured),
    }
    if ok:
        start = min(r.start_ms for r in ok)
        end = max(r.start_ms + r.e2el_ms for r in ok)
        # The measured wall interval (as vLLM's benchmark duration): first send to the last request's
        # return, whatever its status, so requests that fail at the tail do not inflate throughputs.
        wall_start = min(r.start_ms for r in measured)
        wall_end = max([end] + [r.end_ms for r in measured if r.end_ms is not None])
        duration_s = max((wall_end - wall_start) / 1000.0, 1e-9)
    else:
        start = end = 0.0
        duration_s = None
    out_tokens = sum(r.output_tokens or 0 for r in ok)
    in_tokens = sum(r.prompt_tokens or 0 for r in ok)
    out["duration_s"] = duration_s
    out["total_input_tokens"] = in_tokens
    out["total_output_tokens"] = out_tokens
    out["request_throughput"] = len(ok) / duration_s if duration_s else None
    out["output_throughput"] = out_tokens / duration_s if duration_s else None
    out["total_token_throughput"] = (in_tokens + out_tokens) / duration_s if duration_s else None
    events = []
    for r in ok:
        if r.chunk_offsets_ms and r.output_tokens:
            per_chunk = r.output_tokens / len(r.chunk_offsets_ms)
            events += [(r.start_ms + c, per_chunk) for c in r.chunk_offsets_ms]
    out["peak_output_throughput"] = peak_tokens_per_s(events, start, end, window_s) if ok else None
    good = sum(meets_slo(r, slo) for r in ok) if slo else None
    out["num_good"] = good
    out["request_goodput"] = good / duration_s if duration_s and good is not None else None
    ttft = [r.ttft_ms for r in ok]
    itl = [g for r in ok for g in r.itl_ms]
    out.update(describe(ttft, "ttft_ms", percentiles))
    out.update(describe([r.tpot_ms for r in ok], "tpot_ms", percentiles))
    out.update(describe(itl, "itl_ms", percentiles))
    out.update(describe([r.e2el_ms for r in ok], "e2el_ms", percentiles))
    # 007_timing: time to the first answer (non-reasoning) token, and how many output tokens were reasoning
    out.update(describe([r.ttft_answer_ms for r in ok], "ttft_answer_ms", percentiles))
    out["total_reasoning_tokens"] = sum(r.reasoning_tokens or 0 for r in ok)
    out["total_answer_tokens"] = sum(
        r.answer_tokens if r.answer_tokens is not None else (r.output_tokens or 0) for r in ok
    )
    out["ttft_cv_pct_pooled"] = cv_pct(ttft)
    out["itl_cv_pct_pooled"] = cv_pct(itl)
    p50, p99 = out["ttft_ms_p50"], out["ttft_ms_p99"]
    out["ttft_p99_p50_ratio"] = p99 / p50 if p50 else None
    p50, p99 = out["itl_ms_p50"], out["itl_ms_p99"]
    out["itl_p99_p50_ratio"] = p99 / p50 if p50 else None
    return out


def bootstrap_ci(
    groups: Sequence[Sequence[Sequence[float]]],
    stat: Callable[[np.ndarray], float],
    level: float = 0.95,
    resamples: int = 1000,
    seed: int = 0,
) -> tuple[float | None, float | None]:
    """Percentile-bootstrap interval of `stat` over pooled values.

    `groups` are repeats; each holds units (requests), each unit its values (one TTFT, or
    its chunk gaps). Units are resampled whole, so values of one request stay together;
    with two or more groups the groups are resampled first (cluster bootstrap).
    """
    groups = [[np.asarray(u, dtype=float) for u in g if len(u)] for g in groups]
    groups = [g for g in groups if g]
    if sum(len(u) for g in groups for u in g) < 2:
        return None, None
    rng = np.random.default_rng(seed)
    stats = np.empty(resamples)
    for b in range(resamples):
        chosen = [groups[i] for i in rng.integers(0, len(groups), len(groups))] if len(groups) > 1 else groups
        stats[b] = stat(np.concatenate([g[i] for g in chosen for i in rng.integers(0, len(g), len(g))]))
    stats = stats[np.isfinite(stats)]
    if stats.size == 0:
        return None, None
    tail = (1.0 - level) / 2 * 100
    lo, hi = np.percentile(stats, [tail, 100 - tail])
    return float(lo), float(hi)


def _mean_over_repeats(values: list[float | None]) -> float | None:
    vals = [v for v in values if v is not None]
    return float(np.mean(vals)) if vals else None


def summarize_repeats(
    runs: list[list[RequestRecord]],
    window_s: float = 1.0,
    percentiles: Iterable[float] = (),
    slo: dict[str, float] | None = None,
    level: float = 0.95,
) -> dict[str, float | int | str | None]:
    """One scenario's summary over its repeats, with intervals (see the module docstring).

    Latency statistics pool the measured requests of every repeat; counts and durations add
    up; throughputs and goodput are the mean of the repeats'; the peak is the highest repeat's.
    """
    per = [summarize(r, window_s, percentiles, slo) for r in runs]
    pooled = summarize([r for run in runs for r in run], window_s, percentiles, slo)
    for k in (
        "num_requests",
        "num_ok",
        "num_errors",
        "num_incomplete",
        "total_input_tokens",
        "total_output_tokens",
        "total_reasoning_tokens",
        "total_answer_tokens",
    ):
        pooled[k] = sum(p[k] or 0 for p in per)
    pooled["num_good"] = sum(p["num_good"] or 0 for p in per) if slo else None
    pooled["duration_s"] = sum(p["duration_s"] or 0 for p in per) or None
    for k in ("request_throughput", "output_throughput", "total_token_throughput", "request_goodput"):
        pooled[k] = _mean_over_repeats([p[k] for p in per])
    peaks = [p["peak_output_throughput"] for p in per if p["peak_output_throughput"] is not None]
    pooled["peak_output_throughput"] = max(peaks) if peaks else None
    small = None
    for name in ("ttft_ms_mean", "request_throughput", "output_throughput"):
        pooled[f"{name}_ci_low"], pooled[f"{name}_ci_high"], why = log_t_interval([p[name] for p in per], level)
        small = small or why
    ttft = [r.ttft_ms for run in runs for r in run if r.status == "ok" and not r.is_warmup]
    pooled["ttft_ms_p99_ci_low"], pooled["ttft_ms_p99_ci_high"] = percentile_interval(ttft, 99.0, level)
    pooled["repeats"] = len(runs)
    pooled["ci_level"] = level
    pooled["ci_method"] = repeat_ci_method(len(runs), small, len(ttft), level)
    return pooled


def repeat_ci_method(repeats: int, small: str | None, n: int, level: float) -> str:
    """What perf_summary's intervals are, for `ci_method`."""
    from tasks.core.percentiles import min_requests

    need = min_requests(99.0, (1.0 + level) / 2.0)
    p99 = (
        f"TTFT p99: order-statistic interval over the {n} pooled requests"
        if n >= need
        else f"TTFT p99: NULL ({n} requests; a {level * 100:g} % interval of a p99 needs {need})"
    )
    if small:
        return f"TTFT mean, request and output throughput: NULL ({small}); {p99}"
    return (
        f"TTFT mean, request and output throughput: log-scale t interval (modified Cox) over the repeats' own "
        f"figures ({repeats} repeats; run-to-run variation only; bounds > 0); {p99}"
    )


def is_finite_positive(x: float | None) -> bool:
    return x is not None and math.isfinite(x) and x > 0
