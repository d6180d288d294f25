"""The decision (v_decision -> v_slo_steps, v_quality_gate -> v_recommendation, `tradeoff recommend`) on hand-made
warehouse rows, and the sustainable-load search against a server whose latency the test sets."""

from __future__ import annotations

import json
import math
import statistics
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from tasks.core.config import DecisionSpec, LoadSearchSpec, PerfSpec, RunConfig
from tasks.core.errors import ConfigError
from tests.integration.test_warehouse import rows
from warehouse.contract import write_table
from warehouse.db import load_run, open_warehouse

STARTED = datetime(2025, 2, 3, 4, 5, 6, tzinfo=timezone.utc)
SERVER_SLO = {"goodput_slo": "mlperf-llama2-70b-server", "slo_ttft_ms": 2000.0, "slo_tpot_ms": 200.0}


def step(scenario: str, concurrency: int, req_s: float, ttft_ms: list[float], *, tpot_ms: float = 20.0,
         errors: int = 0, rate: float | None = None, tps: float | None = None, j_per_token: float | None = None,
         energy_note: str | None = "no NVML, no RAPL") -> dict:
    """One perf step: its measured requests' TTFTs (+ `errors` failed ones) and its summary figures."""
    return dict(scenario=scenario, concurrency=concurrency, req_s=req_s, ttft_ms=ttft_ms, tpot_ms=tpot_ms,
                errors=errors, rate=rate, tps=tps if tps is not None else req_s * 64,
                j_per_token=j_per_token, energy_note=None if j_per_token is not None else energy_note)


def delta(ref: float, value: float, ci: tuple[float, float] | None, n: int = 80, p_value: float | None = 0.5,
          lost: int | None = None, gained: int | None = None, **more) -> dict:
    """A quality_deltas row of arithmetic.accuracy (a right/wrong metric), its gate bounds as the pipeline stores them."""
    from tasks.quality.gate import retention_interval

    low, high = retention_interval(ref, *ci, True) if ci else (None, None)
    return dict(reference_value=ref, value=value, delta=value - ref, ci_low=ci[0] if ci else None,
                ci_high=ci[1] if ci else None, n=n, p_value=p_value, n_lost=lost, n_gained=gained,
                retention_ci_low=low, retention_ci_high=high, look_confidence=0.95, looks=1, looks_planned=1, **more)


def no_pair_differs(n: int) -> tuple[float, float]:
    """Tango's 95 % interval when none of `n` pairs differs (not [0, 0]: +-4.6 points at n = 80)."""
    from tasks.core.stat_tests import tango_interval

    return tango_interval(0, 0, n, 0.95)


