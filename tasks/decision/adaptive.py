"""Evidence gathered until the gate decides: which suites extend, the looks, and the time budget.

With `quality.adaptive: {max_items, budget_s}`, every suite that holds a gating metric
(decision.gate_metrics, else quality.primary) and can extend its sample (Suite.extendable: the
arithmetic suite's generated items) is looked at in planned, doubling sizes
(tasks.decision.design.look_schedule) up to max_items:

- the reference answers every planned item up front, in its own flow run (the only time it is
  served), so that every variant can be paired on any item it may need. Measured on the demo's
  arithmetic suite this costs ~(max_items - limit) x the per-item time once per run
  (docs/decision.md), which is cheaper than serving the reference again in each variant's run;
- a variant extends while its gate on that suite is undecided (`sequential_gate`), to the next
  planned size, as long as the reference has those items and the next batch would likely end
  within `budget_s` (`Budget`); each look's interval is taken at the look's own level (alpha
  spending, tasks.decision.design.look_level), so the looks do not inflate the false pass.

`sequential_gate` is the loop itself with the measuring and the judging passed in: the nightly
(tasks/quality/suite_loop.py) passes real suite runs, benchmarks/gate_error.py simulated samples.
"""

from __future__ import annotations

from tasks.core.config import RunConfig
from tasks.core.registry import SUITES
from tasks.decision.gate import UNDECIDED, combine, judge


def gating_metrics(cfg: RunConfig) -> list[str]:
    """'suite.metric' of the gate: decision.gate_metrics, else the primary metric (as v_decision)."""
    return list(cfg.decision.gate_metrics or ([cfg.quality.primary] if cfg.quality.primary else []))


def adaptive_suites(cfg: RunConfig) -> dict[str, list[str]]:
    """Suite key -> its gating metric names, for the suites that extend (none without quality.adaptive)."""
    if cfg.quality.adaptive is None:
        return {}
    out: dict[str, list[str]] = {}
    extendable = {s.key for s in cfg.quality.suites if s.name in SUITES and SUITES[s.name].extendable}
    for m in gating_metrics(cfg):
        suite, _, metric = m.partition(".")
        if suite in extendable:
            out.setdefault(suite, []).append(metric)
    return out


def judge_rows(rows: list[dict], metrics: list[str], cfg: RunConfig) -> str:
    """The combined gate of a suite's gating metrics on its delta rows (undecided for a metric without a row)."""
    d = cfg.decision
    by_metric = {r["metric"]: r for r in rows}
    return combine(
        [
            judge(by_metric[m], d.retention, d.margin_points, cfg.quality.min_samples, d.identity_gate)
            if m in by_metric
            else UNDECIDED
            for m in metrics
        ]
    )
