"""The quality gate in the warehouse: v_quality_gate judges exactly as tasks/decision/gate.py:judge (the rule the
nightly's adaptive suites and benchmarks/gate_error.py use), and `tradeoff recommend` says no more than each
verdict's bound supports: pass, fail, not enough evidence (both n-needed figures), margin, identity."""

from __future__ import annotations

import math
import re
import statistics
from pathlib import Path

import numpy as np
import pytest

from tasks.core.stat_tests import tango_interval
from tasks.decision.gate import judge
from tasks.quality.deltas import add_identity_bounds, delta_row
from tests.helpers.decision_run import RETENTION, N, by_variant, delta, step, ttfts, write_decision_run
from tests.helpers.queries import rows
from warehouse.db import load_run, open_warehouse

GATE_COLUMNS = (
    "reference_value",
    "value",
    "delta",
    "ci_low",
    "ci_high",
    "n",
    "p_value",
    "n_lost",
    "n_gained",
    "retention_ci_low",
    "retention_ci_high",
    "look_confidence",
    "looks",
    "looks_planned",
    "identity_n",
    "identity_same",
    "identity_flip_high",
    "identity_retention_low",
    "unit",
    "higher_is_better",
)


def simulated_rows() -> list[dict]:
    """quality_deltas rows as the pipeline computes them (delta_row on paired 0/1 samples), over the gate's branches:
    sizes below and above min_samples, no pair differing, losses only, gains, a lower-is-better metric."""
    rng = np.random.default_rng(7)
    out = []
    for n, p_ref, p_lost, p_gain, hib in [
        (20, 0.5, 0.0, 0.0, True),
        (80, 0.25, 0.0, 0.0, True),
        (2000, 0.5, 0.0, 0.0, True),
        (80, 0.5, 0.1, 0.0, True),
        (200, 0.5, 0.3, 0.0, True),
        (500, 0.6, 0.01, 0.01, True),
        (1000, 0.5, 0.002, 0.004, True),
        (300, 0.1, 0.02, 0.0, False),
        (3000, 0.3, 0.0, 0.001, True),
    ]:
        ref = (rng.random(n) < p_ref).astype(float)
        u = rng.random(n)
        var = np.where((ref == 1) & (u < p_lost / p_ref), 0.0, ref)
        var = np.where((ref == 0) & (u < p_gain / (1 - p_ref)), 1.0, var)
        samples = lambda v, x: [
            {
                "variant": v,
                "suite": "arithmetic",
                "sample_id": f"s{i}",
                "score": s,
                "valid": True,
                "details": "{}",
            }
            for i, s in enumerate(x)
        ]
        score = lambda v: {
            "run_id": "r",
            "variant": v,
            "suite": "arithmetic",
            "metric": "accuracy",
            "unit": "fraction",
            "higher_is_better": hib,
            "value": None,
            "n": n,
            "sample_stat": "mean(score)",
        }
        out.append(
            delta_row(score("var"), score("ref"), samples("ref", ref), samples("var", var), reference_variant="ref")
        )
    identity = [dict(r) for r in out[1:3]]
    add_identity_bounds(identity[:1], 6, 6, 0.95)  # too few outputs to pass a 99 % gate
    add_identity_bounds(identity[1:], 3000, 3000, 0.95)  # enough: at most 0.12 % differ
    no_ci = {**out[3], "ci_low": None, "ci_high": None, "retention_ci_low": None, "retention_ci_high": None}
    return out + identity + [no_ci]


