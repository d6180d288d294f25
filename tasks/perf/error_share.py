"""Failures are failures in the perf run: a variant whose measured requests failed above `perf.max_error_rate`, or with
a step without an ok request, is failed with the counts."""

from __future__ import annotations

from typing import Any, Iterable


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
    return {
        "requests": requests,
        "ok": ok,
        "errored": errored,
        "incomplete": incomplete,
        "steps_without_ok": steps_without_ok,
        "first_error": first_error,
    }


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
    why = [
        f"{share:.1%} > perf.max_error_rate {max_error_rate:.1%}" if share > max_error_rate else None,
        f"no ok request in step {', '.join(counts['steps_without_ok'])}" if counts["steps_without_ok"] else None,
    ]
    first = f"; first error: {counts['first_error'].splitlines()[0][:200]}" if counts["first_error"] else ""
    return (
        f"perf: {failed} of {n} measured requests failed ({counts['errored']} errored, {counts['incomplete']} "
        f"incomplete, {counts['ok']} ok): {'; '.join(w for w in why if w)}{first}"
    )


def check_perf(counts: dict[str, Any], max_error_rate: float) -> None:
    """Raise PerfFailed with the counts when the sweep failed."""
    problem = perf_failure(counts, max_error_rate)
    if problem:
        raise PerfFailed(problem)
