"""The tests' own layout: a test module never imports another test module; what tests share lives in
tests/helpers/ (and tests/stubs/, the measuring instruments), each thing once.

Built from the source with ast, as tests/unit/test_import_graph.py builds the project's graph: every import
at any depth of a file (a function-level import is still an arrow).
"""

from __future__ import annotations

import ast

from tests.helpers import ROOT

KINDS = ("unit", "integration", "e2e")  # the folders of test modules, by kind


def is_test_module(name: str) -> bool:
    """Whether the module NAME is a test module or a folder of them (tests.unit, tests.integration.test_x, ...)."""
    return any(name == f"tests.{k}" or name.startswith(f"tests.{k}.") for k in KINDS)


def imports_of_test_modules(source: str) -> list[str]:
    """Every import of a test module in SOURCE, at any depth: `line N: module`."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            # `from tests.unit import x` imports tests.unit; `from tests import unit` imports tests.unit too
            names = [node.module] if is_test_module(node.module) else [f"{node.module}.{a.name}" for a in node.names]
        else:
            continue
        found += [f"line {node.lineno}: {name}" for name in names if is_test_module(name)]
    return found


def test_the_check_sees_every_form_of_importing_a_test_module() -> None:
    source = """
import tests.integration.test_validate
from tests.e2e.test_faults_orphans import reach
from tests.unit import test_bounds
from tests import integration

def f():
    from tests.integration.test_warehouse import rows as r
from tests.helpers.gate_tables import night
from tests.stubs.stub_server import start_stub
"""
    assert imports_of_test_modules(source) == [
        "line 2: tests.integration.test_validate",
        "line 3: tests.e2e.test_faults_orphans",
        "line 4: tests.unit",
        "line 5: tests.integration",
        "line 8: tests.integration.test_warehouse",
    ]


def test_no_test_module_imports_another() -> None:
    """What two test modules share is a helper in tests/helpers/, not one test module's import of the other."""
    checked, found = 0, []
    for path in sorted((ROOT / "tests").rglob("*.py")):
        checked += 1
        found += [f"{path.relative_to(ROOT)}: {hit}" for hit in imports_of_test_modules(path.read_text())]
    assert checked > 50  # the walk found the tests
    assert found == [], "move what they share to tests/helpers/:\n" + "\n".join(found)
