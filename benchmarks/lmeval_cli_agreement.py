"""`tradeoff quality` vs lm-eval's own CLI: GSM8K from the shared local copy, same endpoint, same task file.

The demo's reference variant (SmolLM2-135M Q4_1) is served by llama.cpp as the nightly serves
it. First `tradeoff quality --suite configs/suites/gsm8k-local.yaml --limit N` runs lm-eval as a
library and keeps the task YAML it used; then `lm-eval run --model local-completions
--include_path <that folder> --tasks gsm8k --limit N --log_samples` runs against the same
endpoint. Prints both accuracies and the per-sample comparison (prompt hash, raw response,
filtered answer, metric), sample by sample.

Usage: .venv/bin/python benchmarks/lmeval_cli_agreement.py [--limit 50] [--out DIR]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import ROOT, demo_server

SHARED = ROOT.parent / "shared" / "datasets" / "gsm8k"


def run(cmd: list, env: dict, cwd: Path) -> float:
    t0 = time.perf_counter()
    proc = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, env=env, cwd=cwd, timeout=7200)
    if proc.returncode != 0:
        sys.exit(f"{Path(str(cmd[0])).name} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return time.perf_counter() - t0


def main() -> int:
    from tasks.quality.suite_loop import compare_lmeval_samples

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--limit", type=int, default=50)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    if not (SHARED / "test.jsonl").is_file():
        print(f"skipped: shared GSM8K not found at {SHARED}")
        return 0
    out = args.out or Path(tempfile.mkdtemp(prefix="lmeval-cli-agreement-"))
    env = {**os.environ, "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1"}
    bindir = Path(sys.executable).parent
    suite = ROOT / "configs" / "suites" / "gsm8k-local.yaml"
    with demo_server(out) as (url, model, _):
        ours_s = run(
            [
                bindir / "tradeoff",
                "quality",
                "--endpoint",
                url,
                "--model",
                model,
                "--suite",
                suite,
                "--limit",
                args.limit,
                "--output",
                out / "ours",
            ],
            env,
            ROOT,
        )
        tasks_dir = out / "ours" / "quality" / "gsm8k" / "lm_eval" / "tasks"
        cli_s = run(
            [
                bindir / "lm-eval",
                "run",
                "--model",
                "local-completions",
                "--model_args",
                f"base_url={url}/v1/completions,model={model},tokenizer_backend=None,tokenized_requests=False",
                "--tasks",
                "gsm8k",
                "--include_path",
                tasks_dir,
                "--limit",
                args.limit,
                "--log_samples",
                "--output_path",
                out / "cli",
            ],
            env,
            ROOT,
        )
    r = compare_lmeval_samples(out / "ours", out / "cli", "gsm8k")
    print(
        f"GSM8K (shared local copy, first {args.limit} test questions, lm-eval's gsm8k task: 5-shot, greedy) "
        f"on llama.cpp SmolLM2-135M Q4_1"
    )
    print(f"{'tool':<20} {'strict-match':>13} {'flexible-extract':>17} {'wall s':>7}")
    for tool, scores, secs in (("tradeoff quality", r["ours"], ours_s), ("lm-eval CLI", r["theirs"], cli_s)):
        print(
            f"{tool:<20} {scores.get('strict-match', float('nan')):>13.3f} "
            f"{scores.get('flexible-extract', float('nan')):>17.3f} {secs:>7.0f}"
        )
    print(
        f"per-sample records (doc x filter): ours {r['samples']}, CLI {r['samples_other']}; "
        f"identical (prompt hash, response, filtered answer, {r['metric']}): "
        f"{r['samples'] - len(r['differ'])}/{r['samples']}" + (f"; differ: {r['differ'][:10]}" if r["differ"] else "")
    )
    print(f"outputs kept in {out}")
    return 0 if r["same"] else 1


if __name__ == "__main__":
    sys.exit(main())