def write_decision_run(root: Path, run_id: str, variants: dict[str, dict], decision: dict | None = None,
                       started_at: datetime = STARTED, min_samples: int = 30,
                       primary: str | None = "arithmetic.accuracy") -> Path:
    """A run as the flow writes it. variants: name -> {ref, status, error, steps, accuracy, delta, samples, cost}.

    `decision` is a DecisionSpec mapping stored in config_json as the flow stores it (None: a run recorded
    before the decision block existed).
    """
    res = root / run_id / "results"
    config = {"name": "demo", "quality": {"min_samples": min_samples}}
    if decision is not None:
        config["decision"] = DecisionSpec.model_validate(decision).model_dump(mode="json")
    ref = next(n for n, v in variants.items() if v.get("ref"))
    write_table(res, "runs", "run", [{"run_id": run_id, "config_name": "demo", "started_at": started_at, "status": "ok",
                                      "hardware_id": "hw1", "reference_variant": ref, "primary_quality_metric": primary,
                                      "config_json": json.dumps(config)}])
    for name, v in variants.items():
        cost = v.get("cost", {})
        write_table(res, "variants", name, [{"run_id": run_id, "variant": name, "engine": "llama.cpp", "quantization": name,
                                             "is_reference": bool(v.get("ref")), "status": v.get("status", "ok"),
                                             "error": v.get("error"), **cost}])
        summary, requests = [], []
        for s in v.get("steps", []):
            n_ok = len(s["ttft_ms"])
            summary.append({"run_id": run_id, "variant": name, "scenario": s["scenario"], "concurrency": s["concurrency"],
                            "load_kind": "rate" if s["rate"] else "concurrency", "request_rate": s["rate"],
                            "num_requests": n_ok + s["errors"], "num_ok": n_ok, "num_errors": s["errors"],
                            "duration_s": n_ok / s["req_s"], "request_throughput": s["req_s"],
                            "output_throughput": s["tps"], "energy_j_per_token": s["j_per_token"],
                            "energy_note": s["energy_note"], **SERVER_SLO})
            requests += [{"run_id": run_id, "variant": name, "scenario": s["scenario"], "concurrency": s["concurrency"],
                          "request_index": i, "is_warmup": False, "status": "ok", "ttft_ms": t, "tpot_ms": s["tpot_ms"],
                          "e2el_ms": t + 63 * s["tpot_ms"], "output_tokens": 64,
                          "chunk_offsets_ms": [t + k * s["tpot_ms"] for k in range(64)]}
                         for i, t in enumerate(s["ttft_ms"])]
            requests += [{"run_id": run_id, "variant": name, "scenario": s["scenario"], "concurrency": s["concurrency"],
                          "request_index": n_ok + i, "is_warmup": False, "status": "error", "error": "HTTP 503"}
                         for i in range(s["errors"])]
            # a warm-up request far over any limit: excluded from every check
            requests.append({"run_id": run_id, "variant": name, "scenario": s["scenario"], "concurrency": 1,
                             "request_index": 10_000, "is_warmup": True, "status": "ok", "ttft_ms": 1e6,
                             "tpot_ms": 1e4, "e2el_ms": 2e6, "output_tokens": 64})
        write_table(res, "perf_summary", name, summary)
        write_table(res, "perf_requests", name, requests)
        if "accuracy" in v:
            write_table(res, "quality_scores", name, [{"run_id": run_id, "variant": name, "suite": "arithmetic",
                                                       "suite_version": "1", "metric": "accuracy", "value": v["accuracy"],
                                                       "n": 80, "unit": "fraction", "higher_is_better": True,
                                                       "is_primary": True, "sample_stat": "mean(score)"}])
        if "delta" in v:
            write_table(res, "quality_deltas", name, [{"run_id": run_id, "variant": name, "reference_variant": ref,
                                                       "suite": "arithmetic", "metric": "accuracy", "unit": "fraction",
                                                       "higher_is_better": True, "confidence": 0.95,
                                                       "verdict": "inconclusive", **v["delta"]}])
        if "samples" in v:
            write_table(res, "quality_samples", name, [
                {"run_id": run_id, "variant": name, "suite": "arithmetic", "sample_id": str(i), "score": float(score),
                 "valid": True, "details": json.dumps({"prompt_tokens": 40, "output_tokens": 4})}
                for i, score in enumerate(v["samples"])])
    return root / run_id


def ttfts(n: int, ms: float) -> list[float]:
    return [ms + i for i in range(n)]


def pairs(n: int, ref_right: int, lost: int, gained: int) -> tuple[list[int], list[int]]:
    """Paired 0/1 samples: the reference right on `ref_right` of `n`; the variant loses `lost` of those
    and gains `gained` of the others."""
    ref = [1] * ref_right + [0] * (n - ref_right)
    var = list(ref)
    for i in range(lost):
        var[i] = 0
    for i in range(gained):
        var[ref_right + i] = 1
    return ref, var


REF, Q3 = pairs(80, 40, 3, 2)  # q3_k_m: 3 lost, 2 gained: delta -1/80, retention 0.975


def demo_like() -> dict[str, dict]:
    """q4_1 (reference), q4_1-spec (identical outputs on 2,000 pairs, 2 % slower: a tie), q2_k (faster, far worse),
    q3_k_m (faster, CI straddles 99 %), q8_0 (failed)."""
    steady = lambda req_s: [step("c1", 1, req_s / 2, ttfts(12, 300)), step("c2", 2, req_s, ttfts(12, 500))]  # noqa: E731
    return {
        "q4_1": {"ref": True, "steps": [step("c1", 1, 0.5, ttfts(12, 300), j_per_token=0.5),
                                        step("c2", 2, 1.0, ttfts(12, 500), j_per_token=0.4)],
                 "accuracy": 0.5, "samples": REF, "cost": {"usd_per_hour": 3.6}},
        "q4_1-spec": {"steps": steady(0.98), "accuracy": 0.5, "delta": delta(0.5, 0.5, no_pair_differs(2000), n=2000, p_value=1.0,
                                                                    lost=0, gained=0),
                      "samples": REF},
        "q2_k": {"steps": steady(1.8), "accuracy": 0.3, "delta": delta(0.5, 0.3, (-0.28, -0.12))},
        "q3_k_m": {"steps": steady(1.3), "accuracy": 39 / 80, "delta": delta(0.5, 39 / 80, (-0.05, 0.025), lost=3, gained=2),
                   "samples": Q3},
        "q8_0": {"status": "failed", "error": "ServerDied: server exited with code 1\nlog tail"},
    }


