"""The gate's power, stated before the evidence: for each gating metric of a config, the items it plans (first look
and last), the discordance it assumes, the chance that a truly equal variant passes, and the items for 80 %.

`tradeoff check CONFIG` prints it, the nightly logs it first and records it in the run row (runs.gate_plan_json),
and the report shows it. The discordance (the share of pairs whose right/wrong outcome differs between a variant
and the reference) is what decides the power of a paired gate; it is taken from the warehouse where the same
config's previous nights measured it (per variant: its lost + gained pairs over its paired samples, the last
HISTORY_NIGHTS nights), else DEFAULT_DISCORDANCE, said so. A gate whose power is below LOW_POWER gets one line
naming the fix: the items that would give 80 % and the margin that would at the planned items.

The exact power computation is tasks/decision/design.py; benchmarks/gate_power.py checks it by simulation.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path

from tasks.core.config import DEFAULT_POWER, RunConfig
from tasks.decision.adaptive import adaptive_suites, gating_metrics
from tasks.decision.design import n_for_power, operating
from tasks.decision.gate import Look

# An equal-quality variant flips 2-5 % of right/wrong items against its reference (INT8/INT4 on GSM8K-like
# suites): the upper end is assumed where no night measured it, so the stated power is not optimistic.
DEFAULT_DISCORDANCE = 0.05
# A variant on the reference's weights that changes the engine's settings or decoding (threads, batching,
# speculative decoding with greedy verification) computes the same arithmetic or nearly: 0 of 200 arithmetic
# answers differed with 2 decode threads instead of 1, 1 of 80 with prompt-lookup speculation (README).
SAME_WEIGHTS_DISCORDANCE = 0.01
# Retention's threshold is a share of the reference's score: assumed 0.5 where no night measured it.
DEFAULT_REFERENCE = 0.5
HISTORY_NIGHTS = 7
LOW_POWER = 0.5


@dataclass(frozen=True)
class Assumed:
    """What a plan assumes of one variant's pairs, and where it comes from."""

    discordance: float
    source: str
    reference_value: float | None = None


@dataclass(frozen=True)
class GatePlan:
    """One gating metric's design and what it can decide, for one variant's assumed discordance (variant None: a
    variant without previous nights)."""

    metric: str
    variant: str | None
    basis: str  # margin_points | retention
    threshold: float  # the delta at which the gate's threshold is met (negative: a loss)
    first: int | None  # items at the first look (None: the suite's whole task, unknown before the run)
    last: int | None  # items at the last look (= first for a fixed design)
    confidence: float
    discordance: float
    source: str
    power: float | None  # chance that a truly equal variant passes at the planned items
    n_needed: int | None  # last look (items) for 80 % power under this design
    margin_for_power: float | None  # margin (points) with 80 % power at the planned items (margin basis)

    @property
    def adaptive(self) -> bool:
        return self.first is not None and self.last is not None and self.last > self.first

    def design_text(self) -> str:
        gate = (
            f"margin {-self.threshold * 100:g} points"
            if self.basis == "margin_points"
            else f"retention (threshold {self.threshold * 100:+.2f} points)"
        )
        if self.last is None:
            items = "the whole task"
        elif self.adaptive:
            items = f"adaptive {self.first} -> {self.last} items"
        else:
            items = f"{self.last} items"
        return f"{gate}, {items}, {self.confidence * 100:g} %"

    def line(self) -> str:
        power = (
            f"passes {_pct(self.power)} if its quality is equal"
            if self.power is not None
            else "its power at the whole task is not known before the run"
        )
        need = f"80 % power at {self.n_needed:,} items" if self.n_needed is not None else "80 % power out of reach"
        who = f" for {self.variant}" if self.variant else ""
        return (
            f"gate {self.metric} ({self.design_text()}){who}: {power} "
            f"(discordance {self.discordance * 100:.1f} %, {self.source}); {need}"
        )

    def fix(self) -> str | None:
        """One line naming the fix, when an equal variant passes less than LOW_POWER of the time."""
        if self.power is None or self.power >= LOW_POWER:
            return None
        ways = []
        if self.n_needed is not None:
            ways.append(f"plan {self.n_needed:,} items (quality.adaptive.max_items or the suite's limit)")
        if self.margin_for_power is not None:
            ways.append(f"a margin of {self.margin_for_power:.1f} points (decision.margin_points)")
        ways.append("a larger suite")
        who = self.variant or "a variant"
        return (
            f"warning: gate {self.metric} cannot pass {who} even if its quality is equal: {_pct(self.power)} power "
            f"at {self.last} items; fix: " + ", or ".join(ways)
        )


