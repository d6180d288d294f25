"""The nightly flow: measure every variant (in-process, or fanned out on a work pool) -> validate -> load -> report.

Each variant is one run of the `variant` flow (flows/variant.py): a subflow in this process, or
with `scale_out.work_pool` one flow run of the `variant` deployment per variant, spread over the
pool's workers (one per GPU host). Variants write their Parquet results to the results location;
this flow waits for all, fetches them and loads them into DuckDB in one step. One variant
failing is recorded as failed and the others go on. The reference goes first because the other
variants' quality deltas compare with its results.

Re-running a run id (`tradeoff run CONFIG --run-id ID`, or Prefect's retry of a nightly flow run)
skips the variants whose results are already complete and measures only the rest.
"""

from __future__ import annotations

import hashlib
import json
from datetime import datetime, timezone
from pathlib import Path

from prefect import flow, get_run_logger, task
from prefect.artifacts import create_link_artifact, create_markdown_artifact, create_table_artifact
from prefect.cache_policies import NONE
from prefect.runtime import flow_run

from flows.variant import variant_flow, variant_row
from tasks.config import ConfigError, RunConfig, Variant, load_config, parse_config, read_config
from tasks.failures import reported, run_outcome
from tasks.fanout import check_pool, submit_variant, wait_for_runs
from tasks.gate import expected_rows
from tasks.notify import deliver, load_block, recommendation_change, regressions, run_message, send
from tasks.results import ResultsLocation
from tasks.runinfo import RunPaths, host_info, make_run_paths, new_run_id, valid_run_id
from tasks.runlock import run_lock
from tasks.tables import read_table, write_table


def preflight(cfg: RunConfig) -> tuple[ResultsLocation, str | None]:
    """Fail before any variant starts: results location not writable, pool or deployment or notify block missing.

    Returns the results location and a warning (no worker online) or None.
    """
    location = ResultsLocation.resolve(cfg.scale_out.location())
    location.check_writable()
    warning = check_pool(cfg.scale_out) if cfg.scale_out.work_pool else None
    if cfg.notify:
        load_block(cfg.notify.block)
    return location, warning


def with_work_pool(cfg: RunConfig, work_pool: str | None) -> RunConfig:
    """The config with scale_out.work_pool overridden (a flow or CLI parameter); '' means in-process."""
    if work_pool is None:
        return cfg
    return cfg.model_copy(update={"scale_out": cfg.scale_out.model_copy(update={"work_pool": work_pool or None})})


def default_run_id(config_name: str) -> str:
    """A run id that a retry of the same Prefect flow run reproduces (so it resumes), else a fresh one."""
    run_uuid = flow_run.get_id()
    start = flow_run.get_scheduled_start_time()
    if not run_uuid or start is None:
        return new_run_id(config_name)
    return f"{start.astimezone(timezone.utc):%Y%m%dT%H%M%SZ}-{config_name}-{run_uuid.replace('-', '')[:4]}"


def config_fingerprint(cfg: RunConfig) -> str:
    """What makes two runs' results comparable: everything but where they run and who is told."""
    blob = cfg.model_dump_json(exclude={"scale_out", "notify", "warehouse"})
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def record_config(paths: RunPaths, config_text: str, cfg: RunConfig) -> None:
    """Keep the config (the file's text) in the run folder; refuse to resume a run folder that another
    config started."""
    mark = paths.root / "config.sha256"
    fingerprint = config_fingerprint(cfg)
    if mark.exists() and mark.read_text().strip() != fingerprint:
        raise ConfigError(f"run {paths.run_id}: its folder holds results of another config; re-run it with the config "
                          f"it was started with ({paths.root / 'config.yaml'}) or drop --run-id")
    (paths.root / "config.yaml").write_text(config_text)
    mark.write_text(fingerprint + "\n")


def first_started_at(paths: RunPaths, now: datetime) -> datetime:
    """A resumed run keeps the start time of its first attempt."""
    runs = read_table(paths.results, "runs")
    return runs["started_at"].iloc[0].to_pydatetime() if len(runs) else now


def measured_variants(location: ResultsLocation, paths: RunPaths) -> set[str]:
    """Variants of this run whose results are complete (an ok row) at the results location."""
    location.fetch(paths)
    rows = read_table(paths.results, "variants")
    return set(rows.loc[rows["status"] == "ok", "variant"])


