"""HELM scenarios (crfm-helm's `helm-run`) against a variant's OpenAI-compatible endpoint, as quality suites.

Config: a suite named `helm:<anything>` (the family registered here), its HELM run entries
without `model=` (the variant is added), `limit` as HELM's `--max-eval-instances`:

    - name: helm:gsm
      limit: 50
      params: {run_entries: ["gsm"], data: {gsm: ../shared/datasets/gsm8k}}

Per run, `runs/<run_id>/helm/` holds what HELM reads and writes, never the user's home:
- `prod_env/`: model_metadata, model_deployments and tokenizer_configs entries of every
  variant served so far (model `tradeoff/<variant>`, client `tasks/tools/helm_plugin.py`'s
  CompletionsClient on the variant's base URL), HELM's request cache, the plugin;
- `tokenizers/`: the model's own tokenizer exported from its GGUF as a Hugging Face folder,
  which HELM loads offline;
- `benchmark_output/`: HELM's own output, one HELM suite per tradeoff suite (`helm-gsm`),
  so `helm-summarize` and `helm-server` work on it (see README).

HELM runs in its own virtualenv (`make helm`: `.venv-helm`), called as a subprocess: its pins
(pandas 2, datasets 3, openai 2) clash with tradeoff's environment (pandas 3, and openai 3
required by the package that ships the demo model). `TRADEOFF_HELM_BIN` points at another
`helm-run`.

Results: each eval instance of HELM's per-instance stats is a quality_samples row (score: the
suite's main per-instance metric; details: split, status and every per-instance stat); HELM's
aggregate stats of one split (default `test`) are quality_scores rows under HELM's metric
names, with its runtime and token figures. Instances whose request failed (the endpoint died)
are kept as errored rows (`valid` false, no score), counted in the `errored` metric and left
out of the means; without errors the means are HELM's own `stats.json` figures.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import os
import re
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import numpy as np
import yaml
from pydantic import Field

from tasks.core.lifecycle import run_tied
from tasks.core.runinfo import PROJECT_ROOT, TOOLS
from tasks.quality.base import Score, Suite, SuiteContext, SuiteParams, SuiteResult

VERSION = "1"
MODEL_ORG = "tradeoff"
PLUGIN_MODULE = "tradeoff_helm_plugin"
HELM_VENV = PROJECT_ROOT / ".venv-helm"
ERROR_PREFIX = "tradeoff-endpoint-error: "  # the plugin's prefix of a failed request's error

# Where scenarios expect their data below `benchmark_output/scenarios/<scenario>/`, and the
# file of a local folder that goes there (HELM skips its download when the file exists).
LOCAL_DATA: dict[str, dict[str, str]] = {
    "gsm": {"gsm_data_test": "test.jsonl", "gsm_data_train": "train.jsonl"},
}

# Per-instance metrics tried in order for a sample's score (all in [0, 1]); HELM's main
# metric of gsm, MATH, synthetic_reasoning_natural and synthetic_reasoning comes first.
SCORE_METRICS = (
    "final_number_exact_match",
    "math_equiv_chain_of_thought",
    "math_equiv",
    "f1_set_match",
    "quasi_exact_match",
    "exact_match",
    "exact_match_indicator",
    "quasi_prefix_exact_match",
    "prefix_exact_match",
    "f1_score",
    "rouge_l",
)
# HELM stats kept beyond the [0, 1] scores: name -> (unit, higher_is_better, paired delta makes sense).
KNOWN_STATS: dict[str, tuple[str, bool, bool]] = {
    "inference_runtime": ("seconds", False, True),
    "inference_denoised_runtime": ("seconds", False, False),
    "inference_idealized_runtime": ("seconds", False, False),
    "num_prompt_tokens": ("tokens", False, False),
    "num_output_tokens": ("tokens", False, True),
    "num_train_instances": ("count", True, False),
    "num_instances": ("count", True, False),
    "prompt_truncated": ("fraction", False, False),
    "finish_reason_length": ("fraction", False, True),
}
# Left out: logprob-based stats (this client gets no logprobs, so they are constants),
# bookkeeping that never varies, and duplicates.
SKIPPED_STATS = {
    "logprob",
    "max_prob",
    "perplexity",
    "bits_per_byte",
    "logprob_per_byte",
    "num_perplexity_tokens",
    "num_bytes",
    "num_references",
    "num_train_trials",
    "batch_size",
    "num_completion_tokens",
    "finish_reason_stop",
    "finish_reason_endoftext",
    "finish_reason_unknown",
    "training_co2_cost",
    "training_energy_cost",
    "predicted_index",
}
# Unknown [0, 1] stats are accuracies unless their name says otherwise.
_LOWER_IS_BETTER = re.compile(r"toxic|bias|truncat|error|refus|harm")
_ENTRY = re.compile(r"^[\w\-.]+(:[\w\-.]+=[^,=]*(,[\w\-.]+=[^,=]*)*)?$")
_EXC_LINE = re.compile(r"^(?:[A-Za-z_][\w.]*\.)?([A-Za-z_]\w*(?:Error|Exception)): (.+)$")


class HelmError(RuntimeError):
    """A HELM suite that cannot run or whose run failed; one line."""


class HelmParams(SuiteParams):
    run_entries: list[str] | None = Field(
        default=None,
        min_length=1,
        max_length=256,
        description="HELM run entries without model=, e.g. 'mmlu:subject=anatomy' "
        "(default: the suite name after 'helm:')",
    )
    split: str = Field(default="test", description="eval split whose stats become the scores (valid | test)")
    score_metric: str | None = Field(
        default=None,
        description="per-instance stat used as a sample's score "
        f"(default: the first present of {', '.join(SCORE_METRICS[:5])}, ...)",
    )
    data: dict[str, str] = Field(
        default_factory=dict,
        description="local data folder per scenario "
        f"({', '.join(LOCAL_DATA)}), placed where the scenario reads it instead of downloading",
    )
    tokenizer: str | None = Field(
        default=None, description="Hugging Face tokenizer folder (default: exported from the model's GGUF)"
    )
    num_threads: int = Field(
        default=1, ge=1, le=256, description="HELM's parallel requests (llama.cpp serves one at a time)"
    )
    timeout_s: float = Field(default=3600.0, gt=0, le=7 * 86_400, description="limit on the whole helm-run (s)")
    offline: bool = Field(default=True, description="forbid HELM's downloads (Hugging Face, nltk)")

    def model_post_init(self, _: Any) -> None:
        for e in self.run_entries or []:
            check_run_entry(e)
        unknown = sorted(set(self.data) - set(LOCAL_DATA))
        if unknown:
            raise ValueError(f"data: no local layout for scenario '{unknown[0]}'; known: {', '.join(LOCAL_DATA)}")


def check_run_entry(entry: str) -> None:
    """ValueError (one line) unless `entry` reads `name[:key=value,...]` without model=."""
    if not _ENTRY.match(entry):
        raise ValueError(f"run entry {entry!r}: write it as name or name:key=value,key=value")
    if any(k == "model" for k, _ in entry_args(entry)):
        raise ValueError(f"run entry {entry!r}: drop model=; each variant's model is added")


def entry_args(entry: str) -> list[tuple[str, str]]:
    _, _, args = entry.partition(":")
    return [tuple(a.split("=", 1)) for a in args.split(",") if a]  # type: ignore[misc]


def scenario_of(entry: str) -> str:
    return entry.split(":", 1)[0]


def with_model(entry: str, model: str) -> str:
    """`gsm` -> `gsm:model=M`; `mmlu:subject=x` -> `mmlu:subject=x,model=M`."""
    return f"{entry},model={model}" if ":" in entry else f"{entry}:model={model}"


def model_name(variant: str) -> str:
    return f"{MODEL_ORG}/{variant}"


# ---------------------------------------------------------------- the HELM environment


def helm_run_path() -> Path:
    """helm-run: TRADEOFF_HELM_BIN, else the project's `.venv-helm`, else on PATH."""
    env = os.environ.get("TRADEOFF_HELM_BIN")
    candidates = [Path(env)] if env else []
    candidates.append(HELM_VENV / "bin" / "helm-run")
    found = shutil.which("helm-run")
    candidates += [Path(found)] if found else []
    for c in candidates:
        c = c / "helm-run" if c.is_dir() else c
        if c.is_file() and os.access(c, os.X_OK):
            return c
    where = f"TRADEOFF_HELM_BIN={env} is not a helm-run" if env else "no .venv-helm and no helm-run on PATH"
    raise HelmError(f"crfm-helm is not installed ({where}); run `make helm` or set TRADEOFF_HELM_BIN")


