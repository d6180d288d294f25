"""What an artifact is made of: the files that serve (hashed), and the bytes one decoded token reads (MBU).

- `serving_files`: a GGUF file; a TensorRT-LLM engine folder's `rank*.engine` files and its
  `config.json`; any other folder's files (weights, configs, tokenizer, chat template, custom
  code) except the hub's `original/` copy (Meta's consolidated weights, never served) and hidden
  ones (the hub cache's `.cache/`).
- `serving_digest`: sha256 over those files (relative path + content hash each) and the bytes of
  the weight files among them (`.safetensors`, `.bin`, `.pt`, `.pth`, `.engine`, `.gguf`).
- `decode_bytes`: the bytes decoding reads per token at batch 1. For a checkpoint quantized when
  it loads, not its file size: vLLM's `fp8` stores every Linear weight in 1 byte (per-tensor
  scale; embeddings, lm_head and norms stay in the checkpoint's dtype), bitsandbytes' 4-bit NF4
  0.5 byte per Linear weight plus a float32 absmax per 64 weights. Read from the safetensors
  headers (shapes and dtypes), no weight is loaded. With tensor parallelism every rank reads its
  share at once: the bytes are the whole model's, the bandwidth is per-GPU x ranks
  (`tasks.perf.roofline.roofline_inputs`).
"""

from __future__ import annotations

import hashlib
import json
import struct
from pathlib import Path

from tasks.engines.base import sha256_file

WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".engine", ".gguf")
NOT_SERVED_DIRS = ("original",)  # Llama checkpoints' consolidated copy for Meta's own code
DTYPE_BYTES = {
    "F64": 8,
    "F32": 4,
    "F16": 2,
    "BF16": 2,
    "F8_E4M3": 1,
    "F8_E5M2": 1,
    "I64": 8,
    "I32": 4,
    "I16": 2,
    "I8": 1,
    "U8": 1,
    "BOOL": 1,
}
# Online quantization (vLLM --quantization when loading): bytes per Linear weight, and what it means.
ONLINE_BYTES_PER_WEIGHT = {
    "fp8": (1.0, "fp8 Linear weights (1 byte each), other tensors as stored"),
    "bitsandbytes": (0.5 + 4 / 64, "NF4 Linear weights (0.5 byte + a float32 absmax per 64), other tensors as stored"),
}


def serving_files(path: Path) -> list[Path]:
    """The files a server loads from `path` (see the module docstring), sorted."""
    if path.is_file():
        return [path]
    if not path.is_dir():
        return []
    engines = sorted(path.glob("rank*.engine"))
    if engines:
        return engines + ([path / "config.json"] if (path / "config.json").is_file() else [])
    out = []
    for f in sorted(path.rglob("*")):
        rel = f.relative_to(path).parts
        if not f.is_file() or rel[0] in NOT_SERVED_DIRS or any(p.startswith(".") for p in rel):
            continue
        out.append(f)
    return out


def serving_digest(path: Path) -> tuple[str, int]:
    """(sha256 over every serving file: relative path and content hash, bytes of its weight files)."""
    h = hashlib.sha256()
    total = 0
    for f in serving_files(path):
        h.update((f.relative_to(path).as_posix() if path.is_dir() else f.name).encode())
        h.update(sha256_file(f).encode())
        if f.suffix in WEIGHT_SUFFIXES:
            total += f.stat().st_size
    return h.hexdigest(), total


def safetensors_header(path: Path) -> dict[str, dict]:
    """A .safetensors file's tensor table {name: {dtype, shape, data_offsets}} (its JSON header only)."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
    header.pop("__metadata__", None)
    return header


def is_linear_weight(name: str, shape: list[int]) -> bool:
    """A weight vLLM's Linear layers hold (quantized by online methods): 2-D, not an embedding or the LM head."""
    return (
        len(shape) == 2
        and name.endswith(".weight")
        and "embed" not in name
        and "lm_head" not in name
        and "norm" not in name
    )


def decode_bytes(folder: Path, quantization: str) -> tuple[int, str]:
    """(bytes read per decoded token, how) for an HF checkpoint vLLM quantizes when loading with `quantization`."""
    per_weight, how = ONLINE_BYTES_PER_WEIGHT[quantization]
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise ValueError(f"{folder} has no .safetensors files to read tensor shapes from")
    total = 0.0
    for f in files:
        for name, t in safetensors_header(f).items():
            numel = 1
            for d in t["shape"]:
                numel *= d
            total += (
                numel * per_weight
                if is_linear_weight(name, t["shape"])
                else t["data_offsets"][1] - t["data_offsets"][0]
            )
    return int(round(total)), f"{quantization} quantized when loading: {how} (from the safetensors headers)"


def model_bytes(artifact) -> tuple[int | None, str | None]:
    """(bytes one decoded token reads, how they were counted) for MBU; None for an artifact without weights here."""
    if "decode_bytes" in artifact.meta:  # quantized when loading: the files' size is not what decoding reads
        b = artifact.meta["decode_bytes"]
        return (int(b), artifact.meta.get("decode_bytes_method")) if b else (None, None)
    if not artifact.bytes:
        return None, None
    kind = (
        "TensorRT engine files (rank*.engine)"
        if artifact.path.is_dir() and any(artifact.path.glob("rank*.engine"))
        else "artifact weight files"
    )
    return artifact.bytes, kind
