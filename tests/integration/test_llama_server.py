"""The nightly's llama.cpp server (every llama.cpp call on one thread) and what `tradeoff perf` says about the
server it shares the host with: threads read from the listening process, the stock server warned about."""

from __future__ import annotations

import json
import os
import sys

import pytest

from flows.cli import main
from tasks.core.config import ModelSpec, Variant
from tasks.engines.base import Artifact
from tasks.engines.launcher import free_port, serving
from tasks.engines.llama_cpp import SERVER_MODULE, LlamaCpp, decode_threads, host_cores
from tasks.perf.host_share import STOCK_LLAMA_SERVER, listener_pid, local_server_threads
from tests.helpers import smollm2

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc (Linux)")


def nightly_command(port: int, **engine_args) -> list[str]:
    model = ModelSpec.model_validate(smollm2())
    variant = Variant(name="q4_1", model="m", engine="llama.cpp", quantization="q4_1", engine_args=engine_args)
    path = model.local_path()
    art = Artifact("q4_1", path, "sha", path.stat().st_size, True, 0.0, {})
    return LlamaCpp().server_command(art, variant, model, "127.0.0.1", port)


def test_the_nightly_serves_llama_cpp_through_the_one_thread_server(tmp_path):
    port = free_port()
    cmd = nightly_command(port)
    assert cmd[1:3] == ["-m", SERVER_MODULE]
    with serving(cmd, f"http://127.0.0.1:{port}", tmp_path / "server.log", 120) as server:
        assert listener_pid(port) == server.pid
        assert local_server_threads(port) == {
            "decode": decode_threads(),
            "prompt": os.cpu_count(),
            "host_cores": host_cores(),
            "server": SERVER_MODULE,
        }
        out = tmp_path / "r.json"
        assert (
            main(
                [
                    "perf",
                    "--endpoint",
                    server.base_url,
                    "--output",
                    str(out),
                    "--num-prompts",
                    "2",
                    "--concurrency",
                    "1",
                    "--warmup",
                    "0",
                    "--output-len",
                    "4",
                    "--input-len",
                    "16",
                    "--jitter",
                    "off",
                    "--no-progress",
                    "--endpoint-type",
                    "chat",
                ]
            )
            == 0
        )
        (r,) = [json.loads(x) for x in out.read_text().splitlines()]
        assert r["completed"] == 2 and r["total_output_tokens"] == 8  # streamed chat through the pinned calls


def test_tradeoff_perf_warns_about_a_stock_server_on_every_core(tmp_path, capsys):
    port = free_port()
    cmd = nightly_command(port, n_threads=2)
    cmd[cmd.index(SERVER_MODULE)] = STOCK_LLAMA_SERVER
    with serving(cmd, f"http://127.0.0.1:{port}", tmp_path / "server.log", 120) as server:
        threads = local_server_threads(port)
        assert threads["decode"] == 2 and threads["server"] == STOCK_LLAMA_SERVER
        assert (
            main(
                [
                    "perf",
                    "--endpoint",
                    server.base_url,
                    "--output",
                    str(tmp_path / "r.json"),
                    "--num-prompts",
                    "1",
                    "--concurrency",
                    "1",
                    "--warmup",
                    "0",
                    "--output-len",
                    "2",
                    "--input-len",
                    "8",
                    "--jitter",
                    "off",
                    "--no-progress",
                ]
            )
            == 0
        )
    err = capsys.readouterr().err
    assert "warning: llama-cpp-python's stock server decoding on 2 threads" in err
    assert ("none is left for the load generator" in err) == (threads["host_cores"] <= 2)
