"""Issue 36, item 1 on a GPU host: other processes on the engine's GPUs during a perf window (NVML).

No GPU is on the CI machines, so NVML is a stand-in here: it reports the processes and utilisation samples a driver
would (pynvml's calls, their shapes and its NOT_FOUND error when no process ran in the period).
"""

from __future__ import annotations

import os
from types import SimpleNamespace

from tasks.perf.host_noise import GpuWatch, HostNoise, HostWindow, NoiseRule

ENGINE, OTHER = 4242, 5151


class NVMLError_NotFound(Exception):  # pynvml's name
    pass


class NVMLError_NotSupported(Exception):  # pynvml's name
    pass


class StandInNvml:
    """Two GPUs; the engine on GPU 0, `others` {pid: [smUtil samples]} on GPU 0 too (GPU 1 idle)."""

    def __init__(self, others: dict[int, list[float]], engine: int = ENGINE, util_error: type | None = None):
        self.others, self.engine, self.util_error = others, engine, util_error

    def nvmlDeviceGetHandleByIndex(self, i):
        return i

    def nvmlDeviceGetComputeRunningProcesses(self, h):
        pids = [self.engine, *self.others] if h == 0 else []
        return [SimpleNamespace(pid=p, usedGpuMemory=1 << 30) for p in pids]

    def nvmlDeviceGetGraphicsRunningProcesses(self, h):
        raise NVMLError_NotSupported()

    def nvmlDeviceGetProcessUtilization(self, h, since_us):
        if self.util_error:
            raise self.util_error()
        samples = [
            SimpleNamespace(pid=p, smUtil=u, memUtil=0, timeStamp=since_us + 1000 * (k + 1))
            for p, us in self.others.items()
            for k, u in enumerate(us)
        ] + [SimpleNamespace(pid=self.engine, smUtil=90, memUtil=50, timeStamp=since_us + 10)]
        samples.append(SimpleNamespace(pid=OTHER, smUtil=100, memUtil=0, timeStamp=since_us - 5_000_000))  # before
        if h != 0 or not samples:
            raise NVMLError_NotFound()
        return samples


def watched(nvml, engine=frozenset({ENGINE})):
    w = GpuWatch(nvml, [0, 1])
    w.start()
    return w.finish(set(engine), {os.getpid()})


def test_another_process_on_the_engines_gpu_is_counted_with_its_sm_use():
    assert watched(StandInNvml({OTHER: [40.0, 60.0]})) == (1, 50.0, None)  # its samples in the window: mean 50 %
    assert watched(StandInNvml({OTHER: [40.0], 6161: [30.0]})) == (2, 70.0, None)  # two: their sum on the GPU
    assert watched(StandInNvml({})) == (0, 0.0, None)  # the engine alone
    # a process holding a context that did not run in the window: no sample (NVML's NOT_FOUND on an idle GPU)
    assert watched(StandInNvml({OTHER: []})) == (1, 0.0, None)


def test_what_cannot_be_told_apart_is_none_with_a_reason():
    procs, sm, why = watched(StandInNvml({OTHER: [50.0]}), engine={1})  # NVML's PIDs match none of the engine's
    assert (procs, sm) == (None, None) and "another PID namespace" in why
    procs, sm, why = watched(StandInNvml({OTHER: [50.0]}, util_error=NVMLError_NotSupported))
    assert (procs, sm) == (1, None) and why == "other GPU processes' utilisation not read: NVMLError_NotSupported"


def test_the_rule_judges_a_busy_gpu_neighbour_and_the_window_records_it():
    rule = NoiseRule(max_pct=25.0, retries=1)
    busy = HostNoise(5.0, 3.0, 0.0, 0.5, gpu_other_procs=1, gpu_other_sm_pct=50.0)
    assert rule.judge(busy) == "other processes used 50 % of the engine's GPU's SMs (> 25 %)"
    assert rule.judge(HostNoise(5.0, 3.0, 0.0, 0.5, gpu_other_procs=1, gpu_other_sm_pct=5.0)) is None
    assert "1 other process(es) on the engine's GPUs, SM 50 %" in busy.describe()
    with HostWindow({ENGINE}, gpu=GpuWatch(StandInNvml({OTHER: [80.0]}), [0, 1])) as w:
        pass
    assert (w.noise.gpu_other_procs, w.noise.gpu_other_sm_pct) == (1, 80.0)
    with HostWindow({ENGINE}, off_reason="endpoint is not on this host", gpu=GpuWatch(StandInNvml({}), [0])) as w:
        pass
    assert w.noise.gpu_other_procs is None and w.noise.note == "endpoint is not on this host"
