"""Every HTTP call to an OpenAI-compatible server, and the one wait-until-ready loop.

- the streaming client of the perf sweep (aiohttp, as `vllm bench serve` and AIPerf: on a
  2-core host that also runs the server, httpx cost ~25 ms of client CPU per 64-token request
  against aiohttp's ~15 ms, and a client's CPU is taken from the server it measures);
- plain completions and chat for the quality suites, GETs of /v1/models and /metrics (httpx);
- `wait_ready`: the one loop that waits for a server to answer (the launcher, hosted endpoints,
  `tradeoff perf`, the Prefect API);
- the auth headers of hosted endpoints: kept in this process only, sent by every call above.

Timestamps of the streaming client are taken with `perf_counter_ns`: send, every chunk (when
the bytes carrying it are read, before parsing; chunks that arrive in one read share its time),
end. tradeoff's own times use the chunks that carry output (text or reasoning); the keys it shares
with `vllm bench serve` use every chunk with a non-empty `choices` list, as vLLM times them.
Output tokens come from the server's `usage` when it sends one; otherwise, when the stream
finished for `length`, they are the requested max_tokens; otherwise they are counted with the
model's tokenizer; with none, the text chunks are counted and labelled `approx_chunks`. Prompt
tokens likewise: usage, tokenizer, or `approx_words`. Each request records which.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import os
import socket
import ssl
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import aiohttp
import httpx


@dataclass
class RequestRecord:
    """One request as the client saw it (times relative to the scenario's start, in ms)."""

    index: int
    status: str  # ok | error | incomplete
    start_ms: float
    ttft_ms: float | None = None
    e2el_ms: float | None = None
    prompt_tokens: int | None = None
    output_tokens: int | None = None
    output_tokens_source: str | None = None  # usage | max_tokens | tokenizer | approx_chunks
    chunk_offsets_ms: list[float] = field(default_factory=list)  # each text chunk, from send
    error: str | None = None
    text: str = ""
    is_warmup: bool = False
    prompt_tokens_source: str | None = None  # usage | tokenizer | approx_words
    finish_reason: str | None = None  # the server's: length | stop | ...
    max_tokens: int | None = None  # output tokens asked for
    repeat: int = 0
    # 007_timing: reasoning-aware timing (chat with a reasoning parser), and when the request returned
    ttft_answer_ms: float | None = None  # send -> first answer (non-reasoning) chunk; None: all reasoning
    reasoning_tokens: int | None = None  # output tokens that were reasoning (0 when no reasoning delta came)
    answer_tokens: int | None = None  # output tokens that were the answer: output_tokens - reasoning_tokens
    reasoning_tokens_source: str | None = None  # usage | tokenizer | approx_chunks; None without reasoning
    end_ms: float | None = None  # when the request returned, whatever its status (ms from the scenario's start)
    vllm_success: bool | None = None  # would `vllm bench serve` count it as successful (its `completed`)?
    # every chunk with a non-empty `choices` list, text or not (a finish chunk's text is empty): the
    # arrivals `vllm bench serve` times its TTFT, ITL and latency by (tasks.perf.vllm_compat)
    choice_offsets_ms: list[float] = field(default_factory=list)
    # 017_traffic: when a scheduled request (rate or trace step) was due, ms from the scenario's start; None:
    # closed loop. start_ms - scheduled_ms is its send-time error.
    scheduled_ms: float | None = None
    session_id: str | None = None  # a replayed trace's session (multi-turn conversation); None: none
    turn: int | None = None  # the request's depth in its session, 1-based
    # the prompt's length as built (the workload's tokenizer, or words); prompt_tokens becomes the server's count
    prompt_tokens_asked: int | None = None

    @property
    def itl_ms(self) -> list[float]:
        c = self.chunk_offsets_ms
        return [b - a for a, b in zip(c, c[1:])]

    @property
    def tpot_ms(self) -> float | None:
        if self.status != "ok" or not self.output_tokens or self.output_tokens < 2:
            return None
        return (self.e2el_ms - self.ttft_ms) / (self.output_tokens - 1)


HTTPError = httpx.HTTPError  # what the plain calls raise, whatever went wrong with the request; suites catch it


class NotReady(TimeoutError):
    """`wait_ready` gave up: the endpoint never answered 200 in time; `last` says what it did instead."""

    def __init__(self, where: str, timeout_s: float, last: str):
        self.last = last
        super().__init__(f"{where} did not answer 200 within {timeout_s:.0f} s ({last})")


class DeadlineExceeded(httpx.TimeoutException):
    """A plain call that had no complete answer within its total deadline (connect to last byte)."""


class BadResponse(httpx.HTTPError):
    """An answer the plain calls cannot use: too large, not JSON, or JSON of the wrong shape (the message names it)."""


def url(base_url: str, path: str) -> str:
    return base_url.rstrip("/") + path


class _Deadline:
    """Ends a blocking request at its total deadline: shuts its socket down from a timer, so a server that drips
    one byte at a time (each read in time, the whole never) is cut at the deadline, headers included."""

    def __init__(self, timeout_s: float):
        self.timeout_s = timeout_s
        self.expired = False
        self._socks: list[socket.socket] = []
        self._lock = threading.Lock()
        self._timer = threading.Timer(timeout_s, self._expire)
        self._timer.daemon = True

    def trace(self, event: str, info: dict) -> None:
        """httpcore's `trace` extension: keep a handle on each connection's socket as it is made."""
        if event != "connection.connect_tcp.complete":
            return
        sock = getattr(info.get("return_value"), "get_extra_info", lambda _: None)("socket")
        if sock is None:
            return
        dup = socket.socket(fileno=os.dup(sock.fileno()))  # the TLS wrapper keeps the same connection
        with self._lock:
            self._socks.append(dup)
            if self.expired:
                self._shutdown(dup)

    @staticmethod
    def _shutdown(sock: socket.socket) -> None:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)

    def _expire(self) -> None:
        with self._lock:
            self.expired = True
            for sock in self._socks:
                self._shutdown(sock)

    def __enter__(self) -> "_Deadline":
        self._timer.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._timer.cancel()
        with self._lock:
            for sock in self._socks:
                sock.close()
            self._socks.clear()


