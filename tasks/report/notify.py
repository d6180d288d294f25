"""Notifications: a failed or partial nightly, regressions this night's load found (v_change_points: Otava's
change points and the band rule), or a recommendation
(v_recommendation) that differs from the previous night's go to a Prefect notification block (a webhook,
Slack, e-mail, ...) named in the config's `notify.block`.

The messages are plain functions of a run's outcome (tested without Prefect); `send` loads the
block and calls it, with retries and backoff for transient HTTP errors.
"""

from __future__ import annotations

import time
from pathlib import Path

from prefect import get_run_logger, task
from prefect.cache_policies import NONE

from tasks.core.errors import ConfigError
from tasks.report.history import new_change_points
from warehouse.db import open_warehouse


class NotifyError(ConfigError):
    """A notification block that cannot be used; the message is one line."""


def regressions(warehouse: Path, run_id: str) -> list[str]:
    """One line per regression this night's load found (v_change_points): the band rule's flags of this run and
    Otava's change points first seen with it, each naming the run where the series changed, the means either
    side, the change, the rule and its p-value, and a known cause (an engine version change) where there is one."""
    con = open_warehouse(warehouse, read_only=True)
    try:
        return new_change_points(con, run_id)
    finally:
        con.close()


def recommendation_change(warehouse: Path, run_id: str) -> str | None:
    """One line when v_recommendation's pick differs from the previous run of the same config on the same
    hardware (a run that did not fail); None when it is the same or there is no earlier run."""
    con = open_warehouse(warehouse, read_only=True)
    try:
        rows = con.execute(
            """
            with this as (select * from runs where run_id = ?),
            earlier as (
                select r.run_id from runs as r, this as t
                where r.config_name = t.config_name and r.hardware_id is not distinct from t.hardware_id
                    and r.started_at < t.started_at and r.status <> 'failed'
                order by r.started_at desc limit 1
            )
            select run_id, any_value(recommended_variant), any_value(decision_note) from v_recommendation
            where run_id = ? or run_id in (select run_id from earlier)
            group by run_id""",
            [run_id, run_id],
        ).fetchall()
    finally:
        con.close()
    picks = {r: (pick, note) for r, pick, note in rows}
    previous = next((r for r in picks if r != run_id), None)
    if previous is None or run_id not in picks or picks[previous][0] == picks[run_id][0]:
        return None
    now, note = picks[run_id]
    return f"recommendation changed: {picks[previous][0] or 'none'} (run {previous}) -> {now or f'none ({note})'}"


def run_message(
    run_id: str,
    status: str,
    failed: list[str],
    errors: dict[str, str],
    flagged: list[str],
    on_partial: bool = True,
    on_regression: bool = True,
    recommendation: str | None = None,
) -> tuple[str, str] | None:
    """(subject, body) of a nightly's notification, or None when there is nothing to say."""
    parts, body = [], []
    if status == "failed" or (status == "partial" and on_partial):
        parts.append(f"{status} ({len(failed)} variant{'s' if len(failed) != 1 else ''} failed)")
        body += [f"- {v}: {errors.get(v, 'failed').strip().splitlines()[0][:300]}" for v in failed]
    if flagged and on_regression:
        parts.append(f"{len(flagged)} regression{'s' if len(flagged) != 1 else ''}")
        body += ["Regressions (v_change_points):"] + [f"- {line}" for line in flagged]
    if recommendation:
        parts.append("recommendation changed")
        body.append(recommendation)
    if not parts:
        return None
    return f"tradeoff nightly {run_id}: " + ", ".join(parts), "\n".join(body)


def load_block(slug_name: str):
    """The notification block `block-type-slug/name`; one line naming it and how to create it when it is missing."""
    from prefect.blocks.core import Block

    try:
        block = Block.load(slug_name)
    except (ValueError, KeyError) as err:
        raise NotifyError(
            f"notify.block: no block '{slug_name}' ({str(err).splitlines()[0]}); create it, e.g. "
            f"python scripts/cluster.py setup --webhook URL"
        ) from None
    if not hasattr(block, "notify"):
        raise NotifyError(
            f"notify.block: '{slug_name}' is a {type(block).__name__}, not a notification block; "
            f"name a notification block such as custom-webhook/..."
        )
    return block


def deliver(slug_name: str, subject: str, body: str, backoff_s: tuple[float, ...] = (2.0, 10.0, 30.0)) -> None:
    """Send one notification through the block, retrying transient failures with backoff (also outside a flow)."""
    block = load_block(slug_name)
    for wait_s in (*backoff_s, None):
        try:
            block.notify(body=body, subject=subject)
            return
        except Exception:  # HTTP errors of any notification backend, tried again
            if wait_s is None:
                raise
            time.sleep(wait_s)


@task(name="notify", cache_policy=NONE, timeout_seconds=180)
def send(slug_name: str, subject: str, body: str) -> None:
    """Send the nightly's notification."""
    deliver(slug_name, subject, body)
    get_run_logger().info("notified %s: %s", slug_name, subject)
