"""The `variant` flow: build, serve and measure ONE variant of a config, then publish its results.

The nightly runs it for every variant: in its own process, or - with `scale_out.work_pool` -
as one flow run of the `variant` deployment per variant on a work pool (a worker per GPU host).
Server launch, perf sweep and quality suites run under the GPU host's concurrency limit
(tasks.orchestration.gpu). Every outcome, failures included, ends as the variant's row in `variants`, which
is published last: a row in the results location means the variant's results are complete.
"""

from __future__ import annotations

import time
from contextlib import nullcontext
from typing import Any

from prefect import flow, get_run_logger
from prefect.artifacts import create_markdown_artifact
from pydantic.json_schema import SkipJsonSchema

from tasks.core.config import RunConfig, Variant
from tasks.core.errors import ConfigError
from tasks.core.lifecycle import raise_if_stopping
from tasks.core.runinfo import RunPaths, build_cache_dir, make_run_paths, new_run_id, valid_run_id
from tasks.engines.base import Artifact, engine_for, ensure_alive
from tasks.engines.scrape import scraping
from tasks.orchestration.gpu import gpu_host, gpu_slots
from tasks.orchestration.prefect_tasks import (
    build_variant,
    check_engine,
    measure_perf,
    measure_quality,
    publish_results,
    start_endpoint,
)
from tasks.orchestration.results import PERF_TABLES, ResultsLocation
from tasks.orchestration.variant_bookkeeping import (
    VariantFailed,
    artifact_key,
    config_from,
    error_line,
    summary_markdown,
    variant_row,
)
from tasks.perf.error_share import check_perf
from tasks.quality.suite_failures import check_suites
from warehouse.contract import write_table


def measure_variant(
    cfg: RunConfig,
    run_id: str,
    v: Variant,
    art: Artifact,
    ref_art: Artifact | None,
    paths: RunPaths,
    deadline: float,
    perf: dict | str | None = None,
) -> dict:
    """Serve, perf sweep (engine metrics scraped alongside) and quality suites under this GPU host's limit.

    `perf`: the sweep the nightly already measured in interleaved rounds (perf.interleave), or the error it ended
    with; then only the quality suites run here (engine metrics are the perf rounds'). The server always stops.
    Every step gets what is left of the variant's time budget.
    """
    if isinstance(perf, str):
        raise RuntimeError(f"perf sweep (interleaved rounds): {perf}")
    engine = engine_for(v.engine)
    left = lambda: max(1.0, deadline - time.monotonic())
    with gpu_slots(cfg.scale_out.engines_per_gpu, timeout_s=left()) as limit:
        endpoint = start_endpoint.with_options(timeout_seconds=left())(cfg, v, art, paths.logs / f"{v.name}.server.log")
        try:
            with scraping(engine, endpoint, paths.results, run_id, v.name) if perf is None else nullcontext() as m:
                if perf is None:
                    m.phase("perf")
                    perf = measure_perf.with_options(timeout_seconds=left())(
                        cfg, run_id, v, art, endpoint.base_url, paths.results
                    )
                    # A server that died mid-sweep: its errored requests are kept, the variant fails with its log tail.
                    ensure_alive(endpoint, "the perf sweep")
                    m.phase("quality")
                check_perf(perf["request_counts"], cfg.perf.max_error_rate)  # failed requests fail the variant
                quality = measure_quality.with_options(timeout_seconds=left())(
                    cfg, run_id, v, art, ref_art, endpoint.base_url, paths.root / "quality" / v.name, paths.results
                )
                ensure_alive(endpoint, "the quality suites")
        finally:
            engine.stop(endpoint)
    return {"server_startup_s": endpoint.startup_s, "perf": perf, "quality": quality, "gpu_limit": limit}


@flow(name="variant", flow_run_name="measure-{variant}", log_prints=True)
def variant_flow(
    config: str | dict[str, Any] | SkipJsonSchema[RunConfig],
    variant: str,
    run_id: str | None = None,
    results_url: str | None = None,
    perf: SkipJsonSchema[dict | str | None] = None,
) -> dict:
    """Build, serve and measure one VARIANT of CONFIG (a path on this host, the config mapping, or - from the
    nightly in-process - the config it validated) into RUN_ID. PERF: the nightly's interleaved rounds measured its
    perf sweep already (perf.interleave): its summary, or the error it ended with."""
    t0 = time.monotonic()
    valid_run_id(run_id)  # flow parameters: checked before anything is read or written
    location = ResultsLocation.resolve(results_url) if results_url else None
    cfg = config_from(config)
    if variant not in {v.name for v in cfg.variants}:
        raise ConfigError(
            f"variant: '{variant}' is not in config {cfg.name}; use one of {', '.join(v.name for v in cfg.variants)}"
        )
    v = cfg.variant(variant)
    paths = make_run_paths(run_id or new_run_id(cfg.name))
    location = location or ResultsLocation.resolve(cfg.scale_out.location())
    location.clear(paths, v.name, keep=PERF_TABLES if perf is not None else ())
    if not v.reference:  # the quality deltas compare with the reference's results
        location.fetch(paths, variant=cfg.reference.name)
    host = gpu_host()
    print(f"{v.name} of run {paths.run_id} on host {host}; results to {location.url}")
    art, outcome, error = None, None, None
    try:
        check_engine(v)
        art = build_variant.with_options(
            task_run_name=f"build-{v.name}", timeout_seconds=cfg.scale_out.variant_timeout_s
        )(cfg, v, build_cache_dir())
        ref_art = art if v.reference else reference_artifact(cfg)
        outcome = measure_variant(cfg, paths.run_id, v, art, ref_art, paths, t0 + cfg.scale_out.variant_timeout_s, perf)
        check_suites(outcome["quality"]["failed_suites"])  # measured and kept, but a failed suite fails the variant
    except Exception as err:  # noqa: BLE001 - any failure is the variant's, recorded in its row
        raise_if_stopping()  # but a stop that a library turned into its own error stops the run
        error = error_line(err)
    row = variant_row(paths.run_id, cfg, v, art, outcome, error)
    write_table(paths.results, "variants", v.name, [row])
    publish_results(location, paths, v.name)
    create_markdown_artifact(
        key=artifact_key(v.name),
        markdown=summary_markdown(row, outcome, host, time.monotonic() - t0),
        description=f"Variant {v.name} of run {paths.run_id}",
    )
    if error:
        raise VariantFailed(f"{v.name}: {error}")
    return {"variant": v.name, "status": "ok", "host": host, **(outcome or {})}


def reference_artifact(cfg: RunConfig) -> Artifact | None:
    """The reference's artifact (cached by content), for suites that compare logits; None when it cannot be built."""
    ref = cfg.reference
    state = build_variant.with_options(task_run_name=f"build-{ref.name}")(
        cfg, ref, build_cache_dir(), return_state=True
    )
    if state.is_completed():
        return state.result()
    get_run_logger().warning("reference %s could not be built; suites that compare with it will fail", ref.name)
    return None
