"""The `variant` flow: build, serve and measure ONE variant of a config, then publish its results.

The nightly runs it for every variant: in its own process, or - with `scale_out.work_pool` -
as one flow run of the `variant` deployment per variant on a work pool (a worker per GPU host).
Server launch, perf sweep and quality suites run under the GPU host's concurrency limit
(tasks.gpu). Every outcome, failures included, ends as the variant's row in `variants`, which
is published last: a row in the results location means the variant's results are complete.
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

from prefect import flow, get_run_logger, task
from prefect.artifacts import create_markdown_artifact
from prefect.cache_policies import NONE
from prefect.tasks import exponential_backoff

from tasks.config import ConfigError, RunConfig, Variant, load_config, parse_config
from tasks.engines import Artifact, Endpoint, EngineUnavailable, engine_for, ensure_alive
from tasks.failures import check_perf
from tasks.gpu import gpu_host, gpu_slots
from tasks.measure import build_variant, engine_args_json, measure_perf, measure_quality
from tasks.results import ResultsLocation
from tasks.runinfo import RunPaths, build_cache_dir, make_run_paths, new_run_id, valid_run_id
from tasks.serve import PortInUse, ServerStartTimeout
from tasks.tables import write_table


class VariantFailed(RuntimeError):
    """The variant was recorded as failed (its row says why)."""


def config_from(config: str | dict[str, Any]) -> RunConfig:
    """A config path on this host, or the config mapping the nightly sent."""
    return load_config(config) if isinstance(config, str) else parse_config(config)


def error_line(err: BaseException) -> str:
    return f"{type(err).__name__}: {err}".strip()


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


def measure(cfg: RunConfig, run_id: str, v: Variant, art: Artifact, ref_art: Artifact | None, paths: RunPaths,
            deadline: float) -> dict:
    """Serve, perf sweep (engine metrics scraped alongside) and quality suites under this GPU host's limit.

    The server always stops. Every step gets what is left of the variant's time budget.
    """
    from tasks.engines.metrics import scraping

    engine = engine_for(v.engine)
    left = lambda: max(1.0, deadline - time.monotonic())  # noqa: E731
    with gpu_slots(cfg.scale_out.engines_per_gpu, timeout_s=left()) as limit:
        endpoint = start_endpoint.with_options(timeout_seconds=left())(cfg, v, art, paths.logs / f"{v.name}.server.log")
        try:
            with scraping(engine, endpoint, paths.results, run_id, v.name) as metrics:
                metrics.phase("perf")
                perf = measure_perf.with_options(timeout_seconds=left())(cfg, run_id, v, art, endpoint.base_url,
                                                                         paths.results)
                # A server that died mid-sweep: its errored requests are kept, the variant fails with its log tail.
                ensure_alive(endpoint, "the perf sweep")
                check_perf(perf["request_counts"], cfg.perf.max_error_rate)  # failed requests fail the variant
                metrics.phase("quality")
                quality = measure_quality.with_options(timeout_seconds=left())(
                    cfg, run_id, v, art, ref_art, endpoint.base_url, paths.root / "quality" / v.name, paths.results)
                ensure_alive(endpoint, "the quality suites")
        finally:
            engine.stop(endpoint)
    return {"server_startup_s": endpoint.startup_s, "perf": perf, "quality": quality, "gpu_limit": limit}


def variant_row(run_id: str, cfg: RunConfig, v: Variant, art: Artifact | None, outcome: dict | None,
                error: str | None) -> dict:
    """The variant's row of the `variants` table: how it was built and served, or why it failed."""
    ok_art = art is not None
    return {"run_id": run_id, "variant": v.name, "model": v.model, "engine": v.engine, "quantization": v.quantization,
            "speculative": v.speculative.method if v.speculative else None, "is_reference": v.reference,
            "status": "failed" if error else "ok", "error": error,
            "artifact_path": str(art.path) if ok_art else None, "artifact_sha256": art.sha256 if ok_art else None,
            "artifact_bytes": art.bytes if ok_art else None, "build_cached": art.cached if ok_art else None,
            "build_s": art.build_s if ok_art else None,
            "server_startup_s": outcome.get("server_startup_s") if outcome else None,
            "engine_args": engine_args_json(v),
            "usd_per_hour": v.cost.usd_per_hour if v.cost else None,
            "usd_per_1m_input_tok": v.cost.usd_per_1m_input_tokens if v.cost else None,
            "usd_per_1m_output_tok": v.cost.usd_per_1m_output_tokens if v.cost else None,
            "engine_version": art.meta.get("engine_version") if ok_art else None}


