"""The decision's defaults as a one-row SQL view, `decision_defaults`, built from the config model's field defaults.

v_decision reads each setting from the run's recorded config (runs.config_json) and, where the run recorded none
(it ran before the setting existed), from this view: each default is declared once, in DecisionSpec (QualitySpec
for min_samples, config.DEFAULT_POWER for the power of the sample-size estimates). warehouse.db creates the view
before the others.
"""

from __future__ import annotations

from tasks.core.config import DEFAULT_POWER, DecisionSpec, QualitySpec
from tasks.decision.what_if import literal

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


def _typed(x: float | str | bool | None) -> str:
    """what_if.literal, typed as the column it stands for (an integer stays one; a null is a double)."""
    is_int = isinstance(x, int) and not isinstance(x, bool)
    return literal(x) + ("::integer" if is_int else "::double" if x is None or isinstance(x, float) else "")


def defaults_sql() -> str:
    """`select <default> as <column>, ...`: the body of the decision_defaults view."""
    return "select " + ", ".join(f"{_typed(v)} as {k}" for k, v in decision_defaults().items())
