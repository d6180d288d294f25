"""Trace replay fidelity and the over-saturation stop, against instruments of known behaviour (docs/traffic.md).

    python benchmarks/trace_replay.py [--tokenizer MODEL.gguf]

1. A generated trace (20 s, two 4x bursts, prefix groups) replayed with `tradeoff perf --trace` against the paced
   server (its own process): the send-time error as the client stamps it (p50, p99, max), the server's receive
   gaps against the trace's, and whether every prompt and output had its trace length.
2. A Poisson step at twice the SLO server's capacity (25 req/s) with 60 s of budget: when the over-saturation rule
   stopped it, and how many requests it sent; a step at half the capacity: whether it ran out undisturbed.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import httpx
import numpy as np

from flows.cli import main as tradeoff
from instruments import paced_server
from instruments.slo_server import start_paced_stub
from tasks.core.config import PerfSpec, TraceSpec
from tasks.engines.tokenizer import load_tokenizer
from tasks.perf.perf_run import Target, measure
from tasks.perf.trace import TraceShape, generate_trace, load_trace, trace_prompts, write_trace


def replay(tokenizer: str | None, tmp: Path) -> None:
    shape = TraceShape(
        duration_s=20, rate=3.0, bursts=2, burst_factor=4, input_median=48, max_input=400, output_median=12,
        max_output=48, block_tokens=16,
    )  # fmt: skip
    trace = write_trace(generate_trace(shape, seed=3), tmp / "trace.jsonl")
    reqs = load_trace(trace)
    out = tmp / "r.json"
    with paced_server.running() as url:
        argv = ["perf", "--endpoint", url, "--model", "ttft=20,itl=10,jitter=2", "--output", str(out)]
        argv += ["--trace", str(trace), "--warmup", "0", "--detailed", "--no-progress"]
        assert tradeoff(argv + (["--tokenizer", tokenizer] if tokenizer else [])) == 0
        truth = httpx.get(f"{url}/truth", timeout=10).json()
    (r,) = [json.loads(x) for x in out.read_text().splitlines()]
    tok = load_tokenizer(tokenizer) if tokenizer else None
    prompts = trace_prompts(reqs, TraceSpec(path=str(trace)), 0, tok.count if tok else None)
    last = {p.text: i for i, p in enumerate(prompts)}
    order = sorted(last.values())
    recv = np.array([truth[prompts[i].text]["recv_ns"] for i in order]) / 1e6
    due = np.array([reqs[i].at_ms for i in order])
    offset = recv - due  # the server's clock origin against the schedule's: a constant, taken as the median
    server_err = np.abs(offset - np.median(offset))
    count = tok.count if tok else (lambda t: len(t.split()))
    lengths_in = sum(count(prompts[i].text) == reqs[i].input_tokens for i in order)
    lengths_out = sum(len(truth[prompts[i].text]["writes_ns"]) == reqs[i].output_tokens for i in order)
    client = (
        f"p50 {r['send_error_ms_p50']:.2f} ms, p99 {r['send_error_ms_p99']:.2f} ms, max {r['send_error_ms_max']:.2f} ms"
    )
    server = f"p50 {np.percentile(server_err, 50):.2f} ms, p99 {np.percentile(server_err, 99):.2f} ms"
    exact = f"input lengths exact {lengths_in}/{len(order)}, output lengths exact {lengths_out}/{len(order)}"
    print(f"replay: {len(reqs)} requests over {reqs[-1].at_ms / 1000:.1f} s; send error (client) {client}")
    print(f"replay: server receive times vs the trace's, less their median offset: {server}; {len(order)} distinct")
    print(f"replay: {exact}")


def saturation() -> None:
    srv, url = start_paced_stub(service_ms=40.0)
    try:
        for rate, n in ((50.0, 3000), (12.0, 240)):
            spec = PerfSpec.model_validate(
                {"rates": [rate], "rate_requests": n, "warmup_requests": 0, "input_len": 4, "output_len": 2,
                 "idle_baseline_s": 0, "saturation": {"min_duration_s": 8, "window_s": 12}}
            )  # fmt: skip
            t0 = time.monotonic()
            (sc,) = measure(spec, Target(url, "paced", on_host=False), warn=lambda _: None)
            sent = sc.runs[0].measured
            print(
                f"saturation: {rate:g} req/s vs capacity 25 req/s: {len(sent)} of {n} sent, last send at "
                f"{max(r.start_ms for r in sent) / 1000:.1f} s, step took {time.monotonic() - t0:.1f} s; saturated "
                f"{sc.summary['saturated']}; {sc.summary['stop_reason']}"
            )
    finally:
        srv.shutdown()


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokenizer", help="GGUF whose vocabulary counts tokens (default: lengths in words)")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        replay(a.tokenizer, Path(d))
    saturation()
