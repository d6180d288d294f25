"""A walk of `tradeoff run CONFIG` parses its input at the edge, once (issue 27): the config file is read and
validated once, the run id checked once, the preflight run once, and the nightly and its in-process variants
are handed the checked config instead of reading it again. Each step of the walk (and the gate of `tradeoff
load`) reads each result table of the run folder at most once."""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

import pytest
import yaml

# The walk's modules, imported before their functions are counted (the CLI imports them lazily, by name).
import flows.cli
import flows.nightly
import flows.variant
import tasks.core.config
import tasks.core.runinfo
import tasks.loader
import tasks.orchestration.run_bookkeeping
import tasks.orchestration.warehouse_ops
import warehouse.contract
from tasks.core.config import RunConfig
from warehouse.contract import TABLES

COUNTED = {  # counted name -> (module that defines it, function)
    "read_config": tasks.core.config,
    "load_config": tasks.loader,
    "load_config_file": tasks.loader,
    "parse_config": tasks.loader,
    "valid_run_id": tasks.core.runinfo,
    "preflight": tasks.orchestration.run_bookkeeping,
    "with_work_pool": tasks.orchestration.run_bookkeeping,
    "read_table": warehouse.contract,
}

# The steps of a walk that read result tables (the function whose call is the step -> the step's name): a read
# is the step's whose function is its nearest caller of these. Between two steps the folder's tables change
# (variants write theirs, the nightly its failed variants' and its run's rows); within a step they do not.
STEPS = {
    "first_started_at": "resume",  # what an earlier attempt left: its start time (before the results are fetched)
    "measured_variants": "resume",  # ... and its completed variants (after)
    "variant_flow": "variant",  # one per variant: `variant <name>`
    "collect_rows": "collect",  # every variant's row once all have run
    "validate_results_task": "gate",  # the nightly's GX gate: expected counts and suites
    "load_results_task": "load",  # DuckDB reads the Parquet parts itself: no read_table
    "report_task": "report",
    "gate_run": "load-gate",  # `tradeoff load`: the recorded config, expected counts and suites
}


def step_of(frame) -> str:
    """The step a call belongs to: its nearest caller named in STEPS (a variant's with its name), else '?'."""
    while frame is not None:
        step = STEPS.get(frame.f_code.co_name)
        if step == "variant":
            return f"variant {frame.f_locals.get('variant')}"
        if step is not None:
            return step
        frame = frame.f_back
    return "?"


def count_calls(monkeypatch: pytest.MonkeyPatch) -> Counter:
    """Count every call of the functions above, under whichever module name they were imported, and every
    validation of a RunConfig (`RunConfig.model_validate`); `read_table` is counted per table read."""
    counts: Counter = Counter()
    for name, home in COUNTED.items():
        fn = getattr(home, name, None)
        if fn is None:  # not in this tree (load_config_file is new with issue 27)
            continue

        for mod in list(sys.modules.values()):
            if getattr(mod, name, None) is fn:

                def counted(*args, _fn=fn, _name=name, **kwargs):
                    caller = sys._getframe(1)
                    counts[_name] += 1
                    counts[f"{_name}@{caller.f_globals['__name__']}.{caller.f_code.co_name}"] += 1
                    if _name == "read_table":
                        counts[f"read_table:{args[1]}"] += 1
                        counts[f"read_table[{step_of(caller)}]:{args[1]}"] += 1
                    return _fn(*args, **kwargs)

                monkeypatch.setattr(mod, name, counted)
    validate = RunConfig.model_validate.__func__

    def model_validate(cls, *args, **kwargs):
        counts["RunConfig.model_validate"] += 1
        return validate(cls, *args, **kwargs)

    monkeypatch.setattr(RunConfig, "model_validate", classmethod(model_validate))
    return counts


