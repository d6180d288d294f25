"""Scale-out pieces without a cluster: config, results location, GPU limit, fan-out checks, notifications,
re-run bookkeeping, and the wiring of prefect.yaml's deployments."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pytest
import yaml

from tasks.core.config import GPU_SLOTS
from tasks.core.errors import ConfigError
from tasks.core.runinfo import RunPaths
from tasks.loader import parse_config
from tasks.orchestration.results import PERF_TABLES, ResultsLocation
from tests.helpers import ROOT
from warehouse.contract import read_table, write_table


def tiny(**extra) -> dict:
    data = yaml.safe_load((ROOT / "configs" / "tiny.yaml").read_text())
    data.update(extra)
    return data


@pytest.mark.parametrize(
    "extra, message",
    [
        ({"scale_out": {"engines_per_gpu": 5}}, "scale_out.engines_per_gpu: 5 does not divide the 12 slots"),
        ({"scale_out": {"results_url": "nosuch://bucket/x"}}, "scale_out.results_url: unknown protocol 'nosuch'"),
        ({"scale_out": {"deployment": "variant"}}, "scale_out.deployment: "),
        ({"scale_out": {"work_pol": "x"}}, "scale_out.work_pol: unknown field"),
        ({"scale_out": {"variant_timeout_s": 0}}, "scale_out.variant_timeout_s: "),
        ({"notify": {"block": "tradeoff-alerts"}}, "notify.block: 'tradeoff-alerts' is not 'block-type-slug/name'"),
        ({"notify": {}}, "notify.block: required field is missing"),
    ],
)
def test_bad_scale_out_and_notify_config_is_one_line(extra: dict, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_config(tiny(**extra))
    assert str(err.value).startswith(message) and "\n" not in str(err.value)


def test_scale_out_defaults_run_in_process() -> None:
    cfg = parse_config(tiny())
    assert cfg.scale_out.work_pool is None and cfg.scale_out.engines_per_gpu == 1 and cfg.notify is None


def _paths(root: Path, run_id: str = "r1") -> RunPaths:
    paths = RunPaths(run_id, root / run_id)
    paths.results.mkdir(parents=True)
    paths.logs.mkdir(parents=True)
    return paths


def test_results_location_publishes_fetches_and_clears_a_variant(tmp_path: Path) -> None:
    host = _paths(tmp_path / "host-a")  # a worker's own run folder
    write_table(host.results, "perf_summary", "q2_k", [{"run_id": "r1", "variant": "q2_k"}])
    write_table(host.results, "variants", "q2_k", [{"run_id": "r1", "variant": "q2_k", "status": "ok"}])
    write_table(host.results, "perf_summary", "q4_1", [{"run_id": "r1", "variant": "q4_1"}])
    (host.logs / "q2_k.server.log").write_text("log")
    loc = ResultsLocation.resolve((tmp_path / "shared").as_uri())
    loc.check_writable()
    assert loc.publish(host, "q2_k") == 3  # its two parts and its log, not q4_1's
    shared = tmp_path / "shared" / "r1"
    assert sorted(p.relative_to(shared).as_posix() for p in shared.rglob("*") if p.is_file()) == [
        "logs/q2_k.server.log",
        "results/perf_summary/q2_k.parquet",
        "results/variants/q2_k.parquet",
    ]

    parent = _paths(tmp_path / "control")
    assert loc.fetch(parent) == 3 and len(read_table(parent.results, "variants")) == 1
    loc.clear(parent, "q2_k")
    assert not list(shared.rglob("*.parquet")) and not list(parent.results.rglob("*.parquet"))
    assert (shared / "logs" / "q2_k.server.log").exists()  # logs of earlier attempts are kept

    # a variant whose perf the nightly measured in interleaved rounds keeps it when its own flow starts
    loc.fetch(parent)
    write_table(parent.results, "perf_summary", "q2_k", [{"run_id": "r1", "variant": "q2_k"}])
    write_table(parent.results, "variants", "q2_k", [{"run_id": "r1", "variant": "q2_k", "status": "ok"}])
    loc.publish(parent, "q2_k")
    loc.clear(parent, "q2_k", keep=PERF_TABLES)
    assert [p.relative_to(shared).as_posix() for p in shared.rglob("*.parquet")] == [
        "results/perf_summary/q2_k.parquet"
    ]
    assert [p.relative_to(parent.results).as_posix() for p in parent.results.rglob("*.parquet")] == [
        "perf_summary/q2_k.parquet"
    ]


def test_results_location_in_the_runs_folder_copies_nothing(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("TRADEOFF_RUNS_DIR", str(tmp_path / "runs"))
    monkeypatch.delenv("TRADEOFF_RESULTS_URL", raising=False)
    paths = _paths(tmp_path / "runs")
    write_table(paths.results, "variants", "q2_k", [{"run_id": "r1", "variant": "q2_k"}])
    loc = ResultsLocation.resolve(None)
    assert loc.url == (tmp_path / "runs").resolve().as_uri()
    assert loc.is_local_runs_dir(paths) and loc.publish(paths, "q2_k") == 0 and loc.fetch(paths) == 0


def test_an_unwritable_results_location_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("not a folder")
    with pytest.raises(ConfigError) as err:
        ResultsLocation.resolve(str(tmp_path / "file" / "results")).check_writable()
    assert str(err.value).startswith(
        f"scale_out.results_url: cannot write to {(tmp_path / 'file' / 'results').as_uri()}"
    )
    assert "\n" not in str(err.value)


def tradeoff(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """The CLI in its own process (as users run it; Prefect's logging is not bound to pytest's captured streams)."""
    return subprocess.run(
        [str(Path(sys.executable).parent / "tradeoff"), *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        env={**os.environ, **(env or {})},
    )


def test_cli_fails_on_an_unwritable_results_url_before_any_variant(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump(tiny(scale_out={"results_url": str(tmp_path / "file" / "r")})))
    proc = tradeoff("run", str(cfg), env={"TRADEOFF_RUNS_DIR": str(tmp_path / "runs")})
    assert proc.returncode == 2
    assert proc.stderr.startswith("error: scale_out.results_url: cannot write to") and proc.stderr.count("\n") == 1
    assert not (tmp_path / "runs").exists()


def test_cli_fan_out_without_a_server_is_one_line(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}
    proc = subprocess.run(
        [
            str(Path(sys.executable).parent / "tradeoff"),
            "run",
            str(ROOT / "configs" / "tiny.yaml"),
            "--work-pool",
            "gpus",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        env={**env, "TRADEOFF_RUNS_DIR": str(tmp_path / "runs"), "PREFECT_HOME": str(tmp_path / "home")},
    )
    assert proc.returncode == 2
    assert "fanning out on 'gpus' needs a Prefect server" in proc.stderr and proc.stderr.count("\n") == 1


def test_missing_pool_and_deployment_name_the_fix(prefect_harness) -> None:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.actions import WorkPoolCreate

    from tasks.core.config import ScaleOutSpec
    from tasks.orchestration.fanout import FanOutError, check_pool

    with pytest.raises(
        FanOutError,
        match=r"work pool 'nosuch' does not exist on .*; create it with "
        r"`python scripts/cluster.py setup --pool nosuch`",
    ):
        check_pool(ScaleOutSpec(work_pool="nosuch"))
    with get_client(sync_client=True) as client:
        client.create_work_pool(WorkPoolCreate(name="t-pool", type="process"))
    with pytest.raises(FanOutError, match=r"deployment 'variant/variant' does not exist .*`make pool`"):
        check_pool(ScaleOutSpec(work_pool="t-pool"))


@pytest.mark.parametrize(
    "status, failed, flagged, on_partial, subject",
    [
        ("ok", [], [], True, None),
        ("partial", ["q2_k"], [], True, "tradeoff nightly r1: partial (1 variant failed)"),
        ("partial", ["q2_k"], [], False, None),
        ("failed", ["a", "b"], [], False, "tradeoff nightly r1: failed (2 variants failed)"),
        ("ok", [], ["q2_k best_output_tok_s: 8 vs 12"], True, "tradeoff nightly r1: 1 regression"),
        ("partial", ["b"], ["x", "y"], True, "tradeoff nightly r1: partial (1 variant failed), 2 regressions"),
    ],
)
def test_run_message(status, failed, flagged, on_partial, subject) -> None:
    from tasks.report.notify import run_message

    msg = run_message("r1", status, failed, {v: "ServerError: boom\nlog tail" for v in failed}, flagged, on_partial)
    assert (msg[0] if msg else None) == subject
    if msg and failed and (status == "failed" or on_partial):
        assert f"- {failed[0]}: ServerError: boom" in msg[1] and "log tail" not in msg[1]


class _Hook(BaseHTTPRequestHandler):
    received: list[dict] = []

    def do_POST(self) -> None:
        _Hook.received.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args) -> None:
        pass


def test_notification_reaches_a_local_webhook(prefect_harness) -> None:
    from prefect.blocks.notifications import CustomWebhookNotificationBlock

    from tasks.report.notify import NotifyError, deliver, load_block

    server = HTTPServer(("127.0.0.1", 0), _Hook)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        CustomWebhookNotificationBlock(
            name="t",
            url=f"http://127.0.0.1:{server.server_address[1]}/hook",
            json_data={"subject": "{{subject}}", "body": "{{body}}"},
        ).save("t-alerts", overwrite=True)
        deliver("custom-webhook/t-alerts", "tradeoff nightly r1: failed", "- q2_k: boom")
    finally:
        server.shutdown()
        server.server_close()
    assert _Hook.received[-1] == {"subject": "tradeoff nightly r1: failed", "body": "- q2_k: boom"}
    with pytest.raises(NotifyError, match="notify.block: no block 'custom-webhook/nosuch'"):
        load_block("custom-webhook/nosuch")


def test_gpu_limit_keeps_engines_apart_unless_the_config_shares(prefect_harness, monkeypatch) -> None:
    from tasks.orchestration.gpu import gpu_limit_name, gpu_slots

    monkeypatch.setenv("TRADEOFF_GPU_HOST", "test/gpu 0")
    assert gpu_limit_name("test/gpu 0") == "gpu-test-gpu-0"
    held = threading.Event()
    release = threading.Event()

    def hold(engines_per_gpu: int) -> None:
        with gpu_slots(engines_per_gpu, timeout_s=30):
            held.set()
            release.wait(30)

    t = threading.Thread(target=hold, args=(1,))
    t.start()
    try:
        assert held.wait(60)
        with pytest.raises(TimeoutError):  # the GPU is taken: a second engine waits
            with gpu_slots(1, timeout_s=2):
                pass
    finally:
        release.set()
        t.join(60)
    held.clear()
    release.clear()
    t = threading.Thread(target=hold, args=(2,))
    t.start()
    try:
        assert held.wait(60)
        with gpu_slots(2, timeout_s=10) as name:  # engines_per_gpu: 2 lets two share
            assert name == "gpu-test-gpu-0"
    finally:
        release.set()
        t.join(60)


def test_an_ephemeral_api_holds_no_gpu_limit(prefect_harness) -> None:
    """Without a shared server the nightly's variants run one at a time in one process: no limit is
    taken, so a run killed with its ephemeral API (leases in memory) cannot leave slots taken forever."""
    from prefect.settings import PREFECT_API_URL, temporary_settings

    from tasks.orchestration.gpu import gpu_slots

    with temporary_settings(updates={PREFECT_API_URL: None}):
        with gpu_slots(1, timeout_s=1) as name:
            assert name is None


def test_a_gpu_limit_of_another_size_is_refused(prefect_harness, monkeypatch) -> None:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.actions import GlobalConcurrencyLimitCreate

    from tasks.orchestration.gpu import GpuLimitError, gpu_slots

    monkeypatch.setenv("TRADEOFF_GPU_HOST", "odd")
    with get_client(sync_client=True) as client:
        client.create_global_concurrency_limit(GlobalConcurrencyLimitCreate(name="gpu-odd", limit=1))
    with pytest.raises(GpuLimitError, match=f"gpu-odd has 1 slots, tradeoff needs {GPU_SLOTS}"):
        with gpu_slots(1, timeout_s=5):
            pass


def test_a_host_without_the_engine_records_the_package_and_fails_alone(prefect_harness, tmp_path, monkeypatch) -> None:
    from flows.variant import variant_flow
    from tasks.engines.llama_cpp import LlamaCpp
    from tasks.orchestration.variant_bookkeeping import VariantFailed

    monkeypatch.setenv("TRADEOFF_RUNS_DIR", str(tmp_path / "runs"))
    monkeypatch.setattr(LlamaCpp, "requires", {"no_such_module_tradeoff": "no-such-engine-package[server]"})
    with pytest.raises(VariantFailed, match="no-such-engine-package"):
        variant_flow(config=tiny(), variant="q2_k", run_id="r1")
    (row,) = read_table(tmp_path / "runs" / "r1" / "results", "variants").to_dict("records")
    assert (
        row["status"] == "failed"
        and "EngineUnavailable: engine llama.cpp needs no-such-engine-package[server]" in row["error"]
    )


def test_rerun_bookkeeping(tmp_path: Path, monkeypatch) -> None:
    from tasks.orchestration.run_bookkeeping import collect_rows, measured_variants, record_config

    monkeypatch.setenv("TRADEOFF_RUNS_DIR", str(tmp_path / "runs"))
    cfg = parse_config(tiny())
    paths = _paths(tmp_path / "runs")
    write_table(paths.results, "variants", "q4_1", [{"run_id": "r1", "variant": "q4_1", "status": "ok"}])
    write_table(paths.results, "variants", "q2_k", [{"run_id": "r1", "variant": "q2_k", "status": "failed"}])
    loc = ResultsLocation.resolve(None)
    assert measured_variants(loc, paths) == {"q4_1"}  # a failed variant is measured again
    rows = collect_rows(cfg, paths, loc, {"q4_1-spec": "flow run measure-q4_1-spec crashed: no heartbeat for 90 s"})
    assert [(r["variant"], r["status"]) for r in rows] == [("q4_1", "ok"), ("q2_k", "failed"), ("q4_1-spec", "failed")]
    assert "crashed: no heartbeat" in rows[2]["error"]
    assert len(read_table(paths.results, "variants")) == 3  # the crashed variant's row is on file

    config = yaml.safe_dump(tiny())
    record_config(paths, config, cfg)
    assert (paths.root / "config.yaml").read_text() == config
    record_config(
        paths, config, cfg.model_copy(update={"scale_out": cfg.scale_out.model_copy(update={"work_pool": "gpus"})})
    )  # where it runs does not change what it measures
    with pytest.raises(ConfigError, match="holds results of another config"):
        record_config(paths, config, parse_config(tiny(perf={"num_prompts": 5})))


def test_prefect_yaml_deployments_resolve() -> None:
    from prefect.flows import load_flow_from_entrypoint

    spec = yaml.safe_load((ROOT / "prefect.yaml").read_text())
    deployments = {d["name"]: d for d in spec["deployments"]}
    assert set(deployments) == {"nightly", "variant"}
    for name, d in deployments.items():
        fl = load_flow_from_entrypoint(str(ROOT / d["entrypoint"]))
        assert fl.name == name  # run_deployment addresses them as flow/deployment
        assert set(d.get("parameters", {})) <= set(fl.parameters.properties)
        assert d["work_pool"]["job_variables"]["env"]["PREFECT_FLOWS_HEARTBEAT_FREQUENCY"] == "30"
    assert deployments["nightly"]["work_pool"]["work_queue_name"] == "control"
    assert deployments["variant"]["work_pool"]["work_queue_name"] == "gpu"
    (schedule,) = deployments["nightly"]["schedules"]
    assert schedule["cron"] == "0 2 * * *" and schedule["timezone"]
