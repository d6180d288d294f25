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

import json
import math
from dataclasses import replace
from typing import Any, Iterable

import numpy as np

from tasks.quality import Score, SuiteResult

PARTIAL = "Partial"  # the name of a nightly's final state when some, not all, variants failed


# ---------------------------------------------------------------- perf

class PerfFailed(RuntimeError):
    """The perf sweep's requests failed above the allowed share (the message carries the counts)."""


def request_counts(scenarios: Iterable[Any]) -> dict[str, Any]:
    """Measured (non-warm-up) requests of a perf sweep by outcome, the steps where none succeeded, the first error."""
    requests = ok = errored = incomplete = 0
    steps_without_ok, first_error = [], None
    for sc in scenarios:
        measured = [r for r in sc.records if not r.is_warmup]
        step_ok = sum(r.status == "ok" for r in measured)
        requests, ok = requests + len(measured), ok + step_ok
        errored += sum(r.status == "error" for r in measured)
        incomplete += sum(r.status == "incomplete" for r in measured)
        if measured and not step_ok:
            steps_without_ok.append(sc.step.label)
        first_error = first_error or next((r.error for r in measured if r.status != "ok" and r.error), None)
    return {"requests": requests, "ok": ok, "errored": errored, "incomplete": incomplete,
            "steps_without_ok": steps_without_ok, "first_error": first_error}


def perf_failure(counts: dict[str, Any], max_error_rate: float) -> str | None:
    """One line with the counts when the sweep failed (share above `max_error_rate`, a step without an ok request,
    nothing measured); None when it did not."""
    n = counts["requests"]
    if n == 0:
        return "perf: no request was measured"
    failed = counts["errored"] + counts["incomplete"]
    share = failed / n
    if share <= max_error_rate and not counts["steps_without_ok"]:
        return None
    why = [f"{share:.1%} > perf.max_error_rate {max_error_rate:.1%}" if share > max_error_rate else None,
           f"no ok request in step {', '.join(counts['steps_without_ok'])}" if counts["steps_without_ok"] else None]
    first = f"; first error: {counts['first_error'].splitlines()[0][:200]}" if counts["first_error"] else ""
    return (f"perf: {failed} of {n} measured requests failed ({counts['errored']} errored, {counts['incomplete']} "
            f"incomplete, {counts['ok']} ok): {'; '.join(w for w in why if w)}{first}")


def check_perf(counts: dict[str, Any], max_error_rate: float) -> None:
    """Raise PerfFailed with the counts when the sweep failed."""
    problem = perf_failure(counts, max_error_rate)
    if problem:
        raise PerfFailed(problem)


# ---------------------------------------------------------------- quality

def _details(sample: dict) -> dict:
    raw = sample.get("details")
    try:
        return json.loads(raw) if isinstance(raw, str) and raw else dict(raw or {})
    except ValueError:
        return {}


def request_errored(sample: dict) -> bool:
    """Whether the sample's request failed at the endpoint (no answer to score), as every suite records it:
    `valid` false with the request's `error` in its details (HELM: status 'error')."""
    d = _details(sample)
    return d.get("status") == "error" or (not sample.get("valid") and bool(d.get("error")))


def _field(sample: dict, details: dict, name: str) -> Any:
    """A sample's column (score, valid, sample_id) or a key of its details, as tasks.stats reads a sample_stat."""
    return sample.get(name) if name in ("score", "valid", "sample_id") else details.get(name)


def _number(x: Any) -> float | None:
    if x is None or isinstance(x, str):
        return None
    x = float(x)
    return None if math.isnan(x) else x


def _rescored(score: Score, kept: list[dict], errored: int, total: int) -> Score:
    """`score` recomputed from its sample_stat over the samples whose request did not error."""
    from tasks.stats import parse_sample_stat

    try:
        stat = parse_sample_stat(score.sample_stat or "")
    except ValueError:
        return score  # no recipe: the suite's own value stands
    rows = [(s, _details(s)) for s in kept]
    rows = [r for r in rows if all(str(_field(*r, k)) == v for k, v in stat.where)]
    cols = [[_number(_field(*r, f)) for r in rows] for f in stat.fields]
    keep = [i for i in range(len(rows)) if all(c[i] is not None for c in cols)]
    left_out = f"{errored} of {total} samples errored at the endpoint and are left out"
    if not keep:
        return replace(score, value=None, stderr=None, n=0, note=f"no sample left: {left_out}")
    arr = [np.array([c[i] for i in keep], dtype=float) for c in cols]
    value = float(stat.compute(*arr))
    stderr = score.stderr
    if stderr is not None:
        stderr = float(arr[0].std(ddof=1) / math.sqrt(len(keep))) if stat.fn == "mean" and len(keep) > 1 else None
    if score.metric.endswith("invalid_rate"):
        bad = int(round(value * len(keep)))
        note = f"{bad} of {len(keep)} answers empty or unparseable; {left_out}" if bad else left_out
    else:
        note = left_out + (f"; the suite's note (all samples): {score.note}" if score.note else "")
    return replace(score, value=value, stderr=stderr, n=len(keep), note=note)


def account_errors(result: SuiteResult, max_error_rate: float) -> tuple[SuiteResult, str | None]:
    """The suite's result with errored requests counted apart, and a one-line failure when above the threshold.

    Every sample gets `errored` (0/1) in its details; errored ones lose their score. An
    `error_rate` score is added. Above `max_error_rate` the scores are `error_rate` and
    `suite_failed` (its note has the counts and the first error), so no score stands for a model
    that was never asked.
    """
    n = len(result.samples)
    if n == 0:
        return result, None
    samples, kept, first = [], [], None
    for s in result.samples:
        bad = request_errored(s)
        d = _details(s)
        if bad:
            first = first or str(d.get("error") or "request failed")
        samples.append({**s, "score": None if bad else s.get("score"),
                        "details": json.dumps({**d, "errored": int(bad)}, default=str)})
        if not bad:
            kept.append(samples[-1])
    errored = n - len(kept)
    rate = errored / n
    error_rate = Score("error_rate", rate, None, n, "fraction", False, None,
                       note=f"{errored} of {n} requests errored at the endpoint; first: {first.splitlines()[0][:200]}"
                       if errored else None)
    if rate > max_error_rate:
        line = (f"{errored} of {n} requests errored at the endpoint ({rate:.1%} > max_error_rate "
                f"{max_error_rate:.1%}); first: {first.splitlines()[0][:200]}")
        return SuiteResult(samples, [error_rate, Score("suite_failed", 1.0, None, 1, "count", False, None,
                                                       note=line[:300])]), line
    scores = [_rescored(s, kept, errored, n) if errored else s for s in result.scores]
    return SuiteResult(samples, [*scores, error_rate]), None


# ---------------------------------------------------------------- the nightly's final state

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
    message = (f"{len(failed)} of {len(rows)} variants failed" if partial else f"all {len(rows)} variants failed")
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