@pytest.mark.parametrize(
    "decision",
    [
        {},
        {"retention": 0.9},
        {"margin_points": 2.0},
        {"identity_gate": True},
        {"identity_gate": True, "margin_points": 5.0},
    ],
)
def test_sql_judges_as_python(tmp_path: Path, decision: dict) -> None:
    sims = simulated_rows()
    variants = {"ref": {"ref": True, "accuracy": 0.5}}
    variants.update({f"v{i}": {"accuracy": 0.5, "delta": {k: r[k] for k in GATE_COLUMNS}} for i, r in enumerate(sims)})
    db = tmp_path / "wh.duckdb"
    load_run(write_decision_run(tmp_path / "runs", "g1", variants, decision=decision), db)
    with open_warehouse(db, read_only=True) as con:
        got = {r["variant"]: r for r in rows(con, "select * from v_quality_gate")}
    seen = set()
    for i, r in enumerate(sims):
        py = judge(
            r, decision.get("retention", 0.99), decision.get("margin_points"), 30, decision.get("identity_gate", False)
        )
        assert got[f"v{i}"]["gate"] == py, (i, r, got[f"v{i}"]["gate_reason"])
        seen.add(py)
    assert got["ref"]["gate"] == "pass"
    assert seen >= {"pass", "fail", "not_enough_evidence"} or decision == {"retention": 0.9}


def test_no_pair_differing_is_no_longer_a_pass(tmp_path: Path) -> None:
    # 0 discordant pairs of 80 at p_ref 0.25: Tango +-4.6 points, retention 81.7-118.3 %; it used to be [100, 100] %
    lo, hi = tango_interval(0, 0, 80, 0.95)
    assert (lo, hi) == (pytest.approx(-0.0458, abs=5e-4), pytest.approx(0.0458, abs=5e-4))
    variants = {
        "ref": {"ref": True, "accuracy": 0.25},
        "same": {"accuracy": 0.25, "delta": delta(0.25, 0.25, (lo, hi), lost=0, gained=0, p_value=1.0)},
    }
    db = tmp_path / "wh.duckdb"
    load_run(write_decision_run(tmp_path / "runs", "z0", variants, decision=RETENTION), db)
    with open_warehouse(db, read_only=True) as con:
        (g,) = rows(con, "select * from v_quality_gate where variant = 'same'")
    assert g["gate"] == "not_enough_evidence" and g["retention_ci_low"] == pytest.approx(1 + lo / 0.25)
    # none differing: the n at which Tango's interval of none differing clears 99 % of 0.25 (a 0.25-point margin)
    assert g["n_needed_if_equal"] == pytest.approx(1.96**2 * (1 / 0.0025 - 1), rel=0.005) and g["n_needed"] is None


def verdict_kinds() -> dict[str, dict]:
    """One variant per verdict kind of the gate, every one faster than the reference."""
    steps = lambda req_s: [step("c1", 1, req_s, ttfts(N, 300))]
    equal = tango_interval(0, 0, 3000, 0.95)
    return {
        "ref": {"ref": True, "steps": steps(0.5), "accuracy": 0.25},
        # 3000 pairs, none differing: 95 % CI of the change +-0.13 points: retention >= 99.5 %
        "passes": {
            "steps": steps(1.0),
            "accuracy": 0.25,
            "delta": delta(0.25, 0.25, equal, n=3000, lost=0, gained=0, p_value=1.0),
        },
        "fails": {
            "steps": steps(2.0),
            "accuracy": 0.0125,
            "delta": delta(0.25, 0.0125, tango_interval(19, 0, 80, 0.95), lost=19, gained=0),
        },
        # the demo's q4_1-spec: one gain of 80 at p_ref 0.25 (+1.25 points)
        "undecided": {
            "steps": steps(1.5),
            "accuracy": 0.2625,
            "delta": delta(0.25, 0.2625, tango_interval(0, 1, 80, 0.95), lost=0, gained=1),
        },
    }