@pytest.fixture
def demo_db(tmp_path: Path) -> Path:
    db = tmp_path / "wh.duckdb"
    load_run(write_decision_run(tmp_path / "runs", "d1", demo_like(), decision={"grid_gco2e_per_kwh": 400}), db)
    return db


def by_variant(con, run_id: str = "d1") -> dict[str, dict]:
    return {r["variant"]: r for r in rows(con, f"select * from v_recommendation where run_id = '{run_id}'")}


def test_faster_variant_failing_the_gate_is_not_recommended(demo_db: Path) -> None:
    with open_warehouse(demo_db, read_only=True) as con:
        got = by_variant(con)
    assert {r["recommended_variant"] for r in got.values()} == {"q4_1"}
    q2 = got["q2_k"]
    assert q2["verdict"] == "fails_gate" and q2["beats_recommended"] is True
    assert q2["gate_metric"] == "arithmetic.accuracy"
    # retention 0.3 / 0.5; the delta interval (-0.28, -0.12) maps to (0.44, 0.76) of the reference
    assert q2["retention"] == pytest.approx(0.6)
    assert (q2["retention_ci_low"], q2["retention_ci_high"]) == (pytest.approx(0.44), pytest.approx(0.76))
    assert q2["sustainable_scenario"] == "c2" and q2["sustainable_req_s"] == pytest.approx(1.8)
    assert got["q8_0"]["verdict"] == "failed" and got["q8_0"]["verdict_reason"] == "failed: ServerDied: server exited with code 1"


def test_ci_straddling_the_target_is_not_enough_evidence_with_the_n_needed(demo_db: Path) -> None:
    with open_warehouse(demo_db, read_only=True) as con:
        q3 = by_variant(con)["q3_k_m"]
        gate = rows(con, "select * from v_quality_gate where variant = 'q3_k_m'")[0]
    assert q3["verdict"] == "not_enough_evidence" and q3["gate"] == "not_enough_evidence"
    assert (q3["retention_ci_low"], q3["retention_ci_high"]) == (pytest.approx(0.9), pytest.approx(1.05))
    assert (gate["n_lost"], gate["n_gained"]) == (3, 2)
    # Power estimate from the observed discordance: per-pair sd of (variant - reference) right/wrong, the
    # distance of the delta from the delta at 99 % retention, z at 95 % (two-sided) and 80 % power.
    n = 80
    sd = math.sqrt(5 / n - (1 / n) ** 2)
    distance = abs(-1 / n - (0.99 - 1) * 0.5)
    z = statistics.NormalDist().inv_cdf
    expected = ((z(0.975) + z(0.8)) * sd / distance) ** 2
    assert q3["n_needed"] == pytest.approx(expected, rel=0.005) and q3["n"] == 80
    assert q3["verdict_reason"].endswith("paired samples needed if it is truly equal, ~8701 at the observed effect (have 80)")
    # a truly equal variant with that discordance (5 of 80 pairs differ): sd sqrt(5 / 80), distance 0.005
    equal = ((z(0.975) + z(0.8)) * math.sqrt(5 / n) / 0.005) ** 2
    assert q3["n_needed_if_equal"] == pytest.approx(equal, rel=0.005)


