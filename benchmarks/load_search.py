"""The sustainable-load search against a server whose latency is known: does it find the right rate?

A single-slot server (tests/stubs/slo_stub.py) takes SERVICE ms per request; requests arrive evenly (burstiness
100). Above 1000 / SERVICE req/s request k waits k x (SERVICE - 1000 / rate) ms, so over N measured
requests numpy's p99 TTFT is SERVICE + (N - 1) x 0.99 x (SERVICE - 1000 / rate) ms and the highest rate
within a TTFT limit L is 1000 / (SERVICE - (L - SERVICE) / ((N - 1) x 0.99)). The sweep measures a low and
a high rate; the search (tasks/perf/load_search.py) bisects between them. Prints, per service time, that rate,
the search's best passing and first failing rate, its steps and seconds.

    python benchmarks/load_search.py
"""

from __future__ import annotations

import time

from common import ROOT  # noqa: F401 - puts the repository on sys.path

from tasks.core.config import RunConfig
from tasks.perf.load_search import bracket, check_step, search_load
from tasks.perf.sweep import run_perf
from tasks.perf.workload import make_workload
from tests.stubs.slo_stub import start_paced_stub

N = 20


def one(service_ms: float, limit_ms: float) -> None:
    capacity = 1000.0 / service_ms
    expected = 1000.0 / (service_ms - (limit_ms - service_ms) / ((N - 1) * 0.99))
    srv, url = start_paced_stub(service_ms)
    try:
        cfg = RunConfig.model_validate({
            "models": {"m": {"path": __file__}},
            "variants": [{"name": "a", "model": "m", "quantization": "q4_1", "reference": True}],
            "perf": {"rates": [capacity / 5, capacity * 2], "burstiness": 100.0, "num_prompts": N, "warmup_requests": 1,
                     "input_len": 8, "output_len": 4, "slo": {"ttft_ms": limit_ms}},
            "decision": {"search": {"budget_s": 120, "max_steps": 6, "tolerance_pct": 4}}})
        workload = make_workload(cfg.perf, str.split, " ".join)
        t0 = time.monotonic()
        sweep = run_perf(cfg.perf, url, "paced", workload, None)
        span = bracket(sweep, {"ttft_ms": limit_ms}, 99)
        added = search_load(cfg, url, "paced", workload, None, None, sweep)
        took = time.monotonic() - t0
    finally:
        srv.shutdown()
    if span is None:
        print(f"service {service_ms:5.0f} ms: the sweep left nothing to bracket (the low rate missed the SLO or the high "
              f"one met it): a loaded host? {[sc.step.label for sc in sweep]}")
        return
    judged = [(sc.step.rate, check_step([r for run in sc.runs for r in run.measured], {"ttft_ms": limit_ms}, 99).met)
              for sc in added]
    best = max([r for r, met in judged if met] + [span[0]])
    miss = min([r for r, met in judged if not met and r > best] + [span[1]])
    print(f"service {service_ms:5.0f} ms, p99 TTFT <= {limit_ms:4.0f} ms: expected limit {expected:6.2f} req/s; "
          f"search: meets at {best:6.2f}, misses at {miss:6.2f} req/s ({(best / expected - 1) * 100:+.1f} %, "
          f"{len(added)} steps, {took:.1f} s with the sweep)")


if __name__ == "__main__":
    for service_ms, limit_ms in ((20.0, 100.0), (50.0, 250.0), (100.0, 500.0)):
        one(service_ms, limit_ms)
