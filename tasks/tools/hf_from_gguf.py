"""Make a Hugging Face checkpoint (safetensors) from a GGUF file, dequantized, for engines without a GGUF loader.

Run as a script by the Python of an environment with torch, transformers and gguf (the vLLM
environment; it imports nothing of tradeoff):
    python tasks/tools/hf_from_gguf.py GGUF OUT_DIR [--dtype float32]

transformers maps the GGUF's metadata to a config, its vocabulary to a tokenizer (with the
GGUF's chat template) and dequantizes every tensor; quantized blocks become their exact
float values, so float32 keeps them unchanged. When the GGUF carries no chat template a
ChatML template is supplied (the OpenAI chat endpoint needs one). `from_pretrained(...,
gguf_file=...)` would need accelerate; this builds the model from its config and loads the
dequantized state dict instead. Writes into OUT_DIR.partial and renames it when complete.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

CHATML = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + "
    "'\\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


def convert(gguf: Path, out: Path, dtype: str) -> None:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer
    from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint

    torch_dtype = getattr(torch, dtype)
    tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    if not tok.chat_template:
        tok.chat_template = CHATML
    config = AutoConfig.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_config(config, dtype=torch_dtype)
    state = load_gguf_checkpoint(str(gguf), return_tensors=True, model_to_load=model, torch_dtype=torch_dtype)[
        "tensors"
    ]
    result = model.load_state_dict(state, strict=False)
    missing = [k for k in result.missing_keys if not (k == "lm_head.weight" and config.tie_word_embeddings)]
    if missing or result.unexpected_keys:
        sys.exit(
            f"hf_from_gguf: tensors do not match the model: missing {missing[:5]}, "
            f"unexpected {result.unexpected_keys[:5]}"
        )
    model.tie_weights()
    tmp = out.with_name(out.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp)
    tok.save_pretrained(tmp)
    tmp.rename(out)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("gguf", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--dtype", default="float32", choices=["float32", "float16", "bfloat16"])
    a = ap.parse_args()
    convert(a.gguf, a.out, a.dtype)
