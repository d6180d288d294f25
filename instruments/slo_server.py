"""A streaming OpenAI-style server whose latency is set by the test: a single-slot engine that serves one
request at a time, each taking `service_ms` before its first chunk (then its tokens at once).

Requests queue for the slot (first come, first served), so time to first token is the wait plus
`service_ms`: its capacity is 1000 / service_ms requests/s, above which the queue grows without end. Under
Poisson arrivals at rate λ it is an M/D/1 queue, whose waiting time W has a known distribution (Erlang's
formula, `md1_wait_cdf`): the p-th percentile of TTFT = W + service is within a limit L while
P(W <= L - service) >= p, which `md1_highest_rate` solves for λ. That gives the sustainable-load search a known
answer (tests/integration/test_recommend.py, benchmarks/load_search.py).
"""

from __future__ import annotations

import json
import math
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

# The sustainable-load case the nightly test runs and benchmarks/slo_check.py simulates: 40 ms a request
# (capacity 25 req/s), p90 TTFT <= 240 ms at 95 %, rate steps at 12 and 30 req/s, 300 measured requests a step,
# a search of 4 steps at most to within 12 %.
SEARCH_CASE = {
    "service_ms": 40.0,
    "limit_ms": 240.0,
    "percentile": 90.0,
    "rates": (12.0, 30.0),
    "requests": 300,
    "max_steps": 4,
    "tolerance_pct": 12.0,
}


def md1_wait_cdf(t_s: float, rate: float, service_s: float) -> float:
    """P(W <= t) of an M/D/1 queue's waiting time (Erlang 1909; e.g. Iversen, Teletraffic Engineering, 10.4.2):
    (1 - ρ) Σ_{k=0}^{floor(t/D)} [λ(kD - t)]^k / k! e^{-λ(kD - t)}, ρ = λD < 1. The alternating sum is exact and
    numerically fine for t up to a few tens of D."""
    rho = rate * service_s
    if rho >= 1:
        return 0.0
    total = 0.0
    for k in range(int(math.floor(t_s / service_s + 1e-12)) + 1):
        x = rate * (k * service_s - t_s)
        total += x**k / math.factorial(k) * math.exp(-x)
    return (1 - rho) * total


def md1_highest_rate(service_s: float, limit_s: float, percentile: float) -> float:
    """The highest Poisson rate (req/s) at which the stub's percentile of TTFT (wait + service) is within limit_s."""
    from scipy.optimize import brentq

    target = percentile / 100.0
    capacity = 1.0 / service_s
    return brentq(lambda lam: md1_wait_cdf(limit_s - service_s, lam, service_s) - target, 1e-9, capacity * (1 - 1e-9))


def start_paced_stub(service_ms: float) -> tuple[ThreadingHTTPServer, str]:
    """Serve on a free loopback port; returns (server, base URL). Stop with server.shutdown()."""
    slot = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):  # quiet
            pass

        def do_GET(self):
            body = json.dumps({"data": [{"id": "paced"}]}).encode()
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_POST(self):
            req = json.loads(self.rfile.read(int(self.headers["content-length"])))
            n = int(req.get("max_tokens") or 4)
            self.send_response(200)
            self.send_header("content-type", "text/event-stream")
            self.end_headers()
            with slot:  # one request at a time: the others wait here, as in a single-slot engine's queue
                time.sleep(service_ms / 1000.0)
                for i in range(n):
                    obj = {
                        "choices": [{"index": 0, "text": f" t{i}", "finish_reason": "length" if i == n - 1 else None}]
                    }
                    self.wfile.write(f"data: {json.dumps(obj)}\n\n".encode())
                self.wfile.write(b"data: [DONE]\n\n")
                self.wfile.flush()

    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    srv.protocol_version = "HTTP/1.0"
    srv.daemon_threads = True
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv, f"http://127.0.0.1:{srv.server_address[1]}"
