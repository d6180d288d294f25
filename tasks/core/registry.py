"""Registries by name: engines and quality suites register here, configs name them.

A registry never imports its plugins: `tasks.loader` registers the built-in ones (the list of
built-ins lives there), and a third-party plugin calls `register` itself. An unknown name is
one line listing the known ones.
"""

from __future__ import annotations

from typing import Any

from tasks.core.errors import close_matches


class Registry(dict):
    """Classes by their `name`. With `families`, a name ending in ':' registers a family:
    'helm:' serves 'helm:gsm', 'helm:mmlu', ... (the member's name is passed on to the plugin)."""

    def __init__(self, what: str, families: bool = False) -> None:
        super().__init__()
        self.what, self.families = what, families

    def register(self, cls: Any) -> Any:
        """Register `cls` under `cls.name`; the same name for another class is an error."""
        name = cls.name
        if dict.__contains__(self, name) and dict.__getitem__(self, name) is not cls:
            raise ValueError(
                f"{self.what} '{name}' is registered twice ({dict.__getitem__(self, name).__name__}, "
                f"{cls.__name__}); give one another name"
            )
        self[name] = cls
        return cls

    def __missing__(self, name: str) -> Any:
        if self.families and isinstance(name, str) and ":" in name:
            family = name.split(":", 1)[0] + ":"
            if family != name and dict.__contains__(self, family):
                return dict.__getitem__(self, family)
        raise KeyError(name)

    def __contains__(self, name: object) -> bool:
        try:
            self[name]
        except (KeyError, TypeError):
            return False
        return True

    def unknown(self, name: str) -> str:
        """One line: unknown <what> 'x' (did you mean ...); known: ..."""
        return close_matches(name, list(self), self.what)


ENGINES = Registry("engine")
SUITES = Registry("suite", families=True)
