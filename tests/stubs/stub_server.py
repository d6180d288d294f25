"""A local OpenAI-style SSE server used as a measuring instrument and to feed the client bad streams.

The request's `model` picks the behaviour: ok (finish_reason length), stop (finish_reason
stop), usage, html, garbage, http500, cut, empty, stall (two chunks, then 3 s of silence),
overloaded (every other request HTTP 503 with OpenAI's error JSON, message "overloaded"), slow (ok, 20 ms a chunk);
hostile ones: ping (': ping' every second, never an event, for up to a minute), nonewline
(1.5 MiB without a newline), and the ODD shapes (two good chunks, then one odd JSON event).
"""

from __future__ import annotations

import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

# Odd but well-formed JSON a server may send (issue 18): each must err its request, never the sweep.
ODD = {
    "odd-usage": {"choices": [], "usage": "n/a"},
    "odd-choices": {"choices": "x"},
    "odd-tokens": {"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": "many"}},
    "odd-negative": {"choices": [], "usage": {"completion_tokens": -4}},
    "odd-choice": {"choices": [5]},
    "odd-text": {"choices": [{"index": 0, "text": 5, "finish_reason": None}]},
    "odd-finish": {"choices": [{"index": 0, "text": " t", "finish_reason": 3}]},
    "odd-details": {"choices": [], "usage": {"completion_tokens": 4, "completion_tokens_details": [1]}},
    "odd-billions": {"choices": [], "usage": {"completion_tokens": 3_000_000_000}},  # over the int32 column (issue 26)
}


def _chunk(text: str, finish: str | None = None) -> bytes:
    obj = {"choices": [{"index": 0, "text": text, "finish_reason": finish}]}
    return f"data: {json.dumps(obj)}\n\n".encode()


class Handler(BaseHTTPRequestHandler):
    tokens = 5
    posts = 0  # completions asked for so far (every mode), for a test that counts them or acts once some were
    _count = threading.Lock()

    def log_message(self, *args):  # quiet
        pass

    def do_GET(self):
        body = json.dumps({"data": [{"id": "stub"}]}).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _start(self, ctype="text/event-stream"):
        self.send_response(200)
        self.send_header("content-type", ctype)
        self.end_headers()

    def do_POST(self):
        req = json.loads(self.rfile.read(int(self.headers["content-length"])))
        mode = req.get("model", "ok")
        with Handler._count:
            Handler.posts += self.path.endswith("completions")
            nth = Handler.posts
        if mode == "overloaded" and nth % 2 == 0:
            body = json.dumps({"error": {"message": "overloaded", "type": "server_error", "code": 503}}).encode()
            self.send_response(503)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        if mode == "http500":
            self.send_response(500)
            self.send_header("content-length", "4")
            self.end_headers()
            self.wfile.write(b"boom")
            return
        if mode == "html":
            self._start("text/html")
            self.wfile.write(b"<html>nope</html>")
            return
        self._start()
        if mode == "ping":
            for _ in range(60):  # a keep-alive comment every second, never an event
                self.wfile.write(b": ping\n\n")
                self.wfile.flush()
                time.sleep(1.0)
            return
        if mode == "nonewline":
            for _ in range(24):  # 1.5 MiB in 64 KiB writes, never a newline
                self.wfile.write(b"x" * 65536)
            time.sleep(2)
            return
        if mode in ODD:
            self.wfile.write(_chunk(" t0") + _chunk(" t1"))
            self.wfile.write(f"data: {json.dumps(ODD[mode])}\n\n".encode() + b"data: [DONE]\n\n")
            return
        if mode == "garbage":
            self.wfile.write(b"data: {not json\n\n")
            return
        if mode == "empty":
            self.wfile.write(_chunk("", "stop") + b"data: [DONE]\n\n")
            return
        n = req.get("max_tokens", self.tokens)
        for i in range(n):
            last = i == n - 1 and mode != "cut"
            self.wfile.write(_chunk(f" t{i}", ("stop" if mode == "stop" else "length") if last else None))
            self.wfile.flush()
            if mode == "cut" and i == 1:
                return  # connection closes mid-stream, no [DONE]
            if mode == "stall" and i == 1:
                time.sleep(3)  # the server hangs mid-stream; the client's read timeout ends the request
            if mode == "slow":
                time.sleep(0.02)
        if mode == "usage":
            usage = {"prompt_tokens": 7, "completion_tokens": 42, "total_tokens": 49}
            self.wfile.write(f"data: {json.dumps({'choices': [], 'usage': usage})}\n\n".encode())
        self.wfile.write(b"data: [DONE]\n\n")


class StubServer(ThreadingHTTPServer):
    """Keeps what went wrong while serving (a client that hung up mid-response) in `errors` instead of printing a
    traceback into the test process's stderr, which tests of the command's own stderr read."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.errors: list[str] = []

    def handle_error(self, request, client_address) -> None:
        self.errors.append(f"{client_address}: {sys.exc_info()[1]!r}")


def start_stub() -> tuple[StubServer, str]:
    srv = StubServer(("127.0.0.1", 0), Handler)
    srv.protocol_version = "HTTP/1.0"  # close after each response: a cut stream ends the connection
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv, f"http://127.0.0.1:{srv.server_address[1]}"
