"""A perf step judged against the decision's SLO: what its requests support about a latency percentile, and
whether a rate step's load was sustained. Plain Python; tasks/decision/sql/v_slo_steps.sql applies the same
rule to the stored requests (tests/integration/test_recommend.py holds the two equal, case by case).

**The percentile claim** (tasks.core.percentiles, MLPerf LoadGen's early stopping as the anchor). Over a step's
measured requests (warm-up excluded, every repeat pooled: n), a request that errored or did not complete counts
as over every limit. For each limit (TTFT, TPOT, E2EL), `over` requests exceed it; at the decision's confidence c:
- shown within (`met`) when over <= allowed_over(n, p, c): the order statistic X_(n - allowed) is a one-sided
  upper confidence bound of the p-th percentile, and it is within the limit;
- shown above (`missed`) when over >= missed_over(n, p, c): the lower bound X_(n - missed + 1) is above it;
- otherwise `not_enough_requests`, with the requests needed (every further one within the limit), e.g. 299
  for p99 at 95 % with none over.
The step is `missed` when any limit is, `met` when every limit is, else `not_enough_requests`.
Correlated requests (two in flight together share a batch; a repeat's host state is shared by its requests) carry
less than their count: the claim counts n_eff = n / deff of them (step_effective_requests: Geyer's initial positive
sequence over the ranks' autocorrelations), each count of over scaled alike, rounded up (docs/statistics.md, 1c).

TTFT is the time to the first *answer* token for a request that reasoned first (reasoning_tokens > 0; none
came: a miss), else the time to the first token; TPOT of a one-token answer is 0, as for goodput.

**Sustained load** (rate steps only; MLPerf's server scenario): the step's Poisson stream starts with a
warm-up share that is discarded (decision.warmup_share); over the measured rest of each repeat, the offered
rate is the least-squares slope of the requests' arrival count against their send times, the achieved rate
that of the ok requests' completion count against their return times. A queue that grows is a completion
rate below the arrival rate (the backlog grows by their difference per second), so one measurement serves
both conditions: the step is `not_sustained` when the repeats' mean achieved rate is below `min_rate_ratio`
(0.95) of their mean offered rate, whatever its latencies. A sustained step's load is the rate it offered.
Closed-loop steps (a fixed concurrency) cannot build a queue and are not checked.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from tasks.core.percentiles import allowed_over, effective_requests, missed_over, requests_needed
from tasks.perf.metrics import RequestRecord

LATENCIES = {"ttft_ms": "TTFT", "tpot_ms": "TPOT", "e2el_ms": "E2EL"}


def slo_latencies(r: RequestRecord) -> dict[str, float]:
    """The request's latencies as the SLO sees them (ms); inf for a failed request or a missing figure."""
    if r.status != "ok":
        return {k: math.inf for k in LATENCIES}
    ttft = r.ttft_answer_ms if (r.reasoning_tokens or 0) > 0 else r.ttft_ms
    out = {"ttft_ms": ttft, "tpot_ms": r.tpot_ms or 0.0, "e2el_ms": r.e2el_ms}
    return {k: math.inf if v is None else float(v) for k, v in out.items()}


def linear_percentile(values: list[float], p: float) -> float | None:
    """numpy's linear percentile of `values` (inf for failed requests); inf when it falls on one; None if empty."""
    xs = sorted(values)
    if not xs:
        return None
    h = (len(xs) - 1) * p / 100.0
    i = math.floor(h)
    f = h - i
    if f == 0 or xs[i] == xs[i + 1]:
        return xs[i]
    return xs[i] + f * (xs[i + 1] - xs[i])


def _slope(x: list[float], y: list[float]) -> float | None:
    """Least-squares slope of y on x (covariance / variance, as SQL's regr_slope); None under 2 points or no spread."""
    if len(x) < 2:
        return None
    xa, ya = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    var = float(((xa - xa.mean()) ** 2).mean())
    return float(((xa - xa.mean()) * (ya - ya.mean())).mean() / var) if var > 0 else None


def repeat_rates(measured: list[RequestRecord]) -> tuple[float | None, float]:
    """(offered, achieved) requests/s of one repeat's measured requests: slopes of the arrival count on the send
    times and of the ok completion count on the return times (0 achieved when under 2 requests completed)."""
    sends = sorted(r.start_ms / 1000.0 for r in measured)
    ends = sorted(
        (r.end_ms if r.end_ms is not None else r.start_ms + r.e2el_ms) / 1000.0
        for r in measured
        if r.status == "ok" and (r.end_ms is not None or r.e2el_ms is not None)
    )
    offered = _slope(sends, list(range(1, len(sends) + 1)))
    achieved = _slope(ends, list(range(1, len(ends) + 1)))
    return offered, achieved or 0.0


