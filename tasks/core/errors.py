"""Errors users read: one line naming the field and the fix."""

from __future__ import annotations

import difflib
import re

from pydantic import ValidationError


def close_matches(name: str, known: list[str] | set[str], what: str) -> str:
    """One line: `unknown <what> 'x' (did you mean a, b?); known: ...` (long lists only counted)."""
    known = sorted(known)
    near = difflib.get_close_matches(name, known, n=5, cutoff=0.5)
    hint = f" (did you mean {', '.join(near)}?)" if near else ""
    shown = ", ".join(known) if len(known) <= 30 else f"{len(known)} names"
    return f"unknown {what} '{name}'{hint}; known: {shown}"


class ConfigError(ValueError):
    """A config that cannot run; the message is one line: field and fix."""


def validation_line(
    err: ValidationError,
    prefix: str = "",
    unknown: str | None = None,
    missing: str = "required field is missing; add it",
) -> str:
    """A pydantic error as one line `<prefix.loc>: <problem>; <fix>` (the first error; the others follow from it).

    `unknown` replaces the message of an unknown key (e.g. listing the known ones), `missing` that
    of a missing one; other messages name the value that was given.
    """
    e = err.errors()[0]
    where = ".".join(x for x in (prefix, ".".join(str(p) for p in e["loc"])) if x) or "config"
    msg = e["msg"].removeprefix("Value error, ")
    if where == "config" and e["type"] == "value_error" and re.match(r"[a-z_]+(\.[a-z_]+)+: ", msg):
        return msg  # a rule across fields names its own field
    if e["type"] == "extra_forbidden":
        msg = unknown or "unknown field; remove it or check its spelling"
    elif e["type"] == "missing":
        msg = missing
    elif e["type"] == "too_short" and isinstance(e.get("input"), list) and not e["input"]:
        msg = "is empty; list at least one"
    elif e["type"] != "value_error" and not isinstance(e.get("input"), (dict, list)):
        msg = f"{msg[0].lower()}{msg[1:]} (got {e.get('input')!r}); fix the value"
    return f"{where}: {msg}"
