"""The run-time guard of unit tests (tests/unit/conftest.py applies it to each): processes and connections
refused, a model library loaded by the test reported."""

from __future__ import annotations

import _posixsubprocess
import os
import socket
import subprocess
import sys
import threading

import pytest

# Libraries that load a model (or a tokenizer's weights): a unit test that finds none loaded leaves none loaded.
MODEL_LIBRARIES = ("transformers", "torch", "tokenizers", "llama_cpp", "vllm", "sentence_transformers")

WHERE = "a unit test starts no process, opens no connection and loads no model: move it to tests/integration/"


class NotAUnitTest(AssertionError):
    """A unit test did what only an integration test may do."""


def refused(what: str, original, others: set[int]):
    """ORIGINAL, refused to the test's thread and the threads it starts; threads in OTHERS (already running when the
    test began: an earlier integration test's Prefect API or server) go on as before."""

    def refuse(*args, **kwargs):
        if threading.get_ident() in others:
            return original(*args, **kwargs)
        raise NotAUnitTest(f"{what}: {WHERE}")

    return refuse


def refuse_processes_and_connections(monkeypatch: pytest.MonkeyPatch) -> None:
    """Processes (subprocess, fork, spawn, system) and sockets (bind, connect, listen) refused to the calling thread
    and the threads it starts, until MONKEYPATCH is undone."""
    others = {t.ident for t in threading.enumerate() if t.ident is not None} - {threading.get_ident()}
    targets = [
        (subprocess.Popen, "_execute_child", "subprocess.Popen"),
        (_posixsubprocess, "fork_exec", "fork_exec"),  # multiprocessing's spawn and forkserver
        *((os, name, f"os.{name}") for name in ("fork", "forkpty", "posix_spawn", "posix_spawnp", "system")),
        *((socket.socket, name, f"socket.{name}") for name in ("bind", "connect", "connect_ex", "listen")),
    ]
    for owner, name, what in targets:
        if hasattr(owner, name):
            monkeypatch.setattr(owner, name, refused(what, getattr(owner, name), others))


def model_libraries_loaded() -> set[str]:
    return {m for m in MODEL_LIBRARIES if m in sys.modules}