def _pct(x: float) -> str:
    return f"{x * 100:.0f} %"


def planned_items(cfg: RunConfig, metric: str) -> tuple[int | None, int | None]:
    """(first look, last look) of a gating metric's suite: its limit, and quality.adaptive.max_items when it
    extends; (None, None) when the suite runs its whole task (lm-eval without a limit)."""
    suite = metric.partition(".")[0]
    spec = next((s for s in cfg.quality.suites if s.key == suite), None)
    if spec is None or spec.limit is None:
        return None, None
    if suite in adaptive_suites(cfg):
        return spec.limit, max(spec.limit, cfg.quality.adaptive.max_items)
    return spec.limit, spec.limit


def plan_gate(cfg: RunConfig, metric: str, assumed: Assumed, variant: str | None = None) -> GatePlan:
    """The plan of one gating metric for one assumption (a truly equal variant: loses and gains half the
    discordance each)."""
    first, last = planned_items(cfg, metric)
    basis = "margin_points" if cfg.decision.margin_points is not None else "retention"
    ref = assumed.reference_value if assumed.reference_value is not None else DEFAULT_REFERENCE
    threshold = threshold_of(cfg, "fraction", ref)  # a gating metric planned for is a right/wrong share
    conf, min_n, half = cfg.quality.confidence, cfg.quality.min_samples, assumed.discordance / 2.0
    seq = first if first is not None and last is not None and last > first else None
    power = None if last is None else operating(half, half, threshold, conf, last, seq, min_n).passes
    n_needed = n_for_power(half, half, threshold, conf, DEFAULT_POWER, seq, min_n)
    margin = None
    if basis == "margin_points" and last is not None and power is not None and power < DEFAULT_POWER:
        margin = _margin_for_power(half, conf, last, seq, min_n)
    return GatePlan(
        metric,
        variant,
        basis,
        threshold,
        first,
        last,
        conf,
        assumed.discordance,
        assumed.source,
        power,
        n_needed,
        margin,
    )


def _margin_for_power(half: float, conf: float, last: int, first: int | None, min_n: int) -> float | None:
    """The smallest margin (points, to 0.1) at which an equal variant passes with 80 % at the planned items."""
    lo, hi = 0.0, 50.0
    if operating(half, half, -hi / 100, conf, last, first, min_n).passes < DEFAULT_POWER:
        return None
    while hi - lo > 0.05:
        mid = (lo + hi) / 2
        lo, hi = (
            (mid, hi)
            if operating(half, half, -mid / 100, conf, last, first, min_n).passes < DEFAULT_POWER
            else (
                lo,
                mid,
            )
        )
    return math.ceil(hi * 10) / 10


def discordance_history(warehouse: Path, config_name: str, metrics: list[str]) -> dict[tuple[str, str], Assumed]:
    """(metric, variant) -> the discordance the config's last HISTORY_NIGHTS nights measured for that variant
    (its lost + gained pairs over its pairs; quality_deltas), read-only; {} without a warehouse or rows."""
    if not warehouse.is_file() or not metrics:
        return {}
    import duckdb

    try:
        con = duckdb.connect(str(warehouse), read_only=True)
    except duckdb.Error:
        return {}
    try:
        rows = con.execute(
            """
            with nights as (
                select run_id from runs where config_name = ? order by started_at desc limit ?
            )
            select d.suite || '.' || d.metric as metric, d.variant,
                   sum(d.n_lost + d.n_gained) as discordant, sum(d.n) as n, count(distinct d.run_id) as nights,
                   avg(d.reference_value) as reference_value
            from quality_deltas as d join nights using (run_id)
            where d.n_lost is not null and d.n > 0 and list_contains(?::varchar[], d.suite || '.' || d.metric)
            group by all""",
            [config_name, HISTORY_NIGHTS, metrics],
        ).fetchall()
    except duckdb.Error:
        return {}  # a warehouse older than the tables the query reads: no history
    finally:
        con.close()
    return {
        (m, v): Assumed(
            k / n,
            f"measured: {int(k)} of {int(n):,} pairs over {nights} night{'s' if nights != 1 else ''}",
            ref,
        )
        for m, v, k, n, nights, ref in rows
    }


