"""The nightly's Great Expectations gate for any run folder, with the row counts its own config implies.

The nightly validates with the config it ran. `tradeoff load` and `tradeoff warehouse rebuild`
read that config back from the run folder (the `runs` row's `config_json`, else `config.yaml`)
and call the same suites with the same expected counts, so they refuse what the nightly refused.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import yaml
from pydantic import ValidationError

from tasks.core.config import PerfSpec, RunConfig, upgrade_recorded
from tasks.perf.jitter import needs_jitter_step
from tasks.perf.sweep import JITTER_STEP, SYNC_STEP, fixed_steps, max_step, step_prompts
from warehouse.contract import ResultTables
from warehouse.gx_gate import ValidationReport, validate_results


def expected_perf_rows(perf: PerfSpec, search: bool = False, extend: bool = False) -> dict[str, int | None]:
    """Rows one variant writes per perf table; None where the count depends on timing (a sweep's steps are
    known in advance, a time limit's requests are not, nor the steps of a sustainable-load `search`, nor the
    requests of an open-loop step that the over-saturation rule may stop early), on a file (a trace's) or on the
    evidence (`extend`: decision.extend adds repeats to a step whose claim lacks requests, and rounds while a
    ranking is unsettled)."""
    steps = fixed_steps(perf) + ([JITTER_STEP] if needs_jitter_step(perf) else [])
    sweep = [SYNC_STEP, max_step(perf)] if perf.sweep is not None else []
    n_steps = len(steps) + len(sweep) + (perf.sweep or 0)
    per_repeat = sum(step_prompts(perf, s) for s in steps + sweep) + (perf.sweep or 0) * (
        perf.warmup_requests + perf.stream_requests()
    )  # the sweep's rate steps
    requests = perf.repeats * per_repeat
    open_loop = bool(perf.rates) or perf.sweep is not None or perf.trace is not None
    stoppable = open_loop and perf.saturation.enabled
    return {
        "perf_requests": None if perf.max_duration_s or search or stoppable or perf.trace or extend else requests,
        "perf_summary": None if search else n_steps + (1 if perf.trace else 0),
        "perf_power": None,
    }


def expected_rows(cfg: RunConfig, rows: list[dict], tables: ResultTables) -> dict[str, int | None]:
    """Row counts the GX gate expects: full counts for ok variants, what was written (in `tables`) for failed ones."""
    ok = [r["variant"] for r in rows if r["status"] == "ok"]
    # None: the count depends on timing or on the evidence
    per_variant = expected_perf_rows(cfg.perf, cfg.decision.search is not None, cfg.decision.extend is not None)
    out: dict[str, int | None] = {
        "runs": 1,
        "variants": len(cfg.variants),
        "quality_samples": None,
        "quality_scores": None,
    }
    for table, n in per_variant.items():
        if n is None:
            out[table] = None
            continue
        written = tables[table]
        failed_rows = int((~written["variant"].isin(ok)).sum()) if len(written) else 0
        out[table] = n * len(ok) + failed_rows
    return out


@dataclass
class GateResult:
    report: ValidationReport
    note: str | None  # why row counts were not checked, when they were not

    def refusal(self, run_dir: Path) -> str:
        """One line: what failed, where the details are, and the expert's way around it."""
        failures = [f.replace("\n", " ") for f in self.report.failures()]
        return (
            f"run {run_dir.name} fails the nightly's validation ({len(failures)} failed "
            f"expectation{'s' if len(failures) != 1 else ''}, e.g. {failures[0] if failures else '?'}); "
            f"nothing loaded; details in {run_dir / 'validation.json'}; load it anyway with --skip-validation"
        )

    def bad_tables(self) -> list[str]:
        return [t.table for t in self.report.tables if not t.success]


def recorded_config(run_dir: Path, runs: pd.DataFrame) -> tuple[RunConfig | None, str | None]:
    """The config the run was measured with (its `runs` rows, else its config.yaml), or None and why not.

    Only the schema is checked (not model files or engines): the results are judged by what was
    configured then, wherever they are read now.
    """
    text = runs["config_json"].iloc[0] if len(runs) == 1 else None
    try:
        if isinstance(text, str) and text:
            return RunConfig.model_validate(upgrade_recorded(json.loads(text))), None
        path = run_dir / "config.yaml"
        if path.is_file():
            return RunConfig.model_validate(upgrade_recorded(yaml.safe_load(path.read_text()))), None
    except (ValidationError, ValueError, yaml.YAMLError) as err:
        first = str(err).splitlines()[0] if str(err) else type(err).__name__
        return None, f"run {run_dir.name}: its recorded config does not parse ({first}); row counts not checked"
    return None, f"run {run_dir.name}: no config recorded in the run folder; row counts not checked"


def gate_results(cfg: RunConfig, rows: list[dict], results_dir: Path) -> ValidationReport:
    """The nightly's gate: the counts its config implies for these variant rows, then the suites; each table of
    the folder read once for both."""
    tables = ResultTables(results_dir)
    return validate_results(tables, expected_rows(cfg, rows, tables))


def gate_run(run_dir: str | Path) -> GateResult:
    """Validate the run folder's results with the nightly's suites and counts; writes `validation.json` there.
    Each table of the folder is read once: for the recorded config, the counts and the suites."""
    run_dir = Path(run_dir)
    tables = ResultTables(run_dir / "results")
    cfg, note = recorded_config(run_dir, tables["runs"])
    expected: dict[str, int | None] = {}
    if cfg is not None:
        expected = expected_rows(cfg, tables["variants"].to_dict("records"), tables)
    return GateResult(validate_results(tables, expected), note)
