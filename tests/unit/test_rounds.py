"""Interleaved rounds (tasks.perf.rounds): round r of every run before round r + 1 of any, the order reversed each
round; a run that fails stops alone; a run's work after its last round comes at its turn."""

from __future__ import annotations

import pytest

from tasks.perf.rounds import interleave, round_order


def runs(log: list[str], rounds: dict[str, int], fail_at: dict[str, int] | None = None):
    def run(name: str, n: int):
        for r in range(n):
            if (fail_at or {}).get(name) == r:
                raise RuntimeError(f"{name} died in round {r}")
            log.append(f"{name}{r}")
            yield r
        log.append(f"{name}-tail")  # re-measures, the load search: after its last round
        return f"{name} done"

    return {name: run(name, n) for name, n in rounds.items()}


def test_rounds_alternate_in_counterbalanced_order_and_each_run_returns_its_value():
    log: list[str] = []
    out = interleave(runs(log, {"a": 3, "b": 3}))
    assert out == {"a": "a done", "b": "b done"}
    assert log == ["a0", "b0", "b1", "a1", "a2", "b2", "b-tail", "a-tail"]


def test_a_run_with_fewer_rounds_ends_and_the_others_go_on():
    log: list[str] = []
    out = interleave(runs(log, {"a": 1, "b": 3, "c": 2}))
    assert list(out) == ["a", "b", "c"] and set(out.values()) == {"a done", "b done", "c done"}
    assert log == ["a0", "b0", "c0", "c1", "b1", "a-tail", "b2", "c-tail", "b-tail"]


def test_a_failing_run_is_its_own_error_and_the_others_finish():
    log: list[str] = []
    out = interleave(runs(log, {"a": 3, "b": 3}, fail_at={"a": 1}))
    assert isinstance(out["a"], RuntimeError) and "a died in round 1" in str(out["a"])
    assert out["b"] == "b done" and log.count("b2") == 1 and "a1" not in log


def test_a_stop_is_not_one_run_s_failure():
    def stopped():
        raise KeyboardInterrupt
        yield 0  # a generator

    with pytest.raises(KeyboardInterrupt):
        interleave({"a": stopped()})


def test_round_order_reverses_on_odd_rounds():
    assert round_order(["a", "b", "c"], 0) == ["a", "b", "c"] and round_order(["a", "b", "c"], 1) == ["c", "b", "a"]
