"""Build llama-cpp-python for the CPUs a user has, not for the one that compiles it.

llama-cpp-python is source-only on PyPI, and llama.cpp's CMake default (GGML_NATIVE) compiles
for the build machine (`-march=native`): a wheel built on an AMX/AVX-512 Xeon dies with SIGILL
elsewhere, and even there it did (`tilezero` before the process asked for AMX). pip then caches
that wheel for every later install, whatever CMAKE_ARGS say. So `make setup` builds it here:

- portable by default: an x86-64 baseline of AVX/AVX2/FMA/F16C/BMI2 (every x86 server and
  laptop since ~2015), AVX-512 and AMX off; on other architectures only GGML_NATIVE=OFF;
- native with `LLAMA_NATIVE=1` (faster on the build machine only, never copied elsewhere);
- with pip's wheel cache bypassed, into a folder keyed by version, flags, Python and architecture
  (`<cache>/<key>/`), so a wheel is reused only when this script built it with the same flags; the
  flags are recorded in the virtual environment (`llama-cpp-build.json`), where `check` and
  `tradeoff doctor` read them. The cache is per user, like pip's own (`$TRADEOFF_LLAMA_CACHE`, else
  `$XDG_CACHE_HOME/tradeoff/llama-cpp`, else `~/.cache/tradeoff/llama-cpp`): a second clone on the
  same machine installs in seconds instead of compiling for minutes (~5 on 2 cores, ~25 on a slow
  one). A folder appears only complete (built in `<key>.<pid>.tmp`, then renamed; a setup that finds the key
  completed meanwhile by another drops its own).

llama.cpp's own server (`llama-server`: continuous batching over `--parallel` slots, /metrics,
/slots) comes from the same sources and the same compiled libraries: the wheel is built from the
unpacked sdist with its CMake build folder kept (scikit-build-core's build-dir, with the venv's
cmake and ninja, so that folder can be configured again), then the folder is configured again
with llama.cpp's tools on and only the `llama-server` target is built: ggml, llama and common are
already compiled there with the same flags, so what is compiled is the server, its HTTP and the
multimodal library it links. The binary and the shared libraries it loads are copied into
`<key>/server/` and from there into the venv (`<venv>/llama-server/`); `check` inspects them too.

Stdlib only: it runs in a bare virtual environment, before the project is installed.
`python -m tasks.tools.llama_build build|check|show`.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tarfile
import time
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = "llama-cpp-python"
RECORD_NAME = "llama-cpp-build.json"
# Built with these in the venv (llama-cpp-python's build backend, and CMake and Ninja that outlive the build).
BUILD_TOOLS = ("scikit-build-core[pyproject]>=0.9.2", "cmake>=3.21", "ninja")
# The portable x86-64 baseline (x86-64-v3 without AVX-512/AMX). Explicit OFFs so a changed
# llama.cpp default cannot switch them on behind our back.
X86_PORTABLE = (
    "-DGGML_NATIVE=OFF",
    "-DGGML_AVX=ON",
    "-DGGML_AVX2=ON",
    "-DGGML_FMA=ON",
    "-DGGML_F16C=ON",
    "-DGGML_BMI2=ON",
    "-DGGML_AVX_VNNI=OFF",
    "-DGGML_AVX512=OFF",
    "-DGGML_AVX512_VBMI=OFF",
    "-DGGML_AVX512_VNNI=OFF",
    "-DGGML_AVX512_BF16=OFF",
    "-DGGML_AMX_TILE=OFF",
    "-DGGML_AMX_INT8=OFF",
    "-DGGML_AMX_BF16=OFF",
)
NATIVE = ("-DGGML_NATIVE=ON",)
# llama.cpp's tools on, for the server only (no web UI: it would be fetched from the network, and the
# engine needs none; no tests or examples). LLAVA_BUILD off: tools/ then adds the multimodal library
# itself (llama-cpp-python adds the same folder on its own otherwise, and CMake refuses a target twice).
SERVER_ARGS = (
    "-DLLAMA_BUILD_TOOLS=ON",
    "-DLLAMA_BUILD_SERVER=ON",
    "-DLLAMA_BUILD_UI=OFF",
    "-DLLAMA_USE_PREBUILT_UI=OFF",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAVA_BUILD=OFF",
)
SERVER_BINARY = "llama-server"
SERVER_DIR = "llama-server"  # in the venv: the binary and its shared libraries
# What the build folder must hold (a new layout builds again rather than reuse an older key's folder).
LAYOUT = "wheel+server-1"
# Registers that only AVX-512 (zmm, mask k0-k7 as {%k..}) and AMX (tmm) code names.
FORBIDDEN_REGISTERS = re.compile(r"%zmm\d+|%tmm\d+")


def is_x86() -> bool:
    return platform.machine().lower() in {"x86_64", "amd64"}


def cmake_args(native: bool) -> tuple[str, ...]:
    """The CMake flags of a portable (default) or native build on this architecture."""
    if native:
        return NATIVE
    return X86_PORTABLE if is_x86() else ("-DGGML_NATIVE=OFF",)


def pinned_requirement(pyproject: Path = ROOT / "pyproject.toml") -> str:
    """The project's one pin of llama-cpp-python (pyproject.toml), e.g. 'llama-cpp-python==0.3.36'."""
    deps = tomllib.loads(pyproject.read_text())["project"]["dependencies"]
    for dep in deps:
        name = re.split(r"[\[=<>~! ]", dep, maxsplit=1)[0]
        if name == PACKAGE:
            match = re.search(r"==\s*([\w.]+)", dep)
            if not match:
                raise SystemExit(f"pyproject.toml: pin {PACKAGE} with '==' so the build is reproducible")
            return f"{PACKAGE}=={match.group(1)}"
    raise SystemExit(f"pyproject.toml: no {PACKAGE} dependency")


