"""The keys `tradeoff perf` shares with `vllm bench serve`, computed with vLLM's own definitions. Plain Python.

vLLM (vllm/benchmarks/serve.py `calculate_metrics`, lib/endpoint_request_func.py) defines:
- `completed` / `failed`: a request succeeds when the server answered 200, at least one
  chunk with a non-empty `choices` list arrived and nothing raised (a transport error, a
  timeout, JSON that does not parse or has the wrong shape); every other request failed.
  So a stream that closed cleanly without [DONE] is `completed` for vLLM (tradeoff counts it
  `incomplete`), and one whose chunks carried no text is `completed` too (tradeoff: `error`).
- `duration`: the benchmark's wall clock, from just before the first request to the return
  of the last; tradeoff sums the measured wall interval of each repeat (tasks.perf.metrics).
- `request_throughput` = completed / duration; `output_throughput`, `total_token_throughput`,
  `request_goodput` = totals / duration.
- the latencies (`mean_`, `median_`, `std_`, `pNN_` of `ttft`, `tpot`, `itl`, `e2el`) are over the
  completed requests, timed by every chunk with a non-empty `choices` list, whether it carries text
  or not (the finish chunk's text is empty): TTFT is the first such chunk, each ITL the gap to the
  next one, E2EL the last one (not [DONE]); TPOT is (E2EL - TTFT) / (output tokens - 1), for
  requests of more than one token. tradeoff's own latencies (its tables) count only chunks that
  carry output; the client records both (RequestRecord.chunk_offsets_ms, .choice_offsets_ms).
- `std_*_ms`: numpy's std with ddof 0 (population); tradeoff's ddof-1 figure is `sample_std_*_ms`.
- `request_goodput`: completed requests whose TTFT, TPOT (0 for one token) and E2EL, as above, are all
  within the SLO, per second of `duration`.
- `max_output_tokens_per_s`: the most chunks (one token each) that arrived in one of the
  fixed 1 s buckets counted from the first successful request's send; tradeoff keeps its
  own sliding-window peak as `peak_output_tokens_per_s_sliding`.
- `max_concurrent_requests`: the most successful requests active in one of the same 1 s buckets (a
  request counts in every bucket from its send's to its end's, so back-to-back requests at
  concurrency 1 count 2 when one ends in the second the next starts).
With repeats, a scenario is taken as vLLM would take the repeats run back to back: counts and
durations add up, latencies pool, the peaks are the best repeat's.
"""

from __future__ import annotations

import math
from typing import Iterable

import numpy as np

from tasks.perf.metrics import RequestRecord, pct_name, within_slo


def _completed(records: list[RequestRecord]) -> list[RequestRecord]:
    return [r for r in records if r.vllm_success and r.choice_offsets_ms and not r.is_warmup]


def buckets_1s(records: list[RequestRecord]) -> tuple[float, float] | None:
    """vLLM's two peaks of one repeat over fixed 1 s buckets from the first successful send:
    (max_output_tokens_per_s, max_concurrent_requests); None without a completed request."""
    done = _completed(records)
    if not done:
        return None
    t0_s = min(r.start_ms for r in done) / 1000.0
    span_s = max(r.start_ms + r.choice_offsets_ms[-1] for r in done) / 1000.0 - t0_s
    tokens = np.zeros(int(math.ceil(span_s)) + 1)
    active = np.zeros(tokens.size)
    for r in done:
        for c in r.choice_offsets_ms:
            b = int((r.start_ms + c) / 1000.0 - t0_s)
            if 0 <= b < tokens.size:
                tokens[b] += 1
        first = int(r.start_ms / 1000.0 - t0_s)
        last = int((r.start_ms + r.choice_offsets_ms[-1]) / 1000.0 - t0_s)
        active[first : last + 1] += 1
    return float(tokens.max()), float(active.max())


def latencies(records: list[RequestRecord]) -> dict[str, list[float]]:
    """vLLM's per-request TTFT, TPOT, ITL gaps and E2EL (ms) of the completed requests, pooled."""
    out: dict[str, list[float]] = {"ttft": [], "tpot": [], "all_tpot": [], "itl": [], "e2el": []}
    for r in _completed(records):
        c = r.choice_offsets_ms
        out["ttft"].append(c[0])
        out["e2el"].append(c[-1])
        out["itl"] += [b - a for a, b in zip(c, c[1:])]
        n = r.output_tokens or 0
        tpot = (c[-1] - c[0]) / (n - 1) if n > 1 else None
        if tpot is not None:
            out["tpot"].append(tpot)
        out["all_tpot"].append(tpot or 0.0)
    return out


def _stats(values: list[float], m: str, percentiles: list[float]) -> dict[str, float | None]:
    arr = np.asarray(values, dtype=float)
    if not arr.size:  # vLLM prints 0 over an empty list; no figure is the honest one
        return {f"{k}_{m}_ms": None for k in ("mean", "median", "std", *map(pct_name, percentiles))}
    out = {
        f"mean_{m}_ms": float(arr.mean()),
        f"median_{m}_ms": float(np.median(arr)),
        f"std_{m}_ms": float(arr.std(ddof=0)),
    }
    out.update({f"{pct_name(p)}_{m}_ms": float(v) for p, v in zip(percentiles, np.percentile(arr, percentiles))})
    return out


def vllm_keys(runs: list[list[RequestRecord]], summary: dict, percentiles: Iterable[float] = (99.0,)) -> dict:
    """The vLLM-defined keys of one scenario from its repeats' measured requests and its tradeoff summary."""
    measured = [r for run in runs for r in run if not r.is_warmup]
    completed = sum(bool(r.vllm_success) for r in measured)
    duration = summary.get("duration_s")
    per_s = lambda x: x / duration if duration and x is not None else None
    peaks = [p for p in (buckets_1s(run) for run in runs) if p is not None]
    lat = latencies(measured)
    limits = {k: summary[f"slo_{k}"] for k in ("ttft_ms", "tpot_ms", "e2el_ms") if summary.get(f"slo_{k}") is not None}
    good = None
    if summary.get("goodput_slo") is not None and limits:
        good = sum(
            within_slo({"ttft_ms": t, "tpot_ms": p, "e2el_ms": e}, limits)
            for t, p, e in zip(lat["ttft"], lat["all_tpot"], lat["e2el"])
        )
    out = {
        "duration": duration,
        "completed": completed,
        "failed": len(measured) - completed,
        "request_throughput": per_s(completed),
        "output_throughput": per_s(summary["total_output_tokens"]),
        "total_token_throughput": per_s(summary["total_input_tokens"] + summary["total_output_tokens"]),
        "request_goodput": per_s(good),
        "max_output_tokens_per_s": max(p for p, _ in peaks) if peaks else None,
        "max_concurrent_requests": int(max(c for _, c in peaks)) if peaks else 0,
    }
    ps = sorted({float(p) for p in percentiles})
    for m in ("ttft", "tpot", "itl", "e2el"):
        out.update(_stats(lat[m], m, ps))
    return out
