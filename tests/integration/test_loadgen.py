"""Load patterns and workloads against the local stub: steps, sweep, warm-up, time limits, ShareGPT, lengths."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest

from tasks.client import request_body
from tasks.core.config import PerfSpec
from tasks.core.errors import ConfigError
from tasks.orchestration.folder_gate import expected_perf_rows
from tasks.perf.metrics import RequestRecord
from tasks.perf.perf_run import output_len_note, summarize_scenario
from tasks.perf.sweep import _request_rate, arrival_offsets_s, fixed_steps, run_perf, sweep_rates
from tasks.perf.workload import load_sharegpt, make_workload, synthetic_prompts
from tests.stubs.stub_server import start_stub


@pytest.fixture(scope="module")
def stub():
    srv, url = start_stub()
    yield url
    srv.shutdown()


def spec(**kw) -> PerfSpec:
    base = dict(num_prompts=3, warmup_requests=1, input_len=8, output_len=4, bootstrap_resamples=100)
    return PerfSpec(**{**base, **kw})


def words(n_tokens_per_word=1):
    return (lambda s: s.split()), (lambda ids: " ".join(ids))


@pytest.mark.parametrize("burstiness", [0.5, 1.0, 4.0])
def test_arrivals_have_the_rate_and_the_burstiness(burstiness):
    t = arrival_offsets_s(20001, 5.0, burstiness, seed=7)
    gaps = np.diff(t)
    assert t[0] == 0.0 and t == arrival_offsets_s(20001, 5.0, burstiness, seed=7)
    assert gaps.mean() == pytest.approx(0.2, rel=0.05)
    assert gaps.std() / gaps.mean() == pytest.approx(1 / np.sqrt(burstiness), rel=0.05)  # gamma CV
    assert arrival_offsets_s(3, None) is None and arrival_offsets_s(3, float("inf")) is None


def test_sweep_rates_lie_strictly_between():
    assert sweep_rates(1.0, 5.0, 3) == pytest.approx([2.0, 3.0, 4.0])
    assert sweep_rates(1.0, 5.0, 0) == []


def test_steps_in_config_order():
    s = spec(concurrency=[1, 4], rates=[0.5, 2.0], max_concurrency=3)
    assert [(st.label, st.kind, st.concurrency, st.rate) for st in fixed_steps(s)] == [
        ("c1", "concurrency", 1, None),
        ("c4", "concurrency", 4, None),
        ("r0.5", "rate", 3, 0.5),
        ("r2", "rate", 3, 2.0),
    ]


@pytest.mark.parametrize(
    "perf,rows",
    [
        ({"concurrency": [1, 2]}, {"perf_requests": 8, "perf_summary": 2, "perf_power": None}),
        ({"concurrency": [1], "repeats": 3}, {"perf_requests": 12, "perf_summary": 1, "perf_power": None}),
        ({"sweep": 2, "saturation": {"enabled": False}}, {"perf_requests": 16, "perf_summary": 4, "perf_power": None}),
        # the over-saturation rule may stop an open-loop step early: its requests are not known in advance
        ({"sweep": 2}, {"perf_requests": None, "perf_summary": 4, "perf_power": None}),
        ({"rates": [1.0]}, {"perf_requests": None, "perf_summary": 1, "perf_power": None}),
        (
            {"concurrency": [1], "trace": {"path": "t.jsonl"}},
            {"perf_requests": None, "perf_summary": 2, "perf_power": None},
        ),
        ({"rates": [1.0], "max_duration_s": 5}, {"perf_requests": None, "perf_summary": 1, "perf_power": None}),
    ],
)
def test_expected_rows(perf, rows):
    assert expected_perf_rows(spec(**perf)) == rows


def test_concurrency_and_rate_steps_repeat_interleaved(stub):
    s = spec(concurrency=[2], rates=[50.0], repeats=2)
    enc, dec = words()
    order = []
    scenarios = run_perf(
        s,
        stub,
        "ok",
        make_workload(s, enc, dec),
        "both",
        on_scenario=lambda scs: order.append(tuple(len(sc.runs) for sc in scs)),
    )
    assert order == [(1,), (1, 1), (2, 1), (2, 2)]  # c2, r50, c2, r50
    for sc in scenarios:
        recs = sc.records
        assert len(recs) == 2 * (1 + 3)
        assert sorted(r.index for r in recs) == list(range(8))  # unique across repeats
        assert sum(r.is_warmup for r in recs) == 2 and all(r.status == "ok" for r in recs)
        assert {r.repeat for r in recs} == {0, 1}
        sm = summarize_scenario(s, sc, "both", model_bytes=1000)
        assert sm["num_requests"] == 6 and sm["num_warmup"] == 2 and sm["repeats"] == 2
        assert sm["output_len_forced_by"] == "min_tokens,ignore_eos" and sm["output_len_note"] is None
    assert scenarios[1].summary == {} and scenarios[1].step.rate == 50.0


def test_sweep_adds_rates_between_sync_and_max(stub):
    s = spec(sweep=2, warmup_requests=0)
    scenarios = run_perf(s, stub, "ok", make_workload(s), None)
    assert [sc.step.label for sc in scenarios] == ["sync", "max", "sweep1", "sweep2"]
    lo, hi = (_request_rate(sc.runs[0]) for sc in scenarios[:2])
    assert [sc.step.rate for sc in scenarios[2:]] == pytest.approx(sweep_rates(lo, hi, 2))
    assert scenarios[0].step.concurrency == 1 and scenarios[1].step.concurrency is None


def test_time_limit_stops_sending(stub):
    # The second request is due ~1000 s after the first: the 1 s limit stops it from being sent.
    s = spec(rates=[0.001], warmup_requests=0, max_duration_s=1.0, seed=3)
    (sc,) = run_perf(s, stub, "ok", make_workload(s), None)
    assert len(sc.records) == 1 and sc.records[0].status == "ok"


def test_warmup_by_seconds_excludes_early_requests(stub):
    s = spec(concurrency=[3], warmup_requests=0, warmup_s=3600.0)
    (sc,) = run_perf(s, stub, "ok", make_workload(s), None)
    sm = summarize_scenario(s, sc, None)
    assert all(r.is_warmup for r in sc.records) and sm["num_requests"] == 0 and sm["num_warmup"] == 3


def test_bad_server_answers_are_errors_and_the_sweep_goes_on(stub):
    s = spec(concurrency=[1, 2], warmup_requests=0)
    scenarios = run_perf(s, stub, "garbage", make_workload(s), None)
    for sc in scenarios:
        sm = summarize_scenario(s, sc, None)
        assert (sm["num_errors"], sm["num_ok"], sm["ttft_ms_mean"]) == (3, 0, None)
        assert all("malformed SSE data" in r.error for r in sc.records)


@pytest.mark.parametrize(
    "force,body",
    [
        (None, {}),
        ("none", {}),
        ("min_tokens", {"min_tokens": 7}),
        ("ignore_eos", {"ignore_eos": True}),
        ("both", {"min_tokens": 7, "ignore_eos": True}),
    ],
)
def test_payload_forces_output_length(force, body):
    p = request_body("completions", "m", "hi", 7, force)
    assert {k: p[k] for k in ("min_tokens", "ignore_eos") if k in p} == body and p["max_tokens"] == 7


def test_output_len_note_says_when_forcing_is_ignored():
    full = RequestRecord(index=0, status="ok", start_ms=0, output_tokens=8, max_tokens=8)
    short = RequestRecord(index=1, status="ok", start_ms=0, output_tokens=3, max_tokens=8)
    assert output_len_note([full], "min_tokens") is None
    assert "1 of 2 requests stopped before max_tokens" in output_len_note([full, short], "both")
    assert "not forced" in output_len_note([full], None)


def test_synthetic_lengths_spread_within_bounds_and_seeded():
    enc, dec = words()
    ps = synthetic_prompts(50, 40, seed=2, encode=enc, decode=dec, output_len=20, len_spread=0.5)
    assert all(20 <= p.tokens <= 60 and 10 <= p.output_len <= 30 for p in ps)
    assert len({p.tokens for p in ps}) > 5 and len({p.text.split()[3] for p in ps}) == 50  # unique nonces
    again = synthetic_prompts(50, 40, seed=2, encode=enc, decode=dec, output_len=20, len_spread=0.5)
    assert [p.text for p in again] == [p.text for p in ps]
    approx = synthetic_prompts(2, 10, seed=0)
    assert approx[0].tokens_source == "approx_words" and approx[0].tokens == 10


def sharegpt(tmp_path, n=10):
    data = [
        {
            "id": str(i),
            "conversations": [
                {"from": "human", "value": " ".join(["w"] * (4 + i)) + f" q{i}"},
                {"from": "gpt", "value": " ".join(["a"] * (3 + i))},
            ],
        }
        for i in range(n)
    ]
    data.append({"id": "short", "conversations": [{"from": "human", "value": "too short"}]})
    path = tmp_path / "sg.json"
    path.write_text(json.dumps(data))
    return path, data


def test_sharegpt_follows_vllm_selection(tmp_path):
    path, data = sharegpt(tmp_path)
    ps = load_sharegpt(path, 5, seed=4, count_tokens=lambda t: len(t.split()))
    expected = [e for e in data if len(e["conversations"]) >= 2]
    random.seed(4)
    random.shuffle(expected)  # vLLM: random.seed(seed); random.shuffle(data)
    # vLLM also drops outputs under 4 tokens: entry 0's 3-token answer
    expected = [e for e in expected if len(e["conversations"][1]["value"].split()) >= 4][:5]
    assert [p.text for p in ps] == [e["conversations"][0]["value"] for e in expected]
    assert [p.output_len for p in ps] == [len(e["conversations"][1]["value"].split()) for e in expected]
    fixed = load_sharegpt(path, 12, seed=4, output_len=16)
    assert len(fixed) == 12 and all(p.output_len == 16 for p in fixed)  # reused in order when too few
    assert fixed[0].tokens_source == "approx_words"


@pytest.mark.parametrize(
    "content,reason",
    [
        (None, "not found"),
        ("{not json", "is not JSON"),
        ('{"a": 1}', "not a list"),
        ('[{"conversations": [{"value": "a"}, {"value": "b"}]}]', "no usable conversation"),
    ],
)
def test_bad_sharegpt_file_is_a_config_error(tmp_path, content, reason):
    path = tmp_path / "bad.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(ConfigError, match=reason) as err:
        load_sharegpt(path, 3, seed=0)
    assert str(err.value).startswith("perf.dataset:")


def test_dataset_workload_keeps_its_output_lengths_unless_set(tmp_path):
    path, _ = sharegpt(tmp_path)
    from_file = make_workload(PerfSpec(dataset=str(path)))(0, 3)
    fixed = make_workload(PerfSpec(dataset=str(path), output_len=9))(0, 3)
    assert any(p.output_len != 9 for p in from_file) and all(p.output_len == 9 for p in fixed)
