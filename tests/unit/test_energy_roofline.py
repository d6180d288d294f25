"""Energy arithmetic (NVML over a stand-in counter, RAPL over a fake sysfs tree) and the roofline's MBU.

The stand-ins only replace the hardware counters; the real NVML path runs where a GPU is.
"""

from __future__ import annotations

import pytest

from tasks.perf.energy import EnergyWindow, NvmlMeter, RaplMeter, per_token
from tasks.perf.roofline import cpu_copy_bandwidth, mbu_pct, nvml_spec_bandwidth


class FakeNvml:
    """pynvml's calls over two GPUs whose energy counters (mJ) and power (mW) the test sets."""

    NVML_CLOCK_MEM = 2

    def __init__(self):
        self.energy_mj = [1_000_000, 5_000_000]
        self.power_mw = [300_000, 350_000]
        self.inits = 0

    def nvmlInit(self):
        self.inits += 1

    def nvmlDeviceGetCount(self):
        return 2

    def nvmlDeviceGetHandleByIndex(self, i):
        return i

    def nvmlDeviceGetTotalEnergyConsumption(self, h):
        return self.energy_mj[h]

    def nvmlDeviceGetPowerUsage(self, h):
        return self.power_mw[h]

    def nvmlDeviceGetMemoryBusWidth(self, h):
        return 6144  # bits (H200: 6 HBM3e stacks x 1024)

    def nvmlDeviceGetMaxClockInfo(self, h, kind):
        assert kind == self.NVML_CLOCK_MEM
        return 2619  # MHz


class Clock:
    def __init__(self):
        self.t = 100.0

    def __call__(self):
        return self.t


def test_nvml_window_per_gpu_energy_power_and_samples():
    nvml, clock = FakeNvml(), Clock()
    meter = NvmlMeter(nvml)
    with EnergyWindow(meter=meter, clock=clock) as w:
        clock.t += 2.0
        nvml.energy_mj = [1_600_000, 5_700_000]
        w.sample()
        clock.t += 2.0
        nvml.energy_mj = [2_200_000, 6_400_000]
    r = w.reading
    assert r.source == "nvml" and r.note is None
    assert r.by_device_j == pytest.approx({"gpu0": 1200.0, "gpu1": 1400.0})
    assert r.energy_j == pytest.approx(2600.0) and r.window_s == pytest.approx(4.0)
    assert r.mean_power_w == pytest.approx(650.0)
    assert [(s.device, s.t_s, s.power_w, s.energy_j) for s in w.samples] == [
        ("gpu0", 2.0, 300.0, pytest.approx(600.0)),
        ("gpu1", 2.0, 350.0, pytest.approx(700.0)),
    ]
    assert per_token(r.energy_j, 1300) == (pytest.approx(2.0), pytest.approx(0.5))


def rapl_tree(root, energy_uj, max_uj=1_000_000):
    z = root / "intel-rapl:0"
    (root / "intel-rapl:0:0").mkdir(parents=True)  # a sub-zone (core): must not be counted twice
    z.mkdir(exist_ok=True)
    (z / "name").write_text("package-0\n")
    (z / "max_energy_range_uj").write_text(str(max_uj))
    (z / "energy_uj").write_text(str(energy_uj))
    return z


def test_rapl_counts_across_a_wrap_and_samples_power_from_differences(tmp_path):
    zone = rapl_tree(tmp_path, 900_000)
    clock = Clock()
    with EnergyWindow(meter=RaplMeter(str(tmp_path)), clock=clock) as w:
        clock.t += 0.5
        (zone / "energy_uj").write_text("950000")
        w.sample()
        clock.t += 0.5
        (zone / "energy_uj").write_text("100000")  # wrapped at 1 J: 50 000 + 100 000 uJ more
    assert w.reading.energy_j == pytest.approx(0.2) and w.reading.by_device_j == {"package-0": pytest.approx(0.2)}
    (s,) = w.samples
    assert (s.device, s.power_w, s.energy_j) == ("package-0", pytest.approx(0.1), pytest.approx(0.05))


def test_no_meter_gives_null_with_the_reason():
    with EnergyWindow(off_reason="endpoint is not on this host; energy not measured") as w:
        pass
    assert w.reading.energy_j is None and "not on this host" in w.reading.note
    assert per_token(None, 10) == (None, None) and per_token(5.0, 0) == (None, None)


@pytest.mark.parametrize(
    "tpot_ms,model_bytes,gb_s,expect",
    [
        (10.0, 1_000_000_000, 200.0, 50.0),  # 100 tok/s x 1 GB = 100 GB/s of 200
        (20.0, 98_362_432, 25.0, 19.67),
        (None, 1, 1.0, None),
        (10.0, None, 1.0, None),
        (10.0, 1, None, None),
    ],
)
def test_mbu(tpot_ms, model_bytes, gb_s, expect):
    got = mbu_pct(tpot_ms, model_bytes, gb_s)
    assert got == (pytest.approx(expect, rel=1e-3) if expect is not None else None)


def test_nvml_spec_bandwidth_is_labelled_a_specification():
    bw = nvml_spec_bandwidth(FakeNvml())
    assert bw.gb_s == pytest.approx(6144 / 8 * 2619e6 * 2 / 1e9)  # ~4023 GB/s
    assert "specification" in bw.method and "not measured" in bw.method


def test_cpu_copy_bandwidth_reports_its_method():
    bw = cpu_copy_bandwidth(size_mib=8, threads=2, repeats=2)
    assert bw.gb_s > 0 and bw.method.startswith("cpu: 2-thread copy of 8 MiB")
