"""HELM's GSM8K and lm-eval's gsm8k on the same questions against the demo's reference variant, offline.

Both read the shared copy of GSM8K (`../shared/datasets/gsm8k`): the first N test questions
(written to a temporary test.jsonl, so HELM evaluates exactly these instead of sampling N of
1,319) and the full train split for the few-shot examples. The reference variant
(SmolLM2-135M Q4_1) is served by llama.cpp exactly as the nightly serves it; both suites run
through tradeoff's suites (`helm:gsm`, `lm_eval`), greedy. Prints each tool's accuracy, the
per-question agreement, and where the two differ (prompt, few-shot, answer extraction).

Usage: make helm && .venv/bin/python benchmarks/helm_vs_lmeval_gsm8k.py [--n 50] [--out DIR] [--only SUITE]
(each suite's result is saved as DIR/<suite>.json and reused on a later call with the same DIR)
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from common import ROOT, demo_config, demo_server

SHARED = ROOT.parent / "shared" / "datasets" / "gsm8k"


def question_of(prompt: str, marker: str, end: str) -> str:
    return prompt.rsplit(marker, 1)[1].rsplit(end, 1)[0].strip()


def run_suites(out: Path, data: Path, n: int, only: list[str]) -> dict:
    """Each suite's result (samples, scores), run against one demo server, or read back from out/<suite>.json."""
    from dataclasses import asdict

    import tasks.loader  # noqa: F401  (registers the built-in suites, as every entry point does)
    from tasks.quality.base import SuiteContext, suite_for

    params = {
        "helm:gsm": {"data": {"gsm": str(data)}},
        "lm_eval": {
            "tasks": ["gsm8k"],
            "datasets": {
                "gsm8k": {
                    "path": "json",
                    "data_files": {"test": str(data / "test.jsonl"), "train": str(data / "train.jsonl")},
                }
            },
        },
    }
    results = {
        name: json.loads((out / f"{name}.json").read_text()) for name in params if (out / f"{name}.json").is_file()
    }
    todo = [name for name in only if name not in results]
    if not todo:
        return results
    cfg = demo_config()
    ref = cfg.reference
    model = cfg.models[ref.model]
    with demo_server(out) as (url, served, gguf):
        for name in todo:
            ctx = SuiteContext(
                variant=ref.name,
                base_url=url,
                served_model=served,
                artifact_path=gguf,
                reference_artifact_path=gguf,
                limit=n,
                seed=0,
                params=params[name],
                work_dir=out / "quality" / ref.name / name,
                n_ctx=model.max_context,
                engine=ref.engine,
                variant_spec=ref,
                model_spec=model,
                request_timeout_s=1800,
            )
            t0 = time.perf_counter()
            res = suite_for(name).run(ctx)
            results[name] = {
                "samples": res.samples,
                "scores": [asdict(s) for s in res.scores],
                "seconds": time.perf_counter() - t0,
            }
            (out / f"{name}.json").write_text(json.dumps(results[name]))
    return results


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=50)
    ap.add_argument("--out", type=Path, default=None, help="outputs (and each suite's result, reused) go here")
    ap.add_argument("--only", choices=["helm:gsm", "lm_eval"], action="append", help="run only this suite")
    args = ap.parse_args()
    if not (SHARED / "test.jsonl").is_file():
        print(f"skipped: shared GSM8K not found at {SHARED}")
        return 0
    out = args.out or Path(tempfile.mkdtemp(prefix="helm-vs-lmeval-"))
    data = out / "gsm8k"
    data.mkdir(parents=True, exist_ok=True)
    lines = (SHARED / "test.jsonl").read_text().splitlines()[: args.n]
    (data / "test.jsonl").write_text("\n".join(lines) + "\n")
    (data / "train.jsonl").write_text((SHARED / "train.jsonl").read_text())
    results = run_suites(out, data, args.n, args.only or ["helm:gsm", "lm_eval"])
    if not {"helm:gsm", "lm_eval"} <= set(results):
        print(f"results so far in {out}")
        return 0
    helm, lme = results["helm:gsm"], results["lm_eval"]
    h = {question_of(s["prompt"], "Q: ", "\nA:"): s for s in helm["samples"]}
    strict = {
        question_of(s["prompt"], "Question: ", "\nAnswer:"): s
        for s in lme["samples"]
        if json.loads(s["details"])["filter"] == "strict-match"
    }
    flex = {
        question_of(s["prompt"], "Question: ", "\nAnswer:"): s
        for s in lme["samples"]
        if json.loads(s["details"])["filter"] == "flexible-extract"
    }
    common = sorted(set(h) & set(strict))
    print(f"questions: HELM {len(h)}, lm-eval {len(strict)}, the same {len(common)}")
    hs = {s["metric"]: s for s in helm["scores"]}
    print(
        f"HELM gsm (5-shot 'Q:/A:', CoT answers ending 'The answer is N.', stop '\\n\\n', max 400 tokens): "
        f"final_number_exact_match {hs['final_number_exact_match']['value']:.3f} "
        f"± {hs['final_number_exact_match']['stderr'] or 0:.3f}, exact_match_indicator "
        f"{hs['exact_match_indicator']['value']:.3f}, output tokens {hs['num_output_tokens']['value']:.1f}, "
        f"{helm.get('seconds', 0):.0f} s"
    )
    for s in lme["scores"]:
        if s["metric"].startswith("exact_match"):
            print(f"lm-eval gsm8k {s['metric']}: {s['value']:.3f} ± {s['stderr'] or 0:.3f}")
    print(f"lm-eval time {lme.get('seconds', 0):.0f} s")
    agree = sum(1 for q in common if (h[q]["score"] or 0) == (flex[q]["score"] or 0))
    print(f"per question, HELM vs lm-eval flexible-extract: same verdict on {agree}/{len(common)}")
    for q in common:
        hv, fv, sv = h[q]["score"] or 0, flex[q]["score"] or 0, strict[q]["score"] or 0
        if hv != fv or fv != sv or hv:
            print(
                f"- {q[:70]!r}: target {strict[q]['target']!r}; HELM {hv:.0f} {(h[q]['response'] or '')[-80:]!r}; "
                f"lm-eval strict {sv:.0f} flexible {fv:.0f} {strict[q]['response'][-40:]!r} / {flex[q]['response']!r}"
            )
    print("HELM prompt ends:", repr(helm["samples"][0]["prompt"][-300:]))
    print("lm-eval prompt ends:", repr(next(iter(strict.values()))["prompt"][-300:]))
    print(f"outputs kept in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
