"""Energy meters: NVML's cumulative GPU energy counter, or CPU RAPL; otherwise None with the reason.

A reading is always a difference of a hardware energy counter over the measured
window, per device (each GPU; each RAPL package) and in total. Power is sampled at a
fixed interval into a time series while the window is open: NVML's power reading per
GPU, or for RAPL the counter's difference over the interval. Nothing here estimates
energy from utilisation or TDP; where there is no counter, energy is None and `note`
says why.
"""

from __future__ import annotations

import glob
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable


@dataclass
class EnergyReading:
    energy_j: float | None
    mean_power_w: float | None
    source: str | None  # nvml | rapl | None
    note: str | None  # why energy_j is None
    by_device_j: dict[str, float] = field(default_factory=dict)  # joules per GPU / RAPL package
    window_s: float | None = None


@dataclass
class PowerSample:
    t_s: float  # from the window's start
    device: str  # gpu0, package-0, ...
    power_w: float | None
    energy_j: float | None  # counter since the window's start


class NvmlMeter:
    """The GPUs of NVML indices `indices` (default: all it sees). `nvml` is the pynvml module; tests pass a
    stand-in with the same calls. Devices are named by NVML index (gpu3), whatever CUDA calls them."""

    source = "nvml"

    def __init__(self, nvml: Any = None, indices: list[int] | None = None) -> None:
        if nvml is None:
            import pynvml as nvml
        nvml.nvmlInit()
        self._nvml = nvml
        indices = list(range(nvml.nvmlDeviceGetCount())) if indices is None else list(indices)
        self._handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in indices]
        if not self._handles:
            raise RuntimeError("NVML sees no GPU")
        self.devices = [f"gpu{i}" for i in indices]
        self.read_devices()  # fails early on GPUs without an energy counter (pre-Volta)

    def read_devices(self) -> list[float]:
        """Each GPU's cumulative energy counter, in joules (NVML counts millijoules)."""
        return [self._nvml.nvmlDeviceGetTotalEnergyConsumption(h) / 1000.0 for h in self._handles]

    def power_w(self) -> list[float] | None:
        """Each GPU's power draw now, in watts (NVML reports milliwatts)."""
        return [self._nvml.nvmlDeviceGetPowerUsage(h) / 1000.0 for h in self._handles]


class RaplMeter:
    """The CPU packages' energy counters of Intel RAPL under `root` (powercap), in joules since the meter opened."""

    source = "rapl"

    def __init__(self, root: str = "/sys/class/powercap") -> None:
        zones = [
            Path(p)
            for p in sorted(glob.glob(f"{root}/intel-rapl:[0-9]*"))
            if ":" not in Path(p).name.split("intel-rapl:", 1)[1]
        ]  # packages only, not sub-zones
        if not zones:
            raise RuntimeError(f"no RAPL package zone under {root}")
        self._zones = zones
        self.devices = [self._name(z) for z in zones]
        self._max = [int((z / "max_energy_range_uj").read_text()) for z in zones]
        self._last = [int((z / "energy_uj").read_text()) for z in zones]  # PermissionError if unreadable
        self._acc = [0.0] * len(zones)

    @staticmethod
    def _name(zone: Path) -> str:
        try:
            return (zone / "name").read_text().strip()
        except OSError:
            return zone.name

    def read_devices(self) -> list[float]:
        """Each package's energy since this meter opened, in joules (counters wrap at max_energy_range_uj)."""
        now = [int((z / "energy_uj").read_text()) for z in self._zones]
        for i, (a, b) in enumerate(zip(self._last, now)):
            self._acc[i] += (b - a) if b >= a else (b + self._max[i] - a)
        self._last = now
        return [a / 1e6 for a in self._acc]

    def power_w(self) -> list[float] | None:
        return None  # RAPL has no power reading: the sampler uses the counter's difference


def open_meter() -> tuple[object | None, str | None]:
    """The first meter that works (NVML, then RAPL), or None and the reasons each failed."""
    reasons = []
    for cls in (NvmlMeter, RaplMeter):
        try:
            return cls(), None
        except Exception as err:  # noqa: BLE001 - any failure means: no such meter here
            reasons.append(f"{cls.source}: {type(err).__name__}: {err}".strip())
    return None, "no energy meter: " + "; ".join(reasons)


def per_token(energy_j: float | None, tokens: int | None) -> tuple[float | None, float | None]:
    """(joules per output token, output tokens per joule); None where either side is missing or 0."""
    if energy_j is None or not tokens or energy_j <= 0:
        return None, None
    return energy_j / tokens, tokens / energy_j


class EnergyWindow:
    """Context manager: the energy counters' difference over the block, and power sampled every `interval_s`.

    `meter` overrides the detected one (tests pass a meter over a stand-in counter); `opener` detects
    it otherwise (default: NVML's every GPU, then RAPL; `tasks.perf.energy_scope` passes the engine's own);
    `clock` is the time source in seconds; `off_reason` turns metering off, with that reason.
    """

    def __init__(
        self,
        interval_s: float | None = None,
        meter: object | None = None,
        clock: Callable[[], float] = time.perf_counter,
        off_reason: str | None = None,
        opener: Callable[[], tuple[object | None, str | None]] | None = None,
    ) -> None:
        if off_reason:  # e.g. the server runs on another host: this host's counters would not be its energy
            self.meter, self.note = None, off_reason
        else:
            self.meter, self.note = (meter, None) if meter is not None else (opener or open_meter)()
        self.reading = EnergyReading(None, None, None, self.note)
        self.samples: list[PowerSample] = []
        self._interval = interval_s
        self._clock = clock
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> "EnergyWindow":
        self._t0 = self._clock()
        if self.meter is None:
            return self
        self._e0 = self.meter.read_devices()
        self._prev = (self._t0, self._e0)
        if self._interval:
            self._thread = threading.Thread(target=self._sample_loop, name="power-sampler", daemon=True)
            self._thread.start()
        return self

    def sample(self) -> None:
        """Record one power sample per device now."""
        t, e = self._clock(), self.meter.read_devices()
        power = self.meter.power_w()
        t_prev, e_prev = self._prev
        for i, dev in enumerate(self.meter.devices):
            p = power[i] if power is not None else ((e[i] - e_prev[i]) / (t - t_prev) if t > t_prev else None)
            self.samples.append(PowerSample(t - self._t0, dev, p, e[i] - self._e0[i]))
        self._prev = (t, e)

    def _sample_loop(self) -> None:
        while not self._stop.wait(self._interval):
            try:
                self.sample()
            except Exception:  # noqa: BLE001 - a failed sample is a gap in the series, not a failed run
                continue

    def __exit__(self, *exc: object) -> None:
        if self.meter is None:
            return
        if self._thread:
            self._stop.set()
            self._thread.join()
        dt = self._clock() - self._t0
        e1 = self.meter.read_devices()
        by_device = {d: b - a for d, a, b in zip(self.meter.devices, self._e0, e1)}
        energy = sum(by_device.values())
        self.reading = EnergyReading(energy, energy / dt if dt > 0 else None, self.meter.source, None, by_device, dt)