@functools.lru_cache(maxsize=1)
def _ssl_context() -> ssl.SSLContext:
    """The TLS settings every plain call verifies with, built once: httpx builds the same default context
    (certifi's roots, SSL_CERT_FILE / SSL_CERT_DIR when set) per client otherwise, ~20 ms of CPU per call."""
    return httpx.create_ssl_context()


def request(
    method: str,
    base_url: str,
    path: str,
    timeout_s: float,
    json_body: Any = None,
    headers: dict[str, str] | None = None,
    accept: str | None = None,
) -> httpx.Response:
    """One plain (non-streaming) call, its body read: the caps every call to an untrusted server gets.

    `timeout_s` bounds the whole call, connect to last byte (as the perf client's request deadline);
    a body (after content decoding) over MAX_RESPONSE_BYTES is refused, an error status's body is
    cut at MAX_ERROR_BODY_BYTES. Raises HTTPError subclasses only: DeadlineExceeded, BadResponse,
    httpx's own. `headers`: the endpoint's auth headers unless given. `accept`: a success whose content-type
    does not name it ('json') is refused before its body is read (a server that streams SSE to every POST).
    """
    timeout_s = max(timeout_s, 0.001)
    headers = endpoint_headers(base_url) if headers is None else headers
    with _Deadline(timeout_s) as deadline, httpx.Client(timeout=timeout_s, verify=_ssl_context()) as client:
        try:
            with client.stream(
                method, url(base_url, path), json=json_body, headers=headers, extensions={"trace": deadline.trace}
            ) as r:
                ctype = r.headers.get("content-type", "")
                if accept and r.status_code < 400 and accept not in ctype:
                    raise BadResponse(f"{path}: answered content-type '{ctype[:60]}', not {accept}")
                body = _read_capped(r, deadline)
        except httpx.HTTPError:
            if deadline.expired:
                raise DeadlineExceeded(f"no complete answer within the request deadline of {timeout_s:g} s") from None
            raise
    # The body as read (decoded): the content headers that described the wire no longer apply.
    kept = [
        (k, v)
        for k, v in r.headers.multi_items()
        if k.lower() not in ("content-encoding", "content-length", "transfer-encoding")
    ]
    return httpx.Response(r.status_code, headers=kept, content=bytes(body), request=r.request)


def _read_capped(r: httpx.Response, deadline: _Deadline) -> bytearray:
    """The body of a plain call's response (decoded): over MAX_RESPONSE_BYTES, declared or read, a success's is
    refused (BadResponse); an error status's is cut at MAX_ERROR_BODY_BYTES."""
    ok = r.status_code < 400
    limit = MAX_RESPONSE_BYTES if ok else MAX_ERROR_BODY_BYTES
    declared = r.headers.get("content-length", "")
    if ok and declared.isdigit() and int(declared) > limit:
        raise BadResponse(f"response body of {int(declared)} bytes is over the {limit}-byte limit")
    body = bytearray()
    for chunk in r.iter_bytes():
        body += chunk
        if len(body) > limit:
            if ok:
                raise BadResponse(f"response body over the {limit}-byte limit")
            del body[limit:]
            break
    if deadline.expired:  # the shut-down socket read as the end of a body without a length
        raise httpx.ReadError("connection shut down at the deadline")
    return body


