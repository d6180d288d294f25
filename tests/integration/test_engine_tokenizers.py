"""Every engine hands the quality suites its own tokenizer; coherence and longctx count with it, never words or
characters, and say so in a note where no tokenizer exists (a hosted model without one).

The Hugging Face tokenizer here is a small byte-level BPE trained in the test (the real checkpoint's
tokenizer is compared with the GGUF's in tests/e2e/test_vllm_parity.py, where vLLM's checkpoint exists).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tasks.core.errors import ConfigError
from tasks.engines.base import Artifact, engine_for, tokenizer_for
from tasks.engines.tokenizer import TokenizerRef, open_tokenizer
from tasks.loader import parse_config
from tasks.quality.base import SuiteContext, suite_for
from tests.helpers.engines import GGUF, demo_gguf, hf_tokenizer_dir
from tests.helpers.suites import suite_context
from tests.stubs.quality_stub import start


@pytest.fixture(scope="module")
def hf_dir(tmp_path_factory) -> Path:
    return hf_tokenizer_dir(tmp_path_factory.mktemp("hf") / "checkpoint")


def artifact(path: Path | str, **meta) -> Artifact:
    return Artifact("v", Path(path), "sha", 1, True, 0.0, meta)


def test_each_engine_names_the_tokenizer_its_server_uses(hf_dir: Path, tmp_path: Path) -> None:
    gguf = demo_gguf()
    engine_dir = tmp_path / "engine"
    engine_dir.mkdir()
    (engine_dir / "rank0.engine").write_bytes(b"\0" * 8)
    cfg = parse_config(
        {
            "models": {
                "m": GGUF,
                "hosted": {"hub": "org/model", "tokenizer": str(hf_dir)},
                "bare": {"hub": "org/other"},
            },
            "variants": [{"name": "r", "model": "m", "quantization": "q4_1", "reference": True}],
        }
    )
    cases = [
        ("llama.cpp", artifact(gguf), None, ("gguf", str(gguf))),
        # vLLM from a GGUF: the dequantized checkpoint's own tokenizer (what vLLM tokenizes with), not the GGUF
        ("vllm", artifact(hf_dir, tokenizer_gguf=str(gguf)), None, ("hf", str(hf_dir))),
        ("tensorrt-llm", artifact(engine_dir, tokenizer=str(hf_dir)), None, ("hf", str(hf_dir))),
        ("openai-compatible", artifact("org/model", hosted=True), cfg.models["hosted"], ("hf", str(hf_dir))),
        (
            "openai-compatible",
            artifact(gguf, hosted=True, tokenizer_gguf=str(gguf)),
            cfg.models["m"],
            ("gguf", str(gguf)),
        ),
        ("openai-compatible", artifact("org/other", hosted=True), cfg.models["bare"], None),
    ]
    for engine, art, model, expect in cases:
        ref = engine_for(engine).tokenizer(art, model)
        assert (None if ref is None else (ref.kind, ref.path)) == expect, engine


def test_a_hub_name_as_tokenizer_is_read_from_the_local_cache_only(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    ref = tokenizer_for(
        artifact("org/x"),
        parse_config(
            {
                "models": {"m": {"hub": "org/not-cached", "tokenizer": "org/not-cached"}},
                "variants": [
                    {
                        "name": "r",
                        "model": "m",
                        "engine": "openai-compatible",
                        "quantization": "unknown",
                        "reference": True,
                        "engine_args": {"base_url": "http://127.0.0.1:9", "model": "x"},
                    }
                ],
            }
        ).models["m"],
    )
    assert ref == TokenizerRef("hf", "org/not-cached", "config (hub name, local cache)")
    with pytest.raises(ValueError, match=r"^tokenizer org/not-cached: not loadable from local files"):
        open_tokenizer(ref)


@pytest.mark.parametrize("tokenizer", ["/no/such/tokenizer.gguf", "./missing-folder"])
def test_bad_tokenizer_in_config_is_one_line(tokenizer: str) -> None:
    with pytest.raises(ConfigError) as e:
        parse_config(
            {
                "models": {"m": {"hub": "org/x", "tokenizer": tokenizer}},
                "variants": [
                    {
                        "name": "r",
                        "model": "m",
                        "engine": "openai-compatible",
                        "quantization": "unknown",
                        "reference": True,
                        "engine_args": {"base_url": "http://127.0.0.1:9", "model": "x"},
                    }
                ],
            }
        )
    assert str(e.value) == (
        f"models.m.tokenizer: {tokenizer} does not exist; give a GGUF file, a Hugging Face "
        f"tokenizer folder or a hub name"
    )


@pytest.fixture(scope="module")
def stub():
    # A fixed story with repeats, and the pass key read back from the prompt.
    import re

    def complete(prompt: str) -> str:
        if m := re.search(r"The pass key is (\d+)", prompt):
            return f" {m[1]}."
        return " The river town woke slowly. The river town woke slowly. The baker lit his ovens."

    srv, url = start(complete)
    yield url
    srv.shutdown()


def context(url: str, tmp_path: Path, ref: TokenizerRef | None, **params) -> SuiteContext:
    return suite_context(tmp_path, base_url=url, params=params, n_ctx=2048, request_timeout_s=10, tokenizer_ref=ref)


def test_coherence_counts_in_the_engines_tokens(stub: str, hf_dir: Path, tmp_path: Path) -> None:
    ref = TokenizerRef("hf", str(hf_dir), "artifact")
    res = suite_for("coherence").run(context(stub, tmp_path, ref, max_tokens=64, embeddings=False))
    d = json.loads(res.samples[0]["details"])
    tok = open_tokenizer(ref)
    assert d["token_unit"] == "model" and d["tokenizer"] == "hf:checkpoint"
    assert d["generated_tokens"] == tok.count(res.samples[0]["response"]) != len(res.samples[0]["response"].split())
    assert all(s.note is None for s in res.scores if s.metric in ("generated_tokens_mean", "rep_rate_4", "distinct_1"))


def test_coherence_without_a_tokenizer_says_its_unit(stub: str, tmp_path: Path) -> None:
    res = suite_for("coherence").run(context(stub, tmp_path, None, max_tokens=64, embeddings=False))
    assert json.loads(res.samples[0]["details"])["token_unit"] == "word"
    notes = {s.metric: s.note for s in res.scores}
    assert notes["generated_tokens_mean"].startswith("counted in words: no tokenizer for this endpoint")
    assert notes["rep_rate_4"] == notes["generated_tokens_mean"]


def test_longctx_builds_its_lengths_in_the_engines_tokens(stub: str, hf_dir: Path, tmp_path: Path) -> None:
    ref = TokenizerRef("hf", str(hf_dir), "artifact")
    res = suite_for("longctx").run(context(stub, tmp_path, ref, context_tokens=[256, 512], depths_pct=[50], trials=1))
    tok = open_tokenizer(ref)
    rows = [json.loads(s["details"]) for s in res.samples]
    assert [r["context_tokens"] for r in rows] == [256, 512]
    assert [(r["tokens_exact"], r["tokenizer"]) for r in rows] == [(True, "hf:checkpoint")] * 2
    # prompts come within one filler sentence of the asked length, in the engine's tokens (not characters / 4)
    filler = tok.count("The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again. ")
    assert [n - filler <= d["prompt_tokens"] <= n for n, d in zip((256, 512), rows)] == [True, True]
    assert {s.metric: s.note for s in res.scores}["accuracy_ctx256"] is None


def test_longctx_without_a_tokenizer_notes_approximate_lengths(stub: str, tmp_path: Path) -> None:
    res = suite_for("longctx").run(context(stub, tmp_path, None, context_tokens=[256], depths_pct=[50], trials=1))
    assert {s.metric: s.note for s in res.scores}["accuracy_ctx256"].startswith(
        "lengths approximate (~4 characters per token): no tokenizer for this endpoint"
    )
