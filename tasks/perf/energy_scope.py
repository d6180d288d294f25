"""Whose energy a perf sweep meters: the engine's own GPUs only, an idle baseline, and J/token above idle.

`tasks.perf.energy` reads counters; this module decides which ones belong to a variant:
- a hosted endpoint runs on the provider's hardware: no counter of this host is its energy, so
  its energy is always NULL with that reason;
- an engine on the CPU (llama.cpp without GPU layers, vLLM's CPU build): RAPL only, never the
  GPUs (their idle draw is not the engine's);
- an engine on GPUs: the NVML counters of its GPUs only. Its GPUs are the first `n` (its
  tensor-parallel ranks) of the devices CUDA_VISIBLE_DEVICES makes visible to its server,
  mapped to NVML indices by UUID: a `GPU-<uuid>` entry by its UUID (prefix, as CUDA accepts),
  an integer entry as CUDA's ordinal in PCI bus order (CUDA_DEVICE_ORDER=PCI_BUS_ID; CUDA's
  default FASTEST_FIRST is the same order on hosts of one GPU model). As CUDA does, an entry that
  names no device ends the list. MIG instances have no energy counter: NULL with the reason.
The idle baseline is the same counters over `idle_s` seconds with the server up and no request
in flight, before the sweep; the sweep's energy above idle is energy - idle power x window.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from tasks.perf.energy import EnergyWindow, NvmlMeter, RaplMeter, open_meter, per_token

HOSTED_NOTE = (
    "hosted endpoint: it runs on the provider's hardware, which no energy counter of this host measures; not measured"
)


@dataclass(frozen=True)
class GpuDevice:
    index: int  # NVML index
    uuid: str  # GPU-...
    pci_bus_id: str


def nvml_devices(nvml: Any) -> list[GpuDevice]:
    """Every GPU NVML sees, with its UUID and PCI bus id (sorted by NVML index)."""
    out = []
    for i in range(nvml.nvmlDeviceGetCount()):
        h = nvml.nvmlDeviceGetHandleByIndex(i)
        uuid = nvml.nvmlDeviceGetUUID(h)
        pci = nvml.nvmlDeviceGetPciInfo(h)
        bus = getattr(pci, "busIdLegacy", None) or getattr(pci, "busId", b"")
        out.append(
            GpuDevice(
                i,
                uuid.decode() if isinstance(uuid, bytes) else str(uuid),
                bus.decode() if isinstance(bus, bytes) else str(bus),
            )
        )
    return out


class NoEngineGpus(ValueError):
    """The engine's GPUs cannot be told apart from the others (or have no counter); the message says why."""


def visible_gpus(devices: list[GpuDevice], cuda_visible: str | None) -> list[GpuDevice]:
    """The devices CUDA shows a process with this CUDA_VISIBLE_DEVICES, in CUDA's order."""
    by_pci = sorted(devices, key=lambda d: d.pci_bus_id.lower())
    if cuda_visible is None:
        return by_pci
    out: list[GpuDevice] = []
    for entry in (e.strip() for e in cuda_visible.split(",")):
        if entry.startswith("MIG-"):
            raise NoEngineGpus(
                f"CUDA_VISIBLE_DEVICES entry {entry} is a MIG instance: NVML has no energy counter "
                f"for MIG instances; energy not measured"
            )
        if entry.startswith("GPU-"):
            match = [d for d in devices if d.uuid.startswith(entry)]
        elif entry.isdigit() and int(entry) < len(by_pci):
            match = [by_pci[int(entry)]]
        else:
            match = []
        if len(match) != 1 or match[0] in out:
            break  # CUDA ignores an invalid (or ambiguous, repeated) entry and every entry after it
        out.append(match[0])
    return out


def engine_gpus(devices: list[GpuDevice], cuda_visible: str | None, count: int) -> list[GpuDevice]:
    """The GPUs an engine with `count` ranks runs on: the first `count` visible ones."""
    visible = visible_gpus(devices, cuda_visible)
    if len(visible) < count:
        shown = "unset" if cuda_visible is None else repr(cuda_visible)
        raise NoEngineGpus(
            f"the engine uses {count} GPU(s) but CUDA_VISIBLE_DEVICES={shown} makes "
            f"{len(visible)} visible; energy not measured"
        )
    return visible[:count]


