"""The tests' own layout: a test module never imports another test module; what tests share lives in
tests/helpers/ (and tests/stubs/, the measuring instruments), each thing once. Tests are filed by kind: a unit
test imports nothing that starts a process, serves or loads a model (tests/unit/conftest.py refuses them at run
time too).

Built from the source with ast, as tests/unit/test_import_graph.py builds the project's graph: every import
at any depth of a file (a function-level import is still an arrow).
"""

from __future__ import annotations

import ast
import os

import pytest

from tests.helpers import ROOT
from tests.helpers.unit_guard import MODEL_LIBRARIES, NotAUnitTest

KINDS = ("unit", "integration", "e2e")  # the folders of test modules, by kind


def is_test_module(name: str) -> bool:
    """Whether the module NAME is a test module or a folder of them (tests.unit, tests.integration.test_x, ...)."""
    return any(name == f"tests.{k}" or name.startswith(f"tests.{k}.") for k in KINDS)


def imports_of(source: str, matches) -> list[str]:
    """Every import in SOURCE, at any depth, of a module that MATCHES (a predicate on its name): `line N: module`."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            # `from a.b import c` imports a.b; `from a import b` may import the module a.b: both are looked at
            names = [node.module] if matches(node.module) else [f"{node.module}.{a.name}" for a in node.names]
        else:
            continue
        found += [f"line {node.lineno}: {name}" for name in names if matches(name)]
    return found


def imports_of_test_modules(source: str) -> list[str]:
    return imports_of(source, is_test_module)


# What a unit test module may not import: processes, sockets and servers, the measuring instruments (servers), and
# the libraries that load models. The project's own modules are not listed: the run-time guard catches them.
NOT_IN_UNIT_TESTS = (
    "subprocess",
    "multiprocessing",
    "socket",
    "socketserver",
    "http.server",
    "tests.stubs",
    *MODEL_LIBRARIES,
)
# Unit test modules that import one anyway, each with why.
UNIT_ALLOWED = {
    "test_test_layout.py": "it checks that the run-time guard refuses a process and a connection",
}


def is_not_for_unit_tests(name: str) -> bool:
    return any(name == m or name.startswith(f"{m}.") for m in NOT_IN_UNIT_TESTS)


def imports_not_for_unit_tests(source: str) -> list[str]:
    return imports_of(source, is_not_for_unit_tests)


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


def test_the_unit_check_sees_processes_servers_and_models() -> None:
    source = """
import json, subprocess
from http.server import ThreadingHTTPServer
from tests.stubs.stub_server import start_stub
from tests.helpers import ROOT

def f():
    from transformers import LlamaForCausalLM
    import llama_cpp.server
"""
    assert imports_not_for_unit_tests(source) == [
        "line 2: subprocess",
        "line 3: http.server",
        "line 4: tests.stubs.stub_server",
        "line 8: transformers",
        "line 9: llama_cpp.server",
    ]


def test_unit_test_modules_import_no_process_server_or_model() -> None:
    checked, found = 0, []
    for path in sorted((ROOT / "tests" / "unit").glob("test_*.py")):
        checked += 1
        if path.name not in UNIT_ALLOWED:
            found += [f"{path.relative_to(ROOT)}: {hit}" for hit in imports_not_for_unit_tests(path.read_text())]
    assert checked > 10  # the walk found the unit tests
    assert found == [], "a unit test is a pure function: move these to tests/integration/:\n" + "\n".join(found)


def test_a_unit_test_that_starts_a_process_fails() -> None:
    import subprocess

    with pytest.raises(NotAUnitTest, match="subprocess.Popen: a unit test starts no process"):
        subprocess.run(["true"], check=True)
    with pytest.raises(NotAUnitTest, match="os.system"):
        os.system("true")


def test_a_unit_test_that_opens_a_connection_fails() -> None:
    import socket

    with socket.socket() as s, pytest.raises(NotAUnitTest, match="socket.bind"):
        s.bind(("127.0.0.1", 0))
    with socket.socket() as s, pytest.raises(NotAUnitTest, match="socket.connect"):
        s.connect(("127.0.0.1", 9))


def test_a_thread_the_unit_test_starts_is_refused_too() -> None:
    import socket
    import threading

    refused = []

    def connect() -> None:
        with socket.socket() as s:
            try:
                s.connect(("127.0.0.1", 9))
            except NotAUnitTest as e:
                refused.append(str(e))

    thread = threading.Thread(target=connect)
    thread.start()
    thread.join()
    assert len(refused) == 1 and refused[0].startswith("socket.connect: a unit test")
