"""Failures are failures: errored requests fail a variant or a suite past a share, and a nightly with failed
variants does not end green in Prefect.

- Perf: a variant whose measured requests failed (errored or incomplete) above `perf.max_error_rate`
  (default 10 %), or with a step where no request succeeded, is `failed` with the counts, not `ok`
  with NULL metrics.
- Quality: samples whose request errored (`valid` false with an `error`: the endpoint failed, not
  the model) are counted apart in an `error_rate` score, get no score (NULL, so they are not wrong
  answers) and are left out of every score that says how it follows from the samples
  (`sample_stat`); a suite above `quality.max_error_rate` is `suite_failed` with the counts.
- The nightly: Prefect colours a run by its state's type, never by its name (both UIs:
  `state--{type}` classes), so a run with failed variants ends in a FAILED-type state: named
  "Partial" when some variants are ok, "Failed" when none is, with the failed variants in its
  message. The summary rides in the state's data (`RunFailed`), read back with `run_summary`.
"""

from __future__ import annotations

from typing import Any

PARTIAL = "Partial"  # the name of a nightly's final state when some, not all, variants failed


class RunFailed(RuntimeError):
    """A nightly whose variants failed (some or all): the data of its FAILED-type final state, with its summary."""

    def __init__(self, message: str, summary: dict):
        super().__init__(message)
        self.summary = summary

    def __reduce__(self):
        return type(self), (str(self), self.summary)


def run_outcome(summary: dict, rows: list[dict]) -> Any:
    """What the nightly flow returns: its summary when every variant is ok (Completed), else a Failed state,
    named 'Partial' when some variants are ok, whose message names the failed variants and why."""
    failed = [r for r in rows if r["status"] == "failed"]
    if not failed:
        return summary
    from prefect.states import Failed

    why = "; ".join(f"{r['variant']}: {str(r.get('error') or 'failed').splitlines()[0][:200]}" for r in failed)
    partial = len(failed) < len(rows)
    message = f"{len(failed)} of {len(rows)} variants failed" if partial else f"all {len(rows)} variants failed"
    message = f"run {summary['run_id']}: {message}: {why}"[:2000]
    return Failed(name=PARTIAL if partial else "Failed", message=message, data=RunFailed(message, summary))


def _state_data(state: Any) -> Any:
    data = getattr(state, "data", None)
    return getattr(data, "result", data)  # a ResultRecord in the process that ran the flow


def reported(state: Any) -> bool:
    """Whether a failed nightly state is one the flow itself ended in (its outcome was already notified)."""
    return isinstance(_state_data(state), RunFailed)


def run_summary(state: Any) -> dict:
    """The nightly's summary from its final state (Completed, Partial or Failed); re-raises any other failure."""
    result = state.result(raise_on_failure=False)
    if isinstance(result, RunFailed):
        return result.summary
    if isinstance(result, BaseException):
        raise result
    return result
