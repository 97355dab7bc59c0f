"""A fake NVML for CI: pynvml's functions patched, the way established GPU monitors test theirs."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pynvml
import pytest

GIB = 2**30


class FakeGpus:
    """GPUs with settable state; `lose(i)` makes GPU i fall off the bus; `unsupported` fields raise NotSupported."""

    def __init__(self, count: int = 2, unsupported: tuple[str, ...] = ("power",)):
        self.count = count
        self.used = [GIB * (i + 1) for i in range(count)]
        self.total = 16 * GIB
        self.lost: set[int] = set()
        self.unsupported = set(unsupported)
        self.processes: dict[int, list[Any]] = {i: [] for i in range(count)}
        self.calls = 0

    def lose(self, index: int) -> None:
        self.lost.add(index)

    def _index(self, handle: str) -> int:
        self.calls += 1
        index = int(handle[1:])
        if index in self.lost:
            raise pynvml.NVMLError_GpuIsLost()
        return index

    def _field(self, name: str, handle: str, value: Any) -> Any:
        self._index(handle)
        if name in self.unsupported:
            raise pynvml.NVMLError_NotSupported()
        return value

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        fakes = {
            "nvmlInit": lambda: None,
            "nvmlDeviceGetCount": lambda: self.count,
            "nvmlDeviceGetHandleByIndex": lambda i: f"h{i}",
            "nvmlSystemGetDriverVersion": lambda: "570.86",
            "nvmlSystemGetCudaDriverVersion_v2": lambda: 12080,
            "nvmlDeviceGetName": lambda h: self._field("name", h, f"Fake GPU {h[1:]}"),
            "nvmlDeviceGetUUID": lambda h: self._field("uuid", h, f"GPU-fake-{h[1:]}"),
            "nvmlDeviceGetPciInfo": lambda h: self._field("pci", h, SimpleNamespace(
                busId=f"00000000:0{int(h[1:]) + 1}:00.0".encode())),
            "nvmlDeviceGetCudaComputeCapability": lambda h: self._field("capability", h, (8, 9)),
            "nvmlDeviceGetMemoryInfo": lambda h, version=None: self._field("memory", h, SimpleNamespace(
                total=self.total, used=self.used[int(h[1:])], free=self.total - self.used[int(h[1:])])),
            "nvmlDeviceGetUtilizationRates": lambda h: self._field("utilization", h, SimpleNamespace(gpu=42,
                                                                                                     memory=10)),
            "nvmlDeviceGetTemperature": lambda h, sensor: self._field("temperature", h, 55),
            "nvmlDeviceGetPowerUsage": lambda h: self._field("power", h, 70_000),
            "nvmlDeviceGetClockInfo": lambda h, kind: self._field("clocks", h, 1500 if kind == 1 else 6000),
            "nvmlDeviceGetComputeRunningProcesses_v3": lambda h: self._field("processes", h,
                                                                            self.processes[int(h[1:])]),
        }
        for name, fake in fakes.items():
            monkeypatch.setattr(pynvml, name, fake)


def process(pid: int, used_mib: int | None) -> Any:
    return SimpleNamespace(pid=pid, usedGpuMemory=2**64 - 1 if used_mib is None else used_mib * 2**20)


def no_library(monkeypatch: pytest.MonkeyPatch) -> None:
    def missing() -> None:
        raise pynvml.NVMLError_LibraryNotFound()

    monkeypatch.setattr(pynvml, "nvmlInit", missing)