def helm_python(helm_run: Path) -> Path:
    """The interpreter of helm-run's environment (its shebang), which runs the tokenizer export."""
    first = helm_run.read_text(errors="replace").splitlines()[0]
    if first.startswith("#!") and Path(first[2:].strip().split()[0]).is_file():
        return Path(first[2:].strip().split()[0])
    return helm_run.parent / "python"


@functools.lru_cache(maxsize=4)
def helm_version(python: Path) -> str:
    """crfm-helm's version in helm-run's environment (from its dist-info; else by asking that Python)."""
    found = sorted(python.parent.parent.glob("lib/python*/site-packages/crfm_helm-*.dist-info"))
    if found:
        return found[-1].name.removeprefix("crfm_helm-").removesuffix(".dist-info")
    out = run_tied(
        [str(python), "-c", "import importlib.metadata as m; print(m.version('crfm-helm'))"],
        capture_output=True,
        text=True,
        timeout_s=60,
    )
    return out.stdout.strip() or "unknown"


def helm_env(plugin_dir: Path, hf_home: Path, offline: bool) -> dict[str, str]:
    """helm-run's environment: our plugin importable, Hugging Face caches in the run folder, no downloads."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    env.update({"PYTHONPATH": str(plugin_dir), "HF_HOME": str(hf_home), "TOKENIZERS_PARALLELISM": "false"})
    if offline:
        env.update(
            {
                "HF_HUB_OFFLINE": "1",
                "HF_DATASETS_OFFLINE": "1",
                "TRANSFORMERS_OFFLINE": "1",
                "TRADEOFF_HELM_OFFLINE": "1",
            }
        )
    return env


def run_logged(cmd: list[str], env: dict[str, str], log: Path, timeout_s: float) -> int:
    """Run `cmd` tied to this process with stdout and stderr into `log`; on timeout (and Ctrl-C, SIGTERM, a Prefect
    timeout) its whole process group stops; a timeout raises HelmError."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("w") as out:
        try:
            return run_tied(cmd, timeout_s=timeout_s, stdout=out, stderr=subprocess.STDOUT, env=env).returncode
        except subprocess.TimeoutExpired:
            raise HelmError(f"{Path(cmd[0]).name} did not finish in {timeout_s:g} s; stopped (log: {log})") from None


