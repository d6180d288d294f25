"""The run-time guard of unit tests (tests/unit/conftest.py applies it to each): processes and connections
refused, a model library loaded by the test reported."""

from __future__ import annotations

import _posixsubprocess
import os
import socket
import subprocess
import sys

import pytest

# Libraries that load a model (or a tokenizer's weights): a unit test that finds none loaded leaves none loaded.
MODEL_LIBRARIES = ("transformers", "torch", "tokenizers", "llama_cpp", "vllm", "sentence_transformers")

WHERE = "a unit test starts no process, opens no connection and loads no model: move it to tests/integration/"


class NotAUnitTest(AssertionError):
    """A unit test did what only an integration test may do."""


def refused(what: str):
    def refuse(*args, **kwargs):
        raise NotAUnitTest(f"{what}: {WHERE}")

    return refuse


def refuse_processes_and_connections(monkeypatch: pytest.MonkeyPatch) -> None:
    """Processes (subprocess, fork, spawn, system) and sockets (bind, connect, listen) refused until MONKEYPATCH
    is undone."""
    monkeypatch.setattr(subprocess.Popen, "_execute_child", refused("subprocess.Popen"))
    monkeypatch.setattr(_posixsubprocess, "fork_exec", refused("fork_exec"))  # multiprocessing's spawn, forkserver
    for name in ("fork", "forkpty", "posix_spawn", "posix_spawnp", "system"):
        if hasattr(os, name):
            monkeypatch.setattr(os, name, refused(f"os.{name}"))
    for name in ("bind", "connect", "connect_ex", "listen"):
        monkeypatch.setattr(socket.socket, name, refused(f"socket.{name}"))


def model_libraries_loaded() -> set[str]:
    return {m for m in MODEL_LIBRARIES if m in sys.modules}
