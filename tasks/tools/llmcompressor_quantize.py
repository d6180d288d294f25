"""Quantize a Hugging Face checkpoint for vLLM with llm-compressor (GPU host; compressed-tensors output).

Run as a script by the Python of the vLLM environment with llmcompressor installed (it imports
nothing of tradeoff):
    python tasks/tools/llmcompressor_quantize.py MODEL OUT_DIR --scheme {fp8,awq,gptq,w8a8}
        [--samples 512] [--seq-len 2048] [--dataset HuggingFaceH4/ultrachat_200k] [--split train_sft]

Schemes (llm-compressor's recipes as in its examples):
- fp8:  FP8_DYNAMIC weights and activations, data-free;
- awq:  AWQ, W4A16_ASYM (int4 weights, group 128);
- gptq: GPTQ, W4A16;
- w8a8: SmoothQuant (0.8) then GPTQ W8A8 (int8 weights and activations).
lm_head stays unquantized. The calibration set is the chat dataset's first `samples`
conversations rendered with the model's chat template (seed 42), or, when --dataset is a local
folder (tools/calibration_text.py's: train.jsonl of {"text"} rows), its texts as they are. Writes OUT_DIR.partial and
renames it when complete; vLLM reads the scheme from the checkpoint's config.
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

SCHEMES = ("fp8", "awq", "gptq", "w8a8")


def recipe(scheme: str):
    from llmcompressor.modifiers.quantization import GPTQModifier, QuantizationModifier

    if scheme == "fp8":
        return [QuantizationModifier(targets="Linear", scheme="FP8_DYNAMIC", ignore=["lm_head"])]
    if scheme == "awq":
        from llmcompressor.modifiers.awq import AWQModifier

        return [AWQModifier(targets=["Linear"], scheme="W4A16_ASYM", ignore=["lm_head"])]
    if scheme == "gptq":
        return [GPTQModifier(targets="Linear", scheme="W4A16", ignore=["lm_head"])]
    from llmcompressor.modifiers.smoothquant import SmoothQuantModifier

    return [
        SmoothQuantModifier(smoothing_strength=0.8),
        GPTQModifier(targets="Linear", scheme="W8A8", ignore=["lm_head"]),
    ]


def calibration(tokenizer, dataset: str, split: str, samples: int, seq_len: int):
    import os

    from datasets import load_dataset

    if os.path.isdir(dataset):  # calibration_text.py's folder: train.jsonl of {"text"} rows, used as they are
        ds = load_dataset(
            "json", data_files={"train": os.path.join(dataset, "train.jsonl")}, split=f"train[:{samples}]"
        ).shuffle(seed=42)
    else:
        ds = load_dataset(dataset, split=f"{split}[:{samples}]").shuffle(seed=42)
        ds = ds.map(lambda ex: {"text": tokenizer.apply_chat_template(ex["messages"], tokenize=False)})
    return ds.map(
        lambda s: tokenizer(s["text"], padding=False, max_length=seq_len, truncation=True, add_special_tokens=False),
        remove_columns=ds.column_names,
    )


def quantize(model_id: str, out: Path, scheme: str, samples: int, seq_len: int, dataset: str, split: str) -> None:
    from llmcompressor import oneshot
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(model_id, dtype="auto")
    tokenizer = AutoTokenizer.from_pretrained(model_id)
    kwargs = {}
    if scheme != "fp8":  # data-free
        kwargs = {
            "dataset": calibration(tokenizer, dataset, split, samples, seq_len),
            "max_seq_length": seq_len,
            "num_calibration_samples": samples,
        }
    oneshot(model=model, recipe=recipe(scheme), **kwargs)
    tmp = out.with_name(out.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp, save_compressed=True)
    tokenizer.save_pretrained(tmp)
    tmp.rename(out)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model")
    ap.add_argument("out", type=Path)
    ap.add_argument("--scheme", required=True, choices=SCHEMES)
    ap.add_argument("--samples", type=int, default=512)
    ap.add_argument("--seq-len", type=int, default=2048)
    ap.add_argument("--dataset", default="HuggingFaceH4/ultrachat_200k")
    ap.add_argument("--split", default="train_sft")
    a = ap.parse_args()
    quantize(a.model, a.out, a.scheme, a.samples, a.seq_len, a.dataset, a.split)
