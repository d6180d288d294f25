"""lm-evaluation-harness as a library: local data overrides, per-sample rows, the in-process log-likelihood path.

Generation runs against a scripted endpoint that answers GSM8K and BBH from the real files in
../shared/datasets (so exact match must be 1.0 end to end); log-likelihood runs in-process on
the real demo model. Tests that need ../shared/datasets skip with the reason when it is absent.
"""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import pytest
import yaml

from tasks.client import request
from tasks.core.errors import ConfigError
from tasks.loader import parse_config
from tasks.quality.base import suite_for
from tasks.quality.logits import LlamaCppScorer, llama_cpp_worker
from tasks.quality.suites.lm_eval import LocalData, write_local_overrides
from tests.helpers import ROOT
from tests.helpers.suites import suite_context
from tests.stubs.quality_stub import start

pytestmark = pytest.mark.slow  # minutes: run last, within the suite's budget (tests/conftest.py)

SHARED = ROOT.parent / "shared" / "datasets"
needs_shared = pytest.mark.skipif(
    not (SHARED / "gsm8k" / "test.jsonl").is_file() or not (SHARED / "bbh").is_dir(),
    reason="../shared/datasets (GSM8K, BBH) is absent: a fresh clone has no shared datasets",
)
DEMO = ROOT / "configs" / "demo.yaml"
LOCAL = {
    "gsm8k": {"data_files": {"test": str(SHARED / "gsm8k/test.jsonl"), "train": str(SHARED / "gsm8k/train.jsonl")}},
    "bbh": {"data_files": str(SHARED / "bbh/{dataset_name}.json"), "field": "examples"},
}


def demo_gguf() -> Path:
    return parse_config(yaml.safe_load(DEMO.read_text())).models["smollm2-135m"].local_path()


@pytest.mark.parametrize(
    "params, expect",
    [
        ({"tasks": ["gsm8kk"]}, "unknown lm-eval task 'gsm8kk' (did you mean gsm8k"),
        ({"tasks": ["gsm8k"], "datasets": {"gsm8k_x": {"data_files": "a.json"}}}, "unknown lm-eval task 'gsm8k_x'"),
        ({"tasks": ["gsm8k"], "api": "grpc"}, "params.api:"),
        ({"tasks": []}, "params.tasks:"),
    ],
)
def test_bad_lm_eval_params_fail_in_one_line(params, expect):
    cfg = yaml.safe_load(DEMO.read_text())
    cfg = {**copy.deepcopy(cfg), "quality": {"suites": [{"name": "lm_eval", "params": params}]}}
    with pytest.raises(ConfigError) as e:
        parse_config(cfg)
    assert expect in str(e.value) and "\n" not in str(e.value)


@needs_shared
def test_local_overrides_keep_lm_evals_task_and_swap_the_data(tmp_path):
    from lm_eval.tasks import TaskManager

    folder = write_local_overrides({k: LocalData(**v) for k, v in LOCAL.items()}, tmp_path / "tasks")
    assert len(list(folder.glob("bbh_cot_fewshot_*.yaml"))) == 27  # the group expanded to its tasks
    loaded = TaskManager(include_path=str(folder)).load(["gsm8k", "bbh_cot_fewshot_boolean_expressions"])["tasks"]
    gsm, bbh = loaded["gsm8k"], loaded["bbh_cot_fewshot_boolean_expressions"]
    first = json.loads((SHARED / "gsm8k/test.jsonl").read_text().splitlines()[0])
    docs = list(gsm.test_docs())
    assert len(docs) == 1319 and docs[0]["question"] == first["question"]
    assert gsm.config.filter_list[0]["name"] == "strict-match"  # lm-eval's own scoring, untouched
    assert len(list(bbh.test_docs())) == len(
        json.loads((SHARED / "bbh/boolean_expressions.json").read_text())["examples"]
    )


