"""Engine registry: each engine builds a variant's artifact and says how to serve it.

Engines register by name with `@register_engine`; configs name them. The server
process itself is started and stopped by `tasks.serve`, the one launcher.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    from tasks.config import ModelSpec, Variant

ENGINES: dict[str, type["Engine"]] = {}


def register_engine(cls: type["Engine"]) -> type["Engine"]:
    ENGINES[cls.name] = cls
    return cls


def engine_for(name: str) -> "Engine":
    return ENGINES[name]()


@dataclass
class Artifact:
    """What a build produced: the weights a server loads, and how they were made."""

    variant: str
    path: Path
    sha256: str
    bytes: int
    cached: bool
    build_s: float
    meta: dict[str, Any] = field(default_factory=dict)


def sha256_file(path: Path, chunk: int = 1 << 22) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def build_key(source_sha256: str, params: dict[str, Any]) -> str:
    """Content address of a build: the source's hash plus the build parameters."""
    blob = json.dumps({"source": source_sha256, "params": params}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:24]


class Engine:
    """One inference engine. Subclasses fill in the class attributes and methods."""

    name: ClassVar[str]
    quantizations: ClassVar[frozenset[str]] = frozenset()
    speculative_methods: ClassVar[frozenset[str]] = frozenset()
    # Whether the server honours min_tokens / ignore_eos for a fixed output length.
    forces_output_len: ClassVar[str | None] = None
    # Whether `logprobs_in_process` gives real next-token logits from the artifact.
    has_in_process_logits: ClassVar[bool] = False

    def check_variant(self, variant: "Variant", model: "ModelSpec") -> str | None:
        """Return 'field: problem; fix' when this engine cannot run the variant."""
        if self.quantizations and variant.quantization not in self.quantizations:
            return (
                f"quantization: '{variant.quantization}' is not supported by {self.name}; "
                f"use one of {', '.join(sorted(self.quantizations))}"
            )
        if variant.speculative and variant.speculative.method not in self.speculative_methods:
            known = ", ".join(sorted(self.speculative_methods)) or "none"
            return f"speculative.method: '{variant.speculative.method}' is not supported by {self.name}; use one of {known}"
        return None

    def build(self, variant: "Variant", model: "ModelSpec", cache_dir: Path) -> Artifact:
        raise NotImplementedError

    def server_command(self, artifact: Artifact, variant: "Variant", model: "ModelSpec", host: str, port: int) -> list[str]:
        raise NotImplementedError

    def served_model_name(self, variant: "Variant") -> str:
        return variant.name


# Engines register on import.
from tasks.engines import llama_cpp as _llama_cpp  # noqa: E402,F401
