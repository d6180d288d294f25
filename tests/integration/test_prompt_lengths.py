"""Prompts of the length asked (issue 36, item 6): `input_len` is the prompt length the server counts, within one
token, with the server's own tokenizer when none is on this host (as `vllm bench serve`'s random dataset builds its
prompts with the served tokenizer); where the server counts otherwise (a chat template), the step says so."""

from __future__ import annotations

import json
import sys

import pytest

from flows.cli import main
from tasks.client import RequestRecord, complete
from tasks.core.config import ModelSpec, PerfSpec, Variant
from tasks.engines.base import Artifact
from tasks.engines.launcher import free_port, serving
from tasks.engines.llama_cpp import LlamaCpp
from tasks.engines.tokenizer import load_tokenizer, server_tokenizer
from tasks.perf.perf_run import prompt_len_note
from tasks.perf.workload import exact_length, make_workload, synthetic_prompts
from tests.helpers import smollm2

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="llama.cpp server on this host")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    model = ModelSpec.model_validate(smollm2())
    variant = Variant(name="q4_1", model="m", engine="llama.cpp", quantization="q4_1")
    path = model.local_path()
    art = Artifact("q4_1", path, "sha", path.stat().st_size, True, 0.0, {})
    port = free_port()
    cmd = LlamaCpp().server_command(art, variant, model, "127.0.0.1", port)
    with serving(cmd, f"http://127.0.0.1:{port}", tmp_path_factory.mktemp("srv") / "server.log", 120) as srv:
        yield srv.base_url, LlamaCpp().served_model_name(variant), path


def server_counts(base_url: str, model: str, prompts) -> list[int]:
    """The server's own prompt_tokens for each prompt (a non-streamed completion: llama-cpp-python streams no usage)."""
    out = []
    for p in prompts:
        usage: dict = {}
        complete(base_url, model, p.text, 1, usage=usage)
        out.append(usage["prompt_tokens"])
    return out


def test_without_a_local_tokenizer_the_servers_own_builds_prompts_of_the_length_it_counts(server):
    base_url, model, gguf = server
    tok = server_tokenizer(base_url, model)
    assert tok is not None and tok.label == "server:llama-cpp-python"
    text = "Request 3 nonce 0a1b2c3d: time year"
    assert tok.encode(text) == load_tokenizer(str(gguf)).encode(text)  # the server's tokenizer is the GGUF's
    workload = make_workload(PerfSpec(input_len=128), tok.encode, tok.decode, tok.count)
    built = workload(7, 4)
    assert [p.tokens for p in built] == [128] * 4
    counted = server_counts(base_url, model, built)
    assert all(abs(n - 128) <= 1 for n in counted), counted
    # words instead (what `tradeoff perf` without --tokenizer sent before): 134-139 tokens for 128 asked
    counted = server_counts(base_url, model, make_workload(PerfSpec(input_len=128))(7, 4))
    assert min(counted) > 129, counted


def test_tradeoff_perf_finds_the_servers_tokenizer_and_sends_prompts_of_the_length_asked(server, tmp_path):
    """`tradeoff perf --input-len 128` without --tokenizer: the requests' prompt lengths come from the server's
    tokenizer (prompt_tokens_source 'tokenizer', 128 each), no longer from words."""
    base_url, model, _ = server
    out = tmp_path / "r.json"
    args = ["perf", "--endpoint", base_url, "--output", str(out), "--num-prompts", "3", "--concurrency", "1"]
    args += ["--warmup", "0", "--output-len", "2", "--input-len", "128", "--jitter", "off", "--no-progress"]
    args += ["--host-noise-retries", "0"]  # not what this test is about: a busy host is only said
    assert main(args) == 0
    (r,) = [json.loads(x) for x in out.read_text().splitlines()]
    assert r["total_input_tokens"] == 3 * 128, r["total_input_tokens"]


def test_the_step_says_when_the_servers_count_differs():
    """A server that streams its usage (vLLM) and counts a chat template: the step's note names both counts."""
    recs = [
        RequestRecord(
            i, "ok", 0.0, 10.0, 50.0, prompt_tokens=158, prompt_tokens_source="usage", prompt_tokens_asked=128
        )
        for i in range(3)
    ]
    note = prompt_len_note(recs, "gguf:m.gguf")
    assert (
        note == "the server counted 158-158 prompt tokens for prompts built to 128-128 by gguf:m.gguf: "
        "+30 to +30 on 3 requests"
    )
    recs = [
        RequestRecord(
            0, "ok", 0.0, 10.0, 50.0, prompt_tokens=129, prompt_tokens_source="usage", prompt_tokens_asked=128
        )
    ]
    assert prompt_len_note(recs, "gguf:m.gguf") is None  # within one token (a BOS)


def test_exact_length_tops_up_or_cuts_what_a_round_trip_changed():
    """A tokenizer whose decoded text re-tokenizes differently: 'ab' is one token when written, two when decoded."""
    vocab = {1: "a", 2: "b", 3: "ab", 4: "c"}

    def encode(text: str) -> list[int]:
        out, i = [], 0
        while i < len(text):
            if text.startswith("ab", i):
                out.append(3)
                i += 2
            else:
                out.append({"a": 1, "b": 2, "c": 4}[text[i]])
                i += 1
        return out

    def decode(ids: list[int]) -> str:
        return "".join(vocab[i] for i in ids)

    ids = [1, 2, 4, 1, 2, 4, 4, 4]  # decodes to 'abcabccc', which encodes to 6 ids, not 8
    text, n = exact_length(ids, 4, encode, decode)
    assert n == 4 and len(encode(text)) == 4
    prompts = synthetic_prompts(3, 16, 0, True, load_tokenizer_words().encode, load_tokenizer_words().decode)
    assert [p.tokens for p in prompts] == [16, 16, 16]


class _Words:
    """Words as tokens: a stand-in tokenizer whose round trip is exact (the plain cut path)."""

    def encode(self, text: str) -> list[str]:
        return text.split()

    def decode(self, ids: list[str]) -> str:
        return " ".join(ids)


def load_tokenizer_words() -> _Words:
    return _Words()
