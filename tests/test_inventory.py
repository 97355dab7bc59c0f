"""The device inventory: TensorFlow's GPUs matched to NVML's once per ready run, by PCI bus id, from the facts the
H100 recorded (tests/fixtures/h100/: gpu.json's NVML record and CUDA total, devices-six-profiles.txt's logical
devices per profile). No Qt, no TensorFlow.

TensorFlow's "Created device" lines are written in TensorFlow's format (core.devices.gpus._CREATED) with the
recorded GPU's facts: TF writes the bus id with a 4-digit domain (0000:00:06.0) where NVML writes 8."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tf_device_panel.core.devices.gpus import created_gpus
from tf_device_panel.core.devices.inventory import DeviceInventory
from tf_device_panel.core.devices.nvml import GpuSnapshot
from tf_device_panel.core.protocol import events

H100 = json.loads((Path(__file__).parent / "fixtures" / "h100" / "gpu.json").read_text())
NVML = H100["nvml"]
RESERVED = NVML["memory_total_mib"] - H100["cuda_total_mib"]  # 480 MiB the driver keeps
SIX_PROFILES = (Path(__file__).parent / "fixtures" / "h100" / "devices-six-profiles.txt").read_text()


def h100(index: int = 0, bus: str = NVML["pci_bus_id"]) -> GpuSnapshot:
    return GpuSnapshot(index, NVML["name"], NVML["uuid"], bus, NVML["memory_total_mib"], 0,
                       NVML["compute_capability"], memory_reserved_mib=RESERVED)


def tf_bus(nvml_bus: str) -> str:
    """TensorFlow's spelling of a bus id: a 4-digit domain."""
    domain, rest = nvml_bus.split(":", 1)
    return f"{int(domain, 16):04x}:{rest}"


def created_line(logical: int, limit_mib: int, physical: int, bus: str) -> str:
    return (f"I0000 00:00:1.0  1 gpu_device.cc:2020] Created device /job:localhost/replica:0/task:0/device:GPU:"
            f"{logical} with {limit_mib} MB memory:  -> device: {physical}, name: {NVML['name']}, pci bus id: "
            f"{tf_bus(bus)}, compute capability: {NVML['compute_capability']}")


def recorded_limits(profile: str) -> list[int]:
    """The logical GPUs' limits the H100 printed for `profile` (devices --config PROFILE)."""
    section = SIX_PROFILES.split(f"=== devices --config {profile}\n")[1].split("===")[0]
    return [int(line.split("limit ")[1].split()[0]) for line in section.splitlines()
            if line.strip().startswith("/GPU:") and "limit" in line]


def ready(gpus: list[tuple[int, bool]], lines: list[str]) -> events.Ready:
    """A ready report: TensorFlow's physical GPUs (index, visible) and the logical GPUs its lines created."""
    physical = [{"name": "/physical_device:CPU:0", "device_type": "CPU", "index": 0}]
    physical += [{"name": f"/physical_device:GPU:{i}", "device_type": "GPU", "index": i, "visible": visible,
                  "device_name": NVML["name"], "compute_capability": NVML["compute_capability"]}
                 for i, visible in gpus]
    created = created_gpus(lines)
    logical = [{"name": f"/job:localhost/replica:0/task:0/device:GPU:{n}", "short_name": f"/GPU:{n}",
                "device_type": "GPU"} for n in range(len(created))]
    return events.Ready(physical=tuple(physical), logical=tuple(logical), gpu_devices=tuple(created), pid=7)


def test_the_recorded_h100_split_2048_4096_is_one_gpu_with_two_logical_gpus_and_cudas_total() -> None:
    limits = recorded_limits("virtual")
    assert limits == [2048, 4096]
    report = ready([(0, True)], [created_line(n, limit, 0, NVML["pci_bus_id"]) for n, limit in enumerate(limits)])
    inventory = DeviceInventory.from_ready(report, [h100()])
    (gpu,) = inventory.gpus
    assert gpu.nvml_index == 0 and gpu.pci_bus_id == NVML["pci_bus_id"] and gpu.name == NVML["name"]
    assert gpu.memory_total_mib == 81_559  # NVML's: the device map's box
    (info,) = inventory.gpu_infos()
    assert (info.index, info.total_mib, info.total_source) == (0, 81_079, "CUDA")  # what TF can be given
    assert [(g.name, g.tf_index, g.nvml_index, g.limit_mib) for g in inventory.logical_gpus] == [
        ("/GPU:0", 0, 0, 2048), ("/GPU:1", 0, 0, 4096)]
    assert inventory.totals_by_tf_index() == {0: 81_559}


