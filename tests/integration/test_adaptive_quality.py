"""Adaptive suites in the nightly's quality step (tasks/quality/suite_loop.py:run_suites): the reference answers every
planned item, a variant extends while its gate is undecided and stops when it decides, the budget and the reference's
items bound it, and the stored interval is the look's. Against the scripted quality endpoint
(tests/stubs/quality_stub.py): its answers are set by the test, so the truth is known."""

from __future__ import annotations

import logging
import re
import sys
from collections import Counter
from pathlib import Path

import pytest
import yaml

from tasks.core.config import RunConfig
from tasks.decision.design import look_schedule
from tasks.decision.gate import judge, look_at
from tasks.decision.suite_gate import AdaptiveGate
from tasks.engines.base import Artifact
from tasks.loader import parse_config
from tasks.quality.suite_loop import run_suites
from tests.helpers import ROOT
from tests.helpers.oracle import oracle_completion
from tests.stubs.quality_stub import start
from warehouse.contract import read_table


def wrong_on_half(prompt: str) -> str:
    """The oracle, except every 'minus' and 'times' question (half of the demo's tasks) answered 0."""
    last = re.findall(r"Q: What is \d+ (plus|minus|times) \d+\?", prompt)[-1]
    return " 0" if last in ("minus", "times") else oracle_completion(prompt)


@pytest.fixture(scope="module")
def endpoints():
    servers = {name: start(fn) for name, fn in (("oracle", oracle_completion), ("half", wrong_on_half))}
    yield {name: url + "/v1" for name, (_, url) in servers.items()}
    for srv, _ in servers.values():
        srv.shutdown()


def config(adaptive: dict | None, decision: dict) -> RunConfig:
    demo = yaml.safe_load((ROOT / "configs" / "demo.yaml").read_text())
    variants = [
        {"name": n, "model": "smollm2-135m", "quantization": "q4_1", "reference": n == "ref"}
        for n in ("ref", "same", "worse")
    ]
    quality = {
        "primary": "arithmetic.accuracy",
        "suites": [{"name": "arithmetic", "limit": 40, "params": {"tasks": ["1D+", "1D-", "1Dx", "2D+"]}}],
    }
    if adaptive:
        quality["adaptive"] = adaptive
    return parse_config(
        {"name": "adapt", "models": demo["models"], "variants": variants, "quality": quality, "decision": decision}
    )


def measure(cfg: RunConfig, urls: dict[str, str], tmp_path: Path) -> dict[str, dict]:
    gguf = cfg.models["smollm2-135m"].local_path()
    art = Artifact("ref", gguf, "0" * 64, 1, True, 0.0)
    out = {}
    for v in cfg.variants:  # the reference first, as the nightly measures it
        out[v.name] = run_suites(
            cfg,
            "r1",
            v,
            art,
            art,
            urls[v.name],
            tmp_path / "quality" / v.name,
            tmp_path / "results",
            AdaptiveGate(cfg),
            logging.getLogger("test"),
        )
    return out


def deltas(tmp_path: Path) -> dict[str, dict]:
    df = read_table(tmp_path / "results", "quality_deltas")
    return {r["variant"]: r for r in df[df["metric"] == "accuracy"].to_dict("records")}


def items(tmp_path: Path) -> dict[str, int]:
    return read_table(tmp_path / "results", "quality_samples").groupby("variant").size().to_dict()


def test_a_variant_extends_until_its_gate_decides(endpoints, tmp_path: Path, monkeypatch) -> None:
    # A 10-point margin: a variant equal to the reference (none of its answers differs) cannot pass at 40 items
    # (Tango at look 1's 98.75 %: +-13.5 points) and passes at 80 (+-7.2); a variant wrong on every 'minus' and
    # 'times' question (50 points down) fails at 40 and stops there.
    cfg = config({"max_items": 160, "budget_s": 60}, {"margin_points": 10})
    reads: Counter = Counter()
    counted = lambda d, name, _read=read_table: reads.update([name]) or _read(d, name)
    for module in [m for m in list(sys.modules.values()) if getattr(m, "read_table", None) is read_table]:
        monkeypatch.setattr(module, "read_table", counted)
    got = measure(cfg, {"ref": endpoints["oracle"], "same": endpoints["oracle"], "worse": endpoints["half"]}, tmp_path)
    monkeypatch.undo()
    # Each variant's quality step reads the reference's results once, for its gate's looks and its deltas both
    # (issue 27); the reference reads none.
    assert reads == {"quality_scores": 2, "quality_samples": 2}
    # O'Brien-Fleming-type boundaries: the first look of three (a 99.998 % interval) decides only overwhelming
    # evidence, so "worse" (half its answers wrong) fails at the second look, not the first
    assert items(tmp_path) == {"ref": 160, "same": 80, "worse": 80}
    assert got["ref"]["looks"] == {"arithmetic": ["n=40: answered", "n=80: answered", "n=160: answered"]}
    assert got["same"]["looks"] == {"arithmetic": ["n=40: not_enough_evidence", "n=80: pass"]}
    assert got["worse"]["looks"] == {"arithmetic": ["n=40: not_enough_evidence", "n=80: fail"]}
    rows = deltas(tmp_path)
    schedule = look_schedule(40, 160)
    assert schedule == [40, 80, 160]
    same, worse = rows["same"], rows["worse"]
    assert (same["n"], same["looks"], same["looks_planned"]) == (80, 2, 3)
    assert same["look_confidence"] == pytest.approx(look_at(0.95, schedule, 1).level) and same["confidence"] == 0.95
    assert "look 2 of 3" in same["method"]
    assert (worse["n"], worse["looks"], worse["n_gained"]) == (80, 2, 0) and worse["n_lost"] >= 30  # "5 minus 5" is 0
    assert judge(same, 0.99, 10.0) == "pass" and judge(worse, 0.99, 10.0) == "fail"
    # the reference's own score is over all the items it answered; a variant's over its own
    scores = read_table(tmp_path / "results", "quality_scores")
    n = scores[scores["metric"] == "accuracy"].set_index("variant")["n"].to_dict()
    assert n == {"ref": 160, "same": 80, "worse": 80}


def test_the_budget_and_the_reference_bound_the_extension(endpoints, tmp_path: Path, caplog) -> None:
    # A budget of 1 ms: no batch fits, so the reference stays at its first 40 items and so does the variant.
    cfg = config({"max_items": 160, "budget_s": 0.001}, {"margin_points": 10})
    with caplog.at_level(logging.INFO, logger="test"):
        measure(cfg, {"ref": endpoints["oracle"], "same": endpoints["oracle"], "worse": endpoints["half"]}, tmp_path)
    assert items(tmp_path) == {"ref": 40, "same": 40, "worse": 40}
    assert "ref: arithmetic stays at 40 items: 40 more would take" in caplog.text
    rows = deltas(tmp_path)
    assert rows["same"]["looks"] == 1 and rows["same"]["looks_planned"] == 3
    assert judge(rows["same"], 0.99, 10.0) == "not_enough_evidence"


def test_without_adaptive_the_sample_is_fixed(endpoints, tmp_path: Path) -> None:
    cfg = config(None, {"margin_points": 10})
    got = measure(cfg, {"ref": endpoints["oracle"], "same": endpoints["oracle"], "worse": endpoints["half"]}, tmp_path)
    assert items(tmp_path) == {"ref": 40, "same": 40, "worse": 40} and got["same"]["looks"] == {}
    same = deltas(tmp_path)["same"]
    assert (same["looks"], same["looks_planned"], same["look_confidence"]) == (1, 1, 0.95)
