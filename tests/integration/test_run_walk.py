"""A walk of `tradeoff run CONFIG` parses its input at the edge, once (issue 27): the config file is read and
validated once, the run id checked once, the preflight run once, and the nightly and its in-process variants
are handed the checked config instead of reading it again."""

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
import warehouse.contract
from tasks.core.config import RunConfig

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
    # The run id given to `tradeoff run`, checked once where it enters (the CLI), not again by the nightly; the
    # helpers that build a path from it (make_run_paths, ResultsLocation) still guard every path they build.
    assert (
        sum(
            n
            for k, n in counts.items()
            if k.startswith(
                (
                    "valid_run_id@flows.cli",
                    "valid_run_id@flows.nightly.",
                    "valid_run_id@tasks.orchestration.run_bookkeeping",
                )
            )
        )
        == 1
    )
    where = "flows.cli.cmd_run" if entry == "cli" else "tasks.orchestration.run_bookkeeping.check_run"
    assert counts[f"load_config_file@{where}"] == 1  # where the config entered
