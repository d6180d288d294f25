"""llama-cpp-python's OpenAI-compatible server with every llama.cpp call on one thread.

    python -m tasks.engines.llama_cpp_server [llama_cpp.server's own options]

The stock server (`python -m llama_cpp.server`) runs each llama.cpp call (building the completion,
then every `next()` of its token stream) on whichever AnyIO worker thread is idle. Its llama.cpp is
built with OpenMP (GGML_OPENMP), and libgomp keeps one team of `n_threads - 1` worker threads per
thread that starts a parallel region. A second AnyIO worker appears whenever two thread-pool calls
overlap, which happens when a request arrives while the previous one's clean-up (FastAPI runs the
exit of the server's generator dependencies in the thread pool after the response ends) has not
finished: a client that sends its next request ~1 ms after the last byte (tradeoff perf) hits that
window on most requests, vllm bench serve (~2 ms) on some, curl (~9 ms) rarely. From then on the
token stream alternates between the two workers, both teams stay alive, and once libgomp manages
more threads than the host has cores it stops spinning at its barriers ("throttled" spin count) and
sleeps on a futex at each of the hundreds of barriers of a decode step. Measured on 2 cores with
n_threads 2: 13-14 ms per token in one team, 28-31 ms with two (the server's own timer); which one a
run got depended on the client's timing, not on the model (docs/timing.md, benchmarks/client_intrusion.py).

Here every llama.cpp call runs on one dedicated thread, so there is one OpenMP team for the life of
the server, whatever the clients' timing. The calls were already serialised (the server holds a lock
around each request), so nothing runs later than before. Everything else is the stock server.
"""

from __future__ import annotations

import asyncio
import functools
from concurrent.futures import ThreadPoolExecutor
from types import ModuleType
from typing import Any, AsyncIterator, Callable, Iterable

_END = object()


def pin_llama_calls(app: ModuleType, executor: ThreadPoolExecutor) -> None:
    """Make the server module `app` (llama_cpp.server.app) run its thread-pool calls on `executor`'s one thread."""

    async def run_in_threadpool(func: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(executor, functools.partial(func, *args, **kwargs))

    async def iterate_in_threadpool(iterator: Iterable[Any]) -> AsyncIterator[Any]:
        it = iter(iterator)
        while True:
            item = await run_in_threadpool(next, it, _END)
            if item is _END:
                return
            yield item

    app.run_in_threadpool = run_in_threadpool
    app.iterate_in_threadpool = iterate_in_threadpool


def main() -> None:
    import llama_cpp.server.app as app
    from llama_cpp.server.__main__ import main as serve

    pin_llama_calls(app, ThreadPoolExecutor(max_workers=1, thread_name_prefix="llama.cpp"))
    serve()


if __name__ == "__main__":
    main()