def build_key(requirement: str, args: tuple[str, ...]) -> str:
    tag = f"{requirement}|{' '.join(args)}|{sys.implementation.cache_tag}|{platform.machine()}|{LAYOUT}"
    return hashlib.sha256(tag.encode()).hexdigest()[:16]


def installed_server(prefix: Path | None = None) -> Path:
    """Where `build` puts llama-server in a venv (the binary; its shared libraries beside it)."""
    return Path(prefix or sys.prefix) / SERVER_DIR / SERVER_BINARY


def record_path(prefix: Path | None = None) -> Path:
    return Path(prefix or sys.prefix) / RECORD_NAME


def _run(cmd: list[str], **kw) -> None:
    print("+ " + " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True, **kw)


def _unpacked_sdist(requirement: str, into: Path) -> Path:
    """Download the pinned sdist (pip: its index, find-links, cache) and unpack it into `into`; its folder."""
    dl = into / "sdist"
    _run([sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:", "-d", str(dl), requirement])
    (archive,) = sorted(dl.glob("*.tar.gz"))
    with tarfile.open(archive) as tar:
        tar.extractall(into / "src", filter="data")
    (src,) = [p for p in (into / "src").iterdir() if p.is_dir()]
    return src


def _bin(name: str) -> str:
    """A build tool from this venv (installed by `build`), else from PATH."""
    local = Path(sys.executable).parent / name
    return str(local) if local.exists() else (shutil.which(name) or name)


def build_server(src: Path, cmake_dir: Path, out: Path, jobs: str) -> Path:
    """Configure the wheel's kept CMake folder again with the server on, build only llama-server, and copy it and
    the shared libraries it loads into `out`; the binary."""
    _run([_bin("cmake"), "-S", str(src), "-B", str(cmake_dir), *SERVER_ARGS])
    _run([_bin("cmake"), "--build", str(cmake_dir), "--target", SERVER_BINARY, "--parallel", jobs])
    (binary,) = [p for p in cmake_dir.rglob(SERVER_BINARY) if p.is_file() and os.access(p, os.X_OK)]
    out.mkdir(parents=True, exist_ok=True)
    shutil.copy2(binary, out / SERVER_BINARY)
    # every shared library of the build folder (ggml, llama, common, mtmd, the server's own)
    for lib in cmake_dir.rglob("*.so*"):
        if lib.is_file() and not (out / lib.name).exists():
            shutil.copy2(lib, out / lib.name, follow_symlinks=False)  # a link stays a link
    return out / SERVER_BINARY


def cache_root() -> Path:
    """Where built wheels and servers are kept, per user (see the module's docstring): the folder of
    tasks.core.runinfo.user_cache_dir, found here without importing the project (this script runs before it is
    installed)."""
    if os.environ.get("TRADEOFF_LLAMA_CACHE"):
        return Path(os.environ["TRADEOFF_LLAMA_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "tradeoff" / "llama-cpp"


def build(native: bool, wheel_root: Path | None = None) -> dict:
    """Build (or reuse this script's own wheel and server for the same flags) and install both; return the record."""
    wheel_root = wheel_root or cache_root()
    requirement = pinned_requirement()
    args = cmake_args(native)
    key = build_key(requirement, args)
    wheel_dir = wheel_root / key
    wheels = sorted(wheel_dir.glob("llama_cpp_python-*.whl"))
    if not wheels or not (wheel_dir / "server" / SERVER_BINARY).exists():
        tmp = wheel_dir.with_name(f"{key}.{os.getpid()}.tmp")  # two setups at once build apart
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        jobs = os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL", str(os.cpu_count() or 1))
        env = dict(os.environ, CMAKE_ARGS=" ".join(args), CMAKE_BUILD_PARALLEL_LEVEL=jobs)
        mode = "native" if native else "portable"
        print(f"building {requirement} and llama-server ({mode}: {' '.join(args)}); minutes", flush=True)
        # The build tools in the venv (not pip's throw-away build environment), so the CMake folder stays usable.
        _run([sys.executable, "-m", "pip", "install", "--no-cache-dir", *BUILD_TOOLS])
        src = _unpacked_sdist(requirement, tmp)
        t0 = time.monotonic()
        # --no-cache-dir: never a wheel pip cached from an earlier (maybe native) build.
        _run(
            [
                sys.executable,
                "-m",
                "pip",
                "wheel",
                "--no-deps",
                "--no-cache-dir",
                "--no-build-isolation",
                "--config-settings",
                f"build-dir={tmp / 'cmake'}",
                "-w",
                str(tmp),
                str(src),
            ],
            env=env,
        )
        t1 = time.monotonic()
        build_server(src, tmp / "cmake", tmp / "server", jobs)
        t2 = time.monotonic()
        print(f"llama.cpp: wheel {t1 - t0:.0f} s, llama-server {t2 - t1:.0f} s more", flush=True)
        # what a later setup reuses: the wheel and the server (the sources and the CMake folder go)
        shutil.rmtree(tmp / "src")
        shutil.rmtree(tmp / "sdist")
        shutil.rmtree(tmp / "cmake")
        if (wheel_dir / "server" / SERVER_BINARY).exists():  # another setup finished the same key first
            shutil.rmtree(tmp)
        else:
            shutil.rmtree(wheel_dir, ignore_errors=True)
            tmp.rename(wheel_dir)
        wheels = sorted(wheel_dir.glob("llama_cpp_python-*.whl"))
    else:
        print(f"reusing {wheels[-1].name} and llama-server built by this script with the same flags ({wheel_dir})")
    _run([sys.executable, "-m", "pip", "install", "--no-deps", "--force-reinstall", "--no-cache-dir", str(wheels[-1])])
    server_dir = installed_server().parent
    shutil.rmtree(server_dir, ignore_errors=True)
    shutil.copytree(wheel_dir / "server", server_dir, symlinks=True)
    record = {
        "requirement": requirement,
        "mode": "native" if native else "portable",
        "cmake_args": list(args),
        "key": key,
        "wheel": wheels[-1].name,
        "server": str(installed_server()),
        "machine": platform.machine(),
    }
    record_path().write_text(json.dumps(record, indent=2) + "\n")
    return record


def read_record(prefix: Path | None = None) -> dict | None:
    path = record_path(prefix)
    return json.loads(path.read_text()) if path.exists() else None


def library_dir() -> Path | None:
    """Where the installed llama_cpp package keeps its shared libraries (without importing it)."""
    import importlib.util

    spec = importlib.util.find_spec("llama_cpp")
    if spec is None or not spec.origin:
        return None
    lib = Path(spec.origin).parent / "lib"
    return lib if lib.is_dir() else Path(spec.origin).parent


def forbidden_instructions(lib_dir: Path, extra: tuple[str, ...] = ()) -> dict[str, int]:
    """Per shared library of `lib_dir` (and each file named in `extra` there): how many instructions name an
    AVX-512 (zmm) or AMX (tmm) register."""
    objdump = shutil.which("objdump")
    if objdump is None:
        raise RuntimeError("objdump not found (binutils): cannot inspect the llama.cpp libraries")
    counts = {}
    files = [*lib_dir.glob("*.so*"), *(lib_dir / name for name in extra if (lib_dir / name).exists())]
    for lib in sorted({p.resolve() for p in files}):  # each file once, not its symlinks
        out = subprocess.run(
            [objdump, "-d", "--no-show-raw-insn", str(lib)], capture_output=True, text=True, check=True
        )
        counts[lib.name] = sum(1 for line in out.stdout.splitlines() if FORBIDDEN_REGISTERS.search(line))
    return counts


def check() -> list[str]:
    """Problems of the installed build (empty: portable, recorded, no AVX-512/AMX code)."""
    problems = []
    record = read_record()
    if record is None:
        problems.append(
            f"no {RECORD_NAME} in {sys.prefix}: llama-cpp-python was not built by `make setup` "
            "(its flags are unknown); run `make setup` again"
        )
    elif record["mode"] != "portable":
        problems.append(
            f"llama.cpp was built {record['mode']} ({' '.join(record['cmake_args'])}): "
            "it runs on this CPU model only; `make setup` without LLAMA_NATIVE=1 builds the portable one"
        )
    elif tuple(record["cmake_args"]) != cmake_args(native=False):
        problems.append(
            f"llama.cpp was built with {' '.join(record['cmake_args'])}, "
            f"not the portable flags {' '.join(cmake_args(False))}; run `make setup` again"
        )
    lib_dir = library_dir()
    server_dir = installed_server().parent
    if lib_dir is None:
        problems.append("llama_cpp is not installed in this environment")
    if not (server_dir / SERVER_BINARY).exists():
        problems.append(f"no {SERVER_BINARY} in {server_dir}: run `make setup` again (it builds one)")
    if lib_dir is not None and is_x86():
        libs = forbidden_instructions(lib_dir)
        if not libs:
            problems.append(f"no shared libraries found in {lib_dir}")
        if server_dir.is_dir():
            libs |= {f"{SERVER_DIR}/{k}": v for k, v in forbidden_instructions(server_dir, (SERVER_BINARY,)).items()}
        for name, count in libs.items():
            if count:
                problems.append(
                    f"{name} has {count} AVX-512/AMX instructions (zmm/tmm registers): "
                    "it needs a CPU with those extensions"
                )
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build", help="build and install llama-cpp-python (LLAMA_NATIVE=1: native)")
    b.add_argument("--native", action="store_true", default=os.environ.get("LLAMA_NATIVE", "0") == "1")
    sub.add_parser("check", help="exit 1 unless the installed build is the portable one with no AVX-512/AMX code")
    sub.add_parser("show", help="print the build record")
    ns = parser.parse_args(argv)
    if ns.cmd == "build":
        build(ns.native)
        return 0
    if ns.cmd == "show":
        print(json.dumps(read_record(), indent=2))
        return 0
    problems = check()
    for problem in problems:
        print(f"llama.cpp build: {problem}", file=sys.stderr)
    if not problems:
        lib_dir = library_dir()
        where = f"{lib_dir} and {installed_server().parent}"
        print(f"llama.cpp build: portable ({' '.join(cmake_args(False))}); no AVX-512/AMX instructions in {where}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
