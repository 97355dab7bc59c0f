"""NVML through NVIDIA's official binding (`pynvml` from nvidia-ml-py), with every failure an N/A.

Every NVML call goes through `Nvml.query`, in the manner of nvitop's `nvmlQuery`: an error becomes None
(shown as N/A) for that one value, a function the driver lacks is logged once, bytes become str there,
and `NVMLError_GpuIsLost` turns that GPU into one bad row while the others keep reading. Versioned
queries (memory v2 → v1, process list v3 → v2 → v1) find the version the driver answers once per GPU
and remember it. No driver means `available` is False with a plain message.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from dataclasses import dataclass
from types import ModuleType
from typing import Any, TypedDict

from tf_device_panel.core.units import MIB

log = logging.getLogger(__name__)

NO_DRIVER = "no NVIDIA driver found"
GPU_LOST = "GPU is lost (fell off the bus)"
UNAVAILABLE = 2**64 - 1  # usedGpuMemory when the driver cannot tell (WDDM, MIG)

class QueryArgs(TypedDict, total=False):
    """The keyword arguments of an NVML query, passed to pynvml as they are."""

    version: int                      # the struct version a versioned call fills (nvmlMemory_v2)


Query = tuple[str, str, QueryArgs]    # one way to ask NVML for a figure: (version, pynvml function, arguments)
# Newest first. The unsuffixed process query is v1 in bindings older than the v2/v3 functions.
PROCESS_QUERIES: tuple[Query, ...] = (
    ("v3", "nvmlDeviceGetComputeRunningProcesses_v3", {}),
    ("v2", "nvmlDeviceGetComputeRunningProcesses_v2", {}),
    ("v1", "nvmlDeviceGetComputeRunningProcesses", {}),
)


class GpuProcessJson(TypedDict):
    pid: int
    used_mib: int | None
    name: str


class GpuSnapshotJson(TypedDict):
    index: int
    name: str | None
    uuid: str | None
    pci_bus_id: str | None
    memory_total_mib: int | None
    memory_used_mib: int | None
    compute_capability: str | None
    error: str | None
    memory_reserved_mib: int | None


@dataclass
class GpuProcess:
    pid: int
    used_mib: int | None  # None: the driver does not report it
    name: str = ""

    def to_json(self) -> GpuProcessJson:
        return {"pid": self.pid, "used_mib": self.used_mib, "name": self.name}


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
    # Memory the driver keeps for itself (memory v2 only): CUDA's total is NVML's total less this
    # (an H100 80GB: 81,559 - 480 = 81,079 MiB, the most TensorFlow can be given).
    memory_reserved_mib: int | None = None

    def to_json(self) -> GpuSnapshotJson:
        return {"index": self.index, "name": self.name, "uuid": self.uuid, "pci_bus_id": self.pci_bus_id,
                "memory_total_mib": self.memory_total_mib, "memory_used_mib": self.memory_used_mib,
                "compute_capability": self.compute_capability, "error": self.error,
                "memory_reserved_mib": self.memory_reserved_mib}

    @property
    def cuda_total_mib(self) -> int | None:
        """The total CUDA reports (what TensorFlow can split), when NVML tells what the driver keeps."""
        if self.memory_total_mib is None or self.memory_reserved_mib is None:
            return None
        return self.memory_total_mib - self.memory_reserved_mib


# CUDA cores per streaming multiprocessor, by compute capability's major.minor: NVML gives cores, peaks need SMs.
CORES_PER_SM = {"6.0": 64, "6.1": 128, "6.2": 128, "7.0": 64, "7.2": 64, "7.5": 64, "8.0": 64, "8.6": 128,
                "8.7": 128, "8.9": 128, "9.0": 128, "10.0": 128, "12.0": 128}


@dataclass(frozen=True)
class ComputeUnits:
    """What a GPU's peak throughput is made of: its SMs, their highest clock and its architecture."""

    sm_count: int
    max_sm_clock_mhz: int
    compute_capability: str


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


class GpuLost(Exception):
    """NVML said the GPU fell off the bus; the row being read becomes one bad row."""


class _Missing:
    """What `query` returns, unlogged, when a version probe finds the function absent."""


