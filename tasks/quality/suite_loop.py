"""The one suite loop: a nightly variant's configured suites, or one suite against any endpoint.

`run_suite` runs one suite and turns its result into table rows; a suite that fails is recorded
as a `suite_failed` score with the error as its note, and the others go on. The nightly's
`run_suites` runs every configured suite of a variant and then its paired deltas against the
reference; `run_standalone` backs `tradeoff quality`.

`tradeoff quality --endpoint URL --model NAME --suite NAME [--limit N] --output DIR`.
The suite is a registered name or a YAML file holding one suite spec (name, label, limit,
seed, params: as an entry of a config's quality.suites). Results are written in the nightly's
table contract (`DIR/results/quality_samples/`, `quality_scores/` as Parquet, `tradeoff load`
needs a run around them, so they are plain files here), a `scores.json` summary, and each
suite's own outputs (lm-eval's results and samples files) under `DIR/quality/<suite>/`.

Suites are looked up by name in the registry: the entry point registers the built-ins (tasks.loader)
before it calls in here; this module sits below the loader and never imports it.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any, Callable

import yaml
from pydantic import ValidationError

from tasks.client import api_root
from tasks.core.bounds import MAX_CONFIG_BYTES, load_yaml
from tasks.core.config import RunConfig, SuiteSpec, Variant
from tasks.core.errors import ConfigError
from tasks.core.lifecycle import raise_if_stopping
from tasks.core.names import SUITE_KEY_PATTERN, contained, name_problem
from tasks.core.registry import SUITES
from tasks.engines.base import Artifact, engine_for
from tasks.quality.base import Score, SuiteContext, SuiteResult, check_params, suite_for
from tasks.quality.deltas import add_identity_bounds, quality_deltas
from tasks.quality.looks import UNDECIDED, Budget, Look, SuiteGate, sequential_gate
from tasks.quality.suite_failures import account_errors
from warehouse.contract import ResultTables, write_table

LOG = logging.getLogger("tradeoff.quality")


def load_suite_spec(
    suite: str, limit: int | None = None, params: dict[str, Any] | None = None, seed: int | None = None
) -> SuiteSpec:
    """A SuiteSpec from a registered name or a YAML file, with command-line overrides; ConfigError on bad input."""
    path = Path(suite)
    if suite.endswith((".yaml", ".yml")):
        if not path.is_file():
            raise ConfigError(f"--suite: file {path} not found; pass a suite name or a YAML file with one suite spec")
        try:
            data = load_yaml(path.read_text()[: MAX_CONFIG_BYTES + 1], f"--suite {path}")
        except ValueError as err:
            raise ConfigError(str(err)) from None
        if not isinstance(data, dict):
            raise ConfigError(f"--suite: {path} must hold one mapping with name: and params:")
    elif suite in SUITES:
        data = {"name": suite}
    else:
        raise ConfigError(f"--suite: {SUITES.unknown(suite)}")
    data = {**data, "params": {**(data.get("params") or {}), **(params or {})}}
    if limit is not None:
        data["limit"] = limit
    if seed is not None:
        data["seed"] = seed
    try:
        spec = SuiteSpec.model_validate(data)
    except ValidationError as err:  # pydantic's message, first line
        raise ConfigError(f"--suite: {str(err).splitlines()[0]}; fix the suite spec") from None
    if spec.name not in SUITES:
        raise ConfigError(f"--suite: {SUITES.unknown(spec.name)}")
    if problem := name_problem(spec.key, SUITE_KEY_PATTERN):  # the suite's folder under --output
        raise ConfigError(f"--suite: {problem}; give it a label")
    problem = check_params(spec.name, spec.params, spec.limit)
    if problem:
        raise ConfigError(f"--suite ({spec.key}).{problem}")
    return spec


def parse_param(text: str) -> tuple[str, Any]:
    """`key=value` with the value read as YAML (`tasks=[gsm8k]`, `max_tokens=64`)."""
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise ConfigError(f"--param {text!r}: write key=value, e.g. --param max_tokens=64")
    try:
        return key.strip(), yaml.safe_load(value)
    except yaml.YAMLError:
        raise ConfigError(f"--param {text!r}: the value is not valid YAML") from None


def run_suite(
    spec: SuiteSpec,
    ctx: SuiteContext,
    key: dict[str, str],
    primary: str | None = None,
    log: logging.Logger | logging.LoggerAdapter = LOG,
    max_error_rate: float = 0.1,
) -> tuple[list[dict], list[dict]]:
    """One suite as quality_samples and quality_scores rows (each prefixed with `key`); never raises for the suite.

    Errored requests are counted apart (`error_rate`, their samples unscored); above `max_error_rate`, and
    when the suite raises, it is recorded as `suite_failed` with the reason, and the caller goes on.
    """
    samples, scores, _ = run_suite_raw(spec, ctx, key, primary, log, max_error_rate)
    return samples, scores


def run_suite_raw(
    spec: SuiteSpec,
    ctx: SuiteContext,
    key: dict[str, str],
    primary: str | None = None,
    log: logging.Logger | logging.LoggerAdapter = LOG,
    max_error_rate: float = 0.1,
) -> tuple[list[dict], list[dict], SuiteResult | None]:
    """run_suite, and the suite's own result before errors are accounted (None when it raised), to extend it."""
    suite = suite_for(spec.name)
    t0 = time.perf_counter()
    raw = None
    try:
        raw = suite.run(ctx)
        log.info(
            "%s: suite %s, %d samples in %.1f s", ctx.variant, spec.key, len(raw.samples), time.perf_counter() - t0
        )
    except Exception as err:  # noqa: BLE001 - one suite's failure is recorded; the others still run
        raise_if_stopping()  # but a stop that a library turned into its own error stops them all
        log.error("%s: suite %s failed: %s", ctx.variant, spec.key, err)
        failed = SuiteResult(
            scores=[
                Score(
                    "suite_failed",
                    1.0,
                    None,
                    1,
                    "count",
                    False,
                    None,
                    note=f"{type(err).__name__}: {err}".splitlines()[0][:300],
                )
            ]
        )
        return *suite_rows(spec, failed, key, primary), None
    result, errored = account_errors(raw, max_error_rate)
    if errored:
        log.error("%s: suite %s failed: %s", ctx.variant, spec.key, errored)
    return *suite_rows(spec, result, key, primary), raw


