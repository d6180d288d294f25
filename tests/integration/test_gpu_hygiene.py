"""GPU host hygiene: hub downloads of serving files only, calibration from local data, the TensorRT-LLM YAML per
pinned version, and the flagship nightly naming every seed benchmark. Plain functions: no GPU, no network."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tasks.core.errors import ConfigError
from tasks.engines.base import EngineUnavailable, engine_for
from tasks.engines.hub import CALIBRATION_TEXT, HUB_DOWNLOAD, calibration_command
from tasks.engines.tensorrt_llm import TRTLLM_VERSION, TrtArgs, yaml_keys
from tasks.loader import parse_config
from tasks.tools.calibration_text import texts_from
from tasks.tools.hub_download import IGNORE_PATTERNS, serving_patterns
from tests.helpers import ROOT

SHARED = ROOT.parent / "shared" / "datasets"
needs_shared = pytest.mark.skipif(
    not (SHARED / "gsm8k" / "test.jsonl").is_file(),
    reason="../shared/datasets (GSM8K, BBH) is absent: a fresh clone has no shared datasets",
)
HUB = {"hub": "meta-llama/Llama-3.1-8B-Instruct", "max_context": 8192}
LLAMA_31_FILES = [
    "LICENSE",
    "README.md",
    "USE_POLICY.md",
    "config.json",
    "generation_config.json",
    "model-00001-of-00004.safetensors",
    "model-00002-of-00004.safetensors",
    "model-00003-of-00004.safetensors",
    "model-00004-of-00004.safetensors",
    "model.safetensors.index.json",
    "original/consolidated.00.pth",
    "original/params.json",
    "original/tokenizer.model",
    "special_tokens_map.json",
    "tokenizer.json",
    "tokenizer_config.json",
]


def fetched(files: list[str]) -> list[str]:
    """The files snapshot_download would fetch with our patterns (huggingface_hub's own filter)."""
    from huggingface_hub.utils import filter_repo_objects

    return sorted(filter_repo_objects(files, allow_patterns=serving_patterns(files), ignore_patterns=IGNORE_PATTERNS))


def test_downloads_skip_the_original_folder_and_duplicate_weights() -> None:
    got = fetched(LLAMA_31_FILES)
    assert not [f for f in got if f.startswith("original/")]  # ~16 GB of consolidated weights never served
    assert [f for f in got if f.endswith(".safetensors")] == [
        f"model-0000{i}-of-00004.safetensors" for i in range(1, 5)
    ]
    assert {"config.json", "tokenizer.json", "tokenizer_config.json", "generation_config.json"} <= set(got)
    bin_only = ["config.json", "pytorch_model.bin", "tokenizer.model", "tokenizer_config.json"]
    assert fetched(bin_only) == sorted(bin_only)
    assert fetched(["config.json", "model.safetensors", "pytorch_model.bin"]) == ["config.json", "model.safetensors"]


@pytest.mark.parametrize("engine, quant", [("vllm", "fp16"), ("tensorrt-llm", "fp16")])
def test_engines_download_with_the_patterns(engine: str, quant: str, tmp_path: Path, monkeypatch) -> None:
    import tasks.engines.tensorrt_llm as trt
    import tasks.engines.vllm as vllm

    calls = []

    def fake_run_step(cmd, log, timeout_s, what):
        calls.append(cmd)
        Path(cmd[-1]).write_text(str(tmp_path / "snapshot"))

    monkeypatch.setattr(vllm, "run_step", fake_run_step)
    monkeypatch.setattr(trt, "run_step", fake_run_step, raising=False)
    eng = engine_for(engine)
    got = eng._fetch("org/model", tmp_path, "/py") if engine == "vllm" else eng._download("org/model", tmp_path, "/py")
    assert Path(got) == tmp_path / "snapshot"
    assert calls[0][:3] == ["/py", str(HUB_DOWNLOAD), "org/model"]  # an argument list, the repo never in code


@needs_shared
def test_calibration_texts_from_the_benchmark_files() -> None:
    gsm = texts_from(SHARED / "gsm8k" / "test.jsonl")
    first = json.loads((SHARED / "gsm8k" / "test.jsonl").read_text().splitlines()[0])
    assert len(gsm) == 1319 and gsm[0] == first["question"] + "\n" + first["answer"]
    bbh = texts_from(SHARED / "bbh" / "boolean_expressions.json")
    ex = json.loads((SHARED / "bbh" / "boolean_expressions.json").read_text())["examples"][0]
    assert bbh[0] == ex["input"] + "\n" + ex["target"]


def test_calibration_folder_is_what_quantizers_load(tmp_path: Path) -> None:
    """The folder loads as `load_dataset(folder, split='train')['text']`: TensorRT-LLM quantize.py's local path."""
    from datasets import load_dataset

    src = tmp_path / "notes.txt"
    src.write_text("First paragraph of text.\n\nSecond one,\nover two lines.\n\n\nThird.")
    out = tmp_path / "calib"
    subprocess.run(calibration_command(sys.executable, str(src), out, 2), check=True, capture_output=True)
    assert load_dataset(str(out), split="train")["text"] == ["First paragraph of text.", "Second one,\nover two lines."]
    bad = tmp_path / "empty.jsonl"
    bad.write_text(json.dumps({"id": 1}) + "\n")
    r = subprocess.run(
        [sys.executable, str(CALIBRATION_TEXT), str(bad), str(tmp_path / "x")], capture_output=True, text=True
    )
    assert r.returncode != 0 and "no text found" in r.stderr


def trt_plan(variant: dict, version: str = TRTLLM_VERSION, **args):
    cfg = parse_config(
        {
            "models": {"llama": HUB},
            "variants": [
                {
                    "name": "x",
                    "model": "llama",
                    "engine": "tensorrt-llm",
                    "reference": True,
                    "engine_args": {"examples_dir": "/ex", **args},
                    **variant,
                }
            ],
        }
    )
    v = cfg.variant("x")
    return engine_for("tensorrt-llm").build_plan(
        v, cfg.models["llama"], Path("/c"), "/py/bin/python", "/hf/llama", version
    )


def test_trtllm_calibrates_on_a_local_file_or_a_hub_name(tmp_path: Path) -> None:
    data = tmp_path / "gsm8k.jsonl"
    data.write_text(json.dumps({"question": "q", "answer": "a"}) + "\n")
    p = trt_plan({"quantization": "fp8"}, calib_dataset=str(data), calib_size=64)
    root = f"/c/{p.key}"
    assert [s.name for s in p.steps] == ["calibration", "checkpoint", "trtllm-build"]
    assert p.steps[0].argv == [
        "/py/bin/python",
        str(CALIBRATION_TEXT),
        str(data.resolve()),
        f"{root}/calibration",
        "--samples",
        "64",
    ]
    conv = p.steps[1].argv
    assert conv[conv.index("--calib_dataset") + 1] == f"{root}/calibration"
    hub = trt_plan({"quantization": "int4_awq"}, calib_dataset="abisee/cnn_dailymail")
    assert [s.name for s in hub.steps] == ["checkpoint", "trtllm-build"]
    assert hub.steps[0].argv[hub.steps[0].argv.index("--calib_dataset") + 1] == "abisee/cnn_dailymail"
    assert "--calib_dataset" not in trt_plan({"quantization": "fp8"}).steps[0].argv  # quantize.py's default
    assert trt_plan({"quantization": "fp8"}, calib_dataset=str(data)).key != trt_plan({"quantization": "fp8"}).key


def test_vllm_llmcompressor_calibrates_on_local_data(tmp_path: Path) -> None:
    from tasks.engines.vllm import QUANTIZER, VllmArgs

    cmd = engine_for("vllm").quantize_command(
        "/py", "org/m", Path("/c/k/hf"), "awq", VllmArgs(calibration_data="x.jsonl"), Path("/c/k/calibration")
    )
    assert cmd == [
        "/py",
        str(QUANTIZER),
        "org/m",
        "/c/k/hf",
        "--scheme",
        "awq",
        "--samples",
        "512",
        "--seq-len",
        "2048",
        "--dataset",
        "/c/k/calibration",
        "--split",
        "train",
    ]


@pytest.mark.parametrize(
    "engine, args, field",
    [
        ("tensorrt-llm", {"calib_dataset": "/no/such/calib.jsonl"}, "calib_dataset"),
        ("vllm", {"calibration_data": "./missing.txt"}, "calibration_data"),
    ],
)
def test_missing_calibration_file_is_one_line(engine: str, args: dict, field: str) -> None:
    quant = "fp8" if engine == "tensorrt-llm" else "awq"
    with pytest.raises(ConfigError) as e:
        parse_config(
            {
                "models": {"llama": HUB},
                "variants": [
                    {
                        "name": "x",
                        "model": "llama",
                        "engine": engine,
                        "quantization": quant,
                        "reference": True,
                        "engine_args": args,
                    }
                ],
            }
        )
    assert str(e.value).startswith(f"variants[0] (x).engine_args.{field}: ") and "does not exist" in str(e.value)


EAGLE3 = {"method": "eagle3", "draft_model": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B", "num_speculative_tokens": 3}
DRAFT = {"method": "draft_model", "draft_model": "meta-llama/Llama-3.2-1B-Instruct", "num_speculative_tokens": 4}


@pytest.mark.parametrize(
    "version, spec, expected",
    [
        (
            "1.2.1",
            EAGLE3,
            {
                "decoding_type": "Eagle",
                "max_draft_len": 3,
                "speculative_model_dir": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B",
                "eagle3_one_model": True,
            },
        ),
        (
            "1.4.0",
            EAGLE3,
            {"decoding_type": "Eagle3", "max_draft_len": 3, "speculative_model": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"},
        ),
        (
            "1.2.1",
            DRAFT,
            {
                "decoding_type": "DraftTarget",
                "max_draft_len": 4,
                "speculative_model_dir": "meta-llama/Llama-3.2-1B-Instruct",
            },
        ),
        (
            "1.4.0rc4",
            DRAFT,
            {
                "decoding_type": "DraftTarget",
                "max_draft_len": 4,
                "speculative_model": "meta-llama/Llama-3.2-1B-Instruct",
            },
        ),
    ],
)
def test_trtllm_speculative_yaml_per_version(version: str, spec: dict, expected: dict) -> None:
    p = trt_plan({"quantization": "bf16", "speculative": spec}, version)
    assert p.extra_options["speculative_config"] == expected
    assert yaml.safe_load(yaml.safe_dump(p.extra_options))["speculative_config"] == expected


def test_trtllm_version_is_pinned_and_untested_ones_refused() -> None:
    req = (ROOT / "scripts" / "requirements-gpu-trtllm.txt").read_text()
    assert f"tensorrt-llm=={TRTLLM_VERSION}" in req
    script = (ROOT / "scripts" / "gpu_engines.sh").read_text()
    assert f"TRTLLM_TAG=${{TRTLLM_TAG:-v{TRTLLM_VERSION}}}" in script
    assert yaml_keys("1.3.0rc27") == "1.4" and yaml_keys(TRTLLM_VERSION) == "1.2"
    with pytest.raises(EngineUnavailable, match=r"TensorRT-LLM 1\.0\.0 is untested: .* install tensorrt-llm==1\.2\.1"):
        yaml_keys("1.0.0")
    assert TrtArgs().calib_dataset is None


# ---------------------------------------------------------------- the flagship nightly

NIGHTLY = ROOT / "configs" / "nightly-gpu.yaml"
SEED_TASKS = {"gsm8k", "mmlu", "bbh", "truthfulqa_mc2"}


def test_nightly_gpu_runs_every_seed_benchmark_on_every_variant() -> None:
    from flows.cli import main

    assert main(["check", str(NIGHTLY)]) == 0
    cfg = parse_config(yaml.safe_load(NIGHTLY.read_text()))
    suites = cfg.quality.suites
    tasks = {t for s in suites if s.name == "lm_eval" for t in s.params["tasks"]}
    assert tasks == SEED_TASKS
    names = {s.name for s in suites}
    assert {"helm:gsm", "longctx", "coherence", "fidelity", "greedy_identity", "loglik_check"} <= names
    everywhere = {s.key for s in suites if s.variants is None}
    assert {"gsm8k", "mmlu", "bbh", "truthfulqa", "helm:gsm", "longctx", "coherence", "fidelity"} <= everywhere
    identity = next(s for s in suites if s.name == "greedy_identity")
    assert set(identity.variants) == {v.name for v in cfg.variants if v.speculative}
    # loglik_check runs before the log-likelihood tasks, on the variants whose weights have a CPU reference
    keys = [s.key for s in suites]
    assert keys.index("loglik_check") < keys.index("mmlu") and keys.index("loglik_check") < keys.index("truthfulqa")
    assert cfg.quality.primary == "gsm8k.gsm8k.exact_match.strict-match"


def test_nightly_gpu_datasets_read_local_files_or_the_hub(tmp_path: Path) -> None:
    """Air-gapped: each seed task reads its local files where they exist, else lm-eval's hub definition."""
    from tasks.quality.suites.lm_eval import LocalData, write_local_overrides

    cfg = yaml.safe_load(NIGHTLY.read_text())
    datasets = {
        k: LocalData(**v)
        for s in cfg["quality"]["suites"]
        if s["name"] == "lm_eval"
        for k, v in s["params"].get("datasets", {}).items()
    }
    assert set(datasets) == SEED_TASKS and all(d.if_missing == "hub" for d in datasets.values())
    # MMLU (one subject) and TruthfulQA exported in the layout the config names, with the hub's fields
    mmlu = tmp_path / "shared" / "datasets" / "mmlu" / "anatomy"
    mmlu.mkdir(parents=True)
    row = {"question": "Which bone?", "subject": "anatomy", "choices": ["a", "b", "c", "d"], "answer": 1}
    for split in ("test", "dev"):
        (mmlu / f"{split}.jsonl").write_text(json.dumps(row) + "\n")
    tqa = tmp_path / "shared" / "datasets" / "truthfulqa"
    tqa.mkdir(parents=True)
    (tqa / "mc_validation.jsonl").write_text(
        json.dumps(
            {
                "question": "Is the sky green?",
                "mc1_targets": {"choices": ["No", "Yes"], "labels": [1, 0]},
                "mc2_targets": {"choices": ["No", "Yes"], "labels": [1, 0]},
            }
        )
        + "\n"
    )
    base = tmp_path / "checkout"
    base.mkdir()
    out = write_local_overrides(
        {"mmlu": datasets["mmlu"], "truthfulqa_mc2": datasets["truthfulqa_mc2"]}, tmp_path / "tasks", base=base
    )
    assert sorted(p.name for p in out.glob("*.yaml")) == ["mmlu_anatomy.yaml", "truthfulqa_mc2.yaml"]  # others: hub
    from lm_eval.tasks import TaskManager

    loaded = TaskManager(include_path=str(out)).load(["mmlu_anatomy", "truthfulqa_mc2"])["tasks"]
    assert list(loaded["mmlu_anatomy"].test_docs())[0]["question"] == "Which bone?"
    assert list(loaded["truthfulqa_mc2"].validation_docs())[0]["mc2_targets"]["labels"] == [1, 0]
