"""Results of `loglik_check` kept across runs, and the in-process reference of the same weights for any engine.

lm-eval's log-likelihood tasks (MMLU, TruthfulQA, HellaSwag, ...) are scored through the endpoint's
prompt log-probabilities only where that path was checked against an in-process reference of the
same weights and passed. Each check writes a record, keyed by engine, engine version and artifact
hash (and the same result under the engine and version alone, for variants whose weights have no
in-process reference: a checkpoint quantized when it loads), into the build cache:
`<build cache>/loglik-checks/<key>.json`. Nothing is hard-coded per engine.

The reference of the same weights: the variant's GGUF (llama.cpp logits), or the HF checkpoint the
engine serves as it is (transformers on the CPU): vLLM's dequantized GGUF checkpoints and fp16 /
bf16 / fp32 hub checkpoints, TensorRT-LLM fp16 / bf16 engines' source checkpoint. Not for weights
quantized at load (fp8, bitsandbytes) or pre-quantized checkpoints, whose numbers no CPU
reference reproduces.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from tasks.core.runinfo import build_cache_dir
from tasks.engines.base import sha256_file
from tasks.quality.base import SuiteContext
from tasks.quality.logits import is_hf_checkpoint

SAME_WEIGHTS_DTYPES = ("fp16", "bf16", "fp32", "auto")  # served as stored (no quantization when loading)
PACKAGES = {"llama.cpp": "llama-cpp-python"}  # engines whose version is their Python package's


@dataclass
class LoglikRecord:
    engine: str
    engine_version: str | None
    artifact_sha256: str | None
    endpoint_ok: bool  # every pair within tolerance through the endpoint's path
    within: int
    pairs: int
    max_abs_diff_nats: float | None
    tolerance_nats: float
    reference: str  # what the endpoint was compared with
    variant: str
    checked_at: str  # UTC
    error: str | None = None

    def summary(self) -> str:
        diff = f", max |diff| {self.max_abs_diff_nats:.3g} nats" if self.max_abs_diff_nats is not None else ""
        return f"{self.within} of {self.pairs} within {self.tolerance_nats:g} nats{diff}, vs {self.reference}"


def engine_version(ctx: SuiteContext) -> str | None:
    meta = ctx.artifact.meta if ctx.artifact is not None else {}
    if meta.get("engine_version"):
        return str(meta["engine_version"])
    package = PACKAGES.get(ctx.engine or "")
    try:
        return f"{package} {importlib.metadata.version(package)}" if package else None
    except importlib.metadata.PackageNotFoundError:
        return None


def artifact_sha(ctx: SuiteContext) -> str | None:
    if ctx.artifact is not None:
        return ctx.artifact.sha256
    if ctx.artifact_path is not None and ctx.artifact_path.is_file():
        return sha256_file(ctx.artifact_path)
    return None


def _key(*parts: str | None) -> str:
    return hashlib.sha256("\n".join(p or "" for p in parts).encode()).hexdigest()[:24]


def records_dir() -> Path:
    return build_cache_dir() / "loglik-checks"


def record_paths(ctx: SuiteContext) -> tuple[Path, Path]:
    """(this engine + version + artifact's record, this engine + version's latest record)."""
    engine, version = ctx.engine or "", engine_version(ctx)
    return (
        records_dir() / f"{_key(engine, version, artifact_sha(ctx))}.json",
        records_dir() / f"engine-{_key(engine, version)}.json",
    )


def save_record(ctx: SuiteContext, rec: LoglikRecord) -> None:
    exact, by_engine = record_paths(ctx)
    exact.parent.mkdir(parents=True, exist_ok=True)
    for path in (exact, by_engine):
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(rec), indent=1))
        tmp.replace(path)


def find_record(ctx: SuiteContext) -> tuple[LoglikRecord | None, bool]:
    """(the record for this artifact, else for this engine and version; whether it is this artifact's own)."""
    exact, by_engine = record_paths(ctx)
    for path, own in ((exact, True), (by_engine, False)):
        if path.is_file():
            try:
                return LoglikRecord(**json.loads(path.read_text())), own
            except (ValueError, TypeError):
                continue  # unreadable: as if absent (the next check rewrites it)
    return None, False


def new_record(
    ctx: SuiteContext, rows: list[dict], tolerance: float, reference: str, error: str | None
) -> LoglikRecord:
    diffs = [r["abs_diff_nats"] for r in rows if r["abs_diff_nats"] is not None]
    within = sum(r["within"] for r in rows)
    return LoglikRecord(
        ctx.engine or "",
        engine_version(ctx),
        artifact_sha(ctx),
        bool(rows) and within == len(rows) and error is None,
        within,
        len(rows),
        max(diffs) if diffs else None,
        tolerance,
        reference,
        ctx.variant,
        time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        error,
    )


def same_weights_reference(ctx: SuiteContext) -> tuple[str, Path] | None:
    """('gguf' | 'hf', path) of an in-process model of exactly the weights the endpoint serves, or None."""
    art = ctx.artifact
    if ctx.artifact_path is not None and ctx.artifact_path.suffix == ".gguf":
        return "gguf", ctx.artifact_path
    if art is None:
        return None
    if art.path.suffix == ".gguf" and art.path.is_file():
        return "gguf", art.path
    quant = ctx.variant_spec.quantization if ctx.variant_spec is not None else None
    checkpoint = ctx.variant_spec.engine_args.get("checkpoint") if ctx.variant_spec is not None else None
    as_stored = art.meta.get("dequantized_from") is not None or (quant in SAME_WEIGHTS_DTYPES and not checkpoint)
    if not as_stored:
        return None
    for candidate in (art.path, Path(str(art.meta.get("source") or ""))):
        if is_hf_checkpoint(candidate):
            return "hf", candidate
    return None
