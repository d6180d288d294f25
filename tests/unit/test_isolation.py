"""The test harness keeps runs, the warehouse and builds out of the user's folders."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from tasks.core.runinfo import build_cache_dir, runs_dir


def test_runs_warehouse_and_builds_live_in_temporary_folders(isolated: Path) -> None:
    temp = Path(tempfile.gettempdir()).resolve()
    assert runs_dir().resolve().is_relative_to(isolated)
    assert Path(os.environ["TRADEOFF_WAREHOUSE"]).resolve().is_relative_to(isolated)
    if not os.environ.get("TRADEOFF_TEST_CACHE_DIR"):
        assert build_cache_dir().resolve().is_relative_to(temp)
    assert not build_cache_dir().resolve().is_relative_to(Path.home() / ".cache")


def test_each_test_gets_its_own_runs_folder(isolated: Path, tmp_path_factory) -> None:
    assert isolated.name.startswith("isolated") and runs_dir() == isolated / "runs"
