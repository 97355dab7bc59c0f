"""Follow one job from submission to outcome, recording it (the run manager feeds it)."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from tf_device_panel.core import oom as oom_parser
from tf_device_panel.core.client.history import RunHistory, RunRecorder
from tf_device_panel.core.client.records import Cancel, JsonObject, RunError, RunPeaks
from tf_device_panel.core.config import DeviceConfig
from tf_device_panel.core.oom import OomReport
from tf_device_panel.core.protocol import events
from tf_device_panel.core.protocol.events import Event

MAX_KEPT_PLACEMENTS = 100_000


@dataclass(frozen=True)
class PlacedOp:
    """One op's placement as a run's outcome keeps it (the first MAX_KEPT_PLACEMENTS of a run)."""

    op: str
    op_type: str
    device: str
    short_device: str
    mode: str

    def to_json(self) -> dict[str, str]:
        return {"op": self.op, "op_type": self.op_type, "device": self.device, "short_device": self.short_device,
                "mode": self.mode}


@dataclass
class JobOutcome:
    job: str
    params: JsonObject
    config: JsonObject
    devices: JsonObject | None = None
    status: str = "running"          # running, ok, error, cancelled, crashed
    result: Any = None
    error: RunError | None = None
    placements: list[PlacedOp] = field(default_factory=list)
    placement_counts: Counter[tuple[str, str]] = field(default_factory=Counter)  # (op_type, device)
    fallbacks: list[JsonObject] = field(default_factory=list)
    metrics: list[JsonObject] = field(default_factory=list)
    duration_s: float | None = None
    run_id: str | None = None
    job_id: str | None = None
    returncode: int | None = None    # the run process's exit status (negative: killed by that signal)
    record_problem: str | None = None  # what of the run's record could not be written (it is incomplete)
    cancel: Cancel | None = None       # who stopped the job and how (`note_cancel`)
    oom: OomReport | None = None       # an out-of-memory error explained, when the run ended in one
    peaks: RunPeaks = field(default_factory=RunPeaks)  # the allocator's peak per device, the process's RSS peak

    @property
    def finished(self) -> bool:
        return self.status != "running"

    def to_json(self) -> dict[str, object]:
        return {
            "job": self.job, "status": self.status, "result": self.result, "params": self.params,
            "placements": [placed.to_json() for placed in self.placements], "fallbacks": self.fallbacks,
            "error": self.error.to_json() if self.error is not None else None,
            "config": self.config, "devices": self.devices, "duration_s": self.duration_s,
            "run_id": self.run_id, "record_problem": self.record_problem,
            "cancel": self.cancel.to_json() if self.cancel is not None else None, "oom": self.oom,
            "peaks": self.peaks.to_json(),
        }


class JobRun:
    """Consumes the events of one job (and its process's meanwhile) into a `JobOutcome`.

    A runtime's reader thread feeds it while the window's thread asks whether it has finished: both go
    through one lock. Once finished, the outcome no longer changes and can be read freely.
    """

    def __init__(self, job: str, params: Mapping[str, Any], config: DeviceConfig,
                 devices: JsonObject | None, history: RunHistory | None = None):
        self.outcome = JobOutcome(job=job, params=dict(params), config=config.to_json(), devices=devices)
        self.recorder: RunRecorder | None = None
        self._started = time.monotonic()
        self._lock = threading.RLock()
        self._dumps = oom_parser.DumpCollector()  # the allocator's dumps on stderr, for an OOM's explanation
        self._growth = config.memory_growth
        if history is not None:
            self.recorder = history.new_run(job, dict(params), config.to_json(), devices)
            self.outcome.run_id = self.recorder.run_id

    @property
    def finished(self) -> bool:
        with self._lock:
            return self.outcome.finished

    @property
    def job_id(self) -> str | None:
        with self._lock:
            return self.outcome.job_id

    def attach(self, job_id: str) -> None:
        with self._lock:
            self.outcome.job_id = job_id
            if self.recorder is not None:
                self.recorder.summary.job_id = job_id

    def feed(self, event: Event) -> bool:
        """Take one event; returns True once the job has finished. Other jobs' events are ignored."""
        with self._lock:
            return self._feed(event)

    def _feed(self, event: Event) -> bool:
        outcome = self.outcome
        if outcome.finished or (event.job_id is not None and event.job_id != outcome.job_id):
            return outcome.finished
        if self.recorder is not None:
            self.recorder.append(event)
        outcome.peaks.take(event)
        match event:
            case events.Ready():
                outcome.devices = event.payload()
                if self.recorder is not None:
                    self.recorder.summary.devices = outcome.devices
            case events.Placement(op=op, op_type=op_type, device=device, short_device=short_device, mode=mode):
                outcome.placement_counts[(op_type, short_device)] += 1
                if len(outcome.placements) < MAX_KEPT_PLACEMENTS:
                    outcome.placements.append(PlacedOp(op, op_type, device, short_device, mode))
            case events.Fallback():
                outcome.fallbacks.append(event.payload())
            case events.Metric():
                outcome.metrics.append(event.payload())
            case events.Result(result=result):
                outcome.result = result
            case events.Log(stream="stderr", text=text):
                self._dumps.feed(text)
            case events.Error(error_type=error_type, message=message, traceback=trace) if event.job_id is not None:
                outcome.error = RunError(type=error_type or "Error", message=message, traceback=trace or None)
                self._explain_oom(message)
            case events.JobFinished(status=status, returncode=returncode, duration_s=duration_s):
                outcome.status = status or "error"
                outcome.returncode = returncode
                outcome.duration_s = duration_s or (time.monotonic() - self._started)
                self._finish()
            case events.RuntimeExited(returncode=returncode, description=description):
                if outcome.oom is None and self._dumps.lines:  # TensorFlow can die of an OOM (a oneDNN kernel's
                    self._explain_oom(None)                    # SIGSEGV after its dump) instead of raising it
                outcome.status = "crashed"
                outcome.returncode = returncode
                outcome.error = outcome.error or RunError(type="RuntimeExited", message=description)
                self._finish()
        return outcome.finished

    def note_cancel(self, by: str, how: str, signum: int | None = None) -> None:
        """Who asked the job to stop (`by`: the first to ask) and how it was stopped (`how`: the latest step,
        e.g. cancelled, then killed); `signum`, the signal that asked, if one did. The record keeps it."""
        with self._lock:
            if self.outcome.finished:
                return
            if self.outcome.cancel is None:
                self.outcome.cancel = Cancel(by=by, how=how, signal=signum)
            else:
                self.outcome.cancel.how = how

    def _explain_oom(self, message: str | None) -> None:
        """An error that is an out-of-memory one (by its message, or after an allocator's dump) explained."""
        if not (oom_parser.is_oom_message(message) or self._dumps.lines):
            return
        if not message:  # the error TensorFlow logged before it died, e.g. "OP_REQUIRES failed … RESOURCE_EXHAUSTED"
            message = next((line for line in reversed(self._dumps.lines) if "OOM when allocating" in line), None)
        params = self.outcome.params
        batch = params.get("batch_size") or params.get("batch_per_replica")
        self.outcome.oom = oom_parser.explain(self._dumps.lines, message, growth=self._growth,
                                              batch_size=batch if isinstance(batch, int) else None)

    def fail(self, error_type: str, message: str, status: str = "error") -> None:
        """End a run that never reached the runtime (e.g. the configuration was rejected)."""
        with self._lock:
            self.outcome.status = status
            self.outcome.error = RunError(type=error_type, message=message)
            self.outcome.duration_s = time.monotonic() - self._started
            self._finish()

    def _finish(self) -> None:
        o = self.outcome
        if o.cancel is not None:  # how the stop ended
            message = o.error.message if o.error is not None else ""
            if o.status == "ok":
                o.cancel.how = "the job had finished before the stop took effect"
            elif "was killed" in message:
                o.cancel.how = f"killed: {message}"
        if self.recorder is not None:
            self.recorder.finish(status=o.status, result=o.result, error=o.error, duration_s=o.duration_s,
                                 returncode=o.returncode, oom=o.oom,
                                 fallbacks=o.fallbacks,
                                 placement_counts=[[t, d, n] for (t, d), n in o.placement_counts.items()],
                                 cancel=replace(o.cancel) if o.cancel is not None else None)
            o.record_problem = self.recorder.problem
