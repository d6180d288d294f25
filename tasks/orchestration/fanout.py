"""Fan-out onto a Prefect work pool: one flow run of the `variant` deployment per variant, then wait for all.

The work pool's workers are the distributed engine (one worker per GPU host); this module only
checks that the pool and the deployment exist, submits the runs and waits for their final states,
cancelling a run that outlives its time budget.
"""

from __future__ import annotations

import time
from typing import Any

from prefect import get_run_logger, task
from prefect.cache_policies import NONE

from tasks.core.config import ScaleOutSpec
from tasks.core.errors import ConfigError


class FanOutError(ConfigError):
    """A fan-out that cannot start (no server, no pool, no deployment); the message is one line."""


def api_url() -> str | None:
    from prefect.settings import PREFECT_API_URL

    return PREFECT_API_URL.value()


def check_pool(spec: ScaleOutSpec) -> str | None:
    """Raise FanOutError when the pool or the deployment is missing; returns a warning when no worker is online."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.objects import WorkPoolStatus
    from prefect.exceptions import ObjectNotFound

    url = api_url()
    pool = spec.work_pool
    if not url:
        raise FanOutError(
            f"scale_out.work_pool: fanning out on '{pool}' needs a Prefect server and PREFECT_API_URL "
            f"is not set; start one (make server) and export PREFECT_API_URL=http://127.0.0.1:4200/api"
        )
    with get_client(sync_client=True) as client:
        unhealthy = client.api_healthcheck()
        if unhealthy is not None:
            raise FanOutError(
                f"scale_out.work_pool: cannot reach the Prefect API at {url} "
                f"({type(unhealthy).__name__}); start the server (make server) or fix PREFECT_API_URL"
            )
        try:
            work_pool = client.read_work_pool(pool)
        except ObjectNotFound:
            raise FanOutError(
                f"scale_out.work_pool: work pool '{pool}' does not exist on {url}; create it with "
                f"`python scripts/cluster.py setup --pool {pool}` (or `prefect work-pool create {pool} "
                f"--type process`)"
            ) from None
        except Exception as err:  # noqa: BLE001 - connection refused, timeouts, ...: one line
            raise FanOutError(
                f"scale_out.work_pool: cannot reach the Prefect API at {url} ({type(err).__name__}); "
                f"start the server (make server) or fix PREFECT_API_URL"
            ) from None
        try:
            deployment = client.read_deployment_by_name(spec.deployment)
        except ObjectNotFound:
            raise FanOutError(
                f"scale_out.deployment: deployment '{spec.deployment}' does not exist on {url}; "
                f"deploy it with `make pool` (prefect deploy --all)"
            ) from None
        if deployment.work_pool_name != pool:
            raise FanOutError(
                f"scale_out.work_pool: deployment '{spec.deployment}' runs on pool "
                f"'{deployment.work_pool_name}', not '{pool}'; set scale_out.work_pool to "
                f"'{deployment.work_pool_name}' or redeploy it on '{pool}'"
            )
        if work_pool.status == WorkPoolStatus.NOT_READY:
            return f"no worker is online on work pool '{pool}'; variants wait until one starts (make worker)"
    return None


@task(name="submit-variant", cache_policy=NONE, retries=3, retry_delay_seconds=[2, 10, 30], timeout_seconds=120)
def submit_variant(spec: ScaleOutSpec, parameters: dict[str, Any], idempotency_key: str) -> str:
    """Create the variant's flow run on the pool (not waiting for it); returns its id."""
    from prefect.deployments import run_deployment

    run = run_deployment(
        spec.deployment,
        parameters=parameters,
        timeout=0,
        work_queue_name=spec.work_queue,
        flow_run_name=f"measure-{parameters['variant']}",
        idempotency_key=idempotency_key,
        tags=["tradeoff"],
    )
    get_run_logger().info(
        "%s: flow run %s (%s) submitted to pool %s", parameters["variant"], run.name, run.id, spec.work_pool
    )
    return str(run.id)


@task(name="wait-for-variants", cache_policy=NONE)
def wait_for_runs(run_ids: dict[str, str], timeout_s: float, poll_s: float = 5.0) -> dict[str, dict[str, str]]:
    """Poll the flow runs until each is final or past `timeout_s` (then cancelled); variant -> state and message."""
    from prefect.client.orchestration import get_client
    from prefect.states import Cancelled, Cancelling

    log = get_run_logger()
    deadline = time.monotonic() + timeout_s
    out: dict[str, dict[str, str]] = {}
    with get_client(sync_client=True) as client:
        while len(out) < len(run_ids):
            for variant, run_id in run_ids.items():
                if variant in out:
                    continue
                run = client.read_flow_run(run_id)
                state = run.state
                if state is not None and state.is_final():
                    out[variant] = {"state": state.type.value, "message": state.message or "", "name": run.name}
                    log.info(
                        "%s: flow run %s %s%s",
                        variant,
                        run.name,
                        state.type.value,
                        f" ({state.message})" if state.message else "",
                    )
                elif time.monotonic() > deadline:
                    why = f"not finished after {timeout_s:.0f} s (scale_out.variant_timeout_s); cancelled"
                    running = state is not None and state.is_running()
                    client.set_flow_run_state(
                        run_id, Cancelling(message=why) if running else Cancelled(message=why), force=True
                    )
                    out[variant] = {"state": "TIMED_OUT", "message": why, "name": run.name}
            if len(out) < len(run_ids):
                time.sleep(poll_s)
    return out