def suite_rows(
    spec: SuiteSpec, result: SuiteResult, key: dict[str, str], primary: str | None
) -> tuple[list[dict], list[dict]]:
    """A suite's result as quality_samples and quality_scores rows, each prefixed with `key`."""
    version = suite_for(spec.name).version
    samples = [{**key, **s} for s in result.samples]
    scores = [
        {**key, "suite_version": version, **asdict(s), "is_primary": primary == f"{spec.key}.{s.metric}"}
        for s in result.scores
    ]
    return samples, scores


def variant_context(
    cfg: RunConfig,
    spec: SuiteSpec,
    variant: Variant,
    artifact: Artifact,
    ref_artifact: Artifact | None,
    base_url: str,
    work_dir: Path,
) -> SuiteContext:
    """What a suite may use inside a nightly: the variant's endpoint, engine, artifacts (GGUFs for in-process
    logits)."""
    engine = engine_for(variant.engine)
    in_process = engine.has_in_process_logits
    model = cfg.models[variant.model]
    return SuiteContext(
        variant=variant.name,
        base_url=base_url,
        served_model=engine.served_model_name(variant),
        artifact_path=artifact.path if in_process else None,
        reference_artifact_path=ref_artifact.path if ref_artifact and in_process else None,
        limit=spec.limit,
        seed=spec.seed,
        params=spec.params,
        work_dir=contained(work_dir, work_dir / spec.key, "suite folder"),
        n_ctx=model.max_context,
        engine=variant.engine,
        artifact=artifact,
        variant_spec=variant,
        model_spec=model,
        server_start_timeout_s=cfg.server_start_timeout_s,
        request_timeout_s=cfg.perf.request_timeout_s,
        tokenizer_ref=engine.tokenizer(artifact, model),
        reference_artifact=ref_artifact,
    )


