"""A run's record as typed values: what run.json holds, decoded once where it is read (`RunSummary.from_json`) and
encoded once where it is written (`to_json`); everything else reads attributes.

Records written by every earlier version still load: fields were only ever added (`client_pid`, `returncode`,
`job_id`, `cancel`, `oom`, `output`, `incomplete`, `peaks` came later), so a missing one takes its default. A
field with the wrong type raises `SummaryError` naming it; a field this version does not know is kept as it is
(`RunSummary.unknown`) and written back unchanged.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from tf_device_panel.core.oom import OomReport
from tf_device_panel.core.protocol.events import JobFinished, JsonObject, TfMemory
from tf_device_panel.core.text import clip

MAX_PID = 2**31 - 1        # pid_t's range; a pid above the system's pid_max is simply not running
TAIL_FILE = re.compile(r"output\.tail\.\d+")


class SummaryError(ValueError):
    """Why a run.json cannot be used: one line, for the 'unreadable' row."""


def json_type(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true/false"
    return {str: "a string", int: "a number", float: "a number", list: "a list", dict: "an object"}.get(
        type(value), type(value).__name__)


def is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def is_whole(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_time(value: object) -> bool:
    """Seconds since 1970 that a clock can show (time.localtime fails past about the year 10^9)."""
    return is_number(value) and 0 <= value < 2**36  # type: ignore[operator]


@dataclass(frozen=True)
class RunError:
    """Why a run failed: the exception's type and message (and the job's traceback, when it raised one)."""

    type: str
    message: str
    traceback: str | None = None

    @classmethod
    def from_json(cls, data: Mapping[str, object]) -> RunError:
        trace = data.get("traceback")
        return cls(type=str(data.get("type") or "Error"), message=str(data.get("message", "")),
                   traceback=str(trace) if trace else None)

    def to_json(self) -> dict[str, str]:
        data = {"type": self.type, "message": self.message}
        if self.traceback:
            data["traceback"] = self.traceback
        return data


@dataclass
class Cancel:
    """Who asked a job to stop (`by`: the first to ask) and how it was stopped (`how`: the latest step); `signal`,
    the signal that asked, if one did."""

    by: str
    how: str
    signal: int | None = None

    @classmethod
    def from_json(cls, data: Mapping[str, object]) -> Cancel:
        signum = data.get("signal")
        return cls(by=str(data.get("by", "")), how=str(data.get("how", "")),
                   signal=signum if isinstance(signum, int) and not isinstance(signum, bool) else None)

    def to_json(self) -> dict[str, str | int]:
        data: dict[str, str | int] = {"by": self.by, "how": self.how}
        if self.signal is not None:
            data["signal"] = self.signal
        return data


@dataclass
class TailSegment:
    """One kept piece of a long run's output past half the record's cap: its file, where it starts in the output
    (bytes), and what it holds."""

    file: str
    start: int
    lines: int = 0
    bytes: int = 0

    @classmethod
    def from_json(cls, data: object) -> TailSegment:
        if not (isinstance(data, dict) and isinstance(data.get("file"), str) and TAIL_FILE.fullmatch(data["file"])
                and is_whole(data.get("start")) and data["start"] >= 0):
            raise ValueError("a tail segment")
        lines, size = data.get("lines", 0), data.get("bytes", 0)  # only the writer counts with these
        return cls(file=data["file"], start=data["start"], lines=lines if is_whole(lines) else 0,
                   bytes=size if is_whole(size) else 0)

    def to_json(self) -> dict[str, str | int]:
        return {"file": self.file, "start": self.start, "lines": self.lines, "bytes": self.bytes}


@dataclass(frozen=True)
class OutputRecord:
    """The recorded output's size, the lines dropped between its head and its tail, and the tail's segments."""

    bytes: int = 0
    lines: int = 0
    dropped_lines: int = 0
    cap_bytes: int = 0
    tail: tuple[TailSegment, ...] = ()

    @classmethod
    def from_json(cls, data: object) -> OutputRecord:
        if not isinstance(data, dict):
            raise ValueError("an object")
        sizes = [data.get(key, 0) for key in ("bytes", "lines", "dropped_lines", "cap_bytes")]
        if not all(is_number(size) for size in sizes):
            raise ValueError("numbers")
        tail = data.get("tail", [])
        if not isinstance(tail, list):
            raise ValueError("a list of segments")
        size, lines, dropped, cap = (int(size) for size in sizes)
        return cls(bytes=size, lines=lines, dropped_lines=dropped, cap_bytes=cap,
                   tail=tuple(TailSegment.from_json(segment) for segment in tail))

    def to_json(self) -> dict[str, object]:
        return {"bytes": self.bytes, "lines": self.lines, "dropped_lines": self.dropped_lines,
                "cap_bytes": self.cap_bytes, "tail": [segment.to_json() for segment in self.tail]}


@dataclass
class RunPeaks:
    """A run's memory peaks: the allocator's per device (MiB: the largest `tf_memory` peak the run reported) and
    its run process's peak resident memory (MiB, Linux's VmHWM as the job ended; None after a crash).

    `take` is the one reader of peaks from events: the recorder keeps them as the run goes (written into run.json
    at its end), so does the run's outcome (`run --json`, which fit-batch and share read for each of their runs),
    and a record written before run.json kept them is read through it once more
    (`core.client.run_memory.events_peaks`)."""

    allocator_mib: dict[str, float] = field(default_factory=dict)
    rss_mib: float | None = None

    def take(self, event: object) -> None:
        match event:
            case TfMemory(device=device, peak_mib=peak) if is_number(peak):
                self.allocator_mib[device] = max(self.allocator_mib.get(device, 0.0), float(peak))
            case JobFinished(rss_peak_mib=peak) if is_number(peak):
                self.rss_mib = max(self.rss_mib or 0.0, float(peak))  # type: ignore[arg-type]

    @property
    def empty(self) -> bool:
        return not self.allocator_mib and self.rss_mib is None

    @classmethod
    def from_json(cls, data: object) -> RunPeaks:
        if not isinstance(data, dict):
            raise ValueError("an object")
        allocator, rss = data.get("allocator_mib", {}), data.get("rss_mib")
        if not (isinstance(allocator, dict) and all(isinstance(k, str) and is_number(v) for k, v in allocator.items())
                and (rss is None or is_number(rss))):
            raise ValueError("numbers")
        return cls(allocator_mib={device: float(mib) for device, mib in allocator.items()},
                   rss_mib=None if rss is None else float(rss))

    def to_json(self) -> dict[str, object]:
        return {"allocator_mib": dict(sorted(self.allocator_mib.items())), "rss_mib": self.rss_mib}


# What run.json holds from the run's start, and what it adds (null or not) when the run finishes.
STARTED_FIELDS = ("run_id", "job", "params", "config", "devices", "status", "started", "client_pid")
OUTCOME_FIELDS = ("result", "error", "duration_s", "returncode", "oom", "fallbacks", "placement_counts", "peaks")


@dataclass
class RunSummary:
    """One run as run.json records it (its row in the history). The recorder updates it as the run goes."""

    run_id: str
    job: str
    status: str
    started: float
    # Parameters, configuration and devices stay the JSON their owners wrote (the job's spec, DeviceConfig.to_json,
    # the Ready event's payload), decoded by those owners where they are used.
    params: JsonObject = field(default_factory=dict)
    config: JsonObject | None = None
    devices: JsonObject | None = None
    client_pid: int | None = None
    job_id: str | None = None
    finished: float | None = None
    duration_s: float | None = None
    returncode: int | None = None
    result: object = None
    error: RunError | None = None
    cancel: Cancel | None = None
    oom: OomReport | None = None       # an out-of-memory end explained
    fallbacks: list[JsonObject] = field(default_factory=list)
    placement_counts: list[list[object]] = field(default_factory=list)  # [op_type, device, count]
    output: OutputRecord | None = None
    peaks: RunPeaks | None = None       # memory peaks, kept at the run's end (None: a record from before)
    incomplete: str | None = None       # why the record is incomplete (a write failed)
    unknown: JsonObject = field(default_factory=dict)  # fields this version does not know, kept as they were
    # The fields run.json writes even when they hold nothing, in its order: those a record was read with, or
    # those the recorder has written so far.
    shown: tuple[str, ...] = STARTED_FIELDS

    @classmethod
    def from_json(cls, data: JsonObject, run_id: str = "") -> RunSummary:
        """run.json's object checked field by field (SummaryError names the first wrong one); `run_id`, the
        folder's name, where the object has none."""
        for name in REQUIRED:
            if name not in data:
                raise SummaryError(f"run.json has no {name!r}")
        for name, (ok, wanted) in _FIELDS.items():
            if name in data and not ok(data[name]):
                raise SummaryError(f"run.json: {name!r} must be {wanted}, got {clip(repr(data[name]), 60)}")
        error, cancel, output = data.get("error"), data.get("cancel"), data.get("output")
        finished, duration = data.get("finished"), data.get("duration_s")
        return cls(
            run_id=str(data.get("run_id") or run_id), job=str(data["job"]), status=str(data["status"]),
            started=float(data["started"]),
            params=dict(data.get("params") or {}),
            config=data.get("config"), devices=data.get("devices"),
            client_pid=data.get("client_pid"), job_id=data.get("job_id"),
            finished=float(data["finished"]) if is_number(finished) else None,
            duration_s=float(data["duration_s"]) if is_number(duration) else None,
            returncode=data.get("returncode"), result=data.get("result"),
            error=RunError.from_json(error) if isinstance(error, dict) else None,
            cancel=Cancel.from_json(cancel) if isinstance(cancel, dict) else None,
            oom=data["oom"] if isinstance(data.get("oom"), dict) else None,
            fallbacks=list(data.get("fallbacks") or []),
            placement_counts=list(data.get("placement_counts") or []),
            output=OutputRecord.from_json(output) if output is not None else None,
            peaks=RunPeaks.from_json(data["peaks"]) if data.get("peaks") is not None else None,
            incomplete=data.get("incomplete"),
            unknown={key: value for key, value in data.items() if key not in KNOWN}, shown=tuple(data))

    def to_json(self) -> dict[str, object]:
        """run.json's object: the fields in `shown`, in that order (null where they hold nothing), then every other
        field that holds something. A record read back is written as it was read; `runs --json` prints it so."""
        fields: dict[str, object] = {
            "run_id": self.run_id, "job": self.job, "params": dict(self.params), "config": self.config,
            "devices": self.devices, "status": self.status, "started": self.started, "client_pid": self.client_pid,
            "job_id": self.job_id, "result": self.result,
            "error": self.error.to_json() if self.error is not None else None,
            "duration_s": self.duration_s, "returncode": self.returncode, "oom": self.oom,
            "fallbacks": self.fallbacks, "placement_counts": self.placement_counts,
            "cancel": self.cancel.to_json() if self.cancel is not None else None,
            "output": self.output.to_json() if self.output is not None else None,
            "peaks": self.peaks.to_json() if self.peaks is not None else None,
            "finished": self.finished, "incomplete": self.incomplete, **self.unknown}
        data = {key: fields[key] for key in self.shown if key in fields}
        data.update((key, value) for key, value in fields.items() if key not in data and _holds_something(value))
        return data

    def show(self, *keys: str) -> None:
        """Write these fields from now on, null or not (the outcome's fields, once the run finished)."""
        self.shown = (*self.shown, *(key for key in keys if key not in self.shown))


