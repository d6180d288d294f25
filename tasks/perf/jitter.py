"""Jitter that measures the engine: TTFT and ITL coefficients of variation per repeat of a fixed-length workload.

Pooling TTFTs over repeats of a workload whose lengths spread measures the workload and the
run-to-run drift as much as the engine (with `len_spread: 0.2` the prompt lengths alone gave up
to 11.5 % TTFT CV). So the jitter figure is taken on a fixed-length workload, at concurrency 1
(the dedicated `jitter` scenario, see `needs_jitter_step`), and each repeat gives its own CV
(sample std / mean over that repeat's ok requests, or over its pooled chunk gaps for ITL); the
figure is the median of the repeats' CVs, with an interval over the repeats from the same
helper as the other per-repeat intervals (the log-scale t interval, see `_repeat_interval`),
NULL with the reason below 2 repeats. Plain Python.
"""

from __future__ import annotations

import numpy as np

from tasks.core.config import PerfSpec
from tasks.core.stat_tests import log_t_interval
from tasks.perf.metrics import RequestRecord, cv_pct

JITTER_LABEL = "jitter"


def needs_jitter_step(spec: PerfSpec) -> bool:
    """Whether the sweep runs the dedicated fixed-length concurrency-1 `jitter` scenario.

    `always`: yes; `off`: no; `auto`: when the configured workload is not fixed-length
    (len_spread > 0 or a dataset), so its own steps cannot give the figure.
    """
    if spec.jitter == "auto":
        return spec.len_spread > 0 or spec.dataset is not None
    return spec.jitter == "always"


def repeat_cvs(runs: list[list[RequestRecord]]) -> tuple[list[float | None], list[float | None]]:
    """Per repeat: (TTFT CV %, ITL CV %) over its measured ok requests; None where a repeat has < 2 values."""
    ttft, itl = [], []
    for run in runs:
        ok = [r for r in run if r.status == "ok" and not r.is_warmup]
        ttft.append(cv_pct([r.ttft_ms for r in ok]))
        itl.append(cv_pct([g for r in ok for g in r.itl_ms]))
    return ttft, itl


def _repeat_interval(values: list[float], level: float, resamples: int, seed: int) -> tuple[float | None, float | None]:
    """Interval of the repeats' jitter: the log-scale t interval over the per-repeat CVs that every per-repeat
    figure uses (tasks.core.stat_tests.log_t_interval; run-to-run variation only, NULL under 2 repeats, never
    below 0). The bootstrap it replaced under-covered with 2-3 repeats (docs/statistics.md)."""
    lo, hi, _ = log_t_interval(values, level)
    return lo, hi


def jitter_summary(
    runs: list[list[RequestRecord]], level: float = 0.95, resamples: int = 1000, seed: int = 0
) -> dict[str, float | str | None]:
    """`ttft_cv_pct_median`, `itl_cv_pct_median`, their `_ci_low/_ci_high`, and `jitter_note` (why any is NULL)."""
    out: dict[str, float | str | None] = {}
    notes = []
    for name, cvs in zip(("ttft", "itl"), repeat_cvs(runs)):
        vals = [v for v in cvs if v is not None]
        key = f"{name}_cv_pct_median"
        out[key] = float(np.median(vals)) if vals else None
        if len(vals) >= 2:
            out[f"{key}_ci_low"], out[f"{key}_ci_high"] = _repeat_interval(vals, level, resamples, seed)
        else:
            out[f"{key}_ci_low"] = out[f"{key}_ci_high"] = None
            what = "2 chunk gaps with a mean above 0" if name == "itl" else "2 ok requests"
            notes.append(
                f"{name.upper()} CV: {len(vals)} of {len(cvs)} repeats had one (>= {what}); "
                f"an interval needs 2 such repeats"
            )
    out["jitter_note"] = "; ".join(notes) or None
    return out
