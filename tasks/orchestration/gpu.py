"""GPU discipline: one Prefect global concurrency limit per GPU host, so engines never share a GPU by accident.

The limit `gpu-<host>` has GPU_SLOTS slots; an engine holds GPU_SLOTS // engines_per_gpu of
them from its server's launch to the end of its quality suites, so with the default
(engines_per_gpu: 1) a second engine on the same host waits until the first has stopped.
The host is TRADEOFF_GPU_HOST (set per worker) or the machine's host name.
"""

from __future__ import annotations

import os
import re
import socket
from collections.abc import Iterator
from contextlib import contextmanager

from tasks.core.config import GPU_SLOTS

# How long a held slot survives its holder without renewal (s): a killed host frees its GPU after this.
LEASE_S = 120.0


class GpuLimitError(RuntimeError):
    """A GPU host's limit that cannot guard it; the message is one line."""


def gpu_host() -> str:
    return os.environ.get("TRADEOFF_GPU_HOST") or socket.gethostname()


def gpu_limit_name(host: str) -> str:
    # Prefect names may not hold / % & < >.
    return "gpu-" + re.sub(r"[/%&<>\s]", "-", host)


async def ensure_gpu_limit(client, name: str) -> None:
    """Create the host's limit with GPU_SLOTS slots when it is missing; refuse one with another size."""
    from prefect.client.schemas.actions import GlobalConcurrencyLimitCreate
    from prefect.exceptions import ObjectAlreadyExists, ObjectNotFound

    try:
        limit = await client.read_global_concurrency_limit_by_name(name)
    except ObjectNotFound:
        try:
            await client.create_global_concurrency_limit(GlobalConcurrencyLimitCreate(name=name, limit=GPU_SLOTS))
        except ObjectAlreadyExists:  # another variant on this host created it first
            pass
        return
    if limit.limit != GPU_SLOTS:
        raise GpuLimitError(
            f"concurrency limit {name} has {limit.limit} slots, tradeoff needs {GPU_SLOTS} per GPU host; "
            f"run `python scripts/cluster.py setup` (it sets every gpu-* limit to {GPU_SLOTS})"
        )


def shared_api() -> bool:
    """Whether flows report to a Prefect server that others share (PREFECT_API_URL), not an ephemeral API."""
    from prefect.settings import PREFECT_API_URL

    return bool(PREFECT_API_URL.value())


@contextmanager
def gpu_slots(engines_per_gpu: int, timeout_s: float | None) -> Iterator[str | None]:
    """Hold this host's share of its GPU limit inside the block; yields the limit's name.

    On Prefect's ephemeral API (no PREFECT_API_URL) it holds nothing and yields None: the variants
    of that nightly run one after another in this process, so there is no one to share the GPU
    with, and that API keeps its leases in memory only: a run killed with it would leave the
    slots taken in the database with no lease left to expire, and every later run would wait.
    """
    if not shared_api():
        yield None
        return
    from prefect.client.orchestration import get_client
    from prefect.concurrency.sync import concurrency
    from prefect.utilities.asyncutils import run_coro_as_sync

    name = gpu_limit_name(gpu_host())

    async def ensure() -> None:
        async with get_client() as client:
            await ensure_gpu_limit(client, name)

    run_coro_as_sync(ensure())
    with concurrency(
        name,
        occupy=GPU_SLOTS // engines_per_gpu,
        timeout_seconds=timeout_s,
        lease_duration=LEASE_S,
        strict=True,
        raise_on_lease_renewal_failure=False,
    ):
        yield name
