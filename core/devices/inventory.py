"""The machine's GPUs as TensorFlow and NVML both see them, matched once per ready run.

TensorFlow numbers its physical GPUs after CUDA_VISIBLE_DEVICES, in CUDA's order; NVML numbers every GPU of the
machine in its own. A run's `Ready` report carries TensorFlow's GPUs and, from TensorFlow's "Created device"
lines, the PCI bus id each logical GPU lives on; NVML gives each GPU's bus id, memory and name. `DeviceInventory`
matches the two once, by bus id, and every reader (the Devices list, the configuration's GPU editors, the
device map, the memory graphs) takes its answer from it instead of matching again.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tf_device_panel.core.devices.gpu_facts import GpuInfo
from tf_device_panel.core.devices.gpus import gpu_info, nvml_gpu_for_physical, nvml_index_for
from tf_device_panel.core.devices.nvml import GpuSnapshot
from tf_device_panel.core.protocol import events


@dataclass(frozen=True)
class InventoryGpu:
    """One of TensorFlow's physical GPUs and NVML's record of it."""

    tf_index: int                      # TensorFlow's physical index (/physical_device:GPU:N)
    tf_name: str                       # the name TensorFlow reports ("" when it said none)
    visible: bool                      # False: hidden from TensorFlow by the configuration
    compute_capability: str | None
    nvml: GpuSnapshot | None           # None: NVML does not know it (no driver, a MIG instance)

    @property
    def name(self) -> str:
        return self.tf_name or (self.nvml.name if self.nvml is not None else "") or ""

    @property
    def nvml_index(self) -> int | None:
        return self.nvml.index if self.nvml is not None else None

    @property
    def pci_bus_id(self) -> str | None:
        return self.nvml.pci_bus_id if self.nvml is not None else None

    @property
    def memory_total_mib(self) -> int | None:
        """NVML's total: what the GPU has (the device map's box, the memory graphs)."""
        return self.nvml.memory_total_mib if self.nvml is not None else None

    def info(self) -> GpuInfo:
        """What validation needs: CUDA's total where NVML tells what the driver keeps, since a split between
        the two (81,079 and 81,559 MiB on an H100) would pass against NVML's total and be refused by the run."""
        if self.nvml is None:
            return GpuInfo(self.tf_index, self.name)
        return gpu_info(self.tf_index, self.nvml, self.name)


@dataclass(frozen=True)
class InventoryLogicalGpu:
    """A logical GPU TensorFlow created, on which physical GPU, with which memory limit."""

    name: str               # "/GPU:1"
    tf_index: int           # its physical GPU's TensorFlow index
    nvml_index: int | None  # its physical GPU's NVML index, by the bus id TensorFlow logged for it
    limit_mib: int


@dataclass(frozen=True)
class DeviceInventory:
    """TensorFlow's GPUs matched to NVML's, by PCI bus id (never by index: CUDA and NVML may order them
    differently). Empty until a run is ready; `nvml_gpus` is NVML's list as it was read."""

    nvml_gpus: tuple[GpuSnapshot, ...] = ()
    gpus: tuple[InventoryGpu, ...] = ()                  # TensorFlow's physical GPUs, in its order
    logical_gpus: tuple[InventoryLogicalGpu, ...] = ()   # the logical GPUs TensorFlow created

    @classmethod
    def from_ready(cls, ready: events.Ready, nvml_gpus: Sequence[GpuSnapshot],
                   cuda_visible_devices: str | None = None) -> DeviceInventory:
        """Match `ready`'s GPUs to `nvml_gpus`: by the bus id TensorFlow logged when it created a device on the
        GPU; a GPU it created nothing on (hidden by the configuration) by CUDA's order under
        `cuda_visible_devices`, the value the run inherited."""
        nvml = tuple(nvml_gpus)
        gpus = []
        for device in ready.physical:
            if device.get("device_type") != "GPU":
                continue
            index = int(device.get("index", 0))
            record = nvml_gpu_for_physical(index, ready.gpu_devices, nvml, cuda_visible_devices)
            gpus.append(InventoryGpu(index, device.get("device_name") or "", bool(device.get("visible", True)),
                                     device.get("compute_capability"), record))
        logical = tuple(InventoryLogicalGpu(created["logical"], created["physical"],
                                            nvml_index_for(created["pci_bus_id"], nvml), created["memory_mb"])
                        for created in ready.gpu_devices)
        return cls(nvml, tuple(gpus), logical)

    def gpu(self, tf_index: int) -> InventoryGpu | None:
        return next((gpu for gpu in self.gpus if gpu.tf_index == tf_index), None)

    def gpu_infos(self) -> list[GpuInfo]:
        """The configuration's GPU list: each of TensorFlow's physical GPUs with CUDA's total."""
        return [gpu.info() for gpu in self.gpus]

    def totals_by_tf_index(self) -> dict[int, int | None]:
        """NVML's memory total of each of TensorFlow's physical GPUs (None where NVML does not know it)."""
        return {gpu.tf_index: gpu.memory_total_mib for gpu in self.gpus}
