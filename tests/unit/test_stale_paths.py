"""No stale path: every repository path that the docs, README, Makefile, CI script, configs and the code's own
docstrings and usage lines name exists (a file moved without its mentions is a newcomer's first dead end)."""

from __future__ import annotations

import re

from tests.helpers import ROOT

TOP = ("tasks", "flows", "warehouse", "instruments", "tests", "benchmarks", "configs", "docs", "scripts", ".ci")
# A path starting at one of the tree's top folders; globs and placeholders are kept whole so they can be skipped.
PATH = re.compile(r"(?<![\w./-])((?:%s)/[\w./*{}<>-]*[\w*}>])" % "|".join(re.escape(t) for t in TOP))
# Files the tool writes (gitignored warehouse files), named where the docs and configs say where output goes.
GENERATED = re.compile(r"warehouse/[\w-]+\.duckdb(\.before-rebuild)?")


def mentioning_files() -> list:
    files = [
        ROOT / "README.md",
        ROOT / "Makefile",
        ROOT / ".ci" / "run",
        ROOT / "prefect.yaml",
        ROOT / "pyproject.toml",
    ]
    files += sorted((ROOT / "docs").glob("*.md")) + sorted((ROOT / "configs").glob("*.yaml"))
    for pkg in ("tasks", "flows", "warehouse", "instruments", "tests", "benchmarks", "scripts"):
        files += sorted((ROOT / pkg).rglob("*.py"))
    return [f for f in files if f.name != "test_stale_paths.py"]  # its own examples are stale on purpose


def stale_paths() -> list[str]:
    found = []
    for path in mentioning_files():
        for number, line in enumerate(path.read_text().splitlines(), 1):
            for match in PATH.finditer(line):
                named = match.group(1).rstrip(".")
                if any(c in named for c in "*{}<>") or GENERATED.fullmatch(named):
                    continue
                if not (ROOT / named).exists():
                    found.append(f"{path.relative_to(ROOT)}:{number}: {named}")
    return found


def test_the_pattern_finds_a_stale_path() -> None:
    assert [m.group(1) for m in PATH.finditer("see tasks/helm.py, (tasks/perf/run.py) and `docs/x-*.md`.")] == [
        "tasks/helm.py",
        "tasks/perf/run.py",
        "docs/x-*.md",
    ]


def test_every_named_path_exists() -> None:
    files = mentioning_files()
    assert len(files) > 100 and ROOT / "README.md" in files  # the walk found the tree
    assert stale_paths() == []
