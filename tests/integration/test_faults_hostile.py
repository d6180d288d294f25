"""Fault injection, second pass (issue 26): keys bound to their hosts, the quality client capped, bad answers
contained per sample, the jail's ceiling, children tied to the tool.

One test per attack, named after it; each was tried live on d583797 and fails there (see docs/security.md,
"How each claim is tested"). Real parts: the config loader, the clients against local hostile servers, the
real suites, the real bubblewrap jail, real child processes killed for real.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import tasks.client as client
from tasks.core.config import SuiteSpec
from tasks.core.errors import ConfigError
from tasks.loader import parse_config
from tasks.quality import sandbox
from tasks.quality.sandbox import Limits, run_untrusted
from tasks.quality.suite_loop import run_suite
from tasks.quality.suites.code import run_tests
from tests.helpers import ROOT, processes_with
from tests.helpers.configs import demo, hosted, load_error
from tests.helpers.suites import suite_context
from tests.stubs.quality_stub import start


def alive(marker: str) -> list[int]:
    """Live (not zombie) processes whose command line holds `marker`."""
    return processes_with(marker)


def wait_until(check, timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.05)
    return False


@pytest.fixture(scope="module")
def stub():
    srv, url = start(lambda prompt: " 4")
    yield url
    srv.shutdown()


# ---------------------------------------------------------------- 1. keys bound to their hosts


def test_fault_api_key_env_sent_to_a_host_it_is_not_bound_to_is_refused_at_load(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-for-openai-only")
    monkeypatch.setenv("TRADEOFF_KEY_HOSTS", "OPENAI_API_KEY=api.openai.com; secret:gw-key=*.gateway.example")
    err = load_error(hosted({"base_url": "https://evil.example", "api_key_env": "OPENAI_API_KEY"}))
    assert err == (
        "variants[4] (hosted).engine_args.api_key_env: the key of OPENAI_API_KEY may not go to evil.example: "
        "it is bound to api.openai.com; if evil.example should get it, the operator adds "
        "'OPENAI_API_KEY=evil.example' to TRADEOFF_KEY_HOSTS (an environment variable, never a config), "
        "else fix base_url"
    )
    assert parse_config(hosted({"base_url": "https://api.openai.com/v1", "api_key_env": "OPENAI_API_KEY"}))
    # a subdomain pattern covers subdomains, not a look-alike; loopback needs no binding
    assert parse_config(hosted({"base_url": "https://eu.gateway.example", "api_key_secret": "gw-key"}))
    assert "may not go to gateway.example.evil.example" in load_error(
        hosted({"base_url": "https://gateway.example.evil.example", "api_key_secret": "gw-key"})
    )
    assert parse_config(hosted({"base_url": "http://127.0.0.1:8000", "api_key_env": "OPENAI_API_KEY"}))


def test_fault_variant_flow_parameter_sending_a_secret_to_any_https_host_is_refused_before_any_work(tmp_path):
    from flows.variant import variant_flow

    cfg = hosted({"base_url": "https://evil.example", "api_key_secret": "openai-key"})
    runs = Path(os.environ["TRADEOFF_RUNS_DIR"])
    with pytest.raises(
        ConfigError,
        match=r"engine_args\.api_key_secret: the key of secret:openai-key may not go to "
        r"evil\.example: it is bound to no host",
    ):
        variant_flow.fn(config=cfg, variant="hosted", run_id="r-evil")
    assert not (runs / "r-evil").exists()  # nothing written, nothing read


def test_fault_operator_key_hosts_entry_that_is_malformed_is_named_not_shown(monkeypatch):
    monkeypatch.setenv("TRADEOFF_TEST_API_KEY", "k")
    monkeypatch.setenv("TRADEOFF_KEY_HOSTS", "TRADEOFF_TEST_API_KEY=api.example.com;sk-live-pasted-here")
    err = load_error(hosted({"base_url": "https://api.example.com", "api_key_env": "TRADEOFF_TEST_API_KEY"}))
    assert "TRADEOFF_KEY_HOSTS: entry 2 is not SOURCE=HOST" in err and "sk-live" not in err


# ---------------------------------------------------------------- 2. the quality client: deadline and caps


@pytest.mark.parametrize("mode", ["drip", "drip-headers"])
def test_fault_quality_client_against_a_server_dripping_bytes_ends_at_its_deadline(stub, mode):
    t0 = time.perf_counter()
    with pytest.raises(client.DeadlineExceeded, match="request deadline of 1.5 s"):
        client.complete(stub, mode, "p", 4, timeout_s=1.5)
    assert time.perf_counter() - t0 < 3.5  # before: each byte came within the per-read timeout, the whole never


@pytest.mark.parametrize("mode", ["huge", "huge-nolength"])
def test_fault_quality_client_refuses_a_body_over_the_size_cap(stub, mode, monkeypatch):
    monkeypatch.setattr(client, "MAX_RESPONSE_BYTES", 1 << 20)  # the stub sends 8 MiB
    with pytest.raises(client.BadResponse, match="over the 1048576-byte limit"):
        client.complete(stub, mode, "p", 4, timeout_s=30)
    with pytest.raises(client.BadResponse, match="over the 1048576-byte limit"):
        client.get(stub, "/huge", timeout_s=30)


def test_fault_usage_of_three_billion_tokens_is_refused_by_the_client_not_the_warehouse(stub):
    srv, url = start(lambda prompt: {"choices": [{"text": " 4"}], "usage": {"completion_tokens": 3_000_000_000}})
    try:
        with pytest.raises(client.BadResponse, match="usage.completion_tokens is 3000000000, not a token count"):
            client.complete(url, "m", "p", 4, usage={})
    finally:
        srv.shutdown()


# ---------------------------------------------------------------- 3. one bad answer errs one sample

BAD_ANSWERS = [{"choices": [None]}, {"choices": [{"index": 0, "text": 5}]}, {"choices": "x"}, ["not", "an", "object"]]


@pytest.mark.parametrize("suite, params", [("arithmetic", {}), ("longctx", {}), ("multiturn", {}), ("code", {})])
def test_fault_answers_of_the_wrong_shape_err_their_samples_not_the_suite(suite, params, tmp_path):
    asked = []

    def answer(prompt_or_messages):
        asked.append(1)
        n = len(asked)
        if n <= len(BAD_ANSWERS):
            bad = BAD_ANSWERS[n - 1]
            return bad if isinstance(bad, dict) else {"raw": bad}
        return " 4" if isinstance(prompt_or_messages, str) else "It is Rex."

    def chat(messages):
        got = answer(messages)
        if (
            isinstance(got, dict)
            and "choices" in got
            and got["choices"]
            and isinstance(got["choices"], list)
            and isinstance(got["choices"][0], dict)
        ):
            got = {"choices": [{"index": 0, "message": {"content": 5}}]}
        return got

    srv, url = start(answer, chat)
    n = 6
    ctx = suite_context(tmp_path, base_url=url, limit=n, params=params, engine="llama.cpp")
    try:
        samples, scores = run_suite(
            SuiteSpec(name=suite), ctx, {"run_id": "r", "variant": "v", "suite": suite}, max_error_rate=0.9
        )
    finally:
        srv.shutdown()
    metrics = {s["metric"]: s for s in scores}
    assert "suite_failed" not in metrics, metrics.get("suite_failed", {}).get("note")
    errored = [json.loads(s["details"]) for s in samples if json.loads(s["details"])["errored"]]
    assert len(samples) == n and len(errored) == len(BAD_ANSWERS)
    assert all(d["error"].startswith("BadResponse: malformed answer") for d in errored), errored


def test_fault_code_answer_nested_three_thousand_deep_is_one_unparsed_sample():
    from tasks.quality.suites.code import parses

    assert parses("def f(x):\n    return " + "-" * 3000 + "x\n", "f") is False  # before: RecursionError
    assert parses("def f(x):\n    return x\x00\n", "f") is False
    assert parses("def f(x):\n    return x\n", "f") is True


def test_fault_lmeval_answers_of_the_wrong_shape_are_empty_answers_not_the_end_of_the_suite():
    from tasks.quality.suites.lm_eval import make_lm

    lm = make_lm("http://127.0.0.1:9", "m", "completions", None, "endpoint", 2048, 1, 30, {})
    outputs = [{"choices": [None]}, {"choices": [{"index": 0, "text": 5}]}, {"choices": [{"index": 0, "text": "ok"}]}]
    assert lm.parse_generations(outputs=outputs, contexts=["a", "b", "c"]) == ["", "", "ok"]
    chat = make_lm("http://127.0.0.1:9", "m", "chat", None, "endpoint", 2048, 1, 30, {})
    bad = [
        {"choices": [{"index": 0, "message": {"content": 5}}]},
        {"choices": [{"index": 0, "message": {"content": "ok"}}]},
    ]
    assert chat.parse_generations(outputs=bad, contexts=["a", "b"]) == ["", "ok"]


# ---------------------------------------------------------------- 4. the jail's ceiling

CHILD = r"""
import ctypes, json, os, struct, subprocess, sys, time
out = int(sys.argv[1])
value = eval(sys.stdin.read())
body = json.dumps(value).encode()
os.write(out, struct.pack(">Q", len(body)) + body)
"""


def jailed(expr: str, **limits):
    got = run_untrusted(CHILD, expr, Limits(**{"wall_s": 20.0, **limits}))
    return got


def jailed_as_a_user(expr: str) -> dict:
    """The verdict of `expr` jailed by an unprivileged user (nobody, through setpriv, with the system's python3: the
    jail without root, in its own user namespace), or a skip where this host cannot show that."""
    python = Path("/usr/bin/python3")
    if os.geteuid() != 0 or not python.exists() or not any(Path(d, "setpriv").exists() for d in ("/usr/bin", "/bin")):
        pytest.skip("needs root, setpriv and /usr/bin/python3 to run the jail as an unprivileged user")
    code = (
        "import json, sys\nfrom tasks.quality.sandbox import Limits, run_untrusted\n"
        "out = run_untrusted(sys.argv[1], sys.argv[2], Limits(wall_s=20.0))\n"
        "print(json.dumps([out.verdict, out.stderr[-300:]]))\n"
    )
    got = subprocess.run(
        ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", str(python), "-c", code, CHILD, expr],
        capture_output=True,
        text=True,
        cwd="/",
        timeout=120,
        env={"PATH": "/usr/bin:/bin", "HOME": "/tmp", "PYTHONPATH": str(ROOT)},
    )
    verdict, stderr = json.loads(got.stdout.splitlines()[-1]) if got.returncode == 0 else (None, got.stderr)
    if verdict is None or verdict.get("frame") is None:
        pytest.skip(f"the jail does not start for an unprivileged user here: {stderr.strip()[-200:]}")
    return verdict


def test_fault_jail_without_root_filling_dev_and_dev_shm_writes_nothing():
    script = (
        "for p in /dev/shm/big /dev/big; do head -c 1048576 /dev/zero > $p 2>/dev/null && echo wrote $p; done; "
        "echo x > /dev/null && echo null-works"
    )
    expr = f"subprocess.run(['/bin/sh', '-c', {script!r}], capture_output=True, text=True).stdout.split()"
    verdict = jailed_as_a_user(expr) if os.geteuid() == 0 else jailed(expr).verdict
    assert verdict["frame"] == ["null-works"], verdict  # before: 1 MiB into each, up to half the RAM (root: refused)


SYSCALL_NUMBERS = {  # the attack's own table (not the filter's): name -> number, per architecture
    "x86_64": {
        "io_uring_setup": 425,
        "io_uring_enter": 426,
        "io_uring_register": 427,
        "keyctl": 250,
        "add_key": 248,
        "request_key": 249,
        "bpf": 321,
        "perf_event_open": 298,
        "userfaultfd": 323,
    },
    "aarch64": {
        "io_uring_setup": 425,
        "io_uring_enter": 426,
        "io_uring_register": 427,
        "keyctl": 219,
        "add_key": 217,
        "request_key": 218,
        "bpf": 280,
        "perf_event_open": 241,
        "userfaultfd": 282,
    },
}


def test_fault_candidate_calling_io_uring_keyctl_bpf_perf_userfaultfd_gets_eperm():
    if os.uname().machine not in SYSCALL_NUMBERS:
        pytest.skip(f"no syscall numbers for {os.uname().machine}")
    numbers = SYSCALL_NUMBERS[os.uname().machine]
    expr = (
        f"{{name: (lambda r: [r, ctypes.get_errno()])(ctypes.CDLL(None, use_errno=True).syscall(n, 0, 0, 0, 0, 0)) "
        f"for name, n in {numbers!r}.items()}}"
    )
    out = jailed(expr)
    assert out.verdict["frame"] == {name: [-1, 1] for name in numbers}, out.verdict  # EPERM for each


@pytest.mark.skipif(
    os.geteuid() != 0, reason="the jail's own uid is drawn by root; a user's jail counts in its own user namespace"
)
def test_fault_jail_process_limit_is_not_eaten_by_the_hosts_nobody_processes():
    sleepers = [
        subprocess.Popen(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "sleep", "60"])
        for _ in range(20)
    ]  # before: the jail ran as nobody, and RLIMIT_NPROC counted these 20 too
    try:
        out = jailed("[subprocess.Popen(['true']).wait() for _ in range(4)]", processes=16)
    finally:
        for p in sleepers:
            p.kill()
            p.wait()
    assert out.verdict["frame"] == [0, 0, 0, 0], (out.verdict, out.stderr[-300:])


def test_fault_jail_processes_together_cannot_exceed_the_memory_total():
    if getattr(sandbox, "_cgroup_parents", lambda: True)() is None:
        pytest.skip("no cgroup this process may make here: the total is RLIMIT_AS x RLIMIT_NPROC (docs/security.md)")
    grab = "python3 -c 'import time; b = bytearray(64 << 20); time.sleep(3)'"
    expr = f"[p.wait() for p in [subprocess.Popen(['/bin/sh', '-c', {grab!r}]) for _ in range(4)]]"
    out = jailed(expr, memory_mb=512, memory_total_mb=128)  # 4 x 64 MiB, each under its own 512 MiB
    assert getattr(out, "oom_killed", False) and out.cgroup in ("v1", "v2"), out  # before: 256 MiB held, no total


def test_fault_failed_jail_probe_is_not_cached_and_names_bwraps_own_words(tmp_path, monkeypatch):
    fake = tmp_path / "bwrap"
    fake.write_text("#!/bin/sh\necho 'bwrap: Creating new namespace failed: Operation not permitted' >&2\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setattr(sandbox, "_available", {})
    monkeypatch.setattr(sandbox, "BWRAP", str(fake))
    reason = sandbox.unavailable_reason()
    assert reason.startswith(
        "bwrap cannot create the jail: bwrap: Creating new namespace failed: Operation not permitted"
    )
    if os.geteuid() == 0:  # root needs no user namespace: saying so would mislead
        assert "user namespaces" not in reason
    monkeypatch.setattr(sandbox, "BWRAP", "bwrap")  # bubblewrap fixed: the next ask finds it working
    assert sandbox.unavailable_reason() is None


@pytest.mark.parametrize("cgroup", ["cgroup", "no-cgroup"])
def test_fault_unconfined_candidate_leaving_a_setsid_grandchild_leaves_nothing(cgroup, monkeypatch):
    if cgroup == "no-cgroup":  # the harness alone (before this work there was no cgroup either)
        monkeypatch.setattr(sandbox, "_cgroup_parents", lambda: None, raising=False)
    elif getattr(sandbox, "_cgroup_parents", lambda: True)() is None:
        pytest.skip("no cgroup this process may make here")
    marker = f"{time.time_ns() % 10**6}.{os.getpid()}"
    source = textwrap.dedent(f'''
        import os, time
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                os.execv("/usr/bin/sleep", ["sleep", "{marker}"])
            os._exit(0)
        def f(x):
            time.sleep(60)
        ''')
    try:
        assert run_tests(source, "f", [((1,), 2)], timeout_s=1, sandbox="none") == (0, "timeout after 1 s")
        left = alive(f"sleep {marker}")
    finally:
        for pid in alive(f"sleep {marker}"):
            os.kill(pid, signal.SIGKILL)
    assert left == []  # before: the detached sleep outlived the run


def test_fault_quality_gguf_label_does_not_make_a_remote_endpoint_local(tmp_path, capsys):
    from flows.cli import main

    gguf = tmp_path / "x.gguf"
    gguf.write_bytes(b"GGUF")
    rc = main(
        [
            "quality",
            "--endpoint",
            "http://192.0.2.1:8000",
            "--model",
            "m",
            "--suite",
            "code",
            "--param",
            "sandbox=none",
            "--gguf",
            str(gguf),
            "--limit",
            "1",
            "--timeout-s",
            "1",
            "--output",
            str(tmp_path / "o"),
        ]
    )
    scores = json.loads((tmp_path / "o" / "scores.json").read_text())["scores"]
    assert rc == 1 and scores[0]["metric"] == "suite_failed"
    assert scores[0]["note"].startswith(
        "SandboxUnavailable: params.sandbox: 'none' would run code written at "
        "192.0.2.1 (not this host's loopback) unconfined on this host"
    )


# ---------------------------------------------------------------- 5. children tied to the tool

TIED = {
    # a build step (vLLM quantisation, TensorRT-LLM builds, hub downloads all run through it)
    "build-step": "from tasks.engines.vllm import run_step\nrun_step(CMD, Path(sys.argv[2]), 600, 'build')\n",
    # doctor's Prefect probe: its child would start Prefect's ephemeral API
    "doctor-prefect-probe": "import tasks.doctor as d\nsys.executable = CMD[0]\nd.check_prefect(600)\n",
}


def tied_run(kind: str, tmp_path: Path, marker: str) -> subprocess.Popen:
    """A process that runs one child of the tool (which starts a background `sleep MARKER` and waits): the caller
    stops it and looks for the sleeps."""
    fake = tmp_path / "child.sh"  # what the build / the probe's interpreter does: start workers, then work
    fake.write_text(f"#!/bin/sh\nsleep {marker} &\nexec sleep {marker}\n")
    fake.chmod(0o755)
    code = (
        "import sys\nfrom pathlib import Path\nfrom tasks.core.lifecycle import StopSignals\n"
        f"CMD = [{str(fake)!r}]\nwith StopSignals():\n" + textwrap.indent(TIED[kind], "    ")
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code, "x", str(tmp_path / "build.log")],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    if not wait_until(lambda: len(alive(f"sleep {marker}")) == 2, 180):
        proc.kill()
        pytest.fail("the child never started its sleeps")
    return proc


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM], ids=["SIGKILL", "SIGTERM"])
@pytest.mark.parametrize("kind", sorted(TIED))
def test_fault_child_of_the_tool_and_its_workers_end_when_the_tool_is_killed(kind, sig, tmp_path):
    marker = f"{time.time_ns() % 10**6}.{os.getpid()}"
    proc = tied_run(kind, tmp_path, marker)
    try:
        proc.send_signal(sig)
        proc.wait(timeout=30)
        gone = wait_until(lambda: not alive(f"sleep {marker}"), 10)
    finally:
        for pid in alive(f"sleep {marker}"):
            os.kill(pid, signal.SIGKILL)
        if proc.poll() is None:
            proc.kill()
    assert gone  # before: SIGKILL left both, SIGTERM the worker


# ---------------------------------------------------------------- 6. the smaller items


def test_fault_server_claiming_three_billion_tokens_errs_its_request_and_the_perf_write_succeeds(tmp_path):
    import asyncio

    from tasks.perf.perf_run import request_row
    from tasks.perf.sweep import Step, run_load
    from tasks.perf.workload import Prompt
    from tests.stubs.stub_server import start_stub
    from warehouse.contract import read_table, write_table

    srv, url = start_stub()
    try:
        (rec,) = asyncio.run(run_load(url, "odd-billions", [Prompt("p", 3)], 4, concurrency=1))
    finally:
        srv.shutdown()
    assert rec.status == "error" and "usage.completion_tokens is 3000000000, not a token count" in rec.error
    write_table(tmp_path, "perf_requests", "v", [request_row("r", "v", Step("c1", "concurrency", 1), 1, rec)])
    assert len(read_table(tmp_path, "perf_requests")) == 1  # before: the int32 column refused the whole variant


@pytest.mark.parametrize("field, value", [("perf", {"seed": -1}), ("suite", {"seed": -1})])
def test_fault_negative_seed_is_refused_at_load(field, value):
    cfg = demo()
    if field == "perf":
        cfg["perf"].update(value)
        where = "perf.seed"
    else:
        cfg["quality"]["suites"][0].update(value)
        where = "quality.suites.0.seed"
    err = load_error(cfg)
    assert err.startswith(f"{where}: input should be greater than or equal to 0 (got -1)"), err


def test_fault_error_text_with_markup_stays_text_in_the_prefect_artifacts():
    from markdown_it import MarkdownIt

    from tasks.orchestration.variant_bookkeeping import summary_markdown

    error = "RuntimeError: x` <img src=x onerror=alert(1)> [log in](https://evil.example) ![t](https://evil.example/t)"
    row = {
        "variant": "v",
        "status": "failed",
        "engine": "llama.cpp",
        "quantization": "q4_1",
        "speculative": None,
        "artifact_sha256": None,
        "error": error,
    }
    html = MarkdownIt("commonmark", {"html": True}).render(summary_markdown(row, None, "h", 1.0))
    assert "<img" not in html and "<a " not in html and "&lt;img src=x onerror=alert(1)&gt;" in html


def test_fault_results_url_with_credentials_is_refused_and_never_shown(tmp_path, capsys, monkeypatch):
    from flows.cli import main
    from tasks.orchestration.results import ResultsLocation, ResultsLocationError

    secret = "s3cr3t-Zm9yIHRoZSB0ZXN0"
    for url in (
        f"https://alice:{secret}@store.example/tradeoff",
        f"az://c/tradeoff?sig={secret}",
        f"s3://bucket/tradeoff#{secret}",
    ):
        with pytest.raises(ResultsLocationError) as e:
            ResultsLocation.resolve(url)
        assert str(e.value).startswith(
            "results_url: a URL holding a password, a query string or a fragment is refused and not shown"
        ) and secret not in str(e.value)
    cfg = demo()
    cfg["scale_out"] = {"results_url": f"memory://alice:{secret}@host/x"}
    err = load_error(cfg)
    assert err.startswith("scale_out.results_url: a URL holding a password") and secret not in err
    monkeypatch.setenv("TRADEOFF_RESULTS_URL", f"memory://alice:{secret}@host/x")
    assert main(["warehouse", "rebuild", "--results-url", f"memory://alice:{secret}@host/x"]) != 0
    captured = capsys.readouterr()
    assert secret not in captured.out + captured.err
    assert (
        ResultsLocation.resolve("sftp://alice@host/tradeoff").url == "sftp://alice@host/tradeoff"
    )  # a name, no secret


def test_fault_export_name_that_is_sql_reading_another_file_is_refused(tmp_path, capsys, monkeypatch):
    from flows.cli import main
    from tests.helpers.gate_tables import night
    from warehouse.db import load_run

    db = tmp_path / "wh.duckdb"
    monkeypatch.setenv("TRADEOFF_WAREHOUSE", str(db))
    load_run(night(tmp_path / "runs", "n1"), db)
    secret = tmp_path / "secret.txt"
    secret.write_text("hunter2\n")
    out = tmp_path / "x.csv"
    assert main(["export", f"read_text('{secret}')", "-o", str(out)]) == 2
    assert "is not a table or view of the warehouse" in capsys.readouterr().err and not out.exists()
    assert main(["export", f"select * from read_text('{secret}')", "-o", str(out)]) == 1
    assert "disabled by configuration" in capsys.readouterr().err and not out.exists()
    assert main(["export", f"select 1) to '{tmp_path / 'y.csv'}' (format csv); copy (select 1", "-o", str(out)]) == 1
    assert not (tmp_path / "y.csv").exists()
    assert main(["export", "runs", "-o", str(out)]) == 0 and "n1" in out.read_text()  # tables and views still export


def test_fault_rebuild_keeps_a_run_loaded_with_skip_validation(tmp_path, capsys, monkeypatch):
    from flows.cli import main
    from tests.helpers.gate_tables import night, set_inf_ttft
    from tests.helpers.queries import per_run

    runs, db = tmp_path / "runs", tmp_path / "wh.duckdb"
    monkeypatch.setenv("TRADEOFF_WAREHOUSE", str(db))
    bad = night(runs, "bad", set_inf_ttft)
    assert main(["load", str(bad), "--skip-validation"]) == 0
    full = per_run(db)["bad"]
    for _ in range(2):  # before: the first rebuild kept its runs and variants rows, the second lost the file too
        assert main(["warehouse", "rebuild", "--runs-dir", str(runs)]) == 0
        assert per_run(db)["bad"] == full
    assert "1 runs loaded (1 without validation" in capsys.readouterr().out


def test_fault_truncated_parquet_part_is_named_in_the_error(tmp_path, capsys, monkeypatch):
    from flows.cli import main
    from tests.helpers.gate_tables import night

    monkeypatch.setenv("TRADEOFF_WAREHOUSE", str(tmp_path / "wh.duckdb"))
    run = night(tmp_path / "runs", "n1")
    part = run / "results" / "perf_requests" / "part-0.parquet"
    part.write_bytes(part.read_bytes()[:-100])
    assert main(["load", str(run)]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: table perf_requests: part ") and str(part) in err and "\n" not in err, err


def test_fault_warehouse_of_a_newer_schema_is_named_by_the_users_file(tmp_path):
    import duckdb

    from tests.helpers.gate_tables import night
    from warehouse.db import WarehouseError, load_run

    db = tmp_path / "wh.duckdb"
    load_run(night(tmp_path / "runs", "n1"), db)
    with duckdb.connect(str(db)) as con:
        con.execute("insert into schema_version values (999, 'from_the_future', now())")
    with pytest.raises(WarehouseError) as e:
        load_run(night(tmp_path / "runs", "n2"), db)
    assert str(e.value).startswith(f"warehouse {db} has schema version 999") and ".tmp" not in str(e.value)


# ---------------------------------------------------------------- 7. a newcomer without bubblewrap


def test_fault_demo_without_bubblewrap_stops_before_any_work_with_one_line(capsys, monkeypatch):
    import flows.cli as cli
    import flows.nightly
    import tasks.core.lifecycle

    monkeypatch.setattr(sandbox, "BWRAP", "bwrap-not-installed")
    # cmd_run imports these when it runs (flows/cli.py): patched where it takes them from.
    monkeypatch.setattr(tasks.core.lifecycle, "start_prefect_api", lambda: None)
    monkeypatch.setattr(
        flows.nightly, "nightly", lambda **kw: pytest.fail("the nightly started without a jail for its code suite")
    )
    assert cli.main(["run", str(ROOT / "configs" / "demo.yaml")]) == 2
    err = capsys.readouterr().err.strip()
    assert (
        err.startswith("error: quality.suites[")
        and "(code): code sandbox: bubblewrap (bwrap) is not installed; apt-get install bubblewrap" in err
        and "\n" not in err
    ), err