def run_suites(
    cfg: RunConfig,
    run_id: str,
    variant: Variant,
    artifact: Artifact,
    ref_artifact: Artifact | None,
    base_url: str,
    work_dir: Path,
    results_dir: Path,
    gate: SuiteGate,
    log: logging.Logger | logging.LoggerAdapter = LOG,
) -> dict:
    """Every configured suite against the variant, then its deltas against the reference; `gate`: the decision's
    quality gate, consulted by the adaptive suites' looks (tasks.decision.suite_gate.AdaptiveGate).

    Writes quality_samples and quality_scores parts after each suite (a failure later loses no
    finished suite), and a quality_deltas part at the end. An adaptive suite (tasks.decision.adaptive)
    is extended right after its first run: by the reference up front, by a variant while its gate is undecided.
    `failed_suites` (suite -> why) of the result fails the variant afterwards
    (tasks.quality.suite_failures.check_suites).
    """
    samples: list[dict] = []
    scores: list[dict] = []
    # The reference's quality results, read once for every suite's gate and the deltas: measured before this
    # variant, they do not change while it runs (only its own rows, which these reads do not use, are written).
    written = ResultTables(results_dir)
    adaptive = gate.suites
    looks: dict[str, Look] = {}
    extended: dict[str, list[tuple[int, str]]] = {}
    for spec in cfg.quality.suites:
        if spec.variants is not None and variant.name not in spec.variants:
            continue
        ctx = variant_context(cfg, spec, variant, artifact, ref_artifact, base_url, work_dir)
        key = {"run_id": run_id, "variant": variant.name, "suite": spec.key}
        t0 = time.monotonic()
        got_samples, got_scores, raw = run_suite_raw(
            spec, ctx, key, cfg.quality.primary, log, cfg.quality.max_error_rate
        )
        if spec.key in adaptive and raw is not None and raw.samples:
            _write(results_dir, variant.name, samples + got_samples, scores + got_scores)
            adaptive_run = AdaptiveRun(
                cfg,
                spec,
                ctx,
                key,
                raw,
                (got_samples, got_scores),
                time.monotonic() - t0,
                adaptive[spec.key],
                gate,
                log,
            )
            extended[spec.key] = adaptive_run.run(
                written,
                variant.name == cfg.reference.name,
                lambda s, c: _write(results_dir, variant.name, samples + s, scores + c),
            )
            got_samples, got_scores = adaptive_run.samples, adaptive_run.scores
            if adaptive_run.look is not None:
                looks[spec.key] = adaptive_run.look
        samples += got_samples
        scores += got_scores
        _write(results_dir, variant.name, samples, scores)
    deltas = write_quality_deltas(cfg, variant, samples, scores, written, gate, looks)
    return {
        "samples": len(samples),
        "scores": {f"{s['suite']}.{s['metric']}": s["value"] for s in scores},
        "deltas": {f"{d['suite']}.{d['metric']}": d["verdict"] for d in deltas},
        "looks": {k: [f"n={n}: {g}" for n, g in v] for k, v in extended.items()},
        "failed_suites": {s["suite"]: s["note"] or "failed" for s in scores if s["metric"] == "suite_failed"},
    }


def _write(results_dir: Path, part: str, samples: list[dict], scores: list[dict]) -> None:
    # `_details` is not a column: the deltas cache a sample's parsed details under it (tasks.quality.deltas._field)
    samples = [{k: v for k, v in s.items() if k != "_details"} for s in samples]
    write_table(results_dir, "quality_samples", part, samples)
    write_table(results_dir, "quality_scores", part, scores)


