"""Structured events between a run process and the panel: one frozen dataclass per kind, and their wire format.

A run process writes one JSON object per line to a dedicated pipe that TensorFlow's C++ code never writes
into; the panel turns the process's raw stdout/stderr into `Log` and `Placement` events. Every event is
decoded once, where its pipe (or the run history) is read, into the class of its kind; consumers take them
apart with `match`:

    match event:
        case Placement(op_type=op_type, device=device): ...
        case JobFinished(status=status): ...

On the wire and in the run history an event stays `{"type", "job_id", "time", "data"}` with a plain JSON
object as data, so records written before these classes still load: a key a record lacks takes its field's
default, a key this version does not know is left out (a `Metric`'s own keys are kept in `labels`).
"""

from __future__ import annotations

import dataclasses
import json
import time
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypedDict, TypeVar

from tf_device_panel.core.protocol.output_lines import PlacedOp

# A JSON object passed through as it came: a job's result (core.results reads it), TensorFlow's build info, a
# configuration as JSON (core.config reads it). Never an event's own payload.
JsonObject = Mapping[str, Any]

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


class EventError(ValueError):
    """A line or record that is not an event of a known kind with fields of the right types."""


class LogicalDevice(TypedDict, total=False):
    name: str                 # /job:localhost/replica:0/task:0/device:CPU:0
    short_name: str           # /CPU:0
    device_type: str
    memory_limit_mib: int     # only for GPUs split by virtual_gpus


# tf.sysconfig's build facts that are plain values (CUDA and cuDNN versions, is_cuda_build, …), or {"error": why not}
BuildInfo = dict[str, str | bool | int | list[str]]


class PhysicalDevice(TypedDict, total=False):
    name: str
    device_type: str
    index: int
    visible: bool
    device_name: str          # GPUs only
    compute_capability: str | None
    details_error: str        # why a GPU's model and compute capability could not be read


class CreatedGpu(TypedDict):
    """A logical GPU as TensorFlow's "Created device" line describes it (core.devices.gpus.created_gpu)."""

    logical: str
    physical: int
    memory_mb: int
    name: str
    pci_bus_id: str


class _EnvelopeBase(TypedDict):
    type: str
    job_id: str | None
    time: float
    data: dict[str, Any]      # the event's fields as JSON (`payload`): the wire's own edge


class Envelope(_EnvelopeBase, total=False):
    """An event on the wire and in the run history."""

    at: int                   # the run history's: how much output came before it


@dataclass(frozen=True, kw_only=True)
class Event:
    """What every event has: its kind (TYPE, the wire's "type"), the job it belongs to, and when.

    Its `__repr__`, `__eq__` and `__hash__` are the ones `@dataclass` would write for each kind (its class and
    fields; equal when of the same class with equal fields), written once here for them all: each kind is
    declared with `repr=False, eq=False`, as generating them for fifteen kinds was most of this module's import
    (every run process imports it before it is warm)."""

    TYPE: ClassVar[str] = ""
    job_id: str | None = None
    time: float = field(default_factory=time.time)

    def __repr__(self) -> str:
        shown = ", ".join(f"{item.name}={getattr(self, item.name)!r}" for item in dataclasses.fields(self) if item.repr)
        return f"{type(self).__qualname__}({shown})"

    def _compared(self) -> tuple[Any, ...]:
        return tuple(getattr(self, item.name) for item in dataclasses.fields(self) if item.compare)

    def __eq__(self, other: object) -> bool:
        if other.__class__ is self.__class__:
            return self._compared() == other._compared()
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self._compared())

    @property
    def type(self) -> str:
        return self.TYPE

    def payload(self) -> dict[str, Any]:
        """The wire's "data": every field but job_id and time, fields left at None omitted."""
        data: dict[str, Any] = {}
        for item in dataclasses.fields(self):
            if item.name in ("job_id", "time", "raw"):  # the envelope's own; raw bytes never go on the wire
                continue
            value = getattr(self, item.name)
            unset = value is None or value is False or (isinstance(value, (tuple, Mapping)) and not value)
            if unset and item.name not in _ALWAYS_WRITTEN:
                continue  # an unset flag or an empty list is left out, as records before these classes had it
            data[_WIRE_NAMES.get(item.name, item.name)] = _plain(value)
        return data

    def to_json(self) -> Envelope:
        return {"type": self.TYPE, "job_id": self.job_id, "time": self.time, "data": self.payload()}

    def encode(self) -> bytes:
        """One line of the events pipe."""
        return (json.dumps(self.to_json(), default=str, separators=(",", ":")) + "\n").encode()

    def replace(self: _E, **changes: Any) -> _E:
        return dataclasses.replace(self, **changes)