def json_of(r: httpx.Response) -> Any:
    """The response's JSON; BadResponse when it is none (or nested deeper than the parser goes)."""
    try:
        return json.loads(r.content)
    except (ValueError, RecursionError) as err:
        raise BadResponse(f"answer is not JSON ({type(err).__name__}): {_excerpt(r.content)}") from None


def get(base_url: str, path: str, timeout_s: float = 10.0) -> httpx.Response:
    """GET `path` of an endpoint with its auth headers, under the caps of `request`; the response, whatever its
    status."""
    return request("GET", base_url, path, timeout_s)


def wait_ready(
    base_url: str,
    path: str = "/v1/models",
    timeout_s: float = 10.0,
    interval_s: float = 0.25,
    headers: dict[str, str] | None = None,
    alive: Callable[[], None] | None = None,
    final: Callable[[httpx.Response], None] | None = None,
) -> httpx.Response:
    """Poll GET `path` until it answers 200 and return that response.

    `alive()` runs before each try and raises when waiting is pointless (the server process died);
    `final(response)` may raise on an answer that will not change (401, 403). After `timeout_s`
    without a 200: NotReady with the last reason. Each try is one `request` (its caps), ended at
    the overall deadline at the latest.
    """
    deadline = time.monotonic() + timeout_s
    last = "no answer"
    while True:
        if alive is not None:
            alive()
        try:
            r = request("GET", base_url, path, min(10.0, max(deadline - time.monotonic(), 1.0)), headers=headers)
            if r.status_code == 200:
                return r
            if final is not None:
                final(r)
            last = f"HTTP {r.status_code}"
        except httpx.HTTPError as err:
            last = f"{type(err).__name__}: {err}" if str(err) else type(err).__name__
        if time.monotonic() + interval_s > deadline:
            raise NotReady(url(base_url, path), timeout_s, last)
        time.sleep(interval_s)


def _answer(r: httpx.Response, kind: str, usage: dict | None) -> str:
    """The text of a non-streaming completion or chat answer; BadResponse naming the field when its shape is wrong."""
    r.raise_for_status()
    obj = json_of(r)
    try:
        if not isinstance(obj, dict):
            raise BadChunk(f"answer is a JSON {type(obj).__name__}, not an object")
        choices = obj.get("choices")
        if not isinstance(choices, list) or not choices:
            raise BadChunk(
                "choices is missing or empty" if not choices else f"choices is a {type(choices).__name__}, not a list"
            )
        c = choices[0]
        if not isinstance(c, dict):
            raise BadChunk(f"choices[0] is a {type(c).__name__}, not an object")
        if kind == "chat":
            message = c.get("message")
            if not isinstance(message, dict):
                raise BadChunk(f"choices[0].message is a {type(message).__name__}, not an object")
            text = _text_field(message, "content", "choices[0].message.")
        else:
            text = _text_field(c, "text", "choices[0].")
        if usage is not None:
            usage.update(_usage(obj) or {})
    except BadChunk as err:
        raise BadResponse(f"malformed answer: {err}") from None
    # A lone surrogate (JSON's "\ud800") is no text: it would fail every encoder after this (tokenizers, Parquet).
    return text.encode("utf-8", "replace").decode("utf-8")


def complete(
    base_url: str,
    model: str,
    prompt: str,
    max_tokens: int,
    stop: list[str] | None = None,
    timeout_s: float = 120.0,
    min_tokens: int | None = None,
    usage: dict | None = None,
) -> str:
    """One greedy, non-streaming /v1/completions call under `request`'s caps; returns the text.

    `min_tokens` (llama.cpp and vLLM honour it) keeps a long generation going past EOS. A
    `usage` dict receives the server's token counts (what a hosted API bills), checked as the
    perf client checks them. Any answer that is not a completion raises BadResponse (an HTTPError).
    """
    body: dict[str, Any] = {"model": model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0.0}
    if stop:
        body["stop"] = stop
    if min_tokens:
        body["min_tokens"] = min_tokens
    return _answer(request("POST", base_url, "/v1/completions", timeout_s, body), "completions", usage)


