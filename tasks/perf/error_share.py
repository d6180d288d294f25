"""Failures are failures in the perf run: a variant whose measured requests failed above `perf.max_error_rate`, or with
a step without an ok request, is failed with the counts."""

from __future__ import annotations

import json
import re
from collections import Counter
from typing import Any, Iterable

from tasks.core.credentials import error_excerpt

_HTTP = re.compile(r"HTTP (\d{3}): ?(.*)", re.S)
# Errors whose tail is the server's bytes (an excerpt of one event): counted by what went wrong, not by the bytes.
_BY_PREFIX = ("malformed SSE data", "SSE data is not a JSON object", "client error on this response")
CAUSE_CHARS = 80


def _server_message(body: str) -> str:
    """The message of an HTTP error's body: OpenAI's {"error": {"message": ...}} (vLLM, llama-server), FastAPI's
    {"detail": ...}, {"message": ...}, else the body's text."""
    try:
        obj = json.loads(body)
    except ValueError:
        return body
    if isinstance(obj, dict):
        inner = obj.get("error")
        inner = inner.get("message") if isinstance(inner, dict) else inner
        for found in (inner, obj.get("detail"), obj.get("message")):
            if isinstance(found, str) and found.strip():
                return found
    return body


def error_cause(error: str | None) -> str:
    """A failed request's cause, to count requests by (as AIPerf summarises errors by kind): 'HTTP 503 overloaded'
    (the status and the server's own message), 'request deadline of 10 s exceeded', 'malformed SSE data'; keys are
    redacted (tasks.core.credentials), at most CAUSE_CHARS characters."""
    text = " ".join((error_excerpt(error) or "unknown error").split())
    http = _HTTP.fullmatch(text)
    if http:
        message = " ".join(_server_message(http[2]).split())
        text = f"HTTP {http[1]} {message}".strip()
    else:
        text = next((p for p in _BY_PREFIX if text.startswith(p)), text)
    return error_excerpt(text, CAUSE_CHARS)


def count_causes(errors: Iterable[str | None]) -> dict[str, int]:
    """Failed requests' errors counted by cause, the commonest first."""
    return dict(Counter(error_cause(e) for e in errors).most_common())


def error_causes(records: Iterable[Any]) -> dict[str, int]:
    """The measured (non-warm-up) failed requests counted by cause, the commonest first."""
    return count_causes(r.error for r in records if r.status != "ok" and not r.is_warmup)


def causes_text(causes: dict[str, int]) -> str:
    """'HTTP 503 overloaded x4; request deadline of 10 s exceeded x2' ('' for none)."""
    return "; ".join(f"{cause} x{n}" for cause, n in causes.items())


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
