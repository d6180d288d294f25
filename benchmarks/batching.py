"""Benchmark: does concurrency above 1 batch? The demo's reference weights on both llama.cpp servers.

llama-cpp-python's server answers one request at a time, so at concurrency 2 the second request waits: output
throughput stays flat and TTFT grows by a whole request. llama.cpp's own server (engine llama-server) decodes every
busy slot in one batch per step: throughput rises with concurrency and each request's TPOT with it (the knee).
For each engine and concurrency, `tradeoff perf` as a user runs it (same prompts, seed 0, fixed output length,
one warm-up request), in alternating rounds (noise on 2 shared cores is ~15 % run to run). Prints output tok/s,
mean TPOT and TTFT per (engine, concurrency), the median over rounds, and each engine's throughput over its c1.

Usage: .venv/bin/python benchmarks/batching.py [--rounds 2] [--concurrency 1 2 4] [--num-prompts 8]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

from common import tradeoff_perf, variant_server

ENGINES = {"llama-server": None, "llama.cpp": "llama.cpp"}  # the demo's reference as configured; its llama.cpp twin


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1, 2, 4])
    ap.add_argument("--num-prompts", type=int, default=8)
    ap.add_argument("--input-len", type=int, default=128)
    ap.add_argument("--output-len", type=int, default=64)
    a = ap.parse_args()
    rows: dict[tuple[str, int], list[dict]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for r in range(a.rounds):
            for label, engine_name in ENGINES.items():
                with variant_server(work / f"{label}-{r}.log", engine_name=engine_name) as (url, model, art):
                    for c in a.concurrency:
                        args = ["--endpoint", url, "--model", model, "--tokenizer", str(art.path), "--seed", "0"]
                        args += ["--concurrency", str(c), "--num-prompts", str(a.num_prompts * c)]
                        args += ["--input-len", str(a.input_len), "--output-len", str(a.output_len)]
                        (res,) = tradeoff_perf([*args, "--warmup", "1"], work / f"{label}-{r}-{c}.json")
                        rows.setdefault((label, c), []).append(res)
                        print(
                            f"round {r} {label:<12} c{c}: {res['output_throughput']:6.1f} tok/s, "
                            f"TPOT {res['mean_tpot_ms']:6.1f} ms, TTFT {res['mean_ttft_ms']:7.1f} ms",
                            flush=True,
                        )
    print(f"\nmedian over {a.rounds} rounds ({a.num_prompts} requests per concurrent slot, {a.output_len} tokens each)")
    print(f"{'engine':<13}{'c':>3}{'tok/s':>9}{'x c1':>7}{'TPOT ms':>9}{'TTFT ms':>9}")
    for label in ENGINES:
        base = statistics.median(x["output_throughput"] for x in rows[(label, a.concurrency[0])])
        for c in a.concurrency:
            rs = rows[(label, c)]
            tput = statistics.median(x["output_throughput"] for x in rs)
            tpot = statistics.median(x["mean_tpot_ms"] for x in rs)
            ttft = statistics.median(x["mean_ttft_ms"] for x in rs)
            print(f"{label:<13}{c:>3}{tput:>9.1f}{tput / base:>7.2f}{tpot:>9.1f}{ttft:>9.1f}")


if __name__ == "__main__":
    main()