def chat(
    base_url: str, model: str, messages: list[dict], max_tokens: int, timeout_s: float = 120.0, temperature: float = 0.0
) -> str:
    """One non-streaming /v1/chat/completions call (greedy by default) under `request`'s caps; returns the message
    text."""
    body = {"model": model, "messages": messages, "max_tokens": max_tokens, "temperature": temperature}
    return _answer(request("POST", base_url, "/v1/chat/completions", timeout_s, body), "chat", None)


# The tokenize and detokenize endpoints OpenAI-compatible servers add, by server: (tokenize path, its body, the key
# of the ids in its answer, detokenize path, its body, the key of the text). Probed in this order (tokenizer_api).
TOKENIZE_APIS: dict[str, tuple[str, Callable, str, str, Callable, str]] = {
    "llama-cpp-python": (
        "/extras/tokenize",
        lambda model, text: {"model": model, "input": text},
        "tokens",
        "/extras/detokenize",
        lambda model, ids: {"model": model, "tokens": ids},
        "text",
    ),
    "vllm": (
        "/tokenize",
        lambda model, text: {"model": model, "prompt": text, "add_special_tokens": False},
        "tokens",
        "/detokenize",
        lambda model, ids: {"model": model, "tokens": ids},
        "prompt",
    ),
    "llama.cpp": (
        "/tokenize",
        lambda model, text: {"content": text},
        "tokens",
        "/detokenize",
        lambda model, ids: {"tokens": ids},
        "content",
    ),
}


def tokenize(base_url: str, model: str, api: str, text: str, timeout_s: float = 30.0) -> list[int]:
    """The server's own token ids of `text` (no special tokens added where the server lets one say so)."""
    path, body, key, *_ = TOKENIZE_APIS[api]
    answer = json_of(request("POST", base_url, path, timeout_s, body(model, text), accept="json"))
    ids = answer.get(key) if isinstance(answer, dict) else None
    if not isinstance(ids, list) or not all(isinstance(i, int) for i in ids):
        raise BadResponse(f"{path}: no list of token ids under {key!r}")
    return ids


def detokenize(base_url: str, model: str, api: str, ids: list[int], timeout_s: float = 30.0) -> str:
    """The server's own text of token ids `ids`."""
    *_, path, body, key = TOKENIZE_APIS[api]
    answer = json_of(request("POST", base_url, path, timeout_s, body(model, ids), accept="json"))
    text = answer.get(key) if isinstance(answer, dict) else None
    if not isinstance(text, str):
        raise BadResponse(f"{path}: no text under {key!r}")
    return text


def tokenizer_api(base_url: str, model: str, timeout_s: float = 10.0) -> str | None:
    """Which of TOKENIZE_APIS the server at `base_url` answers (tokenize and detokenize, the text back); None: none.
    A server that lets a probe run out its time answers no other API either: the probing ends there (a broken
    server cost 4 x 10 s here before the first perf request, issue 49)."""
    probe = "Request 0 nonce 1f2e3d4c: time year people"
    for api in TOKENIZE_APIS:
        try:
            ids = tokenize(base_url, model, api, probe, timeout_s)
            if ids and detokenize(base_url, model, api, ids, timeout_s).strip() == probe:
                return api
        except httpx.TimeoutException:
            return None
        except (httpx.HTTPError, ValueError, AttributeError):
            continue
    return None


