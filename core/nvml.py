"""NVML through NVIDIA's official binding (`pynvml` from nvidia-ml-py), with every failure an N/A.

One lazily initialised helper: no driver means `available` is False with a plain message, a field the
GPU does not support reads as None, and a lost GPU is one bad row while the others still read.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import asdict, dataclass
from functools import partial
from typing import Any, TypeVar

T = TypeVar("T")
NO_DRIVER = "no NVIDIA driver found"


@dataclass
class GpuSnapshot:
    index: int
    name: str | None = None
    uuid: str | None = None
    pci_bus_id: str | None = None
    memory_total_mib: int | None = None
    memory_used_mib: int | None = None
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


class Nvml:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._initialised = False
        self.message = ""
        self.available = False
        self._handles: list[Any] = []

    def init(self) -> bool:
        with self._lock:
            if self._initialised:
                return self.available
            self._initialised = True
            try:
                import pynvml
            except ImportError:
                self.message = "nvidia-ml-py is not installed"
                return False
            try:
                pynvml.nvmlInit()
                count = pynvml.nvmlDeviceGetCount()
                self._handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
            except pynvml.NVMLError_LibraryNotFound:
                self.message = NO_DRIVER
                return False
            except pynvml.NVMLError as exc:
                self.message = f"NVML failed: {exc}"
                return False
            self.available = True
            return True

    @staticmethod
    def _read(fn: Callable[[], T]) -> T | None:
        import pynvml

        try:
            return fn()
        except pynvml.NVMLError:
            return None

    def driver_version(self) -> str | None:
        if not self.init():
            return None
        import pynvml

        version = self._read(pynvml.nvmlSystemGetDriverVersion)
        return version.decode() if isinstance(version, bytes) else version

    def cuda_driver_version(self) -> str | None:
        """The highest CUDA version the driver supports, e.g. '12.4'."""
        if not self.init():
            return None
        import pynvml

        value = self._read(pynvml.nvmlSystemGetCudaDriverVersion_v2)
        return None if value is None else f"{value // 1000}.{(value % 1000) // 10}"

    def gpus(self) -> list[GpuSnapshot]:
        if not self.init():
            return []
        import pynvml

        snapshots = []
        for index, handle in enumerate(self._handles):
            snap = GpuSnapshot(index)
            try:
                name = pynvml.nvmlDeviceGetName(handle)
                snap.name = name.decode() if isinstance(name, bytes) else name
            except pynvml.NVMLError_GpuIsLost:
                snap.error = "GPU is lost (fell off the bus)"
                snapshots.append(snap)
                continue
            except pynvml.NVMLError:
                pass
            uuid = self._read(partial(pynvml.nvmlDeviceGetUUID, handle))
            snap.uuid = uuid.decode() if isinstance(uuid, bytes) else uuid
            pci = self._read(partial(pynvml.nvmlDeviceGetPciInfo, handle))
            if pci is not None:
                bus = pci.busId
                snap.pci_bus_id = bus.decode() if isinstance(bus, bytes) else str(bus)
            memory = self._read(partial(pynvml.nvmlDeviceGetMemoryInfo, handle, version=pynvml.nvmlMemory_v2))
            if memory is None:  # drivers older than R510 have no v2 query
                memory = self._read(partial(pynvml.nvmlDeviceGetMemoryInfo, handle))
            if memory is not None:
                snap.memory_total_mib = int(memory.total) // (1024 * 1024)
                snap.memory_used_mib = int(memory.used) // (1024 * 1024)
            snapshots.append(snap)
        return snapshots


_shared: Nvml | None = None


def shared() -> Nvml:
    global _shared
    if _shared is None:
        _shared = Nvml()
    return _shared