def test_missing_local_file_is_named(tmp_path):
    with pytest.raises(ValueError, match=r"datasets.gsm8k: file .*nope.jsonl for task gsm8k not found"):
        write_local_overrides({"gsm8k": LocalData(data_files={"test": "nope.jsonl"})}, tmp_path, base=tmp_path)


@pytest.fixture(scope="module")
def answers():
    if not (SHARED / "gsm8k" / "test.jsonl").is_file():
        pytest.skip("../shared/datasets is absent")
    gsm = {}
    for line in (SHARED / "gsm8k/test.jsonl").read_text().splitlines():
        row = json.loads(line)
        gsm[row["question"]] = row["answer"].split("####")[-1].strip()
    bbh = {
        e["input"]: e["target"] for e in json.loads((SHARED / "bbh/boolean_expressions.json").read_text())["examples"]
    }
    return gsm, bbh


@pytest.fixture(scope="module")
def oracle(answers):
    gsm, bbh = answers

    def complete(prompt: str) -> str:
        last = prompt.rsplit("Question: ", 1)[-1].removesuffix("\nAnswer:")
        if last in gsm:
            return f" Let me think. The answer is {gsm[last]}.\n#### {gsm[last]}\n\nQuestion: next"
        q = prompt.rsplit("Q: ", 1)[-1].split("\nA: Let's think step by step.")[0]
        if q in bbh:
            return f" Evaluating step by step. So the answer is {bbh[q]}.\n\nQ: next"
        return " no idea"

    srv, url = start(complete)
    yield url
    srv.shutdown()


@needs_shared
def test_lm_eval_suite_per_sample_rows_scores_and_files(oracle, tmp_path):
    ctx = suite_context(
        tmp_path,
        base_url=oracle,
        served_model="oracle",
        limit=3,
        n_ctx=2048,
        params={"tasks": ["gsm8k", "bbh_cot_fewshot_boolean_expressions"], "datasets": LOCAL},
    )
    res = suite_for("lm_eval").run(ctx)
    scores = {s.metric: s for s in res.scores}
    assert scores["gsm8k.exact_match.strict-match"].value == 1.0
    assert scores["gsm8k.exact_match.flexible-extract"].value == 1.0
    assert scores["bbh_cot_fewshot_boolean_expressions.exact_match.get-answer"].value == 1.0
    assert scores["gsm8k.invalid_rate.strict-match"].value == 0.0
    assert (
        scores["gsm8k.exact_match.strict-match"].sample_stat
        == "mean(exact_match) where task=gsm8k and filter=strict-match"
    )
    assert len(res.samples) == 3 * 2 + 3  # gsm8k: 2 filters
    row = next(s for s in res.samples if s["sample_id"] == "gsm8k/0/strict-match")
    assert row["prompt"].endswith("\nAnswer:") and row["prompt"].count("Question:") == 6  # 5-shot
    assert row["score"] == 1.0 and row["valid"] and json.loads(row["details"])["exact_match"] == 1.0
    out = tmp_path / "lm_eval"
    assert len(list(out.glob("oracle/results_*.json"))) == 1 and len(list(out.glob("oracle/samples_*.jsonl"))) == 2
    assert (out / "tasks" / "gsm8k.yaml").is_file()


@needs_shared
def test_lm_evals_requests_go_through_the_one_client(oracle, tmp_path, monkeypatch):
    """lm-eval builds, retries and parses; tasks.client.request sends (its deadline and caps), nothing else posts."""
    import tasks.quality.suites.lm_eval as mod

    sent = []

    def counted(method, base_url, path, timeout_s, json_body=None, headers=None):
        sent.append((method, base_url + path))
        return request(method, base_url, path, timeout_s, json_body, headers=headers)

    monkeypatch.setattr(mod, "request", counted)
    ctx = suite_context(
        tmp_path,
        base_url=oracle,
        served_model="oracle",
        n_ctx=2048,
        params={"tasks": ["gsm8k"], "datasets": {"gsm8k": LOCAL["gsm8k"]}},
    )
    res = suite_for("lm_eval").run(ctx)
    assert {s.metric: s.value for s in res.scores}["gsm8k.exact_match.strict-match"] == 1.0
    assert sent == [("POST", oracle.rstrip("/") + "/v1/completions")] * 2