def test_each_verdict_kind_says_what_its_bound_supports(tmp_path: Path) -> None:
    from tasks.report.recommend import format_recommendation

    db = tmp_path / "wh.duckdb"
    load_run(write_decision_run(tmp_path / "runs", "k1", verdict_kinds(), decision=RETENTION), db)
    with open_warehouse(db, read_only=True) as con:
        text = format_recommendation(con, "k1")
        got = by_variant(con, "k1")
    lines = text.splitlines()
    assert got["passes"]["verdict"] == "recommended" and got["undecided"]["verdict"] == "not_enough_evidence"
    assert (
        lines[2].startswith("Ship passes: ")
        and ("keeps 100.0 % of arithmetic.accuracy (95 % CI 99.5-100.5 %, 3,000 pairs)") in lines[2]
    )
    assert (
        "fails is faster (2.00x the req/s) but keeps 5.0 % of arithmetic.accuracy (95 % CI 0.0-36.9 %, 80 pairs): "
        "fails the 99.0 % gate."
    ) in lines
    (undecided,) = [x for x in lines if x.startswith("undecided")]
    # the issue's figures: ~15,700 pairs if truly equal at 1.25 % discordance, ~431 at the observed +1.25 points
    assert undecided.startswith(
        "undecided is faster (1.50x the req/s) but is not measured well enough: keeps 105.0 % "
        "of arithmetic.accuracy (95 % CI "
    )
    assert (
        "which straddles the 99.0 % target; to decide: ~15,7" in undecided
        and "paired samples if it is truly equal "
        "(1.25 % of pairs differ), ~431 if the observed +1.25 points are the truth (have 80)."
        in undecided
    )
    # A&S's z (DuckDB has no inverse normal) against Python's NormalDist: within 0.5 %
    z = statistics.NormalDist().inv_cdf
    exact = ((z(0.975) + z(0.8)) * math.sqrt(1 / 80) / 0.0025) ** 2
    assert (
        got["undecided"]["n_needed_if_equal"] == pytest.approx(exact, rel=0.005) and got["undecided"]["n_needed"] == 431
    )
    assert re.search(r"\| +15\d{3} / 431 \|", text)  # the table's n needed: if equal / observed


def test_margin_points_and_identity_gate(tmp_path: Path) -> None:
    from tasks.report.recommend import format_recommendation

    variants = verdict_kinds()
    # the undecided variant is speculative with 3,000 of 3,000 outputs identical to plain decoding (the reference)
    flip = 1 - 0.025 ** (1 / 3000)
    variants["undecided"]["delta"].update(
        identity_n=3000, identity_same=3000, identity_flip_high=flip, identity_retention_low=(0.25 - flip) / 0.25
    )
    db = tmp_path / "wh.duckdb"
    load_run(write_decision_run(tmp_path / "runs", "m1", variants, decision={**RETENTION, "identity_gate": True}), db)
    with open_warehouse(db, read_only=True) as con:
        text = format_recommendation(con, "m1")
        ident = by_variant(con, "m1")["undecided"]
        margin = format_recommendation(con, "m1", {"margin_points": 5.0, "identity_gate": False})
        by_margin = by_variant(con, "m1")
    # identity evidence passes it, and it is the fastest: the pick, said with what the pass rests on
    assert ident["gate"] == "pass" and ident["gate_basis"] == "identity" and ident["verdict"] == "recommended"
    line = text.splitlines()[2]
    assert line.startswith("Ship undecided: ")
    assert (
        "lossless by construction and shown so: 3000 of 3000 greedy outputs identical to plain decoding, so at most "
        "0.12 % of outputs differ (97.5 % upper bound) and it keeps at least 99.5 % of arithmetic.accuracy (if its "
        "outputs on that suite differ no more often than on the identity prompts)"
    ) in line
    # a 5-point margin: the demo-sized variant (+1.25 points, CI -3.3..+6.8) passes, the failing one still fails
    assert (
        "at most 5 points lost" in margin.splitlines()[0] and "(overridden: --margin-points, --identity-gate)" in margin
    )
    assert by_margin["undecided"]["gate"] == "pass" and by_margin["undecided"]["gate_basis"] == "margin_points"
    assert by_margin["fails"]["gate"] == "fail"
    assert "changes arithmetic.accuracy by +1.25 points (95 % CI -3." in margin
    assert "fails the 5-point margin." in margin