def test_a_tie_goes_to_quality_then_to_the_reference(demo_db: Path, tmp_path: Path) -> None:
    with open_warehouse(demo_db, read_only=True) as con:
        got = by_variant(con)
    # q4_1-spec sustains 0.98 req/s against the reference's 1.0: within the 5 % tie tolerance, same retention
    assert got["q4_1"]["verdict"] == "recommended" and got["q4_1"]["tied_with"] == ["q4_1-spec"]
    assert got["q4_1-spec"]["verdict"] == "passes" and got["q4_1-spec"]["rank"] == 2
    assert "tied with q4_1-spec" in got["q4_1"]["verdict_reason"]
    # Two non-reference variants within 5 %: the faster one keeps less (lower retention bound), so the other wins.
    variants = {"ref": {"ref": True, "steps": [step("c1", 1, 0.5, ttfts(12, 300))], "accuracy": 0.5},
                "a": {"steps": [step("c1", 1, 1.00, ttfts(12, 300))], "accuracy": 0.5,
                      "delta": delta(0.5, 0.5, (-0.002, 0.002))},
                "b": {"steps": [step("c1", 1, 1.04, ttfts(12, 300))], "accuracy": 0.499,
                      "delta": delta(0.5, 0.499, (-0.004, 0.002))}}
    db = tmp_path / "tie.duckdb"
    load_run(write_decision_run(tmp_path / "runs", "t1", variants, decision={}), db)
    with open_warehouse(db, read_only=True) as con:
        tie = by_variant(con, "t1")
    assert tie["a"]["verdict"] == "recommended" and tie["b"]["verdict"] == "passes"
    assert tie["a"]["tied_with"] == ["b"] and tie["b"]["beats_recommended"] is True
    assert tie["ref"]["verdict"] == "passes" and tie["ref"]["tied_with"] is None  # 0.5 req/s: no tie


def test_null_energy_gives_null_carbon_with_its_reason(demo_db: Path) -> None:
    with open_warehouse(demo_db, read_only=True) as con:
        got = by_variant(con)
    ref, q2 = got["q4_1"], got["q2_k"]
    # measured J/token at the sustainable step (c2: 0.4 J/token) x 1e6 tokens / 3.6e6 J/kWh x 400 gCO2e/kWh
    assert ref["j_per_1m_output_tok"] == pytest.approx(0.4e6)
    assert ref["gco2e_per_1m_output_tok"] == pytest.approx(0.4e6 / 3.6e6 * 400) and ref["carbon_note"] is None
    assert q2["j_per_1m_output_tok"] is None and q2["gco2e_per_1m_output_tok"] is None
    assert q2["carbon_note"] == "energy not measured: no NVML, no RAPL"
    # own hardware at 3.6 USD/h and 64 output tok/s at c2
    assert ref["usd_per_1m_output_tok"] == pytest.approx(3.6 / (64 * 3600) * 1e6)
    # 4 output tokens per answer at accuracy 0.5: 8 tokens per correct answer, served at 64 tok/s
    assert ref["output_tok_per_correct"] == pytest.approx(8.0) and ref["s_per_correct"] == pytest.approx(8 / 64)


def test_an_slo_no_variant_meets(tmp_path: Path) -> None:
    db = tmp_path / "wh.duckdb"
    load_run(write_decision_run(tmp_path / "runs", "s1", demo_like(), decision={"slo": {"ttft_ms": 250}}), db)
    with open_warehouse(db, read_only=True) as con:
        got = by_variant(con, "s1")
    ok = [r for r in got.values() if r["status"] == "ok"]
    assert len(ok) == 4 and all(r["verdict"] == "misses_slo" for r in ok)
    assert all(r["recommended_variant"] is None for r in got.values())
    assert got["q4_1"]["decision_note"] == "no variant meets the SLO at any measured step"
    assert got["q4_1"]["slo_note"] == "no step meets the SLO; lowest, c1: p99 TTFT 311 ms > 250 ms"
    assert got["q4_1"]["sustainable_req_s"] is None and got["q4_1"]["gco2e_per_1m_output_tok"] is None
    assert got["q4_1"]["carbon_note"] == "no sustainable load"  # its steps have energy
    assert got["q2_k"]["carbon_note"] == "no sustainable load; energy not measured either: no NVML, no RAPL"


def test_errors_are_misses_and_the_highest_passing_step_is_sustainable(tmp_path: Path) -> None:
    # c4 is fast but 1 of 13 requests failed: its p99 falls on the miss. c2 passes; c8 misses on TTFT.
    variants = {"ref": {"ref": True, "accuracy": 0.5, "steps": [
        step("c1", 1, 0.5, ttfts(12, 300)), step("c2", 2, 0.9, ttfts(12, 900)),
        step("c4", 4, 1.2, ttfts(12, 400), errors=1), step("c8", 8, 1.4, ttfts(12, 2500))]}}
    db = tmp_path / "wh.duckdb"
    load_run(write_decision_run(tmp_path / "runs", "e1", variants, decision={}), db)
    with open_warehouse(db, read_only=True) as con:
        steps = {r["scenario"]: r for r in rows(con, "select * from v_slo_steps")}
        rec = by_variant(con, "e1")["ref"]
    assert steps["c4"]["slo_met"] is False and steps["c4"]["ttft_ms_pctl"] is None
    assert steps["c4"]["slo_fail_reason"] == "1 of 13 requests failed or did not complete"
    assert steps["c8"]["slo_fail_reason"] == "p99 TTFT 2511 ms > 2000 ms"
    assert rec["sustainable_scenario"] == "c2" and rec["next_failing_scenario"] == "c4"
    assert rec["sustainable_is_lower_bound"] is False and rec["verdict"] == "recommended"


