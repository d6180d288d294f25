"""End to end through the engine interface, without vLLM or a GPU (seconds, not minutes).

- A hosted endpoint: engine `openai-compatible` against a llama.cpp server started here with an API
  key, standing in for a hosted API; token prices in the config end up as cost columns in v_cost,
  and the key is found nowhere on disk afterwards.
- Bad input: a server that never becomes healthy (its log tail in the error) and one that dies in
  the middle of the perf sweep (its completed requests kept, the rest errored); both variants are
  marked failed and the others go on.
"""

from __future__ import annotations

import json
import os
import secrets
from pathlib import Path

import httpx
import pytest

from tasks.core.registry import ENGINES
from tests.helpers import q, run_nightly, smollm2
from tests.helpers.engines import STUB, StubTestEngine

pytestmark = pytest.mark.e2e

KEY = "sk-tradeoff-test-" + secrets.token_hex(12)
KEY_ENV = "TRADEOFF_TEST_HOSTED_KEY"
SMOL = smollm2()
PRICE_IN, PRICE_OUT = 0.5, 1.5  # USD per 1M tokens


@pytest.fixture(scope="module")
def stand_in(tmp_path_factory):
    """A llama.cpp server that demands an API key: the hosted API's stand-in."""
    from tasks.engines.base import engine_for
    from tasks.engines.launcher import free_port
    from tasks.loader import parse_config

    cfg = parse_config(
        {
            "models": {"smol": SMOL},
            "variants": [{"name": "smol-hosted", "model": "smol", "quantization": "q4_1", "reference": True}],
        }
    )
    v = cfg.variant("smol-hosted")
    engine = engine_for("llama.cpp")
    art = engine.build(v, cfg.models["smol"], tmp_path_factory.mktemp("builds"))
    port = free_port()
    cmd = engine.server_command(art, v, cfg.models["smol"], "127.0.0.1", port) + ["--api_key", KEY]
    url = f"http://127.0.0.1:{port}"
    log = tmp_path_factory.mktemp("stand-in") / "server.log"
    # /docs answers without the key; /v1/* needs it.
    from tasks.engines import launcher as serve

    server = serve.start_server(cmd, url, log, 120, health_path="/docs")
    try:
        yield url, log
    finally:
        serve.stop_server(server)


@pytest.fixture(scope="module")
def run(stand_in, tmp_path_factory, prefect_harness):
    url, _ = stand_in
    tmp = tmp_path_factory.mktemp("engines-e2e")
    config = {
        "name": "engines-e2e",
        "models": {"smol": SMOL},
        "variants": [
            {
                "name": "hosted",
                "model": "smol",
                "engine": "openai-compatible",
                "quantization": "q4_1",
                "reference": True,
                "engine_args": {"base_url": url + "/v1", "model": "smol-hosted", "api_key_env": KEY_ENV},
                "cost": {"usd_per_1m_input_tokens": PRICE_IN, "usd_per_1m_output_tokens": PRICE_OUT},
            },
            {
                "name": "never-healthy",
                "model": "smol",
                "engine": "stub-test",
                "quantization": "q4_1",
                "engine_args": {"mode": "hang"},
            },
            {
                "name": "dies",
                "model": "smol",
                "engine": "stub-test",
                "quantization": "q4_1",
                "engine_args": {"mode": "die-after-5"},
            },
        ],
        "perf": {"concurrency": [1, 2], "num_prompts": 3, "warmup_requests": 1, "input_len": 32, "output_len": 8},
        "quality": {
            "primary": "arithmetic.accuracy",
            "suites": [{"name": "arithmetic", "limit": 10, "params": {"tasks": ["1D+"]}}],
        },
        "server_start_timeout_s": 5,
    }
    mp = pytest.MonkeyPatch()
    mp.setitem(ENGINES, "stub-test", StubTestEngine)
    try:
        summary = run_nightly(config, tmp, **{KEY_ENV: KEY})
    finally:
        mp.undo()
    return summary, tmp


def test_the_stand_in_wants_the_key(stand_in) -> None:
    url, _ = stand_in
    assert httpx.get(url + "/v1/models", timeout=10).status_code == 401
    assert httpx.get(url + "/v1/models", headers={"Authorization": f"Bearer {KEY}"}, timeout=10).status_code == 200


def test_failed_servers_fail_their_variant_only(run) -> None:
    summary, tmp = run
    assert summary["status"] == "partial" and sorted(summary["failed_variants"]) == ["dies", "never-healthy"]
    rows = dict(q(tmp / "wh.duckdb", "select variant, error from variants"))
    assert rows["hosted"] is None
    assert "not healthy after 5 s" in rows["never-healthy"] and "stub: loading weights" in rows["never-healthy"]
    assert rows["dies"].startswith(
        "ServerDied: server exited with code 3 during the perf sweep: stub: exiting after 5 completions"
    )


