"""The import graph points one way: flows -> tasks -> core, no cycles, no dodges.

Built from the source with ast: every import of a project module at any depth of a file (a
function-level import is still an arrow), and importing a.b.c counts as importing a and a.b too.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

from tests.helpers import ROOT

PRODUCT = ("tasks", "flows", "warehouse")
PACKAGES = PRODUCT + ("instruments",)  # the measuring instruments of tests and benchmarks: above the product

# The layers, lowest first, written down once: a module may import its own package and the packages of
# lower layers, never a package of its own layer or a higher one. A module belongs to the longest entry
# that prefixes its name; `tasks` (the bare package) is above nothing and below everything.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("tasks.core", "warehouse", "tasks.tools"),  # vocabulary, the store, tools that run in other venvs
    ("tasks.client",),  # the one HTTP client
    ("tasks.engines",),  # servers: build, launch, scrape
    ("tasks.perf", "tasks.quality"),  # measurement: load sweeps; quality framework and suites
    ("tasks.decision",),  # the ship rules: they judge what perf and quality measured, which import nothing of them
    ("warehouse.db",),  # the store opened with its views, the decision's among them (the rest of warehouse: below)
    ("tasks.loader", "tasks.report"),  # built-ins registered, configs parsed; reports read the warehouse
    ("tasks.orchestration", "tasks.doctor", "tasks.config_limits_doc"),  # the nightly's steps; checks and docs
    ("flows",),  # Prefect flows and the CLI compose everything
    ("instruments",),  # what tests and benchmarks measure the product with: servers, histories, jobs
)

# The HTTP libraries, imported by the client alone, and by the tools that run elsewhere (listed with why).
HTTP_LIBRARIES = ("httpx", "requests", "aiohttp", "urllib.request", "http.client", "urllib3")
HTTP_ALLOWED = {
    "tasks.client": "the one client: every request of the project goes through it",
    "tasks.tools.helm_plugin": "HELM's client, run inside HELM's own venv, not the project's",
}


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


def layer_of(mod: str) -> tuple[int, str] | None:
    """(layer index, package entry) of a module: the longest LAYERS entry that is it or a package above it."""
    best = None
    for i, layer in enumerate(LAYERS):
        for pkg in layer:
            if (mod == pkg or mod.startswith(pkg + ".")) and (best is None or len(pkg) > len(best[1])):
                best = (i, pkg)
    return best


def up_arrows(edges: dict[str, set[str]]) -> list[tuple[str, str]]:
    """Imports of a module of another package on the same or a higher layer."""
    out = []
    for mod, deps in edges.items():
        me = layer_of(mod)
        for dep in deps:
            other = layer_of(dep)
            if me is None or other is None or other[1] == me[1]:
                continue
            if other[0] >= me[0]:
                out.append((mod, dep))
    return sorted(out)


def suite_modules(root: Path) -> set[str]:
    return {m for m in modules(root) if m.startswith("tasks.quality.suites.")}


def imported_names(path: Path) -> set[str]:
    """Every absolute module name a file imports, at any depth (relative imports are project modules)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{a.name}" for a in node.names)
    return names


def test_every_module_has_a_layer() -> None:
    assert sorted(m for m in modules(ROOT) if m != "tasks" and layer_of(m) is None) == []


def test_no_import_runs_up_a_layer() -> None:
    """No module imports a module of a package on its own layer or a higher one (LAYERS)."""
    assert up_arrows(graph(ROOT)) == []


def test_up_arrow_is_found() -> None:
    """The check itself: a core module importing the client, or perf importing quality, is an up-arrow."""
    edges = {
        "tasks.core.x": {"tasks.client"},
        "tasks.perf.a": {"tasks.quality.b", "tasks.perf.c"},
        "flows.cli": {"tasks.core.x", "warehouse.db"},
        "tasks.client": set(),
        "tasks.quality.b": set(),
        "tasks.perf.c": set(),
        "warehouse.db": set(),
    }
    assert up_arrows(edges) == [("tasks.core.x", "tasks.client"), ("tasks.perf.a", "tasks.quality.b")]


def test_suites_never_import_suites() -> None:
    """A suite says what to ask and how to score; what suites share lives outside suites/ (tasks.quality.texts)."""
    suites = suite_modules(ROOT)
    edges = graph(ROOT)
    found = sorted((m, d) for m in suites for d in edges[m] if d in suites)
    assert found == []


def test_http_libraries_only_in_the_client() -> None:
    """httpx, requests, aiohttp, urllib.request, http.client: imported by tasks/client.py alone (and HTTP_ALLOWED)."""
    found = []
    for mod, path in modules(ROOT).items():
        if mod in HTTP_ALLOWED or mod.split(".")[0] not in PRODUCT:  # an instrument (a proxy) is not the product
            continue
        for name in imported_names(path):
            if any(name == lib or name.startswith(lib + ".") for lib in HTTP_LIBRARIES):
                found.append((mod, name))
    assert sorted(set(found)) == []


def test_no_private_names_of_the_client_imported() -> None:
    """Other modules use the client's public functions, not its `_private` ones."""
    found = []
    for mod, path in modules(ROOT).items():
        if mod == "tasks.client":
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and node.module == "tasks.client":
                found += [(mod, a.name) for a in node.names if a.name.startswith("_")]
    assert found == []


def test_no_import_cycles() -> None:
    assert cycles(graph(ROOT)) == []


def test_nothing_below_flows_imports_flows() -> None:
    up = sorted(
        (m, d) for m, ds in graph(ROOT).items() for d in ds if not m.startswith("flows") and d.startswith("flows")
    )
    assert up == []


def test_core_is_a_leaf_layer() -> None:
    """tasks.core imports nothing of the project outside tasks.core (warehouse's vocabulary aside)."""
    out = sorted(
        (m, d)
        for m, ds in graph(ROOT).items()
        if m.startswith("tasks.core")
        for d in ds
        if not d.startswith("tasks.core") and d != "tasks"
    )
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