@pytest.mark.parametrize("n_ok, misses, percentile", [(12, 0, 99), (12, 1, 99), (199, 1, 99), (99, 1, 99),
                                                      (20, 3, 90), (5, 0, 100), (0, 3, 99)])
def test_python_and_sql_judge_a_step_the_same(tmp_path: Path, n_ok: int, misses: int, percentile: float) -> None:
    from tasks.perf.load_search import check_step
    from tasks.perf.metrics import RequestRecord

    ttft = [100.0 + 37 * ((i * 7) % 13) for i in range(n_ok)]
    variants = {"ref": {"ref": True, "steps": [step("c1", 1, 1.0, ttft, errors=misses)]}}
    db = tmp_path / "wh.duckdb"
    limit = 400.0
    load_run(write_decision_run(tmp_path / "runs", "p1", variants,
                                decision={"slo": {"ttft_ms": limit}, "percentile": percentile}), db)
    with open_warehouse(db, read_only=True) as con:
        (sql,) = rows(con, "select * from v_slo_steps")
    records = [RequestRecord(i, "ok", 0.0, ttft_ms=t, e2el_ms=t + 63 * 20.0, output_tokens=64) for i, t in enumerate(ttft)]
    records += [RequestRecord(n_ok + i, "error", 0.0) for i in range(misses)]
    py = check_step(records, {"ttft_ms": limit}, percentile)
    assert sql["slo_met"] == py.met
    p = py.percentiles_ms["ttft_ms"]
    assert sql["ttft_ms_pctl"] == (pytest.approx(p) if p is not None and math.isfinite(p) else None)
    assert sql["slo_fail_reason"] == py.reason


def test_command_line_overrides_shadow_the_runs_settings(demo_db: Path) -> None:
    from tasks.report.recommend import format_recommendation

    with open_warehouse(demo_db, read_only=True) as con:
        text = format_recommendation(con, "d1", {"slo": {"ttft_ms": 250.0}})
        assert text.splitlines()[2].startswith("No variant to ship: no variant meets the SLO at any measured step")
        assert "(overridden: --slo)" in text.splitlines()[0]
    # a new connection sees the run's own settings again: the override lived in a temp view
    with open_warehouse(demo_db, read_only=True) as con:
        assert {r["recommended_variant"] for r in by_variant(con).values()} == {"q4_1"}
        # a lower retention target lets q3_k_m's interval (0.90-1.05) clear it; q3_k_m sustains 1.3 req/s
        text = format_recommendation(con, "d1", {"retention": 0.9, "percentile": 90.0})
        got = by_variant(con)
    assert got["q3_k_m"]["verdict"] == "recommended" and text.splitlines()[2].startswith("Ship q3_k_m: at least 1.30 req/s")


def test_plain_language_comes_first(demo_db: Path) -> None:
    from tasks.report.recommend import format_recommendation, recommendation_markdown

    with open_warehouse(demo_db, read_only=True) as con:
        lines = format_recommendation(con).splitlines()
        md = recommendation_markdown(con, "d1")
    assert lines[0].startswith("run d1: decision under p99 TTFT <= 2000 ms, TPOT <= 200 ms, retention >= 99.0 %")
    assert lines[2] == ("Ship q4_1 (the reference): at least 1.00 req/s (c2, 64.0 output tok/s: the highest step "
                        "measured) at p99 TTFT <= 2000 ms, TPOT <= 200 ms; the reference for "
                        "arithmetic.accuracy; 0.4 J/token, 44.4 gCO2e per 1M tokens; 15.6 USD per 1M output tokens. "
                        "Chosen on rate (best rate, tied with q4_1-spec (within 5.0 %): chosen on the retention lower "
                        "bound, then the reference).")
    assert ("q2_k is faster (1.80x the req/s) but keeps 60.0 % of arithmetic.accuracy (95 % CI 44.0-76.0 %, 80 pairs): "
            "fails the 99.0 % gate.") in lines
    assert ("q3_k_m is faster (1.30x the req/s) but is not measured well enough: keeps 97.5 % of arithmetic.accuracy "
            "(95 % CI 90.0-105.0 %, 80 pairs), which straddles the 99.0 % target; to decide: ~19,626 paired samples if "
            "it is truly equal (6.25 % of pairs differ), ~8,701 if the observed -1.25 points are the truth "
            "(have 80).") in lines
    assert "q4_1-spec meets the SLO and passes the gate (at least 0.98 req/s (c2, 62.7 output tok/s: the highest " \
           "step measured); keeps 100.0 % of arithmetic.accuracy (95 % CI 99.6-100.4 %, 2,000 pairs)); rate 0.98x the " \
           "recommended." in lines
    assert md.startswith("**Ship q4_1 (the reference):") and "| q2_k | fails_gate | 1.80 | fail |" in md


