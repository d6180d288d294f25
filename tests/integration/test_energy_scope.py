"""Energy and MBU per engine: the engine's own GPUs by UUID (a stand-in NVML of 4 GPUs, the engine on 2), the idle
baseline, hosted variants NULL, MBU bytes for fp8 / TensorRT engines / tensor parallelism, and the artifact hash over
every file that serves.

The stand-ins replace only the hardware counters; the real NVML path is scripts/gpu_check.py's on a GPU host.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from tasks.engines.artifacts import decode_bytes, model_bytes, serving_digest
from tasks.engines.base import Artifact, engine_for
from tasks.loader import parse_config
from tasks.perf.energy import EnergyWindow, RaplMeter
from tasks.perf.energy_scope import HOSTED_NOTE, EnergyScope, idle_baseline, idle_columns, scope_for
from tasks.perf.roofline import Bandwidth, engine_bandwidth, mbu_pct, roofline_inputs


class FakePci:
    def __init__(self, bus: str):
        self.busIdLegacy = bus.encode()


class FakeNvml:
    """pynvml over 4 GPUs: NVML index order is not PCI bus order, so a mapping by position would pick wrong ones."""

    UUIDS = ["GPU-aaaa1111", "GPU-bbbb2222", "GPU-cccc3333", "GPU-dddd4444"]
    BUS = ["0000:41:00.0", "0000:01:00.0", "0000:C1:00.0", "0000:81:00.0"]  # PCI order: 1, 0, 3, 2

    def __init__(self):
        self.energy_mj = [1_000_000, 2_000_000, 3_000_000, 4_000_000]
        self.power_mw = [100_000, 110_000, 120_000, 130_000]

    def nvmlInit(self):
        pass

    def nvmlDeviceGetCount(self):
        return 4

    def nvmlDeviceGetHandleByIndex(self, i):
        return i

    def nvmlDeviceGetUUID(self, h):
        return self.UUIDS[h]

    def nvmlDeviceGetPciInfo(self, h):
        return FakePci(self.BUS[h])

    def nvmlDeviceGetTotalEnergyConsumption(self, h):
        return self.energy_mj[h]

    def nvmlDeviceGetPowerUsage(self, h):
        return self.power_mw[h]


class Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def run_window(nvml: FakeNvml, scope: EnergyScope, seconds: float = 2.0, joules_per_gpu: float = 100.0):
    """A window over which every GPU's counter advances by `joules_per_gpu` x its index + 1."""
    clock = Clock()
    with EnergyWindow(opener=scope.open_meter, clock=clock) as w:
        clock.t += seconds
        nvml.energy_mj = [e + int(joules_per_gpu * 1000 * (i + 1)) for i, e in enumerate(nvml.energy_mj)]
    return w


@pytest.mark.parametrize(
    "cuda_visible, tp, nvml_indices",
    [
        ("GPU-cccc,GPU-aaaa1111", 2, ["gpu2", "gpu0"]),  # UUID prefixes, as CUDA accepts them
        ("2,3", 2, ["gpu3", "gpu2"]),  # CUDA ordinals count in PCI bus order: 01, 41, 81, C1
        ("1,0,3", 2, ["gpu0", "gpu1"]),  # the first `tp` visible devices are the engine's ranks
        (None, 2, ["gpu1", "gpu0"]),  # unset: every device, PCI order
    ],
)
def test_only_the_engines_gpus_are_metered(cuda_visible, tp, nvml_indices) -> None:
    nvml = FakeNvml()
    scope = EnergyScope(gpu_count=tp, cuda_visible=cuda_visible, nvml=nvml)
    w = run_window(nvml, scope)
    assert list(w.reading.by_device_j) == nvml_indices
    expected = sum(100.0 * (int(d[3:]) + 1) for d in nvml_indices)
    assert w.reading.energy_j == pytest.approx(expected)  # the other two GPUs' 300-700 J are not in it
    assert scope.label.startswith(f"nvml {','.join(nvml_indices)} ({tp} GPU(s) of the engine")


