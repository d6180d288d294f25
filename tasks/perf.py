"""The one streaming client for OpenAI-compatible servers, synthetic workloads, and the concurrency sweep.

Timestamps are taken at the client with `perf_counter_ns`: send, every chunk carrying output
(answer text, or reasoning as vLLM's reasoning parsers send it in chat deltas; stamped when the
bytes carrying it are read, before parsing; chunks that arrive in one read share its time),
end. A server is untrusted input: each request has a total deadline, SSE lines and bodies a
size cap, and any response the client cannot digest (malformed or oddly shaped JSON) errs that
request with the reason, never the sweep. HTTP is aiohttp, as in `vllm bench serve` and AIPerf: on a 2-core host that also runs the
server, httpx cost ~25 ms of client CPU per 64-token request against aiohttp's ~15 ms, and a
client's CPU is taken from the server it measures.
Output tokens come from the server's `usage` when it sends one; otherwise, when the
stream finished for `length`, they are the requested max_tokens; otherwise they are
counted with the model's tokenizer; with none, the text chunks are counted and labelled
`approx_chunks`. Prompt tokens likewise: usage, tokenizer, or `approx_words`. Each
request records which.

`run_load` sends a list of prompts at a fixed concurrency, or on an arrival schedule
(tasks.loadgen makes Poisson/gamma schedules), and stops sending after a time limit.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import aiohttp
import httpx

from tasks.metrics import RequestRecord

WORDS = (
    "time year people way day man thing woman life child world school state family student group "
    "country problem hand part place case week company system program question work government number "
    "night point home water room mother area money story fact month lot right study book eye job word "
    "business issue side kind head house service friend father power hour game line end member law car "
    "city community name president team minute idea kid body information back parent face others level "
    "office door health person art war history party result change morning reason research girl guy "
    "moment air teacher force education river garden window paper music market light voice table road"
).split()


@dataclass
class Prompt:
    text: str
    tokens: int | None  # prompt tokens; None when unknown
    output_len: int | None = None  # output tokens to ask for; None: the step's default
    tokens_source: str | None = None  # tokenizer | approx_words


def _spread(rng: random.Random, length: int, spread: float, least: int) -> int:
    """A length drawn uniformly in [length*(1-spread), length*(1+spread)], at least `least`."""
    if spread <= 0:
        return length
    return max(least, rng.randint(int(length * (1 - spread)), int(math.ceil(length * (1 + spread)))))


def synthetic_prompts(n: int, input_len: int, seed: int, unique: bool = True,
                      encode: Callable[[str], list[int]] | None = None,
                      decode: Callable[[list[int]], str] | None = None,
                      output_len: int | None = None, len_spread: float = 0.0) -> list[Prompt]:
    """`n` seeded prompts of `input_len` tokens of common words (each length spread by `len_spread`).

    With `unique`, each prompt starts with its own index and nonce so that no prefix
    cache can reuse another request's prompt; without, all prompts are the same text
    (to measure prefix caching on purpose). Without a tokenizer the length is approximate
    (one word ~ one token) and says so in `tokens_source`.
    """
    rng = random.Random(seed)
    longest = int(math.ceil(input_len * (1 + len_spread))) + 1
    body_words = [rng.choice(WORDS) for _ in range(longest * 2)]
    out = []
    for i in range(n):
        n_in = _spread(rng, input_len, len_spread, 1)
        n_out = _spread(rng, output_len, len_spread, 2) if output_len else None
        head = f"Request {i} nonce {rng.getrandbits(32):08x}: " if unique else ""
        if unique:
            rng.shuffle(body_words)
        text = head + " ".join(body_words)
        if encode and decode:
            ids = encode(text)[:n_in]
            out.append(Prompt(decode(ids), len(ids), n_out, "tokenizer"))
        else:
            words = (head + " ".join(body_words)).split()[: max(1, n_in)]
            out.append(Prompt(" ".join(words), len(words), n_out, "approx_words"))
    return out


def load_sharegpt(path: str | Path, n: int, seed: int, count_tokens: Callable[[str], int] | None = None,
                  output_len: int | None = None) -> list[Prompt]:
    """`n` prompts from a ShareGPT-format JSON file, chosen as `vllm bench serve` chooses them.

    The file is a list of {"conversations": [{"from": "human", "value": ...}, {"from": "gpt",
    "value": ...}, ...]}. As in vLLM: entries with fewer than two turns are dropped, the
    rest shuffled with `seed` (the same order as vLLM's for the same seed), the first turn
    is the prompt and the second's token count the output length unless `output_len` is
    given; prompts under 4 or over 1024 tokens, outputs under 4 (when not fixed) and pairs
    over 2048 are skipped. Too few left: they are reused in order.
    """
    from tasks.config import ConfigError  # late: config imports the engines

    p = Path(path)
    fix = "give a ShareGPT JSON file: a list of {\"conversations\": [{\"from\": ..., \"value\": ...}, ...]}"
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"perf.dataset: file {p} not found; {fix}") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ConfigError(f"perf.dataset: {p} is not JSON ({type(err).__name__}); {fix}") from None
    if not isinstance(data, list):
        raise ConfigError(f"perf.dataset: {p} holds a {type(data).__name__}, not a list; {fix}")
    data = [e for e in data if isinstance(e, dict) and isinstance(e.get("conversations"), list)
            and len(e["conversations"]) >= 2]
    random.Random(seed).shuffle(data)
    count, source = (count_tokens, "tokenizer") if count_tokens else ((lambda t: len(t.split())), "approx_words")
    out: list[Prompt] = []
    for entry in data:
        if len(out) >= n:
            break
        prompt, completion = (str(entry["conversations"][i].get("value", "")) for i in (0, 1))
        n_in = count(prompt)
        n_out = output_len if output_len is not None else count(completion)
        if n_in < 4 or n_in > 1024 or n_in + n_out > 2048 or (output_len is None and n_out < 4):
            continue
        out.append(Prompt(prompt, n_in, max(1, n_out), source))
    if not out:
        raise ConfigError(f"perf.dataset: {p} has no usable conversation (4..1024 prompt tokens); {fix}")
    return [out[i % len(out)] for i in range(n)]


def _payload(kind: str, model: str, prompt: str, max_tokens: int, force: str | None) -> dict:
    body: dict = {"model": model, "max_tokens": max_tokens, "temperature": 0.0, "stream": True,
                  "stream_options": {"include_usage": True}}
    if kind == "chat":
        body["messages"] = [{"role": "user", "content": prompt}]
    else:
        body["prompt"] = prompt
    if force in ("min_tokens", "both"):
        body["min_tokens"] = max_tokens
    if force in ("ignore_eos", "both"):
        body["ignore_eos"] = True
    return body


# What one response may send: a server is untrusted input (issue 18). No SSE line of a real
# completions stream comes near 1 MiB, nor a response near 64 MiB (~4,000 tokens of chat chunks
# are ~1 MB); past them the request is errored instead of growing memory without bound.
MAX_SSE_LINE_BYTES = 1 << 20
MAX_RESPONSE_BYTES = 64 << 20
MAX_ERROR_BODY_BYTES = 4096  # read of a non-200 body, of which 200 characters are kept


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
    """A token count from the server: a non-negative whole number, else BadChunk naming it."""
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0 or v != v or int(v) != v:
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
        out["reasoning_tokens"] = _count(details.get("reasoning_tokens"),
                                         "usage.completion_tokens_details.reasoning_tokens")
    return {k: v for k, v in out.items() if v is not None}


def _excerpt(data: bytes) -> str:
    return repr(data[:80].decode(errors="replace"))


async def stream_request(client: aiohttp.ClientSession, url: str, body: dict, kind: str, index: int,
                         origin_ns: int, count_tokens: Callable[[str], int] | None,
                         prompt_tokens: int | None, prompt_tokens_source: str | None = None,
                         repeat: int = 0, deadline_s: float | None = None) -> RequestRecord:
    """Send one streaming request; never raises: failures become status 'error' or 'incomplete'.

    `deadline_s` bounds the whole request, send to last byte (a server that keeps a stream
    alive with `: ping` comments is cut there); `timeout_s` of the session bounds each wait
    for bytes. Each chunk carrying output (answer text or reasoning) is stamped when the
    bytes carrying it are read; TTFT is the first of them (any output, as vLLM), TTFT of the
    answer the first answer chunk.
    """
    t_send = time.perf_counter_ns()
    rec = RequestRecord(index=index, status="error", start_ms=(t_send - origin_ns) / 1e6, prompt_tokens=prompt_tokens,
                        prompt_tokens_source=prompt_tokens_source if prompt_tokens is not None else None,
                        max_tokens=body.get("max_tokens"), repeat=repeat, vllm_success=False)
    parts: list[str] = []
    reasoning_parts: list[str] = []
    usage: dict[str, int] = {}
    done = False
    got_choices = False  # a chunk with a non-empty choices list: what vllm bench serve calls success
    finish_reason = None
    deadline = asyncio.timeout(deadline_s)

    def fail(error: str, status: str = "error") -> RequestRecord:
        rec.error, rec.status = error, status
        return rec

    try:
        try:
            async with deadline, client.post(url, json=body) as resp:
                if resp.status != 200:
                    raw = await resp.content.read(MAX_ERROR_BODY_BYTES)
                    return fail(f"HTTP {resp.status}: {' '.join(raw.decode(errors='replace').split())[:200]}")
                ctype = resp.headers.get("content-type", "")
                if "text/event-stream" not in ctype:
                    return fail(f"not an SSE stream (content-type '{ctype}')")
                pending = b""
                received = 0
                async for raw in resp.content.iter_any():
                    # A chunk arrives when the bytes carrying it are read: one timestamp per read, taken
                    # before any parsing, so parsing earlier events never delays a later event's time.
                    now = time.perf_counter_ns()
                    received += len(raw)
                    if received > MAX_RESPONSE_BYTES:
                        return fail(f"response body over {MAX_RESPONSE_BYTES} bytes; a completions stream is never "
                                    f"this long")
                    if b"\n" not in raw:
                        pending += raw
                        if len(pending) > MAX_SSE_LINE_BYTES:
                            return fail(f"SSE line over {MAX_SSE_LINE_BYTES} bytes without a newline")
                        continue
                    *lines, pending = (pending + raw).split(b"\n")
                    for line in lines:
                        if len(line) > MAX_SSE_LINE_BYTES:
                            return fail(f"SSE line over {MAX_SSE_LINE_BYTES} bytes")
                        if not line.startswith(b"data:"):
                            continue  # SSE comments (': ping'), event names, blank separators
                        data = line[5:].strip()
                        if data == b"[DONE]":
                            done, t_end = True, now
                            break
                        try:
                            obj = json.loads(data)
                        except (json.JSONDecodeError, UnicodeDecodeError, RecursionError):
                            return fail(f"malformed SSE data: {_excerpt(data)}")
                        if not isinstance(obj, dict):
                            return fail(f"SSE data is not a JSON object: {_excerpt(data)}")
                        try:
                            if obj.get("usage") is not None:
                                usage.update(_usage(obj))
                            text, reasoning, fin = _chunk_text(kind, obj)
                        except BadChunk as err:
                            return fail(f"malformed SSE data: {err}: {_excerpt(data)}")
                        if not got_choices and obj.get("choices"):
                            got_choices = True
                        finish_reason = fin or finish_reason
                        if text or reasoning:
                            offset = (now - t_send) / 1e6
                            rec.chunk_offsets_ms.append(offset)
                            if reasoning:
                                reasoning_parts.append(reasoning)
                            if text:
                                parts.append(text)
                                if rec.ttft_answer_ms is None:
                                    rec.ttft_answer_ms = offset
                    if done:
                        break
                if done:
                    # Read what follows [DONE] (the chunked body's end) so the connection is reused,
                    # as vllm bench serve's client does; a server that then hangs costs at most 5 s.
                    with contextlib.suppress(aiohttp.ClientError, asyncio.TimeoutError, OSError):
                        await asyncio.wait_for(resp.content.read(MAX_ERROR_BODY_BYTES), 5.0)
                else:
                    t_end = time.perf_counter_ns()
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as err:
            if not done:  # after [DONE] (draining the body's end) nothing is lost
                status = "incomplete" if rec.chunk_offsets_ms else "error"
                if deadline.expired():
                    return fail(f"request deadline of {deadline_s:g} s exceeded", status)
                return fail(f"{type(err).__name__}: {err}"[:300] if str(err) else type(err).__name__, status)
        except Exception as err:  # noqa: BLE001 - a response the client cannot digest errs this request only
            return fail(f"client error on this response ({type(err).__name__}: {err})"[:300])
    finally:
        rec.end_ms = (time.perf_counter_ns() - origin_ns) / 1e6
    rec.vllm_success = got_choices
    rec.text = "".join(parts)
    reasoning_text = "".join(reasoning_parts)
    rec.finish_reason = finish_reason
    rec.e2el_ms = (t_end - t_send) / 1e6
    if not rec.chunk_offsets_ms:
        return fail("stream ended without any text")
    rec.ttft_ms = rec.chunk_offsets_ms[0]
    if usage.get("prompt_tokens"):
        rec.prompt_tokens, rec.prompt_tokens_source = usage["prompt_tokens"], "usage"
    if usage.get("completion_tokens"):
        rec.output_tokens, rec.output_tokens_source = usage["completion_tokens"], "usage"
    elif finish_reason == "length" and body.get("max_tokens"):
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
    if reasoning_parts:
        if "reasoning_tokens" in usage:
            rec.reasoning_tokens, rec.reasoning_tokens_source = usage["reasoning_tokens"], "usage"
        elif count_tokens is not None:
            rec.reasoning_tokens, rec.reasoning_tokens_source = count_tokens(reasoning_text), "tokenizer"
        else:
            rec.reasoning_tokens, rec.reasoning_tokens_source = len(reasoning_parts), "approx_chunks"
        rec.reasoning_tokens = min(rec.reasoning_tokens, rec.output_tokens)
    rec.answer_tokens = rec.output_tokens - rec.reasoning_tokens
    if not (done or finish_reason):
        return fail("stream closed before [DONE]", "incomplete")
    rec.status, rec.error = "ok", None
    return rec


def api_root(url: str) -> str:
    """The server root of an endpoint given with or without a trailing /v1 (the clients append /v1/...)."""
    root = url.strip().rstrip("/")
    return root[: -len("/v1")].rstrip("/") if root.endswith("/v1") else root


def endpoint_url(base_url: str, kind: str) -> str:
    return api_root(base_url) + ("/v1/chat/completions" if kind == "chat" else "/v1/completions")


async def run_load(base_url: str, model: str, prompts: Sequence[Prompt], max_tokens: int,
                   concurrency: int | None = None, offsets_s: Sequence[float] | None = None,
                   max_duration_s: float | None = None, kind: str = "completions", force: str | None = None,
                   count_tokens: Callable[[str], int] | None = None, timeout_s: float = 300.0,
                   first_index: int = 0, repeat: int = 0,
                   on_record: Callable[[RequestRecord], None] | None = None,
                   deadline_s: float | None = None) -> list[RequestRecord]:
    """Send the prompts: prompt i at `offsets_s[i]` seconds (default: at once), with at most
    `concurrency` in flight (default: no cap). After `max_duration_s` no new request is sent;
    those in flight finish (bounded by `timeout_s` per wait for bytes and `deadline_s` per
    request). Records keep the prompts' order; unsent prompts have none.
    """
    url = endpoint_url(base_url, kind)
    slots = min(concurrency or len(prompts), len(prompts)) + 1
    sem = asyncio.Semaphore(concurrency) if concurrency else None
    from tasks.engines import endpoint_headers  # a hosted endpoint's Authorization; empty for local servers

    # timeout_s bounds each wait for bytes (as before: per read, not per request).
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=10.0, sock_read=timeout_s)
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=slots), timeout=timeout,
                                     headers=endpoint_headers(api_root(base_url))) as client:
        origin = time.perf_counter_ns()
        deadline = origin + int(max_duration_s * 1e9) if max_duration_s else None

        def late() -> bool:
            return deadline is not None and time.perf_counter_ns() >= deadline

        async def one(i: int, p: Prompt, at_s: float) -> RequestRecord | None:
            if max_duration_s and at_s >= max_duration_s:
                return None  # due after the time limit: never sent (and not waited for)
            wait = at_s - (time.perf_counter_ns() - origin) / 1e9
            if wait > 0:
                await asyncio.sleep(wait)
            async with sem or contextlib.nullcontext():
                if late():
                    return None
                body = _payload(kind, model, p.text, p.output_len or max_tokens, force)
                rec = await stream_request(client, url, body, kind, i, origin, count_tokens, p.tokens,
                                           p.tokens_source, repeat, deadline_s)
            if on_record:
                on_record(rec)
            return rec

        offsets = offsets_s or [0.0] * len(prompts)
        done = await asyncio.gather(*(one(first_index + i, p, t) for i, (p, t) in enumerate(zip(prompts, offsets))))
    return [r for r in done if r is not None]


async def run_concurrency(base_url: str, model: str, prompts: list[Prompt], concurrency: int, max_tokens: int,
                          kind: str = "completions", force: str | None = None,
                          count_tokens: Callable[[str], int] | None = None,
                          timeout_s: float = 300.0, first_index: int = 0) -> list[RequestRecord]:
    """Send every prompt, with at most `concurrency` requests in flight; records keep the prompts' order."""
    return await run_load(base_url, model, prompts, max_tokens, concurrency=concurrency, kind=kind, force=force,
                          count_tokens=count_tokens, timeout_s=timeout_s, first_index=first_index)


def check_endpoint(base_url: str, timeout_s: float = 10.0) -> list[str]:
    """Model ids served at `base_url`; raises ConnectionError with one line after a bounded wait."""
    deadline = time.monotonic() + timeout_s
    last = ""
    while time.monotonic() < deadline:
        try:
            r = httpx.get(api_root(base_url) + "/v1/models", timeout=2.0)
            r.raise_for_status()
            listing = r.json()
            models = listing.get("data", []) if isinstance(listing, dict) else None
            if not isinstance(models, list):
                raise ValueError("GET /v1/models answered no model list")
            return [m["id"] for m in models if isinstance(m, dict) and isinstance(m.get("id"), str)]
        except (httpx.HTTPError, ValueError) as err:
            last = f"{type(err).__name__}: {err}"
            time.sleep(0.5)
    raise ConnectionError(f"endpoint {base_url} unreachable after {timeout_s:.0f} s ({last}); start the server or fix --endpoint")
