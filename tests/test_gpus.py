"""TensorFlow's GPU indices and totals as validation sees them: matched to NVML's under CUDA_VISIBLE_DEVICES,
and CUDA's total rather than NVML's (the H100: 81,079 MiB against 81,559, tests/fixtures/h100/gpu.json)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tf_device_panel.core.config import DeviceConfig, validate
from tf_device_panel.core.devices.gpus import cuda_visible_nvml_indices, tf_gpu_inventory
from tf_device_panel.core.devices.nvml import GpuSnapshot

H100 = json.loads((Path(__file__).parent / "fixtures" / "h100" / "gpu.json").read_text())


def h100(index: int, bus: str, uuid: str, reserved: int | None) -> GpuSnapshot:
    nvml = H100["nvml"]
    return GpuSnapshot(index, nvml["name"], uuid, bus, nvml["memory_total_mib"], 0, nvml["compute_capability"],
                       memory_reserved_mib=reserved)


RESERVED = H100["nvml"]["memory_total_mib"] - H100["cuda_total_mib"]  # 480 MiB the driver keeps
TWO = [h100(0, "00000000:00:06.0", H100["nvml"]["uuid"], RESERVED),
       h100(1, "00000000:00:07.0", "GPU-aa000000-0000-0000-0000-000000000001", RESERVED)]


@pytest.mark.parametrize(("visible", "expected"), [
    (None, [0, 1]), ("1", [1]), ("1,0", [1, 0]), ("GPU-83157295", [0]), ("GPU-aa0,0", [1, 0]),
    ("0,7,1", [0]),      # CUDA ignores an unknown entry and everything after it
    ("0,0", [0]), ("", []), ("-1", []), ("GPU-", []),  # "GPU-" matches both: ambiguous
    ("gpu-AA0,GPU-83157295", [1, 0]),  # CUDA compares UUIDs whatever their case
    ("MIG-3f2e", [None]), ("1,MIG-GPU-8315/1/0", [1, None]),  # MIG instances: CUDA uses them; NVML cannot say which
])
def test_cuda_visible_devices_maps_tensorflows_indices_to_nvmls(visible: str | None, expected: list[int]) -> None:
    assert cuda_visible_nvml_indices(visible, TWO) == expected
    assert cuda_visible_nvml_indices(visible, [g.to_json() for g in TWO]) == expected


def test_a_mig_instance_keeps_its_index_and_skips_the_total_check_with_a_warning(caplog) -> None:
    visible = "mig-5c6b3f1e-0000-0000-0000-000000000000,0"
    gpus = tf_gpu_inventory(TWO, visible)
    assert [(g.index, g.nvml_index, g.total_mib) for g in gpus] == [(0, None, None), (1, 0, 81079)]
    assert gpus[0].name == "MIG instance mig-5c6b3f1e-0000-0000-0000-000000000000"
    config = DeviceConfig(visible_gpus=(0, 1), virtual_gpus={0: (5000, 5000)})
    assert validate(config, gpus) == []  # the MIG instance's size is unknown here: not refused
    assert "MIG instance(s) mig-5c6b3f1e" in caplog.text and "not checked here" in caplog.text
    (problem,) = validate(DeviceConfig(virtual_gpus={1: (90000,)}), gpus)  # the plain GPU is still checked
    assert "has 81079 MiB" in str(problem)


def test_a_profile_for_gpu_0_under_cuda_visible_devices_1_is_checked_against_nvmls_gpu_1() -> None:
    gpus = tf_gpu_inventory(TWO, "1")
    assert [(g.index, g.nvml_index, g.total_mib, g.total_source) for g in gpus] == [(0, 1, 81079, "CUDA")]
    assert validate(DeviceConfig(visible_gpus=(0,)), gpus, "1") == []
    (problem,) = validate(DeviceConfig(visible_gpus=(1,)), gpus, "1")  # NVML has a GPU 1, TensorFlow will not
    assert str(problem) == ("visible_gpus: GPU 1 does not exist among the GPUs CUDA_VISIBLE_DEVICES='1' leaves "
                            "TensorFlow (it numbers them from 0) — available GPU indices: 0 (TensorFlow's GPU 0 = "
                            "nvidia-smi's GPU 1); use one of those, or change CUDA_VISIBLE_DEVICES (unset it to see "
                            "every GPU)")
    (unset,) = validate(DeviceConfig(visible_gpus=(2,)), tf_gpu_inventory(TWO, None), None)
    assert str(unset) == "visible_gpus: GPU 2 does not exist on this machine — available GPU indices: 0, 1"


def test_the_missing_gpu_message_reads_cuda_visible_devices_from_the_environment(monkeypatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")  # what `tf-device-panel validate` and the runs inherit
    (problem,) = validate(DeviceConfig(virtual_gpus={1: (1024,)}), tf_gpu_inventory(TWO, "1"))
    assert "CUDA_VISIBLE_DEVICES='1'" in problem.message and "nvidia-smi's GPU 1" in problem.hint


def test_a_split_between_cudas_total_and_nvmls_is_refused_when_checked() -> None:
    config = DeviceConfig(virtual_gpus={0: (40000, 41300)})  # 81,300 MiB: under NVML's 81,559, over CUDA's 81,079
    (problem,) = validate(config, tf_gpu_inventory(TWO, "1"))
    assert str(problem) == ("virtual_gpus['0']: limits sum to 81300 MiB but GPU 0 (NVIDIA H100 80GB HBM3, NVML's "
                            "GPU 1) has 81079 MiB as CUDA counts it (what TensorFlow can use) — lower the limits "
                            "or split into fewer logical GPUs")
    assert validate(DeviceConfig(virtual_gpus={0: (40000, 41079)}), tf_gpu_inventory(TWO, None)) == []


def test_without_nvmls_reserved_figure_the_total_is_nvmls_and_says_so() -> None:
    old_driver = [h100(0, "00000000:00:06.0", H100["nvml"]["uuid"], None)]  # memory v1: no reserved figure
    (gpu,) = tf_gpu_inventory(old_driver, None)
    assert (gpu.total_mib, gpu.total_source) == (81559, "NVML")
    (problem,) = validate(DeviceConfig(virtual_gpus={0: (81600,)}), [gpu])
    assert "81559 MiB by NVML's count (CUDA's is a few hundred MiB less)" in str(problem)


def test_nvml_memory_v2_gives_the_memory_the_driver_keeps(monkeypatch: pytest.MonkeyPatch) -> None:
    from types import SimpleNamespace

    import pynvml
    from fake_nvml import MIB, FakeGpus
    from tf_device_panel.core.devices.nvml import Nvml

    FakeGpus(count=1).install(monkeypatch)
    monkeypatch.setattr(pynvml, "nvmlDeviceGetMemoryInfo", lambda handle, version=None: SimpleNamespace(
        total=81559 * MIB, reserved=480 * MIB, used=0, free=81079 * MIB))  # the H100, memory v2
    (snapshot,) = Nvml().gpus()
    assert (snapshot.memory_total_mib, snapshot.memory_reserved_mib, snapshot.cuda_total_mib) == (81559, 480, 81079)


@pytest.mark.gpu
def test_on_a_real_gpu_nvmls_total_less_its_reserve_is_cudas_total(monkeypatch: pytest.MonkeyPatch) -> None:
    from tf_device_panel.core.devices.gpu_facts import gpu_pci_bus_id, gpu_total_mib
    from tf_device_panel.core.devices.gpus import nvml_index_for
    from tf_device_panel.core.devices.nvml import Nvml

    nvml = Nvml()
    if not nvml.init() or not nvml.gpus():
        pytest.skip(f"needs a real NVIDIA GPU and driver ({nvml.message or 'no GPU'})")
    # CUDA numbers GPUs fastest first unless told otherwise; with every GPU visible in PCI order, CUDA's
    # index is NVML's — and each pair is also matched by PCI bus id, in case CUDA was initialised earlier.
    monkeypatch.setenv("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    for cuda_index in range(len(nvml.gpus())):
        found = nvml_index_for(gpu_pci_bus_id(cuda_index), nvml.gpus())
        gpu = next(g for g in nvml.gpus() if g.index == found)
        cuda = gpu_total_mib(cuda_index)
        units, why = nvml.compute_units(gpu.index)
        print(f"GPU {gpu.index} {gpu.name}: NVML {gpu.memory_total_mib} MiB, reserve {gpu.memory_reserved_mib}, "
              f"CUDA {cuda}; {units or why}")
        assert gpu.cuda_total_mib is not None and abs(gpu.cuda_total_mib - cuda) <= 64
        assert units is not None and units.sm_count > 0 and units.max_sm_clock_mhz > 0