def test_the_fraction_profiles_limit_comes_through_as_recorded() -> None:
    (limit,) = recorded_limits("fraction")
    assert limit == H100["tf_limit_for_fraction_0_25_mib"]
    inventory = DeviceInventory.from_ready(ready([(0, True)], [created_line(0, limit, 0, NVML["pci_bus_id"])]),
                                           [h100()])
    assert [g.limit_mib for g in inventory.logical_gpus] == [20_269]


def test_two_gpus_in_cudas_reverse_order_are_matched_by_bus_id_not_index() -> None:
    """CUDA_VISIBLE_DEVICES=1,0: TensorFlow's GPU 0 is NVML's 1 (at 00:07.0), and the other way round."""
    nvml = [h100(0, "00000000:00:06.0"), h100(1, "00000000:00:07.0")]
    report = ready([(0, True), (1, True)], [created_line(0, 1024, 0, "00000000:00:07.0"),
                                            created_line(1, 1024, 1, "00000000:00:06.0")])
    inventory = DeviceInventory.from_ready(report, nvml, "1,0")
    assert [(g.tf_index, g.nvml_index) for g in inventory.gpus] == [(0, 1), (1, 0)]
    assert [g.nvml_index for g in inventory.logical_gpus] == [1, 0]
    assert [i.nvml_index for i in inventory.gpu_infos()] == [1, 0]


def test_a_hidden_gpu_tf_created_nothing_on_is_matched_by_cudas_order_not_by_index() -> None:
    """Hidden by the configuration, TF's GPU 1 logs no "Created device" line: under CUDA_VISIBLE_DEVICES=1,0 it is
    NVML's GPU 0. (Matched by index it was taken for NVML's GPU 1, the GPU TF's /GPU:0 runs on.)"""
    nvml = [h100(0, "00000000:00:06.0"), h100(1, "00000000:00:07.0")]
    report = ready([(0, True), (1, False)], [created_line(0, 1024, 0, "00000000:00:07.0")])
    inventory = DeviceInventory.from_ready(report, nvml, "1,0")
    visible, hidden = inventory.gpus
    assert (visible.nvml_index, hidden.nvml_index) == (1, 0) and not hidden.visible


@pytest.mark.parametrize("nvml", [[], [h100(0, "00000000:00:07.0")]], ids=["no driver", "another bus"])
def test_a_gpu_nvml_does_not_know_has_no_figures_rather_than_another_gpus(nvml: list[GpuSnapshot]) -> None:
    report = ready([(0, True)], [created_line(0, 2048, 0, NVML["pci_bus_id"])])
    inventory = DeviceInventory.from_ready(report, nvml)
    (gpu,) = inventory.gpus
    assert gpu.nvml is None and gpu.memory_total_mib is None and gpu.name == NVML["name"]  # TF's name stays
    (info,) = inventory.gpu_infos()
    assert info.total_mib is None and info.nvml_index is None
    assert inventory.logical_gpus[0].nvml_index is None and inventory.totals_by_tf_index() == {0: None}


def test_a_mig_instance_in_cuda_visible_devices_has_no_nvml_record() -> None:
    report = ready([(0, False)], [])
    inventory = DeviceInventory.from_ready(report, [h100()], "MIG-3f2e")
    assert inventory.gpus[0].nvml is None


def test_an_empty_inventory_before_any_run() -> None:
    inventory = DeviceInventory()
    assert inventory.gpus == () and inventory.gpu_infos() == [] and inventory.gpu(0) is None
