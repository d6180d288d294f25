"""Every Prefect task of the pipeline: thin wrappers that give the units of work retries, timeouts and run names."""

from __future__ import annotations

import json
import time
from dataclasses import asdict
from datetime import datetime, timezone
from pathlib import Path

from prefect import get_run_logger, task
from prefect.artifacts import create_link_artifact, create_markdown_artifact, create_table_artifact
from prefect.cache_policies import NONE
from prefect.tasks import exponential_backoff

from tasks.core.config import RunConfig, Variant
from tasks.core.names import contained
from tasks.core.runinfo import RunPaths, host_info
from tasks.engines.base import Artifact, Endpoint, EngineUnavailable, engine_for
from tasks.engines.launcher import PortInUse, ServerStartTimeout
from tasks.orchestration.gpu import gpu_host
from tasks.orchestration.results import ResultsLocation
from tasks.perf.failures import request_counts
from tasks.perf.run import measure_scenario, power_rows, request_row, summary_row
from tasks.perf.sweep import Scenario
from tasks.quality.base import Score, SuiteContext, SuiteResult, suite_for
from tasks.quality.failures import account_errors
from tasks.quality.run import write_quality_deltas
from tasks.report.html import write_html
from tasks.report.notify import recommendation_change, regressions, run_message, send
from tasks.report.recommend import recommendation_markdown
from tasks.report.text import format_report, quality_unit, takeaways, tradeoff_frame
from warehouse.contract import write_table
from warehouse.db import load_run, open_warehouse
from warehouse.gate import validate_results


@task(name="build-variant", retries=1, retry_delay_seconds=2, cache_policy=NONE)
def build_variant(cfg: RunConfig, variant: Variant, cache_dir: Path) -> Artifact:
    """Build (or reuse from the content-addressed cache) the artifact a variant's server loads."""
    return engine_for(variant.engine).build(variant, cfg.models[variant.model], cache_dir)


@task(name="perf-sweep", cache_policy=NONE)
def measure_perf(cfg: RunConfig, run_id: str, variant: Variant, artifact: Artifact, base_url: str,
                 results_dir: Path) -> dict:
    """The whole perf sweep; writes perf_requests and perf_power after each (step, repeat), perf_summary at the end."""

    def write_partial(scenarios: list[Scenario]) -> None:
        write_table(results_dir, "perf_requests", variant.name,
                    [request_row(run_id, variant.name, sc.step, sc.step.concurrency or cfg.perf.num_prompts, r)
                     for sc in scenarios for r in sc.records])
        write_table(results_dir, "perf_power", variant.name,
                    [row for sc in scenarios for run in sc.runs for row in power_rows(run_id, variant.name, run)])

    scenarios = measure_scenario(cfg, variant, artifact, base_url, on_scenario=write_partial)
    summaries = [summary_row(run_id, variant.name, sc.summary) for sc in scenarios]
    write_table(results_dir, "perf_summary", variant.name, summaries)
    return {"requests": sum(len(sc.records) for sc in scenarios), "scenarios": len(summaries),
            "output_throughput": [s["output_throughput"] for s in summaries],
            "mbu_pct": [s["mbu_pct"] for s in summaries if s["mbu_pct"] is not None],
            "request_counts": request_counts(scenarios)}  # the variant fails above perf.max_error_rate


@task(name="quality-suites", cache_policy=NONE)
def measure_quality(cfg: RunConfig, run_id: str, variant: Variant, artifact: Artifact, ref_artifact: Artifact | None,
                    base_url: str, work_dir: Path, results_dir: Path) -> dict:
    """Every configured suite against the variant, then its deltas against the reference.

    Writes quality_samples and quality_scores parts after each suite, and a quality_deltas part
    at the end. A suite that fails is recorded (metric `suite_failed`, with the error as its
    note) and the other suites go on.
    """
    samples: list[dict] = []
    scores: list[dict] = []
    engine = engine_for(variant.engine)
    in_process = engine.has_in_process_logits
    for spec in cfg.quality.suites:
        if spec.variants is not None and variant.name not in spec.variants:
            continue
        suite = suite_for(spec.name)
        ctx = SuiteContext(variant=variant.name, base_url=base_url, served_model=engine.served_model_name(variant),
                           artifact_path=artifact.path if in_process else None,
                           reference_artifact_path=ref_artifact.path if ref_artifact and in_process else None,
                           limit=spec.limit, seed=spec.seed, params=spec.params,
                           work_dir=contained(work_dir, work_dir / spec.key, "suite folder"),
                           n_ctx=cfg.models[variant.model].max_context, engine=variant.engine, artifact=artifact,
                           variant_spec=variant,
                           model_spec=cfg.models[variant.model], server_start_timeout_s=cfg.server_start_timeout_s,
                           request_timeout_s=cfg.perf.request_timeout_s)
        key = {"run_id": run_id, "variant": variant.name, "suite": spec.key}
        t0 = time.perf_counter()
        try:
            result, errored = account_errors(suite.run(ctx), cfg.quality.max_error_rate)
            get_run_logger().info("%s: suite %s, %d samples in %.1f s", variant.name, spec.key, len(result.samples),
                                  time.perf_counter() - t0)
            if errored:
                get_run_logger().error("%s: suite %s failed: %s", variant.name, spec.key, errored)
        except Exception as err:  # noqa: BLE001 - one suite's failure is recorded; the others still run
            get_run_logger().error("%s: suite %s failed: %s", variant.name, spec.key, err)
            result = SuiteResult(scores=[Score("suite_failed", 1.0, None, 1, "count", False, None,
                                               note=f"{type(err).__name__}: {err}".splitlines()[0][:300])])
        samples += [{**key, **s} for s in result.samples]
        scores += [{**key, "suite_version": suite.version, **asdict(s),
                    "is_primary": cfg.quality.primary == f"{spec.key}.{s.metric}"} for s in result.scores]
        write_table(results_dir, "quality_samples", variant.name, samples)
        write_table(results_dir, "quality_scores", variant.name, scores)
    deltas = write_quality_deltas(cfg, variant, samples, scores, results_dir)
    return {"samples": len(samples), "scores": {f"{s['suite']}.{s['metric']}": s["value"] for s in scores},
            "deltas": {f"{d['suite']}.{d['metric']}": d["verdict"] for d in deltas}}


