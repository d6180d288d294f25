"""Fault injection on tradeoff's inputs: model-written code, names and paths, secrets, config sizes.

One test per case, each named after the fault it injects; every one fails on the code before
the hardening (issue 18: items 1, 2, 3 and 9) and passes now. Real parts: the real jail
(bubblewrap), real files and folders, the real config loader and CLI.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from pathlib import Path

import pytest
import yaml

from tasks.core.errors import ConfigError
from tasks.loader import parse_config
from tasks.quality.suites.code import run_tests
from tests.helpers import ROOT, processes_with
from tests.helpers.configs import demo, hosted, load_error
from tests.helpers.suites import suite_context

# ---------------------------------------------------------------- 1. model-written code


def test_fault_hostile_candidate_is_contained_and_scored_failed(tmp_path):
    """Opens a socket (`import _socket`), leaves a detached setsid child, writes outside its folder, forges its
    score."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(4)
    listener.settimeout(0.2)
    port = listener.getsockname()[1]
    outside = tmp_path / "escaped.txt"
    marker = f"{time.time_ns() % 10**6}.{os.getpid()}"  # the child's `sleep` argument: its mark in /proc
    source = f'''
import os, sys, _socket, time
s = _socket.socket(_socket.AF_INET, _socket.SOCK_STREAM)
s.settimeout(1)
try:
    s.connect(("127.0.0.1", {port}))
except OSError:
    pass
if os.fork() == 0:
    os.setsid()
    os.execv("/usr/bin/sleep", ["sleep", "{marker}"])
for path in ("{outside}", "../escaped-{marker}.txt"):
    try:
        open(path, "w").write("escaped")
    except OSError:
        pass
print('{{"passed": 2}}')
def f(x):
    print('{{"passed": 2}}', flush=True)
    time.sleep(60)
'''
    seen: list[int] = []

    def watch() -> None:  # the detached child's host PID, while the candidate runs
        deadline = time.monotonic() + 8
        while not seen and time.monotonic() < deadline:
            seen.extend(processes_with(f"sleep {marker}"))
            time.sleep(0.05)

    watcher = threading.Thread(target=watch)
    watcher.start()
    escaped_tmp = Path("/tmp") / f"escaped-{marker}.txt"
    try:
        passed, error = run_tests(source, "f", [((1,), 2), ((5,), 6)], timeout_s=3)
    finally:
        watcher.join()
        survivors = processes_with(f"sleep {marker}")
        for pid in survivors:  # never leave one behind, even when the test fails
            os.kill(pid, 9)
        try:
            listener.accept()[0].close()
            connected = True
        except socket.timeout:
            connected = False
        listener.close()
        escaped = [str(p) for p in (outside, escaped_tmp) if p.exists()]
        escaped_tmp.unlink(missing_ok=True)
    assert seen, "the candidate's detached child was never seen running"
    assert (passed, error, [pid for pid in seen if pid in survivors], connected, escaped) == (
        0,
        "timeout after 3 s",
        [],
        False,
        [],
    )


def test_fault_candidate_forging_a_verdict_on_stdout_and_every_fd_scores_nothing():
    # The verdict's channel is not among them (the harness holds it, close-on-exec, non-dumpable); what the
    # candidate can reach is its own outputs pipe, and garbage there is its own failure.
    source = """
import os
forged = b'{"exit": 0, "frame": [{"value": 2}, {"value": 6}], "problem": null}'
for fd in range(0, 64):
    try:
        os.write(fd, forged)
    except OSError:
        pass
print('{"passed": 2}')
def f(x):
    return "wrong"
"""
    passed, error = run_tests(source, "f", [((1,), 2), ((5,), 6)], timeout_s=5)
    assert passed == 0 and (error or "").startswith("outputs frame of "), (passed, error)


def test_fault_candidate_object_claiming_equality_to_anything_fails():
    source = "class Yes:\n    def __eq__(self, other):\n        return True\ndef f(x):\n    return Yes()\n"
    assert run_tests(source, "f", [((1,), 2), ((5,), 6)], timeout_s=5) == (0, None)


