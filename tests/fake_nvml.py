"""A fake NVML for CI: pynvml's functions patched, the way established GPU monitors test theirs."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pynvml
import pytest

GIB = 2**30
MIB = 2**20
RESERVED = 300 * MIB  # what the driver sets aside: memory v1 counts it as used, v2 does not (R510+)
# Measured on an NVIDIA H100 80GB HBM3 (../shared/gpu-host/README.md): NVML's total, CUDA's, and what the run's
# process held after its first op under each configuration (NVML per-process memory).
H100_NAME = "NVIDIA H100 80GB HBM3"
H100_TOTAL_MIB = 81_559
H100_CUDA_TOTAL_MIB = 81_079
H100_RUN_HELD_MIB = {"default": 79_274, "growth": 522, "split 2048+4096": 2_570, "fraction 0.25": 20_790}
H100_FRACTION_LIMIT_MIB = 20_269  # memory_fraction 0.25 of CUDA's total, as TensorFlow was given it
PROCESS_QUERIES = ("nvmlDeviceGetComputeRunningProcesses_v3", "nvmlDeviceGetComputeRunningProcesses_v2",
                   "nvmlDeviceGetComputeRunningProcesses")


class FakeGpus:
    """GPUs with settable state, counting every call by function name (`calls`).

    `lose(i)` makes GPU i fall off the bus; `unsupported` fields raise NotSupported; `missing` holds functions
    the driver lacks (NVMLError_FunctionNotFound), "nvmlDeviceGetMemoryInfo_v2" included, as in pynvml.
    """

    def __init__(self, count: int = 2, unsupported: tuple[str, ...] = ("power",), missing: tuple[str, ...] = (),
                 *, total_mib: int = 16 * 1024, name: str | None = None):
        """`total_mib` each GPU's memory (H100_TOTAL_MIB for a real 80 GB one), `name` theirs (else "Fake GPU i")."""
        self.count = count
        self.used = [GIB * (i + 1) for i in range(count)]
        self.total = total_mib * MIB
        self.name = name
        self.lost: set[int] = set()
        self.unsupported = set(unsupported)
        self.missing = set(missing)
        self.processes: dict[int, list[Any]] = {i: [] for i in range(count)}
        self.calls: Counter[str] = Counter()

    def lose(self, index: int) -> None:
        self.lost.add(index)

    def _index(self, handle: str) -> int:
        index = int(handle[1:])
        if index in self.lost:
            raise pynvml.NVMLError_GpuIsLost()
        return index

    def _field(self, name: str, handle: str, value: Any) -> Any:
        self._index(handle)
        if name in self.unsupported:
            raise pynvml.NVMLError_NotSupported()
        return value

    def _memory(self, handle: str, version: int | None = None) -> Any:
        if version and "nvmlDeviceGetMemoryInfo_v2" in self.missing:
            raise pynvml.NVMLError_FunctionNotFound()
        used = self.used[int(handle[1:])] + (0 if version else RESERVED)
        return self._field("memory", handle, SimpleNamespace(total=self.total, used=used, free=self.total - used))

    def _counted(self, name: str, fake: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            self.calls[name] += 1
            if name in self.missing:
                raise pynvml.NVMLError_FunctionNotFound()
            return fake(*args, **kwargs)

        return call

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        fakes: dict[str, Callable[..., Any]] = {
            "nvmlInit": lambda: None,
            "nvmlDeviceGetCount": lambda: self.count,
            "nvmlDeviceGetHandleByIndex": lambda i: f"h{i}",
            "nvmlSystemGetDriverVersion": lambda: b"570.86",  # bytes, as pynvml returns it
            "nvmlSystemGetCudaDriverVersion_v2": lambda: 12080,
            "nvmlDeviceGetName": lambda h: self._field("name", h, (self.name or f"Fake GPU {h[1:]}").encode()),
            "nvmlDeviceGetUUID": lambda h: self._field("uuid", h, f"GPU-fake-{h[1:]}"),
            "nvmlDeviceGetPciInfo": lambda h: self._field("pci", h, SimpleNamespace(
                busId=f"00000000:0{int(h[1:]) + 1}:00.0".encode())),
            "nvmlDeviceGetCudaComputeCapability": lambda h: self._field("capability", h, (8, 9)),
            "nvmlDeviceGetMemoryInfo": self._memory,
            "nvmlDeviceGetUtilizationRates": lambda h: self._field("utilization", h, SimpleNamespace(gpu=42,
                                                                                                     memory=10)),
            "nvmlDeviceGetTemperature": lambda h, sensor: self._field("temperature", h, 55),
            "nvmlDeviceGetPowerUsage": lambda h: self._field("power", h, 70_000),
            "nvmlDeviceGetClockInfo": lambda h, kind: self._field("clocks", h, 1500 if kind == 1 else 6000),
            "nvmlDeviceGetMaxClockInfo": lambda h, kind: self._field("clocks", h, 2040 if kind == 1 else 6251),
            "nvmlDeviceGetNumGpuCores": lambda h: self._field("cores", h, 7424),  # an L4: 58 SMs × 128
        }
        for name in PROCESS_QUERIES:
            fakes[name] = lambda h: self._field("processes", h, self.processes[int(h[1:])])
        for name, fake in fakes.items():
            monkeypatch.setattr(pynvml, name, self._counted(name, fake))


def process(pid: int, used_mib: int | None) -> Any:
    return SimpleNamespace(pid=pid, usedGpuMemory=2**64 - 1 if used_mib is None else used_mib * 2**20)


def no_library(monkeypatch: pytest.MonkeyPatch) -> None:
    def missing() -> None:
        raise pynvml.NVMLError_LibraryNotFound()

    monkeypatch.setattr(pynvml, "nvmlInit", missing)
