"""Hand-made runs for the decision (v_decision, v_quality_gate, v_recommendation): perf steps of known
latencies, quality deltas as the pipeline stores them, written as the flow writes a run folder."""

from __future__ import annotations

import json
import math
from datetime import datetime, timezone
from functools import lru_cache
from pathlib import Path

from tasks.core.config import DecisionSpec
from tests.helpers.queries import rows
from warehouse.contract import write_table

STARTED = datetime(2025, 2, 3, 4, 5, 6, tzinfo=timezone.utc)
SERVER_SLO = {"goodput_slo": "mlperf-llama2-70b-server", "slo_ttft_ms": 2000.0, "slo_tpot_ms": 200.0}


# Requests per hand-made step: enough to show a p99 at 95 % with none over a limit (299).
N = 300
# The retention gate (MLPerf's 99 % class), which these hand-made runs were written for; the default is a 2-point
# margin (DecisionSpec.margin_points): a config asks for retention by stating it.
RETENTION = {"retention": 0.99}


def step(
    scenario: str,
    concurrency: int,
    req_s: float,
    ttft_ms: list[float],
    *,
    tpot_ms: float = 20.0,
    errors: int = 0,
    rate: float | None = None,
    tps: float | None = None,
    j_per_token: float | None = None,
    energy_note: str | None = "no NVML, no RAPL",
    completion_rate: float | None = None,
    repeats: int = 1,
    reasoning: dict | None = None,
    req_s_ci: tuple[float, float] | None = None,
    kind: str | None = None,
    stop_reason: str | None = None,
    drift: bool = False,
    looks: int | None = None,
    extend_note: str | None = None,
) -> dict:
    """One perf step: its measured requests' TTFTs (+ `errors` failed ones) and its summary figures. A rate step's
    requests arrive evenly at `rate` over `repeats` repeats and return at `completion_rate` (default: as they
    arrive, after their latency). `reasoning`: {request index: ttft_answer_ms} of requests that reasoned first.
    `kind` 'trace': a replayed trace (its requests on `rate`'s schedule, no target rate stored); `stop_reason`: the
    step was stopped early as saturated. Requests are sent in a fixed scramble of the listed order (send_slots), as
    good as independent; `drift`: in the listed order (a list in rising order is then a drift, its requests
    correlated). `looks`: the step's claim planned over that many looks (decision.extend: perf_summary.slo_looks),
    `extend_note` what the extension did."""
    return dict(
        scenario=scenario,
        concurrency=concurrency,
        req_s=req_s,
        ttft_ms=ttft_ms,
        tpot_ms=tpot_ms,
        errors=errors,
        rate=rate,
        tps=tps if tps is not None else req_s * 64,
        j_per_token=j_per_token,
        energy_note=None if j_per_token is not None else energy_note,
        completion_rate=completion_rate,
        repeats=repeats,
        reasoning=reasoning or {},
        req_s_ci=req_s_ci,
        kind=kind,
        stop_reason=stop_reason,
        drift=drift,
        looks=looks,
        extend_note=extend_note,
    )


