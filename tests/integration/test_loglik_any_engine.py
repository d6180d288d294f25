"""loglik_check for every engine, and lm_eval's log-likelihood path following its recorded result (no table).

An HF checkpoint (a tiny Llama with random weights and a trained BPE tokenizer, saved with transformers)
is the served weights; the in-process reference is transformers on it. The endpoint is a scripted
OpenAI completions server (the instrument) that answers lm-eval's echo=True requests from the same
model, either right or one position off (what llama-cpp-python 0.3.36's server does). Against real
vLLM the same check runs in tests/e2e/test_vllm_parity.py.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pytest

from tasks.engines.base import Artifact
from tasks.engines.tokenizer import HFTokenizer, TokenizerRef
from tasks.loader import parse_config
from tasks.quality.base import SuiteContext, suite_for
from tasks.quality.logits import TransformersLogits
from tasks.quality.loglik_records import find_record
from tasks.quality.suites.lm_eval import LmEvalParams, LoglikDecider
from tests.helpers.engines import hf_tokenizer_dir
from tests.helpers.suites import suite_context

pytestmark = pytest.mark.slow  # minutes: run last, within the suite's budget (tests/conftest.py)


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> Path:
    """A real, tiny HF causal LM folder: Llama architecture, random weights (seeded), a 300-token BPE."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    folder = hf_tokenizer_dir(tmp_path_factory.mktemp("ckpt") / "tiny-llama")
    vocab = len(HFTokenizer(str(folder))._tok)
    torch.manual_seed(0)
    model = LlamaForCausalLM(
        LlamaConfig(
            vocab_size=vocab,
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            max_position_embeddings=256,
        )
    )
    model.save_pretrained(str(folder))
    return folder


def echo_server(folder: Path, shift: int) -> tuple[ThreadingHTTPServer, str]:
    """lm-eval's echo=True prompt logprobs from the checkpoint; shift=1 pairs each token with the next position's."""
    model = TransformersLogits(str(folder))

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_GET(self):
            self._send({"data": [{"id": "m"}]})

        def _send(self, obj: dict) -> None:
            data = json.dumps(obj).encode()
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["content-length"])))
            prompts = body["prompt"] if isinstance(body["prompt"][0], list) else [body["prompt"]]
            choices = []
            for i, ids in enumerate(prompts):
                lp = model.logprobs(ids + [0])
                rows = [lp[min(j - 1 + shift, len(ids) - 1)] for j in range(1, len(ids) + 1)]
                token_lps = [None] + [float(r[t]) for r, t in zip(rows, ids[1:])] + [float(rows[-1].max())]
                tops = [None] + [{str(int(r.argmax())): float(r.max())} for r in rows]
                choices.append(
                    {"index": i, "text": "x", "logprobs": {"token_logprobs": token_lps, "top_logprobs": tops}}
                )
            self._send({"choices": choices})

    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv, f"http://127.0.0.1:{srv.server_address[1]}"


def vllm_context(url: str, folder: Path, tmp_path: Path, **params) -> SuiteContext:
    cfg = parse_config(
        {
            "models": {"m": {"path": str(folder)}},
            "variants": [{"name": "v", "model": "m", "engine": "vllm", "quantization": "fp32", "reference": True}],
        }
    )
    art = Artifact("v", folder, "sha-of-v", 1, True, 0.0, {"engine_version": "vllm 0.0.0-test"})
    return suite_context(
        tmp_path,
        base_url=url,
        limit=6,
        params=params,
        n_ctx=256,
        engine="vllm",
        artifact=art,
        variant_spec=cfg.variant("v"),
        model_spec=cfg.models["m"],
        tokenizer_ref=TokenizerRef("hf", str(folder), "artifact"),
    )


@pytest.mark.parametrize("shift, passes", [(0, True), (1, False)])
def test_check_against_transformers_is_recorded_and_followed(
    checkpoint: Path, tmp_path: Path, monkeypatch, shift: int, passes: bool
) -> None:
    monkeypatch.setenv("TRADEOFF_CACHE_DIR", str(tmp_path / "cache"))
    srv, url = echo_server(checkpoint, shift)
    try:
        ctx = vllm_context(url, checkpoint, tmp_path)
        res = suite_for("loglik_check").run(ctx)
    finally:
        srv.shutdown()
    s = {x.metric: x for x in res.scores}
    assert s["in-process.within_tolerance"].value == 1.0  # transformers against itself
    assert s["endpoint.within_tolerance"].value == (1.0 if passes else 0.0)
    assert s["endpoint.max_abs_diff_nats"].note == "vs transformers float32 on tiny-llama"
    rec, own = find_record(ctx)
    assert own and rec.endpoint_ok is passes and (rec.within, rec.pairs) == ((6, 6) if passes else (0, 6))
    decider = LoglikDecider(LmEvalParams(tasks=["gsm8k"]), ctx)
    assert decider.path == ("endpoint" if passes else "in-process")
    assert decider.note == (
        "log-likelihood scored endpoint (its path passed loglik_check: " + rec.summary() + ")"
        if passes
        else "log-likelihood scored in-process (the engine's endpoint path failed loglik_check)"
    )


