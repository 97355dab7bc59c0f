"""Follow one job from submission to outcome, recording it; and the one-shot run used by the CLI."""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from tf_device_panel.core.client.history import RunHistory, RunRecorder
from tf_device_panel.core.client.runtime import RuntimeProcess, RuntimeUnavailable
from tf_device_panel.core.config import DeviceConfig
from tf_device_panel.core.protocol import events
from tf_device_panel.core.protocol.events import Event

MAX_KEPT_PLACEMENTS = 100_000


@dataclass
class JobOutcome:
    job: str
    params: dict[str, Any]
    config: dict[str, Any]
    devices: dict[str, Any] | None = None
    status: str = "running"          # running, ok, error, cancelled, crashed
    result: Any = None
    error: dict[str, Any] | None = None
    placements: list[dict[str, Any]] = field(default_factory=list)
    placement_counts: Counter[tuple[str, str]] = field(default_factory=Counter)  # (op_type, device)
    fallbacks: list[dict[str, Any]] = field(default_factory=list)
    metrics: list[dict[str, Any]] = field(default_factory=list)
    duration_s: float | None = None
    run_id: str | None = None
    job_id: str | None = None
    returncode: int | None = None    # the run process's exit status (negative: killed by that signal)
    record_problem: str | None = None  # what of the run's record could not be written (it is incomplete)

    @property
    def finished(self) -> bool:
        return self.status != "running"

    def to_json(self) -> dict[str, Any]:
        return {
            "job": self.job, "status": self.status, "result": self.result, "params": self.params,
            "placements": self.placements, "fallbacks": self.fallbacks, "error": self.error,
            "config": self.config, "devices": self.devices, "duration_s": self.duration_s,
            "run_id": self.run_id, "record_problem": self.record_problem,
        }


