"""Bookkeeping of one variant: its row in `variants`, its summary in the Prefect UI, its errors."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from tasks.core.config import RunConfig, Variant
from tasks.engines.base import Artifact, engine_for
from tasks.loader import load_config, parse_config
from tasks.report.text import md_escape


def engine_args_json(variant: Variant) -> str:
    return json.dumps(variant.engine_args, sort_keys=True)


class VariantFailed(RuntimeError):
    """The variant was recorded as failed (its row says why)."""


def config_from(config: str | dict[str, Any] | RunConfig) -> RunConfig:
    """A config path on this host, the config mapping the nightly sent, or the config it validated (in-process)."""
    if isinstance(config, RunConfig):
        return config
    return load_config(config) if isinstance(config, str) else parse_config(config)


def error_line(err: BaseException) -> str:
    return f"{type(err).__name__}: {err}".strip()


def variant_row(
    run_id: str, cfg: RunConfig, v: Variant, art: Artifact | None, outcome: dict | None, error: str | None
) -> dict:
    """The variant's row of the `variants` table: how it was built and served, or why it failed."""
    ok_art = art is not None
    return {
        "run_id": run_id,
        "variant": v.name,
        "model": v.model,
        "engine": v.engine,
        "quantization": v.quantization,
        "speculative": v.speculative.method if v.speculative else None,
        "is_reference": v.reference,
        "status": "failed" if error else "ok",
        "error": error,
        "artifact_path": str(art.path) if ok_art else None,
        "artifact_sha256": art.sha256 if ok_art else None,
        "artifact_bytes": art.bytes if ok_art else None,
        "build_cached": art.cached if ok_art else None,
        "build_s": art.build_s if ok_art else None,
        "server_startup_s": outcome.get("server_startup_s") if outcome else None,
        "engine_args": engine_args_json(v),
        "usd_per_hour": v.cost.usd_per_hour if v.cost else None,
        "usd_per_1m_input_tok": v.cost.usd_per_1m_input_tokens if v.cost else None,
        "usd_per_1m_output_tok": v.cost.usd_per_1m_output_tokens if v.cost else None,
        "engine_version": art.meta.get("engine_version") if ok_art else None,
        "cpu_threads": cpu_threads_json(cfg, v),
    }


def cpu_threads_json(cfg: RunConfig, v: Variant) -> str | None:
    """The engine's CPU threads on this host, as JSON (what the load generator shared the host with)."""
    threads = engine_for(v.engine).cpu_threads(v, cfg.models[v.model])
    return json.dumps(threads, sort_keys=True) if threads else None


def summary_markdown(row: dict, outcome: dict | None, host: str, took_s: float) -> str:
    """The variant's sub-run summary shown in the Prefect UI."""
    lines = [
        f"### {row['variant']}: {row['status']}",
        "",
        f"- host `{host}`"
        + (f", GPU limit `{outcome['gpu_limit']}`" if outcome and outcome["gpu_limit"] else "")
        + f", {took_s:.0f} s",
        f"- {row['engine']} {row['quantization']}"
        + (f", speculative {row['speculative']}" if row["speculative"] else ""),
    ]
    if row["artifact_sha256"]:
        lines.append(
            f"- artifact `{Path(row['artifact_path']).name}` sha256 `{row['artifact_sha256'][:12]}`, "
            f"{row['artifact_bytes'] / 1e6:.1f} MB, {'cached' if row['build_cached'] else 'built'} "
            f"in {row['build_s']:.1f} s"
        )
    if row["error"]:
        lines.append(f"- error: {md_escape(row['error'][:300])}")  # a server's or model's words, never markup
    if outcome:
        perf, quality = outcome["perf"], outcome["quality"]
        tps = ", ".join(f"{t:.1f}" for t in perf.get("output_throughput", []) if t is not None)
        startup = outcome["server_startup_s"]
        served = f"server up in {startup:.1f} s" if startup is not None else "hosted endpoint"
        lines += [
            f"- {served}; {perf.get('requests')} requests in {perf.get('scenarios')} steps; "
            f"output tokens/s per step: {tps or 'n/a'}",
            "",
            "| quality metric | value |",
            "|---|---|",
        ]
        lines += [
            f"| {k} | {v:.4g} |" if isinstance(v, (int, float)) else f"| {k} | {v} |"
            for k, v in quality.get("scores", {}).items()
        ]
    return "\n".join(lines)


def artifact_key(variant: str) -> str:
    # Prefect artifact keys: lowercase letters, digits and dashes.
    return "variant-" + re.sub(r"[^a-z0-9-]+", "-", variant.lower()).strip("-")
