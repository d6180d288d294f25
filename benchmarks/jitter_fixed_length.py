"""Benchmark: the jitter figure on a fixed-length workload vs a length-spread one, on the demo's llama.cpp server.

`tradeoff perf` with `--len-spread` runs the configured concurrency-1 step on spread lengths
and, with `--jitter auto`, the fixed-length `jitter` scenario beside it (tasks/perf/jitter.py).
Prints for both: TTFT and ITL CV pooled over the repeats (the old figure) and the median of
the per-repeat CVs with its interval (the new one).

Usage: .venv/bin/python benchmarks/jitter_fixed_length.py [--repeats 3] [--num-prompts 8] [--len-spread 0.2]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from common import demo_server, tradeoff_perf


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--num-prompts", type=int, default=8)
    ap.add_argument("--len-spread", type=float, default=0.2)
    ap.add_argument("--input-len", type=int, default=128)
    ap.add_argument("--output-len", type=int, default=32)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="tradeoff-bench-jitter-"))
    with demo_server(work) as (url, model, gguf):
        rows = tradeoff_perf(
            [
                "--endpoint",
                url,
                "--model",
                model,
                "--concurrency",
                "1",
                "--repeats",
                str(args.repeats),
                "--num-prompts",
                str(args.num_prompts),
                "--len-spread",
                str(args.len_spread),
                "--input-len",
                str(args.input_len),
                "--output-len",
                str(args.output_len),
                "--warmup",
                "1",
                "--tokenizer",
                str(gguf),
                "--jitter",
                "auto",
            ],
            work / "r.json",
        )
    print(
        f"SmolLM2-135M Q4_1 on llama.cpp, concurrency 1, {args.repeats} repeats x {args.num_prompts} requests, "
        f"{args.input_len} -> {args.output_len} tokens"
    )
    f = lambda v: "NULL" if v is None else f"{v:.1f}"
    print(
        f"{'scenario':<9} {'lengths':<12} {'TTFT CV pooled':>15} {'TTFT CV median (CI)':>26} {'ITL CV pooled':>14} "
        f"{'ITL CV median (CI)':>26}"
    )
    for r in rows:
        lengths = "fixed" if r["scenario"] == "jitter" else f"+-{args.len_spread:.0%}"
        med = {
            m: f"{f(r[f'{m}_cv_pct_median'])} "
            f"({f(r[f'{m}_cv_pct_median_ci_low'])}..{f(r[f'{m}_cv_pct_median_ci_high'])})"
            for m in ("ttft", "itl")
        }
        print(
            f"{r['scenario']:<9} {lengths:<12} {f(r['ttft_cv_pct_pooled']):>15} {med['ttft']:>26} "
            f"{f(r['itl_cv_pct_pooled']):>14} "
            f"{med['itl']:>26}"
        )
    print(f"(raw results in {work})")


if __name__ == "__main__":
    main()
