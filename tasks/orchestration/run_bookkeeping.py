"""Bookkeeping of a nightly run: preflight, run ids, the config kept in the run folder, resumption, row counts, crash
hooks."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from datetime import datetime, timezone
from typing import Any

from prefect import get_run_logger
from prefect.runtime import flow_run

from tasks.core.config import RunConfig, Variant
from tasks.core.errors import ConfigError
from tasks.core.runinfo import RunPaths, new_run_id, valid_run_id
from tasks.loader import load_config, load_config_file, parse_config
from tasks.orchestration.fanout import check_pool
from tasks.orchestration.results import ResultsLocation
from tasks.orchestration.run_outcome import reported
from tasks.orchestration.variant_bookkeeping import variant_row
from tasks.quality.sandbox import unavailable_reason
from tasks.report.notify import deliver, load_block
from warehouse.contract import read_table, write_table


def sandbox_problem(cfg: RunConfig) -> str | None:
    """A code suite that will run in this process (no work pool) whose jail cannot start here: one line, with the
    fix. On a work pool the workers' hosts run it: a variant whose suite fails there fails naming it."""
    if cfg.scale_out.work_pool:
        return None
    for i, spec in enumerate(cfg.quality.suites):
        if spec.name == "code" and spec.params.get("sandbox", "bwrap") != "none" and (reason := unavailable_reason()):
            return f"quality.suites[{i}] ({spec.key}): code sandbox: {reason}; or remove the code suite from the config"
    return None


def preflight(cfg: RunConfig) -> tuple[ResultsLocation, str | None]:
    """Fail before any variant starts: results location not writable, pool or deployment or notify block missing,
    a code suite whose jail cannot start on this host.

    Returns the results location and a warning (no worker online) or None.
    """
    if problem := sandbox_problem(cfg):
        raise ConfigError(problem)
    location = ResultsLocation.resolve(cfg.scale_out.location())
    location.check_writable()
    warning = check_pool(cfg.scale_out) if cfg.scale_out.work_pool else None
    if cfg.notify:
        load_block(cfg.notify.block)
    return location, warning


class CheckedRun:
    """A nightly's input, checked once where it entered: the run id, the config file's text and mapping, the
    validated config (work pool applied) and the preflight's results location and warning.

    `tradeoff run` builds it and hands it to the nightly flow in-process, which then reads and checks nothing
    again; a deployment's flow run passes a path, and the flow builds it (check_run). It is no mapping a
    caller could send from the UI: Prefect checks an argument of this type by isinstance only.
    """

    def __init__(
        self,
        path: str,
        text: str,
        raw: dict[str, Any],
        cfg: RunConfig,
        run_id: str | None,
        work_pool: str | None,
        location: ResultsLocation,
        warning: str | None,
    ) -> None:
        self.path, self.text, self.raw, self.cfg = path, text, raw, cfg
        self.run_id, self.work_pool, self.location, self.warning = run_id, work_pool, location, warning

    def __iter__(self) -> Iterator[tuple[str, Any]]:
        # What Prefect records as the flow run's `config` parameter (fastapi's jsonable_encoder calls dict() on it):
        # the path and the mapping, as a deployment would have passed them.
        return iter({"path": self.path, "config": self.raw}.items())


def checked_run(
    path: str, text: str, raw: dict[str, Any], cfg: RunConfig, run_id: str | None, work_pool: str | None
) -> CheckedRun:
    """The preflight of an already validated config (work pool not yet applied): a CheckedRun, or ConfigError."""
    cfg = with_work_pool(cfg, work_pool)
    location, warning = preflight(cfg)
    return CheckedRun(path, text, raw, cfg, run_id, work_pool, location, warning)


def check_run(config: str, run_id: str | None, work_pool: str | None) -> CheckedRun:
    """A nightly's parameters checked: the run id, the config read and validated once, the preflight."""
    valid_run_id(run_id)  # checked before anything is read or written
    # One read of the file: the validated config, the mapping each variant's flow run gets and the
    # copy in the run folder are then the same config even if the file changes meanwhile.
    text, raw, cfg = load_config_file(config)
    return checked_run(config, text, raw, cfg, run_id, work_pool)


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
        raise ConfigError(
            f"run {paths.run_id}: its folder holds results of another config; re-run it with the config "
            f"it was started with ({paths.root / 'config.yaml'}) or drop --run-id"
        )
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


def measurement_order(cfg: RunConfig) -> list[Variant]:
    return [cfg.reference] + [v for v in cfg.variants if not v.reference]


def collect_rows(cfg: RunConfig, paths: RunPaths, location: ResultsLocation, ended: dict[str, str]) -> list[dict]:
    """Every variant's row; a variant whose flow run left none (crashed, cancelled, never ran) gets a failed one."""
    written = {r["variant"]: r for r in read_table(paths.results, "variants").to_dict("records")}
    rows = []
    for v in cfg.variants:
        row = written.get(v.name)
        if row is None:
            why = ended.get(v.name, "no result")
            if why.split(":")[0].endswith("completed"):
                why += (
                    f"; but it left no results in {location.url}: set scale_out.results_url to a location every "
                    f"worker can write"
                )
            row = variant_row(paths.run_id, cfg, v, None, None, why)
            write_table(paths.results, "variants", v.name, [row])
            location.publish(paths, v.name)
        rows.append(row)
    return rows


def notify_crash(flow, run, state) -> None:
    """State hook of a nightly that failed or crashed: tell the config's notify block, if it has one."""
    if reported(state):
        return  # the run's own outcome (Partial or Failed): notify_outcome told the block already
    try:
        config = run.parameters.get("config", "configs/demo.yaml")
        if isinstance(config, CheckedRun):
            cfg = config.cfg
        elif isinstance(config, dict):  # a CheckedRun as Prefect records it (`tradeoff run`): path and mapping
            cfg = parse_config(config["config"])
        else:  # a path: a deployment's parameter
            cfg = load_config(config)
        if cfg.notify is not None:
            deliver(
                cfg.notify.block,
                f"tradeoff nightly {run.name}: {state.type.value.lower()}",
                (state.message or state.type.value).splitlines()[0][:1000],
            )
    except Exception as err:  # noqa: BLE001 - a hook must not mask the run's own failure
        get_run_logger().warning("could not send the failure notification: %s", err)
