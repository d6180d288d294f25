"""The decision's defaults as a one-row SQL view, `decision_defaults`, built from the config model's field defaults.

v_decision reads each setting from the run's recorded config (runs.config_json) and, where the run recorded none
(it ran before the setting existed), from this view: each default is declared once, in DecisionSpec (QualitySpec
for min_samples, tasks.decision.design for the power of the sample-size estimates). warehouse.db creates the view
before the others.
"""

from __future__ import annotations

from tasks.core.config import DecisionSpec, QualitySpec
from tasks.decision.design import DEFAULT_POWER

VIEW = "decision_defaults"


def decision_defaults() -> dict[str, float | str | bool | None]:
    """The defaults v_decision falls back on, by column name."""
    d = DecisionSpec()
    return {
        "percentile": d.percentile,
        "confidence": d.confidence,
        "min_rate_ratio": d.min_rate_ratio,
        "retention": d.retention,
        "margin_points": d.margin_points,
        "identity_gate": d.identity_gate,
        "optimise": d.optimise,
        "tie_tolerance_pct": d.tie_tolerance_pct,
        "min_samples": QualitySpec().min_samples,
        "power": DEFAULT_POWER,
    }


def _literal(x: float | str | bool | None) -> str:
    if x is None:
        return "null::double"
    if isinstance(x, bool):
        return "true" if x else "false"
    if isinstance(x, str):
        return "'" + x.replace("'", "''") + "'"
    return f"{x!r}::{'integer' if isinstance(x, int) else 'double'}"


def defaults_sql() -> str:
    """`select <default> as <column>, ...`: the body of the decision_defaults view."""
    return "select " + ", ".join(f"{_literal(v)} as {k}" for k, v in decision_defaults().items())