class JobRun:
    """Consumes the events of one job (and its process's meanwhile) into a `JobOutcome`.

    A runtime's reader thread feeds it while the window's thread asks whether it has finished: both go
    through one lock. Once finished, the outcome no longer changes and can be read freely.
    """

    def __init__(self, job: str, params: Mapping[str, Any], config: DeviceConfig,
                 devices: dict[str, Any] | None, history: RunHistory | None = None):
        self.outcome = JobOutcome(job=job, params=dict(params), config=config.to_json(), devices=devices)
        self.recorder: RunRecorder | None = None
        self._started = time.monotonic()
        self._lock = threading.RLock()
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
                self.recorder.summary["job_id"] = job_id

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
        kind = event.type
        if kind == events.READY:
            outcome.devices = event.data
            if self.recorder is not None:
                self.recorder.summary["devices"] = event.data
        elif kind == events.PLACEMENT:
            placed = event.data
            outcome.placement_counts[(placed["op_type"], placed["short_device"])] += 1
            if len(outcome.placements) < MAX_KEPT_PLACEMENTS:
                outcome.placements.append({"op": placed["op"], "op_type": placed["op_type"], "device": placed["device"],
                                           "short_device": placed["short_device"], "mode": placed["mode"]})
        elif kind == events.FALLBACK:
            outcome.fallbacks.append(event.data)
        elif kind == events.METRIC:
            outcome.metrics.append(event.data)
        elif kind == events.RESULT:
            outcome.result = event.data.get("result")
        elif kind == events.ERROR and event.job_id is not None:
            error = event.data
            outcome.error = {"type": error.get("type", "Error"), "message": error.get("message", "")}
            if error.get("traceback"):
                outcome.error["traceback"] = error["traceback"]
        elif kind == events.JOB_FINISHED:
            finished = event.data
            outcome.status = str(finished.get("status", "error"))
            outcome.returncode = finished.get("returncode")
            outcome.duration_s = finished.get("duration_s") or (time.monotonic() - self._started)
            self._finish()
        elif kind == events.RUNTIME_EXITED and not outcome.finished:
            exited = event.data
            outcome.status = "crashed"
            outcome.returncode = exited.get("returncode")
            outcome.error = outcome.error or {"type": "RuntimeExited", "message": exited.get("description", "")}
            self._finish()
        return outcome.finished

    def fail(self, error_type: str, message: str, status: str = "error") -> None:
        """End a run that never reached the runtime (e.g. the configuration was rejected)."""
        with self._lock:
            self.outcome.status = status
            self.outcome.error = {"type": error_type, "message": message}
            self.outcome.duration_s = time.monotonic() - self._started
            self._finish()

    def _finish(self) -> None:
        if self.recorder is not None:
            o = self.outcome
            self.recorder.finish(status=o.status, result=o.result, error=o.error, duration_s=o.duration_s,
                                 returncode=o.returncode,
                                 fallbacks=o.fallbacks,
                                 placement_counts=[[t, d, n] for (t, d), n in o.placement_counts.items()])
            o.record_problem = self.recorder.problem


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def run_job_once(config: DeviceConfig, job: str, params: Mapping[str, Any], *,
                 on_event: Callable[[Event], None] | None = None, history: RunHistory | None = None,
                 cancel: threading.Event | None = None, grace_s: float = 5.0,
                 ready_timeout_s: float = 180.0) -> JobOutcome:
    """Start a run process with `config`, hand it the job, wait for it to exit.

    Events are handled on the reader thread as they are read (printed, recorded), so a slow consumer
    slows the job's writes instead of piling them up. Ctrl+C, SIGTERM and SIGHUP (on the main thread) and
    `cancel` cancel the job; a second one kills it. The run record always ends with a final status.
    """
    run = JobRun(job, params, config, None, history)
    exited = threading.Event()
    submitted = threading.Event()
    signals: list[int] = []

    def handle(event: Event) -> None:
        try:
            if on_event is not None:
                on_event(event)
        finally:
            after_listener(event)

    def after_listener(event: Event) -> None:
        if event.type == events.WARM and not submitted.is_set():
            try:
                run.attach(runtime.submit(job, params))
                submitted.set()
            except RuntimeUnavailable as exc:  # it died between saying warm and now
                run.fail("RuntimeUnavailable", str(exc), status="crashed")
        elif event.type == events.RUNTIME_EXITED:
            try:
                if not run.finished:
                    if runtime.startup_error:
                        run.fail("ConfigRejected", runtime.failure_message())
                    else:
                        run.fail("RuntimeExited", runtime.failure_message(),
                                 status="cancelled" if signals or (cancel and cancel.is_set()) else "crashed")
            finally:
                exited.set()  # whatever went wrong above, the loop below must learn that the run ended
            return
        run.feed(event)

    runtime = RuntimeProcess(config, on_event=handle)
    previous: dict[int, Any] = {}
    if threading.current_thread() is threading.main_thread():
        # Only note the signal here: the loop below acts on it, so no lock is ever held when it lands.
        for signum in STOP_SIGNALS:
            previous[signum] = signal.signal(signum, lambda signum, _frame: signals.append(signum))
    started = time.monotonic()
    acted_on = 0
    killed_at: float | None = None
    try:
        runtime.start()
        while not exited.wait(0.05):
            wanted = len(signals) + (1 if cancel is not None and cancel.is_set() else 0)
            if wanted > acted_on:
                acted_on = wanted
                if acted_on >= 2 or not submitted.is_set():
                    runtime.kill(reason="interrupted twice" if acted_on >= 2 else "cancelled before the job started")
                    killed_at = killed_at or time.monotonic()
                else:
                    runtime.cancel(grace_s)
            if killed_at is not None and time.monotonic() - killed_at > grace_s:
                break  # the reader is stuck (e.g. on a terminal that takes no output): never hang on it
            if not submitted.is_set() and not run.finished and time.monotonic() - started > ready_timeout_s:
                runtime.kill(reason=f"not ready after {ready_timeout_s:.0f} s")
    finally:
        if not exited.is_set():
            runtime.kill(reason="the client is leaving")
        runtime.stop()
        for stop_signal, handler in previous.items():
            with contextlib.suppress(ValueError, TypeError):
                signal.signal(stop_signal, handler)
        if not run.finished:
            run.fail("Interrupted", "the client stopped before the run ended", status="interrupted")
    return run.outcome
