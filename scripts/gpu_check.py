"""The GPU checks of issue 17 in one run (under 10 minutes on one H200): what a CPU host cannot verify.

    python scripts/gpu_check.py [--out DIR] [--idle-s 10] [--load-s 30]

Needs an NVIDIA GPU, torch with CUDA and nvidia-ml-py (pynvml), and this checkout installed
(`pip install --no-deps -e .`, or PYTHONPATH set to the checkout); no network, no vLLM or TensorRT-LLM.
It uses tradeoff's own code paths (tasks.perf.energy, tasks.perf.energy_scope, tasks.perf.roofline) and checks:
1. device selection: the engine's GPU found by UUID (CUDA_VISIBLE_DEVICES as set, or unset) is the GPU
   torch computes on (torch's device UUID), and a UUID that matches no GPU gives NULL with the reason;
2. the idle baseline: the selected GPU's mean power over `--idle-s` seconds with nothing running;
3. an NVML energy window under a real load (bf16 matrix multiplications for `--load-s` seconds): the
   counter difference against the power samples integrated over time (they must agree within 10 %),
   and the energy above idle;
4. the roofline: torch's device-to-device copy bandwidth against NVML's data-sheet figure, and MBU
   computed the way perf sweeps compute it, for a memory-bound "decode" (a matrix-vector product over
   `--weights-gib` of bf16 weights, one read per step), which must land between 30 and 100 %.
Writes gpu_check.json (every figure) into --out (default: $OUT, else the working directory) and prints
one line per check; exits 1 when a check fails, 2 when there is no GPU.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from tasks.perf.energy import EnergyWindow
from tasks.perf.energy_scope import EnergyScope, engine_gpus, idle_baseline, nvml_devices
from tasks.perf.roofline import mbu_pct, nvml_spec_bandwidth, torch_copy_bandwidth


def check(results: dict, name: str, ok: bool, line: str) -> None:
    results["checks"][name] = {"ok": bool(ok), "detail": line}
    print(f"{'ok  ' if ok else 'FAIL'} {name}: {line}", flush=True)


def device_selection(results: dict, nvml, torch) -> EnergyScope:
    devices = nvml_devices(nvml)
    results["nvml_devices"] = [d.__dict__ for d in devices]
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    torch_uuid = "GPU-" + str(torch.cuda.get_device_properties(0).uuid)
    (chosen,) = engine_gpus(devices, visible, 1)
    check(
        results,
        "device_selection",
        chosen.uuid == torch_uuid,
        f"CUDA_VISIBLE_DEVICES={visible!r} -> NVML index {chosen.index} {chosen.uuid}; torch device 0 is {torch_uuid}",
    )
    by_uuid = EnergyScope(gpu_count=1, cuda_visible=chosen.uuid[:12], nvml=nvml)
    meter, note = by_uuid.open_meter()
    check(
        results,
        "device_by_uuid_prefix",
        meter is not None and meter.devices == [f"gpu{chosen.index}"],
        f"CUDA_VISIBLE_DEVICES={chosen.uuid[:12]} -> {by_uuid.label or note}",
    )
    missing = EnergyScope(gpu_count=1, cuda_visible="GPU-00000000-0000", nvml=nvml)
    meter, note = missing.open_meter()
    check(results, "unknown_uuid_is_null", meter is None and "makes 0 visible" in (note or ""), str(note))
    return EnergyScope(gpu_count=1, cuda_visible=visible, nvml=nvml)


def idle(results: dict, scope: EnergyScope, seconds: float):
    base = idle_baseline(scope, seconds)
    results["idle"] = {
        "power_w": base.power_w,
        "window_s": base.window_s,
        "note": base.note,
        "by_device_w": base.by_device_w,
    }
    check(
        results,
        "idle_baseline",
        base.power_w is not None and 10 < base.power_w < 400,
        f"{base.power_w:.1f} W over {base.window_s:.1f} s on {scope.label}" if base.power_w else str(base.note),
    )
    return base


def load_window(results: dict, scope: EnergyScope, torch, seconds: float, base) -> None:
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    torch.cuda.synchronize()
    steps = 0
    with EnergyWindow(0.1, opener=scope.open_meter) as w:
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            for _ in range(20):
                a @ b
            torch.cuda.synchronize()
            steps += 20
    r = w.reading
    tflops = steps * 2 * 8192**3 / (r.window_s or 1) / 1e12
    # The counter's difference against the power samples integrated over time (trapezoids).
    samples = sorted((s.t_s, s.power_w) for s in w.samples if s.power_w is not None)
    integral = sum((t1 - t0_) * (p0 + p1) / 2 for (t0_, p0), (t1, p1) in zip(samples, samples[1:]))
    covered = samples[-1][0] - samples[0][0] if len(samples) > 1 else 0.0
    counter_j = r.energy_j * covered / r.window_s if r.energy_j and r.window_s else None
    results["load"] = {
        "energy_j": r.energy_j,
        "window_s": r.window_s,
        "mean_power_w": r.mean_power_w,
        "by_device_j": r.by_device_j,
        "samples": len(w.samples),
        "bf16_tflops": tflops,
        "power_integral_j": integral,
        "counter_j_over_sampled_span": counter_j,
        "above_idle_j": (r.energy_j - base.power_w * r.window_s) if base.power_w else None,
    }
    check(
        results,
        "energy_window_under_load",
        r.energy_j is not None and r.mean_power_w > (base.power_w or 0) * 1.5,
        f"{r.energy_j:.0f} J in {r.window_s:.1f} s = {r.mean_power_w:.0f} W mean ({tflops:.0f} bf16 TFLOP/s); "
        f"idle {base.power_w or float('nan'):.0f} W; "
        f"above idle {results['load']['above_idle_j'] or float('nan'):.0f} J",
    )
    agree = counter_j is not None and integral > 0 and abs(counter_j - integral) / integral < 0.10
    check(
        results,
        "counter_vs_power_samples",
        agree,
        f"counter {counter_j or float('nan'):.0f} J vs power samples integrated {integral:.0f} J over {covered:.1f} s "
        f"({len(samples)} samples)",
    )


def roofline(results: dict, nvml, torch, weights_gib: float) -> None:
    copy = torch_copy_bandwidth(size_mib=2048, repeats=10)
    spec = nvml_spec_bandwidth(nvml, 0)
    results["bandwidth"] = {
        "copy_gb_s": copy.gb_s,
        "copy_method": copy.method,
        "spec_gb_s": spec.gb_s,
        "spec_method": spec.method,
    }
    check(
        results,
        "bandwidth",
        0.5 * spec.gb_s < copy.gb_s <= 1.05 * spec.gb_s,
        f"torch copy {copy.gb_s:.0f} GB/s vs NVML specification {spec.gb_s:.0f} GB/s ({copy.gb_s / spec.gb_s:.0%})",
    )
    # A memory-bound decode step: y = W x over `weights_gib` of bf16 weights, W read once per step.
    rows = int(weights_gib * (1 << 30) / 2 / 8192)
    w = torch.randn(rows, 8192, device="cuda", dtype=torch.bfloat16)
    x = torch.randn(8192, 1, device="cuda", dtype=torch.bfloat16)
    for _ in range(5):
        w @ x
    torch.cuda.synchronize()
    n = 200
    t0 = time.perf_counter()
    for _ in range(n):
        w @ x
    torch.cuda.synchronize()
    tpot_ms = (time.perf_counter() - t0) / n * 1000.0
    model_bytes = w.numel() * 2
    mbu = mbu_pct(tpot_ms, model_bytes, copy.gb_s)
    results["roofline"] = {
        "weights_bytes": model_bytes,
        "step_ms": tpot_ms,
        "mbu_pct_vs_copy": mbu,
        "mbu_pct_vs_spec": mbu_pct(tpot_ms, model_bytes, spec.gb_s),
    }
    check(
        results,
        "mbu_of_a_memory_bound_decode",
        mbu is not None and 30 <= mbu <= 100,
        f"{model_bytes / 1e9:.1f} GB read per step in {tpot_ms:.3f} ms: MBU {mbu:.1f} % of the copy bandwidth, "
        f"{results['roofline']['mbu_pct_vs_spec']:.1f} % of the specification",
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.environ.get("OUT") or ".")
    ap.add_argument("--idle-s", type=float, default=10.0)
    ap.add_argument("--load-s", type=float, default=30.0)
    ap.add_argument("--weights-gib", type=float, default=8.0)
    a = ap.parse_args(argv)
    try:
        import pynvml as nvml
        import torch

        nvml.nvmlInit()
        if not torch.cuda.is_available() or nvml.nvmlDeviceGetCount() == 0:
            raise RuntimeError("torch sees no CUDA device or NVML sees no GPU")
    except Exception as err:  # noqa: BLE001 - no GPU here: nothing to check
        print(f"no GPU: {type(err).__name__}: {err}", file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    results: dict = {
        "checks": {},
        "gpu": nvml.nvmlDeviceGetName(nvml.nvmlDeviceGetHandleByIndex(0)),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
    }
    scope = device_selection(results, nvml, torch)
    base = idle(results, scope, a.idle_s)
    load_window(results, scope, torch, a.load_s, base)
    roofline(results, nvml, torch, a.weights_gib)
    results["took_s"] = time.perf_counter() - t0
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "gpu_check.json").write_text(json.dumps(results, indent=1, default=str))
    failed = [k for k, v in results["checks"].items() if not v["ok"]]
    print(
        f"{len(results['checks']) - len(failed)} of {len(results['checks'])} checks ok in {results['took_s']:.0f} s; "
        f"{out / 'gpu_check.json'}"
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
