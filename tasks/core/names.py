"""Names that become paths, and paths that must stay under their root.

Run ids, config names, variant names and suite labels end up as folder and file names
(`runs/<run_id>/results/<table>/<variant>.parquet`, `quality/<variant>/<suite>/`), in command
lines and in Prefect parameters. They must match a strict pattern: letters, digits, '_', '.',
'-', starting with a letter or digit (so never '.', '..', a path, or an option such as '-h').
A suite named after a HELM run entry (`helm:mmlu:subject=anatomy`) may also hold ':', '=', ',',
'+'. On top of the patterns, every path derived from a name is resolved (symlinks followed)
and checked to lie under its root before anything is written there or deleted from there.

This module is a leaf (no tradeoff imports): callers turn its ValueErrors into their own
one-line errors.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from urllib.parse import urlsplit

NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"  # config names, variant names, suite labels
RUN_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$"  # '<UTC stamp>-<config name>-<4 hex>' fits
SUITE_KEY_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.:=,+-]{0,127}$"  # a suite's name when it has no label


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "...'"


def name_problem(value: object, pattern: str = NAME_PATTERN) -> str | None:
    """None when `value` is a safe name, else one line: "'..' is not a name; use ..."."""
    if isinstance(value, str) and re.fullmatch(pattern, value):
        return None
    most = int(re.search(r"\{0,(\d+)\}\$$", pattern)[1]) + 1
    extra = ", ':', '=', ',', '+'" if pattern == SUITE_KEY_PATTERN else ""
    kind = "run id" if pattern == RUN_ID_PATTERN else "name"
    return (
        f"{_shown(value)} is not a {kind}; use 1-{most} letters, digits, '_', '.', '-'{extra}, starting with a "
        f"letter or digit"
    )


def safe_name(value: str | None) -> str | None:
    """`value` unchanged (None too); ValueError (one line, for pydantic validators) when it is not a safe name."""
    if value is not None and (problem := name_problem(value)):
        raise ValueError(problem)
    return value


def check_run_id(run_id: str | None, what: str = "run_id") -> str | None:
    """`run_id` unchanged (None stays None); ValueError with one line when it is not a safe run id."""
    if run_id is not None and (problem := name_problem(run_id, RUN_ID_PATTERN)):
        raise ValueError(f"{what}: {problem} (e.g. 20250101T020000Z-demo-ab12)")
    return run_id


def is_under(root: Path | str, path: Path | str) -> bool:
    """Whether `path` lies under `root` (or is it), both resolved. The last component of `path` is not followed
    when it is a symlink: deleting it deletes the link, which is where it stands."""
    real_root = os.path.realpath(root)
    p = Path(os.path.abspath(path))
    real = os.path.join(os.path.realpath(p.parent), p.name) if p.name else os.path.realpath(p)
    return os.path.commonpath([real_root, real]) == real_root


def contained(root: Path | str, path: Path | str, what: str) -> Path:
    """`path` as given, once checked to resolve under `root` (through '..' and symlinks, the last one too: a
    folder to write into); ValueError (one line) when it does not."""
    if not is_under(root, path) or not is_under(root, os.path.realpath(path)):
        raise ValueError(f"{what}: {path} resolves outside {root}; refusing to write or delete there")
    return Path(path)


def local_url_path(url: str) -> Path | None:
    """The local folder a results URL names (a plain path or file://), or None for a remote URL.

    ValueError (one line) for local URLs that name no absolute local folder: 'file://host/x', 'file://x'.
    """
    if "://" not in url:
        return Path(url).expanduser()
    parts = urlsplit(url)
    if parts.scheme.lower() not in ("file", "local"):
        return None
    if parts.netloc not in ("", "localhost") or not parts.path.startswith("/"):
        raise ValueError(
            f"results_url: {_shown(url)} is not a local folder; write file:///absolute/path or a plain path"
        )
    if parts.query or parts.fragment:
        raise ValueError(f"results_url: {_shown(url)} has a query or fragment; write file:///absolute/path")
    return Path(parts.path)