def request_body(kind: str, model: str, prompt: str, max_tokens: int, force: str | None) -> dict:
    """The JSON body of one streamed, greedy perf request (`force`: how the output length is forced)."""
    body: dict = {
        "model": model,
        "max_tokens": max_tokens,
        "temperature": 0.0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if kind == "chat":
        body["messages"] = [{"role": "user", "content": prompt}]
    else:
        body["prompt"] = prompt
    if force in ("min_tokens", "both"):
        body["min_tokens"] = max_tokens
    if force in ("ignore_eos", "both"):
        body["ignore_eos"] = True
    return body


# What one response may send, to the streaming client and the plain calls alike (`request`): a server is
# untrusted input (issues 18, 26). No SSE line of a real completions stream comes near 1 MiB, nor a
# response near 64 MiB (~4,000 tokens of chat chunks are ~1 MB); past them the request is errored
# instead of growing memory without bound. A token count is an int32 column of the warehouse.
MAX_SSE_LINE_BYTES = 1 << 20


MAX_TOKEN_COUNT = 2**31 - 1


MAX_RESPONSE_BYTES = 64 << 20


MAX_ERROR_BODY_BYTES = 4096  # read of a non-200 body, of which 200 characters are kept
STALE_CONNECTION_RESENDS = 3  # sends again of a request the server never answered (a pooled connection it had closed)


class BadChunk(ValueError):
    """An SSE event whose JSON does not have the shape of a completions chunk; the message names the field."""


def _text_field(d: dict, key: str, where: str) -> str:
    v = d.get(key)
    if v is None:
        return ""
    if not isinstance(v, str):
        raise BadChunk(f"{where}{key} is a {type(v).__name__}, not a string")
    return v


def _chunk_text(kind: str, obj: dict) -> tuple[str, str, str | None]:
    """(answer text, reasoning text, finish_reason) of one SSE chunk; BadChunk when its shape is wrong.

    Reasoning comes as vLLM's reasoning parsers send it in chat deltas: `reasoning_content`, or
    `reasoning` (its newer name; servers that send both send the same text, so one is read).
    """
    # The common shapes are checked inline (this runs once per chunk); _text_field names an odd field.
    choices = obj.get("choices")
    if type(choices) is not list:
        if choices is None:
            return "", "", None
        raise BadChunk(f"choices is a {type(choices).__name__}, not a list")
    if not choices:
        return "", "", None
    c = choices[0]
    if type(c) is not dict:
        raise BadChunk(f"choices[0] is a {type(c).__name__}, not an object")
    if kind == "chat":
        delta = c.get("delta") or {}
        if type(delta) is not dict:
            raise BadChunk(f"choices[0].delta is a {type(delta).__name__}, not an object")
        text, reasoning = delta.get("content"), delta.get("reasoning_content") or delta.get("reasoning")
        if (text is not None and type(text) is not str) or (reasoning is not None and type(reasoning) is not str):
            for key in ("content", "reasoning_content", "reasoning"):
                _text_field(delta, key, "choices[0].delta.")
    else:
        text, reasoning = c.get("text"), None
        if text is not None and type(text) is not str:
            _text_field(c, "text", "choices[0].")
    fin = c.get("finish_reason")
    if fin is not None and type(fin) is not str:
        raise BadChunk(f"choices[0].finish_reason is a {type(fin).__name__}, not a string")
    return text or "", reasoning or "", fin


def _count(v: object, name: str) -> int | None:
    """A token count from the server: a whole number from 0 to MAX_TOKEN_COUNT, else BadChunk naming it."""
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v <= MAX_TOKEN_COUNT or int(v) != v:
        raise BadChunk(f"{name} is {v!r}, not a token count")
    return int(v)


def _usage(obj: dict) -> dict[str, int] | None:
    """The chunk's usage as {prompt_tokens, completion_tokens, reasoning_tokens} (those given); None without one."""
    u = obj.get("usage")
    if u is None:
        return None
    if not isinstance(u, dict):
        raise BadChunk(f"usage is a {type(u).__name__}, not an object")
    out = {k: _count(u.get(k), f"usage.{k}") for k in ("prompt_tokens", "completion_tokens")}
    details = u.get("completion_tokens_details")
    if details is not None:
        if not isinstance(details, dict):
            raise BadChunk(f"usage.completion_tokens_details is a {type(details).__name__}, not an object")
        out["reasoning_tokens"] = _count(
            details.get("reasoning_tokens"), "usage.completion_tokens_details.reasoning_tokens"
        )
    return {k: v for k, v in out.items() if v is not None}


def _excerpt(data: bytes) -> str:
    return repr(data[:80].decode(errors="replace"))


def stream_session(base_url: str, slots: int, timeout_s: float) -> aiohttp.ClientSession:
    """The session a perf step streams its requests in: `slots` connections, `timeout_s` per wait for bytes
    (per read, not per request), 10 s to connect, and the endpoint's bound headers. Use it with `async with`."""
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=10.0, sock_read=timeout_s)
    return aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=slots), timeout=timeout, headers=endpoint_headers(api_root(base_url))
    )