def _holds_something(value: object) -> bool:
    return value is not None and not (isinstance(value, str | list | dict) and not value)


def _output_ok(value: object) -> bool:
    try:
        OutputRecord.from_json(value)
    except (ValueError, TypeError):
        return False
    return True


def _peaks_ok(value: object) -> bool:
    try:
        RunPeaks.from_json(value)
    except (ValueError, TypeError):
        return False
    return True


# field -> (check, what it must be); a missing field is fine unless REQUIRED names it
_FIELDS: dict[str, tuple[Callable[[Any], bool], str]] = {
    "run_id": (lambda v: isinstance(v, str), "a string"),
    "job": (lambda v: isinstance(v, str), "a string"),
    "status": (lambda v: isinstance(v, str) and bool(v), "a non-empty string"),
    "started": (_is_time, "a time in seconds since 1970"),
    "finished": (_is_time, "a time in seconds since 1970"),
    "duration_s": (lambda v: v is None or is_number(v), "a number of seconds or null"),
    "client_pid": (lambda v: is_whole(v) and 0 < v <= MAX_PID, f"a whole number from 1 to {MAX_PID}"),
    "returncode": (lambda v: v is None or is_whole(v), "a whole number or null"),
    "params": (lambda v: isinstance(v, dict), "an object"),
    "config": (lambda v: v is None or isinstance(v, dict), "an object or null"),
    "devices": (lambda v: v is None or isinstance(v, dict), "an object or null"),
    "error": (lambda v: v is None or (isinstance(v, dict) and isinstance(v.get("message", ""), str)),
              "null or an object with a string 'message'"),
    "job_id": (lambda v: v is None or isinstance(v, str), "a string or null"),
    "incomplete": (lambda v: isinstance(v, str), "a string"),
    "cancel": (lambda v: isinstance(v, dict) and all(isinstance(v.get(k, ""), str) for k in ("by", "how")),
               "an object with strings 'by' and 'how'"),
    "fallbacks": (lambda v: isinstance(v, list), "a list"),
    "placement_counts": (lambda v: isinstance(v, list), "a list"),
    "output": (lambda v: v is None or _output_ok(v), "null or the output's sizes and tail segments"),
    "peaks": (lambda v: v is None or _peaks_ok(v), "null or an object of memory peaks in MiB"),
}
REQUIRED = ("job", "status", "started")
KNOWN = {*_FIELDS, "result", "oom"}
