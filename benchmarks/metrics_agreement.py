"""Benchmark: at concurrency 4 on vLLM-CPU, both tools' mean TTFT and E2EL against the server's own /metrics.

At c=4 on 2 cores the server's speed moves by tens of % between runs, so comparing the two
tools run against run cannot settle whether they measure alike. The server's own histograms
can: vLLM's `vllm:time_to_first_token_seconds` and `vllm:e2e_request_latency_seconds` are
read from /metrics before and after each tool's run, and their sums and counts' differences
give the server's mean TTFT and E2EL over exactly that run's requests. Each tool's mean (its
JSON's `mean_ttft_ms`, `mean_e2el_ms`: vLLM's definitions on both sides) is then compared with
the server's for the same window (target: within 2 %). A client's figure holds the HTTP path on
top of the server's (request parsing before the server's clock starts, the chunk's way back),
so it sits a little above the server's; what matters is that the two tools sit alike.

The server is configs/vllm-cpu.yaml's `vllm-q4_1` (the demo's Q4_1 weights dequantized into a
float32 checkpoint, built once and cached), started as the nightly starts it. Runs go in ABBA
order with a cool-down before each; vllm bench serve skips its single-prompt test request
(--ready-check-timeout-sec 0) so its window holds only the measured requests, as tradeoff's does
(--warmup 0).

Usage: make vllm-cpu && .venv/bin/python benchmarks/metrics_agreement.py [--runs 4] [--num-prompts 16]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

from agreement import write_prompts
from common import hf_tokenizer_dir, tradeoff_perf, tradeoff_perf_sharegpt, variant_server, vllm_bench_sharegpt

HISTOGRAMS = {"ttft": "vllm:time_to_first_token_seconds", "e2el": "vllm:e2e_request_latency_seconds"}


def histogram_totals(base_url: str) -> dict[str, tuple[float, float]]:
    """(sum in seconds, count) of each histogram in HISTOGRAMS, over all label sets."""
    from tasks import client
    from tasks.engines.prometheus import parse_prometheus

    samples = parse_prometheus(client.get(base_url, "/metrics").text)
    out = {}
    for key, name in HISTOGRAMS.items():
        total = sum(v for n, _, v in samples if n == name + "_sum")
        count = sum(v for n, _, v in samples if n == name + "_count")
        out[key] = (total, count)
    return out


def window_means(before: dict, after: dict) -> dict[str, tuple[float | None, int]]:
    """The server's mean (ms) of each histogram between two readings, and how many requests it holds."""
    out = {}
    for key in HISTOGRAMS:
        d_sum, d_count = after[key][0] - before[key][0], after[key][1] - before[key][1]
        out[key] = (d_sum / d_count * 1000 if d_count else None, int(d_count))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=4, help="runs per tool, in ABBA order")
    ap.add_argument("--num-prompts", type=int, default=16)
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--input-len", type=int, default=128)
    ap.add_argument("--output-len", type=int, default=64)
    ap.add_argument("--cooldown-s", type=float, default=10.0)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="tradeoff-bench-metrics-"))
    rows: dict[str, list[dict]] = {"tradeoff perf": [], "vllm bench serve": []}
    serve = variant_server(work / "vllm.server.log", "vllm-cpu.yaml", "vllm-q4_1", timeout_s=600)
    with serve as (url, model, art):
        gguf = Path(art.meta["tokenizer_gguf"])  # the GGUF the checkpoint was dequantized from: its tokenizer
        prompts = work / "prompts.sharegpt.json"
        write_prompts(gguf, prompts, args.num_prompts, args.input_len, seed=0)
        tok_dir = hf_tokenizer_dir(gguf, work / "hf-tokenizer")
        # a first request so neither tool's first run pays for a cold server
        tradeoff_perf(
            [
                "--endpoint",
                url,
                "--model",
                model,
                "--concurrency",
                "1",
                "--num-prompts",
                "2",
                "--warmup",
                "0",
                "--output-len",
                "8",
            ],
            work / "warm.json",
        )
        for run in range(args.runs):
            for tool in ("tradeoff", "vllm") if run % 2 == 0 else ("vllm", "tradeoff"):
                time.sleep(args.cooldown_s)
                before = histogram_totals(url)
                t0 = time.perf_counter()
                if tool == "tradeoff":
                    r = tradeoff_perf_sharegpt(
                        url,
                        model,
                        gguf,
                        prompts,
                        args.output_len,
                        args.num_prompts,
                        args.concurrency,
                        work / f"tradeoff-{run}.json",
                    )
                    name = "tradeoff perf"
                else:
                    r = vllm_bench_sharegpt(
                        url,
                        model,
                        tok_dir,
                        prompts,
                        args.output_len,
                        args.num_prompts,
                        args.concurrency,
                        work / f"vllm-{run}.json",
                    )
                    name = "vllm bench serve"
                took = time.perf_counter() - t0
                server = window_means(before, histogram_totals(url))
                row = {
                    "run": run + 1,
                    "server_ttft": server["ttft"][0],
                    "server_e2el": server["e2el"][0],
                    "server_requests": server["ttft"][1],
                    "completed": r["completed"],
                    "ttft": r["mean_ttft_ms"],
                    "e2el": r["mean_e2el_ms"],
                }
                rows[name].append(row)
                print(
                    f"run {run + 1} {name}: {r['completed']} completed, mean TTFT {row['ttft']:.1f} ms (server "
                    f"{row['server_ttft']:.1f}), mean E2EL {row['e2el']:.1f} ms (server {row['server_e2el']:.1f}), "
                    f"{server['ttft'][1]} requests in the window ({took:.0f} s)",
                    file=sys.stderr,
                )
    report(rows, args)
    print(f"(raw results in {work})")


