"""Every Prefect task of the pipeline: thin wrappers that give the units of work retries, timeouts and run names."""

from __future__ import annotations

import json
import logging
import math
from datetime import datetime, timezone
from functools import partial
from pathlib import Path
from typing import Callable, Generator

from prefect import get_run_logger, task
from prefect.artifacts import create_link_artifact, create_markdown_artifact, create_table_artifact
from prefect.cache_policies import NONE
from prefect.exceptions import MissingContextError
from prefect.tasks import exponential_backoff

from tasks.core.config import RunConfig, Variant
from tasks.core.lifecycle import raise_if_stopping
from tasks.core.percentiles import look_confidence
from tasks.core.runinfo import RunPaths, host_info
from tasks.decision.extend import StepExtension
from tasks.decision.gate_plan import plan_config, plan_json, plan_lines
from tasks.decision.load_search import judge, search_load
from tasks.decision.ranking import RankExtension
from tasks.decision.suite_gate import AdaptiveGate
from tasks.engines.base import Artifact, Endpoint, EngineUnavailable, engine_for
from tasks.engines.launcher import PortInUse, ServerStartTimeout
from tasks.orchestration.folder_gate import gate_results
from tasks.orchestration.gpu import gpu_host
from tasks.orchestration.results import ResultsLocation
from tasks.orchestration.variant_bookkeeping import error_line
from tasks.perf.perf_run import measure_into_rounds, variant_target
from tasks.perf.rounds import Round, interleave
from tasks.perf.sweep import drain
from tasks.quality.suite_loop import run_suites
from tasks.report.html import write_html
from tasks.report.notify import recommendation_change, regressions, run_message, send
from tasks.report.recommend import recommendation_markdown
from tasks.report.text import format_report, quality_unit, takeaways, tradeoff_frame
from warehouse.contract import write_table
from warehouse.db import load_run, open_warehouse
from warehouse.gx_gate import ValidationReport


def run_logger() -> logging.Logger | logging.LoggerAdapter:
    """The Prefect run's logger, or the module's own where a task's function runs outside a flow (its `.fn`)."""
    try:
        return get_run_logger()
    except MissingContextError:
        return logging.getLogger(__name__)


@task(name="build-variant", retries=1, retry_delay_seconds=2, cache_policy=NONE)
def build_variant(cfg: RunConfig, variant: Variant, cache_dir: Path) -> Artifact:
    """Build (or reuse from the content-addressed cache) the artifact a variant's server loads."""
    return engine_for(variant.engine).build(variant, cfg.models[variant.model], cache_dir)


def decision_hooks(cfg: RunConfig) -> tuple:
    """What the decision adds to a perf run: its load search and its extension of steps that lack requests."""
    d = cfg.decision
    search = partial(search_load, cfg) if d.search is not None else None
    extension = StepExtension(partial(judge, cfg=cfg), d.extend.looks, d.extend.budget_s) if d.extend else None
    return search, extension


@task(name="perf-sweep", cache_policy=NONE)
def measure_perf(
    cfg: RunConfig, run_id: str, variant: Variant, artifact: Artifact, base_url: str, results_dir: Path
) -> dict:
    """The whole perf sweep; writes perf_requests and perf_power after each (step, repeat), perf_summary at the end."""
    return drain(variant_perf_rounds(cfg, run_id, variant, artifact, base_url, results_dir))


@task(name="perf-rounds", cache_policy=NONE)
def measure_perf_rounds(
    cfg: RunConfig, run_id: str, served: list[tuple[Variant, Artifact, str]], results_dir: Path
) -> dict[str, dict | str]:
    """Every served variant's perf sweep in interleaved rounds (perf.interleave, tasks.perf.rounds), each written
    as measure_perf writes it; variant -> its perf summary, or the error line its sweep ended with."""
    names = [v.name for v, _, _ in served]
    log = run_logger()
    settle = rank_extension(cfg, log.info)
    runs = {
        v.name: variant_perf_rounds(
            cfg, run_id, v, art, url, results_dir, [n for n in names if n != v.name], settle is not None
        )
        for v, art, url in served
    }
    log.info("perf in interleaved rounds: %s, each round's order reversed the next", ", ".join(runs))
    return {name: out if isinstance(out, dict) else error_line(out) for name, out in interleave(runs, settle).items()}


