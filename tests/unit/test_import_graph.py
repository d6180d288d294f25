"""The import graph points one way: flows -> tasks -> core, no cycles, no dodges.

Built from the source with ast: every import of a project module at any depth of a file (a
function-level import is still an arrow), and importing a.b.c counts as importing a and a.b too.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

from tests.helpers import ROOT

PACKAGES = ("tasks", "flows", "warehouse")


def module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def modules(root: Path) -> dict[str, Path]:
    out = {}
    for pkg in PACKAGES:
        for path in sorted((root / pkg).rglob("*.py")):
            out[module_name(root, path)] = path
    return out


def resolve(name: str, known: dict[str, Path]) -> str | None:
    """The project module an imported name lives in (a.b.c -> a.b.c, or a.b when c is a name in a.b)."""
    while name:
        if name in known:
            return name
        name = name.rpartition(".")[0]
    return None


def graph(root: Path) -> dict[str, set[str]]:
    known = modules(root)
    edges: dict[str, set[str]] = {m: set() for m in known}
    for mod, path in known.items():
        tree = ast.parse(path.read_text(), str(path))
        is_pkg = path.name == "__init__.py"
        for node in ast.walk(tree):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    pkg = mod if is_pkg else mod.rpartition(".")[0]
                    for _ in range(node.level - 1):
                        pkg = pkg.rpartition(".")[0]
                    base = f"{pkg}.{base}" if base else pkg
                targets = [f"{base}.{a.name}" for a in node.names] + [base]
            for t in targets:
                if t.split(".")[0] not in PACKAGES:
                    continue
                dep = resolve(t, known)
                if dep and dep != mod:
                    edges[mod].add(dep)
    # importing a.b.c runs a/__init__ and a/b/__init__ too
    for mod in list(edges):
        for dep in list(edges[mod]):
            parts = dep.split(".")
            for i in range(1, len(parts)):
                parent = ".".join(parts[:i])
                if parent in known and parent != mod:
                    edges[mod].add(parent)
    return edges


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 10000))
    try:  # put back: a raised limit lets later tests' deep inputs parse where they must not (test_faults_hostile)
        for v in sorted(edges):
            if v not in index:
                visit(v)
    finally:
        sys.setrecursionlimit(limit)
    return out




def test_no_import_cycles() -> None:
    assert cycles(graph(ROOT)) == []


def test_nothing_below_flows_imports_flows() -> None:
    up = sorted((m, d) for m, ds in graph(ROOT).items() for d in ds
                if not m.startswith("flows") and d.startswith("flows"))
    assert up == []


def test_core_is_a_leaf_layer() -> None:
    """tasks.core imports nothing of the project outside tasks.core (warehouse's vocabulary aside)."""
    out = sorted((m, d) for m, ds in graph(ROOT).items() if m.startswith("tasks.core") for d in ds
                 if not d.startswith("tasks.core") and d != "tasks")
    assert out == []


def test_no_type_checking_or_late_imports_of_own_modules() -> None:
    """No `if TYPE_CHECKING:` import of a project module and no bottom-of-file (E402) import: no cycle to dodge."""
    found = []
    for pkg in PACKAGES:
        for path in (ROOT / pkg).rglob("*.py"):
            text = path.read_text()
            if "noqa: E402" in text:
                found.append(f"{path.relative_to(ROOT)}: late import")
            for node in ast.walk(ast.parse(text)):
                if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                    for sub in ast.walk(node):
                        if isinstance(sub, ast.ImportFrom) and (sub.module or "").split(".")[0] in PACKAGES:
                            found.append(f"{path.relative_to(ROOT)}: TYPE_CHECKING import of {sub.module}")
    assert found == []
