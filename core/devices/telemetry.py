"""Live telemetry: NVML per GPU, the host and the runtime process, kept in bounded numpy ring buffers.

The sampler runs on its own thread. Failure is per value: an unsupported field is None (N/A), a lost
GPU is one row with an error while the others keep updating, and no NVML means host-only mode.
"""

from __future__ import annotations

import csv
import logging
import math
import os
import threading
import time
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np
import psutil
from tf_device_panel.core.devices.nvml import GpuSample, GpuSnapshot, Nvml
from tf_device_panel.core.hub import Hub, Message
from tf_device_panel.core.units import MIB

log = logging.getLogger(__name__)

DEFAULT_INTERVAL_S = 0.5
MIN_INTERVAL_S = 0.1
MAX_INTERVAL_S = 10.0
HISTORY_S = 3600.0           # every series keeps at least this much at the default interval
MAX_MARKERS = 10_000


class Series:
    """A fixed-size ring buffer of (time, value); NaN marks a missing value."""

    def __init__(self, capacity: int):
        self.capacity = capacity
        self._times = np.full(capacity, np.nan)
        self._values = np.full(capacity, np.nan)
        self._next = 0
        self._count = 0

    def __len__(self) -> int:
        return self._count

    def append(self, t: float, value: float | None) -> None:
        self._times[self._next] = t
        self._values[self._next] = np.nan if value is None else value
        self._next = (self._next + 1) % self.capacity
        self._count = min(self._count + 1, self.capacity)

    def arrays(self, since: float | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Times and values, oldest first (copies), from `since` on."""
        if self._count < self.capacity:
            times, values = self._times[:self._count].copy(), self._values[:self._count].copy()
        else:
            times = np.concatenate((self._times[self._next:], self._times[:self._next]))
            values = np.concatenate((self._values[self._next:], self._values[:self._next]))
        if since is not None and len(times):
            start = int(np.searchsorted(times, since))
            times, values = times[start:], values[start:]
        return times, values

    def last(self) -> float | None:
        if not self._count:
            return None
        value = float(self._values[(self._next - 1) % self.capacity])
        return None if math.isnan(value) else value


@dataclass
class Marker:
    time: float
    kind: str        # runtime-start, runtime-exit, job-start, job-end, error
    label: str


class History:
    """Named series and labelled markers, shared between the sampler thread and the window (locked)."""

    def __init__(self, interval_s: float = DEFAULT_INTERVAL_S, history_s: float = HISTORY_S):
        self.capacity = math.ceil(history_s / max(min(interval_s, DEFAULT_INTERVAL_S), MIN_INTERVAL_S)) + 1
        self.series: dict[str, Series] = {}
        self.markers: deque[Marker] = deque(maxlen=MAX_MARKERS)
        self.lock = threading.Lock()

    def record(self, t: float, values: dict[str, float | None]) -> None:
        with self.lock:
            for name, value in values.items():
                series = self.series.get(name)
                if series is None:
                    series = self.series[name] = Series(self.capacity)
                series.append(t, value)

    def mark(self, t: float, kind: str, label: str) -> None:
        with self.lock:
            self.markers.append(Marker(t, kind, label))

    def snapshot(self, since: float | None = None,
                 names: Iterable[str] | None = None) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        with self.lock:
            chosen = self.series if names is None else {n: self.series[n] for n in names if n in self.series}
            return {name: series.arrays(since) for name, series in chosen.items()}

    def markers_since(self, since: float | None = None) -> list[Marker]:
        with self.lock:
            return [m for m in self.markers if since is None or m.time >= since]

    def to_csv(self, path: str | os.PathLike[str]) -> int:
        """Long format (time, series, value), then the markers; returns the number of value rows."""
        rows = 0
        data = self.snapshot()
        with open(path, "w", newline="", encoding="utf-8") as handle:
            writer = csv.writer(handle)
            writer.writerow(["time", "series", "value"])
            for name, (times, values) in sorted(data.items()):
                for t, v in zip(times, values, strict=True):
                    writer.writerow([f"{t:.3f}", name, "" if math.isnan(v) else f"{v:.6g}"])
                    rows += 1
            for marker in self.markers_since():
                writer.writerow([f"{marker.time:.3f}", f"marker:{marker.kind}", marker.label])
        return rows


@dataclass
class HostSample:
    cpu_percent: float | None = None
    ram_used_mib: float | None = None
    ram_total_mib: float | None = None
    runtime_rss_mib: float | None = None


@dataclass(frozen=True)
class HeldOnGpu:
    """What NVML's per-process list says the run's process holds on one GPU, and what every other process does:
    the one reading the memory graphs' titles, their run curve and the device map's bars all draw."""

    listed: bool               # NVML lists the run's process on this GPU
    run_mib: float | None      # what it holds: 0 when not listed, None when listed without a figure
    others_mib: float          # every other process's, from the same list


def held_on_gpu(gpu: GpuSample, run_pid: int | None) -> HeldOnGpu | None:
    """`gpu`'s memory held by the process `run_pid`; None without a run or when NVML could not list the GPU's
    processes (no reading, not "nothing held")."""
    if run_pid is None or gpu.processes is None:
        return None
    own = [p.used_mib for p in gpu.processes if p.pid == run_pid]
    others = sum(p.used_mib or 0 for p in gpu.processes if p.pid != run_pid)
    if not own:
        return HeldOnGpu(False, 0.0, float(others))
    return HeldOnGpu(True, None if own[0] is None else float(own[0]), float(others))


@dataclass
class Sample(Message):
    time: float
    gpus: list[GpuSample] = field(default_factory=list)
    host: HostSample = field(default_factory=HostSample)
    runtime_pid: int | None = None
    note: str = ""

    def held_on(self, gpu: GpuSample) -> HeldOnGpu | None:
        """What the run's process (`runtime_pid`, the pid this sample was taken for) holds on `gpu`."""
        return held_on_gpu(gpu, self.runtime_pid)

    def values(self) -> dict[str, float | None]:
        """Flat series values, e.g. 'gpu0.memory_used_mib', 'host.cpu_percent'."""
        flat: dict[str, float | None] = {}
        for gpu in self.gpus:
            for name in ("memory_used_mib", "memory_total_mib", "utilization", "temperature_c", "power_w",
                         "sm_clock_mhz", "memory_clock_mhz"):
                flat[f"gpu{gpu.index}.{name}"] = getattr(gpu, name)
            held = self.held_on(gpu)
            flat[f"gpu{gpu.index}.runtime_used_mib"] = held.run_mib if held is not None and held.listed else None
        for name in ("cpu_percent", "ram_used_mib", "ram_total_mib", "runtime_rss_mib"):
            flat[f"host.{name}"] = getattr(self.host, name)
        return flat


class Sampler:
    """Samples every `interval` seconds on a thread and publishes each `Sample` on its `hub`, on that thread
    (`sampler.hub.subscribe(subscriber, Sample, handler)`). One sampler serves every reader in a process: the
    window's graphs, its device map and an exporter subscribe to the same one (core.client.session.Session owns
    the window's)."""

    def __init__(self, *, interval: float = DEFAULT_INTERVAL_S, nvml: Nvml | None = None,
                 history: History | None = None):
        self.interval = self._clamp(interval)
        self.nvml = nvml or Nvml()
        self.history = history or History(self.interval)
        self._reads_failed: set[str] = set()
        # A handler that fails never stops the graphs nor the other subscribers: the hub reports it.
        self.hub = Hub()
        self.runtime_pid: int | None = None
        self.gpus: list[GpuSnapshot] = []
        self.note = ""
        self._runtime_process: psutil.Process | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        psutil.cpu_percent(None)  # the first call only starts psutil's measurement

    @staticmethod
    def _clamp(interval: float) -> float:
        return min(max(float(interval), MIN_INTERVAL_S), MAX_INTERVAL_S)

    def set_interval(self, interval: float) -> None:
        self.interval = self._clamp(interval)

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def set_runtime_pid(self, pid: int | None) -> None:
        self.runtime_pid = pid
        self._runtime_process = None

    def start(self) -> None:
        if self.running:  # shared: whoever starts it first starts it
            return
        self._stop.clear()
        if self.nvml.init():
            self.gpus = self.nvml.gpus()  # static facts once; handles are kept inside Nvml
        else:
            self.note = f"{self.nvml.message}: host-only graphs"
        self._thread = threading.Thread(target=self._loop, name="telemetry-sampler", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    def _loop(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                sample = self.sample()
            except Exception as error:  # one bad read must not end every graph for good: skip the tick
                said = f"{type(error).__name__}: {error}"
                if said not in self._reads_failed:  # the same failure every tick is logged once
                    self._reads_failed.add(said)
                    log.exception("telemetry: a sample could not be read; sampling goes on")
            else:
                self.hub.publish(sample)
            self._stop.wait(max(self.interval - (time.monotonic() - started), 0.0))

    def sample(self) -> Sample:
        sample = Sample(time.time(), runtime_pid=self.runtime_pid, note=self.note)
        if self.nvml.available:
            sample.gpus = [self.nvml.sample(index) for index in range(len(self.gpus))]
        sample.host = self._host()
        self.history.record(sample.time, sample.values())
        return sample

    def _host(self) -> HostSample:
        memory = psutil.virtual_memory()
        host = HostSample(cpu_percent=psutil.cpu_percent(None), ram_used_mib=(memory.total - memory.available) / MIB,
                          ram_total_mib=memory.total / MIB)
        if self.runtime_pid is not None:
            try:
                if self._runtime_process is None or self._runtime_process.pid != self.runtime_pid:
                    self._runtime_process = psutil.Process(self.runtime_pid)
                rss = self._runtime_process.memory_info().rss
                # An exited run not yet reaped (a zombie) reads 0: no reading, not a drop to nothing.
                host.runtime_rss_mib = rss / MIB if rss else None
            except psutil.Error:
                host.runtime_rss_mib = None
        return host