def test_a_server_dying_mid_sweep_keeps_completed_requests(run) -> None:
    _, tmp = run
    rows = q(
        tmp / "wh.duckdb",
        """select status, error from perf_requests where variant = 'dies'
                                    order by scenario, "repeat", request_index""",
    )
    ok = [r for r in rows if r[0] == "ok"]
    failed = [r for r in rows if r[0] != "ok"]
    assert len(ok) == 5 and len(rows) == 2 * (1 + 3)  # every request recorded, the first five completed
    assert failed and all(err for _, err in failed)  # the others errored, each with its reason
    assert any(status == "incomplete" for status, _ in failed)  # the one in flight when it died


def test_hosted_endpoint_is_measured_and_costed(run) -> None:
    _, tmp = run
    db = tmp / "wh.duckdb"
    ((tps, quality, engine),) = q(
        db, "select best_output_tok_s, quality, engine from v_tradeoff where variant = 'hosted'"
    )
    assert tps > 0 and 0 <= quality <= 1 and engine == "openai-compatible"
    ((basis, per_1m, per_answer, note, tokens),) = q(
        db,
        """select cost_basis, usd_per_1m_tok, usd_per_correct_answer,
        cost_note, tokens_per_answer from v_cost where variant = 'hosted'""",
    )
    assert basis == "token prices" and per_1m == PRICE_OUT and tokens > 0
    ((pt, ot),) = q(
        db,
        """select avg(json_extract(details, '$.prompt_tokens')::double),
                                avg(json_extract(details, '$.output_tokens')::double)
                         from quality_samples where variant = 'hosted' and suite = 'arithmetic'""",
    )
    if quality > 0:
        assert per_answer == pytest.approx((PRICE_IN * pt + PRICE_OUT * ot) / 1e6 / quality)
    else:
        assert per_answer is None and note == "no correct answer"
    # llama-cpp-python's server exposes no metrics: the hosted variant has none
    assert q(db, "select count(*) from engine_metrics where variant = 'hosted'") == [(0,)]


def test_the_api_key_is_written_nowhere(run) -> None:
    _, tmp = run
    places = [p for p in tmp.rglob("*") if p.is_file()]
    prefect_home = Path(os.environ["PREFECT_HOME"])
    places += [p for p in prefect_home.rglob("*") if p.is_file()]
    assert places
    leaked = [str(p) for p in places if KEY.encode() in p.read_bytes()]
    assert not leaked
    log = next(tmp.rglob("hosted.server.log")).read_text()
    assert f"env {KEY_ENV}" in log and KEY not in log


def test_stub_servers_are_stopped(run) -> None:
    left = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if str(STUB).encode() in cmdline.read_bytes():
                left.append(cmdline.parent.name)
        except OSError:
            continue
    assert not left


def test_a_wrong_key_is_refused_in_one_line(stand_in, tmp_path, monkeypatch) -> None:
    from tasks.engines.base import engine_for
    from tasks.engines.openai_compatible import HostedError
    from tasks.loader import parse_config

    url, _ = stand_in
    monkeypatch.setenv(KEY_ENV, "sk-wrong")
    cfg = parse_config(
        {
            "models": {"smol": SMOL},
            "variants": [
                {
                    "name": "h",
                    "model": "smol",
                    "engine": "openai-compatible",
                    "quantization": "q4_1",
                    "reference": True,
                    "engine_args": {"base_url": url, "model": "smol-hosted", "api_key_env": KEY_ENV},
                }
            ],
        }
    )
    v = cfg.variant("h")
    engine = engine_for("openai-compatible")
    art = engine.build(v, cfg.models["smol"], tmp_path)
    with pytest.raises(HostedError) as e:
        engine.serve(art, v, cfg.models["smol"], tmp_path / "h.log", 10)
    assert str(e.value) == f"hosted endpoint {url} refused the API key (key from env {KEY_ENV}): HTTP 401"
    assert "sk-wrong" not in json.dumps(str(e.value))


def test_key_from_a_prefect_secret_block(prefect_harness) -> None:
    from prefect.blocks.system import Secret

    from tasks.engines.openai_compatible import HostedArgs, HostedError, read_key

    Secret(value="sk-from-block").save("tradeoff-test-key", overwrite=True)
    assert (
        read_key(HostedArgs(base_url="http://127.0.0.1:9", model="m", api_key_secret="tradeoff-test-key"))
        == "sk-from-block"
    )
    with pytest.raises(HostedError, match=r"^Prefect Secret block 'no-such-block' cannot be read"):
        read_key(HostedArgs(base_url="http://127.0.0.1:9", model="m", api_key_secret="no-such-block"))
