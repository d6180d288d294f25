"""The one engine interface: build -> serve -> scrape -> stop, and what it hands around (Artifact, Endpoint)."""

from __future__ import annotations

import hashlib
import json
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Iterator

from pydantic import BaseModel, ValidationError

from tasks import client
from tasks.client import set_endpoint_headers
from tasks.core.config import ModelSpec, Variant
from tasks.core.errors import validation_line
from tasks.core.registry import ENGINES
from tasks.core.runinfo import PROJECT_ROOT, gpu_names
from tasks.engines.launcher import Server, ServerDied, free_port, start_server, stop_server
from tasks.engines.prometheus import parse_prometheus
from tasks.engines.tokenizer import TokenizerRef, ref_for_path, ref_from_config


def tokenizer_for(artifact: "Artifact", model: "ModelSpec | None" = None) -> TokenizerRef | None:
    """The tokenizer the server of `artifact` tokenizes with (see tasks.engines.tokenizer), or None.

    Order: the served file itself (a GGUF), the served folder (an HF checkpoint), the tokenizer
    folder an engine was built with (`meta['tokenizer']`, TensorRT-LLM), the model's
    `tokenizer:` in the config, the GGUF the artifact was made from (`meta['tokenizer_gguf']`:
    a vLLM checkpoint dequantized from a GGUF carries its tokenizer too and is found first).
    """
    candidates: list[tuple[Any, str]] = [(artifact.path, "artifact")]
    if artifact.meta.get("tokenizer"):
        candidates.append((artifact.meta["tokenizer"], "engine build (--tokenizer)"))
    for value, source in candidates:
        ref = ref_for_path(value, source)
        if ref is not None:
            return ref
    configured = getattr(model, "tokenizer", None) if model is not None else None
    if configured:
        return ref_from_config(configured)
    if artifact.meta.get("tokenizer_gguf"):
        return ref_for_path(artifact.meta["tokenizer_gguf"], "source GGUF")
    return None


def engine_for(name: str) -> "Engine":
    return ENGINES[name]()


class EngineUnavailable(RuntimeError):
    """The engine cannot build or serve this variant on this host (not installed, no GPU); says why."""


@dataclass
class Endpoint:
    """A served variant: where to send requests, and the server process when tradeoff started one."""

    base_url: str
    served_model: str
    server: "Server | None" = None  # None: not started here (a hosted endpoint)
    startup_s: float = 0.0  # start until healthy (s); a hosted endpoint: until it first answered
    # No headers here: an Endpoint is a task result that Prefect may persist; a key stays in
    # `endpoint_headers` (this process's memory) only.

    def alive(self) -> bool:
        return self.server is None or self.server.alive()