def _ordered(cfg: RunConfig) -> list[Variant]:
    return [cfg.reference] + [v for v in cfg.variants if not v.reference]


def run_in_process(raw: dict, paths: RunPaths, todo: list[Variant], location: ResultsLocation) -> dict[str, str]:
    """Each variant as a subflow, one after another; variant -> what its flow run ended with."""
    ended: dict[str, str] = {}
    for v in todo:
        state = variant_flow(config=raw, variant=v.name, run_id=paths.run_id, results_url=location.url,
                             return_state=True)
        ended[v.name] = f"flow run {state.name}: {state.message or state.type.value}"
        report_variant(v.name, state.is_completed(), ended[v.name])
    return ended


def run_fanned_out(cfg: RunConfig, raw: dict, paths: RunPaths, todo: list[Variant],
                   location: ResultsLocation) -> dict[str, str]:
    """One flow run per variant on the work pool, the reference's first; variant -> what its flow run ended with."""
    spec = cfg.scale_out
    attempt = f"{flow_run.get_id() or 'local'}:{flow_run.get_run_count()}"
    ended: dict[str, str] = {}
    for wave in ([v for v in todo if v.reference], [v for v in todo if not v.reference]):
        if not wave:
            continue
        ids = {v.name: submit_variant(spec, {"config": raw, "variant": v.name, "run_id": paths.run_id,
                                             "results_url": location.url}, f"{attempt}:{v.name}") for v in wave}
        for name, st in wait_for_runs(ids, spec.variant_timeout_s).items():
            ended[name] = f"flow run {st['name']} {st['state'].lower()}" + (f": {st['message']}" if st["message"] else "")
            report_variant(name, st["state"] == "COMPLETED", ended[name])
    return ended


def report_variant(name: str, ok: bool, ended: str) -> None:
    """A variant's outcome in the nightly's log: INFO when ok, ERROR when it failed."""
    if ok:
        print(f"{name}: ok")
    else:
        get_run_logger().error("%s: FAILED: %s", name, ended.splitlines()[0][:300])


def collect_rows(cfg: RunConfig, paths: RunPaths, location: ResultsLocation, ended: dict[str, str]) -> list[dict]:
    """Every variant's row; a variant whose flow run left none (crashed, cancelled, never ran) gets a failed one."""
    written = {r["variant"]: r for r in read_table(paths.results, "variants").to_dict("records")}
    rows = []
    for v in cfg.variants:
        row = written.get(v.name)
        if row is None:
            why = ended.get(v.name, "no result")
            if why.split(":")[0].endswith("completed"):
                why += f"; but it left no results in {location.url}: set scale_out.results_url to a location every worker can write"
            row = variant_row(paths.run_id, cfg, v, None, None, why)
            write_table(paths.results, "variants", v.name, [row])
            location.publish(paths, v.name)
        rows.append(row)
    return rows


@task(name="write-run-row", cache_policy=NONE)
def write_run_row(cfg: RunConfig, paths: RunPaths, started: datetime, status: str, error: str | None) -> None:
    row = {"run_id": paths.run_id, "config_name": cfg.name, "started_at": started,
           "finished_at": datetime.now(timezone.utc), "status": status, **host_info(),
           "config_json": cfg.model_dump_json(), "reference_variant": cfg.reference.name,
           "primary_quality_metric": cfg.quality.primary, "error": error}
    write_table(paths.results, "runs", "run", [row])


@task(name="validate-results", cache_policy=NONE)
def validate_results_task(paths: RunPaths, expected: dict[str, int | None]):
    from tasks.validate import validate_results

    return validate_results(paths.results, expected)


@task(name="load-warehouse", cache_policy=NONE, retries=2, retry_delay_seconds=[2, 10], timeout_seconds=900)
def load_results_task(paths: RunPaths, warehouse: Path, only: list[str] | None = None) -> dict[str, int]:
    from warehouse.db import load_run

    return load_run(paths.root, warehouse, only=only)


@task(name="report", cache_policy=NONE)
def report_task(warehouse: Path, paths: RunPaths) -> str:
    """Text and HTML reports, plus the trade-off table, takeaways, the recommendation and a link to the HTML as
    Prefect artifacts."""
    from tasks.report import format_report, quality_unit, takeaways, tradeoff_frame
    from tasks.recommend import recommendation_markdown
    from tasks.report_html import write_html
    from warehouse.db import open_warehouse

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


