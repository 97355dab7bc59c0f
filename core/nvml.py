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
UNAVAILABLE = 2**64 - 1  # usedGpuMemory when the driver cannot tell (WDDM, MIG)


@dataclass
class GpuProcess:
    pid: int
    used_mib: int | None  # None: the driver does not report it
    name: str = ""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class GpuSnapshot:
    index: int
    name: str | None = None
    uuid: str | None = None
    pci_bus_id: str | None = None
    memory_total_mib: int | None = None
    memory_used_mib: int | None = None
    compute_capability: str | None = None
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
        except pynvml.NVMLError_GpuIsLost:
            raise
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
                self._describe(snap, handle)
            except pynvml.NVMLError_GpuIsLost:
                snap.error = "GPU is lost (fell off the bus)"
            snapshots.append(snap)
        return snapshots

    def _describe(self, snap: GpuSnapshot, handle: Any) -> None:
        import pynvml

        name = self._read(partial(pynvml.nvmlDeviceGetName, handle))
        snap.name = name.decode() if isinstance(name, bytes) else name
        uuid = self._read(partial(pynvml.nvmlDeviceGetUUID, handle))
        snap.uuid = uuid.decode() if isinstance(uuid, bytes) else uuid
        pci = self._read(partial(pynvml.nvmlDeviceGetPciInfo, handle))
        if pci is not None:
            bus = pci.busId
            snap.pci_bus_id = bus.decode() if isinstance(bus, bytes) else str(bus)
        capability = self._read(partial(pynvml.nvmlDeviceGetCudaComputeCapability, handle))
        if capability is not None:
            snap.compute_capability = f"{capability[0]}.{capability[1]}"
        memory = self._read(partial(pynvml.nvmlDeviceGetMemoryInfo, handle, version=pynvml.nvmlMemory_v2))
        if memory is None:  # drivers older than R510 have no v2 query
            memory = self._read(partial(pynvml.nvmlDeviceGetMemoryInfo, handle))
        if memory is not None:
            snap.memory_total_mib = int(memory.total) // (1024 * 1024)
            snap.memory_used_mib = int(memory.used) // (1024 * 1024)

    def processes(self, index: int) -> list[GpuProcess] | None:
        """Compute processes on GPU `index` (v3, then v2, then v1 of NVML's query); None if unreadable."""
        if not self.init() or index >= len(self._handles):
            return None
        import psutil
        import pynvml

        handle = self._handles[index]
        found = None
        for name in ("nvmlDeviceGetComputeRunningProcesses_v3", "nvmlDeviceGetComputeRunningProcesses_v2",
                     "nvmlDeviceGetComputeRunningProcesses"):
            query = getattr(pynvml, name, None)
            if query is None:
                continue
            try:
                found = query(handle)
                break
            except pynvml.NVMLError_FunctionNotFound:
                continue
            except pynvml.NVMLError:
                return None
        if found is None:
            return None
        processes = []
        for item in found:
            used = getattr(item, "usedGpuMemory", None)
            try:
                process_name = psutil.Process(int(item.pid)).name()
            except (psutil.Error, ValueError):
                process_name = ""  # in a container NVML reports host PIDs
            processes.append(GpuProcess(int(item.pid), None if used in (None, UNAVAILABLE) else int(used) // 2**20,
                                        process_name))
        return processes


    def sample(self, index: int) -> GpuSample:
        """Live values of GPU `index`; each unreadable field is None, a lost GPU is one row with `error`."""
        import pynvml

        handle = self._handles[index]
        sample = GpuSample(index)
        try:
            memory = pynvml.nvmlDeviceGetMemoryInfo(handle, version=pynvml.nvmlMemory_v2)
        except pynvml.NVMLError_GpuIsLost:
            sample.error = "GPU is lost (fell off the bus)"
            return sample
        except pynvml.NVMLError:
            memory = self._read(partial(pynvml.nvmlDeviceGetMemoryInfo, handle))
        if memory is not None:
            sample.memory_used_mib = int(memory.used) / 2**20
            sample.memory_total_mib = int(memory.total) / 2**20
        try:
            rates = self._read(partial(pynvml.nvmlDeviceGetUtilizationRates, handle))
            sample.utilization = None if rates is None else float(rates.gpu)
            sample.temperature_c = self._float(pynvml.nvmlDeviceGetTemperature, handle, pynvml.NVML_TEMPERATURE_GPU)
            power = self._float(pynvml.nvmlDeviceGetPowerUsage, handle)
            sample.power_w = None if power is None else power / 1000.0
            sample.sm_clock_mhz = self._float(pynvml.nvmlDeviceGetClockInfo, handle, pynvml.NVML_CLOCK_SM)
            sample.memory_clock_mhz = self._float(pynvml.nvmlDeviceGetClockInfo, handle, pynvml.NVML_CLOCK_MEM)
        except pynvml.NVMLError_GpuIsLost:
            sample.error = "GPU is lost (fell off the bus)"
            return sample
        sample.processes = self.processes(index)
        return sample

    def _float(self, fn: Callable[..., Any], *args: Any) -> float | None:
        import pynvml

        try:
            return float(fn(*args))
        except pynvml.NVMLError_GpuIsLost:
            raise
        except pynvml.NVMLError:
            return None


@dataclass
class GpuSample:
    index: int
    memory_used_mib: float | None = None
    memory_total_mib: float | None = None
    utilization: float | None = None      # percent
    temperature_c: float | None = None
    power_w: float | None = None
    sm_clock_mhz: float | None = None
    memory_clock_mhz: float | None = None
    processes: list[GpuProcess] | None = None
    error: str | None = None


_shared: Nvml | None = None


def shared() -> Nvml:
    global _shared
    if _shared is None:
        _shared = Nvml()
    return _shared