async def stream_request(
    client: aiohttp.ClientSession,
    url: str,
    body: dict,
    kind: str,
    index: int,
    origin_ns: int,
    count_tokens: Callable[[str], int] | None,
    prompt_tokens: int | None,
    prompt_tokens_source: str | None = None,
    repeat: int = 0,
    deadline_s: float | None = None,
    live: dict[int, RequestRecord] | None = None,
) -> RequestRecord:
    """Send one streaming request; never raises: failures become status 'error' or 'incomplete'.

    `live`: the record is put there under `index` as soon as it is sent, so a caller can see, while it streams,
    whether its first chunk came (a load loop's stopping rules read it; nothing per chunk is added).

    `deadline_s` bounds the whole request, first send to last byte, a resend on a stale
    pooled connection included (a server that keeps a stream alive with `: ping` comments
    is cut there); `timeout_s` of the session bounds each wait
    for bytes. Each chunk carrying output (answer text or reasoning) is stamped when the
    bytes carrying it are read; TTFT is the first of them (any output, as vLLM), TTFT of the
    answer the first answer chunk.
    """
    t_send = time.perf_counter_ns()
    rec = RequestRecord(
        index=index,
        status="error",
        start_ms=(t_send - origin_ns) / 1e6,
        prompt_tokens=prompt_tokens,
        prompt_tokens_source=prompt_tokens_source if prompt_tokens is not None else None,
        prompt_tokens_asked=prompt_tokens,
        max_tokens=body.get("max_tokens"),
        repeat=repeat,
        vllm_success=False,
    )
    if live is not None:
        live[index] = rec
    stream = _SseStream(rec, kind, t_send)
    # One deadline from the first send, resends included: a request costs at most its deadline (issue 49).
    due = None if deadline_s is None else asyncio.get_running_loop().time() + deadline_s
    deadline = asyncio.timeout_at(due)
    try:
        for resend in range(STALE_CONNECTION_RESENDS + 1):
            try:
                error = await _post_and_read(client, url, body, deadline, stream)
                break
            except (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError) as err:
                if (
                    stream.responded
                    or isinstance(err, aiohttp.ClientConnectorError)
                    or resend == STALE_CONNECTION_RESENDS
                ):
                    raise
            # No answer at all: the pooled connection was one the server had closed. llama-server closes each
            # connection after a streamed answer while its headers say keep-alive, and a request sent before its FIN
            # arrives fails within a millisecond without reaching it: "Server disconnected" (7 of 24 requests of a
            # demo step) or, when the close comes while the body is written, "Can not write request body" (1 of 16
            # at concurrency 4, now and then). As curl and urllib3 do, it is sent again and timed from that send;
            # the pool may hand out a second closed connection (each failed one leaves it), so a few times at most;
            # a connection that cannot be made at all is not tried again.
            t_send = time.perf_counter_ns()
            rec.start_ms = (t_send - origin_ns) / 1e6
            stream.t_send = t_send
            deadline = asyncio.timeout_at(due)
    except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as err:
        if not stream.done:  # after [DONE] (draining the body's end) nothing is lost
            return _fail(rec, *_cut_short(err, rec, deadline, deadline_s))
        error = None
    except Exception as err:  # noqa: BLE001 - a response the client cannot digest errs this request only
        return _fail(rec, f"client error on this response ({type(err).__name__}: {err})"[:300])
    finally:
        rec.end_ms = (time.perf_counter_ns() - origin_ns) / 1e6
    if error is not None:
        return _fail(rec, error)
    return _finish(rec, stream, body, count_tokens)


class _SseStream:
    """One streamed answer as read so far: the record it fills as events come (chunk times, TTFT of the answer),
    and the text, reasoning, usage and ending the events carried."""

    __slots__ = (
        "rec",
        "kind",
        "t_send",
        "responded",
        "parts",
        "reasoning_parts",
        "usage",
        "finish_reason",
        "done",
        "t_end",
    )

    def __init__(self, rec: RequestRecord, kind: str, t_send: int):
        self.rec, self.kind, self.t_send = rec, kind, t_send
        self.responded = False  # the server's status line came
        self.parts: list[str] = []
        self.reasoning_parts: list[str] = []
        self.usage: dict[str, int] = {}
        self.finish_reason: str | None = None
        self.done = False  # [DONE] was read
        self.t_end = 0  # perf_counter_ns at [DONE], or at the body's end without one

    def fold_lines(self, lines: list[bytes], now: int) -> str | None:
        """Fold the complete SSE lines of one read, all stamped `now`, into the record, up to [DONE]; the error that
        fails the request, or None."""
        # The per-chunk path: called once per read, each event folded inline (no call per event but the parsers').
        rec, kind, usage = self.rec, self.kind, self.usage
        offset = (now - self.t_send) / 1e6
        for line in lines:
            if len(line) > MAX_SSE_LINE_BYTES:
                return f"SSE line over {MAX_SSE_LINE_BYTES} bytes"
            if not line.startswith(b"data:"):
                continue  # SSE comments (': ping'), event names, blank separators
            data = line[5:].strip()
            if data == b"[DONE]":
                self.done, self.t_end = True, now
                return None
            try:
                obj = json.loads(data)
            except (json.JSONDecodeError, UnicodeDecodeError, RecursionError):
                return f"malformed SSE data: {_excerpt(data)}"
            if not isinstance(obj, dict):
                return f"SSE data is not a JSON object: {_excerpt(data)}"
            try:
                if obj.get("usage") is not None:
                    usage.update(_usage(obj))
                text, reasoning, fin = _chunk_text(kind, obj)
            except BadChunk as err:
                return f"malformed SSE data: {err}: {_excerpt(data)}"
            if obj.get("choices"):
                rec.choice_offsets_ms.append(offset)
            if fin:
                self.finish_reason = fin
            if text or reasoning:
                rec.chunk_offsets_ms.append(offset)
            if reasoning:
                self.reasoning_parts.append(reasoning)
            if text:
                self.parts.append(text)
                if rec.ttft_answer_ms is None:
                    rec.ttft_answer_ms = offset
        return None


