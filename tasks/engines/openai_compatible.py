"""Hosted endpoints: any OpenAI-compatible API, measured like a local server, with nothing to build or start.

A variant names the endpoint (`base_url`, the server root; a trailing /v1 is dropped because
the clients append /v1/...), the model it serves and where its API key comes from: an
environment variable (`api_key_env`, checked when the config loads) or a Prefect Secret block
(`api_key_secret`, read when the variant is served), and goes only to a host the operator bound it to
(`TRADEOFF_KEY_HOSTS`, tasks.core.credentials; loopback is free). The key goes only into the Authorization
header of this process's requests (`tasks.engines.endpoint_headers`); it is never put in a
command line, a log, the run folder or the warehouse. Prices come from the variant's `cost:`
(USD per 1M input and output tokens) and end up in `v_cost`.
"""

from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path
from typing import ClassVar

from pydantic import BaseModel, ConfigDict, Field, field_validator

from tasks.client import BadResponse, NotReady, api_root, json_of, set_endpoint_headers, wait_ready
from tasks.core.config import ModelSpec, Variant
from tasks.core.credentials import key_host_problem, key_source_problem, remember_key, url_problem
from tasks.engines.base import Artifact, Endpoint, Engine, check_args


class HostedArgs(BaseModel):
    """`engine_args` of an openai-compatible variant."""

    model_config = ConfigDict(extra="forbid")

    base_url: str = Field(description="server root, e.g. https://api.example.com (a trailing /v1 is dropped)")
    model: str = Field(description="model name the endpoint serves")
    api_key_env: str | None = Field(default=None, description="environment variable holding the API key")
    api_key_secret: str | None = Field(default=None, description="Prefect Secret block holding the API key")
    health_timeout_s: float = Field(default=30.0, gt=0, le=3_600, description="wait for GET /v1/models to answer (s)")

    @field_validator("base_url")
    @classmethod
    def _url(cls, v: str) -> str:
        if not v.startswith(("http://", "https://")):
            raise ValueError("base_url must start with http:// or https://")
        return api_root(v)


class HostedError(RuntimeError):
    """A hosted endpoint that cannot be used; one line, never the key."""


def read_key(args: HostedArgs) -> str | None:
    """The API key from its environment variable or Prefect Secret block (None: the endpoint needs none), read only
    for a host the operator bound it to (the config load checked that already; a caller that skipped it is refused)."""
    if problem := key_host_problem(args.api_key_env, args.api_key_secret, args.base_url):
        raise HostedError(problem)
    if args.api_key_env:
        key = os.environ.get(args.api_key_env)
        if not key:
            raise HostedError(
                f"environment variable {args.api_key_env} (API key of {args.base_url}) is not set; export it"
            )
        return key
    if args.api_key_secret:
        from prefect.blocks.system import Secret

        try:
            return Secret.load(args.api_key_secret).get()
        except (ValueError, RuntimeError) as err:
            raise HostedError(
                f"Prefect Secret block '{args.api_key_secret}' cannot be read ({type(err).__name__}); "
                f"create it: Secret(value=...).save('{args.api_key_secret}')"
            ) from None
    return None


