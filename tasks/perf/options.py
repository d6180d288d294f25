"""`tradeoff perf` options: CLI flags -> the same PerfSpec the nightly's `perf:` section validates."""

from __future__ import annotations

import argparse
from pathlib import Path
from urllib.parse import urlparse

from pydantic import ValidationError

from tasks.core.config import PerfSpec
from tasks.core.errors import ConfigError, validation_line
from tasks.perf.trace import load_trace, trace_span_note

# PerfSpec field -> the flag that sets it, so errors name what the user typed.
FLAGS = {
    "concurrency": "--concurrency",
    "rates": "--rate",
    "sweep": "--sweep",
    "burstiness": "--burstiness",
    "max_concurrency": "--max-concurrency",
    "num_prompts": "--num-prompts",
    "max_duration_s": "--max-duration-s",
    "warmup_requests": "--warmup",
    "warmup_s": "--warmup-s",
    "repeats": "--repeats",
    "input_len": "--input-len",
    "output_len": "--output-len",
    "len_spread": "--len-spread",
    "dataset": "--dataset",
    "endpoint": "--endpoint-type",
    "force_output_len": "--force-output-len",
    "seed": "--seed",
    "request_timeout_s": "--timeout-s",
    "percentiles": "--percentiles",
    "slo": "--slo",
    "peak_window_s": "--peak-window-s",
    "confidence": "--confidence",
    "request_deadline_s": "--deadline-s",
    "jitter": "--jitter",
    "trace": "--trace",
    "host_noise_max_pct": "--host-noise-max-pct",
    "host_noise_retries": "--host-noise-retries",
}


