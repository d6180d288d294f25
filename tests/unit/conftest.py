"""Unit tests are pure functions: while one runs, starting a process or opening a network connection fails it,
and so does loading a model library it did not find loaded. A test that needs a server, a child process or a model
belongs in tests/integration/ (real parts in-process or local servers) or tests/e2e/ (whole nightlies).

What unit test modules may import is checked from their source in tests/unit/test_test_layout.py; this guard
catches what they reach through the project's code.
"""

from __future__ import annotations

import pytest

from tests.helpers.unit_guard import WHERE, model_libraries_loaded, refuse_processes_and_connections


@pytest.fixture(autouse=True)
def pure(monkeypatch: pytest.MonkeyPatch):
    """Processes and connections refused while the test runs; a model library that the test loads fails it at
    teardown."""
    refuse_processes_and_connections(monkeypatch)
    before = model_libraries_loaded()
    yield
    loaded = sorted(model_libraries_loaded() - before)
    if loaded:
        pytest.fail(f"loaded {', '.join(loaded)}: {WHERE}")