@lru_cache(maxsize=None)
def send_slots(n: int, repeats: int = 1) -> list[int]:
    """The send slot of each of a step's n listed requests (ok ones, then errors): a fixed scramble, slot s sending
    the request listed at (s * a) mod n with a coprime to n, so that a list written in rising order (a ramp of
    TTFTs, the over-limit ones last) is not sent as a drift. The SLO check counts correlated requests as fewer
    (v_slo_steps.n_effective); `a` is the first from ~0.38 n whose ramp, sent so and split into `repeats` (as
    request_times does), counts as every request, so that these steps are judged on n."""
    from tasks.core.percentiles import effective_requests

    if n < 3:
        return list(range(n))
    per = -(-n // repeats)
    first = None
    for a in (a for a in range(max(round(0.382 * n), 1), n) if math.gcd(a, n) == 1):
        sent = [slot * a % n for slot in range(n)]  # the listed index sent in each slot
        first = first or a
        if effective_requests([sent[i : i + per] for i in range(0, n, per)])[0] == n:
            break
    else:
        a = first
    slots = [0] * n
    for slot in range(n):
        slots[slot * a % n] = slot
    return slots


def request_times(s: dict, i: int, n: int, slot: int) -> dict:
    """start_s, end_s and repeat of listed request i of n, sent in `slot`, in step `s` (a rate step's schedule;
    closed-loop steps: none, their send order is the request index)."""
    if not s["rate"]:
        return {}
    per = -(-n // s["repeats"])
    rep, k = divmod(slot, per)
    start = k / s["rate"]
    latency = (s["ttft_ms"][i] if i < len(s["ttft_ms"]) else 0.0) / 1000 + 63 * s["tpot_ms"] / 1000
    end = start + latency if s["completion_rate"] is None else max(start + latency, (k + 1) / s["completion_rate"])
    return {"start_s": start, "end_s": end, "repeat": rep}


def delta(
    ref: float,
    value: float,
    ci: tuple[float, float] | None,
    n: int = 80,
    p_value: float | None = 0.5,
    lost: int | None = None,
    gained: int | None = None,
    **more,
) -> dict:
    """A quality_deltas row of arithmetic.accuracy (a right/wrong metric), its gate bounds as the pipeline stores
    them."""
    from tasks.quality.deltas import retention_interval

    low, high = retention_interval(ref, *ci, True) if ci else (None, None)
    return dict(
        reference_value=ref,
        value=value,
        delta=value - ref,
        ci_low=ci[0] if ci else None,
        ci_high=ci[1] if ci else None,
        n=n,
        p_value=p_value,
        n_lost=lost,
        n_gained=gained,
        retention_ci_low=low,
        retention_ci_high=high,
        look_confidence=0.95,
        looks=1,
        looks_planned=1,
        **more,
    )


def no_pair_differs(n: int) -> tuple[float, float]:
    """Tango's 95 % interval when none of `n` pairs differs (not [0, 0]: +-4.6 points at n = 80)."""
    from tasks.core.stat_tests import tango_interval

    return tango_interval(0, 0, n, 0.95)


def write_decision_run(
    root: Path,
    run_id: str,
    variants: dict[str, dict],
    decision: dict | None = None,
    started_at: datetime = STARTED,
    min_samples: int = 30,
    primary: str | None = "arithmetic.accuracy",
) -> Path:
    """A run as the flow writes it. variants: name -> {ref, status, error, steps, accuracy, delta, samples, cost}.

    `decision` is a DecisionSpec mapping stored in config_json as the flow stores it (None: a run recorded
    before the decision block existed).
    """
    res = root / run_id / "results"
    config = {"name": "demo", "quality": {"min_samples": min_samples}}
    if decision is not None:
        config["decision"] = DecisionSpec.model_validate(decision).model_dump(mode="json")
    ref = next(n for n, v in variants.items() if v.get("ref"))
    write_table(
        res,
        "runs",
        "run",
        [
            {
                "run_id": run_id,
                "config_name": "demo",
                "started_at": started_at,
                "status": "ok",
                "hardware_id": "hw1",
                "reference_variant": ref,
                "primary_quality_metric": primary,
                "config_json": json.dumps(config),
            }
        ],
    )
    for name, v in variants.items():
        cost = v.get("cost", {})
        write_table(
            res,
            "variants",
            name,
            [
                {
                    "run_id": run_id,
                    "variant": name,
                    "engine": "llama.cpp",
                    "quantization": name,
                    "is_reference": bool(v.get("ref")),
                    "status": v.get("status", "ok"),
                    "error": v.get("error"),
                    **cost,
                }
            ],
        )
        summary, requests = [], []
        for s in v.get("steps", []):
            n_ok = len(s["ttft_ms"])
            n_all = n_ok + s["errors"]
            slots = list(range(n_all)) if s.get("drift") else send_slots(n_all, s["repeats"] if s["rate"] else 1)
            ci = dict(zip(("request_throughput_ci_low", "request_throughput_ci_high"), s["req_s_ci"] or ()))
            summary.append(
                {
                    "run_id": run_id,
                    "variant": name,
                    "scenario": s["scenario"],
                    "concurrency": s["concurrency"],
                    "load_kind": s["kind"] or ("rate" if s["rate"] else "concurrency"),
                    "request_rate": None if s["kind"] == "trace" else s["rate"],
                    "saturated": s["stop_reason"] is not None if s["rate"] else None,
                    "stop_reason": s["stop_reason"],
                    "slo_looks": s["looks"],
                    "extend_note": s["extend_note"],
                    "num_requests": n_all,
                    "num_ok": n_ok,
                    "num_errors": s["errors"],
                    "duration_s": n_ok / s["req_s"],
                    "request_throughput": s["req_s"],
                    "output_throughput": s["tps"],
                    "energy_j_per_token": s["j_per_token"],
                    "energy_note": s["energy_note"],
                    "repeats": s["repeats"],
                    **ci,
                    **SERVER_SLO,
                }
            )
            requests += [
                {
                    "run_id": run_id,
                    "variant": name,
                    "scenario": s["scenario"],
                    "concurrency": s["concurrency"],
                    "request_index": slots[i],
                    "is_warmup": False,
                    "status": "ok",
                    "ttft_ms": t,
                    "tpot_ms": s["tpot_ms"],
                    "e2el_ms": t + 63 * s["tpot_ms"],
                    "output_tokens": 64,
                    "chunk_offsets_ms": [t + k * s["tpot_ms"] for k in range(64)],
                    **({"reasoning_tokens": 10, "ttft_answer_ms": s["reasoning"][i]} if i in s["reasoning"] else {}),
                    **request_times(s, i, n_all, slots[i]),
                }
                for i, t in enumerate(s["ttft_ms"])
            ]
            requests += [
                {
                    "run_id": run_id,
                    "variant": name,
                    "scenario": s["scenario"],
                    "concurrency": s["concurrency"],
                    "request_index": slots[n_ok + i],
                    "is_warmup": False,
                    "status": "error",
                    "error": "HTTP 503",
                    **request_times(s, n_ok + i, n_all, slots[n_ok + i]),
                }
                for i in range(s["errors"])
            ]
            # a warm-up request far over any limit: excluded from every check
            requests.append(
                {
                    "run_id": run_id,
                    "variant": name,
                    "scenario": s["scenario"],
                    "concurrency": 1,
                    "request_index": 10_000,
                    "is_warmup": True,
                    "status": "ok",
                    "ttft_ms": 1e6,
                    "tpot_ms": 1e4,
                    "e2el_ms": 2e6,
                    "output_tokens": 64,
                }
            )
        write_table(res, "perf_summary", name, summary)
        write_table(res, "perf_requests", name, requests)
        if "accuracy" in v:
            write_table(
                res,
                "quality_scores",
                name,
                [
                    {
                        "run_id": run_id,
                        "variant": name,
                        "suite": "arithmetic",
                        "suite_version": "1",
                        "metric": "accuracy",
                        "value": v["accuracy"],
                        "n": 80,
                        "unit": "fraction",
                        "higher_is_better": True,
                        "is_primary": True,
                        "sample_stat": "mean(score)",
                    }
                ],
            )
        if "delta" in v:
            write_table(
                res,
                "quality_deltas",
                name,
                [
                    {
                        "run_id": run_id,
                        "variant": name,
                        "reference_variant": ref,
                        "suite": "arithmetic",
                        "metric": "accuracy",
                        "unit": "fraction",
                        "higher_is_better": True,
                        "confidence": 0.95,
                        "verdict": "inconclusive",
                        **v["delta"],
                    }
                ],
            )
        if "samples" in v:
            write_table(
                res,
                "quality_samples",
                name,
                [
                    {
                        "run_id": run_id,
                        "variant": name,
                        "suite": "arithmetic",
                        "sample_id": str(i),
                        "score": float(score),
                        "valid": True,
                        "details": json.dumps({"prompt_tokens": 40, "output_tokens": 4}),
                    }
                    for i, score in enumerate(v["samples"])
                ],
            )
    return root / run_id


def ttfts(n: int, ms: float) -> list[float]:
    """N TTFTs from MS up, 1 ms apart."""
    return [ms + i for i in range(n)]


def by_variant(con, run_id: str = "d1") -> dict[str, dict]:
    """v_recommendation's rows of run RUN_ID by variant."""
    return {r["variant"]: r for r in rows(con, f"select * from v_recommendation where run_id = '{run_id}'")}


def reference_q4_1(**more) -> dict:
    """The reference of the demo-like runs: 0.5 / 1.0 req/s at c1 / c2, accuracy 0.5, the only energy and price
    figures (`more`: its samples, ...)."""
    return {
        "ref": True,
        "steps": [
            step("c1", 1, 0.5, ttfts(N, 300), j_per_token=0.5),
            step("c2", 2, 1.0, ttfts(N, 500), j_per_token=0.4),
        ],
        "accuracy": 0.5,
        "cost": {"usd_per_hour": 3.6},
        **more,
    }


def what_if_run() -> dict[str, dict]:
    """A run whose pick moves with each setting of the decision (the report's explorer): q4_1 (reference, the only
    energy and price figures), q4_1-2s (identical outputs, 1.6 req/s at c2 but TTFTs up to 1.2 s: shipped at TTFT
    2000 ms, not at 1000 ms), q5_k (identical outputs, 2 req/s, 60 requests a step: too few to show a p99, enough
    for a p90), q3_k_m (1.3 req/s, -1.25 points, 95 % CI -5 to +2.5: passes a 5-point margin only), q2_k (1.8
    req/s, 20 points worse) and q8_0 (failed)."""
    same = delta(0.5, 0.5, no_pair_differs(2000), n=2000, p_value=1.0, lost=0, gained=0)
    steady = lambda req_s, n=N, c2_ms=500: [
        step("c1", 1, req_s / 2, ttfts(n, 300)),
        step("c2", 2, req_s, ttfts(n, c2_ms)),
    ]
    return {
        "q4_1": reference_q4_1(),
        "q4_1-2s": {"steps": steady(1.6, c2_ms=900), "accuracy": 0.5, "delta": same},
        "q5_k": {"steps": steady(2.0, n=60, c2_ms=400), "accuracy": 0.5, "delta": same},
        "q3_k_m": {
            "steps": steady(1.3),
            "accuracy": 39 / 80,
            "delta": delta(0.5, 39 / 80, (-0.05, 0.025), lost=3, gained=2),
        },
        "q2_k": {"steps": steady(1.8), "accuracy": 0.3, "delta": delta(0.5, 0.3, (-0.28, -0.12))},
        "q8_0": {"status": "failed", "error": "ServerDied: server exited with code 1\nlog tail"},
    }