@needs_shared
def test_unparseable_answers_are_counted(tmp_path):
    srv, url = start(lambda prompt: " I am not sure.")
    try:
        ctx = suite_context(
            tmp_path, base_url=url, n_ctx=2048, params={"tasks": ["gsm8k"], "datasets": {"gsm8k": LOCAL["gsm8k"]}}
        )
        res = suite_for("lm_eval").run(ctx)
    finally:
        srv.shutdown()
    scores = {s.metric: s for s in res.scores}
    assert scores["gsm8k.exact_match.strict-match"].value == 0.0
    assert scores["gsm8k.invalid_rate.strict-match"].value == 1.0
    assert scores["gsm8k.invalid_rate.strict-match"].note == "2 of 2 answers empty or unparseable"


def test_in_process_scorer_matches_a_fresh_evaluation():
    gguf = demo_gguf()
    scorer = LlamaCppScorer(gguf, 512)
    ref = llama_cpp_worker(gguf, 512, reuse_prefix=False)
    try:
        ctx = scorer.encode("Question: What is the capital of France?\nAnswer:")
        # Choices of one question share the context: the scorer reuses it, the reference does not.
        for choice in (" Paris", " Berlin", " Madrid and Rome", " Paris"):
            cont = scorer.encode(choice)
            got, ref_lp = scorer.logprob(ctx, cont), ref.call("reference_logprob", ctx, cont)
            assert got[0] == pytest.approx(ref_lp[0], abs=1e-4) and got[1] == ref_lp[1]
    finally:
        scorer.close()
        ref.close()


def test_multiple_choice_through_lm_eval_in_process(tmp_path):
    data = tmp_path / "capitals.jsonl"
    data.write_text(
        "\n".join(
            json.dumps(r)
            for r in [
                {"question": "What is the capital of France?", "choices": ["Berlin", "Paris", "Madrid"], "answer": 1},
                {"question": "What is the capital of Japan?", "choices": ["Tokyo", "Seoul", "Lima"], "answer": 0},
            ]
        )
    )
    task = tmp_path / "capitals.yaml"
    task.write_text(
        yaml.safe_dump(
            {
                "task": "capitals_mc",
                "dataset_path": "json",
                "dataset_kwargs": {"data_files": {"test": str(data)}},
                "output_type": "multiple_choice",
                "test_split": "test",
                "doc_to_text": "Question: {{question}}\nAnswer:",
                "doc_to_target": "answer",
                "doc_to_choice": "{{choices}}",
                "metric_list": [{"metric": "acc", "aggregation": "mean", "higher_is_better": True}],
                "metadata": {"version": 1},
            }
        )
    )
    # No server: log-likelihood never reaches the endpoint on the in-process path.
    ctx = suite_context(
        tmp_path / "out",
        served_model="q4_1",
        artifact_path=demo_gguf(),
        limit=None,
        n_ctx=512,
        engine="llama.cpp",
        params={"tasks": [str(task)]},
    )
    res = suite_for("lm_eval").run(ctx)
    acc = next(s for s in res.scores if s.metric == "capitals_mc.acc")
    assert acc.n == 2 and acc.value in (0.0, 0.5, 1.0)
    assert acc.note == "log-likelihood scored in-process (the engine's endpoint path failed loglik_check)"
    assert [s["sample_id"] for s in res.samples] == ["capitals_mc/0", "capitals_mc/1"]
    assert all(re.fullmatch(r"\[.*\]", s["response"]) for s in res.samples)  # lm-eval's (logprob, greedy) per choice
