"""`tradeoff perf` results as `vllm bench serve --save-result` writes them, plus tradeoff's own keys."""

from __future__ import annotations

import math
from collections import Counter
from datetime import datetime

from tasks.core.config import PerfSpec
from tasks.core.credentials import error_excerpt
from tasks.perf.error_share import causes_text, error_causes
from tasks.perf.sweep import Scenario
from tasks.perf.vllm_compat import vllm_keys
from warehouse.contract import PERCENTILES

# tradeoff's own summary keys, written after vLLM's (the warehouse's perf_results columns of the same names).
TRADEOFF_KEYS = (
    "scenario",
    "load_kind",
    "repeats",
    "num_requests",
    "num_ok",
    "num_errors",
    "num_incomplete",
    "num_warmup",
    "ttft_cv_pct_pooled",
    "itl_cv_pct_pooled",
    "ttft_p99_p50_ratio",
    "itl_p99_p50_ratio",
    "num_good",
    "goodput_slo",
    "slo_ttft_ms",
    "slo_tpot_ms",
    "slo_e2el_ms",
    "ci_level",
    "ci_method",
    *(
        f"{m}_ci_{e}"
        for m in ("ttft_ms_mean", "ttft_ms_p99", "request_throughput", "output_throughput")
        for e in ("low", "high")
    ),
    "peak_window_s",
    "energy_j",
    "energy_j_per_token",
    "tokens_per_j",
    "mean_power_w",
    "energy_source",
    "energy_note",
    "energy_by_device_j",
    "model_bytes",
    "mem_bandwidth_gb_s",
    "mem_bandwidth_method",
    "mbu_pct",
    "output_len_forced_by",
    "output_len_note",
    # 007_timing: reasoning-aware timing and jitter per repeat
    "ttft_answer_ms_mean",
    "ttft_answer_ms_p50",
    "ttft_answer_ms_p99",
    "total_reasoning_tokens",
    "total_answer_tokens",
    *(f"{m}_cv_pct_median{e}" for m in ("ttft", "itl") for e in ("", "_ci_low", "_ci_high")),
    "jitter_note",
    # 008_engine_energy: what was metered, the idle baseline, J/token above idle, how MBU's bytes were counted
    "energy_devices",
    "idle_power_w",
    "idle_window_s",
    "energy_above_idle_j",
    "energy_j_per_token_above_idle",
    "idle_note",
    "model_bytes_method",
    # 017_traffic: the send-time error of a schedule, and a step stopped early
    "send_error_ms_p50",
    "send_error_ms_p99",
    "send_error_ms_max",
    "saturated",
    "stop_reason",
)


def _per_request(measured: list) -> dict[str, list]:
    """`--save-detailed`'s per-request lists, in vLLM's names and units (seconds)."""
    return {
        "input_lens": [r.prompt_tokens for r in measured],
        "output_lens": [r.output_tokens or 0 for r in measured],
        # vLLM's per-request times: from the chunks with choices (tasks.perf.vllm_compat)
        "ttfts": [r.choice_offsets_ms[0] / 1000 if r.choice_offsets_ms else 0.0 for r in measured],
        "itls": [[(b - a) / 1000 for a, b in zip(r.choice_offsets_ms, r.choice_offsets_ms[1:])] for r in measured],
        "start_times": [r.start_ms / 1000 for r in measured],
        "generated_texts": [r.text for r in measured],
        "errors": [error_excerpt(r.error) or "" for r in measured],
    }


def vllm_result(spec: PerfSpec, sc: Scenario, model: str, tokenizer_id: str | None, detailed: bool) -> dict:
    """One scenario as `vllm bench serve --save-result` writes it, plus tradeoff's own keys."""
    s = sc.summary
    step = sc.step
    measured = [r for run in sc.runs for r in run.measured if not r.is_warmup]
    ok = [r for r in measured if r.status == "ok"]  # send times are per repeat: never mix repeats in time
    out = {
        "date": datetime.now().strftime("%Y%m%d-%H%M%S"),
        "endpoint_type": "openai-chat" if spec.endpoint == "chat" else "openai",
        "backend": "openai-chat" if spec.endpoint == "chat" else "openai",
        "label": "tradeoff",
        "model_id": model,
        "tokenizer_id": tokenizer_id,
        "num_prompts": spec.num_prompts,
        "request_rate": step.rate if step.rate else "inf",
        "burstiness": spec.burstiness,
        "max_concurrency": step.concurrency,
        "total_input_tokens": s["total_input_tokens"],
        "total_output_tokens": s["total_output_tokens"],
        # duration, completed, failed, throughputs, peaks and the latencies: vLLM's definitions
        **vllm_keys([run.measured for run in sc.runs], s, [*PERCENTILES, *spec.percentiles]),
    }
    for m in ("ttft", "tpot", "itl", "e2el"):
        out[f"sample_std_{m}_ms"] = s[f"{m}_ms_std"]  # tradeoff's own: ddof 1, over its output chunks
    # tradeoff's own variants of vLLM's figures, under their own names
    out["peak_output_tokens_per_s_sliding"] = s["peak_output_throughput"]
    out["output_throughput_repeat_mean"] = s["output_throughput"]
    if detailed:
        out.update(_per_request(measured))
    out.update({k: s.get(k) for k in TRADEOFF_KEYS})
    out["error_causes"] = error_causes(measured)  # failed requests by cause, with or without --detailed
    out["output_tokens_sources"] = dict(Counter(r.output_tokens_source for r in ok))
    out["prompt_tokens_sources"] = dict(Counter(r.prompt_tokens_source for r in ok))
    return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in out.items()}


def one_line(r: dict) -> str:
    """A scenario's headline numbers for the terminal."""
    f = lambda v, d=1: "-" if v is None else f"{v:.{d}f}"
    causes = causes_text(r.get("error_causes") or {})
    return (
        f"{r['scenario']:>8}: {r['num_ok']} ok, {r['num_errors']} errored, {r['num_incomplete']} incomplete"
        + (f" ({causes})" if causes else "")
        + "; "
        + f"{f(r['output_throughput'])} tok/s, "
        f"TTFT p50 {f(r['median_ttft_ms'])} ms, TPOT mean {f(r['mean_tpot_ms'], 2)} ms, "
        f"TTFT jitter {f(r['ttft_cv_pct_median'])} %, goodput {f(r['request_goodput'], 2)} req/s"
        + (f", MBU {f(r['mbu_pct'])} %" if r.get("mbu_pct") is not None else "")
        + (
            f", send error p50 {f(r['send_error_ms_p50'], 2)} ms p99 {f(r['send_error_ms_p99'], 2)} ms"
            if r.get("send_error_ms_p99") is not None
            else ""
        )
        + (f"; stopped: {r['stop_reason']}" if r.get("stop_reason") else "")
    )
