"""`tradeoff perf`: measure any running OpenAI-compatible server, no build step; JSON as `vllm bench serve`.

The CLI flags become a PerfSpec (the same model the nightly's `perf:` section
validates), so a bad flag fails in one line before any request is sent. The sweep is
the nightly's (tasks.loadgen). The output file holds one JSON object per scenario, one
per line (as `vllm bench serve --append-result` writes them; with one scenario the file
is plain JSON), with vLLM's `--save-result` key names (median_ttft_ms, mean_tpot_ms,
p99_itl_ms, request_throughput, output_throughput, ...) plus tradeoff's own (ttft_cv_pct,
itl_cv_pct, request_goodput, *_ci_lo/_ci_hi, energy_j_per_token, mbu_pct, ...). The shared keys
carry vLLM's definitions exactly (tasks.vllm_compat: ddof-0 std, 1 s buckets for
max_output_tokens_per_s, wall-clock duration, failed/completed as vLLM counts them);
tradeoff's own variants have their own names (sample_std_*, peak_output_tokens_per_s_sliding).

Token counts without a tokenizer: the server's usage, else max_tokens when the stream
ended for `length`, else one per text chunk, labelled `approx_chunks` (see
`output_tokens_sources`). `--tokenizer x.gguf` counts with the model's own vocabulary.
Energy and MBU describe this host, so they are measured only when the endpoint is on it.
"""

from __future__ import annotations

import argparse
import json
import math
from collections import Counter
from datetime import datetime
from pathlib import Path
from urllib.parse import urlparse

from pydantic import ValidationError

from tasks.config import ConfigError, PerfSpec, _format_validation_error
from tasks.credentials import error_excerpt
from tasks.loadgen import Scenario, make_workload, run_perf, summarize_scenario
from tasks.metrics import PERCENTILES, pct_name
from tasks.perf import api_root, check_endpoint
from tasks.roofline import host_bandwidth
from tasks.vllm_compat import vllm_keys

# PerfSpec field -> the flag that sets it, so errors name what the user typed.
FLAGS = {"concurrency": "--concurrency", "rates": "--rate", "sweep": "--sweep", "burstiness": "--burstiness",
         "max_concurrency": "--max-concurrency", "num_prompts": "--num-prompts", "max_duration_s": "--max-duration-s",
         "warmup_requests": "--warmup", "warmup_s": "--warmup-s", "repeats": "--repeats", "input_len": "--input-len",
         "output_len": "--output-len", "len_spread": "--len-spread", "dataset": "--dataset",
         "endpoint": "--endpoint-type", "force_output_len": "--force-output-len", "seed": "--seed",
         "request_timeout_s": "--timeout-s", "percentiles": "--percentiles", "slo": "--slo",
         "peak_window_s": "--peak-window-s", "confidence": "--confidence", "request_deadline_s": "--deadline-s",
         "jitter": "--jitter"}