@pytest.mark.parametrize("entry", ["cli", "deployment"])
def test_tradeoff_run_reads_and_validates_its_config_once(
    entry: str, prefect_harness, tmp_path: Path, monkeypatch, capsys
) -> None:
    """Two hosted variants (a stub server) measured in-process by a real `tradeoff run`: one read of the file,
    one validation, one preflight and one check of the run id for the whole walk, not one per step or variant.
    So too when the nightly flow is given the path as a deployment's flow run is (it checks its input itself)."""
    from instruments.slo_server import start_paced_stub

    srv, url = start_paced_stub(1.0)
    variant = {
        "model": "m",
        "engine": "openai-compatible",
        "quantization": "unknown",
        "engine_args": {"base_url": url, "model": "paced"},
    }
    config = tmp_path / "walk.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "name": "walk",
                "models": {"m": {"hub": "stub/paced"}},
                "variants": [{"name": "ref", "reference": True, **variant}, {"name": "other", **variant}],
                "perf": {
                    "concurrency": [1],
                    "num_prompts": 2,
                    "warmup_requests": 0,
                    "input_len": 8,
                    "output_len": 2,
                    "idle_baseline_s": 0,
                },
                "warehouse": str(tmp_path / "wh.duckdb"),
            }
        )
    )
    for key, value in {
        "TRADEOFF_RUNS_DIR": str(tmp_path / "runs"),
        "TRADEOFF_WAREHOUSE": str(tmp_path / "wh.duckdb"),
        "TRADEOFF_CACHE_DIR": str(tmp_path / "builds"),
    }.items():
        monkeypatch.setenv(key, value)
    counts = count_calls(monkeypatch)
    try:
        if entry == "cli":
            code = flows.cli.main(["run", str(config), "--run-id", "walk1"])
        else:
            from tasks.orchestration.run_outcome import run_summary

            summary = run_summary(flows.nightly.nightly(config=str(config), run_id="walk1", return_state=True))
            print(f"run {summary['run_id']}: {summary['status']}")
            code = 0 if summary["status"] == "ok" else 1
    finally:
        srv.shutdown()
    out = capsys.readouterr()
    print(f"\ncalls in one `tradeoff run` walk: {dict(sorted(counts.items()))}")
    assert code == 0, out.err[-2000:]
    assert "run walk1: ok" in out.out
    assert counts["read_config"] == 1  # the file, read once
    assert counts["parse_config"] == 1 and counts["RunConfig.model_validate"] == 1  # validated once
    assert counts["load_config"] == 0  # nobody loads it again from its path
    assert counts["preflight"] == 1 and counts["with_work_pool"] == 1
    where = "flows.cli.cmd_run" if entry == "cli" else "tasks.orchestration.run_bookkeeping.check_run"
    assert counts[f"load_config_file@{where}"] == 1  # where the config entered
    # The run id, checked where it enters (the CLI or the nightly's parameters, each variant flow's parameters) and
    # where it becomes a path (make_run_paths: the nightly's folder and each variant's), not by every helper that
    # uses the folder or the results location.
    assert counts[f"valid_run_id@{where}"] == 1
    assert counts["valid_run_id@flows.variant.variant_flow"] == 2
    assert counts["valid_run_id@tasks.core.runinfo.make_run_paths"] == 3  # the nightly and its two variants
    assert counts["valid_run_id"] == 6
    assert_one_read_per_table_per_step(counts)
    if entry == "cli":  # `tradeoff load` of the same run folder: its gate reads each table once too
        run_dir = tmp_path / "runs" / "walk1"
        before = Counter(counts)
        loaded = tasks.orchestration.warehouse_ops.load_checked(run_dir, tmp_path / "wh.duckdb")
        assert loaded["variants"] == 2
        reads = reads_by_step(counts - before)
        assert reads == {("load-gate", t): 1 for t in TABLES}, reads
        assert counts["read_table"] - before["read_table"] == len(TABLES)


def reads_by_step(counts: Counter) -> dict[tuple[str, str], int]:
    """(step, table) -> read_table calls, from the counts of count_calls."""
    out = {}
    for key, n in counts.items():
        if isinstance(key, str) and key.startswith("read_table["):
            step, _, table = key[len("read_table[") :].partition("]:")
            out[(step, table)] = n
    return out


def assert_one_read_per_table_per_step(counts: Counter) -> None:
    """In a walk of one run: each step reads each table at most once, every read belongs to a step, and the steps
    read what they need (the gate every table, the resume the run's and variants' rows, the collection the
    variants', the second variant the reference's quality results)."""
    reads = reads_by_step(counts)
    assert sum(reads.values()) == counts["read_table"] > 0  # every read is attributed to one (step, table)
    assert not [k for k in reads if k[0] == "?"], reads  # ... and to a step of STEPS
    assert {k: n for k, n in reads.items() if n > 1} == {}, reads  # at most once per table per step
    assert {t for (step, t) in reads if step == "gate"} == set(TABLES)  # the gate read every table, once
    assert {t for (step, t) in reads if step == "resume"} == {"runs", "variants"}
    assert {t for (step, t) in reads if step == "collect"} == {"variants"}
    assert {t for (step, t) in reads if step == "variant other"} == {"quality_scores", "quality_samples"}
    assert {step for step, _ in reads} == {"resume", "variant other", "collect", "gate"}  # load/report: DuckDB