def test_quantized_at_load_variants_follow_the_engines_record(checkpoint: Path, tmp_path: Path, monkeypatch) -> None:
    """An fp8 variant has no CPU reference of its weights: it follows the record of the same engine and version."""
    monkeypatch.setenv("TRADEOFF_CACHE_DIR", str(tmp_path / "cache"))
    srv, url = echo_server(checkpoint, 0)
    try:
        suite_for("loglik_check").run(vllm_context(url, checkpoint, tmp_path, paths=["endpoint"]))
    finally:
        srv.shutdown()
    fp8 = vllm_context(url, checkpoint, tmp_path)
    fp8.variant_spec = fp8.variant_spec.model_copy(update={"name": "fp8", "quantization": "fp8"})
    fp8.artifact = Artifact("fp8", checkpoint, "sha-of-fp8", 1, True, 0.0, {"engine_version": "vllm 0.0.0-test"})
    decider = LoglikDecider(LmEvalParams(tasks=["gsm8k"]), fp8)
    assert decider.path == "endpoint" and decider.note.endswith(", checked on v (same engine and version))")
    with pytest.raises(ValueError, match="no in-process model of the weights this endpoint serves"):
        suite_for("loglik_check").run(fp8)


def test_unchecked_endpoint_says_so(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("TRADEOFF_CACHE_DIR", str(tmp_path / "cache"))
    ctx = suite_context(tmp_path, variant="h", engine="openai-compatible")
    decider = LoglikDecider(LmEvalParams(tasks=["gsm8k"]), ctx)
    assert decider.path == "endpoint"
    assert decider.note == "log-likelihood scored endpoint (not checked: no in-process model of these weights)"


def test_multiple_choice_through_the_checked_endpoint(checkpoint: Path, tmp_path: Path, monkeypatch) -> None:
    """lm_eval on an HF engine: the variant's own tokenizer, token ids to the endpoint, scores equal to in-process."""
    import yaml

    monkeypatch.setenv("TRADEOFF_CACHE_DIR", str(tmp_path / "cache"))
    data = tmp_path / "mc.jsonl"
    data.write_text(
        "\n".join(
            json.dumps(r)
            for r in [
                {"question": "The river town woke", "choices": [" slowly", " fast", " never"], "answer": 0},
                {"question": "The baker had already lit his", "choices": [" ovens", " boats"], "answer": 0},
            ]
        )
    )
    task = tmp_path / "mc.yaml"
    task.write_text(
        yaml.safe_dump(
            {
                "task": "tiny_mc",
                "dataset_path": "json",
                "dataset_kwargs": {"data_files": {"test": str(data)}},
                "output_type": "multiple_choice",
                "test_split": "test",
                "doc_to_text": "{{question}}",
                "doc_to_target": "answer",
                "doc_to_choice": "{{choices}}",
                "metric_list": [{"metric": "acc", "aggregation": "mean", "higher_is_better": True}],
                "metadata": {"version": 1},
            }
        )
    )
    srv, url = echo_server(checkpoint, 0)
    try:
        scores = {}
        for path in ("endpoint", "in-process"):
            ctx = vllm_context(url, checkpoint, tmp_path / path, tasks=[str(task)], loglikelihood=path)
            res = suite_for("lm_eval").run(ctx)
            scores[path] = [json.loads(x["response"]) for x in res.samples]
        auto = suite_for("lm_eval").run(vllm_context(url, checkpoint, tmp_path / "auto", tasks=[str(task)]))
    finally:
        srv.shutdown()
    # the per-choice (logprob, greedy) pairs agree between the endpoint and transformers in-process
    flat = lambda rows: np.array([lp for r in rows for lp, _ in r], dtype=float)
    assert flat(scores["endpoint"]) == pytest.approx(flat(scores["in-process"]), abs=1e-4)
    note = next(s.note for s in auto.scores if s.metric == "tiny_mc.acc")
    assert note.startswith("log-likelihood scored endpoint (its path passed loglik_check: 8 of 8 within 0.01 nats")
