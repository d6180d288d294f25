"""The one streaming client for OpenAI-compatible servers, synthetic workloads, and the concurrency sweep.

Timestamps are taken at the client with `perf_counter_ns`: send, every text chunk, end.
Output tokens come from the server's `usage` when it sends one; otherwise, when the
stream finished for `length`, they are the requested max_tokens; otherwise they are
counted with the model's tokenizer. Each request records which.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from dataclasses import dataclass
from typing import Callable

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
    tokens: int | None  # None when no tokenizer was available to count them


def synthetic_prompts(n: int, input_len: int, seed: int, unique: bool = True,
                      encode: Callable[[str], list[int]] | None = None,
                      decode: Callable[[list[int]], str] | None = None) -> list[Prompt]:
    """`n` seeded prompts of `input_len` tokens of common words.

    With `unique`, each prompt starts with its own index and nonce so that no prefix
    cache can reuse another request's prompt; without, all prompts are the same text.
    Without a tokenizer the length is approximate (one word ~ one token) and `tokens` is None.
    """
    rng = random.Random(seed)
    body_words = [rng.choice(WORDS) for _ in range(input_len * 2)]
    out = []
    for i in range(n):
        head = f"Request {i} nonce {rng.getrandbits(32):08x}: " if unique else ""
        if unique:
            rng.shuffle(body_words)
        text = head + " ".join(body_words)
        if encode and decode:
            ids = encode(text)[:input_len]
            out.append(Prompt(decode(ids), len(ids)))
        else:
            out.append(Prompt(head + " ".join(body_words[: max(1, input_len - len(head.split()))]), None))
    return out


def _payload(kind: str, model: str, prompt: str, max_tokens: int, force: str | None) -> dict:
    body: dict = {"model": model, "max_tokens": max_tokens, "temperature": 0.0, "stream": True,
                  "stream_options": {"include_usage": True}}
    if kind == "chat":
        body["messages"] = [{"role": "user", "content": prompt}]
    else:
        body["prompt"] = prompt
    if force == "min_tokens":
        body["min_tokens"] = max_tokens
    elif force == "ignore_eos":
        body["ignore_eos"] = True
    return body


def _chunk_text(kind: str, obj: dict) -> tuple[str, str | None]:
    """(text of this SSE chunk, its finish_reason or None)."""
    choices = obj.get("choices") or []
    if not choices:
        return "", None
    c = choices[0]
    text = (c.get("delta") or {}).get("content") if kind == "chat" else c.get("text")
    return text or "", c.get("finish_reason")


async def stream_request(client: httpx.AsyncClient, url: str, body: dict, kind: str, index: int,
                         origin_ns: int, count_tokens: Callable[[str], int] | None,
                         prompt_tokens: int | None) -> RequestRecord:
    """Send one streaming request; never raises: failures become status 'error' or 'incomplete'."""
    t_send = time.perf_counter_ns()
    rec = RequestRecord(index=index, status="error", start_ms=(t_send - origin_ns) / 1e6, prompt_tokens=prompt_tokens)
    parts: list[str] = []
    usage = None
    done = False
    finish_reason = None
    try:
        async with client.stream("POST", url, json=body) as resp:
            if resp.status_code != 200:
                detail = (await resp.aread()).decode(errors="replace")[:200]
                rec.error = f"HTTP {resp.status_code}: {detail}"
                return rec
            ctype = resp.headers.get("content-type", "")
            if "text/event-stream" not in ctype:
                rec.error = f"not an SSE stream (content-type '{ctype}')"
                return rec
            async for line in resp.aiter_lines():
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    done = True
                    break
                now = time.perf_counter_ns()
                try:
                    obj = json.loads(data)
                except json.JSONDecodeError:
                    rec.error = f"malformed SSE data: {data[:80]!r}"
                    return rec
                usage = obj.get("usage") or usage
                text, fin = _chunk_text(kind, obj)
                finish_reason = fin or finish_reason
                if text:
                    rec.chunk_offsets_ms.append((now - t_send) / 1e6)
                    parts.append(text)
        t_end = time.perf_counter_ns()
    except (httpx.HTTPError, OSError) as err:
        rec.error = f"{type(err).__name__}: {err}"[:300] or type(err).__name__
        rec.status = "incomplete" if rec.chunk_offsets_ms else "error"
        return rec
    rec.text = "".join(parts)
    rec.e2el_ms = (t_end - t_send) / 1e6
    if not rec.chunk_offsets_ms:
        rec.error = "stream ended without any text"
        return rec
    rec.ttft_ms = rec.chunk_offsets_ms[0]
    if usage and usage.get("completion_tokens"):
        rec.output_tokens, rec.output_tokens_source = int(usage["completion_tokens"]), "usage"
        rec.prompt_tokens = int(usage.get("prompt_tokens") or 0) or prompt_tokens
    elif finish_reason == "length" and body.get("max_tokens"):
        # Stopped by max_tokens: exactly that many tokens were generated. Re-tokenizing
        # the text can merge tokens across boundaries and undercount.
        rec.output_tokens, rec.output_tokens_source = int(body["max_tokens"]), "max_tokens"
    elif count_tokens is not None:
        rec.output_tokens, rec.output_tokens_source = count_tokens(rec.text), "tokenizer"
    else:
        rec.output_tokens, rec.output_tokens_source = len(rec.chunk_offsets_ms), "chunks"
    if not (done or finish_reason):
        rec.status, rec.error = "incomplete", "stream closed before [DONE]"
        return rec
    rec.status = "ok"
    return rec


async def run_concurrency(base_url: str, model: str, prompts: list[Prompt], concurrency: int, max_tokens: int,
                          kind: str = "completions", force: str | None = None,
                          count_tokens: Callable[[str], int] | None = None,
                          timeout_s: float = 300.0, first_index: int = 0) -> list[RequestRecord]:
    """Send every prompt, with at most `concurrency` requests in flight; records keep the prompts' order."""
    url = base_url.rstrip("/") + ("/v1/chat/completions" if kind == "chat" else "/v1/completions")
    limits = httpx.Limits(max_connections=concurrency + 1, max_keepalive_connections=concurrency + 1)
    async with httpx.AsyncClient(timeout=httpx.Timeout(timeout_s, connect=10.0), limits=limits) as client:
        origin = time.perf_counter_ns()

        async def one(i: int, p: Prompt) -> RequestRecord:
            return await stream_request(client, url, _payload(kind, model, p.text, max_tokens, force), kind, i,
                                        origin, count_tokens, p.tokens)

        sem = asyncio.Semaphore(concurrency)

        async def gated(i: int, p: Prompt) -> RequestRecord:
            async with sem:
                return await one(i, p)

        return list(await asyncio.gather(*(gated(first_index + i, p) for i, p in enumerate(prompts))))


def check_endpoint(base_url: str, timeout_s: float = 10.0) -> list[str]:
    """Model ids served at `base_url`; raises ConnectionError with one line after a bounded wait."""
    deadline = time.monotonic() + timeout_s
    last = ""
    while time.monotonic() < deadline:
        try:
            r = httpx.get(base_url.rstrip("/") + "/v1/models", timeout=2.0)
            r.raise_for_status()
            return [m.get("id") for m in r.json().get("data", [])]
        except (httpx.HTTPError, ValueError) as err:
            last = f"{type(err).__name__}: {err}"
            time.sleep(0.5)
    raise ConnectionError(f"endpoint {base_url} unreachable after {timeout_s:.0f} s ({last}); start the server or fix --endpoint")