class OpenAICompatible(Engine):
    name: ClassVar[str] = "openai-compatible"
    runs_on_host: ClassVar[bool] = (
        False  # the provider's hardware: energy and MBU NULL with the reason, never this host's
    )
    forces_output_len: ClassVar[str | None] = None  # hosted APIs mostly honour neither min_tokens nor ignore_eos

    @staticmethod
    def args(variant: "Variant") -> HostedArgs:
        return HostedArgs.model_validate(variant.engine_args)

    def check_variant(self, variant: "Variant", model: "ModelSpec") -> str | None:
        if "base_url" not in variant.engine_args or "model" not in variant.engine_args:
            missing = "base_url" if "base_url" not in variant.engine_args else "model"
            return f"engine_args.{missing}: required for engine openai-compatible; add it"
        # The URL first: that line never shows it (credentials in it); check_args would.
        problem = url_problem(variant.engine_args.get("base_url")) or check_args(
            variant.engine_args, HostedArgs, self.name
        )
        if problem:
            return problem
        a = self.args(variant)
        if a.api_key_env and a.api_key_secret:
            return "engine_args.api_key_env: give api_key_env or api_key_secret, not both"
        if problem := key_source_problem(a.api_key_env, a.api_key_secret):  # an allowed name; a pasted key unshown
            return problem
        if a.api_key_env and not os.environ.get(a.api_key_env):
            return (
                f"engine_args.api_key_env: environment variable {a.api_key_env} is not set; export it "
                f"(the key is read at run time and never stored)"
            )
        if problem := key_host_problem(a.api_key_env, a.api_key_secret, a.base_url):  # bound by the operator
            return problem
        if variant.speculative:
            return "speculative: a hosted endpoint's decoding is not configurable; remove speculative"
        return None

    def served_model_name(self, variant: "Variant") -> str:
        return self.args(variant).model

    def build(self, variant: "Variant", model: "ModelSpec", cache_dir: Path) -> Artifact:
        """Nothing to build: the artifact names the endpoint; the model's local GGUF (if any) counts tokens."""
        a = self.args(variant)
        local = model.local_path()
        path = local if local is not None else Path(model.hub or a.model)
        ident = hashlib.sha256(f"{a.base_url}\n{a.model}".encode()).hexdigest()
        meta = {"endpoint": a.base_url, "model": a.model, "hosted": True, "engine_version": None}
        if local is not None and local.suffix == ".gguf":
            meta["tokenizer_gguf"] = str(local)
        return Artifact(variant.name, path, ident, 0, True, 0.0, meta)

    def tokenizer_file(self, artifact: Artifact) -> Path | None:
        tok = artifact.meta.get("tokenizer_gguf")
        return Path(tok) if tok else None

    def serve(
        self, artifact: Artifact, variant: "Variant", model: "ModelSpec", log_path: Path, timeout_s: float
    ) -> Endpoint:
        """Nothing starts: read the key, check that the endpoint answers and serves the model."""
        a = self.args(variant)
        key = read_key(a)
        remember_key(key)  # excerpts of server answers (perf_requests.error) replace it
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        log_path.parent.mkdir(parents=True, exist_ok=True)
        where = (
            f"key from {'env ' + a.api_key_env if a.api_key_env else 'secret ' + str(a.api_key_secret)}"
            if key
            else "no key"
        )
        log_path.write_text(f"hosted endpoint {a.base_url}, model {a.model} ({where})\n")
        t0 = time.monotonic()
        wait_s = min(timeout_s, a.health_timeout_s)

        def refused(r) -> None:
            if r.status_code in (401, 403):
                raise HostedError(f"hosted endpoint {a.base_url} refused the API key ({where}): HTTP {r.status_code}")

        try:
            r = wait_ready(a.base_url, "/v1/models", wait_s, interval_s=1.0, headers=headers, final=refused)
        except NotReady as err:
            raise HostedError(
                f"hosted endpoint {a.base_url} did not answer GET /v1/models within {wait_s:.0f} s ({err.last})"
            ) from None
        try:
            listing = json_of(r)
        except BadResponse as err:
            raise HostedError(f"hosted endpoint {a.base_url} answered GET /v1/models with {err}") from None
        data = listing.get("data") if isinstance(listing, dict) else None
        served = [m.get("id") for m in data if isinstance(m, dict)] if isinstance(data, list) else []
        if served and a.model not in served:
            raise HostedError(
                f"hosted endpoint {a.base_url} does not serve model '{a.model}'; "
                f"it serves {', '.join(map(str, served[:10]))}"
            )
        set_endpoint_headers(a.base_url, headers)
        return Endpoint(a.base_url, a.model, None, time.monotonic() - t0)