def assumed_for(cfg: RunConfig, variant: str, metric: str, history: dict[tuple[str, str], Assumed]) -> Assumed:
    """What the plan assumes of a variant's pairs: its previous nights, else by what it changes (the reference's
    weights: SAME_WEIGHTS_DISCORDANCE; other weights: DEFAULT_DISCORDANCE)."""
    if (metric, variant) in history:
        return history[(metric, variant)]
    v, ref = cfg.variant(variant), cfg.reference
    if (v.model, v.quantization) == (ref.model, ref.quantization):
        return Assumed(SAME_WEIGHTS_DISCORDANCE, "assumed for the reference's weights; no night measured it")
    return Assumed(DEFAULT_DISCORDANCE, "assumed for other weights; no night measured it")


def plan_config(cfg: RunConfig, warehouse: Path | None = None) -> list[GatePlan]:
    """Every gating metric's plan for every non-reference variant of the config, each with the discordance its
    previous nights measured in the warehouse, or the one assumed for what it changes."""
    metrics = gating_metrics(cfg)
    history = discordance_history(warehouse, cfg.name, metrics) if warehouse is not None else {}
    return [
        plan_gate(cfg, m, assumed_for(cfg, v.name, m, history), v.name)
        for m in metrics
        for v in cfg.variants
        if not v.reference
    ]


def plan_lines(plans: list[GatePlan]) -> list[str]:
    """The plans in words, each fix line after its plan."""
    out = []
    for p in plans:
        out.append(p.line())
        if p.fix():
            out.append(p.fix())
    return out


def plan_json(plans: list[GatePlan]) -> str:
    """The plans as recorded in runs.gate_plan_json (a list of objects, the fields of GatePlan)."""
    return json.dumps([asdict(p) for p in plans])


def threshold_of(cfg: RunConfig, unit: str | None, reference_value: float | None) -> float | None:
    """The delta at the run's gate threshold for a higher-is-better metric: -margin for a fraction metric with a
    margin, else (retention - 1) x the reference's score; None without a positive reference score."""
    d = cfg.decision
    if d.margin_points is not None and unit == "fraction":
        return -d.margin_points / 100.0
    if reference_value is None or reference_value <= 0:
        return None
    return (d.retention - 1.0) * reference_value


def add_design_needs(rows: list[dict], cfg: RunConfig, looks: dict[str, Look] | None = None) -> list[dict]:
    """Each 0/1 gating metric's row gets the samples a decision needs under the design in use (the adaptive
    suite's looks from its first, else a fixed sample) at the run's threshold: if truly equal with the row's
    discordance, and at its observed loss and gain rates (to pass, or to fail when its estimate is past the
    threshold). Exact (tasks.decision.design.n_for_power); NULL past its cap."""
    gating, q = set(gating_metrics(cfg)), cfg.quality
    for r in rows:
        n = r.get("n") or 0
        if f"{r['suite']}.{r['metric']}" not in gating or r.get("n_lost") is None or n == 0:
            continue
        if not r.get("higher_is_better", True) or r.get("delta") is None:
            continue
        threshold = threshold_of(cfg, r.get("unit"), r.get("reference_value"))
        if threshold is None:
            continue
        look = (looks or {}).get(r["suite"])
        first = look.first if look is not None else None
        lost, gained = r["n_lost"] / n, r["n_gained"] / n
        half = (lost + gained) / 2
        decide = "pass" if r["delta"] >= threshold else "fail"
        r["n_needed_threshold"] = threshold
        r["n_needed_if_equal"] = n_for_power(
            half, half, threshold, q.confidence, first=first, min_samples=q.min_samples
        )
        r["n_needed"] = n_for_power(
            lost, gained, threshold, q.confidence, first=first, min_samples=q.min_samples, decide=decide
        )
    return rows
