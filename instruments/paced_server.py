"""A paced OpenAI-style SSE server: a measuring instrument whose timing is known, to check the client's.

    python -m instruments.paced_server [--port 0]      prints "paced: serving on PORT", then serves

Answers POST /v1/completions and /v1/chat/completions with `max_tokens` output chunks: the first
`ttft` ms after the request was read, then one every `itl` ms plus a jitter drawn uniformly in
[-jitter, +jitter] ms (seeded by the prompt, so a rerun sends the same gaps). Each chunk is
written at an absolute target time (no drift) as its own HTTP/1.1 chunk with Nagle off, and
the time it was actually written is recorded. The request's `model` sets the pacing, as
comma-separated key=value pairs (defaults in PACE):

    ttft=60,itl=15,jitter=4      milliseconds
    ttft_jitter=20               the first chunk's delay varies by up to +-20 ms, seeded by the prompt
    reasoning=3                  chat: the first 3 chunks are reasoning deltas, the rest answer
    field=reasoning_content      the delta key reasoning comes in (vLLM's old name; `reasoning`:
                                 its new one; `both`: the same text under both keys)
    usage=1                      a final usage chunk (completion_tokens, and reasoning_tokens in
                                 completion_tokens_details)
    done=100                     ms between the last chunk and `data: [DONE]`
    finish=30                    as llama.cpp and vLLM end a stream: the last token's chunk has no
                                 finish_reason, a chunk with empty text and finish_reason follows
                                 30 ms later (its write time is the truth's `finish_ns`)
    close=1                      as llama-server does: the connection is closed after the answer although
                                 the response says keep-alive, and only once the client has sent its
                                 next request on it (so that request always finds it closed, never answered)
    heavy=2,pad=150000           chunk 2 carries a JSON array of 150,000 zeros: parsing it takes
                                 ~20 ms, so a client that stamped chunks after parsing shows it
    slow_from=5,slow_count=5,slow_ms=600
                                 a stall: the server's requests number 5 to 9 (0-based, in the order they
                                 came, counted over every model) get their first chunk 600 ms later
    slow_again=20                the same stall again for slow_count requests from number 20 on (a stall
                                 that returns when the stalled window is measured again, with other prompts)

GET /truth returns what was sent, per prompt (completions: `prompt`; chat: the last message's
content): {"recv_ns", "writes_ns": [...] (each chunk's write began), "written_ns": [...] (it
ended: the last byte was with the kernel), "kinds": ["reasoning" | "answer", ...], "finish_ns" (null
without `finish`), "done_ns"},
all from time.perf_counter_ns(), which on Linux is CLOCK_MONOTONIC, one clock for every
process of the host: the client's own stamps can be compared with it directly.
GET /v1/models lists the model `paced`.
"""

from __future__ import annotations

import argparse
import json
import random
import socket
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Iterator

from tasks.core.runinfo import PROJECT_ROOT

PACE = {
    "ttft": 60.0,
    "ttft_jitter": 0.0,
    "itl": 15.0,
    "jitter": 4.0,
    "reasoning": 0,
    "field": "reasoning_content",
    "usage": 0,
    "done": 0.0,
    "finish": -1.0,
    "heavy": -1,
    "pad": 150000,
    "close": 0,
    "slow_from": -1,
    "slow_count": 0,
    "slow_ms": 0.0,
    "slow_again": -1,
}

_TRUTH: dict[str, dict] = {}
_LOCK = threading.Lock()
_RECEIVED = [0]  # completions requests received so far (the stall's clock)


def pace(model: str) -> dict:
    """The model name's pacing over PACE's defaults; unknown keys are an error."""
    out = dict(PACE)
    for item in filter(None, (model or "").split(",")):
        key, _, value = item.partition("=")
        if key not in PACE:
            raise ValueError(f"unknown pacing key {key!r}; known: {', '.join(PACE)}")
        out[key] = type(PACE[key])(value) if not isinstance(PACE[key], str) else value
    return out


def gaps_ms(p: dict, n: int, key: str) -> list[float]:
    """The n - 1 gaps after the first chunk: itl +- jitter, seeded by the prompt."""
    rng = random.Random(f"{key}")
    return [p["itl"] + rng.uniform(-p["jitter"], p["jitter"]) for _ in range(n - 1)]