@pytest.mark.parametrize(
    "cuda_visible, reason",
    [
        ("3,7,0", "the engine uses 2 GPU(s) but CUDA_VISIBLE_DEVICES='3,7,0' makes 1 visible"),  # CUDA stops at 7
        ("GPU-ffff", "makes 0 visible"),
        ("MIG-1234", "CUDA_VISIBLE_DEVICES entry MIG-1234 is a MIG instance: NVML has no energy counter"),
    ],
)
def test_engine_gpus_that_cannot_be_found_give_null_with_the_reason(cuda_visible, reason) -> None:
    w = run_window(FakeNvml(), EnergyScope(gpu_count=2, cuda_visible=cuda_visible, nvml=FakeNvml()))
    assert w.reading.energy_j is None and reason in w.reading.note


def rapl_tree(root: Path, energy_uj: int) -> Path:
    z = root / "intel-rapl:0"
    z.mkdir(parents=True)
    (z / "name").write_text("package-0\n")
    (z / "max_energy_range_uj").write_text("1000000000")
    (z / "energy_uj").write_text(str(energy_uj))
    return z


def test_a_cpu_engine_reads_rapl_never_the_gpus(tmp_path: Path) -> None:
    zone = rapl_tree(tmp_path, 1_000_000)
    scope = EnergyScope(gpu_count=0, nvml=FakeNvml(), rapl_root=str(tmp_path))
    meter, note = scope.open_meter()
    assert isinstance(meter, RaplMeter) and note is None and scope.label == "rapl package-0 (CPU engine)"
    (zone / "energy_uj").write_text("0")
    none, why = EnergyScope(gpu_count=0, nvml=FakeNvml(), rapl_root=str(tmp_path / "none")).open_meter()
    assert none is None and why.startswith("no energy meter for a CPU engine: rapl:") and "not the engine's" in why


def test_idle_baseline_and_energy_above_idle() -> None:
    nvml = FakeNvml()
    scope = EnergyScope(gpu_count=2, cuda_visible="0,1", nvml=nvml)  # PCI order: gpu1, gpu0
    clock = Clock()

    def idle_sleep(s: float) -> None:  # 5 s idle: gpu0 draws 60 W, gpu1 40 W
        clock.t += s
        nvml.energy_mj[0] += int(60 * s * 1000)
        nvml.energy_mj[1] += int(40 * s * 1000)

    idle = idle_baseline(scope, 5.0, sleep=idle_sleep, clock=clock)
    assert idle.power_w == pytest.approx(100.0) and idle.window_s == pytest.approx(5.0) and idle.note is None
    assert idle.by_device_w == {"gpu1": pytest.approx(40.0), "gpu0": pytest.approx(60.0)}
    # two measured windows of 3 s each: 900 J in all -> 300 J above 100 W x 6 s; 150 tokens -> 6 and 2 J/token
    cols = idle_columns({"energy_j": 900.0, "energy_note": None}, [3.0, 3.0], scope, idle, 150)
    assert cols["energy_above_idle_j"] == pytest.approx(300.0)
    assert cols["energy_j_per_token_above_idle"] == pytest.approx(2.0) and cols["idle_note"] is None
    assert cols["idle_power_w"] == pytest.approx(100.0) and cols["energy_devices"].startswith("nvml gpu1,gpu0")
    # below idle within noise: NULL with the reason
    low = idle_columns({"energy_j": 500.0}, [3.0, 3.0], scope, idle, 150)
    assert low["energy_j_per_token_above_idle"] is None and "not positive" in low["idle_note"]
    assert idle_baseline(scope, 0).note == "idle baseline off (perf.idle_baseline_s: 0)"