MISSING = _Missing()


def as_text(value: Any) -> Any:
    """NVML's strings arrive as bytes from older bindings and some struct fields: the one place they become str."""
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


def _number(value: Any, scale: float = 1.0) -> float | None:
    return None if value is None else float(value) / scale


class Nvml:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._initialised = False
        self.message = ""
        self.available = False
        self._pynvml: ModuleType | None = None
        self._handles: list[Any] = []
        self._row_errors: dict[int, str] = {}         # GPU index -> why its row cannot be read (lost, unopenable)
        self._versions: dict[tuple[str, int], str] = {}  # (query family, GPU index) -> the version the driver has
        self._reported: set[tuple[str, ...]] = set()   # failures already logged, so a 500 ms sampler logs once
        self._reported_lock = threading.Lock()
        # (GPU index or None, NVML function) -> reads that came back unanswered, for the exporter's error counter
        self._failures: Counter[tuple[int | None, str]] = Counter()

    # -- the one way into NVML -------------------------------------------------------------------------
    def query(self, function: str, *args: Any, gpu: int | None = None, probing: bool = False,
              raise_errors: bool = False, **kwargs: Any) -> Any:
        """`pynvml.<function>(*args, **kwargs)`, its bytes decoded; None (N/A) when NVML cannot answer.

        `gpu` names the GPU the call is about: `NVMLError_GpuIsLost` then raises `GpuLost`, and that GPU's row
        stays lost. A function the driver or the binding lacks is logged once and reads as None, unless the
        caller is `probing` for a version: then it returns `MISSING`, unlogged. `raise_errors` lets every NVML
        error through (initialisation tells "no driver" from other failures).
        """
        pynvml = self._pynvml
        if pynvml is None:
            return None
        try:
            call = getattr(pynvml, function, None)
            if call is None:  # a binding older than the function
                raise pynvml.NVMLError_FunctionNotFound()
            return as_text(call(*args, **kwargs))
        except pynvml.NVMLError_FunctionNotFound:
            if raise_errors:
                raise
            if probing:
                return MISSING
            self._count_failure(gpu, function)
            self._once(logging.WARNING, ("missing", function),
                       "NVML has no %s (the driver and nvidia-ml-py do not match); it reads as N/A", function)
            return None
        except pynvml.NVMLError as exc:
            if raise_errors:
                raise
            self._count_failure(gpu, function)
            if gpu is not None and isinstance(exc, pynvml.NVMLError_GpuIsLost):
                self._row_errors[gpu] = GPU_LOST
                self._once(logging.WARNING, ("lost", str(gpu)), "GPU %d: %s; the other GPUs keep reading", gpu,
                           GPU_LOST)
                raise GpuLost(gpu) from exc
            # NotSupported (power on many boards), NoPermission (other users' processes): expected, per field.
            where = "" if gpu is None else f"GPU {gpu}: "
            self._once(logging.INFO, ("failed", function, type(exc).__name__, str(gpu)), "%s%s failed (%s); N/A",
                       where, function, exc)
            return None

    def _count_failure(self, gpu: int | None, function: str) -> None:
        with self._reported_lock:
            self._failures[(gpu, function)] += 1

    def failures(self) -> dict[tuple[int | None, str], int]:
        """Every read NVML could not answer so far, by (GPU index or None, NVML function); a lost GPU counts once."""
        with self._reported_lock:
            return dict(self._failures)

    def _once(self, level: int, key: tuple[str, ...], message: str, *args: Any) -> None:
        with self._reported_lock:
            if key in self._reported:
                return
            self._reported.add(key)
        log.log(level, message, *args)

    def _versioned(self, family: str, gpu: int, candidates: list[Query]) -> Any:
        """The first of `candidates` (version, function, keyword arguments) the driver has, found once per GPU.

        Probing on every tick would repeat the failing calls each time, and the driver does not change under a
        running process. Any answer but "no such function", an error included, shows the function exists.
        """
        handle = self._handles[gpu]
        remembered = self._versions.get((family, gpu))
        if remembered is not None:
            candidates = [c for c in candidates if c[0] == remembered][:1]
        for position, (version, function, kwargs) in enumerate(candidates):
            last = position == len(candidates) - 1
            value = self.query(function, handle, gpu=gpu, probing=not last, **kwargs)
            if value is MISSING:
                log.debug("GPU %d: NVML has no %s %s; trying an older one", gpu, function, version)
                continue
            self._versions[(family, gpu)] = version
            if position:
                log.debug("GPU %d: %s through %s %s from now on", gpu, family, function, version)
            return value
        return None

    # -- setting up --------------------------------------------------------------------------------------
    def init(self) -> bool:
        with self._lock:  # held throughout: a second thread must wait for the answer, not read a half-built one
            if not self._initialised:
                self._initialised = True
                self.available = self._start()
                if not self.available:
                    log.debug("NVML unavailable (%s): host-only", self.message)
            return self.available

    def _start(self) -> bool:
        try:
            import pynvml
        except ImportError:
            self.message = "nvidia-ml-py is not installed"
            return False
        self._pynvml = pynvml
        try:
            self.query("nvmlInit", raise_errors=True)
            count = int(self.query("nvmlDeviceGetCount", raise_errors=True))
        except pynvml.NVMLError_LibraryNotFound:
            self.message = NO_DRIVER
            return False
        except pynvml.NVMLError as exc:
            self.message = f"NVML failed: {exc}"
            return False
        for index in range(count):
            # Handles are kept: fetching them again every tick is what made other monitors costly.
            try:
                handle = self.query("nvmlDeviceGetHandleByIndex", index, gpu=index)
            except GpuLost:
                handle = None
            if handle is None and index not in self._row_errors:
                self._row_errors[index] = "NVML cannot open this GPU"
            self._handles.append(handle)
        log.debug("NVML: %d GPU(s)", count)
        return True

    # -- what callers read ------------------------------------------------------------------------------
    def driver_version(self) -> str | None:
        if not self.init():
            return None
        version = self.query("nvmlSystemGetDriverVersion")
        return None if version is None else str(version)

    def cuda_driver_version(self) -> str | None:
        """The highest CUDA version the driver supports, e.g. '12.4'."""
        if not self.init():
            return None
        value = self.query("nvmlSystemGetCudaDriverVersion_v2")
        return None if value is None else f"{value // 1000}.{(value % 1000) // 10}"

    def gpus(self) -> list[GpuSnapshot]:
        """Static facts of every GPU, for matching and display; read once, at start."""
        if not self.init():
            return []
        snapshots = []
        for index in range(len(self._handles)):
            snap = GpuSnapshot(index, error=self._row_errors.get(index))
            if snap.error is None:
                try:
                    self._describe(snap)
                except GpuLost:
                    snap.error = GPU_LOST
            snapshots.append(snap)
        return snapshots

    def _describe(self, snap: GpuSnapshot) -> None:
        index, handle = snap.index, self._handles[snap.index]
        snap.name = self.query("nvmlDeviceGetName", handle, gpu=index)
        snap.uuid = self.query("nvmlDeviceGetUUID", handle, gpu=index)
        pci = self.query("nvmlDeviceGetPciInfo", handle, gpu=index)
        if pci is not None:
            snap.pci_bus_id = str(as_text(pci.busId))
        capability = self.query("nvmlDeviceGetCudaComputeCapability", handle, gpu=index)
        if capability is not None:
            snap.compute_capability = f"{capability[0]}.{capability[1]}"
        memory = self._memory(index)
        if memory is not None:
            snap.memory_total_mib = int(memory.total) // MIB
            snap.memory_used_mib = int(memory.used) // MIB
            reserved = getattr(memory, "reserved", None)  # memory v2 only
            snap.memory_reserved_mib = None if reserved is None else int(reserved) // MIB

    def compute_units(self, index: int) -> tuple[ComputeUnits | None, str]:
        """GPU `index`'s SM count, maximum SM clock and compute capability; (None, why) when NVML cannot tell."""
        if not self.init() or index >= len(self._handles) or index in self._row_errors:
            return None, self.message or self._row_errors.get(index) or f"NVML has no GPU {index}"
        pynvml, handle = self._pynvml, self._handles[index]
        assert pynvml is not None
        try:
            capability = self.query("nvmlDeviceGetCudaComputeCapability", handle, gpu=index)
            cores = self.query("nvmlDeviceGetNumGpuCores", handle, gpu=index)
            clock = self.query("nvmlDeviceGetMaxClockInfo", handle, pynvml.NVML_CLOCK_SM, gpu=index)
        except GpuLost:
            return None, GPU_LOST
        if capability is None:
            return None, "NVML does not tell its compute capability"
        arch = f"{capability[0]}.{capability[1]}"
        if not cores or not clock:
            return None, "NVML does not tell its CUDA cores or maximum SM clock"
        if arch not in CORES_PER_SM:
            return None, f"compute capability {arch} is not one this panel knows the SM layout of"
        return ComputeUnits(int(cores) // CORES_PER_SM[arch], int(clock), arch), ""

    def _memory(self, index: int) -> Any:
        # v1 counts memory the driver reserves as used (wrong "used" on R510+ drivers); v2 does not.
        candidates: list[Query] = [("v1", "nvmlDeviceGetMemoryInfo", {})]
        version_2 = getattr(self._pynvml, "nvmlMemory_v2", None)  # absent from older bindings
        if version_2 is not None:
            candidates.insert(0, ("v2", "nvmlDeviceGetMemoryInfo", {"version": version_2}))
        return self._versioned("memory", index, candidates)

    def processes(self, index: int) -> list[GpuProcess] | None:
        """Compute processes on GPU `index`; None if unreadable."""
        if not self.init() or index >= len(self._handles) or index in self._row_errors:
            return None
        try:
            found = self._versioned("processes", index, list(PROCESS_QUERIES))
        except GpuLost:
            return None
        return None if found is None else [self._process(item) for item in found]

    @staticmethod
    def _process(item: Any) -> GpuProcess:
        import psutil

        used = getattr(item, "usedGpuMemory", None)
        try:
            name = psutil.Process(int(item.pid)).name()
        except (psutil.Error, ValueError, OSError):
            # in a container NVML reports host PIDs; a process that ends while psutil reads it can surface as
            # the bare OSError of its vanished /proc files instead of NoSuchProcess
            name = ""
        return GpuProcess(int(item.pid), None if used in (None, UNAVAILABLE) else int(used) // MIB, name)

    def sample(self, index: int) -> GpuSample:
        """Live values of GPU `index`; each unreadable field is None, a lost GPU is one row with `error`."""
        sample = GpuSample(index, error=self._row_errors.get(index))
        if sample.error is not None:
            return sample  # a lost GPU needs a reset or a reboot to come back: asking again only repeats the error
        handle = self._handles[index]
        pynvml = self._pynvml
        assert pynvml is not None
        try:
            memory = self._memory(index)
            if memory is not None:
                sample.memory_used_mib = int(memory.used) / MIB
                sample.memory_total_mib = int(memory.total) / MIB
            rates = self.query("nvmlDeviceGetUtilizationRates", handle, gpu=index)
            sample.utilization = None if rates is None else float(rates.gpu)
            sample.temperature_c = _number(self.query("nvmlDeviceGetTemperature", handle, pynvml.NVML_TEMPERATURE_GPU,
                                                      gpu=index))
            sample.power_w = _number(self.query("nvmlDeviceGetPowerUsage", handle, gpu=index), 1000.0)  # mW
            sample.sm_clock_mhz = _number(self.query("nvmlDeviceGetClockInfo", handle, pynvml.NVML_CLOCK_SM,
                                                     gpu=index))
            sample.memory_clock_mhz = _number(self.query("nvmlDeviceGetClockInfo", handle, pynvml.NVML_CLOCK_MEM,
                                                         gpu=index))
        except GpuLost:
            return GpuSample(index, error=GPU_LOST)  # values read before it fell off are not trusted
        sample.processes = self.processes(index)
        if index in self._row_errors:  # lost while its processes were read
            return GpuSample(index, error=self._row_errors[index])
        return sample


_shared: Nvml | None = None


def shared() -> Nvml:
    global _shared
    if _shared is None:
        _shared = Nvml()
    return _shared
