"""The streaming client against a local stub: timings, token counting, and bad streams counted apart."""

import asyncio
import time

import pytest

from tasks.client import check_endpoint
from tasks.perf.metrics import summarize
from tasks.perf.sweep import run_concurrency
from tasks.perf.workload import Prompt, synthetic_prompts
from tests.stubs.stub_server import start_stub


@pytest.fixture(scope="module")
def stub():
    srv, url = start_stub()
    yield url
    srv.shutdown()


def run(url, model, n=1, conc=1, max_tokens=5, count=None):
    prompts = [Prompt(f"p{i}", 3) for i in range(n)]
    return asyncio.run(run_concurrency(url, model, prompts, conc, max_tokens, count_tokens=count))


def test_ok_stream_records_every_chunk(stub):
    (r,) = run(stub, "ok", max_tokens=6, count=lambda text: 99)
    assert r.status == "ok" and r.error is None
    assert len(r.chunk_offsets_ms) == 6 and r.ttft_ms == r.chunk_offsets_ms[0] <= r.e2el_ms
    # finish_reason 'length': exactly max_tokens were generated, whatever re-tokenizing says
    assert (r.output_tokens, r.output_tokens_source) == (6, "max_tokens")
    assert r.text == " t0 t1 t2 t3 t4 t5"


def test_stopped_stream_is_counted_with_the_tokenizer(stub):
    (r,) = run(stub, "stop", max_tokens=4, count=lambda text: len(text.split()))
    assert (r.status, r.output_tokens, r.output_tokens_source) == ("ok", 4, "tokenizer")


def test_usage_wins_over_tokenizer(stub):
    (r,) = run(stub, "usage", count=lambda text: 1)
    assert (r.output_tokens, r.output_tokens_source, r.prompt_tokens) == (42, "usage", 7)


@pytest.mark.parametrize(
    "model,status,reason",
    [
        ("http500", "error", "HTTP 500"),
        ("html", "error", "not an SSE stream"),
        ("garbage", "error", "malformed SSE data"),
        ("empty", "error", "without any text"),
        ("cut", "incomplete", "before [DONE]"),
    ],
)
def test_bad_streams_are_counted_apart(stub, model, status, reason):
    (r,) = run(stub, model)
    assert r.status == status and reason in r.error
    s = summarize([r])
    assert s["num_ok"] == 0 and s["ttft_ms_mean"] is None


def test_stalled_stream_ends_at_the_read_timeout(stub):
    """timeout_s bounds each wait for bytes: a server that hangs mid-stream gives an incomplete
    request after about timeout_s, with its chunks so far, not a hung sweep."""
    t0 = time.perf_counter()
    (r,) = asyncio.run(run_concurrency(stub, "stall", [Prompt("p", 3)], 1, 5, timeout_s=0.5))
    assert r.status == "incomplete" and "Timeout" in r.error and len(r.chunk_offsets_ms) == 2
    assert time.perf_counter() - t0 < 2.5


def test_concurrency_keeps_order_and_counts(stub):
    recs = run(stub, "ok", n=6, conc=3)
    assert [r.index for r in recs] == list(range(6)) and all(r.status == "ok" for r in recs)


def test_synthetic_prompts_unique_and_sized():
    enc = lambda s: s.split()  # a whitespace "tokenizer" for the shape of the output
    dec = lambda ids: " ".join(ids)
    ps = synthetic_prompts(5, 20, seed=1, encode=enc, decode=dec)
    assert len({p.text for p in ps}) == 5 and all(p.tokens == 20 for p in ps)
    assert synthetic_prompts(5, 20, seed=1, encode=enc, decode=dec)[3].text == ps[3].text  # seeded
    same = synthetic_prompts(3, 20, seed=1, unique=False, encode=enc, decode=dec)
    assert len({p.text for p in same}) == 1


def test_unreachable_endpoint_fails_after_bounded_wait():
    with pytest.raises(ConnectionError, match="unreachable after 1 s"):
        check_endpoint("http://127.0.0.1:9", timeout_s=1.0)
