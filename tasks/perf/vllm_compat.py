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
- `std_*_ms`: numpy's std with ddof 0 (population), over the same pooled values as the means.
- `max_output_tokens_per_s`: the most chunks (one token each) that arrived in one of the
  fixed 1 s buckets counted from the first successful request's send; tradeoff keeps its
  own sliding-window peak as `peak_output_tokens_per_s_sliding`.
With repeats, a scenario is taken as vLLM would take the repeats run back to back: counts and
durations add up, the peak is the best repeat's. Latencies (means, medians, percentiles) are
over tradeoff's ok requests, which are vLLM's completed ones except in the two cases above.
"""

from __future__ import annotations

import math

import numpy as np

from tasks.perf.metrics import RequestRecord


def max_output_tokens_per_s(records: list[RequestRecord]) -> float | None:
    """vLLM's peak: most chunk arrivals in any fixed 1 s bucket from the first successful send (one repeat)."""
    ok = [r for r in records if r.status == "ok" and not r.is_warmup]
    if not ok:
        return None
    t0_s = min(r.start_ms for r in ok) / 1000.0
    span_s = max(r.start_ms + r.e2el_ms for r in ok) / 1000.0 - t0_s
    buckets = np.zeros(int(math.ceil(span_s)) + 1)
    for r in ok:
        for c in r.chunk_offsets_ms:
            b = int((r.start_ms + c) / 1000.0 - t0_s)
            if 0 <= b < buckets.size:
                buckets[b] += 1
    return float(buckets.max())


def _std(values: list[float | None]) -> float | None:
    arr = np.asarray([v for v in values if v is not None], dtype=float)
    return float(arr.std(ddof=0)) if arr.size else None


def vllm_keys(runs: list[list[RequestRecord]], summary: dict) -> dict:
    """The vLLM-defined keys of one scenario from its repeats' measured requests and its tradeoff summary."""
    measured = [r for run in runs for r in run if not r.is_warmup]
    ok = [r for r in measured if r.status == "ok"]
    completed = sum(bool(r.vllm_success) for r in measured)
    duration = summary.get("duration_s")
    per_s = (lambda x: x / duration if duration and x is not None else None)  # noqa: E731
    peaks = [p for p in (max_output_tokens_per_s(run) for run in runs) if p is not None]
    out = {"duration": duration, "completed": completed, "failed": len(measured) - completed,
           "request_throughput": per_s(completed), "output_throughput": per_s(summary["total_output_tokens"]),
           "total_token_throughput": per_s(summary["total_input_tokens"] + summary["total_output_tokens"]),
           "request_goodput": per_s(summary.get("num_good")),
           "max_output_tokens_per_s": max(peaks) if peaks else None}
    values = {"ttft": [r.ttft_ms for r in ok], "tpot": [r.tpot_ms for r in ok],
              "itl": [g for r in ok for g in r.itl_ms], "e2el": [r.e2el_ms for r in ok]}
    out.update({f"std_{m}_ms": _std(v) for m, v in values.items()})
    return out
