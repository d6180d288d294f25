"""A suite's context for tests: the fields most tests leave as they are, written once."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tasks.quality.base import SuiteContext


def suite_context(work_dir: Path, **fields: Any) -> SuiteContext:
    """A SuiteContext with variant "v", served model "m", no artifacts, two items, seed 0 and no parameters unless
    `fields` say otherwise (base_url defaults to a closed port: a test that asks must name its server)."""
    defaults: dict[str, Any] = {
        "variant": "v",
        "base_url": "http://127.0.0.1:9",
        "served_model": "m",
        "artifact_path": None,
        "reference_artifact_path": None,
        "limit": 2,
        "seed": 0,
        "params": {},
    }
    return SuiteContext(**{**defaults, **fields, "work_dir": work_dir})