def test_fault_candidate_looking_for_host_secrets_sees_no_work_tree_no_prefect_home_no_env(tmp_path, monkeypatch):
    import json

    from tasks.quality.sandbox import Limits, run_untrusted
    from tasks.quality.suites.code import _CANDIDATE

    monkeypatch.setenv("TRADEOFF_TEST_API_KEY", "sk-not-for-models")
    secret = tmp_path / "key.txt"
    secret.write_text("sk-not-for-models")
    paths = [str(ROOT / "pyproject.toml"), os.environ["PREFECT_HOME"], str(secret), "/var/run", "/home"]
    # LC_CTYPE: Python itself sets it in a C locale (PEP 538)
    source = (
        f"import os\ndef f(x):\n    return [[os.path.exists(p) for p in {paths!r}], "
        f"sorted(k for k in os.environ if k != 'LC_CTYPE')]\n"
    )
    out = run_untrusted(_CANDIDATE, json.dumps([source, "f", [[1]]]), Limits(wall_s=10))  # the raw outputs
    assert out.verdict["frame"][0]["value"] == [[False] * len(paths), ["PATH"]]


def test_fault_jail_missing_fails_the_code_suite_before_any_request(monkeypatch, tmp_path):
    from tasks.quality import sandbox
    from tasks.quality.base import suite_for
    from tests.stubs.quality_stub import start

    calls = []
    srv, url = start(lambda prompt: calls.append(prompt) or "\n    return x\n")
    monkeypatch.setattr(sandbox, "BWRAP", "bwrap-not-installed")
    ctx = suite_context(tmp_path, base_url=url, engine="llama.cpp")
    try:
        with pytest.raises(sandbox.SandboxUnavailable) as e:
            suite_for("code").run(ctx)
    finally:
        srv.shutdown()
    assert str(e.value) == "code sandbox: bubblewrap (bwrap) is not installed; apt-get install bubblewrap"
    assert calls == []


def test_fault_unconfined_code_against_a_bare_endpoint_is_refused_before_any_request(tmp_path):
    from tasks.quality.base import suite_for
    from tasks.quality.sandbox import SandboxUnavailable
    from tests.stubs.quality_stub import start

    calls = []
    srv, url = start(lambda prompt: calls.append(prompt) or "\n    return x\n")
    ctx = suite_context(tmp_path, base_url=url, params={"sandbox": "none"})  # `tradeoff quality --endpoint`
    try:
        with pytest.raises(
            SandboxUnavailable, match="^params.sandbox: 'none' would run code written by a bare endpoint"
        ):
            suite_for("code").run(ctx)
    finally:
        srv.shutdown()
    assert calls == []


def test_fault_unconfined_code_for_a_hosted_variant_is_refused_at_config_load(monkeypatch):
    monkeypatch.setenv("TRADEOFF_TEST_API_KEY", "k")
    monkeypatch.setenv("TRADEOFF_KEY_HOSTS", "TRADEOFF_TEST_API_KEY=api.example.com")
    cfg = hosted({"base_url": "https://api.example.com", "api_key_env": "TRADEOFF_TEST_API_KEY"})
    cfg["quality"]["suites"].append({"name": "code", "label": "code-unconfined", "params": {"sandbox": "none"}})
    with pytest.raises(ConfigError) as e:
        parse_config(cfg)
    n = len(cfg["quality"]["suites"]) - 1
    assert str(e.value) == (
        f"quality.suites[{n}] (code-unconfined).params.sandbox: 'none' would run code written by engine "
        "openai-compatible unconfined on this host; allowed only for llama-server, llama.cpp, "
        "tensorrt-llm, vllm; remove sandbox: none (variant hosted)"
    )
    cfg["quality"]["suites"][n]["variants"] = [v["name"] for v in cfg["variants"] if v["name"] != "hosted"]
    assert parse_config(cfg).quality.suites[n].params == {"sandbox": "none"}  # local engines only: allowed


# ---------------------------------------------------------------- 2. names and paths