_E = TypeVar("_E", bound=Event)
# Fields written even when unset: their null or false says something ("no step", "an unexpected exit").
_ALWAYS_WRITTEN = frozenset({"step", "duration_s", "returncode", "signal", "compute_capability", "expected",
                             "killed_for_cancel"})


@dataclass(frozen=True, kw_only=True, repr=False, eq=False)  # Event's own (see there)
class _RuntimeFacts(Event):
    """What `warm` and `ready` both say: the runtime's build, physical devices and configuration."""

    tf_version: str = ""
    python: str = ""
    platform: str = ""
    build: JsonObject = field(default_factory=dict)
    physical: tuple[PhysicalDevice, ...] = ()
    pid: int | None = None
    applied: tuple[str, ...] = ()   # the tf.config calls made, in order
    import_s: float | None = None
    config: JsonObject = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True, repr=False, eq=False)  # Event's own (see there)
class Warm(_RuntimeFacts):
    """A spare process: TensorFlow imported and configured, not initialized."""

    TYPE = WARM

    def as_ready(self) -> Ready:
        """These facts as a ready report that knows no logical devices yet (their listing failed)."""
        return Ready(**{item.name: getattr(self, item.name) for item in dataclasses.fields(self)})


@dataclass(frozen=True, kw_only=True, repr=False, eq=False)  # Event's own (see there)
class Ready(_RuntimeFacts):
    """TensorFlow initialized: the logical devices (a run's first event)."""

    TYPE = READY
    logical: tuple[LogicalDevice, ...] = ()
    init_s: float | None = None
    gpu_devices: tuple[CreatedGpu, ...] = ()   # added by the panel from the runtime's output


@dataclass(frozen=True, kw_only=True, repr=False, eq=False)  # Event's own (see there)
class StartupError(Event):
    """The run process could not get warm: its configuration was refused, or TensorFlow failed to import."""

    TYPE = STARTUP_ERROR
    stage: str = ""
    error_type: str = ""
    message: str = ""
    tf_version: str | None = None
    not_installed: bool = False  # TensorFlow is missing from the run's Python (not a rejected configuration)
    python: str | None = None    # that Python


@dataclass(frozen=True, kw_only=True, repr=False, eq=False)  # Event's own (see there)
class JobStarted(Event):
    """A job began, with the parameters its command gave."""

    TYPE = JOB_STARTED
    job: str
    params: JsonObject = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True, repr=False, eq=False)  # Event's own (see there)
class Progress(Event):
    """How far a job has come: `done` of `total`, and what it is doing."""

    TYPE = PROGRESS
    done: float
    total: float
    message: str = ""


@dataclass(frozen=True, kw_only=True, repr=False, eq=False)  # Event's own (see there)
class Log(Event):
    """Lines of output, or a line the panel says itself (stream "panel")."""

    TYPE = LOG
    stream: str = "stdout"      # stdout, stderr, events, panel
    kind: str = "output"        # one of core.protocol.output_lines' line kinds
    text: str = ""
    task: str | None = None     # a cluster task's lines: "worker:0"
    partial: bool = False       # a line still being drawn with "\r" (a progress bar): it replaces the live line
    source: str | None = None   # "script": written by a user's script through sys.stdout/sys.stderr (never TF's);
    #                             "tensorflow": a line of TensorFlow's C++ log (never the job's console)
    raw: bytes | None = None    # the bytes as printed, where the text shown differs (never on the wire)