@dataclass
class EnergyScope:
    """Which meter a variant's perf sweep reads: `open_meter` for each window; `off_reason` turns energy off."""

    off_reason: str | None = None
    gpu_count: int | None = None  # None: unknown (every device, as before); 0: CPU only (RAPL)
    cuda_visible: str | None = None
    label: str | None = None  # what was metered, once a meter has opened
    nvml: Any = None  # tests pass a stand-in for pynvml
    rapl_root: str = "/sys/class/powercap"

    def engine_nvml(self) -> tuple[Any, list[GpuDevice]]:
        """pynvml, initialised, and the engine's GPUs: the first `gpu_count` visible ones, every GPU NVML sees when
        the count is unknown. Raises without a driver, NoEngineGpus when the engine's cannot be told apart."""
        nvml = self.nvml
        if nvml is None:
            import pynvml as nvml
        nvml.nvmlInit()
        devices = nvml_devices(nvml)
        return nvml, devices if self.gpu_count is None else engine_gpus(devices, self.cuda_visible, self.gpu_count)

    def open_meter(self) -> tuple[object | None, str | None]:
        """(meter, None) or (None, why): NVML on the engine's GPUs, RAPL for a CPU engine."""
        if self.off_reason:
            return None, self.off_reason
        if self.gpu_count is None:
            meter, note = open_meter() if self.nvml is None else (NvmlMeter(self.nvml), None)
            if meter is not None:
                self.label = f"{meter.source} {','.join(meter.devices)} (every device: the engine's are unknown)"
            return meter, note
        if self.gpu_count == 0:
            try:
                meter = RaplMeter(self.rapl_root)
            except Exception as err:  # noqa: BLE001 - any failure means: no CPU counter here
                return None, (
                    f"no energy meter for a CPU engine: rapl: {type(err).__name__}: {err}".strip()
                    + " (GPU counters are not the engine's)"
                )
            self.label = f"rapl {','.join(meter.devices)} (CPU engine)"
            return meter, None
        try:
            nvml, gpus = self.engine_nvml()
            meter = NvmlMeter(nvml, [g.index for g in gpus])
        except NoEngineGpus as err:
            return None, str(err)
        except Exception as err:  # noqa: BLE001 - no driver, no counter
            return None, f"no energy meter for a GPU engine: nvml: {type(err).__name__}: {err}".strip()
        shown = "unset" if self.cuda_visible is None else self.cuda_visible
        self.label = (
            f"nvml {','.join(meter.devices)} ({self.gpu_count} GPU(s) of the engine; "
            f"CUDA_VISIBLE_DEVICES={shown}; UUIDs {','.join(g.uuid for g in gpus)})"
        )
        return meter, None


def scope_for(engine: Any, variant: Any, artifact: Any, env: dict[str, str] | None = None) -> EnergyScope:
    """The energy scope of a variant: off for a remote engine, else its GPUs under this process's environment."""
    env = os.environ if env is None else env
    if not engine.runs_on_host:
        return EnergyScope(off_reason=HOSTED_NOTE)
    return EnergyScope(gpu_count=engine.gpu_count(variant, artifact), cuda_visible=env.get("CUDA_VISIBLE_DEVICES"))


@dataclass
class IdleBaseline:
    power_w: float | None  # mean over the window, all metered devices together (W)
    window_s: float | None
    note: str | None  # why power_w is None
    by_device_w: dict[str, float] = field(default_factory=dict)


def idle_baseline(
    scope: EnergyScope,
    seconds: float,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.perf_counter,
) -> IdleBaseline:
    """Mean power of the scope's devices over `seconds` with nothing sent (the server up and idle)."""
    if seconds <= 0:
        return IdleBaseline(None, None, "idle baseline off (perf.idle_baseline_s: 0)")
    meter, note = scope.open_meter()
    if meter is None:
        return IdleBaseline(None, None, note)
    with EnergyWindow(meter=meter, clock=clock) as window:
        sleep(seconds)
    r = window.reading
    if not r.window_s or r.energy_j is None:
        return IdleBaseline(None, None, "idle window too short to read")
    return IdleBaseline(
        r.energy_j / r.window_s, r.window_s, None, {d: j / r.window_s for d, j in r.by_device_j.items()}
    )


def idle_columns(
    summary: dict, windows_s: list[float | None], scope: EnergyScope, idle: IdleBaseline | None, tokens: int
) -> dict:
    """The perf_summary columns of migration 008: what was metered, idle power, energy and J/token above idle."""
    energy = summary.get("energy_j")
    out = {
        "energy_devices": scope.label if energy is not None else None,
        "idle_power_w": None,
        "idle_window_s": None,
        "energy_above_idle_j": None,
        "energy_j_per_token_above_idle": None,
        "idle_note": None,
    }
    if energy is None:
        out["idle_note"] = summary.get("energy_note") or scope.off_reason
        return out
    if idle is None or idle.power_w is None:
        out["idle_note"] = idle.note if idle is not None else "no idle baseline measured"
        return out
    window = sum(w or 0.0 for w in windows_s)
    above = energy - idle.power_w * window
    out.update(idle_power_w=idle.power_w, idle_window_s=idle.window_s, energy_above_idle_j=above)
    if above > 0:
        out["energy_j_per_token_above_idle"] = per_token(above, tokens)[0]
        if out["energy_j_per_token_above_idle"] is None:
            out["idle_note"] = "no output tokens in the window"
    else:
        out["idle_note"] = (
            f"energy above idle {above:.3g} J is not positive: the load drew no more than the idle "
            f"baseline ({idle.power_w:.3g} W) within the counters' noise"
        )
    return out
