"""What the load generator shares the host with: the server's CPU threads, and the warnings a reader needs.

A perf run on the same host as a CPU server competes with it for cores: every chunk the client
reads wakes it, and a decode step whose threads wait for each other at every barrier stalls while
one of them is off its core. Two cases are warned about, before the first request:

- the server decodes on every core of the host (no core left for the load generator and the
  server's own HTTP thread);
- the server is llama-cpp-python's stock `python -m llama_cpp.server` decoding on more than one
  thread: its decode speed then depends on the clients' timing (tasks/engines/llama_cpp_server.py
  says why; the nightly serves llama.cpp through that module instead).

The nightly knows its engine's threads (Engine.cpu_threads, recorded in `variants.cpu_threads`);
for `tradeoff perf --endpoint` on this host they are read from the command line of the process
listening on the endpoint's port (Linux /proc; elsewhere, or for another user's process, unknown).
"""

from __future__ import annotations

import os
from pathlib import Path

STOCK_LLAMA_SERVER = "llama_cpp.server"
PINNED_LLAMA_SERVER = "tasks.engines.llama_cpp_server"

# Measured with benchmarks/client_intrusion.py on a 2-core host (docs/timing.md, "The client and the server").
STOCK_FIGURE = (
    "measured on 2 cores: 29.6 ms per token under tradeoff perf, 23.4 under vllm bench serve, 13.9 under curl"
)
NO_CORE_FIGURE = (
    "on 2 cores, served as the nightly serves it, tradeoff perf, vllm bench serve and curl measured "
    "alike within 1 %, but any other busy process on the host slows every decode step"
)


def _listening_inodes(port: int) -> set[str]:
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            f = line.split()
            if len(f) > 9 and f[3] == "0A" and int(f[1].rsplit(":", 1)[1], 16) == port:  # 0A: LISTEN
                inodes.add(f[9])
    return inodes


def listener_pid(port: int) -> int | None:
    """The PID of the process listening on TCP `port` on this host; None when not found (or not readable)."""
    inodes = _listening_inodes(port)
    if not inodes:
        return None
    wanted = {f"socket:[{i}]" for i in inodes}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            for fd in (proc / "fd").iterdir():
                if os.readlink(fd) in wanted:
                    return int(proc.name)
        except OSError:
            continue
    return None


def _flag(argv: list[str], name: str) -> str | None:
    for i, a in enumerate(argv):
        if a == name and i + 1 < len(argv):
            return argv[i + 1]
        if a.startswith(name + "="):
            return a.split("=", 1)[1]
    return None


def llama_server_threads(argv: list[str], host_cores: int, os_cpus: int) -> dict | None:
    """{decode, prompt, host_cores, server} of a llama-cpp-python server's command line; None for anything else.

    Defaults are llama-cpp-python's: n_threads cpu_count // 2, n_threads_batch cpu_count (-1: cpu_count).
    """
    if "-m" not in argv:
        return None
    module = argv[argv.index("-m") + 1] if argv.index("-m") + 1 < len(argv) else None
    if module not in (STOCK_LLAMA_SERVER, PINNED_LLAMA_SERVER):
        return None

    def threads(flag: str, default: int) -> int:
        v = _flag(argv, flag)
        try:
            n = int(v) if v is not None else default
        except ValueError:
            return default
        return os_cpus if n == -1 else n

    return {
        "decode": threads("--n_threads", max(os_cpus // 2, 1)),
        "prompt": threads("--n_threads_batch", os_cpus),
        "host_cores": host_cores,
        "server": module,
    }


def local_server_threads(port: int) -> dict | None:
    """The CPU threads of the llama-cpp-python server listening on `port` of this host; None when unknown."""
    pid = listener_pid(port)
    if pid is None:
        return None
    try:
        argv = [a.decode(errors="replace") for a in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0") if a]
    except OSError:
        return None
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return llama_server_threads(argv, cores, os.cpu_count() or 1)


def sharing_notes(threads: dict | None) -> list[str]:
    """Warnings about the host the load generator shares with the server (empty when nothing to say)."""
    if not threads:
        return []
    notes = []
    decode, cores = threads.get("decode"), threads.get("host_cores")
    if decode and cores and decode >= cores:
        notes.append(
            f"the server decodes on {decode} threads and this host has {cores} cores: none is left for "
            f"the load generator, whose wake-ups then take a core from a decode step ({NO_CORE_FIGURE}); "
            f"leave one free (llama.cpp: n_threads {max(cores - 1, 1)}) or run the load generator on "
            f"another host"
        )
    if threads.get("server") == STOCK_LLAMA_SERVER and decode and decode > 1:
        notes.append(
            f"llama-cpp-python's stock server decoding on {decode} threads: its decode speed depends on "
            f"the clients' timing (a second OpenMP team appears when requests follow each other closely; "
            f"{STOCK_FIGURE}); serve it with `python -m {PINNED_LLAMA_SERVER}` (the same options) or "
            f"with --n_threads 1 (docs/timing.md)"
        )
    return notes
