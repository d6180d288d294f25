"""The nightly flow: build -> serve and measure (per variant) -> validate -> load -> report.

One variant failing is recorded as failed and the others go on. The reference variant
is measured first because the fidelity suite compares every variant with it.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path

from prefect import flow, get_run_logger, task
from prefect.artifacts import create_link_artifact, create_markdown_artifact, create_table_artifact
from prefect.cache_policies import NONE

from tasks.config import RunConfig, Variant, load_config
from tasks.engines import Artifact, engine_for
from tasks.measure import build_variant, engine_args_json, measure_perf, measure_quality
from tasks.runinfo import RunPaths, build_cache_dir, host_info, make_run_paths, new_run_id
from tasks.serve import free_port, serving
from tasks.tables import write_table


@flow(name="build-variants")
def build_variants(cfg: RunConfig) -> dict[str, Artifact | str]:
    """Build every variant; a failed build maps the variant to its error text."""
    cache = build_cache_dir()
    out: dict[str, Artifact | str] = {}
    for v in cfg.variants:
        state = build_variant.with_options(task_run_name=f"build-{v.name}")(cfg, v, cache, return_state=True)
        out[v.name] = state.result() if state.is_completed() else _error_line(state)
    return out


@flow(name="measure-variant", flow_run_name="measure-{variant.name}")
def measure_variant(cfg: RunConfig, run_id: str, variant: Variant, artifact: Artifact,
                    ref_artifact: Artifact | None, paths: RunPaths) -> dict:
    """Serve one variant, run its perf sweep and quality suites, stop its server (also on failure)."""
    engine = engine_for(variant.engine)
    port = free_port()
    base_url = f"http://127.0.0.1:{port}"
    cmd = engine.server_command(artifact, variant, cfg.models[variant.model], "127.0.0.1", port)
    with serving(cmd, base_url, paths.logs / f"{variant.name}.server.log", cfg.server_start_timeout_s) as server:
        get_run_logger().info("%s serving at %s (pid %d, up in %.1f s)", variant.name, base_url, server.pid, server.startup_s)
        perf = measure_perf(cfg, run_id, variant, artifact, base_url, paths.results)
        quality = measure_quality(cfg, run_id, variant, artifact, ref_artifact, base_url,
                                  paths.root / "quality" / variant.name, paths.results)
    return {"server_startup_s": server.startup_s, "perf": perf, "quality": quality}


def _error_line(state) -> str:
    try:
        state.result()
    except BaseException as err:  # noqa: BLE001 - we record any failure of a variant
        return f"{type(err).__name__}: {err}".strip()
    return str(state.message or state.type)


def variant_row(run_id: str, cfg: RunConfig, v: Variant, art: Artifact | str, outcome: dict | str) -> dict:
    ok_art = isinstance(art, Artifact)
    error = art if not ok_art else (outcome if isinstance(outcome, str) else None)
    return {"run_id": run_id, "variant": v.name, "model": v.model, "engine": v.engine, "quantization": v.quantization,
            "speculative": v.speculative.method if v.speculative else None, "is_reference": v.reference,
            "status": "failed" if error else "ok", "error": error,
            "artifact_path": str(art.path) if ok_art else None, "artifact_sha256": art.sha256 if ok_art else None,
            "artifact_bytes": art.bytes if ok_art else None, "build_cached": art.cached if ok_art else None,
            "build_s": art.build_s if ok_art else None,
            "server_startup_s": outcome.get("server_startup_s") if isinstance(outcome, dict) else None,
            "engine_args": engine_args_json(v),
            "usd_per_hour": v.cost.usd_per_hour if v.cost else None,
            "usd_per_1m_input_tok": v.cost.usd_per_1m_input_tokens if v.cost else None,
            "usd_per_1m_output_tok": v.cost.usd_per_1m_output_tokens if v.cost else None}


@task(name="write-run-row", cache_policy=NONE)
def write_run_row(cfg: RunConfig, paths: RunPaths, started: datetime, status: str, error: str | None) -> None:
    row = {"run_id": paths.run_id, "config_name": cfg.name, "started_at": started,
           "finished_at": datetime.now(timezone.utc), "status": status, **host_info(),
           "config_json": cfg.model_dump_json(), "reference_variant": cfg.reference.name,
           "primary_quality_metric": cfg.quality.primary, "error": error}
    write_table(paths.results, "runs", "run", [row])


def expected_rows(cfg: RunConfig, rows: list[dict], paths: RunPaths) -> dict[str, int | None]:
    """Row counts the GX gate expects: full counts for ok variants, what was written for failed ones."""
    from tasks.tables import read_table

    ok = [r["variant"] for r in rows if r["status"] == "ok"]
    per_variant = {"perf_requests": len(cfg.perf.concurrency) * (cfg.perf.warmup_requests + cfg.perf.num_prompts),
                   "perf_summary": len(cfg.perf.concurrency)}
    out: dict[str, int | None] = {"runs": 1, "variants": len(cfg.variants), "quality_samples": None, "quality_scores": None}
    for table, n in per_variant.items():
        written = read_table(paths.results, table)
        failed_rows = int((~written["variant"].isin(ok)).sum()) if len(written) else 0
        out[table] = n * len(ok) + failed_rows
    return out


@task(name="validate-results", cache_policy=NONE)
def validate_results_task(paths: RunPaths, expected: dict[str, int | None]):
    from tasks.validate import validate_results

    return validate_results(paths.results, expected)


@task(name="load-warehouse", cache_policy=NONE, retries=2, retry_delay_seconds=[2, 10])
def load_results_task(paths: RunPaths, warehouse: Path, only: list[str] | None = None) -> dict[str, int]:
    from warehouse.db import load_run

    return load_run(paths.root, warehouse, only=only)


@task(name="report", cache_policy=NONE)
def report_task(warehouse: Path, paths: RunPaths) -> str:
    """Text and HTML reports, plus the trade-off table, takeaways and a link to the HTML as Prefect artifacts."""
    from tasks.report import format_report, quality_unit, takeaways, tradeoff_frame
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
    finally:
        con.close()
    create_link_artifact(key="tradeoff-report", link=html_path.as_uri(), link_text=f"HTML report of {run_id}",
                         description="Self-contained page: tables and plots (open on the host that ran the flow)")
    create_table_artifact(key="tradeoff-table", table=json.loads(df.to_json(orient="records")),
                          description=f"Trade-off table of run {run_id}")
    create_markdown_artifact(key="tradeoff-takeaways", markdown="\n".join(f"- {t}" for t in lines) or "(no takeaways)",
                             description=f"Takeaways of run {run_id} against the reference")
    return text


def _ordered(cfg: RunConfig) -> list[Variant]:
    return [cfg.reference] + [v for v in cfg.variants if not v.reference]


@flow(name="nightly", log_prints=True)
def nightly(config: str = "configs/demo.yaml", run_id: str | None = None) -> dict:
    """Measure every variant of CONFIG, validate, load into the warehouse and report."""
    cfg = load_config(config)
    started = datetime.now(timezone.utc)
    paths = make_run_paths(run_id or new_run_id(cfg.name))
    (paths.root / "config.yaml").write_text(Path(config).read_text())
    print(f"run {paths.run_id}: {len(cfg.variants)} variants, folder {paths.root}")
    artifacts = build_variants(cfg)
    ref_art = artifacts.get(cfg.reference.name)
    ref_art = ref_art if isinstance(ref_art, Artifact) else None
    outcomes: dict[str, dict | str] = {}
    for v in _ordered(cfg):
        art = artifacts[v.name]
        if not isinstance(art, Artifact):
            outcomes[v.name] = art
            continue
        state = measure_variant(cfg, paths.run_id, v, art, ref_art, paths, return_state=True)
        outcomes[v.name] = state.result() if state.is_completed() else _error_line(state)
        print(f"{v.name}: {'ok' if isinstance(outcomes[v.name], dict) else 'FAILED: ' + outcomes[v.name]}")
    rows = [variant_row(paths.run_id, cfg, v, artifacts[v.name], outcomes[v.name]) for v in cfg.variants]
    write_table(paths.results, "variants", "run", rows)
    failed = [r["variant"] for r in rows if r["status"] == "failed"]
    status = "failed" if len(failed) == len(rows) else ("partial" if failed else "ok")
    write_run_row(cfg, paths, started, status, f"failed variants: {', '.join(failed)}" if failed else None)
    report = validate_results_task(paths, expected_rows(cfg, rows, paths))
    warehouse = cfg.warehouse_path()
    if not report.success:
        bad = [t.table for t in report.tables if not t.success]
        problems = "; ".join(report.failures()[:5])
        write_run_row(cfg, paths, started, "failed", f"validation failed: {problems}")
        load_results_task(paths, warehouse, only=[t for t in ("runs", "variants") if t not in bad])
        raise RuntimeError(f"run {paths.run_id}: results failed validation, tables {', '.join(bad)} not loaded "
                           f"(raw results kept in {paths.results}): {problems}")
    counts = load_results_task(paths, warehouse)
    text = report_task(warehouse, paths)
    print(text)
    print(f"html report: {paths.root / 'report.html'}")
    return {"run_id": paths.run_id, "status": status, "failed_variants": failed, "loaded": counts,
            "warehouse": str(warehouse), "run_dir": str(paths.root)}