LOOPBACK = {"localhost", "127.0.0.1", "::1", "0.0.0.0"}


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The `tradeoff perf` flags."""
    p.add_argument("--endpoint", required=True,
                   help="base URL of the server, with or without /v1, e.g. http://127.0.0.1:8000")
    p.add_argument("--model", help="served model name (default: the first of /v1/models)")
    load = p.add_mutually_exclusive_group()
    load.add_argument("--concurrency", help="fixed concurrency levels, e.g. 1,4,16 (default 1,2)")
    load.add_argument("--rate", help="request rates (requests/s), Poisson arrivals, e.g. 0.5,1,2")
    load.add_argument("--sweep", type=int, nargs="?", const=4, metavar="N",
                      help="synchronous, maximum throughput and N rates in between (default N 4)")
    p.add_argument("--burstiness", type=float, help="gamma shape of inter-arrival gaps (1 = Poisson)")
    p.add_argument("--max-concurrency", type=int, help="cap on requests in flight in rate steps")
    p.add_argument("--input-len", type=int, help="prompt tokens (synthetic prompts)")
    p.add_argument("--output-len", type=int, help="output tokens asked for")
    p.add_argument("--len-spread", type=float, help="lengths uniform in len*(1 +- spread)")
    p.add_argument("--num-prompts", type=int, help="measured requests per step and repeat")
    p.add_argument("--dataset", help="ShareGPT-format JSON file of prompts instead of synthetic ones")
    p.add_argument("--endpoint-type", choices=["completions", "chat"], help="/v1/completions (default) or chat")
    p.add_argument("--warmup", type=int, help="warm-up requests per step, excluded")
    p.add_argument("--warmup-s", type=float, help="requests sent in a step's first seconds are excluded")
    p.add_argument("--max-duration-s", type=float, help="stop sending a step's requests after this many seconds")
    p.add_argument("--repeats", type=int, help="run every step this many times (confidence intervals)")
    p.add_argument("--seed", type=int)
    p.add_argument("--no-unique-prompts", action="store_true",
                   help="same prompt start for every request (to measure prefix caching on purpose)")
    p.add_argument("--force-output-len", choices=["both", "min_tokens", "ignore_eos", "none"], default="both",
                   help="how to ask for exactly --output-len tokens (default both: min_tokens and ignore_eos)")
    p.add_argument("--slo", help="goodput preset: mlperf-llama2-70b-server (default) or mlperf-llama2-70b-interactive")
    p.add_argument("--slo-ttft-ms", type=float)
    p.add_argument("--slo-tpot-ms", type=float)
    p.add_argument("--slo-e2el-ms", type=float)
    p.add_argument("--percentiles", help="percentiles to report, e.g. 50,90,99 (0 < p <= 100)")
    p.add_argument("--timeout-s", type=float, help="longest wait for a response's next bytes, the first included (s)")
    p.add_argument("--deadline-s", type=float,
                   help="longest one request may take, send to last byte (s; default 600), pings included")
    p.add_argument("--jitter", choices=["auto", "always", "off"],
                   help="the fixed-length concurrency-1 `jitter` scenario (default auto: when lengths spread)")
    p.add_argument("--connect-timeout-s", type=float, default=10.0, help="wait at most this long for the endpoint")
    p.add_argument("--tokenizer", help="GGUF file whose vocabulary counts tokens (its size also gives MBU)")
    p.add_argument("--model-bytes", type=int, help="bytes of weights read per token, for MBU")
    p.add_argument("--detailed", action="store_true", help="add per-request lists (as --save-detailed)")
    p.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                   help="progress bar (default: when stderr is a terminal)")
    p.add_argument("--output", required=True, help="JSON file to write")


def _numbers(flag: str, text: str | None, kind: type) -> list | None:
    if text is None:
        return None
    try:
        return [kind(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ConfigError(f"{flag}: '{text}' is not a comma-separated list of numbers; give e.g. 1,4,16") from None


def spec_from_args(args: argparse.Namespace) -> PerfSpec:
    """The flags as a validated PerfSpec; ConfigError naming the flag on bad input."""
    data: dict = {}
    given = {"rates": _numbers("--rate", args.rate, float), "concurrency": _numbers("--concurrency", args.concurrency, int),
             "percentiles": _numbers("--percentiles", args.percentiles, float), "sweep": args.sweep,
             "burstiness": args.burstiness, "max_concurrency": args.max_concurrency, "input_len": args.input_len,
             "output_len": args.output_len, "len_spread": args.len_spread, "num_prompts": args.num_prompts,
             "dataset": args.dataset, "endpoint": args.endpoint_type, "warmup_requests": args.warmup,
             "warmup_s": args.warmup_s, "max_duration_s": args.max_duration_s, "repeats": args.repeats,
             "seed": args.seed, "request_timeout_s": args.timeout_s, "force_output_len": args.force_output_len,
             "request_deadline_s": args.deadline_s, "jitter": args.jitter}
    data.update({k: v for k, v in given.items() if v is not None})
    if args.no_unique_prompts:
        data["unique_prompts"] = False
    limits = {k: v for k, v in (("ttft_ms", args.slo_ttft_ms), ("tpot_ms", args.slo_tpot_ms),
                                ("e2el_ms", args.slo_e2el_ms)) if v is not None}
    if args.slo or limits:
        data["slo"] = {"preset": args.slo, **limits} if args.slo else limits
    try:
        spec = PerfSpec.model_validate(data)
    except ValidationError as err:
        line = _format_validation_error(err)
        field, _, rest = line.partition(": ")
        raise ConfigError(f"{FLAGS.get(field.split('.')[0], field)}: {rest}") from None
    if spec.dataset and not Path(spec.dataset).is_file():
        raise ConfigError(f"--dataset: file {spec.dataset} not found; give a ShareGPT-format JSON file")
    if args.tokenizer and not Path(args.tokenizer).is_file():
        raise ConfigError(f"--tokenizer: file {args.tokenizer} not found; give the model's GGUF file or leave it out")
    if args.model_bytes is not None and args.model_bytes <= 0:
        raise ConfigError(f"--model-bytes: {args.model_bytes} is not positive; give the weights' size in bytes")
    return spec


def is_local(url: str) -> bool:
    return (urlparse(url).hostname or "") in LOOPBACK


def max_in_flight(records: list) -> int:
    """Most requests in flight at once (a sweep over send and end times)."""
    events = sorted([(r.start_ms, 1) for r in records if r.e2el_ms] + [(r.start_ms + r.e2el_ms, -1)
                                                                      for r in records if r.e2el_ms])
    best = now = 0
    for _, d in events:
        now += d
        best = max(best, now)
    return best


def vllm_result(spec: PerfSpec, sc: Scenario, model: str, tokenizer_id: str | None, detailed: bool) -> dict:
    """One scenario as `vllm bench serve --save-result` writes it, plus tradeoff's own keys."""
    s = sc.summary
    step = sc.step
    measured = [r for run in sc.runs for r in run.measured if not r.is_warmup]
    ok = [r for r in measured if r.status == "ok"]  # send times are per repeat: never mix repeats in time
    out = {"date": datetime.now().strftime("%Y%m%d-%H%M%S"),
           "endpoint_type": "openai-chat" if spec.endpoint == "chat" else "openai",
           "backend": "openai-chat" if spec.endpoint == "chat" else "openai", "label": "tradeoff",
           "model_id": model, "tokenizer_id": tokenizer_id, "num_prompts": spec.num_prompts,
           "request_rate": step.rate if step.rate else "inf", "burstiness": spec.burstiness,
           "max_concurrency": step.concurrency, "total_input_tokens": s["total_input_tokens"],
           "total_output_tokens": s["total_output_tokens"],
           **vllm_keys([run.measured for run in sc.runs], s),  # duration, completed, failed, throughputs, std_*
           "max_concurrent_requests": max((max_in_flight([r for r in run.measured if r.status == "ok"])
                                           for run in sc.runs), default=0)}
    for m in ("ttft", "tpot", "itl", "e2el"):
        out[f"mean_{m}_ms"] = s[f"{m}_ms_mean"]
        out[f"median_{m}_ms"] = s[f"{m}_ms_p50"]
        for p in sorted({*map(float, PERCENTILES), *spec.percentiles}):  # the warehouse's and the asked ones
            out[f"{pct_name(p)}_{m}_ms"] = s[f"{m}_ms_{pct_name(p)}"]
        out[f"sample_std_{m}_ms"] = s[f"{m}_ms_std"]  # tradeoff's own: ddof 1 (std_* is vLLM's ddof 0)
    # tradeoff's own variants of vLLM's figures, under their own names
    out["peak_output_tokens_per_s_sliding"] = s["peak_output_throughput"]
    out["output_throughput_repeat_mean"] = s["output_throughput"]
    if detailed:
        out.update({"input_lens": [r.prompt_tokens for r in measured],
                    "output_lens": [r.output_tokens or 0 for r in measured],
                    "ttfts": [r.ttft_ms / 1000 if r.ttft_ms is not None else 0.0 for r in measured],
                    "itls": [[g / 1000 for g in r.itl_ms] for r in measured],
                    "start_times": [r.start_ms / 1000 for r in measured],
                    "generated_texts": [r.text for r in measured], "errors": [error_excerpt(r.error) or "" for r in measured]})
    own = ("scenario", "load_kind", "repeats", "num_requests", "num_ok", "num_errors", "num_incomplete", "num_warmup",
           "ttft_cv_pct", "itl_cv_pct", "ttft_p99_p50_ratio", "itl_p99_p50_ratio", "num_good", "goodput_slo",
           "slo_ttft_ms", "slo_tpot_ms", "slo_e2el_ms", "ci_level", "ci_method",
           *(f"{m}_ci_{e}" for m in ("ttft_ms_mean", "ttft_ms_p99", "output_throughput", "ttft_cv_pct", "itl_cv_pct")
             for e in ("lo", "hi")),
           "peak_window_s", "energy_j", "energy_j_per_token", "tokens_per_j", "mean_power_w", "energy_source",
           "energy_note", "energy_by_device_j", "model_bytes", "mem_bandwidth_gb_s", "mem_bandwidth_method",
           "mbu_pct", "output_len_forced_by", "output_len_note",
           # 007_timing: reasoning-aware timing and jitter per repeat
           "ttft_answer_ms_mean", "ttft_answer_ms_p50", "ttft_answer_ms_p99", "total_reasoning_tokens",
           "total_answer_tokens", *(f"{m}_cv_pct_median{e}" for m in ("ttft", "itl") for e in ("", "_ci_lo", "_ci_hi")),
           "jitter_note")
    out.update({k: s.get(k) for k in own})
    out["output_tokens_sources"] = dict(Counter(r.output_tokens_source for r in ok))
    out["prompt_tokens_sources"] = dict(Counter(r.prompt_tokens_source for r in ok))
    return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in out.items()}