@pytest.mark.parametrize("overrides, message", [
    ({"retention": 1.5}, "--retention: Input should be less than or equal to 1 (got 1.5)"),
    ({"optimise": "speed"}, "--optimise: Input should be 'rate', 'tps', 'cost', 'energy' or 'cost_per_correct'"),
])
def test_bad_overrides_are_one_line(demo_db: Path, overrides: dict, message: str) -> None:
    from tasks.report.recommend import format_recommendation

    with open_warehouse(demo_db, read_only=True) as con, pytest.raises(ConfigError) as err:
        format_recommendation(con, "d1", overrides)
    assert str(err.value).startswith(message) and "\n" not in str(err.value)


@pytest.mark.parametrize("text, parsed", [("mlperf-llama2-70b-interactive", {"preset": "mlperf-llama2-70b-interactive"}),
                                          ("ttft_ms=500, tpot_ms=50", {"ttft_ms": 500.0, "tpot_ms": 50.0})])
def test_slo_flag(text: str, parsed: dict) -> None:
    from tasks.report.recommend import parse_slo

    assert parse_slo(text) == parsed


@pytest.mark.parametrize("text, message", [("fast", "--slo: 'fast' is neither a preset"),
                                           ("ttft_ms=soon", "--slo: ttft_ms='soon' is not a number of ms")])
def test_bad_slo_flag_is_one_line(text: str, message: str) -> None:
    from tasks.report.recommend import parse_slo

    with pytest.raises(ConfigError, match=message):
        parse_slo(text)


def test_runs_without_a_decision_block_get_decision_specs_defaults(tmp_path: Path) -> None:
    db = tmp_path / "wh.duckdb"
    load_run(write_decision_run(tmp_path / "runs", "old", demo_like(), decision=None), db)
    load_run(write_decision_run(tmp_path / "runs", "new", demo_like(), decision={}), db)
    with open_warehouse(db, read_only=True) as con:
        old, new = (rows(con, f"select * exclude (run_id) from v_decision where run_id = '{r}'")[0] for r in ("old", "new"))
    assert old == new
    d = DecisionSpec()
    assert (new["slo_percentile"], new["retention_target"], new["optimise"], new["tie_tolerance_pct"]) == (
        d.percentile, d.retention, d.optimise, d.tie_tolerance_pct)
    # neither sets an SLO: the goodput SLO the perf steps recorded (perf.slo) applies
    assert (new["slo_label"], new["slo_ttft_ms"], new["slo_tpot_ms"]) == ("mlperf-llama2-70b-server", 2000.0, 200.0)
    assert new["gate_metrics"] == ["arithmetic.accuracy"] and new["min_samples"] == 30


def test_decision_config_writes_preset_limits_out_and_checks_gate_metrics() -> None:
    from tasks.loader import parse_config

    d = DecisionSpec.model_validate({"slo": "mlperf-llama2-70b-interactive"})
    assert (d.slo.preset, d.slo.ttft_ms, d.slo.tpot_ms) == ("mlperf-llama2-70b-interactive", 450.0, 40.0)
    base = {"models": {"m": {"path": __file__}}, "variants": [{"name": "a", "model": "m", "quantization": "q4_1",
                                                                "reference": True}],
            "quality": {"suites": [{"name": "arithmetic"}], "primary": "arithmetic.accuracy"}}
    with pytest.raises(ConfigError, match=r"^decision.gate_metrics\[0\]: 'gsm8k.exact_match' is not 'suite.metric' of "
                                          r"a suite in quality.suites"):
        parse_config({**base, "decision": {"gate_metrics": ["gsm8k.exact_match"]}})
    with pytest.raises(ConfigError, match=r"^decision.optimise: "):
        parse_config({**base, "decision": {"optimise": "fast"}})
    cfg = parse_config({**base, "decision": {"search": {"budget_s": 30}}})
    assert cfg.decision.slo_limits(cfg.perf) == {"ttft_ms": 2000.0, "tpot_ms": 200.0}  # perf.slo's
    assert cfg.decision.search.max_steps == 6


