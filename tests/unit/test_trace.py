"""Traces (tasks/perf/trace.py): bad lines fail naming the line and field, both formats read, the generator is
seeded and shaped as asked, prompts keep the trace's lengths and share exactly the prefixes hash_ids say; the
over-saturation rule (tasks/perf/stopping.py) on in-flight and TTFT series of known shape."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tasks.core.config import PerfSpec, SaturationSpec, TraceSpec
from tasks.core.errors import ConfigError
from tasks.perf.stopping import LoadWatch, OverSaturation, slope_bound
from tasks.perf.trace import (
    TraceShape,
    generate_trace,
    load_trace,
    send_error_stats,
    trace_prompts,
    trace_replays,
    write_trace,
)

GOOD = {"timestamp": 0, "input_length": 40, "output_length": 8, "hash_ids": [1, 2, 3]}


def _file(tmp_path, lines: list) -> str:
    p = tmp_path / "t.jsonl"
    p.write_text("".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines))
    return str(p)


@pytest.mark.parametrize(
    "bad, words",
    [
        ({"timestamp": 5, "output_length": 8}, ["line 2", "'input_length' is missing"]),
        ({"input_length": 4, "output_length": 8}, ["line 2", "'timestamp' is missing"]),
        ({**GOOD, "input_length": "many"}, ["line 2", "'input_length'", "whole number"]),
        ({**GOOD, "output_length": 0}, ["line 2", "'output_length' is 0"]),
        ({**GOOD, "hash_ids": "1,2"}, ["line 2", "'hash_ids'"]),
        ({**GOOD, "timestamp": -3}, ["line 2", "'timestamp'"]),
        ({"timestamp": 1, "prompt": "hi"}, ["line 2", "'max_tokens' is missing"]),
        ({"timestamp": 1, "max_tokens": 4}, ["line 2", "neither 'prompt' nor 'prompt_tokens'"]),
        ("{not json", ["line 2", "not JSON"]),
        ("[1, 2]", ["line 2", "not an object"]),
    ],
)
def test_bad_line_names_line_and_field(tmp_path, bad, words):
    path = _file(tmp_path, [GOOD, bad])
    with pytest.raises(ConfigError) as err:
        load_trace(path)
    msg = str(err.value)
    assert "\n" not in msg and msg.startswith("perf.trace: t.jsonl")
    for w in words:
        assert w in msg


def test_missing_and_empty_files(tmp_path):
    with pytest.raises(ConfigError, match="not found; give a JSONL trace"):
        load_trace(tmp_path / "none.jsonl", "--trace")
    with pytest.raises(ConfigError, match="holds no request"):
        load_trace(_file(tmp_path, ["", "  "]))


def test_both_formats_sorted_relative_and_capped(tmp_path):
    lines = [
        {"timestamp": 2000, "prompt_tokens": 7, "max_tokens": 3, "session_id": "s1"},
        {"timestamp": 1000, "input_length": 12, "output_length": 5, "hash_ids": [9]},
        {"timestamp": "2026-12-03T10:00:01.500Z", "prompt": "hello there", "max_tokens": 2},
        {"timestamp": "2026-12-03T10:00:00Z", "prompt": "first", "max_tokens": 2},
    ]
    reqs = load_trace(_file(tmp_path, lines[:2]))
    assert [(r.at_ms, r.input_tokens, r.output_tokens, r.hash_ids, r.line) for r in reqs] == [
        (0.0, 12, 5, (9,), 2),
        (1000.0, 7, 3, (), 1),
    ]
    assert reqs[1].session_id == "s1"
    iso = load_trace(_file(tmp_path, lines[2:]))
    assert [(r.at_ms, r.prompt) for r in iso] == [(0.0, "first"), (1500.0, "hello there")]
    assert len(load_trace(_file(tmp_path, lines[:2]), max_requests=1)) == 1


def test_generator_is_seeded_and_shaped(tmp_path):
    shape = TraceShape(duration_s=600, rate=2.0, bursts=3, prefix_groups=3, prefix_share=0.5, block_tokens=16)
    a, b = generate_trace(shape, 7), generate_trace(shape, 7)
    assert a == b and a != generate_trace(shape, 8)
    times = np.array([x["timestamp"] for x in a]) / 1000
    assert np.all(np.diff(times) >= 0) and times[-1] < 600
    # the mean rate is the asked one, raised by the bursts (3 x 3 s at 4x: +18 requests over 600 s)
    assert 0.85 * 2.0 < len(a) / 600 < 1.25 * 2.0
    # diurnal: the sine's first half (rate x 1 + 0.5 x 2/pi on average) holds ~1.9x its second (x 1 - 0.32)
    assert (times < 300).sum() > 1.5 * (times >= 300).sum()
    n_in = np.array([x["input_length"] for x in a])
    assert np.median(n_in) == pytest.approx(128, rel=0.15) and n_in.max() > 2.5 * np.median(n_in)  # a long tail
    for x in a:  # one id per block of the prompt
        assert len(x["hash_ids"]) == -(-x["input_length"] // 16)
    grouped = [x for x in a if x["hash_ids"][0] < 3 * 4]
    assert 0.4 < len(grouped) / len(a) < 0.6
    path = write_trace(a, tmp_path / "g.jsonl")
    assert len(load_trace(path)) == len(a)


def test_prompts_keep_lengths_and_share_exactly_the_hash_id_prefix(tmp_path):
    lines = [
        {"timestamp": 0, "input_length": 40, "output_length": 8, "hash_ids": [1, 2, 3]},
        {"timestamp": 500, "input_length": 37, "output_length": 5, "hash_ids": [1, 2, 4]},
        {"timestamp": 900, "input_length": 30, "output_length": 3, "hash_ids": [5, 6]},
        {"timestamp": 1200, "input_length": 30, "output_length": 3},
        {"timestamp": 1300, "input_length": 30, "output_length": 3},
    ]
    spec = TraceSpec(path="x", block_tokens=16, speed=2.0)
    ps = trace_prompts(load_trace(_file(tmp_path, lines)), spec, seed=0)
    words = [p.text.split() for p in ps]
    assert [len(w) for w in words] == [40, 37, 30, 30, 30] == [p.tokens for p in ps]
    assert [p.output_len for p in ps] == [8, 5, 3, 3, 3]
    assert [p.at_s for p in ps] == [0.0, 0.25, 0.45, 0.6, 0.65]  # halved by speed 2
    assert all(p.tokens_source == "approx_words" for p in ps)

    def shared(a: list[str], b: list[str]) -> int:
        return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))

    assert shared(words[0], words[1]) >= 32  # blocks 1 and 2 (2 x 16 words), block 3 vs 4 differ
    assert shared(words[0], words[1]) < 40 and words[0][32:] != words[1][32:]
    assert shared(words[0], words[2]) < 3 and shared(words[3], words[4]) < 3  # no hash id in common
    again = trace_prompts(load_trace(_file(tmp_path, lines)), spec, seed=0)
    assert [p.text for p in again] == [p.text for p in ps]

    # each replay: the same shape, other words, so one replay is not served from the cache the one before filled
    replay = trace_replays(PerfSpec(seed=0, trace={"path": _file(tmp_path, lines), "block_tokens": 16, "speed": 2.0}))
    assert [p.text for p in replay(0)] == [p.text for p in ps] and replay(0) is replay(0)
    second = [p.text.split() for p in replay(1)]
    assert [len(w) for w in second] == [40, 37, 30, 30, 30] and [p.at_s for p in replay(1)] == [p.at_s for p in ps]
    assert shared(second[0], second[1]) >= 32  # the trace's shared prefix, within the replay
    assert all(shared(a, b) < 3 for a, b in zip(second, words))  # nothing in common with replay 0
    assert [p.text for p in replay(2)] != [p.text for p in replay(1)]
    again = [p.text.split() for p in replay(1, 1)]  # replay 1 measured again: the same shape, other words
    assert [len(w) for w in again] == [40, 37, 30, 30, 30] and all(shared(a, b) < 3 for a, b in zip(again, second))


def test_send_error_stats():
    assert send_error_stats([]) == {"send_error_ms_p50": None, "send_error_ms_p99": None, "send_error_ms_max": None}
    s = send_error_stats([0.1 * i for i in range(101)])
    assert s["send_error_ms_p50"] == pytest.approx(5.0) and s["send_error_ms_p99"] == pytest.approx(9.9)
    assert s["send_error_ms_max"] == pytest.approx(10.0)


def test_trace_alone_is_the_only_step():
    spec = PerfSpec.model_validate({"trace": {"path": "t.jsonl", "speed": 2}})
    assert spec.concurrency == [] and spec.trace.speed == 2.0
    assert PerfSpec.model_validate({}).concurrency == [1, 2]


def test_slope_bound_of_a_line_and_of_noise():
    rng = np.random.default_rng(0)
    line = [(t, 3.0 * t + rng.normal(0, 0.5)) for t in np.arange(0, 10, 0.25)]
    slope, low = slope_bound(line, 2.33)
    assert slope == pytest.approx(3.0, abs=0.1) and 0 < low < slope
    flat = [(t, rng.normal(5, 1)) for t in np.arange(0, 10, 0.25)]
    assert slope_bound(flat, 2.33)[1] < 0.3
    assert slope_bound([(0, 1), (1, 2)], 2.33) is None


def _watch(t_end: float, flight, ttft) -> LoadWatch:
    ts = np.arange(0.25, t_end, 0.25)
    return LoadWatch(in_flight=[(t, int(flight(t))) for t in ts], ttfts=[(t, ttft(t)) for t in ts])


def test_over_saturation_stops_a_growing_queue_only():
    rule = OverSaturation(SaturationSpec(min_duration_s=10, window_s=20, confidence=0.99, min_growth=4))
    rng = np.random.default_rng(1)
    growing = _watch(12, lambda t: 25 * t, lambda t: 40 + 1000 * t)
    assert rule.check(growing, 9.9) is None  # not before min_duration_s
    reason = rule.check(growing, 12.0)
    assert reason and "requests in flight rose" in reason and "TTFT" in reason
    steady = _watch(40, lambda t: 2 + rng.poisson(2), lambda t: 40 + rng.exponential(30))
    assert rule.check(steady, 40.0) is None
    # a burst that drains again (in flight up and down within the window): not saturated
    burst = _watch(40, lambda t: 2 + (10 if 25 < t < 28 else 0), lambda t: 40 + (300 if 25 < t < 29 else 0))
    assert rule.check(burst, 40.0) is None
    # in flight rising while TTFT stays flat (a slow ramp the server keeps up with): not saturated
    ramp = _watch(30, lambda t: t, lambda t: 40 + rng.normal(0, 5))
    assert rule.check(ramp, 30.0) is None


def test_generated_sessions_grow_their_context_through_hash_ids(tmp_path):
    shape = TraceShape(duration_s=120, rate=0.5, sessions=1.0, turns_mean=3, think_s=2.0, block_tokens=16)
    lines = generate_trace(shape, 5)
    by_session: dict[str, list[dict]] = {}
    for x in lines:
        by_session.setdefault(x["session_id"], []).append(x)
    assert len(by_session) > 20 and max(len(t) for t in by_session.values()) >= 3
    for turns in by_session.values():
        turns.sort(key=lambda x: x["turn"])
        assert [x["turn"] for x in turns] == list(range(1, len(turns) + 1))
        for a, b in zip(turns, turns[1:]):
            assert b["input_length"] > a["input_length"] + a["output_length"]  # context + answer + new text
            full = a["input_length"] // 16
            assert b["hash_ids"][:full] == a["hash_ids"][:full]  # the previous prompt's blocks, shared
            assert b["timestamp"] - a["timestamp"] == 2000 and b["think_time_ms"] == 2000
    reqs = load_trace(write_trace(lines, tmp_path / "s.jsonl"))
    ps = trace_prompts(reqs, TraceSpec(path="x", block_tokens=16), seed=0)
    for i, (r, p) in enumerate(zip(reqs, ps)):
        assert (p.session_id, p.turn, p.think_s) == (r.session_id, r.turn, r.think_ms / 1000)
        if r.turn > 1:  # linked to its session's previous turn, whose prompt it extends
            prev = ps[p.after]
            assert p.after < i and prev.session_id == p.session_id and prev.turn == p.turn - 1
            full = reqs[p.after].input_tokens // 16 * 16
            assert p.text.split()[:full] == prev.text.split()[:full]
        else:
            assert p.after is None
    assert generate_trace(TraceShape(duration_s=60, sessions=0.0), 1) == generate_trace(TraceShape(duration_s=60), 1)


def test_bad_session_fields(tmp_path):
    with pytest.raises(ConfigError, match="line 1: field 'turn' is 0"):
        load_trace(_file(tmp_path, [{**GOOD, "session_id": "a", "turn": 0}]))
    with pytest.raises(ConfigError, match="line 1: field 'think_time_ms' is 'x'"):
        load_trace(_file(tmp_path, [{**GOOD, "session_id": "a", "think_time_ms": "x"}]))


def test_over_saturation_sees_the_first_token_wait_before_any_answer():
    """A server far behind answers too rarely for the TTFT series (here: no answer at all); the wait for a first
    token, rising with time, shows the growing queue. A wait that comes and goes does not."""
    rule = OverSaturation(SaturationSpec(min_duration_s=10, window_s=20, confidence=0.99, min_growth=4))
    ts = np.arange(0.25, 30, 0.25)
    rng = np.random.default_rng(2)
    behind = LoadWatch(in_flight=[(t, int(0.5 * t)) for t in ts], oldest_wait=[(t, 1000.0 * t) for t in ts])
    reason = rule.check(behind, 30.0)
    assert reason and "first-token wait" in reason
    coming_and_going = LoadWatch(
        in_flight=[(t, int(0.5 * t)) for t in ts], oldest_wait=[(t, float(rng.uniform(0, 400))) for t in ts]
    )
    assert rule.check(coming_and_going, 30.0) is None
