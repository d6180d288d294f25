"""llama.cpp's own server (the llama-server engine) on the embedded model, checked against known truths.

- Greedy output is the same, token for token, as llama-cpp-python's in-process llama.cpp on the same GGUF (the
  two engines share the sources and the compiled libraries: tasks/tools/llama_build.py).
- Two requests sent together are decoded together (continuous batching): the second's first token comes before the
  first's last, and the server's own count of busy slots per decode step is above 1; llama-cpp-python's server
  answers them one after the other.
- `tradeoff perf` at concurrency 4 against the server's own /metrics over the same window: the server times every
  request's prompt and generation (llamacpp:prompt_seconds_total, tokens_predicted_seconds_total); the client's
  TPOT agrees with the server's, and its TTFT is the server's prompt time plus the HTTP path (a few ms).
"""

from __future__ import annotations

import asyncio
import json
import time

import aiohttp
import pytest

from flows.cli import main
from tasks import client
from tasks.core.config import ModelSpec, Variant
from tasks.engines.base import Artifact, engine_for
from tasks.engines.prometheus import parse_prometheus, sum_series
from tests.helpers.engines import demo_gguf

PROMPTS = [
    "The capital of France is",
    "Question: What is 7 plus 5?\nAnswer:",
    "Once upon a time, in a small village,",
    "def fibonacci(n):",
]

pytestmark = pytest.mark.skipif(
    engine_for("llama-server").missing_dependency() is not None,
    reason=str(engine_for("llama-server").missing_dependency()),
)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    engine = engine_for("llama-server")
    gguf = demo_gguf()
    variant = Variant(name="ls", model="m", engine="llama-server", quantization="q4_1", engine_args={"parallel": 4})
    artifact = Artifact("ls", gguf, "", gguf.stat().st_size, True, 0.0, {})
    log = tmp_path_factory.mktemp("llama-server") / "server.log"
    with engine.serving(artifact, variant, ModelSpec(path=str(gguf), max_context=1024), log, 120.0) as ep:
        yield ep


def complete(url: str, model: str, prompt: str, max_tokens: int = 32) -> dict:
    body = {"model": model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0.0}
    return client.json_of(client.request("POST", url, "/v1/completions", 120.0, body))


def metrics(url: str) -> dict[str, float]:
    samples = parse_prometheus(client.request("GET", url, "/metrics", 10.0).text)
    names = ("prompt_seconds_total", "tokens_predicted_seconds_total", "tokens_predicted_total", "n_decode_total")
    return {n: sum_series(samples, f"llamacpp:{n}") for n in names}


def test_greedy_output_is_llama_cpp_pythons_token_for_token(server):
    """The same text, the same end and the same count of generated tokens for each prompt (the counts are each
    engine's own). Both attend without flash attention (llama-server's default here: with it, one token of 128
    differed)."""
    from llama_cpp import Llama

    llm = Llama(model_path=str(demo_gguf()), n_ctx=1024, n_threads=1, verbose=False)
    try:
        expected = [llm.create_completion(p, max_tokens=32, temperature=0.0) for p in PROMPTS]
    finally:
        llm.close()
    got = [complete(server.base_url, server.served_model, p) for p in PROMPTS]
    assert [g["choices"][0]["text"] for g in got] == [e["choices"][0]["text"] for e in expected]
    finish = [g["choices"][0]["finish_reason"] for g in got]
    assert finish == [e["choices"][0]["finish_reason"] for e in expected] and finish.count("length") >= 2, finish
    # llama-server counts the end-of-sequence token of an answer that stopped, llama-cpp-python does not
    counts = [(g["usage"]["completion_tokens"], e["usage"]["completion_tokens"]) for g, e in zip(got, expected)]
    assert all(a == b + (f == "stop") for (a, b), f in zip(counts, finish)), counts


