"""Benchmark: how close the client's timestamps come to the truth of a paced server.

The paced server (instruments/paced_server.py, its own process) writes the first chunk a set
time after each request and the others at a set interval with seeded jitter, and records when
it began each write on the host's monotonic clock (time.perf_counter_ns), the clock the client
stamps with; the client runs here with origin 0, so both sides share one clock. Prints, per
endpoint and concurrency, the error (client minus truth, ms) of every chunk's stamp, of TTFT,
of each ITL gap and of TPOT (median, p90, p99 and max), and the ITL CV each side sees.

Usage: .venv/bin/python benchmarks/timing_accuracy.py [--requests 32] [--tokens 64] [--pace ttft=60,itl=15,jitter=4]
"""

from __future__ import annotations

import argparse
import asyncio

import aiohttp
import httpx
import numpy as np

from instruments import paced_server
from tasks.client import endpoint_url, request_body, stream_request
from tasks.perf.metrics import cv_pct
from tasks.perf.workload import Prompt


async def _measure(url: str, model: str, kind: str, prompts: list[Prompt], concurrency: int, tokens: int):
    sem = asyncio.Semaphore(concurrency)
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=concurrency + 1)) as session:

        async def one(i: int, p: Prompt):
            async with sem:
                return await stream_request(
                    session,
                    endpoint_url(url, kind),
                    request_body(kind, model, p.text, tokens, None),
                    kind,
                    i,
                    0,
                    None,
                    p.tokens,
                )

        return await asyncio.gather(*(one(i, p) for i, p in enumerate(prompts)))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=32)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--pace", default="ttft=60,itl=15,jitter=4")
    args = ap.parse_args()
    with paced_server.running() as url:
        print(f"paced server {args.pace}, {args.requests} requests x {args.tokens} chunks; error = client - truth (ms)")
        print(f"{'endpoint':<12} {'conc':>4} {'figure':<6} {'median':>8} {'p90':>8} {'p99':>8} {'max':>8}")
        for kind in ("completions", "chat"):
            for conc in (1, 8):
                prompts = [Prompt(f"{kind} {conc} {i}", 3) for i in range(args.requests)]
                recs = asyncio.run(_measure(url, args.pace, kind, prompts, conc, args.tokens))
                truth = httpx.get(url + "/truth").json()
                err: dict[str, list[float]] = {"chunk": [], "ttft": [], "itl": [], "tpot": []}
                true_gaps, gaps = [], []
                for r, p in zip(recs, prompts):
                    t = truth[p.text]
                    w = np.asarray(t["writes_ns"]) / 1e6
                    err["chunk"] += list(r.start_ms + np.asarray(r.chunk_offsets_ms) - w)
                    err["ttft"].append(r.ttft_ms - (w[0] - r.start_ms))
                    err["itl"] += list(np.asarray(r.itl_ms) - np.diff(w))
                    err["tpot"].append(r.tpot_ms - (t["done_ns"] / 1e6 - w[0]) / (args.tokens - 1))
                    true_gaps += list(np.diff(w))
                    gaps += r.itl_ms
                for name, e in err.items():
                    a = np.asarray(e)
                    print(
                        f"{kind:<12} {conc:>4} {name:<6} {np.median(a):>8.3f} {np.percentile(a, 90):>8.3f} "
                        f"{np.percentile(a, 99):>8.3f} {a.max():>8.3f}"
                    )
                print(f"{kind:<12} {conc:>4} ITL CV: client {cv_pct(gaps):.2f} %, truth {cv_pct(true_gaps):.2f} %")


if __name__ == "__main__":
    main()
