"""The sustainable-load search against a live server whose capacity is known: does it find the right rate?

A single-slot server (instruments/slo_server.py) takes SERVICE ms per request, first come first served; under
Poisson arrivals it is an M/D/1 queue, and Erlang's formula for its waiting time gives the highest rate whose
p-th percentile of TTFT is within a limit (slo_server.md1_highest_rate). The sweep measures two rates, then the
search (tasks/decision/load_search.py) brackets and bisects; each step is judged as v_slo_steps judges it
(tasks/decision/slo.py). Prints, per case, that rate, the capacity, every step and the sustainable rate found.
benchmarks/slo_check.py simulates the same search without a live server (no host stalls).

    python benchmarks/load_search.py [--runs 3]
"""

from __future__ import annotations

import argparse
import time

from instruments.slo_server import SEARCH_CASE, md1_highest_rate, start_paced_stub
from tasks.core.config import RunConfig
from tasks.decision.load_search import chain, judge, search_load
from tasks.perf.sweep import run_perf
from tasks.perf.workload import make_workload


def one(case: dict) -> None:
    service, limit, pct = case["service_ms"], case["limit_ms"], case["percentile"]
    true = md1_highest_rate(service / 1000, limit / 1000, pct)
    srv, url = start_paced_stub(service)
    try:
        cfg = RunConfig.model_validate(
            {
                "models": {"m": {"path": __file__}},
                "variants": [{"name": "a", "model": "m", "quantization": "q4_1", "reference": True}],
                "perf": {
                    "rates": list(case["rates"]),
                    "num_prompts": 8,
                    "warmup_requests": 1,
                    "input_len": 8,
                    "output_len": 4,
                },
                "decision": {
                    "slo": {"ttft_ms": limit},
                    "percentile": pct,
                    "min_requests": case["requests"],
                    "search": {"budget_s": 600, "max_steps": case["max_steps"], "tolerance_pct": case["tolerance_pct"]},
                },
            }
        )
        workload = make_workload(cfg.perf, str.split, " ".join)
        t0 = time.monotonic()
        sweep = run_perf(cfg.perf, url, "paced", workload, None)
        added = search_load(cfg, url, "paced", workload, None, None, sweep)
        took = time.monotonic() - t0
    finally:
        srv.shutdown()
    judged = [(sc.step.rate, judge(sc, cfg)) for sc in sweep + added]
    best = chain([(rate, c.met) for rate, c in judged])[0]
    steps = "; ".join(f"{rate:.2f} {c.status} ({c.over['ttft_ms']}/{c.n} over)" for rate, c in sorted(judged))
    found = f"{best:.2f} req/s ({best / true:.0%})" if best else "none"
    print(
        f"service {service:g} ms, p{pct:g} TTFT <= {limit:g} ms: true {true:.2f} req/s, capacity "
        f"{1000 / service:.1f}; {steps}; sustainable {found}; {took:.0f} s"
    )


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    for _ in range(ap.parse_args().runs):
        one(SEARCH_CASE)
