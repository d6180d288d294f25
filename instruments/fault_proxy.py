"""A fault-injecting proxy in front of a real server: every `fail_every`-th POST answers HTTP 500, the others
pass through unchanged (streams chunk by chunk). A measuring instrument for error accounting: the answers
that get through are the real model's."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx


def start_proxy(upstream: str, fail_every: int) -> tuple[ThreadingHTTPServer, str]:
    """Serve on a free loopback port; returns the server (shutdown() it) and its base URL."""
    lock = threading.Lock()
    posts = [0]

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def _forward(self, method: str, body: bytes | None) -> None:
            headers = {"content-type": self.headers.get("content-type", "application/json")}
            with httpx.stream(method, upstream + self.path, content=body, headers=headers, timeout=300) as r:
                self.send_response(r.status_code)
                self.send_header("content-type", r.headers.get("content-type", "application/json"))
                self.end_headers()  # HTTP/1.0: the body ends when the connection closes
                for chunk in r.iter_raw():
                    self.wfile.write(chunk)
                    self.wfile.flush()

        def do_GET(self):
            self._forward("GET", None)

        def do_POST(self):
            body = self.rfile.read(int(self.headers["content-length"]))
            with lock:
                posts[0] += 1
                fail = posts[0] % fail_every == 0
            if fail:
                self.send_response(500)
                self.send_header("content-type", "text/plain")
                self.send_header("content-length", "14")
                self.end_headers()
                self.wfile.write(b"injected fault")
                return
            self._forward("POST", body)

    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    srv.protocol_version = "HTTP/1.0"
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv, f"http://127.0.0.1:{srv.server_address[1]}"