def hosted_config(url: str) -> dict:
    return {
        "models": {"m": {"hub": "org/model"}},
        "variants": [
            {
                "name": "hosted",
                "model": "m",
                "engine": "openai-compatible",
                "quantization": "unknown",
                "reference": True,
                "engine_args": {"base_url": url, "model": "ok"},
            }
        ],
        "perf": {
            "concurrency": [1],
            "num_prompts": 2,
            "warmup_requests": 0,
            "input_len": 8,
            "output_len": 4,
            "idle_baseline_s": 0.2,
        },
    }


def test_hosted_variants_never_get_this_hosts_energy(tmp_path: Path, monkeypatch) -> None:
    """Even where this host has a meter (a stand-in NVML here), a hosted endpoint's energy is NULL with the reason."""
    import tasks.perf.energy as energy
    from tasks.perf.perf_run import measure, variant_target
    from tests.stubs.stub_server import start_stub

    monkeypatch.setattr(energy, "open_meter", lambda: (energy.NvmlMeter(FakeNvml()), None))
    srv, url = start_stub()
    try:
        cfg = parse_config(hosted_config(url))
        v = cfg.variant("hosted")
        art = engine_for(v.engine).build(v, cfg.models["m"], tmp_path)
        (sc,) = measure(cfg.perf, variant_target(v, art, url, cfg.models["m"]))
    finally:
        srv.shutdown()
    s = sc.summary
    assert s["num_ok"] == 2 and s["energy_j"] is None and s["energy_note"] == HOSTED_NOTE
    assert s["energy_devices"] is None and s["idle_note"] == HOSTED_NOTE
    assert s["mbu_pct"] is None and s["model_bytes"] is None and s["mem_bandwidth_gb_s"] is None
    assert scope_for(engine_for("openai-compatible"), v, art).off_reason == HOSTED_NOTE


def test_search_steps_are_metered_as_the_sweep(monkeypatch) -> None:
    """The decision's sustainable-load search adds steps after the sweep; a hosted endpoint's stay unmetered
    there too, even where this host has a meter (a stand-in NVML)."""
    import tasks.perf.energy as energy
    from instruments.slo_server import start_paced_stub
    from tasks.core.config import RunConfig
    from tasks.decision.load_search import search_load
    from tasks.perf.perf_run import Target, measure

    monkeypatch.setattr(energy, "open_meter", lambda: (energy.NvmlMeter(FakeNvml()), None))
    srv, url = start_paced_stub(service_ms=100)
    try:
        cfg = RunConfig.model_validate(
            {
                "models": {"m": {"path": __file__}},
                "variants": [{"name": "a", "model": "m", "quantization": "q4_1", "reference": True}],
                "perf": {
                    "rates": [5.0, 40.0],
                    "burstiness": 100.0,
                    "num_prompts": 12,
                    "warmup_requests": 0,
                    "input_len": 8,
                    "output_len": 4,
                    "idle_baseline_s": 0,
                },
                "decision": {
                    "slo": {"ttft_ms": 500.0},
                    "percentile": 50,
                    "min_requests": 12,
                    "search": {"budget_s": 30, "max_steps": 1, "tolerance_pct": 5},
                },
            }
        )
        scope = EnergyScope(off_reason=HOSTED_NOTE)
        scenarios = measure(
            cfg.perf,
            Target(url, "paced", None, None, on_host=False, scope=scope),
            search=lambda *a, **kw: search_load(cfg, *a, **kw),
        )
    finally:
        srv.shutdown()
    assert [sc.step.label for sc in scenarios] == ["r5", "r40", "search1"]
    assert all(sc.summary["energy_j"] is None and sc.summary["energy_note"] == HOSTED_NOTE for sc in scenarios)
    assert all(run.energy.source is None for sc in scenarios for run in sc.runs)


# ---------------------------------------------------------------- MBU bytes and artifact hashes