def test_recommendation_change_is_notified(tmp_path: Path) -> None:
    from tasks.report.notify import recommendation_change, run_message

    db = tmp_path / "wh.duckdb"
    load_run(write_decision_run(tmp_path / "runs", "n1", demo_like(), decision={}), db)
    assert recommendation_change(db, "n1") is None  # no earlier night
    night2 = demo_like()
    night2["q2_k"]["delta"] = delta(0.5, 0.5, (-0.001, 0.001))  # q2_k now keeps its accuracy: it becomes the pick
    load_run(write_decision_run(tmp_path / "runs", "n2", night2, decision={}, started_at=STARTED + timedelta(days=1)), db)
    change = recommendation_change(db, "n2")
    assert change == "recommendation changed: q4_1 (run n1) -> q2_k"
    subject, body = run_message("n2", "ok", [], {}, [], recommendation=change)
    assert subject == "tradeoff nightly n2: recommendation changed" and change in body
    load_run(write_decision_run(tmp_path / "runs", "n3", night2, decision={}, started_at=STARTED + timedelta(days=2)), db)
    assert recommendation_change(db, "n3") is None  # same pick as the night before


# --- the sustainable-load search -------------------------------------------------------------------------

def test_search_bisects_between_passing_and_failing_rates() -> None:
    from tasks.perf.load_search import search_rates

    threshold = 23.0
    tried = search_rates(4.0, 40.0, LoadSearchSpec(max_steps=10, tolerance_pct=5), lambda r: r <= threshold)
    assert [round(r, 2) for r, _ in tried] == [22.0, 31.0, 26.5, 24.25, 23.12]
    best = max(r for r, met in tried if met)
    worst = min(r for r, met in tried if not met)
    assert best <= threshold < worst and (worst - best) / worst <= 0.05
    assert len(search_rates(4.0, 40.0, LoadSearchSpec(max_steps=2), lambda r: True)) == 2


def test_search_stops_at_its_time_budget() -> None:
    from tasks.perf.load_search import search_rates

    now = [0.0]

    def measure(rate: float) -> bool:
        now[0] += 10.0  # every step takes 10 s
        return rate < 20

    tried = search_rates(4.0, 40.0, LoadSearchSpec(budget_s=25, max_steps=10, tolerance_pct=1), measure,
                         clock=lambda: now[0])
    assert len(tried) == 2  # a third step would end at 30 s, past the 25 s budget


def test_search_finds_the_capacity_of_a_paced_server() -> None:
    """A single-slot server taking 100 ms per request serves 10 req/s. Requests arrive evenly (burstiness 100);
    above 10 req/s request k waits k x (100 - 1000 / rate) ms, so over 20 requests p99 TTFT (numpy's, between
    the 19th and 20th) is 100 + 18.81 x (100 - 1000 / rate) ms: within 500 ms up to 12.7 req/s. The sweep
    measures 5 and 20 req/s; the search must bracket the limit (the client's own time per request and a
    busy host's stalls can only put it lower)."""
    from tasks.perf.load_search import bracket, check_step, search_load
    from tasks.perf.sweep import run_perf
    from tasks.perf.workload import make_workload
    from tests.stubs.slo_stub import start_paced_stub

    limit = {"ttft_ms": 500.0}
    srv, url = start_paced_stub(service_ms=100)
    try:
        perf = PerfSpec(rates=[5.0, 20.0], burstiness=100.0, num_prompts=20, warmup_requests=1, input_len=8,
                        output_len=4, slo=limit)
        cfg = RunConfig.model_validate({
            "models": {"m": {"path": __file__}}, "variants": [{"name": "a", "model": "m", "quantization": "q4_1",
                                                                "reference": True}],
            "perf": perf.model_dump(), "decision": {"search": {"budget_s": 90, "max_steps": 5, "tolerance_pct": 5}}})
        workload = make_workload(cfg.perf, str.split, " ".join)
        t0 = time.monotonic()
        sweep = run_perf(cfg.perf, url, "paced", workload, None)
        assert bracket(sweep, limit, 99) == (5.0, 20.0)
        seen = []
        added = search_load(cfg, url, "paced", workload, None, None, sweep, lambda scs: seen.append(len(scs)))
        took = time.monotonic() - t0
    finally:
        srv.shutdown()
    judged = [(sc.step.rate, check_step([r for run in sc.runs for r in run.measured], limit, 99).met) for sc in added]
    assert [sc.step.label for sc in added] == [f"search{i + 1}" for i in range(len(added))] and seen[-1] == 2 + len(added)
    best = max(rate for rate, met in judged if met)
    first_miss = min([rate for rate, met in judged if not met and rate > best] + [20.0])
    print(f"\nsearch: {[(round(r, 2), m) for r, m in judged]}; sustainable {best:.2f} req/s, misses at "
          f"{first_miss:.2f}; {took:.1f} s")
    assert 9.0 <= best <= 13.0 and first_miss <= 15.5


