"""Test isolation: Prefect, runs, builds and the warehouse live in temporary folders."""

from __future__ import annotations

import os
import tempfile
import time

# Before anything imports Prefect: its home and the ephemeral API's start-up timeout.
os.environ["PREFECT_HOME"] = tempfile.mkdtemp(prefix="tradeoff-prefect-")
os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "180")
os.environ.setdefault("GX_ANALYTICS_ENABLED", "False")
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
# Runs, the warehouse and variant builds of this session: temporary folders, never the user's. Builds are
# shared by the session's tests (TRADEOFF_TEST_CACHE_DIR keeps them across sessions); each test gets its
# own runs folder and warehouse (`isolated` below); subprocesses inherit the same.
SESSION_DIR = tempfile.mkdtemp(prefix="tradeoff-tests-")
os.environ["TRADEOFF_RUNS_DIR"] = os.path.join(SESSION_DIR, "runs")
os.environ["TRADEOFF_WAREHOUSE"] = os.path.join(SESSION_DIR, "warehouse.duckdb")
os.environ["TRADEOFF_CACHE_DIR"] = os.environ.get("TRADEOFF_TEST_CACHE_DIR") or os.path.join(SESSION_DIR, "builds")

import pytest  # noqa: E402

import tasks.loader  # noqa: E402,F401  (registers the built-in engines and suites, as every entry point does)


@pytest.fixture(autouse=True)
def isolated(tmp_path_factory, monkeypatch):
    """Each test's runs folder and warehouse in a temporary folder of its own (builds: the session's)."""
    folder = tmp_path_factory.mktemp("isolated")
    monkeypatch.setenv("TRADEOFF_RUNS_DIR", str(folder / "runs"))
    monkeypatch.setenv("TRADEOFF_WAREHOUSE", str(folder / "warehouse.duckdb"))
    return folder


@pytest.fixture(scope="session")
def prefect_harness():
    """One temporary Prefect API for the whole session (flows report their runs to it)."""
    from prefect.testing.utilities import prefect_test_harness

    from tasks.core.lifecycle import tie_prefect_api

    tie_prefect_api()  # its uvicorn dies with pytest, even when pytest itself is killed
    with prefect_test_harness(server_startup_timeout=180):
        yield


# What became of the tests marked `vllm` (they skip where vLLM is not installed): one line at the end of the run, so
# a log shows whether vLLM was exercised at all (.ci/run installs it and fails when this line has a skip or none ran).
VLLM_OUTCOMES = {"passed": 0, "failed": 0, "skipped": 0}
VLLM_TESTS: set[str] = set()


# Tests marked `slow` (minutes each: the cluster, every signal of the orphan matrix, ...) run after all others, and
# one not started within the suite's budget (TRADEOFF_TEST_BUDGET_MIN from the session's start; 0: none) is skipped
# with the reason, so that `make test` ends within CI's 90 minutes on a slow 2-core host (setup ~12 min there) and
# runs them all on a fast one; `make test-all` sets no budget. One line at the end says what became of them.
BUDGET_MIN = float(os.environ.get("TRADEOFF_TEST_BUDGET_MIN") or 60)
SESSION_START = time.monotonic()
SLOW_TESTS: set[str] = set()
SLOW_OUTCOME: dict[str, str] = {}  # per slow test: passed, failed (in any phase) or not started


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    VLLM_TESTS.update(item.nodeid for item in items if item.get_closest_marker("vllm"))
    # the slow ones last, those with a later `rank` (slow(rank=1): the longest) after the others, each in its order
    slow = sorted(
        (item for item in items if item.get_closest_marker("slow")),
        key=lambda item: item.get_closest_marker("slow").kwargs.get("rank", 0),
    )
    SLOW_TESTS.update(item.nodeid for item in slow)
    items[:] = [item for item in items if item.nodeid not in SLOW_TESTS] + slow  # in their order, last


def pytest_runtest_setup(item: pytest.Item) -> None:
    spent = (time.monotonic() - SESSION_START) / 60
    if item.nodeid in SLOW_TESTS and BUDGET_MIN > 0 and spent > BUDGET_MIN:
        SLOW_OUTCOME[item.nodeid] = "not started"
        pytest.skip(
            f"slow test not started: {spent:.0f} min of the suite's {BUDGET_MIN:g} min budget spent "
            "(TRADEOFF_TEST_BUDGET_MIN; `make test-all` runs every test)"
        )


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.nodeid in SLOW_TESTS and report.failed:
        SLOW_OUTCOME[report.nodeid] = "failed"
    elif report.nodeid in SLOW_TESTS and report.when == "call" and report.passed:
        SLOW_OUTCOME[report.nodeid] = "passed"
    if report.nodeid not in VLLM_TESTS:
        return
    if report.failed:
        VLLM_OUTCOMES["failed"] += 1
    elif report.skipped:
        VLLM_OUTCOMES["skipped"] += 1
    elif report.when == "call":
        VLLM_OUTCOMES["passed"] += 1


def pytest_terminal_summary(terminalreporter) -> None:
    if SLOW_TESTS:
        terminalreporter.write_line(
            "slow-marked tests: "
            + ", ".join(f"{list(SLOW_OUTCOME.values()).count(o)} {o}" for o in ("passed", "failed", "not started"))
            + (f" (budget {BUDGET_MIN:g} min)" if BUDGET_MIN > 0 else " (no budget)")
        )
    if any(VLLM_OUTCOMES.values()):
        terminalreporter.write_line(
            "vllm-marked tests: " + ", ".join(f"{n} {outcome}" for outcome, n in VLLM_OUTCOMES.items())
        )
