"""Fidelity for engines that expose only top-k prompt log-probabilities (vLLM's `prompt_logprobs`), and NULL with the
reason for those that expose none.

The reference is the real demo model in-process (llama.cpp). The "endpoint" is a measuring instrument: a local
server answering `prompt_logprobs` with the top k of a known variant distribution, the reference's own logits at
temperature 1.5 (same argmax, so top-1 agreement is 1), for which the exact KL is computed here from the full
vocabulary. The suite's KL must be a lower bound of it that tightens as k grows; its perplexity ratio is exact.
The same path against real vLLM is in tests/e2e/test_vllm_parity.py.
"""

from __future__ import annotations

import json
import math
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pytest

from tasks.core.process import run_in_child
from tasks.engines.base import Artifact
from tasks.quality.base import SuiteContext, suite_for
from tasks.quality.logits import gguf_text_logprobs, log_softmax
from tasks.quality.suites.fidelity import fidelity_rows, pooled_kl, truncate
from tasks.quality.texts import FIDELITY_TEXT
from tests.helpers.engines import demo_gguf
from tests.helpers.suites import suite_context

N = 48
TEMPERATURE = 1.5


@pytest.fixture(scope="module")
def reference():
    """(full reference log-probs, token ids, full variant log-probs) for the first N tokens of the fidelity text."""
    logp, ids = run_in_child(gguf_text_logprobs, demo_gguf(), FIDELITY_TEXT, N, 512, what="test reference")
    variant = log_softmax(logp * TEMPERATURE)  # logp = logits - logsumexp: scaling it scales the logits
    return logp, ids, variant


def serve(answer) -> tuple[ThreadingHTTPServer, str]:
    """A local /v1/completions that answers with answer(request body) (status, JSON)."""

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["content-length"])))
            status, obj = answer(body)
            data = json.dumps(obj).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv, f"http://127.0.0.1:{srv.server_address[1]}"


def vllm_like(variant: np.ndarray, ids: list[int], seen: list[dict]):
    """vLLM's answer shape: prompt_logprobs[i] = {token id: {logprob, rank, decoded_token}}, None at position 0."""

    def answer(body: dict):
        seen.append(body)
        assert body["prompt"] == ids and body["max_tokens"] == 1
        k = body["prompt_logprobs"]
        entries = [None] + [
            {str(t): {"logprob": lp, "rank": 1, "decoded_token": "x"} for t, lp in d.items()}
            for d in truncate(variant, k, ids)[1:]
        ]
        return 200, {"choices": [{"index": 0, "text": "x", "prompt_logprobs": entries}]}

    return answer


def context(url: str, tmp_path: Path, engine: str = "vllm", **params) -> SuiteContext:
    gguf = demo_gguf()
    return suite_context(
        tmp_path,
        base_url=url,
        served_model="v",
        limit=N,
        params=params,
        n_ctx=512,
        engine=engine,
        reference_artifact=Artifact("ref", gguf, "sha", 1, True, 0.0, {}),
        request_timeout_s=30,
    )


@pytest.mark.parametrize("k", [5, 20])
def test_endpoint_fidelity_is_a_lower_bound_that_tightens_with_k(reference, tmp_path: Path, k: int) -> None:
    ref, ids, variant = reference
    exact = fidelity_rows(ref, variant, ids)
    seen: list[dict] = []
    srv, url = serve(vllm_like(variant, ids, seen))
    try:
        res = suite_for("fidelity").run(context(url, tmp_path, top_k=k))
    finally:
        srv.shutdown()
    assert seen and seen[0]["prompt_logprobs"] == k  # the reference's own token ids, asked once
    s = {x.metric: x for x in res.scores}
    exact_kl = float(np.mean([r["kl"] for r in exact]))
    assert 0 < s["kl_mean"].value <= exact_kl
    assert s["kl_mean"].note.startswith(f"lower bound: the endpoint's top-{k} prompt log-probabilities")
    assert s["top1_agreement"].value == 1.0  # temperature keeps the argmax
    ppl = math.exp(np.mean([r["nll_var"] for r in exact])) / math.exp(np.mean([r["nll_ref"] for r in exact]))
    assert s["ppl_ratio"].value == pytest.approx(ppl, rel=1e-9)  # the actual token is always returned: exact
    assert len(res.samples) == N and all(json.loads(x["details"])["known_tokens"] >= k for x in res.samples)


def test_pooling_bounds_the_exact_kl(reference) -> None:
    ref, ids, variant = reference
    exact = [r["kl"] for r in fidelity_rows(ref, variant, ids)]
    pooled = {
        k: [pooled_kl(ref[i], truncate(variant, k, ids)[i + 1]) for i in range(len(ids) - 1)] for k in (1, 20, 1000)
    }
    means = {k: float(np.mean(v)) for k, v in pooled.items()}
    assert means[1] <= means[20] <= means[1000] <= float(np.mean(exact)) + 1e-12
    assert all(p <= e + 1e-9 for p, e in zip(pooled[20], exact))
    full = [pooled_kl(ref[i], {t: float(variant[i][t]) for t in range(variant.shape[1])}) for i in range(3)]
    assert full == pytest.approx(exact[:3], abs=1e-9)  # the whole vocabulary known: the exact KL


@pytest.mark.parametrize(
    "answer, why",
    [
        (lambda b: (200, {"choices": [{"index": 0, "text": "x"}]}), "endpoint returned no prompt_logprobs"),
        (lambda b: (400, {"error": "prompt_logprobs must be <= 20"}), "endpoint refused prompt_logprobs: HTTP 400"),
        (
            lambda b: (
                200,
                {
                    "choices": [
                        {"index": 0, "prompt_logprobs": [None] + [{"5": {"logprob": 0.5}}] * (len(b["prompt"]) - 1)}
                    ]
                },
            ),
            "lacks the prompt's own token",
        ),
        (
            lambda b: (
                200,
                {
                    "choices": [
                        {"index": 0, "prompt_logprobs": [None] + [{str(t): {"logprob": 0.5}} for t in b["prompt"][1:]]}
                    ]
                },
            ),
            "holds a log-probability that is not <= 0",
        ),
    ],
)
def test_untrusted_prompt_logprobs_give_null_with_the_reason(tmp_path: Path, answer, why: str) -> None:
    srv, url = serve(answer)
    try:
        res = suite_for("fidelity").run(context(url, tmp_path))
    finally:
        srv.shutdown()
    assert {s.metric for s in res.scores} == {"top1_agreement", "kl_mean", "kl_p99", "ppl_ratio"}
    assert all(s.value is None and why in s.note for s in res.scores), [s.note for s in res.scores]


def test_an_engine_without_logprobs_gets_null_with_the_reason(tmp_path: Path) -> None:
    res = suite_for("fidelity").run(context("http://127.0.0.1:9", tmp_path, engine="openai-compatible"))
    assert all(s.value is None for s in res.scores) and res.samples == []
    assert res.scores[0].note == (
        "engine openai-compatible exposes no next-token log-probabilities (no in-process "
        "logits, no prompt_logprobs): fidelity not measured"
    )