@dataclass(frozen=True, kw_only=True, repr=False, eq=False)  # Event's own (see there)
class Placement(Event, PlacedOp):
    """One op placed on a device, from TensorFlow's placement log: the placement's fields (PlacedOp's, first on
    the wire) and where it was logged."""

    TYPE = PLACEMENT
    stream: str = "stderr"
    line: str = ""
    task: str | None = None     # a cluster task's placement: "worker:0"
    raw: bytes | None = None

    @classmethod
    def of(cls, placed: PlacedOp, *, stream: str, line: str, task: str | None = None, raw: bytes | None = None,
           job_id: str | None = None) -> Placement:
        """The event of a parsed placement line."""
        return cls(op=placed.op, op_type=placed.op_type, device=placed.device, short_device=placed.short_device,
                   mode=placed.mode, kernel=placed.kernel, stream=stream, line=line, task=task, raw=raw,
                   job_id=job_id)


@dataclass(frozen=True, kw_only=True, repr=False, eq=False)  # Event's own (see there)
class Fallback(Event):
    """An op that ran elsewhere than the device a `tf.device` asked for."""

    TYPE = FALLBACK
    op: str
    requested: str
    requested_short: str
    actual: str
    actual_short: str
    file: str | None = None     # a user's script: where it entered tf.device(...)
    line: int | None = None


@dataclass(frozen=True, kw_only=True, repr=False, eq=False)  # Event's own (see there)
class Metric(Event):
    """A job's figure; `labels` holds what the job says of it besides (device, dtype, size, …)."""

    TYPE = METRIC
    name: str
    value: float
    step: int | None = None
    labels: JsonObject = field(default_factory=dict)

    def payload(self) -> dict[str, Any]:
        return {**{key: _plain(value) for key, value in self.labels.items()},
                "name": self.name, "value": self.value, "step": self.step}


@dataclass(frozen=True, kw_only=True, repr=False, eq=False)  # Event's own (see there)
class TfMemory(Event):
    """TensorFlow's allocator figures for one logical GPU while a job runs."""

    TYPE = TF_MEMORY
    device: str                 # /GPU:0
    current_mib: float
    peak_mib: float


@dataclass(frozen=True, kw_only=True, repr=False, eq=False)  # Event's own (see there)
class Result(Event):
    """A job's result, one of core.results' kinds."""

    TYPE = RESULT
    result: JsonObject          # one of core.results' result kinds


@dataclass(frozen=True, kw_only=True, repr=False, eq=False)  # Event's own (see there)
class Error(Event):
    """Why a job failed (or was cancelled): its error's type and message, and its traceback if any."""

    TYPE = ERROR
    error_type: str = ""
    message: str = ""
    traceback: str | None = None
    last_lines: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True, repr=False, eq=False)  # Event's own (see there)
class JobFinished(Event):
    """A job ended: its status, how long it took and the process's memory then."""

    TYPE = JOB_FINISHED
    job: str = ""
    status: str = ""            # ok, error, cancelled, crashed
    duration_s: float | None = None
    returncode: int | None = None  # the run process's exit status as Popen gives it (negative: by a signal)
    rss_mib: float | None = None   # the run process's resident memory as its job ended (none after a crash)
    rss_peak_mib: float | None = None  # the run process's peak resident memory (Linux's VmHWM) as its job ended


@dataclass(frozen=True, kw_only=True, repr=False, eq=False)  # Event's own (see there)
class RuntimeExited(Event):
    """The panel's word that a run process exited: its status, and whether that was expected."""

    TYPE = RUNTIME_EXITED
    returncode: int | None = None
    signal: str | None = None
    description: str = ""
    expected: bool = False
    last_lines: tuple[str, ...] = ()
    killed_for_cancel: bool = False


