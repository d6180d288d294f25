"""Configs in tests: the shipped demo config to change, a hosted variant added to it, the one-line load error."""

from __future__ import annotations

import copy

import pytest
import yaml

from tasks.core.errors import ConfigError
from tasks.loader import parse_config
from tests.helpers import ROOT


def demo() -> dict:
    """configs/demo.yaml, a copy of its own to change."""
    return copy.deepcopy(yaml.safe_load((ROOT / "configs" / "demo.yaml").read_text()))


def hosted(engine_args: dict) -> dict:
    """The demo config plus a variant `hosted` on the openai-compatible engine with ENGINE_ARGS."""
    cfg = demo()
    cfg["variants"].append(
        {
            "name": "hosted",
            "model": "smollm2-135m",
            "engine": "openai-compatible",
            "quantization": "unknown",
            "engine_args": {"model": "m", **engine_args},
        }
    )
    return cfg


def load_error(cfg: dict) -> str:
    """The ConfigError loading CFG raises, checked to be one line."""
    with pytest.raises(ConfigError) as e:
        parse_config(cfg)
    assert "\n" not in str(e.value)
    return str(e.value)
