"""Fault injection on loads and the warehouse (issue 18, items 7, 8, 8b, 8c): one case per test, its fault in one line.

Real parts: run folders of real Parquet, a real DuckDB file, the real GX gate, child processes
that hold locks, die, or write under a file-size limit.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from flows.cli import main
from tests.helpers import ROOT
from tests.helpers.gate_tables import NIGHT_CONFIG, drop_request, night, set_inf_ttft
from tests.helpers.queries import per_run
from warehouse.contract import SCHEMAS
from warehouse.db import WarehouseError, load_run


def big_requests(run_dir: Path, n: int) -> None:
    """Add a part of `n` requests with random chunk timings (incompressible) to the run."""
    rng = np.random.default_rng(0)
    schema = SCHEMAS["perf_requests"]
    run_id = run_dir.name
    offsets = pa.ListArray.from_arrays(
        pa.array(np.arange(0, 32 * n + 1, 32, dtype=np.int32)), pa.array(rng.random(32 * n, dtype=np.float32))
    )
    cols = {
        "run_id": pa.array([run_id] * n),
        "variant": pa.array(["big"] * n),
        "scenario": pa.array(["c1"] * n),
        "concurrency": pa.array(np.ones(n, np.int32)),
        "request_index": pa.array(np.arange(n, dtype=np.int32)),
        "status": pa.array(["ok"] * n),
        "chunk_offsets_ms": offsets,
    }
    table = pa.table({f.name: cols.get(f.name, pa.nulls(n, f.type)) for f in schema}, schema=schema)
    pq.write_table(table, run_dir / "results" / "perf_requests" / "big.parquet")


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """(runs folder, warehouse file) under tmp_path, also as TRADEOFF_RUNS_DIR / TRADEOFF_WAREHOUSE."""
    runs, db = tmp_path / "runs", tmp_path / "wh" / "tradeoff.duckdb"
    monkeypatch.setenv("TRADEOFF_RUNS_DIR", str(runs))
    monkeypatch.setenv("TRADEOFF_WAREHOUSE", str(db))
    return runs, db


def two_nights(runs: Path, db: Path) -> dict[str, dict[str, int]]:
    """Nights n1 and n2 loaded; their rows per table."""
    for rid in ("n1", "n2"):
        load_run(night(runs, rid), db)
    before = per_run(db)
    assert set(before) == {"n1", "n2"} and before["n1"]["perf_requests"] == 16
    return before


def error_line(stderr: str) -> str:
    """The one `error...` line of a CLI run (library log lines aside), with no traceback."""
    lines = [line for line in stderr.splitlines() if line.startswith("error")]
    assert len(lines) == 1 and "Traceback" not in stderr, stderr
    return lines[0]


def holder(run_dir: Path, purpose: str = "nightly") -> subprocess.Popen:
    """A child process that takes the run folder's lock and sleeps, after printing 'ready'."""
    code = (
        f"import time; from tasks.orchestration.runlock import acquire; from pathlib import Path; "
        f"acquire(Path({str(run_dir)!r}), {purpose!r}); print('ready', flush=True); time.sleep(120)"
    )
    child = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    assert child.stdout.readline().strip() == "ready"
    return child


# --- item 7: `tradeoff load` runs the nightly's GX gate ---------------------------------------------------------


@pytest.mark.parametrize("corrupt", [set_inf_ttft, drop_request], ids=["inf-ttft", "row-count-below-config"])
def test_load_refuses_what_the_nightly_refuses(env, capsys, corrupt) -> None:
    """A run whose results fail the nightly's suites (a value, or a count its recorded config implies): refused, nothing
    loaded."""
    runs, db = env
    two_nights(runs, db)
    before = per_run(db)
    bad = night(runs, "bad", corrupt)
    assert main(["load", str(bad)]) == 1
    err = error_line(capsys.readouterr().err)
    assert "fails the nightly's validation" in err and "--skip-validation" in err, err
    assert per_run(db) == before
    assert json.loads((bad / "validation.json").read_text())["success"] is False


def test_load_passes_a_valid_run_through_the_gate(env, capsys) -> None:
    """A valid run (counts as its recorded config implies) passes the gate and loads."""
    runs, db = env
    assert main(["load", str(night(runs, "n1"))]) == 0
    assert "loaded: runs 1" in capsys.readouterr().out
    assert per_run(db)["n1"]["perf_requests"] == 16


def test_skip_validation_loads_and_says_so(env, capsys) -> None:
    """--skip-validation loads a run the gate refuses, and says so on stderr."""
    runs, db = env
    bad = night(runs, "bad", set_inf_ttft)
    assert main(["load", str(bad), "--skip-validation"]) == 0
    assert "--skip-validation" in capsys.readouterr().err
    assert per_run(db)["bad"]["perf_requests"] == 16