def error_line(log_text: str) -> str:
    """HELM's own error, one line: the first exception line that is not the runner's summary."""
    found = [m for m in (_EXC_LINE.match(line.strip()) for line in log_text.splitlines()) if m]
    specific = [m for m in found if m[1] != "RunnerError"] or found
    if specific:
        return f"{specific[0][1]}: {specific[0][2]}"[:300]
    tail = [line.strip() for line in log_text.splitlines() if line.strip()]
    return tail[-1][:300] if tail else "no output"


# ---------------------------------------------------------------- prod_env and data


def helm_root(ctx: SuiteContext) -> Path:
    """`runs/<run_id>/helm` inside a nightly (work_dir is runs/<id>/quality/<variant>/<suite>), else work_dir/helm."""
    w = ctx.work_dir
    return w.parents[2] / "helm" if len(w.parents) > 2 and w.parent.parent.name == "quality" else w / "helm"


def tokenizer_source(ctx: SuiteContext, params: HelmParams) -> Path:
    if params.tokenizer:
        return Path(params.tokenizer).expanduser()
    model_path = ctx.model_spec.local_path() if ctx.model_spec is not None else None
    src = model_path or ctx.artifact_path
    if src is None and ctx.tokenizer_ref is not None and Path(ctx.tokenizer_ref.path).is_dir():
        src = ctx.tokenizer_ref.path  # an HF checkpoint's own tokenizer folder (vLLM, TensorRT-LLM)
    if src is None:
        raise HelmError(
            "no tokenizer: the variant has no local model file; set params.tokenizer to a Hugging Face tokenizer folder"
        )
    return Path(src)