def write_safetensors(path: Path, tensors: dict[str, tuple[str, list[int]]]) -> None:
    """A .safetensors file with these (dtype, shape) tensors, zero-filled."""
    size = {"BF16": 2, "F16": 2, "F32": 4}
    header, offset = {}, 0
    for name, (dtype, shape) in tensors.items():
        n = size[dtype]
        for d in shape:
            n *= d
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + n]}
        offset += n
    blob = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(blob)) + blob + b"\0" * offset)


LLAMA_LIKE = {
    "model.embed_tokens.weight": ("BF16", [1000, 64]),
    "model.layers.0.self_attn.q_proj.weight": ("BF16", [64, 64]),
    "model.layers.0.mlp.up_proj.weight": ("BF16", [256, 64]),
    "model.layers.0.input_layernorm.weight": ("BF16", [64]),
    "model.norm.weight": ("BF16", [64]),
    "lm_head.weight": ("BF16", [1000, 64]),
}


def test_fp8_and_bitsandbytes_bytes_come_from_the_quantized_weights(tmp_path: Path) -> None:
    write_safetensors(tmp_path / "model.safetensors", LLAMA_LIKE)
    linear = 64 * 64 + 256 * 64
    kept = (1000 * 64 * 2) * 2 + 64 * 2 * 2  # embeddings, lm_head, norms stay bf16
    got, how = decode_bytes(tmp_path, "fp8")
    assert got == kept + linear and how.startswith("fp8 quantized when loading")
    assert decode_bytes(tmp_path, "bitsandbytes")[0] == kept + round(linear * (0.5 + 4 / 64))
    # the checkpoint's file: 2 bytes per weight, and its header
    assert got < kept + linear * 2 < serving_digest(tmp_path)[1] == (tmp_path / "model.safetensors").stat().st_size


def test_vllm_fp8_variant_reports_the_bytes_decoding_reads(tmp_path: Path, monkeypatch) -> None:
    import tasks.engines.vllm as mod
    import tasks.perf.roofline as roofline

    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    write_safetensors(ckpt / "model.safetensors", LLAMA_LIKE)
    (ckpt / "config.json").write_text("{}")
    monkeypatch.setattr(mod, "gpu_visible", lambda: True)
    monkeypatch.setattr(mod, "vllm_python", lambda: "/py")
    monkeypatch.setattr(mod, "vllm_version", lambda py: "0.32.0")
    monkeypatch.setattr(mod.Vllm, "_fetch", lambda self, source, cache_dir, python: ckpt)
    monkeypatch.setattr(roofline, "host_bandwidth", lambda: Bandwidth(4800.0, "gpu0: torch device copy"))
    cfg = parse_config(
        {
            "models": {"m": {"hub": "org/model"}},
            "variants": [
                {
                    "name": "fp8",
                    "model": "m",
                    "engine": "vllm",
                    "quantization": "fp8",
                    "reference": True,
                    "engine_args": {"tensor_parallel_size": 2},
                }
            ],
        }
    )
    v = cfg.variant("fp8")
    eng = engine_for("vllm")
    art = eng.build(v, cfg.models["m"], tmp_path / "cache")
    nbytes, how, bw = roofline_inputs(eng, v, art)
    assert nbytes == decode_bytes(ckpt, "fp8")[0] < art.bytes
    assert how.startswith("fp8 quantized when loading")
    assert bw.gb_s == 9600.0 and "x 2 GPUs (tensor parallel" in bw.method
    assert eng.gpu_count(v, art) == 2


def test_tensor_parallel_bandwidth_and_mbu() -> None:
    per_gpu = Bandwidth(4000.0, "gpu0: torch device copy of 1024 MiB")
    tp2 = engine_bandwidth(per_gpu, 2)
    # 16 GB at 100 tok/s = 1.6 TB/s: 40 % of one GPU, 20 % of two
    assert mbu_pct(10.0, 16_000_000_000, per_gpu.gb_s) == pytest.approx(40.0)
    assert mbu_pct(10.0, 16_000_000_000, tp2.gb_s) == pytest.approx(20.0)
    assert engine_bandwidth(per_gpu, 1) is per_gpu and engine_bandwidth(Bandwidth(20.0, "cpu: copy"), 2).gb_s == 20.0