@dataclass(frozen=True, kw_only=True, repr=False, eq=False)  # Event's own (see there)
class Exiting(Event):
    """The run's last word: its exit status, then it closes its pipes and exits."""

    TYPE = EXITING
    status: int                 # the exit status the process is about to have (negative: by that signal)


# Events that close a job: the panel holds them back until its process has exited and its output pipes have
# reached end of file, so every byte the job printed comes before them.
JOB_CLOSING: tuple[type[Event], ...] = (Result, Error, JobFinished)

KINDS: dict[str, type[Event]] = {cls.TYPE: cls for cls in (
    Warm, Ready, StartupError, JobStarted, Progress, Log, Placement, Fallback, Metric, TfMemory, Result, Error,
    JobFinished, RuntimeExited, Exiting)}

# Wire keys that differ from the field's name ("type" is the envelope's own key).
_WIRE_NAMES = {"error_type": "type"}


def _plain(value: Any) -> Any:
    """A field's value as JSON takes it: tuples as lists, mappings as dicts (bytes are dropped by default=str)."""
    if isinstance(value, tuple):
        return [_plain(item) for item in value]
    if isinstance(value, Mapping):
        return {key: _plain(item) for key, item in value.items()}
    return value


def _accepts(hint: Any, value: Any) -> bool:
    origin = typing.get_origin(hint)
    if origin in (types.UnionType, typing.Union):
        return any(_accepts(arm, value) for arm in typing.get_args(hint))
    if hint is type(None):
        return value is None
    if hint is Any:
        return True
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if origin is tuple:
        return isinstance(value, (list, tuple))
    if origin is Mapping or hint is JsonObject:
        return isinstance(value, Mapping)
    return isinstance(value, hint)


_HINTS: dict[type[Event], dict[str, object]] = {}   # each field's type annotation, resolved


def _hints(cls: type[Event]) -> dict[str, object]:
    if cls not in _HINTS:
        _HINTS[cls] = typing.get_type_hints(cls)
    return _HINTS[cls]


def from_json(obj: Any) -> Event:
    """The event an envelope `{"type", "job_id", "time", "data"}` describes; EventError names what is wrong."""
    if not isinstance(obj, Mapping):
        raise EventError("an event is a JSON object")
    kind = obj.get("type")
    cls = KINDS.get(kind) if isinstance(kind, str) else None
    if cls is None:
        raise EventError(f"unknown event type {kind!r}")
    data = obj.get("data") or {}
    job_id, at = obj.get("job_id"), obj.get("time", time.time())
    if not isinstance(data, Mapping):
        raise EventError(f"{kind}: data is not a JSON object")
    if not (job_id is None or isinstance(job_id, str)):
        raise EventError(f"{kind}: job_id is not text")
    if not _accepts(float, at):
        raise EventError(f"{kind}: time is not a number")
    hints = _hints(cls)
    values: dict[str, Any] = {}  # the event's fields, each decoded from the wire and checked against its hint
    known = set()
    for item in dataclasses.fields(cls):
        if item.name in ("job_id", "time", "labels"):
            continue
        key = _WIRE_NAMES.get(item.name, item.name)
        known.add(key)
        if key not in data:
            continue
        value = data[key]
        if not _accepts(hints[item.name], value):
            raise EventError(f"{kind}: {key} is {type(value).__name__}, not {hints[item.name]}")
        if isinstance(value, list):
            value = tuple(value)
        values[item.name] = value
    if cls is Metric:
        values["labels"] = {key: value for key, value in data.items() if key not in known}
    try:
        return cls(job_id=job_id, time=float(at), **values)
    except TypeError as exc:  # a required field missing
        raise EventError(f"{kind}: {exc}") from None


def decode(line: bytes | str) -> Event:
    """One line of the events pipe (or the history's events.jsonl) as its event."""
    try:
        obj = json.loads(line)
    except ValueError as exc:
        raise EventError(f"not JSON ({exc})") from None
    return from_json(obj)