def test_fault_cli_run_id_with_dotdot_is_refused_before_any_work(tmp_path, monkeypatch, capsys):
    from flows.cli import main

    monkeypatch.setenv("TRADEOFF_RUNS_DIR", str(tmp_path / "runs"))
    assert main(["run", str(tmp_path / "no-config.yaml"), "--run-id", "../x"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --run-id: '../x' is not a run id;") and err.count("\n") == 1
    assert list(tmp_path.iterdir()) == []


def test_fault_cli_absolute_run_id_is_refused_before_any_work(tmp_path, monkeypatch, capsys):
    from flows.cli import main

    monkeypatch.setenv("TRADEOFF_RUNS_DIR", str(tmp_path / "runs"))
    absolute = f"/tmp/tradeoff-abs-{os.getpid()}"
    assert main(["run", str(tmp_path / "no-config.yaml"), "--run-id", absolute]) == 2
    assert capsys.readouterr().err.startswith(f"error: --run-id: '{absolute}' is not a run id;")
    assert list(tmp_path.iterdir()) == [] and not Path(absolute).exists()


def test_fault_run_id_flow_parameter_with_dotdot_is_refused_by_the_nightly_and_the_variant_flow(tmp_path):
    from flows.nightly import nightly
    from flows.variant import variant_flow

    for flow_fn in (
        lambda: nightly.fn(config=str(tmp_path / "no-config.yaml"), run_id="../../x"),
        lambda: variant_flow.fn(config=str(tmp_path / "no-config.yaml"), variant="q4_1", run_id="../../x"),
    ):
        with pytest.raises(ConfigError, match=r"^run_id: '\.\./\.\./x' is not a run id;"):
            flow_fn()


def test_fault_run_folder_of_an_unsafe_run_id_is_refused_whoever_asks(tmp_path, monkeypatch):
    """make_run_paths, where a run id becomes a folder, checks it for any caller (not only the entry points)."""
    from tasks.core.runinfo import make_run_paths

    monkeypatch.setenv("TRADEOFF_RUNS_DIR", str(tmp_path / "runs"))
    for bad in ("../x", "a/b", str(tmp_path / "abs")):
        with pytest.raises(ConfigError, match=r"^run_id: .* is not a run id;"):
            make_run_paths(bad)
    assert not (tmp_path / "x").exists() and not (tmp_path / "abs").exists()


def test_fault_run_folder_that_is_a_symlink_out_of_the_runs_folder_is_refused(tmp_path, monkeypatch):
    from tasks.core.runinfo import make_run_paths

    monkeypatch.setenv("TRADEOFF_RUNS_DIR", str(tmp_path / "runs"))
    (tmp_path / "runs").mkdir()
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "runs" / "r1").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(ConfigError, match="^run folder: .* resolves outside"):
        make_run_paths("r1")
    assert list((tmp_path / "elsewhere").iterdir()) == []


def test_fault_config_name_with_dotdot_is_refused_at_load():
    cfg = demo()
    cfg["name"] = "../x"
    with pytest.raises(ConfigError, match=r"^name: '\.\./x' is not a name; use 1-64 letters"):
        parse_config(cfg)


@pytest.mark.parametrize("name", ["..", ".", "-h", "a/b", "x" * 65])
def test_fault_variant_name_that_is_a_path_or_an_option_is_refused_at_load(name):
    cfg = demo()
    cfg["variants"][1]["name"] = name
    with pytest.raises(ConfigError) as e:
        parse_config(cfg)
    assert str(e.value).startswith("variants.1.name: ") and "is not a name" in str(e.value) and "\n" not in str(e.value)


def test_fault_suite_named_after_a_path_is_refused_at_load():
    cfg = demo()
    cfg["quality"]["suites"].append({"name": "helm:../../../x"})
    with pytest.raises(ConfigError, match=r"^quality\.suites\[\d+\]\.name: 'helm:\.\./\.\./\.\./x' is not a name"):
        parse_config(cfg)


@pytest.mark.parametrize("url", ["file://otherhost/x", "file://relative/x"])
def test_fault_results_url_that_names_no_local_folder_is_refused(url):
    from tasks.orchestration.results import ResultsLocation, ResultsLocationError

    with pytest.raises(ResultsLocationError, match="is not a local folder"):
        ResultsLocation.resolve(url)


def test_fault_results_location_holding_a_dotdot_file_name_cannot_write_outside_the_run(tmp_path):
    import fsspec

    from tasks.core.runinfo import RunPaths
    from tasks.orchestration.results import ResultsLocation, ResultsLocationError

    fs = fsspec.filesystem("memory")
    fs.pipe("/hostile/r1/results/perf_requests/../../../../escape.parquet", b"not parquet")
    paths = RunPaths("r1", tmp_path / "runs" / "r1")
    try:
        with pytest.raises(ResultsLocationError, match="would land outside"):
            ResultsLocation.resolve("memory://hostile").fetch(paths)
    finally:
        fs.rm("/hostile", recursive=True)
    assert not (tmp_path / "escape.parquet").exists() and not (tmp_path / "runs" / "escape.parquet").exists()


def test_fault_clear_does_not_delete_through_a_symlinked_table_folder(tmp_path):
    from tasks.core.runinfo import RunPaths
    from tasks.orchestration.results import ResultsLocation

    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "q2_k.parquet").write_bytes(b"someone else's")
    paths = RunPaths("r1", tmp_path / "runs" / "r1")
    paths.results.mkdir(parents=True)
    (paths.results / "perf_requests").symlink_to(outside)
    ResultsLocation.resolve(str(tmp_path / "runs")).clear(paths, "q2_k")
    assert (outside / "q2_k.parquet").read_bytes() == b"someone else's"