class AdaptiveRun:
    """One adaptive suite of one variant in a nightly: its looks, each batch answered by the variant's server.

    The reference answers every planned item (the looks' schedule, within the budget); a variant
    extends while its gate on the suite's gating metrics is undecided, up to the items the
    reference has (tasks.decision.adaptive). Rows are written after every batch: a failure later
    loses no answered item. A batch that fails (the server died) ends the looks; the last look stands.
    """

    def __init__(
        self,
        cfg: RunConfig,
        spec: SuiteSpec,
        ctx: SuiteContext,
        key: dict[str, str],
        raw: SuiteResult,
        rows: tuple[list[dict], list[dict]],
        first_s: float,
        metrics: list[str],
        gate: SuiteGate,
        log: logging.Logger | logging.LoggerAdapter,
    ):
        self.cfg, self.spec, self.ctx, self.key, self.raw, self.metrics, self.gate, self.log = (
            cfg,
            spec,
            ctx,
            key,
            raw,
            metrics,
            gate,
            log,
        )
        self.suite = suite_for(spec.name)
        adaptive = cfg.quality.adaptive
        assert adaptive is not None
        self.schedule = gate.schedule(len(raw.samples), self.suite.max_items(ctx))
        self.budget = Budget(adaptive.budget_s, len(raw.samples), first_s)
        self.samples, self.scores = rows
        self.look: Look | None = None

    def _rows(self) -> tuple[list[dict], list[dict]]:
        result, errored = account_errors(self.raw, self.cfg.quality.max_error_rate)
        if errored:
            self.log.error("%s: suite %s failed: %s", self.ctx.variant, self.spec.key, errored)
        return suite_rows(self.spec, result, self.key, self.cfg.quality.primary)

    def extend_to(self, n: int, limit: int | None, write: Callable[[list[dict], list[dict]], None]) -> bool:
        have = len(self.raw.samples)
        if limit is not None and n > limit:
            self.log.info(
                "%s: %s stays at %d items: the reference answered %d", self.ctx.variant, self.spec.key, have, limit
            )
            return False
        if not self.budget.allows(n - have):
            self.log.info(
                "%s: %s stays at %d items: %d more would take ~%.0f s, %.0f s of its budget left",
                self.ctx.variant,
                self.spec.key,
                have,
                n - have,
                (n - have) * self.budget.per_item_s(),
                self.budget.left_s(),
            )
            return False
        t0 = time.monotonic()
        try:
            more = self.suite.run(dataclasses.replace(self.ctx, offset=have, limit=n))
        except Exception as err:  # noqa: BLE001 - the items answered so far stand
            self.log.error("%s: extending %s to %d items failed: %s", self.ctx.variant, self.spec.key, n, err)
            return False
        self.budget.spent(n - have, time.monotonic() - t0)
        merged = self.raw.samples + more.samples
        self.raw = SuiteResult(merged, self.suite.score(merged))
        self.samples, self.scores = self._rows()
        write(self.samples, self.scores)
        self.log.info(
            "%s: %s extended to %d items in %.1f s", self.ctx.variant, self.spec.key, n, time.monotonic() - t0
        )
        return not self.failed()

    def failed(self) -> bool:
        """Too many errored requests: the suite is suite_failed, and more items would not make it a score."""
        return any(s["metric"] == "suite_failed" for s in self.scores)

    def run(
        self, written: ResultTables, is_reference: bool, write: Callable[[list[dict], list[dict]], None]
    ) -> list[tuple[int, str]]:
        """The looks, (items, gate) each; the reference answers every planned item (no gate to judge). `written`:
        the run's results, where a variant finds the reference's."""
        if len(self.schedule) == 1 or self.failed():
            return []
        if is_reference:
            looks = sequential_gate(self.schedule, lambda k: UNDECIDED, lambda n: self.extend_to(n, None, write))
            return [(n, "answered") for n, _ in looks]
        ref = self.cfg.reference.name
        all_scores, all_samples = written["quality_scores"], written["quality_samples"]
        ref_scores = [r for r in records(all_scores, ref) if r["suite"] == self.spec.key]
        ref_samples = [r for r in records(all_samples, ref) if r["suite"] == self.spec.key]
        q = self.cfg.quality

        def judge_at(k: int) -> str:
            self.look = self.gate.look(self.schedule, k)
            rows = quality_deltas(
                ref_scores,
                ref_samples,
                [s for s in self.scores if s["metric"] in self.metrics],
                self.samples,
                reference_variant=ref,
                resamples=q.bootstrap_resamples,
                confidence=q.confidence,
                min_samples=q.min_samples,
                looks={self.spec.key: self.look},
            )
            gate = self.gate.judge(rows, self.metrics)
            self.log.info(
                "%s: %s look %d of %d at %d items (%.2f %% interval): gate %s",
                self.ctx.variant,
                self.spec.key,
                k + 1,
                len(self.schedule),
                self.schedule[k],
                self.look.level * 100,
                gate,
            )
            return gate

        return sequential_gate(self.schedule, judge_at, lambda n: self.extend_to(n, len(ref_samples), write))


