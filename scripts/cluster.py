"""Run tradeoff's nightly on Prefect: the control host, the work pool set-up, and GPU workers.

    python scripts/cluster.py server                 # Prefect server + the control worker (nightly parents)
    python scripts/cluster.py setup [--gpu-host H]   # pool, queues, GPU limits, crash detection, deployments
    python scripts/cluster.py worker --gpu-host H    # a GPU host's worker (one variant at a time)

`setup` is idempotent: it creates what is missing and sets what differs. The Makefile's
`server`, `pool` and `worker` targets call these; the processes it starts are tasks/orchestration/prefect_cluster.py's
(tests/e2e/test_cluster.py starts the same commands).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import socket
import subprocess
import sys
import time
from datetime import timedelta

from tasks.core.config import GPU_SLOTS
from tasks.core.runinfo import PROJECT_ROOT
from tasks.orchestration.gpu import gpu_limit_name
from tasks.orchestration.prefect_cluster import (
    CONTROL_QUEUE,
    GPU_QUEUE,
    POOL,
    prefect_bin,
    server_command,
    server_env,
    stop,
    wait_healthy,
    worker_command,
    worker_env,
)

# Runs of our deployments beat every HEARTBEAT_S (prefect.yaml's job env); one silent for
# CRASH_AFTER_S (its host died) is marked Crashed.
HEARTBEAT_S = 30
CRASH_AFTER_S = 90
AUTOMATION = "tradeoff: crash flow runs whose host went silent"
DEPLOYMENTS = ("nightly/nightly", "variant/variant")


async def _setup(pool: str, gpu_hosts: list[str], webhook: str | None, block: str) -> list[str]:
    """Pool, queues, GPU limits and (optionally) the webhook block: created when missing, set when they differ."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.actions import (
        GlobalConcurrencyLimitCreate,
        GlobalConcurrencyLimitUpdate,
        WorkPoolCreate,
    )
    from prefect.exceptions import ObjectNotFound

    done = []
    async with get_client() as client:
        try:
            existing = await client.read_work_pool(pool)
            if existing.type != "process":
                raise SystemExit(
                    f"error: work pool '{pool}' exists with type {existing.type}; tradeoff's workers are "
                    f"process workers: delete it (prefect work-pool delete {pool}) or pick another --pool"
                )
        except ObjectNotFound:
            await client.create_work_pool(WorkPoolCreate(name=pool, type="process"))
            done.append(f"created work pool {pool}")
        for priority, queue in enumerate((CONTROL_QUEUE, GPU_QUEUE), start=1):
            try:
                await client.read_work_queue_by_name(queue, work_pool_name=pool)
            except ObjectNotFound:
                await client.create_work_queue(queue, work_pool_name=pool, priority=priority)
                done.append(f"created queue {pool}/{queue}")
        for host in gpu_hosts:
            name = gpu_limit_name(host)
            try:
                limit = await client.read_global_concurrency_limit_by_name(name)
                if limit.limit != GPU_SLOTS or not limit.active:
                    await client.update_global_concurrency_limit(
                        name, GlobalConcurrencyLimitUpdate(limit=GPU_SLOTS, active=True)
                    )
                    done.append(f"set {name} to {GPU_SLOTS} slots")
            except ObjectNotFound:
                await client.create_global_concurrency_limit(GlobalConcurrencyLimitCreate(name=name, limit=GPU_SLOTS))
                done.append(f"created GPU limit {name} ({GPU_SLOTS} slots)")
    if webhook:
        from prefect.blocks.notifications import CustomWebhookNotificationBlock

        await CustomWebhookNotificationBlock(
            name="tradeoff",
            url=webhook,
            json_data={"subject": "{{subject}}", "body": "{{body}}"},
        ).save(block, overwrite=True)
        done.append(f"notification block custom-webhook/{block} -> {webhook}")
    return done


async def _crash_detection(crash_after_s: float) -> str:
    """The automation that marks a silent run of our deployments Crashed (their runs beat every HEARTBEAT_S)."""
    from prefect.automations import Automation
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.objects import StateType
    from prefect.events.actions import ChangeFlowRunState
    from prefect.events.schemas.automations import EventTrigger, Posture
    from prefect.exceptions import ObjectNotFound

    ids = []
    async with get_client() as client:
        for name in DEPLOYMENTS:
            try:
                ids.append(f"prefect.deployment.{(await client.read_deployment_by_name(name)).id}")
            except ObjectNotFound:
                pass
    if not ids:
        return f"no crash detection: deploy first ({', '.join(DEPLOYMENTS)} not found)"
    while True:  # replace ours (and any duplicate a concurrent setup left)
        try:
            await (await Automation.aread(name=AUTOMATION)).adelete()
        except ValueError:
            break
    await Automation(
        name=AUTOMATION,
        description=f"A run of {' or '.join(DEPLOYMENTS)} that sent no heartbeat for {crash_after_s:.0f} s (its "
        f"worker or "
        f"host died) is Crashed, so the nightly stops waiting for it and a re-run measures it again.",
        trigger=EventTrigger(
            after={"prefect.flow-run.heartbeat"},
            # Events are named after the state's name: a nightly with some failed variants ends "Partial".
            expect={
                "prefect.flow-run.heartbeat",
                "prefect.flow-run.Completed",
                "prefect.flow-run.Failed",
                "prefect.flow-run.Partial",
                "prefect.flow-run.Cancelled",
                "prefect.flow-run.Crashed",
            },
            match={"prefect.resource.id": ["prefect.flow-run.*"]},
            # Only our deployments' runs: they beat every HEARTBEAT_S (prefect.yaml's job env); other flows may not.
            match_related={"prefect.resource.id": ids},
            for_each={"prefect.resource.id"},
            posture=Posture.Proactive,
            threshold=1,
            within=timedelta(seconds=crash_after_s),
        ),
        actions=[
            ChangeFlowRunState(
                state=StateType.CRASHED, message=f"no heartbeat for {crash_after_s:.0f} s: its worker or host died"
            )
        ],
    ).acreate()
    return f"automation '{AUTOMATION}' (after {crash_after_s:.0f} s without heartbeat)"