@task(name="write-run-row", cache_policy=NONE)
def write_run_row(cfg: RunConfig, paths: RunPaths, started: datetime, status: str, error: str | None) -> None:
    row = {"run_id": paths.run_id, "config_name": cfg.name, "started_at": started,
           "finished_at": datetime.now(timezone.utc), "status": status, **host_info(),
           "config_json": cfg.model_dump_json(), "reference_variant": cfg.reference.name,
           "primary_quality_metric": cfg.quality.primary, "error": error}
    write_table(paths.results, "runs", "run", [row])


@task(name="validate-results", cache_policy=NONE)
def validate_results_task(paths: RunPaths, expected: dict[str, int | None]):

    return validate_results(paths.results, expected)


@task(name="load-warehouse", cache_policy=NONE, retries=2, retry_delay_seconds=[2, 10], timeout_seconds=900)
def load_results_task(paths: RunPaths, warehouse: Path, only: list[str] | None = None) -> dict[str, int]:

    return load_run(paths.root, warehouse, only=only)


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
        html_path = write_html(con, run_id, paths.root / "report.html").resolve()
        decision = recommendation_markdown(con, run_id)
    finally:
        con.close()
    create_markdown_artifact(key="tradeoff-recommendation", markdown=decision,
                             description=f"Which variant to ship of run {run_id} (v_recommendation)")
    create_link_artifact(key="tradeoff-report", link=html_path.as_uri(), link_text=f"HTML report of {run_id}",
                         description="Self-contained page: tables and plots (open on the host that ran the flow)")
    create_table_artifact(key="tradeoff-table", table=json.loads(df.to_json(orient="records", date_format="iso")),
                          description=f"Trade-off table of run {run_id}")
    create_markdown_artifact(key="tradeoff-takeaways", markdown="\n".join(f"- {t}" for t in lines) or "(no takeaways)",
                             description=f"Takeaways of run {run_id} against the reference")
    return text


@task(name="notify-outcome", cache_policy=NONE)
def notify_outcome(cfg: RunConfig, warehouse: Path, run_id: str, status: str, rows: list[dict]) -> str | None:
    """Tell the notify block about a failed or partial run, regressions flagged in v_regressions and a changed
    recommendation (v_recommendation)."""
    if cfg.notify is None:
        return None
    failed = [r["variant"] for r in rows if r["status"] == "failed"]
    errors = {r["variant"]: str(r["error"] or "failed") for r in rows if r["status"] == "failed"}
    flagged = regressions(warehouse, run_id) if cfg.notify.on_regression else []
    changed = recommendation_change(warehouse, run_id) if cfg.notify.on_recommendation_change else None
    message = run_message(run_id, status, failed, errors, flagged, cfg.notify.on_partial, cfg.notify.on_regression,
                          changed)
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


@task(name="start-server", cache_policy=NONE, retries=2, retry_delay_seconds=exponential_backoff(backoff_factor=5),
      retry_condition_fn=_transient)
def start_endpoint(cfg: RunConfig, variant: Variant, artifact: Artifact, log_path: Path) -> Endpoint:
    """Serve the variant (its engine's server on a free loopback port, or a hosted endpoint) and wait until it answers."""
    endpoint = engine_for(variant.engine).serve(artifact, variant, cfg.models[variant.model], log_path,
                                                cfg.server_start_timeout_s)
    where = f"pid {endpoint.server.pid}, up in {endpoint.startup_s:.1f} s" if endpoint.server else "hosted"
    get_run_logger().info("%s serving at %s (%s)", variant.name, endpoint.base_url, where)
    return endpoint


@task(name="publish-results", cache_policy=NONE, retries=3, retry_delay_seconds=[2, 10, 30], timeout_seconds=600)
def publish_results(location: ResultsLocation, paths: RunPaths, variant: str) -> int:
    """Copy the variant's result parts and server log to the results location (variant row last)."""
    return location.publish(paths, variant)
