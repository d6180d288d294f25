"""The model's own tokenizer, loaded from its GGUF (vocabulary only, no weights)."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path


class GGUFTokenizer:
    """Counts, encodes and decodes text with the vocabulary of a GGUF file."""

    def __init__(self, path: str | Path):
        from llama_cpp import Llama

        self._llm = Llama(model_path=str(path), vocab_only=True, verbose=False)

    def encode(self, text: str) -> list[int]:
        return self._llm.tokenize(text.encode("utf-8"), add_bos=False, special=False)

    def decode(self, tokens: list[int]) -> str:
        return self._llm.detokenize(tokens).decode("utf-8", errors="replace")

    def count(self, text: str) -> int:
        return len(self.encode(text))


@lru_cache(maxsize=8)
def load_tokenizer(path: str) -> GGUFTokenizer:
    return GGUFTokenizer(path)