LOOPBACK = {"localhost", "127.0.0.1", "::1", "0.0.0.0"}


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The `tradeoff perf` flags."""
    p.add_argument(
        "--endpoint", required=True, help="base URL of the server, with or without /v1, e.g. http://127.0.0.1:8000"
    )
    p.add_argument("--model", help="served model name (default: the first of /v1/models)")
    load = p.add_mutually_exclusive_group()
    load.add_argument("--concurrency", help="fixed concurrency levels, e.g. 1,4,16 (default 1,2)")
    load.add_argument("--rate", help="request rates (requests/s), Poisson arrivals, e.g. 0.5,1,2")
    load.add_argument(
        "--sweep",
        type=int,
        nargs="?",
        const=4,
        metavar="N",
        help="synchronous, maximum throughput and N rates in between (default N 4)",
    )
    p.add_argument("--burstiness", type=float, help="gamma shape of inter-arrival gaps (1 = Poisson)")
    p.add_argument("--max-concurrency", type=int, help="cap on requests in flight in rate steps")
    p.add_argument("--input-len", type=int, help="prompt tokens (synthetic prompts)")
    p.add_argument("--output-len", type=int, help="output tokens asked for")
    p.add_argument("--len-spread", type=float, help="lengths uniform in len*(1 +- spread)")
    p.add_argument("--num-prompts", type=int, help="measured requests per step and repeat")
    p.add_argument("--dataset", help="ShareGPT-format JSON file of prompts instead of synthetic ones")
    p.add_argument(
        "--trace",
        help="JSONL request trace (Mooncake format or a plain request log) replayed at its own timestamps "
        "(`tradeoff trace` generates one); alone, it is the only step",
    )
    p.add_argument("--trace-speed", type=float, help="replay speed of --trace: 2.0 sends it twice as fast")
    p.add_argument("--trace-block-tokens", type=int, help="tokens per hash_ids block of --trace (Mooncake: 512)")
    p.add_argument("--trace-max-requests", type=int, help="replay only the first N requests of --trace")
    p.add_argument("--endpoint-type", choices=["completions", "chat"], help="/v1/completions (default) or chat")
    p.add_argument("--warmup", type=int, help="warm-up requests per step, excluded")
    p.add_argument("--warmup-s", type=float, help="requests sent in a step's first seconds are excluded")
    p.add_argument("--max-duration-s", type=float, help="stop sending a step's requests after this many seconds")
    p.add_argument("--repeats", type=int, help="run every step this many times (confidence intervals)")
    p.add_argument("--seed", type=int)
    p.add_argument(
        "--no-unique-prompts",
        action="store_true",
        help="same prompt start for every request (to measure prefix caching on purpose)",
    )
    p.add_argument(
        "--force-output-len",
        choices=["both", "min_tokens", "ignore_eos", "none"],
        default="both",
        help="how to ask for exactly --output-len tokens (default both: min_tokens and ignore_eos)",
    )
    p.add_argument("--slo", help="goodput preset: mlperf-llama2-70b-server (default) or mlperf-llama2-70b-interactive")
    p.add_argument("--slo-ttft-ms", type=float)
    p.add_argument("--slo-tpot-ms", type=float)
    p.add_argument("--slo-e2el-ms", type=float)
    p.add_argument("--percentiles", help="percentiles to report, e.g. 50,90,99 (0 < p <= 100)")
    p.add_argument("--timeout-s", type=float, help="longest wait for a response's next bytes, the first included (s)")
    p.add_argument(
        "--deadline-s",
        type=float,
        help="longest one request may take, send to last byte (s; default 600), pings included",
    )
    p.add_argument(
        "--jitter",
        choices=["auto", "always", "off"],
        help="the fixed-length concurrency-1 `jitter` scenario (default auto: when lengths spread)",
    )
    p.add_argument(
        "--host-noise-max-pct",
        type=float,
        help="a window in which other processes on this host used more than this %% of a core is measured again "
        "(default 25)",
    )
    p.add_argument("--host-noise-retries", type=int, help="disturbed windows measured again (default 2; 0: only said)")
    p.add_argument("--connect-timeout-s", type=float, default=10.0, help="wait at most this long for the endpoint")
    p.add_argument(
        "--tokenizer",
        help="GGUF file whose vocabulary counts tokens (its size also gives MBU); default: the server's own "
        "tokenizer through its tokenize endpoint where it has one (llama-cpp-python, vLLM, llama.cpp), else words",
    )
    p.add_argument("--model-bytes", type=int, help="bytes of weights read per token, for MBU")
    p.add_argument("--detailed", action="store_true", help="add per-request lists (as --save-detailed)")
    p.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="progress bar (default: when stderr is a terminal)",
    )
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
    given = {
        "rates": _numbers("--rate", args.rate, float),
        "concurrency": _numbers("--concurrency", args.concurrency, int),
        "percentiles": _numbers("--percentiles", args.percentiles, float),
        "sweep": args.sweep,
        "burstiness": args.burstiness,
        "max_concurrency": args.max_concurrency,
        "input_len": args.input_len,
        "output_len": args.output_len,
        "len_spread": args.len_spread,
        "num_prompts": args.num_prompts,
        "dataset": args.dataset,
        "endpoint": args.endpoint_type,
        "warmup_requests": args.warmup,
        "warmup_s": args.warmup_s,
        "max_duration_s": args.max_duration_s,
        "repeats": args.repeats,
        "seed": args.seed,
        "request_timeout_s": args.timeout_s,
        "force_output_len": args.force_output_len,
        "request_deadline_s": args.deadline_s,
        "jitter": args.jitter,
        "host_noise_max_pct": args.host_noise_max_pct,
        "host_noise_retries": args.host_noise_retries,
    }
    data.update({k: v for k, v in given.items() if v is not None})
    if args.trace:
        trace = {"path": args.trace, "speed": args.trace_speed, "block_tokens": args.trace_block_tokens}
        data["trace"] = {k: v for k, v in trace.items() if v is not None} | (
            {"max_requests": args.trace_max_requests} if args.trace_max_requests is not None else {}
        )
    elif any(v is not None for v in (args.trace_speed, args.trace_block_tokens, args.trace_max_requests)):
        raise ConfigError("--trace-speed, --trace-block-tokens, --trace-max-requests: need --trace FILE")
    if args.no_unique_prompts:
        data["unique_prompts"] = False
    limits = {
        k: v
        for k, v in (("ttft_ms", args.slo_ttft_ms), ("tpot_ms", args.slo_tpot_ms), ("e2el_ms", args.slo_e2el_ms))
        if v is not None
    }
    if args.slo or limits:
        data["slo"] = {"preset": args.slo, **limits} if args.slo else limits
    try:
        spec = PerfSpec.model_validate(data)
    except ValidationError as err:
        line = validation_line(err)
        field, _, rest = line.partition(": ")
        raise ConfigError(f"{FLAGS.get(field.split('.')[0], field)}: {rest}") from None
    if spec.dataset and not Path(spec.dataset).is_file():
        raise ConfigError(f"--dataset: file {spec.dataset} not found; give a ShareGPT-format JSON file")
    if spec.trace:  # a bad line, or a span past the step's bound, fails here, before any request
        requests = load_trace(spec.trace.path, "--trace", spec.trace.max_requests)
        trace_span_note(requests, spec.trace, spec.max_duration_s, "--trace")
    if args.tokenizer and not Path(args.tokenizer).is_file():
        raise ConfigError(f"--tokenizer: file {args.tokenizer} not found; give the model's GGUF file or leave it out")
    if args.model_bytes is not None and args.model_bytes <= 0:
        raise ConfigError(f"--model-bytes: {args.model_bytes} is not positive; give the weights' size in bytes")
    return spec


def is_local(url: str) -> bool:
    return (urlparse(url).hostname or "") in LOOPBACK


def scenarios_without_ok(results: list[dict]) -> list[str]:
    """Scenarios in which no request was ok: `tradeoff perf` then exits non-zero (its file is still written)."""
    return [r["scenario"] for r in results if not r.get("num_ok")]
