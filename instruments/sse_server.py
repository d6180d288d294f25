"""A zero-latency OpenAI-style SSE server: a measuring instrument for client overhead.

It answers POST /v1/completions and /v1/chat/completions with `max_tokens` text chunks,
a final chunk with finish_reason 'length', a usage chunk and [DONE], all written at once
from a pre-built buffer (HTTP/1.1, chunked, keep-alive), and GET /v1/models. Whatever
gaps a client records between chunks are then the client's own processing time.

Run: python -m instruments.sse_server PORT   (prints 'ready' when listening)
"""

from __future__ import annotations

import asyncio
import json
import sys
from functools import lru_cache


def _http_chunk(data: bytes) -> bytes:
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


def _chunk(obj: dict) -> bytes:
    return _http_chunk(f"data: {json.dumps(obj, separators=(',', ':'))}\n\n".encode())


@lru_cache(maxsize=64)
def stream_body(n: int, chat: bool) -> bytes:
    """The whole response body for `n` tokens, HTTP-chunked, one SSE event per HTTP chunk."""
    parts = []
    for i in range(n):
        choice = (
            {"index": 0, "delta": {"content": f" t{i}"}, "finish_reason": None}
            if chat
            else {"index": 0, "text": f" t{i}", "finish_reason": None}
        )
        if i == n - 1:
            choice["finish_reason"] = "length"
        parts.append(_chunk({"id": "cmpl-0", "object": "text_completion", "model": "sse", "choices": [choice]}))
    parts.append(
        _chunk(
            {
                "id": "cmpl-0",
                "choices": [],
                "usage": {"prompt_tokens": 16, "completion_tokens": n, "total_tokens": 16 + n},
            }
        )
    )
    parts.append(_http_chunk(b"data: [DONE]\n\n"))
    parts.append(b"0\r\n\r\n")
    return b"".join(parts)


MODELS = json.dumps({"object": "list", "data": [{"id": "sse", "object": "model"}]}).encode()


async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            method, path = lines[0].split(" ")[:2]
            headers = {k.strip().lower(): v.strip() for k, v in (ln.split(":", 1) for ln in lines[1:] if ":" in ln)}
            body = await reader.readexactly(int(headers.get("content-length", "0")))
            if method == "GET":
                writer.write(
                    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                    + f"content-length: {len(MODELS)}\r\n\r\n".encode()
                    + MODELS
                )
            else:
                req = json.loads(body or b"{}")
                writer.write(
                    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                    b"transfer-encoding: chunked\r\ncache-control: no-cache\r\n\r\n"
                    + stream_body(int(req.get("max_tokens") or 16), "chat" in path)
                )
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    finally:
        writer.close()


async def serve(port: int) -> None:
    server = await asyncio.start_server(handle, "127.0.0.1", port, backlog=1024)
    print("ready", flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(serve(int(sys.argv[1])))