# ---------------------------------------------------------------- 3. secrets


def test_fault_api_key_pasted_into_api_key_env_is_refused_without_showing_it():
    key = "sk-proj-Q2xvdWQgc2VjcmV0IGtleSBwYXN0ZWQ"
    err = load_error(hosted({"base_url": "https://api.example.com", "api_key_env": key}))
    assert err.startswith("variants[4] (hosted).engine_args.api_key_env: the value is not an environment variable name")
    assert key not in err and "sk-" not in err


def test_fault_api_key_pasted_into_api_key_secret_is_refused_without_showing_it():
    key = "sk-proj-Q2xvdWQgc2VjcmV0IGtleSBwYXN0ZWQ"
    err = load_error(hosted({"base_url": "https://api.example.com", "api_key_secret": key}))
    assert err.startswith("variants[4] (hosted).engine_args.api_key_secret: the value is not a Prefect block name")
    assert key not in err


def test_fault_api_key_env_naming_a_cloud_secret_is_refused(monkeypatch):
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY")
    err = load_error(hosted({"base_url": "https://api.example.com", "api_key_env": "AWS_SECRET_ACCESS_KEY"}))
    assert err == (
        "variants[4] (hosted).engine_args.api_key_env: that variable is not allowed to hold an API key "
        "(name not shown); allowed: TRADEOFF_*, *_API_KEY (the operator sets TRADEOFF_API_KEY_ENV_ALLOW), "
        "or use api_key_secret"
    )


def test_fault_api_key_env_allow_list_is_set_by_the_operator_not_the_config(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "k1")
    monkeypatch.setenv("GATEWAY_TOKEN", "k2")
    monkeypatch.setenv("TRADEOFF_API_KEY_ENV_ALLOW", "GATEWAY_TOKEN")
    monkeypatch.setenv("TRADEOFF_KEY_HOSTS", "GATEWAY_TOKEN=gw.example.com")
    assert parse_config(hosted({"base_url": "https://gw.example.com", "api_key_env": "GATEWAY_TOKEN"}))
    assert "allowed: GATEWAY_TOKEN " in load_error(
        hosted({"base_url": "https://api.example.com", "api_key_env": "OPENAI_API_KEY"})
    )


