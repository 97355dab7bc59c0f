"""Follow one job from submission to outcome, recording it (the run manager feeds it)."""

from __future__ import annotations

import re
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
from tf_device_panel.core.protocol.output_lines import PlacedOp
from tf_device_panel.core.protocol.streams import SCRIPT
from tf_device_panel.core.units import bytes_text

MAX_KEPT_PLACEMENTS = 100_000


# The exception TensorFlow raises when an allocation fails: a run ended in an OOM when its last uncaught exception
# is one. The panel's own jobs say so in their words ("out of memory on /CPU:0 …: OOM when allocating …"); a
# user's script's words are its own, so only its exception's type counts.
OOM_ERROR_TYPES = frozenset({"ResourceExhaustedError"})
WENT_ON_REPORTS = 2  # a job that reported this often after a dump went on from it (a crash then is not the OOM)


def ended_in_oom(job: str, error_type: str | None, message: str | None) -> bool:
    """Whether a run's error is an out-of-memory one, by its type (or, for the panel's own jobs, its message)."""
    if error_type in OOM_ERROR_TYPES:
        return True
    return job != "script" and error_type != "ScriptExit" and oom_parser.is_oom_message(message)


@dataclass
class JobOutcome:
    job: str
    params: JsonObject
    config: JsonObject
    devices: JsonObject | None = None
    status: str = "running"          # running, ok, error, cancelled, crashed
    result: Any = None
    error: RunError | None = None
    placements: list[PlacedOp] = field(default_factory=list)   # the first MAX_KEPT_PLACEMENTS of the run
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
    oom_earlier: str | None = None     # an out-of-memory error the run went on after (not what ended it)
    peaks: RunPeaks = field(default_factory=RunPeaks)  # the allocator's peak per device, the process's RSS peak

    @property
    def finished(self) -> bool:
        return self.status != "running"

    def to_json(self) -> dict[str, object]:
        return {
            "job": self.job, "status": self.status, "result": self.result, "params": self.params,
            "placements": [placed.record_json() for placed in self.placements], "fallbacks": self.fallbacks,
            "error": self.error.to_json() if self.error is not None else None,
            "config": self.config, "devices": self.devices, "duration_s": self.duration_s,
            "run_id": self.run_id, "record_problem": self.record_problem,
            "cancel": self.cancel.to_json() if self.cancel is not None else None, "oom": self.oom,
            "oom_earlier": self.oom_earlier,
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
        self._started_at = time.time()  # a script's stderr: TensorFlow's log lines are from this run on
        self._lock = threading.RLock()
        self._dumps = oom_parser.DumpCollector()  # the allocator's dumps on TF's stderr, for an OOM's explanation
        self._reports_after_dump = 0  # the job's progress and metrics since the last dump ended
        self._dumps_seen = 0
        self._cpu_cap_mib = config.cpu_memory_limit_mib
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
        self._watch_dumps(event)
        outcome.peaks.take(event)
        match event:
            case events.Ready():
                outcome.devices = event.payload()
                if self.recorder is not None:
                    self.recorder.summary.devices = outcome.devices
            case events.Placement(op=op, op_type=op_type, device=device, short_device=short_device, mode=mode):
                outcome.placement_counts[(op_type, short_device)] += 1
                if len(outcome.placements) < MAX_KEPT_PLACEMENTS:
                    outcome.placements.append(PlacedOp(op=op, op_type=op_type, device=device,
                                                       short_device=short_device, mode=mode))
            case events.Fallback():
                outcome.fallbacks.append(event.payload())
            case events.Metric():
                outcome.metrics.append(event.payload())
            case events.Result(result=result):
                outcome.result = result
            case events.Error(error_type=error_type, message=message, traceback=trace) if event.job_id is not None:
                outcome.error = RunError(type=error_type or "Error", message=message, traceback=trace or None)
                if error_type == "RuntimeExited":  # the panel's word that the process died during the job
                    self._judge_death()
                elif ended_in_oom(outcome.job, error_type, message):
                    self._explain_oom(message)
                else:
                    self._note_earlier_oom()
            case events.JobFinished(status=status, returncode=returncode, duration_s=duration_s):
                outcome.status = status or "error"
                outcome.returncode = returncode
                outcome.duration_s = duration_s or (time.monotonic() - self._started)
                self._finish()
            case events.RuntimeExited(returncode=returncode, description=description):
                if outcome.error is None:
                    self._judge_death()
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

    def _watch_dumps(self, event: Event) -> None:
        """The allocator's dumps, from TensorFlow's stderr (in a script's run, the script's stderr, where the C++ log
        goes: there only TensorFlow's own allocator lines, written during this run, open one; a script's stdout is its
        text, whatever it says), and whether the job went on after the last one: progress or metrics it reported since,
        on the events pipe. (Not its output: stdout is written by blocks, and a block from before the dump came after
        it; and two reports, not one: a report written just before the dump may be read just after it.)"""
        match event:
            case events.Log(stream="stderr", text=text, source=source):
                self._dumps.feed(text, self._started_at if source == SCRIPT else None)
                if self._dumps.dumps != self._dumps_seen:
                    self._dumps_seen, self._reports_after_dump = self._dumps.dumps, 0
            case events.Progress() | events.Metric() if self._dumps.lines and not self._dumps.open:
                self._reports_after_dump += 1

    def _judge_death(self) -> None:
        """The process died during the job. TensorFlow can die of an OOM instead of raising it (a oneDNN kernel's
        SIGSEGV after its dump): the dump is the cause when the process died in it or right after it, the job
        silent since; an earlier one the job went on from is noted."""
        if self.outcome.oom is not None or not self._dumps.lines:
            return
        if self._dumps.open or self._reports_after_dump < WENT_ON_REPORTS:
            self._explain_oom(None)
        else:
            self._note_earlier_oom()

    def _explain_oom(self, message: str | None) -> None:
        """An error that is an out-of-memory one (by its type, or after an allocator's dump) explained."""
        if not (oom_parser.is_oom_message(message) or self._dumps.lines):
            return
        self.outcome.oom = self._explained(message)

    def _explained(self, message: str | None) -> OomReport | None:
        if not message:  # the error TensorFlow logged with its dump, e.g. "OP_REQUIRES failed … RESOURCE_EXHAUSTED"
            message = next((line for line in reversed(self._dumps.lines) if "OOM when allocating" in line), None)
        params = self.outcome.params
        batch = params.get("batch_per_replica")
        return oom_parser.explain(self._dumps.lines, message, growth=self._growth, cut_lines=self._dumps.cut,
                                  batch_size=batch if isinstance(batch, int) else None,
                                  find_batch=self._find_batch(), run_needs_bytes=self._run_needs_bytes())

    def _find_batch(self) -> oom_parser.FindBatch | None:
        """fit-batch's parameters for this run's work: a user's script, or the fit job's model, under this run's
        limit (the dump's, where it printed one). None for work whose batch fit-batch cannot search."""
        params, job = self.outcome.params, self.outcome.job
        limit = next((line for line in self._dumps.lines if line.lstrip().startswith("Limit:")), None)
        budget = oom_parser.ceil_mib(oom_parser.size_bytes(limit.split(":", 1)[1])) if limit else self._cpu_cap_mib
        found: oom_parser.FindBatch = {"budget_mib": budget} if budget else {}
        gpu = re.search(r"Allocator \(GPU_(\d+)_bfc\)", self._dumps.lines[0]) if self._dumps.lines else None
        if gpu is not None:  # the GPU whose allocator ran out (fit-batch's default is /CPU:0)
            found["device"] = f"/GPU:{gpu.group(1)}"
        if job == "script":
            return {"script": str(params.get("path", "")), "args": str(params.get("args", "")), **found}
        if job == "fit" and budget:
            return {"model": str(params.get("model", "dense")), "image_size": int(params.get("image_size", 32)),
                    **found}
        return None

    def _run_needs_bytes(self) -> int | None:
        """What the whole run allocates, where the job says it: the memory job's steps."""
        params = self.outcome.params
        if self.outcome.job != "memory":
            return None
        steps, step_mib = params.get("steps", 8), params.get("step_mib", 64)
        if not (isinstance(steps, int) and isinstance(step_mib, int)):
            return None
        return steps * step_mib * oom_parser.MIB

    def _note_earlier_oom(self) -> None:
        """The run ended otherwise after an OOM it went on from (a script that caught ResourceExhaustedError and
        tried a smaller batch): said as earlier and recovered, never as the cause."""
        if not self._dumps.lines:
            return
        earlier = self._explained(None)
        request = f" ({bytes_text(earlier['request_bytes'])} requested)" if earlier and "request_bytes" in earlier \
            else ""
        device = (earlier or {}).get("short_device") or "a device"
        self.outcome.oom_earlier = (f"an out-of-memory error on {device}{request} came earlier in this run, and the "
                                    "run went on after it: it is not what ended the run")
        if self.recorder is not None:  # the record keeps the note among the run's lines
            self.recorder.append(events.Log(stream="panel", kind="warning", text=self.outcome.oom_earlier,
                                            job_id=self.outcome.job_id))

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