def ensure_alive(endpoint: Endpoint, during: str) -> None:
    """Raise ServerDied (exit code or signal and its cause, the log's last lines) when the endpoint's
    server died `during` a step.

    What the step measured is already written; its requests in flight errored with the transport's reason.
    """
    if endpoint.alive():
        return
    assert endpoint.server is not None
    raise ServerDied(endpoint.server.proc.returncode, f"during {during}", endpoint.server.log_path)


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
    # Whether the server answers `prompt_logprobs: k` (top-k log-probabilities of every prompt position; fidelity).
    prompt_logprobs: ClassVar[bool] = False
    # Whether the server runs on this host (energy and memory bandwidth describe it); a hosted API does not.
    runs_on_host: ClassVar[bool] = True
    # Python modules the engine needs on the host that builds and serves it -> the pip requirement providing each.
    requires: ClassVar[dict[str, str]] = {}

    def missing_dependency(self) -> str | None:
        """'engine X needs pip-requirement (module m is not importable here)' for the first missing module, else
        None."""
        import importlib.util

        for module, requirement in self.requires.items():
            try:
                found = importlib.util.find_spec(module) is not None
            except (ImportError, ValueError):
                found = False
            if not found:
                return (
                    f"engine {self.name} needs {requirement} (python module {module} is not importable here); pip "
                    f"install '{requirement}'"
                )
        return None

    def check_variant(self, variant: "Variant", model: "ModelSpec") -> str | None:
        """Return 'field: problem; fix' when this engine cannot run the variant."""
        if self.quantizations and variant.quantization not in self.quantizations:
            return (
                f"quantization: '{variant.quantization}' is not supported by {self.name}; "
                f"use one of {', '.join(sorted(self.quantizations))}"
            )
        if variant.speculative and variant.speculative.method not in self.speculative_methods:
            known = ", ".join(sorted(self.speculative_methods)) or "none"
            return (
                f"speculative.method: '{variant.speculative.method}' is not supported by {self.name}; use one of "
                f"{known}"
            )
        return None

    def build(self, variant: "Variant", model: "ModelSpec", cache_dir: Path) -> Artifact:
        raise NotImplementedError

    def server_command(
        self, artifact: Artifact, variant: "Variant", model: "ModelSpec", host: str, port: int
    ) -> list[str]:
        raise NotImplementedError

    def served_model_name(self, variant: "Variant") -> str:
        return variant.name

    # Serving: the health path the launcher polls, seconds a server gets to stop after SIGTERM,
    # and the Prometheus path `scrape` reads (None: the server exposes no metrics).
    health_path: ClassVar[str] = "/v1/models"
    stop_grace_s: ClassVar[float] = 10.0
    metrics_path: ClassVar[str | None] = None

    def gpu_count(self, variant: "Variant", artifact: Artifact) -> int | None:
        """GPUs the variant's server runs on (its tensor-parallel ranks; 0: the CPU only); None: unknown."""
        return None

    def cpu_threads(self, variant: "Variant", model: "ModelSpec") -> dict[str, int] | None:
        """The CPU threads the variant's server computes with on this host ({"decode": n, "prompt": m, "host_cores":
        c}), what a reader needs to know how much of the host the load generator shared; None: not known here."""
        return None

    def tokenizer(self, artifact: Artifact, model: "ModelSpec | None" = None) -> TokenizerRef | None:
        """The tokenizer this engine's server tokenizes `artifact` with, for the quality suites (None: none known)."""
        return tokenizer_for(artifact, model)

    def tokenizer_file(self, artifact: Artifact) -> Path | None:
        """The GGUF whose vocabulary counts this variant's tokens (None: no local tokenizer)."""
        if artifact.path.suffix == ".gguf":
            return artifact.path
        tok = artifact.meta.get("tokenizer_gguf")
        return Path(tok) if tok else None

    def server_env(self) -> dict[str, str]:
        """Environment variables the server's process gets on top of this one's."""
        return {}

    def serve(
        self, artifact: Artifact, variant: "Variant", model: "ModelSpec", log_path: Path, timeout_s: float
    ) -> Endpoint:
        """Start the variant's server on a free loopback port and wait until it is healthy."""
        port = free_port()
        base_url = f"http://127.0.0.1:{port}"
        cmd = self.server_command(artifact, variant, model, "127.0.0.1", port)
        server = start_server(cmd, base_url, log_path, timeout_s, health_path=self.health_path, env=self.server_env())
        return Endpoint(base_url, self.served_model_name(variant), server, server.startup_s)

    def stop(self, endpoint: Endpoint) -> None:
        """Stop what `serve` started (by PID) and forget the endpoint's headers."""
        set_endpoint_headers(endpoint.base_url, None)
        if endpoint.server is not None:
            stop_server(endpoint.server, grace_s=self.stop_grace_s)

    @contextmanager
    def serving(
        self, artifact: Artifact, variant: "Variant", model: "ModelSpec", log_path: Path, timeout_s: float
    ) -> Iterator[Endpoint]:
        """The variant served inside the block; stopped on success and on failure."""
        endpoint = self.serve(artifact, variant, model, log_path, timeout_s)
        try:
            yield endpoint
        finally:
            self.stop(endpoint)

    def scrape(self, endpoint: Endpoint, timeout_s: float = 5.0) -> dict[str, float]:
        """One reading of the server's own metrics, by the names of `tasks.engines.scrape.METRICS`.

        Gauges are current values, counters are cumulative since the server started. Empty when
        the engine exposes no metrics.
        """
        if self.metrics_path is None:
            return {}
        r = client.get(endpoint.base_url, self.metrics_path, timeout_s)
        r.raise_for_status()
        return self.normalize_metrics(parse_prometheus(r.text))

    def exposes_metrics(self) -> bool:
        """Whether `scrape` reads anything (the sampler starts no thread otherwise)."""
        return self.metrics_path is not None

    def normalize_metrics(self, samples: list[tuple[str, dict[str, str], float]]) -> dict[str, float]:
        """Prometheus samples -> {metric: value} by tradeoff's names; engines with metrics override it."""
        return {}


def check_args(args: dict[str, Any], model: type[BaseModel], engine: str) -> str | None:
    """None when `args` fit the engine's options model, else 'engine_args.<field>: problem; fix'."""
    try:
        model.model_validate(args)
    except ValidationError as err:
        return validation_line(
            err, "engine_args", unknown=f"not an option of {engine}; use one of {', '.join(sorted(model.model_fields))}"
        )
    return None


def gpu_visible() -> bool:
    """Whether NVML sees an NVIDIA GPU on this host."""
    return gpu_names() is not None


def project_root() -> Path:
    return PROJECT_ROOT