async def _post_and_read(
    client: aiohttp.ClientSession, url: str, body: dict, deadline: asyncio.Timeout, stream: _SseStream
) -> str | None:
    """POST one streaming request under its deadline and read its SSE answer into `stream`; the error that fails
    the request (an HTTP error status, not an SSE stream, a byte cap passed, a malformed event), or None."""
    async with deadline, client.post(url, json=body) as resp:
        stream.responded = True
        if resp.status != 200:
            raw = await resp.content.read(MAX_ERROR_BODY_BYTES)
            return f"HTTP {resp.status}: {' '.join(raw.decode(errors='replace').split())[:200]}"
        ctype = resp.headers.get("content-type", "")
        if "text/event-stream" not in ctype:
            return f"not an SSE stream (content-type '{ctype}')"
        error = await _read_sse(resp, stream)
        if error is None and stream.done:
            await _read_after_done(resp)
    return error


async def _read_sse(resp: aiohttp.ClientResponse, stream: _SseStream) -> str | None:
    """Read an SSE body under the response and line byte caps, folding each read's complete lines into `stream`
    until [DONE] or the body's end (then stamped); the error that fails the request, or None."""
    pending = b""
    received = 0
    async for raw in resp.content.iter_any():
        # A chunk arrives when the bytes carrying it are read: one timestamp per read, taken
        # before any parsing, so parsing earlier events never delays a later event's time.
        now = time.perf_counter_ns()
        received += len(raw)
        if received > MAX_RESPONSE_BYTES:
            return f"response body over {MAX_RESPONSE_BYTES} bytes; a completions stream is never this long"
        if b"\n" not in raw:
            pending += raw
            if len(pending) > MAX_SSE_LINE_BYTES:
                return f"SSE line over {MAX_SSE_LINE_BYTES} bytes without a newline"
            continue
        *lines, pending = (pending + raw).split(b"\n")
        error = stream.fold_lines(lines, now)
        if error is not None or stream.done:
            return error
    stream.t_end = time.perf_counter_ns()
    return None


async def _read_after_done(resp: aiohttp.ClientResponse) -> None:
    """Read what follows [DONE] (the chunked body's end) so the connection is reused, as vllm bench serve's client
    does; a server that then hangs costs at most 5 s."""
    with contextlib.suppress(aiohttp.ClientError, asyncio.TimeoutError, OSError):
        await asyncio.wait_for(resp.content.read(MAX_ERROR_BODY_BYTES), 5.0)


def _cut_short(
    err: BaseException, rec: RequestRecord, deadline: asyncio.Timeout, deadline_s: float | None
) -> tuple[str, str]:
    """(error, status) of a request its connection or its deadline ended before [DONE]: 'incomplete' once output
    had come, else 'error'."""
    status = "incomplete" if rec.chunk_offsets_ms else "error"
    if deadline.expired():
        return f"request deadline of {deadline_s:g} s exceeded", status
    return (f"{type(err).__name__}: {err}"[:300] if str(err) else type(err).__name__), status


def _fail(rec: RequestRecord, error: str, status: str = "error") -> RequestRecord:
    rec.error, rec.status = error, status
    return rec


def _finish(
    rec: RequestRecord, stream: _SseStream, body: dict, count_tokens: Callable[[str], int] | None
) -> RequestRecord:
    """The record of a stream that ended: its text, latency and token counts, and its status: 'error' without any
    output, 'incomplete' when it closed with neither [DONE] nor a finish_reason, else 'ok'."""
    rec.vllm_success = bool(rec.choice_offsets_ms)  # a chunk with a non-empty choices list: vllm bench serve's success
    rec.text = "".join(stream.parts)
    rec.finish_reason = stream.finish_reason
    rec.e2el_ms = (stream.t_end - stream.t_send) / 1e6
    if not rec.chunk_offsets_ms:
        return _fail(rec, "stream ended without any text")
    rec.ttft_ms = rec.chunk_offsets_ms[0]
    _count_tokens(rec, stream, body, count_tokens)
    if not (stream.done or stream.finish_reason):
        return _fail(rec, "stream closed before [DONE]", "incomplete")
    rec.status, rec.error = "ok", None
    return rec


