"""What the load generator shares the host with: a llama-cpp-python server's threads read from its command
line, the warnings, and the server module that runs every llama.cpp call on one thread."""

from __future__ import annotations

import asyncio
import threading
import types
from concurrent.futures import ThreadPoolExecutor

import pytest

from tasks.engines.llama_cpp_server import pin_llama_calls
from tasks.perf.host_share import PINNED_LLAMA_SERVER, STOCK_LLAMA_SERVER, llama_server_threads, sharing_notes


def test_threads_from_a_stock_servers_command_line():
    argv = ["/venv/bin/python", "-m", "llama_cpp.server", "--model", "m.gguf", "--n_threads", "2"]
    assert llama_server_threads(argv, 2, 2) == {"decode": 2, "prompt": 2, "host_cores": 2, "server": STOCK_LLAMA_SERVER}


def test_threads_default_and_minus_one_as_llama_cpp_python_reads_them():
    argv = ["python", "-m", PINNED_LLAMA_SERVER, "--n_threads_batch=-1"]
    assert llama_server_threads(argv, 6, 8) == {
        "decode": 4,
        "prompt": 8,
        "host_cores": 6,
        "server": PINNED_LLAMA_SERVER,
    }


@pytest.mark.parametrize(
    "argv",
    [
        ["python", "-m", "vllm.entrypoints.openai.api_server"],
        ["llama-server", "-t", "2"],
        ["python", "server.py"],
        ["python", "-m"],
    ],
)
def test_other_servers_are_unknown(argv):
    assert llama_server_threads(argv, 2, 2) is None


def test_no_core_left_and_the_stock_server_are_both_warned_about():
    notes = sharing_notes({"decode": 2, "prompt": 2, "host_cores": 2, "server": STOCK_LLAMA_SERVER})
    assert len(notes) == 2
    assert "none is left for the load generator" in notes[0] and "n_threads 1" in notes[0]
    assert "stock server" in notes[1] and PINNED_LLAMA_SERVER in notes[1]


def test_the_nightlys_server_with_a_core_free_is_not_warned_about():
    assert sharing_notes({"decode": 1, "prompt": 2, "host_cores": 2, "server": PINNED_LLAMA_SERVER}) == []
    assert sharing_notes({"decode": 1, "prompt": 2, "host_cores": 2, "server": STOCK_LLAMA_SERVER}) == []
    assert sharing_notes(None) == []


def test_every_llama_call_runs_on_one_thread_however_calls_overlap():
    app = types.ModuleType("fake_llama_server_app")
    executor = ThreadPoolExecutor(max_workers=1)
    pin_llama_calls(app, executor)
    seen: list[int] = []

    def tokens(n):
        for i in range(n):
            seen.append(threading.get_ident())
            yield None if i == 1 else i  # a None token is a token, not the end

    async def stream(n):
        return [t async for t in app.iterate_in_threadpool(tokens(n))]

    async def main():
        # Two streams and plain calls at once: what made the stock server use a second worker thread.
        out = await asyncio.gather(
            stream(5),
            stream(3),
            app.run_in_threadpool(threading.get_ident),
            app.run_in_threadpool(lambda a, b=0: a + b, 2, b=3),
        )
        with pytest.raises(ZeroDivisionError):
            await app.run_in_threadpool(lambda: 1 / 0)
        return out

    first, second, ident, total = asyncio.run(main())
    executor.shutdown()
    assert first == [0, None, 2, 3, 4] and second == [0, None, 2] and total == 5
    assert len(seen) == 8 and set(seen) == {ident} and ident != threading.get_ident()


def test_the_engines_threads_of_a_variant_whose_value_the_server_will_refuse():
    from tasks.core.config import ModelSpec, Variant
    from tasks.engines.llama_cpp import LlamaCpp
    from tests.helpers import smollm2

    model = ModelSpec.model_validate(smollm2())
    bad = Variant(name="broken", model="m", engine="llama.cpp", quantization="q4_1", engine_args={"n_threads": "many"})
    assert LlamaCpp().cpu_threads(bad, model) is None  # unknown, not raised: the variant fails at start-up
    two = Variant(
        name="two",
        model="m",
        engine="llama.cpp",
        quantization="q4_1",
        engine_args={"n_threads": 2, "n_threads_batch": 3},
    )
    assert {k: v for k, v in LlamaCpp().cpu_threads(two, model).items() if k != "host_cores"} == {
        "decode": 2,
        "prompt": 3,
    }