def run_standalone(
    endpoint: str,
    model: str,
    spec: SuiteSpec,
    output: Path,
    gguf: Path | None = None,
    reference_gguf: Path | None = None,
    n_ctx: int = 2048,
    timeout_s: float = 300.0,
    max_error_rate: float = 0.1,
) -> dict:
    """Run `spec` against `endpoint`; write its tables and a summary under `output`; return the summary."""
    for name, p in (("--gguf", gguf), ("--reference-gguf", reference_gguf)):
        if p is not None and not p.is_file():
            raise ConfigError(f"{name}: file {p} not found; pass the GGUF the endpoint serves")
    output = Path(output)
    suite = suite_for(spec.name)
    ctx = SuiteContext(
        variant=model,
        base_url=api_root(endpoint),
        served_model=model,
        artifact_path=gguf,
        reference_artifact_path=reference_gguf or gguf,
        limit=spec.limit,
        seed=spec.seed,
        params=spec.params,
        n_ctx=n_ctx,
        work_dir=contained(output, output / "quality" / spec.key, "suite folder"),
        engine="llama.cpp" if gguf else None,
        request_timeout_s=timeout_s,
    )
    samples, scores = run_suite(
        spec, ctx, {"run_id": "standalone", "variant": model, "suite": spec.key}, max_error_rate=max_error_rate
    )
    part = model.replace("/", "_")
    write_table(output / "results", "quality_samples", part, samples)
    write_table(output / "results", "quality_scores", part, scores)
    summary = {
        "endpoint": endpoint,
        "model": model,
        "suite": spec.key,
        "suite_name": spec.name,
        "suite_version": suite.version,
        "limit": spec.limit,
        "seed": spec.seed,
        "params": spec.params,
        "samples": len(samples),
        "invalid": sum(not s["valid"] for s in samples),
        "errored": sum(json.loads(s["details"]).get("errored", 0) for s in samples),
        "scores": [{k: s[k] for k in ("metric", "value", "stderr", "n", "unit", "note")} for s in scores],
    }
    (output / "scores.json").write_text(json.dumps(summary, indent=2, default=str))
    return summary


def format_summary(summary: dict) -> str:
    lines = [
        f"{summary['suite']} ({summary['suite_name']} v{summary['suite_version']}) on {summary['model']} at "
        f"{summary['endpoint']}: {summary['samples']} samples, {summary['invalid']} invalid"
        + (f" ({summary['errored']} errored at the endpoint)" if summary.get("errored") else "")
    ]
    for s in summary["scores"]:
        value = "NULL" if s["value"] is None else f"{s['value']:.4g}"
        se = f" ± {s['stderr']:.3g}" if s["stderr"] is not None else ""
        note = f"  ({s['note']})" if s["note"] else ""
        lines.append(f"  {s['metric']:<40} {value}{se} {s['unit']} (n={s['n']}){note}")
    return "\n".join(lines)


