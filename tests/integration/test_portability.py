"""Runs anywhere: the portable llama.cpp build, native crashes reported by signal, `tradeoff doctor`."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tasks.core.process import ChildDied, ChildError, ChildWorker, exit_reason, run_in_child
from tasks.engines.launcher import ServerDied, log_tail
from tasks.tools import llama_build
from tests.helpers import ROOT

# ------------------------------------------------------------------ the build


def test_portable_flags_turn_native_avx512_and_amx_off() -> None:
    args = llama_build.cmake_args(native=False)
    assert "-DGGML_NATIVE=OFF" in args
    on = {a for a in args if a.endswith("=ON")}
    assert not any("AVX512" in a or "AMX" in a or "NATIVE" in a for a in on), on
    assert llama_build.cmake_args(native=True) == ("-DGGML_NATIVE=ON",)


def test_the_build_is_keyed_by_its_flags_and_the_pin() -> None:
    req = llama_build.pinned_requirement()
    assert req.startswith("llama-cpp-python==")
    portable, native = llama_build.cmake_args(False), llama_build.cmake_args(True)
    assert llama_build.build_key(req, portable) != llama_build.build_key(req, native)
    assert llama_build.build_key(req, portable) != llama_build.build_key(req + "1", portable)


def test_the_build_cache_is_per_user_and_movable(monkeypatch, tmp_path) -> None:
    monkeypatch.delenv("TRADEOFF_LLAMA_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert llama_build.cache_root() == tmp_path / "xdg" / "tradeoff" / "llama-cpp"
    monkeypatch.setenv("TRADEOFF_LLAMA_CACHE", str(tmp_path / "mine"))
    assert llama_build.cache_root() == tmp_path / "mine"
    assert not llama_build.cache_root().is_relative_to(ROOT)  # outside the clone: a fresh clone reuses it


def test_makefile_builds_llama_cpp_portable_unless_asked() -> None:
    make = (ROOT / "Makefile").read_text()
    assert "LLAMA_NATIVE ?= 0" in make and "-m tasks.tools.llama_build build" in make
    # pip's own install of the project must find llama-cpp-python installed already (no second, native build)
    assert make.index("$(LLAMA_STAMP):") < make.index('pip install -e ".[test]"')


@pytest.mark.skipif(shutil.which("objdump") is None or shutil.which("gcc") is None, reason="needs gcc and objdump")
@pytest.mark.skipif(not llama_build.is_x86(), reason="AVX-512/AMX are x86 extensions")
def test_the_instruction_scan_finds_avx512_and_amx(tmp_path: Path) -> None:
    src = tmp_path / "k.c"
    src.write_text(
        'void avx512(void) { __asm__ volatile("vpxord %zmm1, %zmm1, %zmm1"); }\n'
        'void amx(void) { __asm__ volatile("tilezero %tmm4"); }\n'
        'void avx2(void) { __asm__ volatile("vpxor %ymm1, %ymm1, %ymm1"); }\n'
    )
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(tmp_path / "libk.so"), str(src)], check=True)
    (tmp_path / "clean").mkdir()
    (tmp_path / "clean" / "c.c").write_text('void avx2(void) { __asm__ volatile("vpxor %ymm1, %ymm1, %ymm1"); }\n')
    subprocess.run(
        ["gcc", "-shared", "-fPIC", "-o", str(tmp_path / "clean" / "libc.so"), str(tmp_path / "clean" / "c.c")],
        check=True,
    )
    assert llama_build.forbidden_instructions(tmp_path) == {"libk.so": 2}
    assert llama_build.forbidden_instructions(tmp_path / "clean") == {"libc.so": 0}


def test_the_installed_build_is_the_portable_one() -> None:
    record = llama_build.read_record()
    if record is None:
        pytest.skip(f"llama-cpp-python here was not installed by `make setup` (no {llama_build.RECORD_NAME})")
    if record["mode"] == "native":
        pytest.skip("built with LLAMA_NATIVE=1 on purpose")
    assert llama_build.check() == []


# ------------------------------------------------------------------ native crashes in a child


def die_by(signum: int) -> None:
    os.kill(os.getpid(), signum)


class Counter:
    def __init__(self, start: int) -> None:
        self.n = start

    def bump(self) -> int:
        self.n += 1
        return self.n

    def die(self, signum: int) -> None:
        os.kill(os.getpid(), signum)


def test_a_child_killed_by_sigill_is_a_clear_failure_and_the_run_goes_on() -> None:
    with pytest.raises(ChildDied) as err:
        run_in_child(die_by, signal.SIGILL, what="llama.cpp")
    assert str(err.value).startswith(
        "llama.cpp died by SIGILL (illegal instruction: a native library (llama.cpp?) "
        "was built for another CPU; rebuild it portable with `make setup`"
    )
    assert err.value.returncode == -signal.SIGILL
    assert run_in_child(pow, 2, 10) == 1024  # this process is fine, and so is the next child


def test_a_child_error_keeps_its_message() -> None:
    with pytest.raises(ChildError, match=r"^parse: ValueError: invalid literal"):
        run_in_child(int, "x", what="parse")


def test_a_worker_keeps_its_state_and_reports_its_death() -> None:
    worker = ChildWorker(Counter, 40, what="counter")
    try:
        assert (worker.call("bump"), worker.call("bump")) == (41, 42)
        with pytest.raises(ChildDied, match=r"^counter died by SIGSEGV \(segmentation fault"):
            worker.call("die", signal.SIGSEGV)
        with pytest.raises(ChildDied):  # and every later call
            worker.call("bump")
    finally:
        worker.close()


@pytest.mark.parametrize(
    "code, text",
    [
        (-4, "SIGILL (illegal instruction"),
        (-9, "SIGKILL (killed: out of memory"),
        (-11, "SIGSEGV (segmentation fault"),
        (3, "exit code 3"),
    ],
)
def test_exit_reasons_name_the_signal_and_cause(code: int, text: str) -> None:
    assert exit_reason(code).startswith(text)


def test_a_dead_server_is_reported_by_signal_and_its_last_lines_that_are_not_access_log(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_text(
        "loading model\nllama_model_load: n_ctx = 2048\n"
        'INFO:     127.0.0.1:46394 - "POST /v1/completions HTTP/1.1" 200 OK\n'
        'INFO:     127.0.0.1:46394 - "GET /v1/models HTTP/1.1" 200 OK\n'
    )
    err = ServerDied(-4, "during the perf sweep", log)
    first = str(err).splitlines()[0]
    assert first.startswith("server died by SIGILL (illegal instruction: ") and "during the perf sweep: " in first
    assert "llama_model_load: n_ctx = 2048" in first and f"(log: {log})" in first and "POST" not in str(err)
    assert log_tail(log).splitlines() == ["loading model", "llama_model_load: n_ctx = 2048"]


# ------------------------------------------------------------------ doctor


def test_doctor_prints_one_line_per_check_and_passes_here() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "flows.cli", "doctor"], cwd=ROOT, capture_output=True, text=True, timeout=600
    )
    lines = proc.stdout.strip().splitlines()
    names = [ln.split()[1] for ln in lines[:-1]]
    assert {"python", "packages", "llama.cpp", "prefect", "chromium"} <= set(names), proc.stdout
    assert all(ln.split()[0] in ("ok", "missing", "broken") for ln in lines[:-1]), proc.stdout
    run = next(ln for ln in lines if ln.split()[1:3] == ["llama.cpp", "run"])
    assert run.startswith("ok") and "tok/s" in run, proc.stdout + proc.stderr
    assert proc.returncode == 0 and lines[-1] == "doctor: ready", proc.stdout + proc.stderr


def sigill_probe(gguf: str) -> None:
    """Stands in for a llama.cpp built for another CPU: the first token kills the process."""
    die_by(signal.SIGILL)


def test_doctor_reports_a_crashing_llama_cpp_by_signal() -> None:
    from tasks import doctor

    check = doctor.check_llama_run(probe=sigill_probe)
    assert check.status == "broken" and check.fails
    assert check.line().startswith("broken   llama.cpp run") and "died by SIGILL (illegal instruction" in check.line()
