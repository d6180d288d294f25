"""A scripted, non-streaming OpenAI-style endpoint for quality suites: answers come from Python functions.

The request's `model` picks bad behaviours (http500, garbage, empty, loop); any other model is
answered by the test's `complete(prompt)` or `chat(messages)`. Stop sequences are applied.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable

LOOP_TEXT = "Once upon a time there was a cat. " + "The cat sat on the mat and looked at the moon. " * 40


def start(complete: Callable[[str], str], chat: Callable[[list[dict]], str] = lambda m: "") -> tuple[ThreadingHTTPServer, str]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def _send(self, status: int, body: bytes) -> None:
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_POST(self):
            req = json.loads(self.rfile.read(int(self.headers["content-length"])))
            mode = req.get("model")
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
            stops = req.get("stop") or []
            for stop in [stops] if isinstance(stops, str) else stops:
                text = text.split(stop)[0]
            choice = {"index": 0, "finish_reason": "stop",
                      **({"message": {"role": "assistant", "content": text}} if is_chat else {"text": text})}
            self._send(200, json.dumps({"choices": [choice]}).encode())

    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv, f"http://127.0.0.1:{srv.server_address[1]}"
