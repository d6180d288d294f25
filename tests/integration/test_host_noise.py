"""A busy neighbour during a perf window, for real (issue 36): /proc sees it apart from the engine, and a nightly's
perf run of two identical llama.cpp variants, a neighbour busy on every core for ~10 s during the first, measures
the disturbed window again and reports both speeds alike (within 25 % here; the 10 % goal is the benchmark's,
benchmarks/noisy_neighbour.py); two quiet runs agree too."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from contextlib import ExitStack

import pytest

from tasks.core.config import ModelSpec, PerfSpec, Variant
from tasks.engines.base import Artifact
from tasks.engines.launcher import free_port, serving
from tasks.engines.llama_cpp import LlamaCpp
from tasks.perf.host_noise import HostWindow
from tasks.perf.perf_run import Target, measure_rounds
from tasks.perf.rounds import interleave
from tests.helpers import smollm2

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc (Linux)")


def busy(seconds: float, processes: int) -> list[int]:
    """`processes` busy loops of `seconds`, outside this process's tree (their shell exits: they are re-parented),
    as another user's job would be; their pids, to stop them."""
    loop = f"{sys.executable} -c 'import time\nt = time.time()\nwhile time.time() - t < {seconds}: pass'"
    out = subprocess.run(
        ["sh", "-c", f"for i in $(seq {processes}); do {loop} >/dev/null 2>&1 & echo $!; done"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return [int(p) for p in out.split()]


def stop(pids: list[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def cpu_ticks(pid: int) -> int:
    """utime + stime of `pid` (jiffies), read apart from the code under test."""
    raw = open(f"/proc/{pid}/stat").read()
    rest = raw[raw.rfind(")") + 2 :].split()
    return int(rest[11]) + int(rest[12])


def test_a_neighbour_is_counted_as_other_and_the_engine_as_the_engine():
    """What each busy process used, read from its own /proc/<pid>/stat, lands in the right column: the declared
    engine's in engine_cpu_pct (to a tick or two), the neighbour's inside other_cpu_pct, whatever else the host ran."""
    engine, neighbour = busy(6, 1), busy(6, 1)
    try:
        time.sleep(0.3)
        before = {p: cpu_ticks(p) for p in engine + neighbour}
        with HostWindow(set(engine)) as w:
            time.sleep(2.0)
        after = {p: cpu_ticks(p) for p in engine + neighbour}
    finally:
        stop(engine + neighbour)
    pct = 100.0 / os.sysconf("SC_CLK_TCK") / w.noise.window_s
    engine_pct, neighbour_pct = ((after[p] - before[p]) * pct for p in (engine[0], neighbour[0]))
    assert neighbour_pct > 5 and engine_pct > 5  # both ran (on a host shared with others, maybe little)
    assert w.noise.engine_cpu_pct == pytest.approx(engine_pct, abs=3 * pct), (w.noise, engine_pct)
    # /proc/stat's host total and each process's own counters are kept apart: on a saturated host (two busy loops on
    # two cores) the total read 2.5 % of a core below the processes' sum in CI (other 98.0 against the neighbour's
    # 100.4). A neighbour counted anywhere else would leave `other` near 0.
    assert w.noise.other_cpu_pct >= 0.95 * neighbour_pct - 3 * pct, (w.noise, neighbour_pct)


@pytest.fixture(scope="module")
def llama_servers(tmp_path_factory):
    """Two identical variants, each its own llama.cpp server (as the nightly serves them with perf.interleave): one
    server for both would give the second of a round the first's prompts in its cache."""
    model = ModelSpec.model_validate(smollm2())
    variant = Variant(name="q4_1", model="m", engine="llama.cpp", quantization="q4_1")
    path = model.local_path()
    art = Artifact("q4_1", path, "sha", path.stat().st_size, True, 0.0, {})
    logs = tmp_path_factory.mktemp("srv")
    with ExitStack() as stack:
        urls = []
        for k in range(2):
            port = free_port()
            cmd = LlamaCpp().server_command(art, variant, model, "127.0.0.1", port)
            urls.append(stack.enter_context(serving(cmd, f"http://127.0.0.1:{port}", logs / f"{k}.log", 120)).base_url)
        yield urls, LlamaCpp().served_model_name(variant)


SPEC = dict(
    concurrency=[1],
    num_prompts=3,
    repeats=6,  # windows, interleaved A B, B A, ...: a level shift of the host between them costs both alike
    warmup_requests=1,
    input_len=16,
    output_len=64,  # a window of ~2.5 s on a fast host: the guard judges no window under 1 s (NoiseRule.min_window_s),
    jitter="off",  # and 3 x 16 tokens at 13 ms a token let the neighbour's window pass unjudged in CI (2026-12-05)
    idle_baseline_s=0,
    host_noise_max_pct=25.0,
    host_noise_retries=2,
    host_quiet_wait_s=12.0,
    host_noise_budget_s=15.0,
)


def test_two_identical_variants_agree_whether_or_not_a_neighbour_was_busy_during_one(llama_servers):
    """As the nightly measures them with perf.interleave: two variants' perf runs in interleaved rounds (A B, B A,
    ...), a neighbour busy on every core for ~10 s from the first round of the first; then two quiet ones."""
    urls, model = llama_servers
    spec = PerfSpec(**SPEC)
    warnings: list[str] = []
    turn = iter(urls * 2)

    def run():
        return measure_rounds(spec, Target(next(turn), model), warn=warnings.append)

    def neighbour_from_its_first_round(rounds):
        pids = busy(10, os.cpu_count() or 1)
        try:
            return (yield from rounds)
        finally:
            stop(pids)

    def speeds(first, second) -> tuple[dict, dict]:
        out = interleave({"a": first, "b": second})
        assert not any(isinstance(v, Exception) for v in out.values()), out
        return out["a"][0].summary, out["b"][0].summary

    loud, quiet = speeds(neighbour_from_its_first_round(run()), run())
    quiet1, quiet2 = speeds(run(), run())
    # the disturbed window was seen, said and measured again; the figures rest on the windows kept
    note = loud["host_noise_note"] or ""
    assert "other processes used" in note, loud  # the neighbour is seen, whatever was done about it
    if loud["windows_remeasured"]:
        assert any("window disturbed" in w and "measuring it again" in w for w in warnings), warnings
    else:  # a host that stayed busy past the re-measuring budget (the suite's own load, stop 43): kept, and said
        assert "kept disturbed" in note, loud
    assert loud["windows_kept"] == SPEC["repeats"] and loud["host_noise_max_pct"] == 25.0
    # speed: the median TPOT, the decode speed a busy neighbour made 17x slower. The 10 % is a speed goal,
    # measured by benchmarks/noisy_neighbour.py (docs/timing.md): single windows of this test's size scatter by
    # ~10 % on a shared 2-core host (TPOT 38.6-47.2 ms in one hour; two quiet runs one after the other read 15.04 vs
    # 17.11 ms in stop 42), so the test holds the two variants to 25 %, far inside the 17x it guards against
    for a, b in ((loud, quiet), (quiet1, quiet2)):
        why = f"TPOT p50 {a['tpot_ms_p50']:.2f} vs {b['tpot_ms_p50']:.2f} ms ({a['output_throughput']:.1f} vs "
        why += f"{b['output_throughput']:.1f} tok/s); {a['host_noise_note']} | {b['host_noise_note']}"
        if a["windows_disturbed"] or b["windows_disturbed"]:
            # a host busy beyond the re-measuring budget (other users on a shared host): the figures may differ,
            # but never silently: the kept window says it was disturbed, by how much
            assert "kept disturbed" in (a["host_noise_note"] or "") + (b["host_noise_note"] or ""), why
        else:
            assert a["tpot_ms_p50"] == pytest.approx(b["tpot_ms_p50"], rel=0.25), why