def _count_tokens(
    rec: RequestRecord, stream: _SseStream, body: dict, count_tokens: Callable[[str], int] | None
) -> None:
    """Prompt, output, reasoning and answer tokens of a stream with output, each with its source (module doc)."""
    usage = stream.usage
    reasoning_text = "".join(stream.reasoning_parts)
    if usage.get("prompt_tokens"):
        rec.prompt_tokens, rec.prompt_tokens_source = usage["prompt_tokens"], "usage"
    if usage.get("completion_tokens"):
        rec.output_tokens, rec.output_tokens_source = usage["completion_tokens"], "usage"
    elif stream.finish_reason == "length" and body.get("max_tokens"):
        # Stopped by max_tokens: exactly that many tokens were generated. Re-tokenizing
        # the text can merge tokens across boundaries and undercount.
        rec.output_tokens, rec.output_tokens_source = int(body["max_tokens"]), "max_tokens"
    elif count_tokens is not None:
        rec.output_tokens = count_tokens(rec.text) + (count_tokens(reasoning_text) if reasoning_text else 0)
        rec.output_tokens_source = "tokenizer"
    else:
        # No usage, no tokenizer: one token per text chunk, an approximation named as such.
        rec.output_tokens, rec.output_tokens_source = len(rec.chunk_offsets_ms), "approx_chunks"
    # Reasoning tokens are output tokens (as vLLM, guidellm and AIPerf count them): TPOT runs over all of them.
    rec.reasoning_tokens = 0
    if stream.reasoning_parts:
        rec.reasoning_tokens, rec.reasoning_tokens_source = _reasoning_tokens(stream, reasoning_text, count_tokens)
        rec.reasoning_tokens = min(rec.reasoning_tokens, rec.output_tokens)
    rec.answer_tokens = rec.output_tokens - rec.reasoning_tokens


def _reasoning_tokens(
    stream: _SseStream, reasoning_text: str, count_tokens: Callable[[str], int] | None
) -> tuple[int, str]:
    """(reasoning tokens, source) of a stream that carried reasoning: usage, tokenizer, or one per reasoning chunk."""
    if "reasoning_tokens" in stream.usage:
        return stream.usage["reasoning_tokens"], "usage"
    if count_tokens is not None:
        return count_tokens(reasoning_text), "tokenizer"
    return len(stream.reasoning_parts), "approx_chunks"


def api_root(url: str) -> str:
    """The server root of an endpoint given with or without a trailing /v1 (the clients append /v1/...)."""
    root = url.strip().rstrip("/")
    return root[: -len("/v1")].rstrip("/") if root.endswith("/v1") else root


def endpoint_url(base_url: str, kind: str) -> str:
    return api_root(base_url) + ("/v1/chat/completions" if kind == "chat" else "/v1/completions")


def check_endpoint(base_url: str, timeout_s: float = 10.0) -> list[str]:
    """Model ids served at `base_url`; raises ConnectionError with one line after a bounded wait."""
    root = api_root(base_url)
    try:
        listing = json_of(wait_ready(root, "/v1/models", timeout_s, interval_s=0.5))
        models = listing.get("data", []) if isinstance(listing, dict) else None
        if not isinstance(models, list):
            raise BadResponse("GET /v1/models answered no model list")
    except NotReady as err:
        raise ConnectionError(
            f"endpoint {base_url} unreachable after {timeout_s:.0f} s ({err.last}); start the server or fix --endpoint"
        ) from None
    except BadResponse as err:
        raise ConnectionError(
            f"endpoint {base_url} answered GET /v1/models with no model list ({err}); fix --endpoint"
        ) from None
    return [m["id"] for m in models if isinstance(m, dict) and isinstance(m.get("id"), str)]


_HEADERS: dict[str, dict[str, str]] = {}


_HEADERS_LOCK = threading.Lock()


def endpoint_headers(base_url: str) -> dict[str, str]:
    """Extra HTTP headers (e.g. Authorization) the clients send to `base_url`; empty for local servers."""
    with _HEADERS_LOCK:
        return dict(_HEADERS.get(base_url.rstrip("/"), {}))


def set_endpoint_headers(base_url: str, headers: dict[str, str] | None) -> None:
    """Bind extra headers (a hosted endpoint's Authorization) to `base_url`; None or {} forgets them."""
    with _HEADERS_LOCK:
        if headers:
            _HEADERS[base_url.rstrip("/")] = dict(headers)
        else:
            _HEADERS.pop(base_url.rstrip("/"), None)
