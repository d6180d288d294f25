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

from contextlib import ExitStack
from datetime import datetime, timezone

from prefect import flow, get_run_logger
from prefect.runtime import flow_run
from pydantic.json_schema import SkipJsonSchema

from flows.variant import variant_flow
from tasks.core.config import RunConfig, Variant
from tasks.core.errors import ConfigError
from tasks.core.lifecycle import raise_if_stopping, stop_requested
from tasks.core.runinfo import RunPaths, build_cache_dir, make_run_paths
from tasks.engines.base import Artifact, Endpoint, engine_for, ensure_alive
from tasks.engines.scrape import scraping
from tasks.orchestration.fanout import submit_variant, wait_for_runs
from tasks.orchestration.gpu import gpu_slots
from tasks.orchestration.prefect_tasks import (
    build_variant,
    load_results_task,
    measure_perf_rounds,
    notify_outcome,
    report_task,
    start_endpoint,
    state_gate_plan,
    validate_results_task,
    write_run_row,
)
from tasks.orchestration.results import ResultsLocation
from tasks.orchestration.run_bookkeeping import (
    CheckedRun,
    check_run,
    collect_rows,
    default_run_id,
    first_started_at,
    measured_variants,
    measurement_order,
    notify_crash,
    record_config,
)
from tasks.orchestration.run_outcome import run_outcome
from tasks.orchestration.runlock import run_lock
from tasks.orchestration.variant_bookkeeping import error_line


def run_in_process(cfg: RunConfig, paths: RunPaths, todo: list[Variant], location: ResultsLocation) -> dict[str, str]:
    """Each variant as a subflow, one after another (given the validated config); variant -> how its flow run ended.
    With perf.interleave, their perf sweeps are measured first, together in interleaved rounds (perf_in_rounds)."""
    perf = perf_in_rounds(cfg, paths, todo) if cfg.perf.interleave and len(todo) > 1 else {}
    ended: dict[str, str] = {}
    for v in todo:
        state = variant_flow(
            config=cfg,
            variant=v.name,
            run_id=paths.run_id,
            results_url=location.url,
            perf=perf.get(v.name),
            return_state=True,
        )
        ended[v.name] = f"flow run {state.name}: {state.message or state.type.value}"
        report_variant(v.name, state.is_completed(), ended[v.name])
    return ended


def perf_in_rounds(cfg: RunConfig, paths: RunPaths, todo: list[Variant]) -> dict[str, dict | str]:
    """perf.interleave: every variant built and served at once (under one share of the GPU host's limit), their perf
    sweeps measured in interleaved rounds (tasks.perf.rounds), the servers stopped; variant -> its perf summary, or
    the error its sweep ended with. A variant that cannot be built or served here is left out: its own flow then
    measures it alone, or records why it fails."""
    log = get_run_logger()
    with ExitStack() as stack:
        stack.enter_context(gpu_slots(cfg.scale_out.engines_per_gpu, timeout_s=cfg.scale_out.variant_timeout_s))
        served: list[tuple[Variant, Artifact, Endpoint]] = []
        for v in todo:
            engine = engine_for(v.engine)
            try:
                art = build_variant.with_options(task_run_name=f"build-{v.name}")(cfg, v, build_cache_dir())
                # the same log as its flow's server (appended): the perf rounds' lines come first
                endpoint = start_endpoint(cfg, v, art, paths.logs / f"{v.name}.server.log")
            except Exception as err:  # noqa: BLE001 - the variant's own flow tries again and records why
                raise_if_stopping()
                log.warning("%s: not in the interleaved rounds (%s); its flow measures it alone", v.name, err)
                continue
            stack.callback(engine.stop, endpoint)
            stack.enter_context(scraping(engine, endpoint, paths.results, paths.run_id, v.name)).phase("perf")
            served.append((v, art, endpoint))
        if len(served) < 2:
            return {}  # nothing to interleave with: each flow measures its own
        perf = measure_perf_rounds(cfg, paths.run_id, [(v, a, e.base_url) for v, a, e in served], paths.results)
        for v, _, endpoint in served:
            try:
                ensure_alive(endpoint, "the perf sweep")
            except Exception as err:  # noqa: BLE001 - a server that died mid-sweep fails its variant, not the run
                perf[v.name] = error_line(err)
    return perf


def run_fanned_out(
    cfg: RunConfig, raw: dict, paths: RunPaths, todo: list[Variant], location: ResultsLocation
) -> dict[str, str]:
    """One flow run per variant on the work pool, the reference's first; variant -> what its flow run ended with."""
    spec = cfg.scale_out
    if cfg.perf.interleave:  # a work pool given as the flow's parameter, over a config that interleaves
        get_run_logger().warning(
            "perf.interleave does not apply on work pool %s: each variant's perf is measured alone on its host",
            spec.work_pool,
        )
    attempt = f"{flow_run.get_id() or 'local'}:{flow_run.get_run_count()}"
    ended: dict[str, str] = {}
    for wave in ([v for v in todo if v.reference], [v for v in todo if not v.reference]):
        if not wave:
            continue
        ids = {
            v.name: submit_variant(
                spec,
                {"config": raw, "variant": v.name, "run_id": paths.run_id, "results_url": location.url},
                f"{attempt}:{v.name}",
            )
            for v in wave
        }
        for name, st in wait_for_runs(ids, spec.variant_timeout_s).items():
            ended[name] = f"flow run {st['name']} {st['state'].lower()}" + (
                f": {st['message']}" if st["message"] else ""
            )
            report_variant(name, st["state"] == "COMPLETED", ended[name])
    return ended


