"""Run identity and provenance: run ids, the run folder, host hardware, library versions, git sha."""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import platform
import secrets
import subprocess
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from tasks.core.errors import ConfigError
from tasks.core.lifecycle import run_tied
from tasks.core.names import check_run_id, contained

# The checkout: where the engines' own environments (.venv-vllm, .venv-helm) and tools live.
PROJECT_ROOT = Path(__file__).resolve().parents[2]
TOOLS = PROJECT_ROOT / "tasks" / "tools"  # scripts that run with another environment's Python

PACKAGES = (
    "tradeoff",
    "prefect",
    "llama-cpp-python",
    "vllm",
    "tensorrt-llm",
    "lm-eval",
    "crfm-helm",
    "duckdb",
    "great-expectations",
    "nvidia-ml-py",
    "torch",
)


@dataclass(frozen=True)
class RunPaths:
    """`runs/<run_id>/`: results (Parquet parts), logs (engine servers), the HTML report, and tool outputs."""

    run_id: str
    root: Path

    @property
    def results(self) -> Path:
        return self.root / "results"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def report_html(self) -> Path:
        """The self-contained HTML report the nightly writes (tables and plots)."""
        return self.root / "report.html"


def runs_dir() -> Path:
    return Path(os.environ.get("TRADEOFF_RUNS_DIR") or "runs")


def user_cache_dir() -> Path:
    """The user's cache folder of tradeoff ($XDG_CACHE_HOME/tradeoff, else ~/.cache/tradeoff): what is kept across
    runs and clones. (tasks.tools.llama_build, stdlib only, finds the same folder on its own.)"""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "tradeoff"


def build_cache_dir() -> Path:
    """Where variant builds are cached by content (source hash + build parameters), across runs."""
    return Path(os.environ.get("TRADEOFF_CACHE_DIR") or user_cache_dir() / "builds")


def new_run_id(config_name: str) -> str:
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    return f"{stamp}-{config_name}-{secrets.token_hex(2)}"


def valid_run_id(run_id: str | None, what: str = "run_id") -> str | None:
    """`run_id` unchanged (None too); ConfigError (one line) when it is not a safe name (tasks.core.names)."""
    try:
        return check_run_id(run_id, what)
    except ValueError as err:
        raise ConfigError(str(err)) from None


def make_run_paths(run_id: str) -> RunPaths:
    """The run's folder, created; ConfigError (one line) for a run id that is no safe name or a folder that
    resolves outside the runs folder (a symlink). Here a run id becomes a path, so here it is always checked,
    whoever calls (an entry point checks it too, to refuse it before any other work)."""
    valid_run_id(run_id)
    try:
        contained(runs_dir(), runs_dir() / run_id, "run folder")
    except ValueError as err:
        raise ConfigError(str(err)) from None
    paths = RunPaths(run_id, runs_dir() / run_id)
    paths.results.mkdir(parents=True, exist_ok=True)
    paths.logs.mkdir(parents=True, exist_ok=True)
    return paths


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def gpu_names() -> str | None:
    try:
        import pynvml

        pynvml.nvmlInit()
        names = [
            pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(i)) for i in range(pynvml.nvmlDeviceGetCount())
        ]
        return ", ".join(n.decode() if isinstance(n, bytes) else n for n in names) or None
    except Exception:  # noqa: BLE001 - no driver / no NVML: no GPU to report
        return None


def library_versions() -> dict[str, str]:
    out = {}
    for name in PACKAGES:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return out


def git_sha() -> str | None:
    try:
        r = run_tied(
            ["git", "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout_s=5,
            cwd=Path(__file__).resolve().parent,
        )
        return r.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def host_info() -> dict:
    """Columns of the `runs` table that describe the machine and software."""
    cpu, gpu = cpu_model(), gpu_names()
    ncpu = os.cpu_count() or 0
    host = platform.node()
    return {
        "host": host,
        "cpu": cpu,
        "cpu_count": ncpu,
        "gpu": gpu,
        "hardware_id": hashlib.sha256(json.dumps([host, cpu, ncpu, gpu]).encode()).hexdigest()[:16],
        "library_versions": json.dumps(library_versions(), sort_keys=True),
        "git_sha": git_sha(),
    }