def ttft_ms(p: dict, key: str) -> float:
    """The first chunk's delay: ttft +- ttft_jitter, seeded by the prompt (a stream of its own)."""
    return p["ttft"] + random.Random(f"ttft {key}").uniform(-p["ttft_jitter"], p["ttft_jitter"])


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # small writes leave at once instead of waiting for an ACK

    def log_message(self, *args):  # quiet
        pass

    def _json(self, obj: object) -> None:
        body = json.dumps(obj).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        if self.path == "/truth":
            with _LOCK:
                return self._json(_TRUTH)
        return self._json({"object": "list", "data": [{"id": "paced", "object": "model"}]})

    def _event(self, obj: object) -> tuple[int, int]:
        """Write one SSE event as one HTTP chunk; returns when its write started and ended (ns)."""
        data = b"data: " + (obj if isinstance(obj, bytes) else json.dumps(obj).encode()) + b"\n\n"
        frame = b"%x\r\n%s\r\n" % (len(data), data)
        start = time.perf_counter_ns()
        self.wfile.write(frame)
        return start, time.perf_counter_ns()

    def do_POST(self):
        recv = time.perf_counter_ns()
        req = json.loads(self.rfile.read(int(self.headers["content-length"])))
        if not self.path.endswith("/completions"):  # e.g. a client asking for a tokenizer endpoint: none here
            self.send_response(404)
            self.send_header("content-length", "0")
            self.end_headers()
            return
        chat = self.path.endswith("/chat/completions")
        key = req["messages"][-1]["content"] if chat else req["prompt"]
        p = pace(req.get("model", ""))
        n = int(req.get("max_tokens") or 8)
        with _LOCK:
            ordinal = _RECEIVED[0]
            _RECEIVED[0] += 1
            stalled = any(
                0 <= start <= ordinal < start + p["slow_count"] for start in (p["slow_from"], p["slow_again"])
            )
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()
        targets = [recv + (ttft_ms(p, key) + (p["slow_ms"] if stalled else 0.0)) * 1e6]
        for g in gaps_ms(p, n, key):
            targets.append(targets[-1] + g * 1e6)
        writes, written, kinds = [], [], []
        for i, target in enumerate(targets):
            wait = (target - time.perf_counter_ns()) / 1e9
            if wait > 0:
                time.sleep(wait)
            kind = "reasoning" if chat and i < p["reasoning"] else "answer"
            fin = "length" if i == n - 1 and p["finish"] < 0 else None
            text = f" {kind[0]}{i}"
            if chat:
                if i == 0:
                    self._event(
                        {
                            "choices": [
                                {"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}
                            ]
                        }
                    )
                fields = ["reasoning_content", "reasoning"] if p["field"] == "both" else [p["field"]]
                delta = {f: text for f in fields} if kind == "reasoning" else {"content": text}
                obj = {"choices": [{"index": 0, "delta": delta, "finish_reason": fin}]}
            else:
                obj = {"choices": [{"index": 0, "text": text, "finish_reason": fin}]}
            if i == p["heavy"]:
                obj["pad"] = [0] * p["pad"]
            start, end = self._event(obj)
            writes.append(start)
            written.append(end)
            kinds.append(kind)
        finish = None
        if p["finish"] >= 0:  # due `finish` ms after the last token's write began, as the tokens' own targets
            time.sleep(max(0.0, (writes[-1] + p["finish"] * 1e6 - time.perf_counter_ns()) / 1e9))
            end = {"delta": {}} if chat else {"text": ""}
            finish, _ = self._event({"choices": [{"index": 0, **end, "finish_reason": "length"}]})
        if p["usage"]:
            n_reasoning = kinds.count("reasoning")
            self._event(
                {
                    "choices": [],
                    "usage": {
                        "prompt_tokens": 5,
                        "completion_tokens": n,
                        "total_tokens": n + 5,
                        "completion_tokens_details": {"reasoning_tokens": n_reasoning},
                    },
                }
            )
        if p["done"]:
            time.sleep(p["done"] / 1000)
        done, _ = self._event(b"[DONE]")
        self.wfile.write(b"0\r\n\r\n")
        with _LOCK:
            _TRUTH[key] = {
                "recv_ns": recv,
                "writes_ns": writes,
                "written_ns": written,
                "kinds": kinds,
                "finish_ns": finish,
                "done_ns": done,
            }
        if p["close"]:
            self.wfile.flush()
            # wait for the client's next request on this connection (or its close), then end the connection
            # unread: the request finds it closed (FIN), as one sent to llama-server just after an answer does
            self.connection.recv(1, socket.MSG_PEEK)
            self.connection.shutdown(socket.SHUT_WR)
            self.close_connection = True


@contextmanager
def running() -> Iterator[str]:
    """The paced server in its own process (its clock then never waits on the client's): its base URL."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "instruments.paced_server"], cwd=PROJECT_ROOT, stdout=subprocess.PIPE, text=True
    )
    try:
        yield f"http://127.0.0.1:{int(proc.stdout.readline().split()[-1])}"
    finally:
        proc.terminate()
        proc.wait(10)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, default=0)
    a = ap.parse_args()
    # a thread whose write is due waits for the GIL at most this long when another holds it (default 5 ms)
    sys.setswitchinterval(0.0005)
    srv = ThreadingHTTPServer(("127.0.0.1", a.port), Handler)
    srv.daemon_threads = True
    print(f"paced: serving on {srv.server_address[1]}", flush=True)
    srv.serve_forever()


if __name__ == "__main__":
    main()
