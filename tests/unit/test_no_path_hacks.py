"""Code imports installed packages: no file edits sys.path (the one exception is listed with why), and nothing outside
tests/ imports the tests (benchmarks and scripts measure with instruments/, an installed package)."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.helpers import ROOT

FOLDERS = ("tasks", "flows", "warehouse", "instruments", "tests", "benchmarks", "scripts")
# The files that may edit sys.path, with why.
SYS_PATH_ALLOWED = {
    "warehouse/history.py": "Apache Otava is installed --no-deps into a folder outside site-packages (Makefile)",
}
EDITS = {"insert", "append", "extend", "remove", "pop", "clear", "__setitem__", "__delitem__", "__iadd__"}


def python_files() -> list[Path]:
    return [p for folder in FOLDERS for p in sorted((ROOT / folder).rglob("*.py"))]


def is_sys_path(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Attribute)
        and node.attr == "path"
        and isinstance(node.value, ast.Name)
        and node.value.id == "sys"
    )


def sys_path_edits(source: str) -> list[int]:
    """Lines that change sys.path: a mutating method called on it, an assignment to it or into it, `from sys import
    path`, or site.addsitedir."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            f = node.func
            if f.attr in EDITS and is_sys_path(f.value):
                lines.append(node.lineno)
            elif f.attr == "addsitedir" and isinstance(f.value, ast.Name) and f.value.id == "site":
                lines.append(node.lineno)
        elif isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Delete)):
            targets = node.targets if isinstance(node, (ast.Assign, ast.Delete)) else [node.target]
            for t in targets:
                if is_sys_path(t) or (isinstance(t, ast.Subscript) and is_sys_path(t.value)):
                    lines.append(node.lineno)
        elif isinstance(node, ast.ImportFrom) and node.module == "sys" and any(a.name == "path" for a in node.names):
            lines.append(node.lineno)
    return sorted(lines)


def imports_of(source: str, package: str) -> list[int]:
    """Lines that import `package` or a module in it, at any depth of the file."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level:
            names = [node.module or ""]
        else:
            continue
        if any(n == package or n.startswith(package + ".") for n in names):
            lines.append(node.lineno)
    return sorted(lines)


def test_the_checks_find_what_they_look_for() -> None:
    hacks = (
        "import sys\nsys.path.insert(0, 'x')\nsys.path.append('y')\nsys.path[:0] = ['z']\nsys.path = []\n"
        "sys.path += ['w']\nfrom sys import path\nimport site\nsite.addsitedir('v')\nprint(sys.path)\n"
    )
    assert sys_path_edits(hacks) == [2, 3, 4, 5, 6, 7, 9]
    source = "import tests.helpers\nfrom tests.stubs import x\ndef f():\n    from tests import y\nimport testsuite\n"
    assert imports_of(source, "tests") == [1, 2, 4]


def test_no_file_edits_sys_path() -> None:
    files = python_files()
    assert len(files) > 100  # the walk found the tree
    found = [
        f"{path.relative_to(ROOT)}:{line}"
        for path in files
        if path.relative_to(ROOT).as_posix() not in SYS_PATH_ALLOWED
        for line in sys_path_edits(path.read_text())
    ]
    assert found == []


def test_the_allowed_sys_path_edit_is_still_there() -> None:
    """An exception that is no longer needed is removed from the list (a stale exception hides a new hack)."""
    for name in SYS_PATH_ALLOWED:
        assert sys_path_edits((ROOT / name).read_text()), name


def test_nothing_outside_tests_imports_the_tests() -> None:
    """Benchmarks, scripts, instruments and the product import installed packages, never tests/."""
    files = [p for p in python_files() if p.relative_to(ROOT).parts[0] != "tests"]
    assert any(p.relative_to(ROOT).parts[0] == "benchmarks" for p in files)
    found = [f"{path.relative_to(ROOT)}:{line}" for path in files for line in imports_of(path.read_text(), "tests")]
    assert found == []