def report_variant(name: str, ok: bool, ended: str) -> None:
    """A variant's outcome in the nightly's log: INFO when ok, ERROR when it failed."""
    if ok:
        print(f"{name}: ok")
    else:
        get_run_logger().error("%s: FAILED: %s", name, ended.splitlines()[0][:300])


@flow(name="nightly", log_prints=True, on_failure=[notify_crash], on_crashed=[notify_crash])
def nightly(
    config: str | SkipJsonSchema[CheckedRun] = "configs/demo.yaml",
    run_id: str | None = None,
    work_pool: str | None = None,
) -> dict:
    """Measure every variant of CONFIG (on WORK_POOL, or in-process), validate, load into the warehouse and report.

    CONFIG is a path (a deployment's parameter: checked here, once), or the CheckedRun that `tradeoff run` built
    from the same three parameters (checked there, not again).
    """
    if isinstance(config, CheckedRun):
        checked = config
        if (run_id, work_pool) != (checked.run_id, checked.work_pool):
            raise ConfigError(
                f"nightly: run_id {run_id!r} and work_pool {work_pool!r} are not those the config was "
                f"checked with ({checked.run_id!r}, {checked.work_pool!r})"
            )
    else:
        checked = check_run(config, run_id, work_pool)
    cfg, location = checked.cfg, checked.location
    if checked.warning:
        get_run_logger().warning(checked.warning)
    paths = make_run_paths(run_id or default_run_id(cfg.name))
    # One writer per run folder: a second attempt at this run id is refused naming the holder (issue 18).
    with run_lock(paths.root, "nightly", warn=get_run_logger().warning):
        try:
            return measure_validate_load(cfg, checked.raw, checked.text, paths, location)
        except BaseException as err:
            if isinstance(err, Exception) and stop_requested() is None:
                raise  # the run failed: Prefect records why
            # Stopped (Ctrl-C, a stop signal, a cancelled flow run): the run is Crashed, what it finished is kept.
            get_run_logger().warning(
                "run %s stopped: the variants measured so far are kept in %s; "
                "`tradeoff run %s --run-id %s` measures the rest",
                paths.run_id,
                paths.root,
                checked.path,
                paths.run_id,
            )
            raise_if_stopping()  # a stop that a library turned into its own error is recorded as the stop
            raise


def measure_validate_load(cfg: RunConfig, raw: dict, text: str, paths: RunPaths, location: ResultsLocation) -> dict:
    """The nightly's work on its run folder, run with the folder's lock held."""
    record_config(paths, text, cfg)
    started = first_started_at(paths, datetime.now(timezone.utc))
    done = measured_variants(location, paths)
    todo = [v for v in measurement_order(cfg) if v.name not in done]
    where = f"work pool {cfg.scale_out.work_pool}" if cfg.scale_out.work_pool else "in-process"
    print(
        f"run {paths.run_id}: {len(cfg.variants)} variants ({len(todo)} to measure {where}"
        + (f", {len(done)} already measured: {', '.join(sorted(done))}" if done else "")
        + f"), folder {paths.root}, results {location.url}"
    )
    gate_plan = state_gate_plan(cfg)  # the gate's power, stated before the evidence
    for v in todo:
        location.clear(paths, v.name)
    if cfg.scale_out.work_pool:
        ended = run_fanned_out(cfg, raw, paths, todo, location)
    else:
        ended = run_in_process(cfg, paths, todo, location)
    location.fetch(paths)
    rows = collect_rows(cfg, paths, location, ended)
    failed = [r["variant"] for r in rows if r["status"] == "failed"]
    status = "failed" if len(failed) == len(rows) else ("partial" if failed else "ok")
    write_run_row(cfg, paths, started, status, f"failed variants: {', '.join(failed)}" if failed else None, gate_plan)
    report = validate_results_task(cfg, rows, paths)
    warehouse = cfg.warehouse_path()
    if not report.success:
        bad = [t.table for t in report.tables if not t.success]
        problems = "; ".join(report.failures()[:5])
        write_run_row(cfg, paths, started, "failed", f"validation failed: {problems}", gate_plan)
        location.publish(paths, "run")
        load_results_task(paths, warehouse, only=[t for t in ("runs", "variants") if t not in bad])
        raise RuntimeError(
            f"run {paths.run_id}: results failed validation, tables {', '.join(bad)} not loaded "
            f"(raw results kept in {paths.results}): {problems}"
        )
    location.publish(paths, "run")
    counts = load_results_task(paths, warehouse)
    text = report_task(warehouse, paths)
    print(text)
    print(f"html report: {paths.report_html}")
    notified = notify_outcome(cfg, warehouse, paths.run_id, status, rows)
    summary = {
        "run_id": paths.run_id,
        "status": status,
        "failed_variants": failed,
        "loaded": counts,
        "warehouse": str(warehouse),
        "run_dir": str(paths.root),
        "measured": [v.name for v in todo],
        "skipped": sorted(done),
        "notified": notified,
    }
    # Failed variants make the flow run Failed ("Partial" when some are ok): not green in the UI
    # (tasks.orchestration.run_outcome).
    return run_outcome(summary, rows)
