"""Engine metrics by tradeoff's names (gauges, counters, ratios of counters) and the Prometheus text parser engines read
them with."""

from __future__ import annotations

import math
import re

# name -> (kind, unit, description). kind: gauge | counter.
METRICS: dict[str, tuple[str, str, str]] = {
    "kv_cache_usage_pct": ("gauge", "pct", "KV-cache blocks in use (%)"),
    "requests_running": ("gauge", "count", "requests being decoded"),
    "requests_waiting": ("gauge", "count", "requests queued, not yet scheduled (queue length)"),
    "prompt_tokens": ("counter", "tokens", "prompt tokens processed"),
    "generation_tokens": ("counter", "tokens", "tokens generated"),
    "preemptions": ("counter", "count", "requests preempted (KV cache full)"),
    "prefix_cache_queries": ("counter", "tokens", "prompt tokens looked up in the prefix cache"),
    "prefix_cache_hits": ("counter", "tokens", "prompt tokens found in the prefix cache"),
    "spec_drafts": ("counter", "count", "speculative drafts proposed"),
    "spec_draft_tokens": ("counter", "tokens", "speculative draft tokens proposed"),
    "spec_accepted_tokens": ("counter", "tokens", "speculative draft tokens accepted"),
}


# Derived from counter differences: name -> (numerator, denominator, offset, unit, description).
RATIOS: dict[str, tuple[str, str, float, str, str]] = {
    "spec_acceptance_rate": (
        "spec_accepted_tokens",
        "spec_draft_tokens",
        0.0,
        "fraction",
        "accepted / proposed draft tokens",
    ),
    "spec_mean_acceptance_length": (
        "spec_accepted_tokens",
        "spec_drafts",
        1.0,
        "tokens",
        "tokens per target step: 1 + accepted / drafts (as vllm bench serve)",
    ),
    "prefix_cache_hit_rate": (
        "prefix_cache_hits",
        "prefix_cache_queries",
        0.0,
        "fraction",
        "prompt tokens served from the prefix cache",
    ),
}


_SAMPLE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)(?:\{(.*)\})?\s+(\S+)(?:\s+\d+)?$")


_LABEL = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"')


def parse_prometheus(text: str) -> list[tuple[str, dict[str, str], float]]:
    """(name, labels, value) of every sample line of Prometheus' text exposition format."""
    out = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        m = _SAMPLE.match(line)
        if not m:
            continue
        try:
            value = float(m[3])
        except ValueError:
            continue
        out.append((m[1], dict(_LABEL.findall(m[2] or "")), value))
    return out


def sum_series(samples: list[tuple[str, dict[str, str], float]], name: str) -> float | None:
    """Sum of every series of metric `name` (e.g. over engines or labels); None when absent."""
    vals = [v for n, _, v in samples if n == name and math.isfinite(v)]
    return sum(vals) if vals else None


def by_names(samples: list[tuple[str, dict[str, str], float]], names: dict[str, str]) -> dict[str, float]:
    """{tradeoff's name: the sum of the engine metric it maps to} for each `names` entry the samples carry."""
    return {k: v for k, name in names.items() if (v := sum_series(samples, name)) is not None}
