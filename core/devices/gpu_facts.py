"""What is known about one physical GPU: `GpuInfo` (TensorFlow's index, NVML's, the total memory), and what the
CUDA driver itself says (total memory, PCI bus id) where NVML's figures are not TensorFlow's.

The configuration (`core.config`) validates and plans against these facts, so this module sits below it.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class GpuInfo:
    """What validation needs to know about one physical GPU (from NVML or a runtime's report)."""

    index: int                       # TensorFlow's physical index (after CUDA_VISIBLE_DEVICES)
    name: str = ""
    total_mib: int | None = None     # CUDA's total where known: what TensorFlow can split
    nvml_index: int | None = None    # the same GPU in NVML and nvidia-smi, when it differs or matters
    total_source: str = ""           # "CUDA" or "NVML": which total total_mib is


# Both probes are pasted whole into a configuration snippet (core.config.plan takes their source): each must stay
# self-contained, importing what it uses inside itself.
def gpu_total_mib(index: int) -> int:
    """Total memory of CUDA device `index` (TensorFlow's physical GPU `index`), from the CUDA driver."""
    import ctypes
    import os

    cuda = ctypes.CDLL("nvcuda.dll" if os.name == "nt" else "libcuda.so.1")
    device, total = ctypes.c_int(), ctypes.c_size_t()
    for status in (cuda.cuInit(0), cuda.cuDeviceGet(ctypes.byref(device), index),
                   cuda.cuDeviceTotalMem_v2(ctypes.byref(total), device)):
        if status != 0:
            raise RuntimeError(f"CUDA driver error {status} while reading GPU {index}'s memory")
    return int(total.value // 2**20)


def gpu_pci_bus_id(index: int) -> str:
    """The PCI bus id of CUDA device `index` (TensorFlow's physical GPU `index`), from the CUDA driver: the key
    that matches it to NVML's GPU whatever CUDA_VISIBLE_DEVICES and CUDA_DEVICE_ORDER say."""
    import ctypes
    import os

    cuda = ctypes.CDLL("nvcuda.dll" if os.name == "nt" else "libcuda.so.1")
    device, bus = ctypes.c_int(), ctypes.create_string_buffer(32)
    for status in (cuda.cuInit(0), cuda.cuDeviceGet(ctypes.byref(device), index),
                   cuda.cuDeviceGetPCIBusId(bus, len(bus), device)):
        if status != 0:
            raise RuntimeError(f"CUDA driver error {status} while reading GPU {index}'s PCI bus id")
    return bus.value.decode()