def cmd_setup(args: argparse.Namespace) -> int:
    for line in asyncio.run(_setup(args.pool, args.gpu_host, args.webhook, args.block)):
        print(line)
    if args.deploy:
        cmd = [prefect_bin(), "--no-prompt", "deploy", "--all"] + (["--pool", args.pool] if args.pool != POOL else [])
        subprocess.run(cmd, cwd=PROJECT_ROOT, check=True, timeout=600, stdout=subprocess.DEVNULL)
        print(f"deployed {' and '.join(DEPLOYMENTS)} (prefect.yaml)")
    print(asyncio.run(_crash_detection(args.crash_after_s)))
    return 0


def cmd_server(args: argparse.Namespace) -> int:
    """The control host: the Prefect server, then the worker of the `control` queue; both stop on Ctrl-C."""
    local = "127.0.0.1" if args.host in ("0.0.0.0", "::") else args.host  # how this host reaches its server
    with socket.socket() as probe:
        if probe.connect_ex((local, args.port)) == 0:
            print(
                f"error: port {args.port} on {local} is in use (another Prefect server?); stop it or pass --port",
                file=sys.stderr,
            )
            return 2
    api = f"http://{local}:{args.port}/api"
    # The UI calls the API at PREFECT_UI_API_URL (else Prefect's default :4200); on a team network
    # set it to the address browsers reach, e.g. http://control-host:4200/api.
    env = {"PREFECT_UI_API_URL": api, **server_env()}
    procs = [subprocess.Popen(server_command(args.host, args.port), env=env)]
    try:
        took = wait_healthy(api, args.timeout_s, procs[0])
        print(f"Prefect server up in {took:.0f} s: UI http://{local}:{args.port}, API {api}", flush=True)
        env = {**worker_env(None), "PREFECT_API_URL": api}
        procs.append(
            subprocess.Popen(worker_command(args.pool, CONTROL_QUEUE, f"control-{socket.gethostname()}", None), env=env)
        )
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
        while all(p.poll() is None for p in procs):
            time.sleep(1)
        return 1
    except KeyboardInterrupt:
        return 0
    finally:
        for p in reversed(procs):
            stop(p)


def cmd_worker(args: argparse.Namespace) -> int:
    """A GPU host's worker: the `gpu` queue, one flow run at a time (the GPU limit guards the rest)."""
    cmd = worker_command(args.pool, GPU_QUEUE, args.name or args.gpu_host, args.limit)
    os.execve(cmd[0], cmd, worker_env(args.gpu_host))
    return 0  # not reached


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="cluster.py", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    c = sub.add_parser("server", help="Prefect server + control worker (foreground; Ctrl-C stops both)")
    c.add_argument("--host", default="127.0.0.1")
    c.add_argument("--port", type=int, default=4200)
    c.add_argument("--pool", default=POOL)
    c.add_argument("--timeout-s", type=float, default=180.0, help="wait this long for the server to start")
    c.set_defaults(func=cmd_server)
    c = sub.add_parser("setup", help="create/update the pool, queues, GPU limits, crash detection; deploy")
    c.add_argument("--pool", default=POOL)
    c.add_argument("--gpu-host", action="append", default=[], help="a GPU host's name (repeat); its limit gpu-<name>")
    c.add_argument(
        "--crash-after-s",
        type=float,
        default=CRASH_AFTER_S,
        help=f"mark a flow run Crashed after this long without heartbeat (workers beat every {HEARTBEAT_S} s)",
    )
    c.add_argument("--webhook", help="also save a custom-webhook notification block posting to this URL")
    c.add_argument("--block", default="tradeoff-alerts", help="its name (config: notify.block: custom-webhook/NAME)")
    c.add_argument(
        "--deploy",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="run `prefect deploy --all` (prefect.yaml) at the end",
    )
    c.set_defaults(func=cmd_setup)
    c = sub.add_parser("worker", help="start a GPU host's worker (foreground)")
    c.add_argument("--gpu-host", default=socket.gethostname(), help="this host's name (its GPU limit gpu-<name>)")
    c.add_argument("--name", help="worker name (default: the GPU host)")
    c.add_argument("--pool", default=POOL)
    c.add_argument("--limit", type=int, default=1, help="flow runs at a time (default 1: one engine per GPU)")
    c.set_defaults(func=cmd_worker)
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
