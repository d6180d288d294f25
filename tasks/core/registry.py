"""Registries by name: engines and quality suites register here; a registry never imports its plugins (tasks.loader registers the built-ins)."""

from __future__ import annotations

from tasks.engines.base import Engine
from tasks.quality.base import Suite


class _Registry(dict):
    """Suites by name. A name ending in ':' registers a family: 'helm:' runs 'helm:gsm', 'helm:mmlu', ..."""

    def __missing__(self, name: str) -> type["Suite"]:
        family = name.split(":", 1)[0] + ":"
        if ":" in name and family != name and dict.__contains__(self, family):
            return dict.__getitem__(self, family)
        raise KeyError(name)

    def __contains__(self, name: object) -> bool:
        try:
            self[name]
        except (KeyError, TypeError):
            return False
        return True


SUITES: dict[str, type["Suite"]] = _Registry()


def register_suite(cls: type["Suite"]) -> type["Suite"]:
    SUITES[cls.name] = cls
    return cls


ENGINES: dict[str, type["Engine"]] = {}


def register_engine(cls: type["Engine"]) -> type["Engine"]:
    ENGINES[cls.name] = cls
    return cls