def trt_engine_dir(root: Path) -> Path:
    d = root / "engine"
    d.mkdir(parents=True)
    (d / "rank0.engine").write_bytes(b"r0" * 1000)
    (d / "rank1.engine").write_bytes(b"r1" * 1000)
    (d / "config.json").write_text('{"pretrained_config": {"mapping": {"tp_size": 2}}}')
    (d / "timing.cache").write_bytes(b"not served")
    return d


def test_tensorrt_engine_files_are_counted_and_hashed(tmp_path: Path) -> None:
    d = trt_engine_dir(tmp_path)
    sha, nbytes = serving_digest(d)
    assert nbytes == 4000
    art = Artifact("trt", d, sha, nbytes, False, 0.0, {})
    assert model_bytes(art) == (4000, "TensorRT engine files (rank*.engine)")
    (d / "timing.cache").write_bytes(b"changed, still not served")
    assert serving_digest(d)[0] == sha
    (d / "rank1.engine").write_bytes(b"R1" * 1000)  # a rebuilt rank: another artifact
    assert serving_digest(d)[0] != sha
    (d / "config.json").write_text("{}")
    assert serving_digest(d)[0] not in (sha,)


def test_checkpoint_hash_covers_every_serving_file_but_not_original(tmp_path: Path) -> None:
    d = tmp_path / "hf"
    (d / "original").mkdir(parents=True)
    write_safetensors(d / "model.safetensors", {"w": ("BF16", [4, 4])})
    (d / "config.json").write_text("{}")
    (d / "tokenizer.model").write_bytes(b"spm")
    (d / "chat_template.jinja").write_text("{{ messages }}")
    (d / "original" / "consolidated.00.pth").write_bytes(b"x" * 100)
    sha, nbytes = serving_digest(d)
    assert nbytes == (d / "model.safetensors").stat().st_size  # original/ is neither hashed nor counted
    (d / "original" / "consolidated.00.pth").write_bytes(b"y" * 100)
    assert serving_digest(d)[0] == sha
    for name in ("tokenizer.model", "chat_template.jinja"):  # a changed tokenizer or template changes what serves
        before = serving_digest(d)[0]
        (d / name).write_text("changed")
        assert serving_digest(d)[0] != before, name


@pytest.mark.parametrize(
    "change, expectation",
    [
        (
            {"energy_j_per_token_above_idle": 1e6},  # above idle cannot exceed the whole device's J/token
            "expect_column_pair_values_a_to_be_greater_than_b(energy_j_per_token, energy_j_per_token_above_idle)",
        ),
        (
            {"energy_devices": "nvml gpu0", "idle_note": None},  # metered, no figure above idle, and no reason given
            "expect_column_values_to_not_be_null(idle_note",
        ),
        (
            {"idle_power_w": -3.0, "idle_window_s": 5.0, "idle_note": "x"},
            "expect_column_values_to_be_between(idle_power_w)",
        ),
        (
            {"model_bytes": 1000, "model_bytes_method": None},
            "expect_column_values_to_not_be_null(model_bytes_method where model_bytes is not null)",
        ),
    ],
)
def test_gx_gates_the_engine_energy_columns(tmp_path: Path, change: dict, expectation: str) -> None:
    from tests.helpers.gate_tables import expected_rows, row, valid_tables, write_results
    from warehouse.gx_gate import validate_results

    tables = valid_tables()
    row(tables, "perf_summary", variant="f16", scenario="c1").update(change)
    report = validate_results(write_results(tmp_path, tables), expected_rows(tables))
    assert any(f.startswith(f"perf_summary: {expectation}") for f in report.failures()), report.failures()
