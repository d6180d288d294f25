"""The hand-made run the warehouse tests load: reference q4_1, variant q2_k, failed q8_0, written as the flow
writes a run folder (write_sample_run)."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

from warehouse.contract import write_table

STARTED = datetime(2025, 1, 2, 3, 4, 5, tzinfo=timezone.utc)
# variant -> scenarios: (scenario, concurrency, output tok/s, peak tok/s, ttft mean, ttft p99, ttft cv %,
# itl mean, tpot mean, J/token, energy note). "burst" sorts before "single" but has the higher
# concurrency, so a headline picked by name instead of concurrency would show.
PERF = {
    "q4_1": [
        ("single", 1, 50.0, 60.0, 100.0, 150.0, 10.0, 20.0, 19.0, 0.5, None),
        ("burst", 4, 120.0, 140.0, 300.0, 500.0, 30.0, 30.0, 29.0, 0.3, None),
    ],
    "q2_k": [
        ("single", 1, 65.0, 170.0, 90.0, 120.0, 20.0, 15.0, 14.0, None, "no power counter"),
        ("burst", 4, 156.0, 150.0, 280.0, 450.0, 35.0, 25.0, 24.0, None, "RAPL not readable: permission denied"),
    ],
}
# variant -> {(suite, metric): value}; the failed variant q8_0 has none.
QUALITY = {
    "q4_1": {("arithmetic", "accuracy"): 0.80, ("fidelity", "kl-mean"): 0.0},
    "q2_k": {("arithmetic", "accuracy"): 0.68, ("fidelity", "kl-mean"): 0.031},
}
UNITS = {"accuracy": "fraction", "kl-mean": "nats"}


def write_sample_run(
    root: Path,
    run_id: str = "r1",
    started_at: datetime = STARTED,
    quality: dict | None = None,
    primary: str = "arithmetic.accuracy",
) -> Path:
    """A run as the flow writes it: reference q4_1, variant q2_k, failed q8_0; one part per variant."""
    quality = QUALITY if quality is None else quality
    run_dir = root / run_id
    res = run_dir / "results"
    write_table(
        res,
        "runs",
        "run",
        [
            {
                "run_id": run_id,
                "config_name": "demo",
                "started_at": started_at,
                "status": "partial",
                "reference_variant": "q4_1",
                "primary_quality_metric": primary,
            }
        ],
    )
    variants = [
        ("q4_1", "q4_1", None, True, "ok", None),
        ("q2_k", "q2_k", None, False, "ok", None),
        ("q8_0", "q8_0", "ngram", False, "failed", "server exited with code 1\nTraceback ..."),
    ]
    for name, quant, spec, is_ref, status, error in variants:
        write_table(
            res,
            "variants",
            name,
            [
                {
                    "run_id": run_id,
                    "variant": name,
                    "model": "smollm2-135m",
                    "engine": "llama.cpp",
                    "quantization": quant,
                    "speculative": spec,
                    "is_reference": is_ref,
                    "status": status,
                    "error": error,
                }
            ],
        )
    for variant, scenarios in PERF.items():
        summary, requests = [], []
        for sc, conc, tps, peak, ttft, p99, cv, itl, tpot, jpt, note in scenarios:
            summary.append(
                {
                    "run_id": run_id,
                    "variant": variant,
                    "scenario": sc,
                    "concurrency": conc,
                    "num_requests": 2,
                    "num_ok": 2,
                    "output_throughput": tps,
                    "peak_output_throughput": peak,
                    "ttft_ms_mean": ttft,
                    "ttft_ms_p99": p99,
                    "ttft_cv_pct_median": cv,
                    "itl_ms_mean": itl,
                    "tpot_ms_mean": tpot,
                    "energy_j_per_token": jpt,
                    "energy_note": note,
                }
            )
            requests += [
                {
                    "run_id": run_id,
                    "variant": variant,
                    "scenario": sc,
                    "concurrency": conc,
                    "request_index": i,
                    "is_warmup": i == 0,
                    "status": "ok",
                    "ttft_ms": ttft,
                    "output_tokens": 3,
                    "chunk_offsets_ms": [ttft, ttft + itl, ttft + 2 * itl],
                }
                for i in range(3)
            ]
        write_table(res, "perf_summary", variant, summary)
        write_table(res, "perf_requests", variant, requests)
    for variant, scores in quality.items():
        write_table(
            res,
            "quality_scores",
            variant,
            [
                {
                    "run_id": run_id,
                    "variant": variant,
                    "suite": s,
                    "suite_version": "1",
                    "metric": m,
                    "value": v,
                    "n": 2,
                    "unit": UNITS.get(m, "ratio"),
                    "is_primary": f"{s}.{m}" == primary,
                }
                for (s, m), v in scores.items()
            ],
        )
        write_table(
            res,
            "quality_samples",
            variant,
            [
                {"run_id": run_id, "variant": variant, "suite": s, "sample_id": str(i), "score": 1.0, "valid": True}
                for s in sorted({s for s, _ in scores})
                for i in range(2)
            ],
        )
    return run_dir
