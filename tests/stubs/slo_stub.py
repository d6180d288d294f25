"""A streaming OpenAI-style server whose latency is set by the test: a single-slot engine that serves one
request at a time, each taking `service_ms` before its first chunk (then its tokens at once).

Requests queue for the slot, so time to first token is the wait plus `service_ms`: at a steady arrival
rate below 1000 / service_ms requests/s there is no queue, above it the queue (and TTFT) grows with every
request. That gives the sustainable-load search a known answer (see tests/integration/test_recommend.py and
benchmarks/load_search.py).
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def start_paced_stub(service_ms: float) -> tuple[ThreadingHTTPServer, str]:
    """Serve on a free loopback port; returns (server, base URL). Stop with server.shutdown()."""
    slot = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):  # quiet
            pass

        def do_GET(self):  # noqa: N802
            body = json.dumps({"data": [{"id": "paced"}]}).encode()
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_POST(self):  # noqa: N802
            req = json.loads(self.rfile.read(int(self.headers["content-length"])))
            n = int(req.get("max_tokens") or 4)
            self.send_response(200)
            self.send_header("content-type", "text/event-stream")
            self.end_headers()
            with slot:  # one request at a time: the others wait here, as in a single-slot engine's queue
                time.sleep(service_ms / 1000.0)
                for i in range(n):
                    obj = {"choices": [{"index": 0, "text": f" t{i}", "finish_reason": "length" if i == n - 1 else None}]}
                    self.wfile.write(f"data: {json.dumps(obj)}\n\n".encode())
                self.wfile.write(b"data: [DONE]\n\n")
                self.wfile.flush()

    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    srv.protocol_version = "HTTP/1.0"
    srv.daemon_threads = True
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv, f"http://127.0.0.1:{srv.server_address[1]}"
