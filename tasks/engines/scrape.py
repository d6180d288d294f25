"""Engine metrics: read a server's own metrics while it is measured, and summarise them per phase.

Engines translate what their server exposes (vLLM: Prometheus text at /metrics; TensorRT-LLM:
JSON iteration stats at /metrics) into the names of `METRICS`: gauges are current values,
counters cumulative. `EngineMetricsSampler` reads them every `interval_s` in a background
thread while the perf sweep and the quality suites run, and `summarize` turns the readings of
each phase into rows of the `engine_metrics` table: gauges as mean and max over the readings,
counters as the difference over the phase, and ratios of counter differences (speculative
acceptance rate, prefix-cache hit rate). Pure functions apart from the sampler's thread.
"""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

from tasks.engines.base import Endpoint, Engine
from tasks.engines.prometheus import METRICS, RATIOS
from warehouse.contract import write_table


@dataclass
class Reading:
    t_s: float  # seconds since the sampler started
    phase: str
    values: dict[str, float]


@dataclass
class EngineMetricsSampler:
    """Reads `engine.scrape(endpoint)` every `interval_s` in a thread; `phase()` labels what follows."""

    engine: "Engine"
    endpoint: "Endpoint"
    interval_s: float = 1.0
    readings: list[Reading] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    _phase: str = "startup"
    _t0: float = field(default_factory=time.monotonic)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def read(self) -> None:
        try:
            values = self.engine.scrape(self.endpoint)
        except Exception as err:  # noqa: BLE001 - a failed scrape is noted, the measurement goes on
            self.errors.append(f"{type(err).__name__}: {err}".splitlines()[0][:200])
            return
        if values:
            with self._lock:
                self.readings.append(Reading(time.monotonic() - self._t0, self._phase, values))

    def phase(self, name: str) -> None:
        """End the current phase with a reading and start `name` with one (counters need both ends)."""
        if self._thread is None:
            self._phase = name
            return
        self.read()
        with self._lock:
            self._phase = name
        self.read()

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.read()

    def start(self) -> "EngineMetricsSampler":
        if self.engine.exposes_metrics():
            self._thread = threading.Thread(target=self._loop, name="engine-metrics", daemon=True)
            self._thread.start()
        return self

    def close(self) -> None:
        if self._thread is not None:
            self.read()
            self._stop.set()
            self._thread.join(timeout=self.interval_s + 10)


def summarize(readings: list[Reading], phases: tuple[str, ...] = ("perf", "quality")) -> list[dict]:
    """Rows of `engine_metrics` (without run/variant keys): per phase, gauges' mean and max, counters'
    difference over the phase, and the ratios of `RATIOS` where their denominator moved."""
    rows: list[dict] = []
    for phase in phases:
        rs = [r for r in readings if r.phase == phase]
        if not rs:
            continue
        window_s = rs[-1].t_s - rs[0].t_s
        deltas: dict[str, float] = {}
        for name, (kind, unit, desc) in METRICS.items():
            vals = [r.values[name] for r in rs if name in r.values]
            if not vals:
                continue
            base = {
                "phase": phase,
                "metric": name,
                "unit": unit,
                "readings": len(vals),
                "window_s": window_s,
                "description": desc,
            }
            if kind == "gauge":
                rows.append({**base, "stat": "mean", "value": sum(vals) / len(vals)})
                rows.append({**base, "stat": "max", "value": max(vals)})
            elif len(vals) >= 2:
                deltas[name] = max(vals[-1] - vals[0], 0.0)  # a restarted counter counts from 0
                rows.append({**base, "stat": "delta", "value": deltas[name]})
        for name, (num, den, offset, unit, desc) in RATIOS.items():
            if num in deltas and deltas.get(den):
                rows.append(
                    {
                        "phase": phase,
                        "metric": name,
                        "stat": "ratio",
                        "unit": unit,
                        "value": offset + deltas[num] / deltas[den],
                        "readings": len(rs),
                        "window_s": window_s,
                        "description": desc,
                    }
                )
    return rows


def engine_metric_rows(run_id: str, variant: str, engine: str, sampler: EngineMetricsSampler) -> list[dict]:
    """The sampler's summary as `engine_metrics` rows; one `scrape_errors` row when reads failed."""
    rows = [{"run_id": run_id, "variant": variant, "engine": engine, **r} for r in summarize(sampler.readings)]
    if sampler.errors:
        rows.append(
            {
                "run_id": run_id,
                "variant": variant,
                "engine": engine,
                "phase": "all",
                "metric": "scrape_errors",
                "stat": "count",
                "unit": "count",
                "value": float(len(sampler.errors)),
                "readings": None,
                "window_s": None,
                "description": "metric reads that failed",
                "note": sampler.errors[0],
            }
        )
    return rows


def write_engine_metrics(
    results_dir: Path, run_id: str, variant: str, engine: str, sampler: EngineMetricsSampler
) -> int:
    """Write the variant's `engine_metrics` part; returns its row count."""
    rows = engine_metric_rows(run_id, variant, engine, sampler)
    write_table(results_dir, "engine_metrics", variant, rows)
    return len(rows)


@contextmanager
def scraping(
    engine: "Engine", endpoint: "Endpoint", results_dir: Path, run_id: str, variant: str, interval_s: float = 1.0
) -> Iterator[EngineMetricsSampler]:
    """Sample the engine's metrics inside the block; its `engine_metrics` part is written on exit, also on failure."""
    sampler = EngineMetricsSampler(engine, endpoint, interval_s).start()
    try:
        yield sampler
    finally:
        sampler.close()
        write_engine_metrics(results_dir, run_id, variant, engine.name, sampler)