def summary_markdown(row: dict, outcome: dict | None, host: str, took_s: float) -> str:
    """The variant's sub-run summary shown in the Prefect UI."""
    lines = [f"### {row['variant']}: {row['status']}", "",
             f"- host `{host}`" + (f", GPU limit `{outcome['gpu_limit']}`" if outcome and outcome['gpu_limit'] else "") + f", {took_s:.0f} s",
             f"- {row['engine']} {row['quantization']}" + (f", speculative {row['speculative']}" if row["speculative"] else "")]
    if row["artifact_sha256"]:
        lines.append(f"- artifact `{Path(row['artifact_path']).name}` sha256 `{row['artifact_sha256'][:12]}`, "
                     f"{row['artifact_bytes'] / 1e6:.1f} MB, {'cached' if row['build_cached'] else 'built'} "
                     f"in {row['build_s']:.1f} s")
    if row["error"]:
        lines.append(f"- error: `{row['error'].splitlines()[0][:300]}`")
    if outcome:
        perf, quality = outcome["perf"], outcome["quality"]
        tps = ", ".join(f"{t:.1f}" for t in perf.get("output_throughput", []) if t is not None)
        startup = outcome["server_startup_s"]
        served = f"server up in {startup:.1f} s" if startup is not None else "hosted endpoint"
        lines += [f"- {served}; {perf.get('requests')} requests in {perf.get('scenarios')} steps; "
                  f"output tokens/s per step: {tps or 'n/a'}", "", "| quality metric | value |", "|---|---|"]
        lines += [f"| {k} | {v:.4g} |" if isinstance(v, (int, float)) else f"| {k} | {v} |"
                  for k, v in quality.get("scores", {}).items()]
    return "\n".join(lines)


def artifact_key(variant: str) -> str:
    # Prefect artifact keys: lowercase letters, digits and dashes.
    return "variant-" + re.sub(r"[^a-z0-9-]+", "-", variant.lower()).strip("-")


@flow(name="variant", flow_run_name="measure-{variant}", log_prints=True)
def variant_flow(config: str | dict[str, Any], variant: str, run_id: str | None = None,
                 results_url: str | None = None) -> dict:
    """Build, serve and measure one VARIANT of CONFIG (a path on this host, or the config mapping) into RUN_ID."""
    t0 = time.monotonic()
    valid_run_id(run_id)  # flow parameters: checked before anything is read or written
    location = ResultsLocation.resolve(results_url) if results_url else None
    cfg = config_from(config)
    if variant not in {v.name for v in cfg.variants}:
        raise ConfigError(f"variant: '{variant}' is not in config {cfg.name}; use one of "
                          f"{', '.join(v.name for v in cfg.variants)}")
    v = cfg.variant(variant)
    paths = make_run_paths(run_id or new_run_id(cfg.name))
    location = location or ResultsLocation.resolve(cfg.scale_out.location())
    location.clear(paths, v.name)
    if not v.reference:  # the quality deltas compare with the reference's results
        location.fetch(paths, variant=cfg.reference.name)
    host = gpu_host()
    print(f"{v.name} of run {paths.run_id} on host {host}; results to {location.url}")
    art, outcome, error = None, None, None
    try:
        check_engine(v)
        art = build_variant.with_options(task_run_name=f"build-{v.name}", timeout_seconds=cfg.scale_out.variant_timeout_s)(
            cfg, v, build_cache_dir())
        ref_art = art if v.reference else reference_artifact(cfg)
        outcome = measure(cfg, paths.run_id, v, art, ref_art, paths, t0 + cfg.scale_out.variant_timeout_s)
    except Exception as err:  # noqa: BLE001 - any failure is the variant's, recorded in its row
        error = error_line(err)
    row = variant_row(paths.run_id, cfg, v, art, outcome, error)
    write_table(paths.results, "variants", v.name, [row])
    publish_results(location, paths, v.name)
    create_markdown_artifact(key=artifact_key(v.name), markdown=summary_markdown(row, outcome, host, time.monotonic() - t0),
                             description=f"Variant {v.name} of run {paths.run_id}")
    if error:
        raise VariantFailed(f"{v.name}: {error}")
    return {"variant": v.name, "status": "ok", "host": host, **(outcome or {})}


def reference_artifact(cfg: RunConfig) -> Artifact | None:
    """The reference's artifact (cached by content), for suites that compare logits; None when it cannot be built."""
    ref = cfg.reference
    state = build_variant.with_options(task_run_name=f"build-{ref.name}")(cfg, ref, build_cache_dir(), return_state=True)
    if state.is_completed():
        return state.result()
    get_run_logger().warning("reference %s could not be built; suites that compare with it will fail", ref.name)
    return None