def rank_extension(cfg: RunConfig, log: Callable[[str], None] | None = None) -> RankExtension | None:
    """decision.extend.rank_budget_s: more interleaved rounds while the variants' ranking is unsettled; None: off."""
    d = cfg.decision
    if d.extend is None or not d.extend.rank_budget_s:
        return None
    return RankExtension(
        partial(judge, cfg=cfg),
        d.optimise,
        d.extend.looks,
        look_confidence(d.confidence, d.extend.looks),
        d.tie_tolerance_pct,
        d.extend.rank_budget_s,
        math.ceil(cfg.perf.repeats / 2),
        log=log,
    )


def variant_perf_rounds(
    cfg: RunConfig,
    run_id: str,
    variant: Variant,
    artifact: Artifact,
    base_url: str,
    results_dir: Path,
    interleaved_with: list[str] | None = None,
    rank: bool = False,
) -> Generator[Round, int | None, dict]:
    """A variant's perf sweep as a generator of rounds (its endpoint read at the first); `rank`: a RankExtension
    settles the rounds' ranking (its closed-loop steps' intervals at the looks' corrected level)."""
    search, extension = decision_hooks(cfg)
    target = variant_target(variant, artifact, base_url, cfg.models[variant.model])
    logger = run_logger()
    # in interleaved rounds the variants' lines mix: each names its own
    log = partial(logger.warning, f"{variant.name}: %s") if interleaved_with else logger.warning
    return (
        yield from measure_into_rounds(
            cfg.perf, target, run_id, variant.name, results_dir, search, log, extension, interleaved_with, rank
        )
    )


@task(name="quality-suites", cache_policy=NONE)
def measure_quality(
    cfg: RunConfig,
    run_id: str,
    variant: Variant,
    artifact: Artifact,
    ref_artifact: Artifact | None,
    base_url: str,
    work_dir: Path,
    results_dir: Path,
) -> dict:
    """Every configured suite against the variant, then its deltas against the reference (parts written as they
    come)."""
    gate = AdaptiveGate(cfg)
    return run_suites(cfg, run_id, variant, artifact, ref_artifact, base_url, work_dir, results_dir, gate, run_logger())


@task(name="write-run-row", cache_policy=NONE)
@task(name="state-gate-plan", cache_policy=NONE)
def state_gate_plan(cfg: RunConfig) -> str:
    """The quality gate's power before the evidence (tasks/decision/gate_plan.py), logged first; its JSON for the
    run row. A gate that cannot pass an equal variant is a warning naming the fix, not a stop."""
    plans = plan_config(cfg, cfg.warehouse_path())
    log = run_logger()
    for line in plan_lines(plans):
        (log.warning if line.startswith("warning:") else log.info)(line)
    return plan_json(plans)


def write_run_row(
    cfg: RunConfig, paths: RunPaths, started: datetime, status: str, error: str | None, gate_plan: str | None = None
) -> None:
    row = {
        "run_id": paths.run_id,
        "config_name": cfg.name,
        "started_at": started,
        "finished_at": datetime.now(timezone.utc),
        "status": status,
        **host_info(),
        "config_json": cfg.model_dump_json(),
        "reference_variant": cfg.reference.name,
        "primary_quality_metric": cfg.quality.primary,
        "error": error,
        "gate_plan_json": gate_plan,
    }
    write_table(paths.results, "runs", "run", [row])


@task(name="validate-results", cache_policy=NONE)
def validate_results_task(cfg: RunConfig, rows: list[dict], paths: RunPaths) -> ValidationReport:
    """The GX gate of the run folder, with the row counts the config implies for these variant rows."""
    return gate_results(cfg, rows, paths.results)


@task(name="load-warehouse", cache_policy=NONE, retries=2, retry_delay_seconds=[2, 10], timeout_seconds=900)
def load_results_task(paths: RunPaths, warehouse: Path, only: list[str] | None = None) -> dict[str, int]:
    try:
        return load_run(paths.root, warehouse, only=only)
    except Exception:
        raise_if_stopping()  # DuckDB turns Ctrl-C into RuntimeError('Query interrupted'): a stop, not a load to retry
        raise