def report(rows: dict[str, list[dict]], args: argparse.Namespace) -> None:
    pct = lambda a, b: (a / b - 1) * 100
    print(
        f"agreement with vLLM-CPU's own /metrics (SmolLM2-135M, float32): {args.num_prompts} prompts x "
        f"{args.input_len} -> {args.output_len} tokens, concurrency {args.concurrency}, {args.runs} runs per tool "
        "in ABBA order; each run against the server's histograms over the same window"
    )
    print(
        f"{'tool':<18} {'run':>3} {'mean TTFT':>10} {'server':>8} {'diff':>7} {'mean E2EL':>10} {'server':>8} "
        f"{'diff':>7} {'requests':>9}"
    )
    worst = {}
    for name, rs in rows.items():
        for r in rs:
            dt, de = pct(r["ttft"], r["server_ttft"]), pct(r["e2el"], r["server_e2el"])
            worst.setdefault(name, []).append((dt, de))
            print(
                f"{name:<18} {r['run']:>3} {r['ttft']:>10.1f} {r['server_ttft']:>8.1f} {dt:>6.2f}% "
                f"{r['e2el']:>10.1f} {r['server_e2el']:>8.1f} {de:>6.2f}% {r['server_requests']:>4}/{r['completed']}"
            )
    for name, d in worst.items():
        print(
            f"{name}: TTFT vs server median {statistics.median(t for t, _ in d):+.2f} % (range "
            f"{min(t for t, _ in d):+.2f} to {max(t for t, _ in d):+.2f}), E2EL median "
            f"{statistics.median(e for _, e in d):+.2f} % (range {min(e for _, e in d):+.2f} to "
            f"{max(e for _, e in d):+.2f}); every run within 2 %: "
            f"{all(abs(t) <= 2 and abs(e) <= 2 for t, e in d)}"
        )
    spread = [r["server_ttft"] for rs in rows.values() for r in rs]
    print(f"the server's own mean TTFT moved between {min(spread):.1f} and {max(spread):.1f} ms over the runs")


if __name__ == "__main__":
    main()