def notify_crash(flow, run, state) -> None:
    """State hook of a nightly that failed or crashed: tell the config's notify block, if it has one."""
    if reported(state):
        return  # the run's own outcome (Partial or Failed): notify_outcome told the block already
    try:
        cfg = load_config(run.parameters.get("config", "configs/demo.yaml"))
        if cfg.notify is not None:
            deliver(cfg.notify.block, f"tradeoff nightly {run.name}: {state.type.value.lower()}",
                    (state.message or state.type.value).splitlines()[0][:1000])
    except Exception as err:  # noqa: BLE001 - a hook must not mask the run's own failure
        get_run_logger().warning("could not send the failure notification: %s", err)


@flow(name="nightly", log_prints=True, on_failure=[notify_crash], on_crashed=[notify_crash])
def nightly(config: str = "configs/demo.yaml", run_id: str | None = None, work_pool: str | None = None) -> dict:
    """Measure every variant of CONFIG (on WORK_POOL, or in-process), validate, load into the warehouse and report."""
    valid_run_id(run_id)  # a flow parameter: checked before anything is read or written
    # One read of the file: the validated config, the mapping each variant's flow run gets and the
    # copy in the run folder are then the same config even if the file changes meanwhile.
    text, raw = read_config(config)
    cfg = with_work_pool(parse_config(raw), work_pool)
    location, warning = preflight(cfg)
    if warning:
        get_run_logger().warning(warning)
    paths = make_run_paths(run_id or default_run_id(cfg.name))
    # One writer per run folder: a second attempt at this run id is refused naming the holder (issue 18).
    with run_lock(paths.root, "nightly", warn=get_run_logger().warning):
        return measure_validate_load(cfg, raw, text, paths, location)


def measure_validate_load(cfg: RunConfig, raw: dict, text: str, paths: RunPaths, location: ResultsLocation) -> dict:
    """The nightly's work on its run folder, run with the folder's lock held."""
    record_config(paths, text, cfg)
    started = first_started_at(paths, datetime.now(timezone.utc))
    done = measured_variants(location, paths)
    todo = [v for v in _ordered(cfg) if v.name not in done]
    where = f"work pool {cfg.scale_out.work_pool}" if cfg.scale_out.work_pool else "in-process"
    print(f"run {paths.run_id}: {len(cfg.variants)} variants ({len(todo)} to measure {where}"
          + (f", {len(done)} already measured: {', '.join(sorted(done))}" if done else "")
          + f"), folder {paths.root}, results {location.url}")
    for v in todo:
        location.clear(paths, v.name)
    if cfg.scale_out.work_pool:
        ended = run_fanned_out(cfg, raw, paths, todo, location)
    else:
        ended = run_in_process(raw, paths, todo, location)
    location.fetch(paths)
    rows = collect_rows(cfg, paths, location, ended)
    failed = [r["variant"] for r in rows if r["status"] == "failed"]
    status = "failed" if len(failed) == len(rows) else ("partial" if failed else "ok")
    write_run_row(cfg, paths, started, status, f"failed variants: {', '.join(failed)}" if failed else None)
    report = validate_results_task(paths, expected_rows(cfg, rows, paths))
    warehouse = cfg.warehouse_path()
    if not report.success:
        bad = [t.table for t in report.tables if not t.success]
        problems = "; ".join(report.failures()[:5])
        write_run_row(cfg, paths, started, "failed", f"validation failed: {problems}")
        location.publish(paths, "run")
        load_results_task(paths, warehouse, only=[t for t in ("runs", "variants") if t not in bad])
        raise RuntimeError(f"run {paths.run_id}: results failed validation, tables {', '.join(bad)} not loaded "
                           f"(raw results kept in {paths.results}): {problems}")
    location.publish(paths, "run")
    counts = load_results_task(paths, warehouse)
    text = report_task(warehouse, paths)
    print(text)
    print(f"html report: {paths.root / 'report.html'}")
    notified = notify_outcome(cfg, warehouse, paths.run_id, status, rows)
    summary = {"run_id": paths.run_id, "status": status, "failed_variants": failed, "loaded": counts,
            "warehouse": str(warehouse), "run_dir": str(paths.root), "measured": [v.name for v in todo],
            "skipped": sorted(done), "notified": notified}
    # Failed variants make the flow run Failed ("Partial" when some are ok): not green in the UI (tasks.failures).
    return run_outcome(summary, rows)
