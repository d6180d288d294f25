"""Latency and throughput metrics with vLLM's `bench serve` definitions, plus jitter. Plain Python.

Definitions (times in ms, measured at the client):
- TTFT: send -> first chunk carrying text.
- E2EL: send -> last byte of the stream.
- TPOT: per request (E2EL - TTFT) / (output_tokens - 1); requests with one token have none.
- ITL: the gaps between successive text chunks, pooled over all requests.
- jitter: coefficient of variation (sample std / mean) in %, of TTFT and of ITL; and p99/p50.
- peak output tokens/s: the most output tokens that arrived in any window of `window_s`
  seconds (sliding, starting at a chunk arrival, fully inside the measured interval),
  divided by the window; a chunk's tokens are its request's output tokens spread evenly
  over its chunks. When the interval is shorter than one window it is the mean throughput.
Only requests with status 'ok' enter any statistic; errors and incomplete ones are counted apart.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Iterable, Sequence

import numpy as np

PERCENTILES = (50, 90, 95, 99)
STAT_NAMES = ("mean", "std", "min", "max") + tuple(f"p{p}" for p in PERCENTILES)


@dataclass
class RequestRecord:
    """One request as the client saw it (times relative to the scenario's start, in ms)."""

    index: int
    status: str  # ok | error | incomplete
    start_ms: float
    ttft_ms: float | None = None
    e2el_ms: float | None = None
    prompt_tokens: int | None = None
    output_tokens: int | None = None
    output_tokens_source: str | None = None  # usage | tokenizer
    chunk_offsets_ms: list[float] = field(default_factory=list)  # each text chunk, from send
    error: str | None = None
    text: str = ""
    is_warmup: bool = False

    @property
    def itl_ms(self) -> list[float]:
        c = self.chunk_offsets_ms
        return [b - a for a, b in zip(c, c[1:])]

    @property
    def tpot_ms(self) -> float | None:
        if self.status != "ok" or not self.output_tokens or self.output_tokens < 2:
            return None
        return (self.e2el_ms - self.ttft_ms) / (self.output_tokens - 1)


def describe(values: Iterable[float], prefix: str) -> dict[str, float | None]:
    """mean, std (sample), min, max and percentiles of `values`, keyed `{prefix}_{stat}`; None when empty."""
    arr = np.asarray([v for v in values if v is not None], dtype=float)
    if arr.size == 0:
        return {f"{prefix}_{s}": None for s in STAT_NAMES}
    out = {
        f"{prefix}_mean": float(arr.mean()),
        f"{prefix}_std": float(arr.std(ddof=1)) if arr.size > 1 else 0.0,
        f"{prefix}_min": float(arr.min()),
        f"{prefix}_max": float(arr.max()),
    }
    for p in PERCENTILES:
        out[f"{prefix}_p{p}"] = float(np.percentile(arr, p))
    return out


def cv_pct(values: Sequence[float]) -> float | None:
    """Coefficient of variation in % (sample std / mean); None for fewer than 2 values or mean 0."""
    arr = np.asarray(values, dtype=float)
    if arr.size < 2 or arr.mean() == 0:
        return None
    return float(arr.std(ddof=1) / arr.mean() * 100.0)


def peak_tokens_per_s(events: list[tuple[float, float]], start_ms: float, end_ms: float, window_s: float) -> float | None:
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


def summarize(records: list[RequestRecord], window_s: float = 1.0) -> dict[str, float | int | None]:
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
        duration_s = max((end - start) / 1000.0, 1e-9)
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
    ttft = [r.ttft_ms for r in ok]
    itl = [g for r in ok for g in r.itl_ms]
    out.update(describe(ttft, "ttft_ms"))
    out.update(describe([r.tpot_ms for r in ok], "tpot_ms"))
    out.update(describe(itl, "itl_ms"))
    out.update(describe([r.e2el_ms for r in ok], "e2el_ms"))
    out["ttft_cv_pct"] = cv_pct(ttft)
    out["itl_cv_pct"] = cv_pct(itl)
    p50, p99 = out["ttft_ms_p50"], out["ttft_ms_p99"]
    out["ttft_p99_p50_ratio"] = p99 / p50 if p50 else None
    p50, p99 = out["itl_ms_p50"], out["itl_ms_p99"]
    out["itl_p99_p50_ratio"] = p99 / p50 if p50 else None
    return out


def is_finite_positive(x: float | None) -> bool:
    return x is not None and math.isfinite(x) and x > 0
