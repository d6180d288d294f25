"""Test isolation: Prefect, runs, builds and the warehouse live in temporary folders."""

from __future__ import annotations

import os
import tempfile

# Before anything imports Prefect: its home and the ephemeral API's start-up timeout.
os.environ["PREFECT_HOME"] = tempfile.mkdtemp(prefix="tradeoff-prefect-")
os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "180")
os.environ.setdefault("GX_ANALYTICS_ENABLED", "False")
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")

import pytest  # noqa: E402

import tasks.loader  # noqa: E402,F401  (registers the built-in engines and suites, as every entry point does)


@pytest.fixture(scope="session")
def prefect_harness():
    """One temporary Prefect API for the whole session (flows report their runs to it)."""
    from prefect.testing.utilities import prefect_test_harness

    from tasks.core.lifecycle import tie_prefect_api

    tie_prefect_api()  # its uvicorn dies with pytest, even when pytest itself is killed
    with prefect_test_harness(server_startup_timeout=180):
        yield