@task(name="report", cache_policy=NONE)
def report_task(warehouse: Path, paths: RunPaths) -> str:
    """Text and HTML reports, plus the trade-off table, takeaways, the recommendation and a link to the HTML as
    Prefect artifacts."""
    run_id = paths.run_id
    con = open_warehouse(warehouse, read_only=True)
    try:
        df = tradeoff_frame(con, run_id)
        text = format_report(con, run_id)
        metric = df["quality_metric"].dropna().iloc[0] if df["quality_metric"].notna().any() else None
        lines = takeaways(df, quality_unit(con, run_id, metric))
        html_path = write_html(con, run_id, paths.report_html).resolve()
        decision = recommendation_markdown(con, run_id)
    finally:
        con.close()
    create_markdown_artifact(
        key="tradeoff-recommendation",
        markdown=decision,
        description=f"Which variant to ship of run {run_id} (v_recommendation)",
    )
    create_link_artifact(
        key="tradeoff-report",
        link=html_path.as_uri(),
        link_text=f"HTML report of {run_id}",
        description="Self-contained page: tables and plots (open on the host that ran the flow)",
    )
    create_table_artifact(
        key="tradeoff-table",
        table=json.loads(df.to_json(orient="records", date_format="iso")),
        description=f"Trade-off table of run {run_id}",
    )
    create_markdown_artifact(
        key="tradeoff-takeaways",
        markdown="\n".join(f"- {t}" for t in lines) or "(no takeaways)",
        description=f"Takeaways of run {run_id} against the reference",
    )
    return text


@task(name="notify-outcome", cache_policy=NONE)
def notify_outcome(cfg: RunConfig, warehouse: Path, run_id: str, status: str, rows: list[dict]) -> str | None:
    """Tell the notify block about a failed or partial run, regressions found with this run (v_change_points) and a
    changed
    recommendation (v_recommendation)."""
    if cfg.notify is None:
        return None
    failed = [r["variant"] for r in rows if r["status"] == "failed"]
    errors = {r["variant"]: str(r["error"] or "failed") for r in rows if r["status"] == "failed"}
    flagged = regressions(warehouse, run_id) if cfg.notify.on_regression else []
    changed = recommendation_change(warehouse, run_id) if cfg.notify.on_recommendation_change else None
    message = run_message(
        run_id, status, failed, errors, flagged, cfg.notify.on_partial, cfg.notify.on_regression, changed
    )
    if message is None:
        return None
    send(cfg.notify.block, *message)
    return message[0]


@task(name="check-engine", cache_policy=NONE)
def check_engine(variant: Variant) -> None:
    """Fail the variant, naming the package, when this host cannot run its engine."""
    problem = engine_for(variant.engine).missing_dependency()
    if problem:
        raise EngineUnavailable(f"{problem} (host {gpu_host()})")


def _transient(task, task_run, state) -> bool:
    """Retry a server start that timed out or lost a port race, not one the engine rejected (bad arguments)."""
    try:
        state.result()
    except (ServerStartTimeout, PortInUse):
        return True
    except Exception:  # noqa: BLE001 - anything else is not a server start to retry
        return False
    return False


@task(
    name="start-server",
    cache_policy=NONE,
    retries=2,
    retry_delay_seconds=exponential_backoff(backoff_factor=5),
    retry_condition_fn=_transient,
)
def start_endpoint(cfg: RunConfig, variant: Variant, artifact: Artifact, log_path: Path) -> Endpoint:
    """Serve the variant (its engine's server on a free loopback port, or a hosted endpoint) and wait until it
    answers."""
    endpoint = engine_for(variant.engine).serve(
        artifact, variant, cfg.models[variant.model], log_path, cfg.server_start_timeout_s
    )
    where = f"pid {endpoint.server.pid}, up in {endpoint.startup_s:.1f} s" if endpoint.server else "hosted"
    get_run_logger().info("%s serving at %s (%s)", variant.name, endpoint.base_url, where)
    return endpoint


@task(name="publish-results", cache_policy=NONE, retries=3, retry_delay_seconds=[2, 10, 30], timeout_seconds=600)
def publish_results(location: ResultsLocation, paths: RunPaths, variant: str) -> int:
    """Copy the variant's result parts and server log to the results location (variant row last)."""
    return location.publish(paths, variant)