# --- item 8: one writer per run folder ---------------------------------------------------------------------------


def test_second_writer_refused_naming_the_holder(env, capsys) -> None:
    """`tradeoff load` while another process holds the run folder: one line naming its PID and host; nothing loaded."""
    import platform

    runs, db = env
    run_dir = night(runs, "n1")
    child = holder(run_dir)
    try:
        assert main(["load", str(run_dir)]) == 1
    finally:
        child.kill()
        child.wait()
    err = error_line(capsys.readouterr().err)
    assert f"PID {child.pid}" in err and platform.node() in err, err
    assert not db.exists()


def test_nightly_refused_while_the_run_folder_is_held(env, tmp_path, prefect_harness) -> None:
    """A nightly re-run of a run id another process holds stops at the lock, before it touches the folder."""
    from flows.nightly import nightly
    from tasks.orchestration.runlock import RunLocked

    runs, _ = env
    run_dir = runs / "held"
    run_dir.mkdir(parents=True)
    config = tmp_path / "demo.yaml"
    config.write_text(yaml.safe_dump(NIGHT_CONFIG))
    child = holder(run_dir, "load")
    try:
        with pytest.raises(RunLocked, match=f"PID {child.pid} on host"):
            nightly(config=str(config), run_id="held")
    finally:
        child.kill()
        child.wait()
    assert not (run_dir / "config.yaml").exists()


def test_stale_lock_of_a_dead_process_taken_over(env, capsys) -> None:
    """A lock left by a process killed with SIGKILL (same host) is taken over with a warning naming it."""
    runs, db = env
    run_dir = night(runs, "n1")
    child = holder(run_dir)
    child.send_signal(signal.SIGKILL)
    child.wait()
    assert (run_dir / ".lock").exists()
    assert main(["load", str(run_dir)]) == 0
    err = capsys.readouterr().err
    assert f"taking over the lock of PID {child.pid}" in err, err
    assert not (run_dir / ".lock").exists()
    assert per_run(db)["n1"]["runs"] == 1


def test_lock_of_another_host_not_taken_over(env, capsys) -> None:
    """A lock naming another host cannot be checked from here: refused, naming that host and the file to delete."""
    runs, db = env
    run_dir = night(runs, "n1")
    (run_dir / ".lock").write_text(
        json.dumps(
            {
                "pid": 4242,
                "host": "gpu-node-7",
                "purpose": "nightly",
                "since": "2026-01-01T00:00:00+00:00",
                "proc_start": 1,
            }
        )
    )
    assert main(["load", str(run_dir)]) == 1
    err = error_line(capsys.readouterr().err)
    assert "PID 4242 on host gpu-node-7" in err and str(run_dir / ".lock") in err, err
    assert not db.exists()


# --- item 8b: the warehouse survives a full disk or a crash mid-load, and can be rebuilt --------------------------

_LIMITED_LOAD = """
import resource, signal, sys
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG instead of killing us
resource.setrlimit(resource.RLIMIT_FSIZE, ({limit}, {limit}))
from warehouse.db import WarehouseError, load_run
try:
    load_run({run_dir!r}, {db!r})
    print("loaded")
except Exception as e:
    print("failed:", str(e).splitlines()[0])
"""


@pytest.mark.parametrize("limit", ["64KiB", "copy-fits"])
def test_file_size_limit_mid_load_keeps_previous_nights(env, limit) -> None:
    """A load under RLIMIT_FSIZE (64 KiB as in issue 18, or just room for the copy) fails; n1 and n2 stay intact and
    queryable."""
    runs, db = env
    before = two_nights(runs, db)
    n3 = night(runs, "n3")
    big_requests(n3, 200_000)
    size = db.stat().st_size
    cap = 64 * 1024 if limit == "64KiB" else size + 1024 * 1024
    code = _LIMITED_LOAD.format(limit=cap, run_dir=str(n3), db=str(db))
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.stdout.startswith("failed:") and "nothing loaded" in out.stdout, (out.stdout, out.stderr[-2000:])
    assert per_run(db) == before
    with duckdb.connect(str(db), read_only=True) as con:
        assert con.execute("select count(*) from v_tradeoff").fetchall()[0][0] == 4
    assert not [p.name for p in db.parent.iterdir() if ".tmp" in p.name]
    assert load_run(n3, db)["perf_requests"] == 16 + 200_000  # and the next load, with room, goes through


