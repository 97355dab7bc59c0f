"""Structured events between the runtime process and its client, and their wire format.

A run process writes one JSON object per line to a dedicated pipe that TensorFlow's C++ code never
writes into; the client turns the process's raw stdout/stderr into `log` and `placement` events.

Each event type's payload (`Event.data`) is declared once below as a TypedDict. On the wire and in
the run history it stays a plain JSON object, so records written before these declarations still load;
keys added later are optional (`total=False`) for that reason.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any, TypedDict

WARM = "warm"                    # a spare process: TensorFlow imported and configured, not initialized
READY = "ready"                  # TensorFlow initialized: the logical devices (a run's first event)
STARTUP_ERROR = "startup_error"
JOB_STARTED = "job_started"
PROGRESS = "progress"
LOG = "log"
PLACEMENT = "placement"
FALLBACK = "fallback"
METRIC = "metric"
TF_MEMORY = "tf_memory"          # TensorFlow's allocator figures for one logical GPU while a job runs
RESULT = "result"
ERROR = "error"
JOB_FINISHED = "job_finished"
RUNTIME_EXITED = "runtime_exited"
EXITING = "exiting"              # the run's last word: its exit status, then it closes its pipes and exits

# Events that close a job: the client holds them back until its process has exited and its output pipes
# have reached end of file, so every byte the job printed comes before them.
JOB_CLOSING = frozenset({RESULT, ERROR, JOB_FINISHED})


class LogicalDevice(TypedDict, total=False):
    name: str                 # /job:localhost/replica:0/task:0/device:CPU:0
    short_name: str           # /CPU:0
    device_type: str
    memory_limit_mib: int     # only for GPUs split by virtual_gpus


class PhysicalDevice(TypedDict, total=False):
    name: str
    device_type: str
    index: int
    visible: bool
    device_name: str          # GPUs only
    compute_capability: str | None


class CreatedGpu(TypedDict):
    """A logical GPU as TensorFlow's "Created device" line describes it (core.gpus.created_gpu)."""

    logical: str
    physical: int
    memory_mb: int
    name: str
    pci_bus_id: str


class WarmData(TypedDict, total=False):
    tf_version: str
    python: str
    platform: str
    build: dict[str, Any]
    physical: list[PhysicalDevice]
    pid: int
    applied: list[str]
    import_s: float
    config: dict[str, Any]


class ReadyData(TypedDict, total=False):
    tf_version: str
    python: str
    platform: str
    build: dict[str, Any]
    physical: list[PhysicalDevice]
    logical: list[LogicalDevice]
    pid: int
    applied: list[str]        # the tf.config calls made, in order
    import_s: float
    init_s: float
    config: dict[str, Any]
    gpu_devices: list[CreatedGpu]  # added by the client from the runtime's output


class StartupErrorData(TypedDict, total=False):
    stage: str
    type: str
    message: str
    tf_version: str


class JobStartedData(TypedDict):
    job: str
    params: dict[str, Any]


class ProgressData(TypedDict):
    done: float
    total: float
    message: str


class LogData(TypedDict, total=False):
    stream: str               # stdout, stderr, events, panel
    kind: str                 # one of core.placement's line kinds
    text: str
    task: str                 # a cluster task's lines: "worker:0"
    partial: bool             # a line still being drawn with "\r" (a progress bar): it replaces the live line
    source: str               # "script": written by a user's script through sys.stdout/sys.stderr (never TF's)


class PlacementData(TypedDict, total=False):
    op: str
    op_type: str
    kernel: str
    device: str
    short_device: str
    mode: str                 # eager or graph
    stream: str
    line: str
    task: str


class _ScriptPlace(TypedDict, total=False):
    file: str   # a user's script: where it entered tf.device(...)
    line: int


class FallbackData(_ScriptPlace):
    op: str
    requested: str
    requested_short: str
    actual: str
    actual_short: str


class MetricData(TypedDict, total=False):
    """A job's figure; jobs add their own keys beside these (device, dtype, size, …)."""

    name: str
    value: float
    step: int | None


class TfMemoryData(TypedDict):
    device: str               # /GPU:0
    current_mib: float
    peak_mib: float


class ResultData(TypedDict):
    result: Any               # one of core.results' result kinds


class ErrorData(TypedDict, total=False):
    type: str
    message: str
    traceback: str
    last_lines: list[str]


class JobFinishedData(TypedDict, total=False):
    job: str
    status: str               # ok, error, cancelled, crashed
    duration_s: float | None
    returncode: int | None    # the run process's exit status as Popen gives it (negative: killed by a signal)


class ExitingData(TypedDict):
    status: int               # the exit status the process is about to have (negative: by that signal)


class RuntimeExitedData(TypedDict, total=False):
    returncode: int
    signal: str | None
    description: str
    expected: bool
    last_lines: list[str]
    killed_for_cancel: bool


# Every event type and the shape of its data.
PAYLOADS: dict[str, type] = {
    WARM: WarmData, READY: ReadyData, STARTUP_ERROR: StartupErrorData, JOB_STARTED: JobStartedData,
    PROGRESS: ProgressData,
    LOG: LogData, PLACEMENT: PlacementData, FALLBACK: FallbackData, METRIC: MetricData, TF_MEMORY: TfMemoryData,
    RESULT: ResultData, ERROR: ErrorData, JOB_FINISHED: JobFinishedData, RUNTIME_EXITED: RuntimeExitedData,
    EXITING: ExitingData,
}


@dataclass
class Event:
    type: str
    data: dict[str, Any] = field(default_factory=dict)
    job_id: str | None = None
    time: float = field(default_factory=time.time)

    def to_json(self) -> dict[str, Any]:
        return {"type": self.type, "job_id": self.job_id, "time": self.time, "data": self.data}

    def encode(self) -> bytes:
        return (json.dumps(self.to_json(), default=str, separators=(",", ":")) + "\n").encode()

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> Event:
        return cls(type=str(obj["type"]), data=dict(obj.get("data") or {}),
                   job_id=obj.get("job_id"), time=float(obj.get("time", time.time())))

    @classmethod
    def decode(cls, line: bytes | str) -> Event:
        return cls.from_json(json.loads(line))
