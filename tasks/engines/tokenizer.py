"""The tokenizer a variant's server tokenizes with, for every engine: a GGUF vocabulary or a Hugging Face tokenizer.

Quality suites count tokens with the tokenizer of the engine that serves the variant, never
words or characters:
- llama.cpp: the GGUF it serves (llama.cpp's own vocabulary, `GGUFTokenizer`, no weights);
- vLLM and TensorRT-LLM: the Hugging Face checkpoint's tokenizer (its folder: the served
  checkpoint for vLLM, TensorRT-LLM's `--tokenizer` folder for an engine), loaded with
  transformers from local files only;
- a hosted endpoint: the model's `tokenizer:` in the config (a GGUF file, a Hugging Face
  folder, or a hub name whose tokenizer files are already in the local Hugging Face cache),
  else the model's local GGUF; else none, and the suites say so in a note.
`TokenizerRef` names one (picklable: it travels in the suite context); `open_tokenizer` loads it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Literal, Protocol

from tasks.client import detokenize, tokenize, tokenizer_api
from tasks.core.config import HF_TOKENIZER_FILES


class GGUFTokenizer:
    """Counts, encodes and decodes text with the vocabulary of a GGUF file."""

    def __init__(self, path: str | Path):
        from llama_cpp import Llama

        self._llm = Llama(model_path=str(path), vocab_only=True, verbose=False)
        self.label = f"gguf:{Path(path).name}"

    def encode(self, text: str) -> list[int]:
        return self._llm.tokenize(text.encode("utf-8"), add_bos=False, special=False)

    def decode(self, tokens: list[int]) -> str:
        return self._llm.detokenize(tokens).decode("utf-8", errors="replace")

    def count(self, text: str) -> int:
        return len(self.encode(text))


@lru_cache(maxsize=8)
def load_tokenizer(path: str) -> GGUFTokenizer:
    return GGUFTokenizer(path)


class Tokenizer(Protocol):
    label: str

    def encode(self, text: str) -> list[int]: ...

    def decode(self, tokens: list[int]) -> str: ...

    def count(self, text: str) -> int: ...


@dataclass(frozen=True)
class TokenizerRef:
    """Where a variant's tokenizer lives: `kind` gguf (a GGUF file) or hf (a folder or a cached hub name)."""

    kind: Literal["gguf", "hf"]
    path: str
    source: str  # what chose it: the artifact, the checkpoint, the config, ...

    @property
    def label(self) -> str:
        """'gguf:SmolLM2-135M-Instruct.Q4_1.gguf' or 'hf:<folder name or hub name>' (the unit's name in notes)."""
        name = Path(self.path).name if self.kind == "gguf" or Path(self.path).is_dir() else self.path
        return f"{self.kind}:{name}"


def is_hf_tokenizer_dir(path: Path) -> bool:
    return path.is_dir() and any((path / f).is_file() for f in HF_TOKENIZER_FILES)


def ref_for_path(path: str | Path, source: str) -> TokenizerRef | None:
    """A GGUF file, a Hugging Face tokenizer folder, or None when `path` is neither."""
    p = Path(os.path.expanduser(str(path)))
    if p.suffix == ".gguf" and p.is_file():
        return TokenizerRef("gguf", str(p), source)
    if is_hf_tokenizer_dir(p):
        return TokenizerRef("hf", str(p), source)
    return None


def ref_from_config(spec: str, source: str = "config") -> TokenizerRef:
    """The `tokenizer:` of a model in the config: a local GGUF/folder, else a hub name (local cache only)."""
    ref = ref_for_path(spec, source)
    if ref is not None:
        return ref
    if Path(os.path.expanduser(spec)).exists():
        raise ValueError(
            f"tokenizer: {spec} is neither a GGUF file nor a folder with {' or '.join(HF_TOKENIZER_FILES)}"
        )
    return TokenizerRef("hf", spec, f"{source} (hub name, local cache)")


class HFTokenizer:
    """A Hugging Face tokenizer (transformers), loaded from local files only; no special tokens added."""

    def __init__(self, path: str):
        os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
        from transformers import AutoTokenizer

        try:
            self._tok = AutoTokenizer.from_pretrained(path, local_files_only=True)
        except OSError as err:
            raise ValueError(
                f"tokenizer {path}: not loadable from local files ({str(err).splitlines()[0][:160]}); "
                f"give models.<model>.tokenizer a local folder or GGUF"
            ) from None
        self.label = f"hf:{Path(path).name if Path(path).is_dir() else path}"

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        return list(self._tok.encode(text, add_special_tokens=add_special_tokens))

    def decode(self, tokens: list[int]) -> str:
        return self._tok.decode(list(tokens))

    @property
    def bos_id(self) -> int:
        return self._tok.bos_token_id if self._tok.bos_token_id is not None else -1

    @property
    def eos_id(self) -> int:
        return self._tok.eos_token_id if self._tok.eos_token_id is not None else -1

    def count(self, text: str) -> int:
        return len(self.encode(text))


class ServerTokenizer:
    """The tokenizer of a running server, through its own tokenize/detokenize endpoints (tasks.client.TOKENIZE_APIS):
    for an endpoint whose tokenizer is not on this host, so that a prompt of `input_len` tokens is `input_len` of the
    tokens the server counts (as `vllm bench serve`'s random dataset builds its prompts with the served tokenizer)."""

    def __init__(self, base_url: str, model: str, api: str):
        self.base_url, self.model, self.api = base_url, model, api
        self.label = f"server:{api}"

    def encode(self, text: str) -> list[int]:
        return tokenize(self.base_url, self.model, self.api, text)

    def decode(self, tokens: list[int]) -> str:
        return detokenize(self.base_url, self.model, self.api, list(tokens))

    def count(self, text: str) -> int:
        return len(self.encode(text))


def server_tokenizer(base_url: str, model: str) -> ServerTokenizer | None:
    """The server's tokenizer when it exposes one (llama-cpp-python, vLLM, llama.cpp's server); None otherwise."""
    api = tokenizer_api(base_url, model)
    return ServerTokenizer(base_url, model, api) if api else None


@lru_cache(maxsize=8)
def open_tokenizer(ref: TokenizerRef) -> Tokenizer:
    """The tokenizer `ref` names, loaded once per process."""
    return load_tokenizer(ref.path) if ref.kind == "gguf" else HFTokenizer(ref.path)


def no_tokenizer_note(what: str) -> str:
    """Why a suite counted in other units: no tokenizer was found for the variant."""
    return (
        f"{what}: no tokenizer for this endpoint (a hosted model without a local tokenizer, or a bare endpoint); "
        f"set models.<model>.tokenizer to a GGUF, a Hugging Face folder or a cached hub name to count tokens"
    )