def test_html_report_opens_with_the_decision(demo_db: Path, tmp_path: Path) -> None:
    from tasks.report.html import render_html

    with open_warehouse(demo_db, read_only=True) as con:
        page = render_html(con, "d1")
    section = page[page.index("<h2>Decision: which variant to ship</h2>"):page.index("<h2>Trade-off table</h2>")]
    assert "<b>Ship q4_1 (the reference): at least 1.00 req/s" in section
    assert "q2_k is faster (1.80x the req/s) but keeps 60.0 %" in section
    assert section.count("<svg") == 1 and "ship this" in section and "retention target 99 %" in section
    assert "not plotted (no sustainable load or no retention): q8_0" in section


def test_a_search_makes_the_perf_row_counts_open() -> None:
    from tasks.orchestration.run_gate import expected_perf_rows

    perf = PerfSpec(concurrency=[1, 2], num_prompts=3)
    assert expected_perf_rows(perf) == {"perf_requests": 8, "perf_summary": 2, "perf_power": None}
    assert expected_perf_rows(perf, search=True) == {"perf_requests": None, "perf_summary": None, "perf_power": None}


def test_cli_recommend(demo_db: Path, capsys) -> None:
    from flows.cli import main

    assert main(["recommend", "--warehouse", str(demo_db)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("run d1: decision under p99") and out[2].startswith("Ship q4_1 (the reference)")
    assert main(["recommend", "--warehouse", str(demo_db), "--optimise", "tps", "--gate", "arithmetic.accuracy"]) == 0
    assert "(overridden: --gate, --optimise)" in capsys.readouterr().out.splitlines()[0]
    for flags, message in ((["--retention", "ninety"], "error: --retention: 'ninety' is not a number; write e.g. "
                                                       "--retention 0.99"),
                           (["--gate", "fidelity.kl"], "error: --gate: 'fidelity.kl' is not a quality metric of run d1; "
                                                      "known: arithmetic.accuracy")):
        assert main(["recommend", "--warehouse", str(demo_db), *flags]) == 2
        assert capsys.readouterr().err.strip() == message


def test_a_warehouse_written_before_the_views_existed_is_one_line(demo_db: Path) -> None:
    import duckdb

    from tasks.report.recommend import format_recommendation
    from warehouse.db import WarehouseError

    with duckdb.connect(str(demo_db)) as con:
        con.execute("drop view v_recommendation")
    with open_warehouse(demo_db, read_only=True) as con, pytest.raises(WarehouseError, match="has no v_recommendation "
                                                                                              "yet .*`tradeoff load"):
        format_recommendation(con)


def test_retention_interval_is_clipped_at_zero(tmp_path: Path) -> None:
    variants = {"ref": {"ref": True, "steps": [step("c1", 1, 0.5, ttfts(12, 300))], "accuracy": 0.5},
                "bad": {"steps": [step("c1", 1, 1.0, ttfts(12, 300))], "accuracy": 0.05,
                        "delta": delta(0.5, 0.05, (-0.7, -0.3))}}
    db = tmp_path / "wh.duckdb"
    load_run(write_decision_run(tmp_path / "runs", "z1", variants, decision={}), db)
    with open_warehouse(db, read_only=True) as con:
        bad = by_variant(con, "z1")["bad"]
    assert (bad["retention_ci_low"], bad["retention_ci_high"]) == (0.0, pytest.approx(0.4))
    assert bad["verdict"] == "fails_gate" and bad["beats_recommended"] is True
