"""A repeat that stands apart from its step's other repeats (issue 36, item 2): measured again later.

The host-noise guard (tasks.perf.host_noise) sees other processes; it does not see a stall it cannot attribute
(the engine's own hiccup, a hypervisor, a thermal throttle) nor a busy host it did not count. The repeats of a
step measure the same thing, so one that stands apart is suspect whatever its cause. The rule is stated and
robust (Iglewicz & Hoaglin 1993, "How to detect and handle outliers"; pyperf and hyperfine warn on outliers of the
same kind): per step with at least MIN_REPEATS repeats, each repeat's median TTFT and median TPOT over its ok
measured requests; a repeat is an outlier when its modified z-score, 0.6745 (x - median) / MAD over the repeats,
exceeds MODIFIED_Z (3.5) on the slow side, the MAD floored at MAD_FLOOR (10 %) of the median so that repeats
agreeing closely never make a small difference look large (a repeat must then be ~52 % slower than the median).
A faster repeat is not a disturbance and is kept. benchmarks/outlier_rule.py, with known truth: with no
disturbance and repeats 15 % apart (cv on the log scale) it fires on 1.1-1.6 % of steps (3 and 6 repeats), 6-10 %
at 25 %; a repeat slowed 10x is caught 99.6-100 % of the time, 2x 36-100 % (more at less noise). Each false alarm
costs one repeat measured again, and replacing a slow repeat by chance biases the kept figures slightly fast:
that is why the floor is high.

tasks.perf.sweep.run_steps measures a flagged repeat again once, after the variant's other repeats (later in the
night, not in the same minute), within the host guard's re-measuring budget; the new window replaces it, the
dropped one is named in the kept one's `remeasured`, and a repeat that stands apart again is kept and marked
`disturbed`.
"""

from __future__ import annotations

from statistics import median

from tasks.perf.metrics import RequestRecord

MODIFIED_Z = 3.5
MAD_FLOOR = 0.10
MIN_REPEATS = 3
FIGURES = {"ttft_ms": "TTFT", "tpot_ms": "TPOT"}


def outlier_repeats(runs: list[list[RequestRecord]]) -> dict[int, str]:
    """{position in `runs`: why} for the repeats (each a list of its requests) whose median TTFT or TPOT stands
    apart on the slow side (see the module); {} under MIN_REPEATS repeats with the figure."""
    out: dict[int, str] = {}
    for key, name in FIGURES.items():
        meds = {}
        for i, run in enumerate(runs):
            xs = [getattr(r, key) for r in run if r.status == "ok" and not r.is_warmup and getattr(r, key) is not None]
            if xs:
                meds[i] = median(xs)
        if len(meds) < MIN_REPEATS:
            continue
        mid = median(meds.values())
        scale = max(median(abs(x - mid) for x in meds.values()), MAD_FLOOR * abs(mid))
        if scale <= 0:
            continue
        for i, x in meds.items():
            z = 0.6745 * (x - mid) / scale
            if z > MODIFIED_Z and i not in out:
                out[i] = (
                    f"outlier: median {name} {x:.1f} ms against the repeats' {mid:.1f} ms (modified z {z:.1f} > "
                    f"{MODIFIED_Z:g})"
                )
    return out