def test_two_requests_are_decoded_together(server):
    """Each stream's chunk times: with batching the second request's first token comes before the first's last."""

    async def stream(session: aiohttp.ClientSession, prompt: str) -> list[float]:
        body = {
            "model": server.served_model,
            "prompt": prompt,
            "max_tokens": 48,
            "temperature": 0.0,
            "stream": True,
            "ignore_eos": True,
        }
        stamps = []
        async with session.post(server.base_url + "/v1/completions", json=body) as resp:
            assert resp.status == 200
            async for line in resp.content:
                if line.startswith(b"data:") and b"[DONE]" not in line:
                    stamps.append(time.perf_counter())
        return stamps

    async def both() -> list[list[float]]:
        async with aiohttp.ClientSession() as session:
            return await asyncio.gather(stream(session, PROMPTS[0]), stream(session, PROMPTS[2]))

    before = metrics(server.base_url)
    a, b = asyncio.run(both())
    after = metrics(server.base_url)
    assert len(a) >= 48 and len(b) >= 48
    first, second = sorted((a, b), key=lambda s: s[0])
    assert second[0] < first[-1], "the second request waited for the first: a queue, not a batch"
    # the server's own count: 96 tokens in fewer decode steps than tokens (steps carried both slots)
    steps = after["n_decode_total"] - before["n_decode_total"]
    tokens = after["tokens_predicted_total"] - before["tokens_predicted_total"]
    assert tokens == 96 and steps < 0.75 * tokens, (steps, tokens)


def perf(server, tmp_path, concurrency: int, n: int, out_len: int) -> tuple[dict, dict[str, float]]:
    """`tradeoff perf` as a user runs it, and the server's own counters' change over the same window."""
    out = tmp_path / f"c{concurrency}.json"
    argv = ["perf", "--endpoint", server.base_url, "--model", server.served_model, "--output", str(out)]
    argv += ["--concurrency", str(concurrency), "--num-prompts", str(n), "--input-len", "64"]
    # one window, whatever else runs on the host: the server's counters see the same one
    argv += ["--host-noise-retries", "0", "--detailed"]
    before = metrics(server.base_url)
    assert main([*argv, "--output-len", str(out_len), "--warmup", "0", "--tokenizer", str(demo_gguf())]) == 0
    after = metrics(server.base_url)
    (row,) = [json.loads(x) for x in out.read_text().splitlines()]
    errors = [e for e in row.get("errors", []) if e]
    assert row["completed"] == n and row["total_output_tokens"] == n * out_len, errors
    return row, {k: after[k] - before[k] for k in after}


def test_perf_agrees_with_the_servers_own_timers(server, tmp_path):
    """TPOT at concurrency 4: the server times each request's generation from its first token to its last and
    counts the steps after the first (tokens_predicted_seconds_total, tokens_predicted_total less one a request),
    the client's TPOT exactly. TTFT at concurrency 1: the server's prompt time (prompt_seconds_total: the wall
    time of its prompt batches, one request's own when requests do not overlap) plus the HTTP path, tokenizing the
    prompt and sampling the first token: measured here 15-45 ms. (At concurrency 4 prompts share batches, and
    the counter no longer times one request's.)"""
    n, out_len = 16, 32
    row, d = perf(server, tmp_path, 4, n, out_len)
    assert d["tokens_predicted_total"] == n * out_len
    server_tpot_ms = 1000 * d["tokens_predicted_seconds_total"] / (d["tokens_predicted_total"] - n)
    tpot = row["mean_tpot_ms"]
    assert abs(tpot - server_tpot_ms) <= 0.05 * server_tpot_ms, (tpot, server_tpot_ms)
    n = 4
    row, d = perf(server, tmp_path, 1, n, out_len)
    server_prompt_ms = 1000 * d["prompt_seconds_total"] / n
    ttft = row["mean_ttft_ms"]
    assert server_prompt_ms <= ttft <= server_prompt_ms + 60.0, (ttft, server_prompt_ms)
