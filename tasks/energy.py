"""Energy meters: NVML's cumulative GPU energy counter, or CPU RAPL; otherwise None with the reason.

A reading is always a difference of a hardware energy counter over the measured
window. Nothing here estimates energy from utilisation or TDP.
"""

from __future__ import annotations

import glob
import time
from dataclasses import dataclass
from pathlib import Path


@dataclass
class EnergyReading:
    energy_j: float | None
    mean_power_w: float | None
    source: str | None  # nvml | rapl | None
    note: str | None  # why energy_j is None


class _Nvml:
    source = "nvml"

    def __init__(self) -> None:
        import pynvml

        pynvml.nvmlInit()
        self._nvml = pynvml
        self._handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
        if not self._handles:
            raise RuntimeError("NVML sees no GPU")
        self.read()  # fails early on GPUs without an energy counter (pre-Volta)

    def read(self) -> float:
        return sum(self._nvml.nvmlDeviceGetTotalEnergyConsumption(h) for h in self._handles) / 1000.0  # mJ -> J


class _Rapl:
    source = "rapl"

    def __init__(self) -> None:
        zones = [Path(p) for p in sorted(glob.glob("/sys/class/powercap/intel-rapl:[0-9]*"))
                 if ":" not in Path(p).name.split("intel-rapl:", 1)[1]]  # packages only, not sub-zones
        if not zones:
            raise RuntimeError("no RAPL package zone under /sys/class/powercap")
        self._zones = zones
        self._max = [int((z / "max_energy_range_uj").read_text()) for z in zones]
        self._last = [int((z / "energy_uj").read_text()) for z in zones]  # PermissionError if unreadable
        self._acc = 0.0

    def read(self) -> float:
        now = [int((z / "energy_uj").read_text()) for z in self._zones]
        for i, (a, b) in enumerate(zip(self._last, now)):
            self._acc += (b - a) if b >= a else (b + self._max[i] - a)  # counter wrapped
        self._last = now
        return self._acc / 1e6


def open_meter() -> tuple[object | None, str | None]:
    """The first meter that works (NVML, then RAPL), or None and the reasons each failed."""
    reasons = []
    for cls in (_Nvml, _Rapl):
        try:
            return cls(), None
        except Exception as err:  # noqa: BLE001 - any failure means: no such meter here
            reasons.append(f"{cls.source}: {type(err).__name__}: {err}".strip())
    return None, "no energy meter: " + "; ".join(reasons)


class EnergyWindow:
    """Context manager: the energy counter's difference over the block."""

    def __init__(self) -> None:
        self.meter, self.note = open_meter()
        self.reading = EnergyReading(None, None, None, self.note)

    def __enter__(self) -> "EnergyWindow":
        self._t0 = time.perf_counter()
        self._e0 = self.meter.read() if self.meter else None
        return self

    def __exit__(self, *exc: object) -> None:
        if self.meter is None:
            return
        dt = time.perf_counter() - self._t0
        energy = self.meter.read() - self._e0
        self.reading = EnergyReading(energy, energy / dt if dt > 0 else None, self.meter.source, None)