def lmeval_samples(folder: Path, task: str) -> dict[tuple[int, str], dict]:
    """lm-eval's per-sample log of `task` under `folder` (the newest samples_<task>_*.jsonl): (doc_id, filter) ->
    row."""
    files = sorted(Path(folder).rglob(f"samples_{task}_*.jsonl"), key=lambda p: p.stat().st_mtime)
    if not files:
        raise FileNotFoundError(f"no samples_{task}_*.jsonl under {folder}")
    rows = [json.loads(line) for line in files[-1].read_text().splitlines() if line.strip()]
    return {(r["doc_id"], r.get("filter", "none")): r for r in rows}


def compare_lmeval_samples(ours: Path, theirs: Path, task: str) -> dict:
    """Per-sample comparison of two lm-eval sample logs of one task (e.g. `tradeoff quality` vs lm-eval's CLI).

    Same when both logs hold the same (doc, filter) pairs with the same prompt, raw response,
    filtered answer and metric values.
    """
    a, b = lmeval_samples(ours, task), lmeval_samples(theirs, task)
    fields = ("prompt_hash", "resps", "filtered_resps", *sorted({m for r in a.values() for m in r.get("metrics", [])}))
    differ = [
        k
        for k in sorted(set(a) | set(b))
        if k not in a or k not in b or any(a[k].get(f) != b[k].get(f) for f in fields)
    ]
    metric = next(iter(sorted({m for r in a.values() for m in r.get("metrics", [])})), None)
    mean = lambda rows, f: (
        sum(r.get(metric, 0) for k, r in rows.items() if k[1] == f) / max(1, sum(k[1] == f for k in rows))
    )
    filters = sorted({k[1] for k in a})
    return {
        "task": task,
        "samples": len(a),
        "samples_other": len(b),
        "differ": differ,
        "same": not differ,
        "metric": metric,
        "ours": {f: mean(a, f) for f in filters},
        "theirs": {f: mean(b, f) for f in filters},
    }


def records(df, variant: str) -> list[dict]:
    """A results table's rows of one variant as dicts, NaN as None."""
    return df[df["variant"] == variant].astype(object).where(df.notna(), None).to_dict("records")


def write_quality_deltas(
    cfg: RunConfig,
    variant: Variant,
    samples: list[dict],
    scores: list[dict],
    written: ResultTables,
    gate: SuiteGate,
    looks: dict[str, Look] | None = None,
) -> list[dict]:
    """The variant's quality deltas against the reference (measured first, its rows in `written`), as a
    quality_deltas part of `written`'s folder.

    `looks`: the look each adaptive suite stopped at (its interval's level). A speculative variant whose
    plain decoding is the reference gets its greedy_identity evidence on its 0/1 metrics' rows.
    """
    ref = cfg.reference
    if variant.name == ref.name:
        return []
    ref_scores, ref_samples = written["quality_scores"], written["quality_samples"]
    q = cfg.quality
    rows = quality_deltas(
        records(ref_scores, ref.name),
        records(ref_samples, ref.name),
        [s for s in scores if s["metric"] != "suite_failed"],
        samples,
        reference_variant=ref.name,
        resamples=q.bootstrap_resamples,
        confidence=q.confidence,
        min_samples=q.min_samples,
        looks=looks,
    )
    gate.annotate(rows, looks)
    identity = {s.key for s in q.suites if s.name == "greedy_identity"}
    shown = [s for s in samples if s["suite"] in identity]
    if plain_is_reference(variant, ref) and shown:
        add_identity_bounds(rows, sum(s["score"] == 1 for s in shown), len(shown), q.confidence)
    write_table(written.results_dir, "quality_deltas", variant.name, rows)
    return rows


def plain_is_reference(variant: Variant, reference: Variant) -> bool:
    """A speculative variant that, decoded without speculation, is the reference (same model, engine, weights,
    options)."""
    same = lambda v: (v.model, v.engine, v.quantization, v.engine_args)
    return variant.speculative is not None and reference.speculative is None and same(variant) == same(reference)