def step_effective_requests(runs: list[list[RequestRecord]], limits: dict[str, float]) -> tuple[int, float | None]:
    """(n_eff, deff): the requests a step's percentile claim counts when its requests are correlated
    (tasks.core.percentiles.effective_requests on each limited latency, every repeat's requests in send order): the
    fewest over the limits, with the design effect that set it (None: too few requests to say)."""
    ordered = [[slo_latencies(r) for r in sorted(run, key=lambda r: (r.start_ms, r.index))] for run in runs if run]
    n = sum(len(run) for run in ordered)
    found = [effective_requests([[x[k] for x in run] for run in ordered]) for k in sorted(limits)]
    deffs = [d for _, d in found if d is not None]
    return min((e for e, _ in found), default=n), max(deffs, default=None)


def counted_thresholds(n: int, n_eff: int, percentile: float, confidence: float) -> tuple[int, int]:
    """(allowed, shown_above) in requests of n when the claim counts n_eff of them: `over` of n counts as
    ceil(over n_eff / n), judged against allowed_over and missed_over at n_eff;
    the same as allowed_over(n) and missed_over(n) when n_eff = n."""
    if n_eff >= n:
        return allowed_over(n, percentile, confidence), missed_over(n, percentile, confidence)
    allowed = allowed_over(n_eff, percentile, confidence)
    above = missed_over(n_eff, percentile, confidence)
    return (allowed * n // n_eff if allowed >= 0 else -1), (above - 1) * n // n_eff + 1


def needed_counted(over: int, n: int, n_eff: int, percentile: float, confidence: float) -> int:
    """The requests a step with `over` of n over a limit needs, every further one within it, when its requests
    count as n_eff of n: requests_needed of the counted over, scaled back by n / n_eff (rounded up)."""
    counted = -(-over * n_eff // n) if n_eff < n else over
    m = requests_needed(counted, percentile, confidence) or 0
    return -(-m * n // n_eff) if n_eff < n else m


@dataclass(frozen=True)
class SloCheck:
    status: str  # met | missed | not_enough_requests | not_sustained | no_requests
    reason: str | None  # why not met, in words (v_slo_steps.slo_fail_reason)
    n: int  # measured requests, repeats pooled
    failed: int  # of which errored or incomplete
    allowed: int  # most requests over a limit with which it is still shown within (-1: none)
    over: dict[str, int] = field(default_factory=dict)  # requests over each limit (failed included)
    percentiles_ms: dict[str, float | None] = field(default_factory=dict)  # numpy's linear percentile; inf: a failure
    bounds_ms: dict[str, float | None] = field(default_factory=dict)  # upper confidence bound; None: n too small
    n_needed: int | None = None  # requests needed for the claim (not_enough_requests)
    offered_req_s: float | None = None  # rate steps: the measured arrival rate (mean over repeats)
    achieved_req_s: float | None = None  # rate steps: the measured completion rate (mean over repeats)
    n_effective: int | None = None  # the requests the claim counts (step_effective_requests); n when independent
    design_effect: float | None = None  # n / n_effective's divisor, >= 1 (None: too few requests to say)

    @property
    def met(self) -> bool:
        return self.status == "met"


def check_step(
    runs: list[list[RequestRecord]],
    limits: dict[str, float],
    percentile: float,
    confidence: float = 0.95,
    rate_step: bool = False,
    min_rate_ratio: float = 0.95,
    saturated: str | None = None,
) -> SloCheck:
    """Judge one step (its repeats' records) against `limits` at `percentile` and `confidence` (see the module);
    `saturated`: why a stopping rule ended the open-loop step early (its queue kept growing): not sustained."""
    measured_runs = [[r for r in run if not r.is_warmup] for run in runs]
    measured = [r for run in measured_runs for r in run]
    n, failed = len(measured), sum(r.status != "ok" for r in measured)
    if not n:
        return SloCheck("no_requests", "no measured request", 0, 0, -1)
    lat = [slo_latencies(r) for r in measured]
    n_eff, deff = step_effective_requests(measured_runs, limits)
    allowed, shown_above = counted_thresholds(n, n_eff, percentile, confidence)
    over = {k: sum(x[k] > limit for x in lat) for k, limit in limits.items()}
    pct = {k: linear_percentile([x[k] for x in lat], percentile) for k in limits}
    ranked = {k: sorted(x[k] for x in lat) for k in limits}
    bounds = {k: ranked[k][n - allowed - 1] if allowed >= 0 else None for k in limits}
    missed = [k for k in limits if over[k] >= shown_above]
    undecided = [k for k in limits if allowed < over[k] < shown_above]
    needed = max((needed_counted(over[k], n, n_eff, percentile, confidence) for k in undecided), default=0) or None
    offered = achieved = None
    if rate_step:
        rates = [(o, a) for o, a in map(repeat_rates, measured_runs) if o is not None]
        offered = sum(o for o, _ in rates) / len(rates) if rates else None
        achieved = sum(a for _, a in rates) / len(rates) if rates else None
    sustained = not saturated and (not rate_step or (offered is not None and achieved >= min_rate_ratio * offered))
    parts = [f"{failed} of {n} requests failed or did not complete"] if failed else []
    for k in missed:
        parts.append(f"p{percentile:g} {LATENCIES[k]} > {limits[k]:g} ms ({over[k]} of {n} over)")
    for k in undecided:
        parts.append(
            f"p{percentile:g} {LATENCIES[k]} <= {limits[k]:g} ms not shown at {confidence * 100:g} % "
            f"({over[k]} of {n} over, {max(allowed, 0)} allowed)"
        )
    if n_eff < n and (missed or undecided):
        parts.append(f"requests correlated (design effect {deff:.2f}): counted as {n_eff} of {n}")
    if saturated:
        parts.append(f"saturated: {saturated}")
    elif not sustained:
        parts.append(
            f"not sustained: achieved {achieved / offered * 100:.0f} % of the offered rate"
            if offered
            else "not sustained: no arrival rate (under 2 requests)"
        )
    if needed:
        parts.append(f"{needed} requests needed")
    status = "missed" if missed else "not_sustained" if not sustained else "not_enough_requests" if undecided else "met"
    return SloCheck(
        status,
        None if status == "met" else "; ".join(parts),
        n,
        failed,
        allowed,
        over,
        pct,
        bounds,
        needed,
        offered,
        achieved,
        n_eff,
        deff,
    )


@dataclass(frozen=True)
class StepEvidence:
    """What one configured step gives the decision's percentile claim, known before any work (`tradeoff check`)."""

    step: str  # c1, r2, sync, max, sweep rates, search
    loop: str  # closed | open
    gives: int  # measured requests, repeats pooled (at most: perf.warmup_s may drop some at a step's start)
    needs: int | None  # the fewest that show the percentile with none over a limit; None: p100, never
    counted: int | None = None  # the fewest that independent requests are counted as `needs` with 95 % of the time

    @property
    def enough(self) -> bool:
        return self.needs is not None and self.gives >= self.needs

    def said(self) -> str:
        """`tradeoff check`'s words for it: short, enough, or enough only when its requests are counted whole."""
        if not self.enough:
            return f"{self.needs - self.gives} short"
        if self.counted is not None and self.gives < self.counted:
            return f"enough only when counted whole: {self.counted} are counted as {self.needs} 95 % of the time"
        return "enough"


def step_evidence(cfg) -> list[StepEvidence]:
    """Per configured step, the measured requests it gives (repeats pooled) against what the decision's percentile
    needs at its confidence (tasks.core.percentiles.min_requests) and what independent requests need to be counted
    as that 95 % of the time (sized_requests): closed-loop steps (c<N>, the sweep's sync and max) give
    perf.num_prompts per repeat, rate steps (configured, the sweep's, the search's) what the decision sized them
    to, a replayed trace its requests times its repeats. Takes a RunConfig; [] without an SLO (the decision judges
    no step)."""
    from tasks.core.percentiles import min_requests, sized_requests

    perf, d = cfg.perf, cfg.decision
    limits = d.slo_limits()
    if not limits:
        return []
    conf, fixed = d.confidence, d.fixed_step_confidence()  # decision.extend: every look of a fixed step corrected

    def step(name: str, loop: str, gives: int, confidence: float, repeats: int = perf.repeats) -> StepEvidence:
        counted = sized_requests(d.percentile, confidence, repeats, len(limits))
        return StepEvidence(name, loop, gives, min_requests(d.percentile, confidence), counted)

    closed, rated = perf.repeats * perf.num_prompts, perf.repeats * perf.rate_measured()
    out = [step(f"c{c}", "closed", closed, fixed) for c in perf.concurrency or []]
    out += [step(f"r{r:g}", "open", rated, fixed) for r in perf.rates]
    if perf.sweep is not None:
        out += [step("sync", "closed", closed, conf), step("max", "closed", closed, conf)]
        if perf.sweep:
            out.append(step(f"sweep1-{perf.sweep}", "open", rated, fixed))
    if d.search is not None:
        out.append(step("search", "open", rated, conf))
    if perf.trace is not None:
        from tasks.perf.trace import load_trace

        t = perf.trace
        out.append(
            step("trace", "open", t.repeats * len(load_trace(t.path, "perf.trace", t.max_requests)), fixed, t.repeats)
        )
    return out


def evidence_lines(cfg) -> tuple[list[str], str | None]:
    """`tradeoff check`'s lines about the decision's percentile claim, and why the config is refused (None: it is
    not): refused when no step it runs can show the percentile even with every request within the limits, since
    the night would then end judging no variant on the SLO, and when a trace replayed beside other steps cannot
    (a variant ships only when it serves the trace within the SLO: none could)."""
    from tasks.core.percentiles import min_requests, sized_requests

    steps = step_evidence(cfg)
    if not steps:
        return ["decision: no SLO, no percentile claim to size"], None
    d = cfg.decision
    need = min_requests(d.percentile, d.confidence)
    one_over = requests_needed(1, d.percentile, d.confidence)
    head = (
        f"decision: p{d.percentile:g} at {d.confidence * 100:g} % needs >= {need} measured requests per step with "
        f"none over a limit ({one_over} with one over)"
    )
    perf = cfg.perf
    counted = sized_requests(d.percentile, d.confidence, perf.repeats, len(d.slo_limits()))
    head += (
        f"; independent requests are counted as {need} (their design effect estimated) 95 % of the time from "
        f"{counted} in {perf.repeats} repeat{'s' if perf.repeats > 1 else ''}: rate steps get {d.step_requests(perf)}"
        + (" (decision.min_requests)" if d.min_requests else "")
    )
    if d.extend is not None:
        head += (
            f"; decision.extend: a fixed step (c<N>, r<R>, sweep rates) or the trace lacking requests gets more "
            f"repeats within {d.extend.budget_s:g} s a variant, up to {d.extend.looks} looks, each judged at "
            f"{d.fixed_step_confidence() * 100:.4g} % ({min_requests(d.percentile, d.fixed_step_confidence())} "
            f"requests with none over)"
        )
    lines = [head] + [f"  {s.step} ({s.loop} loop): gives {s.gives} ({s.said()})" for s in steps]
    lines.append(
        "  if its requests are independent: where they are correlated (in flight together, a repeat's shared host "
        "state, a drift), a step's claim counts n / deff of them (deff: the design effect measured; a pair in one "
        "batch counts about once)"
    )
    trace = next((s for s in steps if s.step == "trace"), None)
    if trace is not None and not trace.enough and len(steps) > 1:
        per_replay = trace.gives // perf.trace.repeats
        return lines, (
            f"the replayed trace gives {trace.gives} measured requests and p{d.percentile:g} at "
            f"{d.confidence * 100:g} % needs {need}: no variant could show it serves the trace within the SLO, and "
            f"beside other steps a variant ships only when it does; set perf.trace.repeats to "
            f"{math.ceil(need / max(per_replay, 1))}, or ask a lower decision.percentile"
        )
    if any(s.enough for s in steps):
        return lines, None
    need = min(s.needs for s in steps)
    per_repeat = math.ceil(min(s.counted for s in steps) / perf.repeats)  # counted as `need` 95 % of the time
    why = (
        f"no step can show p{d.percentile:g} at {d.confidence * 100:g} %: each gives at most "
        f"{max(s.gives for s in steps)} measured requests and {need} are needed; raise perf.num_prompts to "
        f"{per_repeat} ({perf.repeats} repeat{'s' if perf.repeats > 1 else ''}), add perf.rates or decision.search "
        f"(rate steps are sized to it), or "
        f"ask a lower decision.percentile (p75 needs {requests_needed(0, 75.0, d.confidence)}, p90 "
        f"{requests_needed(0, 90.0, d.confidence)})"
    )
    return lines, why