def test_fault_plain_http_base_url_to_a_remote_host_is_refused(monkeypatch):
    monkeypatch.setenv("TRADEOFF_TEST_API_KEY", "k")
    err = load_error(hosted({"base_url": "http://api.example.com", "api_key_env": "TRADEOFF_TEST_API_KEY"}))
    assert err.startswith("variants[4] (hosted).engine_args.base_url: plain http to api.example.com would send")
    for loopback in ("http://127.0.0.1:8000", "http://[::1]:8000/v1", "http://localhost:8000"):
        assert parse_config(hosted({"base_url": loopback, "api_key_env": "TRADEOFF_TEST_API_KEY"}))


def test_fault_base_url_with_credentials_is_refused_without_showing_them():
    err = load_error(hosted({"base_url": "https://alice:s3cr3t-pa55@api.example.com/v1"}))
    assert err.startswith(
        "variants[4] (hosted).engine_args.base_url: a URL with credentials (user:password@) is refused"
    )
    assert "s3cr3t" not in err and "alice" not in err


def test_fault_base_url_with_a_key_in_its_query_string_is_refused_without_showing_it():
    err = load_error(hosted({"base_url": "https://api.example.com/v1?api_key=sk-live-abcdef0123456789"}))
    assert "query string" in err and "abcdef0123456789" not in err


@pytest.mark.parametrize(
    "arg, value",
    [
        ("trust_remote_code", True),
        ("verify_certificate", False),
        ("ca_cert_path", "/tmp/evil-ca.pem"),
        ("base_url", "https://elsewhere.example"),
        ("header", {"Authorization": "Bearer x"}),
        ("auth_token", "tok-XYZ123"),
        ("tokenizer_backend", "remote"),
        ("tokenizer_backend", "tiktoken"),
        ("gguf", "/tmp/other.gguf"),
        ("api_key", "sk-123"),
    ],
)
def test_fault_lmeval_model_args_that_weaken_security_are_refused_at_load(arg, value):
    cfg = demo()
    cfg["quality"]["suites"].append({"name": "lm_eval", "params": {"tasks": ["gsm8k"], "model_args": {arg: value}}})
    err = load_error(cfg)
    assert f"(lm_eval).params.model_args: '{arg}' " in err and (arg == "api_key" or "refused" in err)
    assert arg == "tokenizer_backend" or repr(value) not in err  # never the value (a backend name is no secret)


def test_lmeval_hugging_face_tokenizer_without_remote_code_stays_allowed():
    cfg = yaml.safe_load((ROOT / "configs" / "nightly-gpu-quality.yaml").read_text())
    mc = next(s for s in cfg["quality"]["suites"] if s.get("label") == "mc")
    from tasks.quality.base import check_params

    assert check_params("lm_eval", mc["params"]) is None  # tokenizer_backend: huggingface, tokenizer: <hub name>


def test_fault_lmeval_never_sends_openai_api_key_from_the_environment(monkeypatch):
    from tasks.quality.suites.lm_eval import make_lm

    monkeypatch.setenv("OPENAI_API_KEY", "sk-from-the-operators-environment")
    lm = make_lm("http://127.0.0.1:9", "m", "completions", None, "endpoint", 2048, 1, 30, {})
    assert "sk-from-the-operators-environment" not in str(lm.header)


