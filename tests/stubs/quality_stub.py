"""A scripted, non-streaming OpenAI-style endpoint for quality suites: answers come from Python functions.

The request's `model` picks bad behaviours (http500, garbage, empty, loop) and hostile ones (drip: a
completion one byte every DRIP_S; drip-headers: the status line and headers that way; huge: a
completion of HUGE_BYTES with its content-length; huge-nolength: the same without one); any other
model is answered by the test's `complete(prompt)` or `chat(messages)`, whose answer is sent as the
whole JSON body when it is a dict (an answer of the wrong shape). Stop sequences are applied.
GET answers /v1/models; GET /huge sends HUGE_BYTES.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable

LOOP_TEXT = "Once upon a time there was a cat. " + "The cat sat on the mat and looked at the moon. " * 40
DRIP_S = 0.25
HUGE_BYTES = 8 << 20


def _completion(text: str) -> bytes:
    return json.dumps({"choices": [{"index": 0, "finish_reason": "stop", "text": text}]}).encode()


def start(
    complete: Callable[[str], str], chat: Callable[[list[dict]], str] = lambda m: ""
) -> tuple[ThreadingHTTPServer, str]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def _send(self, status: int, body: bytes) -> None:
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _drip(self, data: bytes) -> None:
            try:
                for i in range(len(data)):
                    self.wfile.write(data[i : i + 1])
                    self.wfile.flush()
                    time.sleep(DRIP_S)
            except OSError:
                pass  # the client gave up

        def _huge(self, with_length: bool) -> None:
            head, tail = b'{"choices": [{"index": 0, "text": "', b'"}]}'
            self.send_response(200)
            self.send_header("content-type", "application/json")
            if with_length:
                self.send_header("content-length", str(len(head) + HUGE_BYTES + len(tail)))
            self.end_headers()
            try:
                self.wfile.write(head)
                for _ in range(HUGE_BYTES >> 16):
                    self.wfile.write(b"x" * 65536)
                self.wfile.write(tail)
            except OSError:
                pass

        def do_GET(self):
            if self.path == "/huge":
                return self._huge(with_length=False)
            self._send(200, json.dumps({"data": [{"id": "m"}]}).encode())

        def do_POST(self):
            req = json.loads(self.rfile.read(int(self.headers["content-length"])))
            mode = req.get("model")
            if mode == "drip":
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.end_headers()
                return self._drip(_completion("dripped"))
            if mode == "drip-headers":
                return self._drip(b"HTTP/1.0 200 OK\r\ncontent-type: application/json\r\n\r\n" + _completion("late"))
            if mode in ("huge", "huge-nolength"):
                return self._huge(with_length=mode == "huge")
            if mode == "http500":
                return self._send(500, b'{"error": "boom"}')
            if mode == "garbage":
                return self._send(200, b"{not json")
            is_chat = self.path.endswith("/chat/completions")
            if mode == "empty":
                text = ""
            elif mode == "loop":
                text = LOOP_TEXT
            else:
                text = chat(req["messages"]) if is_chat else complete(req["prompt"])
            if isinstance(text, dict):  # an answer of the wrong shape, sent as it is
                return self._send(200, json.dumps(text).encode())
            stops = req.get("stop") or []
            for stop in [stops] if isinstance(stops, str) else stops:
                text = text.split(stop)[0]
            choice = {
                "index": 0,
                "finish_reason": "stop",
                **({"message": {"role": "assistant", "content": text}} if is_chat else {"text": text}),
            }
            self._send(200, json.dumps({"choices": [choice]}).encode())

    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv, f"http://127.0.0.1:{srv.server_address[1]}"