def run_standalone(args: argparse.Namespace) -> list[dict]:
    """Validate the flags, reach the endpoint, run the sweep, write the JSON; returns the results.

    The file is rewritten after every (step, repeat), so what was measured is written even when
    the sweep stops early (Ctrl-C, a dead server).
    """
    spec = spec_from_args(args)  # bad flags fail here, before anything is sent
    endpoint = api_root(args.endpoint)  # given with or without /v1
    models = check_endpoint(endpoint, timeout_s=args.connect_timeout_s)
    model = args.model or (models[0] if models else None)
    if not model:
        raise ConfigError(f"--model: {endpoint}/v1/models lists no model; pass --model NAME")
    tok = None
    if args.tokenizer:
        from tasks.tokenizer import load_tokenizer

        tok = load_tokenizer(str(Path(args.tokenizer).resolve()))
    local = is_local(args.endpoint)
    model_bytes = args.model_bytes or (Path(args.tokenizer).stat().st_size if args.tokenizer else None)
    bandwidth = host_bandwidth() if model_bytes and local else None
    force = None if spec.force_output_len == "none" else ("both" if spec.force_output_len == "auto"
                                                          else spec.force_output_len)
    workload = make_workload(spec, tok.encode if tok else None, tok.decode if tok else None,
                             tok.count if tok else None)
    out = Path(args.output)
    out.parent.mkdir(parents=True, exist_ok=True)
    summarized: dict[tuple[str, int], dict] = {}  # (scenario, repeats done) -> its JSON object

    def write(scenarios: list[Scenario]) -> list[dict]:
        results = []
        for sc in scenarios:
            key = (sc.step.label, len(sc.runs))
            if key not in summarized:
                sc.summary = summarize_scenario(spec, sc, force, model_bytes, bandwidth)
                summarized[key] = vllm_result(spec, sc, model, args.tokenizer, args.detailed)
            results.append(summarized[key])
        tmp = out.with_name(f".{out.name}.tmp")
        tmp.write_text("".join(json.dumps(r) + "\n" for r in results))
        tmp.replace(out)  # atomic: a reader sees the previous complete file or this one
        return results

    scenarios = run_perf(spec, endpoint, model, workload, force, tok.count if tok else None,
                         progress=args.progress, on_scenario=write,
                         energy_off_reason=None if local else "endpoint is not on this host; energy not measured")
    return write(scenarios)


def scenarios_without_ok(results: list[dict]) -> list[str]:
    """Scenarios in which no request was ok: `tradeoff perf` then exits non-zero (its file is still written)."""
    return [r["scenario"] for r in results if not r.get("num_ok")]


def one_line(r: dict) -> str:
    """A scenario's headline numbers for the terminal."""
    f = lambda v, d=1: "-" if v is None else f"{v:.{d}f}"  # noqa: E731
    return (f"{r['scenario']:>8}: {r['num_ok']} ok, {r['num_errors']} errored, {r['num_incomplete']} incomplete; "
            f"{f(r['output_throughput'])} tok/s, "
            f"TTFT p50 {f(r['median_ttft_ms'])} ms, TPOT mean {f(r['mean_tpot_ms'], 2)} ms, "
            f"TTFT CV {f(r['ttft_cv_pct'])} %, goodput {f(r['request_goodput'], 2)} req/s"
            + (f", MBU {f(r['mbu_pct'])} %" if r.get("mbu_pct") is not None else ""))