def tokenizer_dir(src: Path, root: Path, python: Path, env: dict[str, str], plugin: Path) -> Path:
    """A Hugging Face tokenizer folder HELM can load offline: `src` itself, or exported from a GGUF once per run."""
    if src.is_dir():
        if not any((src / f).is_file() for f in ("tokenizer.json", "tokenizer_config.json", "tokenizer.model")):
            raise HelmError(f"tokenizer folder {src} has no tokenizer.json/tokenizer_config.json")
        return src.resolve()
    if src.suffix.lower() != ".gguf":
        raise HelmError(f"cannot make a tokenizer from {src}: give a GGUF file or a Hugging Face tokenizer folder")
    st = src.stat()
    key = hashlib.sha256(f"{src.resolve()}|{st.st_size}|{st.st_mtime_ns}".encode()).hexdigest()[:12]
    out = root / "tokenizers" / f"{src.stem}-{key}"
    if not (out / "tokenizer.json").is_file():
        tmp = out.with_name(out.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        rc = run_logged(
            [str(python), str(plugin), "export-tokenizer", str(src), str(tmp)],
            env,
            root / "tokenizers" / f"{out.name}.log",
            600,
        )
        if rc != 0 or not (tmp / "tokenizer.json").is_file():
            log = (root / "tokenizers" / f"{out.name}.log").read_text(errors="replace")
            raise HelmError(f"tokenizer export from {src.name} failed: {error_line(log)}")
        shutil.rmtree(out, ignore_errors=True)
        tmp.rename(out)
    return out.resolve()


def special_tokens(tok_dir: Path) -> tuple[str | None, str | None]:
    """(end-of-text, prefix) tokens from the folder's tokenizer_config.json."""
    cfg_path = tok_dir / "tokenizer_config.json"
    cfg = json.loads(cfg_path.read_text()) if cfg_path.is_file() else {}

    def text(v: Any) -> str | None:
        return v.get("content") if isinstance(v, dict) else v

    return text(cfg.get("eos_token")), text(cfg.get("bos_token"))


def variant_entries(
    variant: str, base_url: str, served_model: str, tok_dir: Path, max_sequence_length: int, timeout_s: float
) -> dict[str, dict[str, Any]]:
    """This variant's entries of model_metadata.yaml, tokenizer_configs.yaml and model_deployments.yaml."""
    name = model_name(variant)
    eos, bos = special_tokens(tok_dir)
    tokenizer = {
        "name": name,
        "tokenizer_spec": {
            "class_name": "helm.tokenizers.huggingface_tokenizer.HuggingFaceTokenizer",
            "args": {"pretrained_model_name_or_path": str(tok_dir)},
        },
    }
    if eos:
        tokenizer["end_of_text_token"] = eos
    if bos:
        tokenizer["prefix_token"] = bos
    return {
        "model_metadata.yaml": {
            "name": name,
            "display_name": variant,
            "creator_organization_name": MODEL_ORG,
            "description": f"tradeoff variant {variant} at {base_url}",
            "access": "open",
            "release_date": None,
            "tags": ["TEXT_MODEL_TAG", "FULL_FUNCTIONALITY_TEXT_MODEL_TAG"],
        },
        "tokenizer_configs.yaml": tokenizer,
        "model_deployments.yaml": {
            "name": name,
            "model_name": name,
            "tokenizer_name": name,
            "max_sequence_length": max_sequence_length,
            "client_spec": {
                "class_name": f"{PLUGIN_MODULE}.CompletionsClient",
                "args": {
                    "base_url": base_url,
                    "served_model": served_model,
                    "end_of_text_token": eos,
                    "timeout_s": timeout_s,
                },
            },
        },
    }


_LIST_KEY = {
    "model_metadata.yaml": "models",
    "tokenizer_configs.yaml": "tokenizer_configs",
    "model_deployments.yaml": "model_deployments",
}


def write_prod_env(prod_env: Path, entries: dict[str, dict[str, Any]]) -> None:
    """Add (or replace, by name) the entries in prod_env's three YAML files; other variants' entries stay."""
    prod_env.mkdir(parents=True, exist_ok=True)
    for file, entry in entries.items():
        path = prod_env / file
        doc = yaml.safe_load(path.read_text()) if path.is_file() else None
        items = [e for e in (doc or {}).get(_LIST_KEY[file], []) if e.get("name") != entry["name"]]
        path.write_text(yaml.safe_dump({_LIST_KEY[file]: items + [entry]}, sort_keys=False))


def place_local_data(scenario: str, src_dir: Path, benchmark_output: Path) -> list[Path]:
    """Copy a scenario's local data where HELM reads it (so it never downloads); HelmError when a file is absent."""
    layout = LOCAL_DATA[scenario]
    missing = [src_dir / f for f in layout.values() if not (src_dir / f).is_file()]
    if missing:
        raise HelmError(
            f"local data for {scenario} not found: {missing[0]} (params.data.{scenario}); "
            f"skipped, the scenario would download it"
        )
    dest = benchmark_output / "scenarios" / scenario
    dest.mkdir(parents=True, exist_ok=True)
    out = []
    for target, name in layout.items():
        if not (dest / target).is_file() or (dest / target).stat().st_size != (src_dir / name).stat().st_size:
            shutil.copyfile(src_dir / name, dest / target)
        out.append(dest / target)
    return out


# ---------------------------------------------------------------- HELM's output -> rows


def _finite(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _plain_stats(stats: list[dict], split: str | None = None) -> dict[str, float]:
    """{name: mean} of unperturbed stats (of one split when given) that have a finite mean."""
    out = {}
    for s in stats:
        n = s["name"]
        if n.get("perturbation") or n.get("sub_split") or (split is not None and n.get("split") != split):
            continue
        if s.get("count", 0) > 0 and _finite(s.get("mean")):
            out[n["name"]] = float(s["mean"])
    return out


def read_helm_run(run_dir: Path, prefix: str = "") -> list[dict[str, Any]]:
    """One dict per (eval instance, train trial) of a HELM run folder: request, response, error, split, stats."""
    state = json.loads((run_dir / "scenario_state.json").read_text())
    requests: dict[tuple[str, int], dict] = {}
    for rs in state["request_states"]:
        inst = rs["instance"]
        if inst.get("perturbation"):
            continue
        requests.setdefault((inst["id"], rs.get("train_trial_index", 0)), rs)
    rows = []
    for pis in json.loads((run_dir / "per_instance_stats.json").read_text()):
        if pis.get("perturbation"):
            continue
        trial = pis.get("train_trial_index", 0)
        rs = requests.get((pis["instance_id"], trial), {})
        inst, result = rs.get("instance", {}), rs.get("result") or {}
        stats = pis["stats"]
        split = inst.get("split") or next((s["name"].get("split") for s in stats), None)
        completions = result.get("completions") or []
        targets = [r["output"]["text"] for r in inst.get("references", []) if "correct" in r.get("tags", [])]
        failed = not result.get("success", False)
        rows.append(
            {
                "sample_id": f"{prefix}{pis['instance_id']}" + (f"#{trial}" if trial else ""),
                "split": split,
                "prompt": (rs.get("request") or {}).get("prompt"),
                "target": targets[0] if len(targets) == 1 else (json.dumps(targets) if targets else None),
                "response": completions[0].get("text") if completions and not failed else None,
                "error": (result.get("error") or "request failed")[:300] if failed else None,
                "stats": _plain_stats(stats),
            }
        )
    return rows


def score_metric_of(rows: list[dict], wanted: str | None) -> str | None:
    names = {k for r in rows if r["error"] is None for k in r["stats"]}
    if wanted:
        if names and wanted not in names:
            raise HelmError(
                f"params.score_metric: HELM reported no per-instance '{wanted}'; "
                f"it has {', '.join(sorted(n for n in names if n not in SKIPPED_STATS))}"
            )
        return wanted
    return next((m for m in SCORE_METRICS if m in names), None)


def sample_rows(rows: list[dict], metric: str | None, entry: str | None) -> list[dict[str, Any]]:
    """quality_samples rows: score from `metric`, errored instances kept with valid false and no score."""
    out = []
    for r in rows:
        ok = r["error"] is None
        score = r["stats"].get(metric) if ok and metric else None
        details = {
            "split": r["split"],
            "status": "ok" if ok else "error",
            "error": r["error"],
            **({"run_entry": entry} if entry else {}),
            **(r["stats"] if ok else {}),
        }
        out.append(
            {
                "sample_id": r["sample_id"],
                "prompt": r["prompt"],
                "target": r["target"],
                "response": r["response"],
                "score": score if score is None or 0 <= score <= 1 else None,
                "valid": ok,
                "details": json.dumps(details),
            }
        )
    return out


def _stat_kind(name: str, values: list[float]) -> tuple[str, bool, bool] | None:
    """(unit, higher_is_better, paired delta makes sense) of a HELM stat, or None to leave it out."""
    if name in SKIPPED_STATS or name.startswith(("ece_", "platt_", "selective_")):
        return None
    if name in KNOWN_STATS:
        return KNOWN_STATS[name]
    if values and all(0.0 <= v <= 1.0 for v in values):
        return "fraction", not _LOWER_IS_BETTER.search(name), True
    return None


def score_rows(rows: list[dict], split: str, helm_stats: dict[str, float] | None) -> list[Score]:
    """quality_scores of one split: HELM's stats (its own `stats.json` means when given and nothing errored,
    else means over the instances that did not error), plus `errored`, the count of failed instances."""
    in_split = [r for r in rows if r["split"] == split]
    ok = [r for r in in_split if r["error"] is None]
    errored = len(in_split) - len(ok)
    use_helm = helm_stats is not None and errored == 0
    note = f"{errored} of {len(in_split)} instances errored (endpoint): left out of the means" if errored else None
    names = sorted(
        {k for r in ok for k in r["stats"]} | (set(helm_stats or {}) if use_helm else set()) | {"num_instances"}
    )
    scores = []
    for name in names:
        values = [r["stats"][name] for r in ok if name in r["stats"]]
        if name == "num_instances":
            values = [float(len(in_split))]
        kind = _stat_kind(name, values or ([helm_stats[name]] if use_helm and name in helm_stats else []))
        if kind is None:
            continue
        unit, higher, paired = kind
        arr = np.asarray(values, dtype=float)
        if use_helm and name in helm_stats and name != "num_instances":
            value = helm_stats[name]
        else:
            value = float(arr.mean()) if arr.size else None
        stderr = float(arr.std(ddof=1) / math.sqrt(arr.size)) if arr.size > 1 and name != "num_instances" else None
        per_instance = name != "num_instances" and len(values) == len(ok) and bool(ok)
        stat = f"mean({name}) where split={split} and status=ok" if paired and per_instance else None
        scores.append(Score(name, value, stderr, max(len(ok), 1), unit, higher, stat, note))
    scores.append(
        Score(
            "errored",
            float(errored),
            None,
            max(len(in_split), 1),
            "count",
            False,
            None,
            note=next((r["error"] for r in in_split if r["error"]), None),
        )
    )
    return scores


# ---------------------------------------------------------------- the suite


class Helm(Suite):
    """Every `helm:<x>` suite: HELM run entries through helm-run against the variant's endpoint."""

    name = "helm:"
    version = VERSION
    Params = HelmParams

    def run(self, ctx: SuiteContext) -> SuiteResult:
        p: HelmParams = self.params(ctx)
        suite = self.name if self.name != "helm:" else "helm"
        entries = p.run_entries or ([suite.split(":", 1)[1]] if ":" in suite and suite.split(":", 1)[1] else [])
        if not entries:
            raise HelmError("no run entries: name the suite helm:<run entry> or set params.run_entries")
        for e in entries:
            check_run_entry(e)
        if ctx.base_url is None:
            raise HelmError("needs the variant's endpoint (base_url)")
        helm_run = helm_run_path()
        python = helm_python(helm_run)
        self.version = f"{VERSION}+crfm-helm-{helm_version(python)}"
        root = helm_root(ctx).resolve()
        prod_env, out = root / "prod_env", root / "benchmark_output"
        plugin_dir = prod_env / "plugins"
        plugin_dir.mkdir(parents=True, exist_ok=True)
        plugin = plugin_dir / f"{PLUGIN_MODULE}.py"
        shutil.copyfile(TOOLS / "helm_plugin.py", plugin)
        env = helm_env(plugin_dir, root / "hf_home", p.offline)
        for scenario, folder in p.data.items():
            if any(scenario_of(e) == scenario for e in entries):
                place_local_data(scenario, Path(folder).expanduser(), out)
        tok = tokenizer_dir(tokenizer_source(ctx, p), root, python, env, plugin)
        write_prod_env(
            prod_env,
            variant_entries(ctx.variant, ctx.base_url, ctx.served_model, tok, ctx.n_ctx, ctx.request_timeout_s),
        )
        helm_suite = re.sub(r"[^\w.\-]", "-", suite)
        model = model_name(ctx.variant)
        cmd = [
            str(helm_run),
            "--run-entries",
            *(with_model(e, model) for e in entries),
            "--suite",
            helm_suite,
            "--max-eval-instances",
            str(ctx.limit or 50),
            "--local-path",
            str(prod_env),
            "--output-path",
            str(out),
            "-n",
            str(p.num_threads),
            "--plugins",
            PLUGIN_MODULE,
        ]
        log = ctx.work_dir / "helm-run.log"
        started = time.time()
        rc = run_logged(cmd, env, log, p.timeout_s)
        if rc != 0:
            raise HelmError(f"helm-run failed (exit {rc}): {error_line(log.read_text(errors='replace'))} (log: {log})")
        return self.collect(out / "runs" / helm_suite, model, entries, p, started)

    def collect(self, suite_dir: Path, model: str, entries: list[str], p: HelmParams, since: float) -> SuiteResult:
        """Rows from the run folders this helm-run wrote for `model` (one or more per entry)."""
        dirs = []
        for d in sorted(suite_dir.iterdir()) if suite_dir.is_dir() else []:
            spec = d / "run_spec.json"
            if spec.is_file() and (d / "per_instance_stats.json").is_file() and spec.stat().st_mtime >= since - 1:
                if json.loads(spec.read_text())["adapter_spec"].get("model_deployment") == model:
                    dirs.append(d)
        if not dirs:
            raise HelmError(f"helm-run wrote no results for {model} in {suite_dir}")
        rows, samples = [], []
        for d in dirs:
            entry = _entry_label(d.name) if len(dirs) > 1 else None
            got = read_helm_run(d, prefix=f"{entry}/" if entry else "")
            samples += sample_rows(got, score_metric_of(got, p.score_metric), entry)
            rows += got
        if not any(r["split"] == p.split for r in rows):
            splits = sorted({str(r["split"]) for r in rows})
            raise HelmError(f"params.split: no '{p.split}' instances; HELM evaluated {', '.join(splits)}")
        helm_stats = _plain_stats(json.loads((dirs[0] / "stats.json").read_text()), p.split) if len(dirs) == 1 else None
        return SuiteResult(samples=samples, scores=score_rows(rows, p.split, helm_stats))


def _entry_label(run_dir_name: str) -> str:
    """A run folder's name without the model (the same for every variant, so samples pair across variants)."""
    name, _, args = run_dir_name.partition(":")
    kept = [a for a in args.split(",") if a and not a.startswith("model=")]
    return f"{name}:{','.join(kept)}" if kept else name
