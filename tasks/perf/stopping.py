"""Stopping rules of an open-loop step (rate, trace): small objects the step's load loop asks in turn, each with a
name, the inputs it reads (a `LoadWatch`: requests in flight over time, each answered request's send time and
TTFT) and the reason it reports; the step stores which one stopped it (perf_summary.stop_reason).

Over-saturation (after guidellm's detector): a step whose queue keeps growing, requests in flight and TTFT
rising together, is stopped instead of running out its budget, and marked saturated. Over the last `window_s`
seconds, once the step has run `min_duration_s`: the least-squares slopes of requests in flight on time and of
TTFT are both above zero at the rule's confidence (slope - z x its standard error > 0), and in flight grew over
the window by at least `min_growth` requests and by half its mean. TTFT is read two ways, either one rising
enough: the answered requests' TTFT on their send times, and the longest wait of a sent request for its first
token, sampled on time (on a server far behind, answers come too rarely to show the rise; the waits show it).
A server below its capacity drains every burst: its in-flight count returns to its mean, so the slope over a
window longer than its bursts does not stay significant.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Protocol, Sequence

import numpy as np

from tasks.core.config import SaturationSpec

OVER_SATURATION = "over_saturation"


@dataclass
class LoadWatch:
    """What a step's load loop has seen so far (seconds from the step's start)."""

    in_flight: list[tuple[float, int]] = field(default_factory=list)  # (t_s, requests in flight), sampled
    ttfts: list[tuple[float, float]] = field(default_factory=list)  # (send t_s, TTFT ms) of answered requests
    # (t_s, ms) the longest any sent request had waited for its first token, sampled: TTFT as it builds up, before
    # the answers that would show it come
    oldest_wait: list[tuple[float, float]] = field(default_factory=list)
    stop_reason: str | None = None
    stopped_at_s: float | None = None
    saturated: bool = False


class StopRule(Protocol):
    name: str

    def check(self, watch: LoadWatch, now_s: float) -> str | None:
        """Why the step should stop now, or None."""
        ...


def slope_bound(points: Sequence[tuple[float, float]], z: float) -> tuple[float, float] | None:
    """(slope, its lower confidence bound slope - z x standard error) of y on x; None under 3 points or no spread."""
    if len(points) < 3:
        return None
    x = np.asarray([p[0] for p in points], dtype=float)
    y = np.asarray([p[1] for p in points], dtype=float)
    sxx = float(((x - x.mean()) ** 2).sum())
    if sxx <= 0:
        return None
    slope = float(((x - x.mean()) * (y - y.mean())).sum() / sxx)
    resid = y - (y.mean() + slope * (x - x.mean()))
    se = math.sqrt(float((resid**2).sum()) / (len(points) - 2) / sxx)
    return slope, slope - z * se


@dataclass
class OverSaturation:
    """Stops a step whose requests in flight and TTFT rise together (module doc)."""

    spec: SaturationSpec
    name: str = OVER_SATURATION

    def check(self, watch: LoadWatch, now_s: float) -> str | None:
        s = self.spec
        if now_s < s.min_duration_s:
            return None
        lo = now_s - s.window_s
        flight = [(t, float(n)) for t, n in watch.in_flight if t >= lo]
        ttft = [(t, v) for t, v in watch.ttfts if t >= lo]
        wait = [(t, v) for t, v in watch.oldest_wait if t >= lo]
        z = _z(s.confidence)
        f = slope_bound(flight, z)
        # TTFT rising: the answered requests' TTFT on their send times, or the wait for a first token on time
        rising = [(name, b) for name, b in (("TTFT", slope_bound(ttft, z)), ("first-token wait", slope_bound(wait, z)))]
        rising = [(name, b) for name, b in rising if b is not None and b[1] > 0]
        if f is None or f[1] <= 0 or not rising:
            return None
        name, t = rising[0]
        span = flight[-1][0] - flight[0][0]
        growth = f[0] * span
        mean = float(np.mean([n for _, n in flight]))
        if growth < max(s.min_growth, 0.5 * mean):
            return None
        return (
            f"saturated at {now_s:.1f} s: over the last {span:.0f} s requests in flight rose {f[0]:.2f}/s "
            f"(to ~{flight[-1][1]:.0f}) and {name} {t[0]:.0f} ms/s, both above 0 at {s.confidence:.0%}"
        )


def _z(confidence: float) -> float:
    from scipy.stats import norm

    return float(norm.ppf(confidence))


def stop_rules(spec: SaturationSpec | None) -> list[StopRule]:
    """The rules an open-loop step asks, from the config (none when saturation detection is off)."""
    return [OverSaturation(spec)] if spec is not None and spec.enabled else []
