"""Roofline: the host's memory bandwidth, measured once per run, and model bandwidth utilisation (MBU).

At batch size 1 every decode step reads all of the model's weights once, so decoding
is memory bound and

    MBU % = decode tokens/s x bytes read per token / memory bandwidth x 100,

with decode tokens/s = 1000 / TPOT (ms) at concurrency 1 and bytes per token = the
artifact's size (weights; the KV cache read is left out, small at these context
lengths). MBU near 100 % means the engine decodes as fast as the memory allows.

Bandwidth, and how it was obtained (`method`, stored with every MBU):
- CPU: a copy of a 256 MiB array to another, split over all cores in threads (numpy
  releases the GIL), best of 5; bytes moved = read + written. Like STREAM's copy, it is
  a practical ceiling, below the memory's data-sheet peak.
- GPU (NVML sees one): a device-to-device copy with torch when it is installed with
  CUDA; otherwise NVML's data-sheet figure, memory bus width x maximum memory clock x 2
  (double data rate), labelled as a specification, not a measurement.

`roofline_inputs` gathers a variant's MBU inputs: the bytes decoding reads per token
(tasks.engines.artifacts.model_bytes) and the bandwidth its engine decodes with.
"""

from __future__ import annotations

import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np

from tasks.engines.artifacts import model_bytes


@dataclass(frozen=True)
class Bandwidth:
    gb_s: float  # 1e9 bytes per second
    method: str  # how it was obtained


def cpu_copy_bandwidth(size_mib: int = 256, threads: int | None = None, repeats: int = 5) -> Bandwidth:
    """Memory bandwidth from copying a `size_mib` array with all cores, best of `repeats`."""
    threads = threads or os.cpu_count() or 1
    n = size_mib * (1 << 20) // 8
    src = np.ones(n, dtype=np.float64)
    dst = np.empty_like(src)
    bounds = np.linspace(0, n, threads + 1, dtype=np.int64)
    parts = [(slice(a, b)) for a, b in zip(bounds, bounds[1:])]
    best = float("inf")
    with ThreadPoolExecutor(threads) as pool:
        for _ in range(repeats):
            t0 = time.perf_counter()
            list(pool.map(lambda s: np.copyto(dst[s], src[s]), parts))
            best = min(best, time.perf_counter() - t0)
    return Bandwidth(
        2 * src.nbytes / best / 1e9,
        f"cpu: {threads}-thread copy of {size_mib} MiB (read + write bytes), best of {repeats}",
    )


def nvml_spec_bandwidth(nvml: Any, index: int = 0) -> Bandwidth:
    """Data-sheet bandwidth of GPU `index` from NVML: bus width (bits) x max memory clock (MHz) x 2."""
    h = nvml.nvmlDeviceGetHandleByIndex(index)
    bus_bits = nvml.nvmlDeviceGetMemoryBusWidth(h)
    mem_mhz = nvml.nvmlDeviceGetMaxClockInfo(h, nvml.NVML_CLOCK_MEM)
    return Bandwidth(
        bus_bits / 8 * mem_mhz * 1e6 * 2 / 1e9,
        f"gpu{index}: NVML specification (bus {bus_bits} bit x {mem_mhz} MHz x 2), not measured",
    )


def torch_copy_bandwidth(size_mib: int = 1024, repeats: int = 10) -> Bandwidth:
    """Device-to-device copy bandwidth on CUDA device 0 with torch."""
    import torch

    src = torch.ones(size_mib * (1 << 20) // 4, dtype=torch.float32, device="cuda")
    dst = torch.empty_like(src)
    dst.copy_(src)
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        dst.copy_(src)
        torch.cuda.synchronize()
        best = min(best, time.perf_counter() - t0)
    return Bandwidth(
        2 * src.numel() * 4 / best / 1e9,
        f"gpu0: torch device copy of {size_mib} MiB (read + write bytes), best of {repeats}",
    )


def gpu_bandwidth() -> Bandwidth | None:
    """GPU 0's bandwidth: measured with torch where it can, else NVML's specification; None without a GPU."""
    try:
        import pynvml

        pynvml.nvmlInit()
        if pynvml.nvmlDeviceGetCount() == 0:
            return None
    except Exception:  # noqa: BLE001 - no driver, no GPU
        return None
    try:
        import torch

        if torch.cuda.is_available():
            return torch_copy_bandwidth()
    except Exception:  # noqa: BLE001 - no torch or no CUDA build: fall back to the specification
        pass
    return nvml_spec_bandwidth(pynvml)


@lru_cache(maxsize=1)
def cpu_bandwidth() -> Bandwidth:
    """The CPU's memory bandwidth, measured once per process (a CPU engine's roofline, even on a GPU host)."""
    return cpu_copy_bandwidth()


@lru_cache(maxsize=1)
def host_bandwidth() -> Bandwidth:
    """The host's memory bandwidth, measured once per process (a nightly run is one process)."""
    return gpu_bandwidth() or cpu_bandwidth()


def mbu_pct(tpot_ms: float | None, model_bytes: int | None, bandwidth_gb_s: float | None) -> float | None:
    """Model bandwidth utilisation in % from the decode time per token (see the module docstring)."""
    if not tpot_ms or not model_bytes or not bandwidth_gb_s or tpot_ms <= 0:
        return None
    return (1000.0 / tpot_ms) * model_bytes / (bandwidth_gb_s * 1e9) * 100.0


def engine_bandwidth(bandwidth: Bandwidth | None, gpus: int | None) -> Bandwidth | None:
    """The memory bandwidth an engine decodes with: per-GPU bandwidth x its tensor-parallel GPUs."""
    if bandwidth is None or not gpus or gpus <= 1 or not bandwidth.method.startswith("gpu"):
        return bandwidth
    return Bandwidth(
        bandwidth.gb_s * gpus,
        f"{bandwidth.method}; x {gpus} GPUs (tensor parallel: every rank reads its share at once)",
    )


def roofline_inputs(engine, variant, artifact) -> tuple[int | None, str | None, Bandwidth | None]:
    """(model bytes, how counted, bandwidth) for the variant's MBU: none for a remote engine; the CPU's
    bandwidth for a CPU engine (not a GPU's); a GPU's x tensor parallelism for a GPU engine."""
    if not engine.runs_on_host:
        return None, None, None
    gpus = engine.gpu_count(variant, artifact)
    bandwidth = cpu_bandwidth() if gpus == 0 else host_bandwidth()
    nbytes, how = model_bytes(artifact)
    return nbytes, how, engine_bandwidth(bandwidth, gpus)