def test_crash_mid_load_keeps_previous_nights(env) -> None:
    """A load killed with SIGKILL while it writes: n1 and n2 intact; the next load removes its orphaned copy."""
    runs, db = env
    before = two_nights(runs, db)
    n3 = night(runs, "n3")
    big_requests(n3, 400_000)
    code = f"from warehouse.db import load_run; load_run({str(n3)!r}, {str(db)!r})"
    child = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and child.poll() is None:
            writing = [p for p in db.parent.iterdir() if ".tmp" in p.name or p.name.endswith(".wal")]
            if writing and sum(p.stat().st_size for p in writing) > db.stat().st_size + 1024 * 1024:
                break  # the load has written a MiB beyond the copy
            time.sleep(0.02)
        assert child.poll() is None, "the load ended before it could be killed"
        child.send_signal(signal.SIGKILL)
    finally:
        child.kill()
        child.wait()
    assert per_run(db) == before
    load_run(night(runs, "n4"), db)
    assert set(per_run(db)) == {"n1", "n2", "n4"}
    assert not [p.name for p in db.parent.iterdir() if ".tmp" in p.name]


def test_too_little_free_space_refused_before_the_load(env, monkeypatch) -> None:
    """The disk reports less free space than the copy plus the Parquet: refused in one line, nothing written."""
    import shutil as real_shutil

    from warehouse import swap

    runs, db = env
    before = two_nights(runs, db)
    usage = real_shutil.disk_usage(db.parent)
    monkeypatch.setattr(swap.shutil, "disk_usage", lambda p: usage._replace(free=db.stat().st_size // 2))
    mtime = db.stat().st_mtime_ns
    with pytest.raises(WarehouseError) as e:
        load_run(night(runs, "n3"), db)
    assert "not enough disk space" in str(e.value) and "\n" not in str(e.value)
    assert per_run(db) == before and db.stat().st_mtime_ns == mtime
    assert sorted(p.name for p in db.parent.iterdir() if not p.name.startswith(".")) == [db.name]


@pytest.mark.parametrize("still_open", [True, False], ids=["writer-still-open", "writer-closed"])
def test_another_duckdb_writer_during_the_load_is_not_overwritten(env, still_open) -> None:
    """A DuckDB process writes the warehouse while a load fills its copy: the swap is refused and its write kept."""
    from warehouse.swap import writable_copy, writer_lock

    runs, db = env
    two_nights(runs, db)
    write = (
        f"import duckdb, time; c = duckdb.connect({str(db)!r}); "
        f"c.execute(\"update runs set config_name = 'edited' where run_id = 'n1'\"); "
        + ("print('ready', flush=True); time.sleep(120)" if still_open else "c.close(); print('ready', flush=True)")
    )
    child = None
    with pytest.raises(WarehouseError, match="nothing loaded") as e:
        with writer_lock(db), writable_copy(db, 0) as copy:
            assert copy.exists()
            child = subprocess.Popen([sys.executable, "-c", write], stdout=subprocess.PIPE, text=True)
            assert child.stdout.readline().strip() == "ready"
    child.kill()
    child.wait()
    assert (f"open for writing by process {child.pid}" if still_open else "was written by another process") in str(
        e.value
    )
    with duckdb.connect(str(db), read_only=True) as con:
        assert con.execute("select config_name from runs where run_id = 'n1'").fetchall() == [("edited",)]


def _flip(db: Path, at: int) -> None:
    with open(db, "r+b") as f:
        f.seek(at)
        data = f.read(16)
        f.seek(at)
        f.write(bytes(b ^ 0xFF for b in data))


@pytest.mark.parametrize("damage", ["checksum", "not-duckdb"])
def test_damaged_file_names_the_rebuild_command(env, capsys, damage) -> None:
    """A warehouse whose header block fails its checksum, or that is no DuckDB file: one line naming `tradeoff warehouse
    rebuild`."""
    runs, db = env
    two_nights(runs, db)
    if damage == "checksum":
        _flip(db, 4096 + 100)  # inside the second header block, as a torn checkpoint leaves it
    else:
        db.write_bytes(b"\x00" * 64 + b"not a database" * 100)
    t0 = time.monotonic()
    assert main(["report"]) == 1
    err = error_line(capsys.readouterr().err)
    assert "`tradeoff warehouse rebuild`" in err, err
    assert time.monotonic() - t0 < 5  # not mistaken for a lock held by another process and waited on
    assert main(["load", str(night(runs, "n3"))]) == 1
    assert "`tradeoff warehouse rebuild`" in error_line(capsys.readouterr().err)


def test_damaged_block_met_by_a_query_names_the_rebuild_command(env, capsys) -> None:
    """A data block damaged mid-file opens fine but fails the query that reads it: the error names the rebuild too."""
    runs, db = env
    n1 = night(runs, "n1")
    big_requests(n1, 100_000)  # most of the file is perf_requests data
    load_run(n1, db)
    _flip(db, db.stat().st_size // 2)
    assert main(["sql", "select sum(len(chunk_offsets_ms)) from perf_requests"]) == 1
    err = error_line(capsys.readouterr().err)
    assert "Corrupt database file" in err and "`tradeoff warehouse rebuild`" in err, err


def test_rebuild_from_the_run_folders(env, capsys) -> None:
    """After the file is damaged, `tradeoff warehouse rebuild` restores every night through the gate; the old file is
    kept."""
    runs, db = env
    before = two_nights(runs, db)
    night(runs, "n3", set_inf_ttft)  # the nightly refused it: only its runs and variants rows were loaded
    held = night(runs, "n4")
    _flip(db, 4096 + 100)
    child = holder(held)  # a nightly still writing n4: skipped, not read half-written
    try:
        code = main(["warehouse", "rebuild", "--runs-dir", str(runs)])
    finally:
        child.kill()
        child.wait()
    out = capsys.readouterr().out
    assert code == 1 and "2 runs loaded, 1 failed validation" in out and "1 skipped" in out, out
    assert f"n4: skipped: run n4 is being written by PID {child.pid}" in out
    after = per_run(db)
    assert {k: after[k] for k in ("n1", "n2")} == before
    assert after["n3"] == {"runs": 1, "variants": 2} and "n4" not in after
    assert db.with_name(db.name + ".before-rebuild").exists()
    assert main(["report", "--run", "n1"]) == 0


def test_rebuild_from_an_empty_folder_changes_nothing(env, tmp_path, capsys) -> None:
    """A rebuild pointed at a folder without run folders (a typo) refuses instead of swapping in an empty warehouse."""
    runs, db = env
    before = two_nights(runs, db)
    (tmp_path / "empty").mkdir()
    assert main(["warehouse", "rebuild", "--runs-dir", str(tmp_path / "empty")]) == 1
    assert "nothing rebuilt" in error_line(capsys.readouterr().err)
    assert per_run(db) == before and not db.with_name(db.name + ".before-rebuild").exists()


def test_rebuild_from_a_results_url(env, tmp_path, capsys) -> None:
    """`--results-url` fetches every run folder from the location and rebuilds from them; names that are no run id are
    skipped."""
    _, db = env
    location = tmp_path / "shared"
    for rid in ("n1", "n2"):
        night(location, rid)
    (location / "-rf").mkdir()
    assert main(["warehouse", "rebuild", "--results-url", location.as_uri()]) == 0
    out = capsys.readouterr().out
    assert "2 runs loaded" in out and "'-rf': skipped: not a run id" in out, out
    assert set(per_run(db)) == {"n1", "n2"}
    assert not [p.name for p in db.parent.iterdir() if "fetched" in p.name]


# --- item 8c: `tradeoff sql` without external access ----------------------------------------------------------------


@pytest.mark.parametrize(
    "query",
    [
        "copy (select * from runs) to '{out}'",
        "select * from read_csv('{secret}')",
        "install httpfs",
        "attach '{other}' as other",
    ],
)
def test_sql_cannot_touch_other_files(env, tmp_path, capsys, query) -> None:
    """`tradeoff sql` refuses COPY ... TO, reading other files, extension installs and ATTACH; no file written."""
    runs, db = env
    two_nights(runs, db)
    out, secret = tmp_path / "x.csv", tmp_path / "secret.csv"
    secret.write_text("key\nhunter2\n")
    other = tmp_path / "other.duckdb"
    duckdb.connect(str(other)).close()
    assert main(["sql", query.format(out=out, secret=secret, other=other)]) == 1
    captured = capsys.readouterr()
    assert "hunter2" not in captured.out and "disabled by configuration" in error_line(captured.err)
    assert not out.exists()


def test_sql_cannot_turn_external_access_back_on(env, capsys) -> None:
    """The setting is locked: a query cannot re-enable external access or change any other setting."""
    runs, db = env
    two_nights(runs, db)
    assert main(["sql", "set allowed_directories = ['/']"]) == 1
    assert "locked" in error_line(capsys.readouterr().err)


def test_sql_allow_external_permits_copy(env, tmp_path) -> None:
    """With --allow-external the expert's COPY ... TO writes the file."""
    runs, db = env
    two_nights(runs, db)
    out = tmp_path / "x.csv"
    assert main(["sql", f"copy (select run_id from runs order by 1) to '{out}'", "--allow-external"]) == 0
    assert out.read_text().split() == ["run_id", "n1", "n2"]


def test_export_keeps_working(env, tmp_path) -> None:
    """`tradeoff export` still writes a view to CSV and Parquet."""
    runs, db = env
    two_nights(runs, db)
    assert main(["export", "v_tradeoff", "-o", str(tmp_path / "t.csv")]) == 0
    assert main(["export", "select run_id from runs", "-o", str(tmp_path / "r.parquet")]) == 0
    assert len((tmp_path / "t.csv").read_text().splitlines()) == 1 + 4
    assert sorted(pq.read_table(tmp_path / "r.parquet").column("run_id").to_pylist()) == ["n1", "n2"]