def test_fault_server_answer_echoing_the_key_is_kept_short_and_key_free_in_perf_requests(monkeypatch, tmp_path):
    """A hosted endpoint answers 401 with the key in its body: the perf_requests row keeps a short excerpt without
    it."""
    import asyncio
    import json
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from tasks.engines.base import engine_for
    from tasks.perf.perf_run import request_row
    from tasks.perf.sweep import Step, run_concurrency
    from tasks.perf.workload import Prompt

    key = "sk-test-Zm9yIHRoZSBlY2hvIHRlc3Q"

    class Echo(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def _send(self, status: int, body: dict) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            self._send(200, {"data": [{"id": "m"}]})

        def do_POST(self):
            self.rfile.read(int(self.headers["content-length"]))
            self._send(401, {"error": f"Incorrect API key provided: {self.headers['Authorization']}. " + "x" * 400})

    srv = ThreadingHTTPServer(("127.0.0.1", 0), Echo)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{srv.server_address[1]}"
    monkeypatch.setenv("TRADEOFF_TEST_API_KEY", key)
    cfg = parse_config(hosted({"base_url": url, "api_key_env": "TRADEOFF_TEST_API_KEY"}))
    v = cfg.variant("hosted")
    engine = engine_for(v.engine)
    try:
        endpoint = engine.serve(
            engine.build(v, cfg.models[v.model], tmp_path), v, cfg.models[v.model], tmp_path / "hosted.log", 10
        )
        (rec,) = asyncio.run(run_concurrency(endpoint.base_url, "m", [Prompt("hi", 1)], 1, 4))
    finally:
        srv.shutdown()
        srv.server_close()
    row = request_row("r1", "hosted", Step("c1", "concurrency", 1), 1, rec)
    assert row["status"] == "error" and row["error"].startswith("HTTP 401: ")
    assert key not in row["error"] and len(row["error"]) <= 160


def test_fault_key_cut_by_the_perf_clients_excerpt_is_replaced_too():
    from tasks.core.credentials import error_excerpt, remember_key

    key = "tk-Q3V0IGtleSBmcmFnbWVudA"
    remember_key(key)
    assert error_excerpt("HTTP 401: unknown key " + key[:12]) == "HTTP 401: unknown key [key]"


# ---------------------------------------------------------------- 9. sizes and counts


def test_fault_num_prompts_of_a_trillion_is_refused_at_load():
    cfg = demo()
    cfg["perf"]["num_prompts"] = 10**12
    assert load_error(cfg) == (
        "perf.num_prompts: input should be less than or equal to 100000 (got 1000000000000); fix the value"
    )


def test_fault_steps_times_repeats_times_prompts_over_a_million_requests_is_refused_at_load():
    cfg = demo()
    cfg["perf"].update(concurrency=list(range(1, 65)), repeats=100, num_prompts=1000)
    assert load_error(cfg).startswith(
        "perf: 64 steps x 100 repeats x 1000 num_prompts is 6,400,001 requests per variant, over the 1,000,000 limit"
    )


def test_fault_yaml_alias_bomb_is_refused_before_it_expands(tmp_path):
    from tasks.loader import load_config

    text = (ROOT / "configs" / "tiny.yaml").read_text()
    levels = ["x0: &x0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    levels += [f"x{i}: &x{i} [{', '.join([f'*x{i - 1}'] * 10)}]" for i in range(1, 6)]  # 10**6 values expanded
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text(text + "\nbomb:\n" + "".join(f"  {line}\n" for line in levels))
    with pytest.raises(ConfigError) as e:
        load_config(bomb)
    assert str(e.value) == (
        f"config {bomb}: its YAML aliases expand to more than 100000 values (an alias bomb?); "
        f"write the values out or use fewer aliases"
    )


def test_fault_config_mapping_flow_parameter_of_a_million_values_is_refused():
    cfg = demo()
    cfg["variants"][0]["engine_args"] = {"x": [[0] * 1000 for _ in range(1000)]}
    assert load_error(cfg) == "config: more than 100000 values (shared references expanded); trim it"


def test_fault_config_file_over_a_mebibyte_is_refused_before_it_is_read(tmp_path):
    from tasks.loader import load_config

    big = tmp_path / "big.yaml"
    big.write_text((ROOT / "configs" / "tiny.yaml").read_text() + "#" * (1 << 20) + "\n")
    with pytest.raises(ConfigError, match=r"^config: .* bytes, over the 1048576-byte limit; trim it$"):
        load_config(big)


def test_every_count_and_size_in_the_config_models_has_an_upper_bound():
    from tasks.config_limits_doc import all_limit_rows

    rows = all_limit_rows()
    assert len(rows) > 90 and [path for path, _, _, bounded in rows if not bounded] == []


def test_config_limits_doc_is_the_table_the_models_give():
    from tasks.config_limits_doc import limits_markdown

    assert limits_markdown() in (ROOT / "docs" / "config-limits.md").read_text()
