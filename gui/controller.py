"""The window's link to the runtime: owns a `RuntimeProcess`, delivers its events to the GUI thread.

Events arrive on the runtime's reader thread; they are recorded there (run history) and buffered.
A pump thread emits the buffer as one `eventsArrived` batch every 50 ms, so a flood of placement
lines reaches widgets as a few large updates. The pump sends the next batch only once the window has
taken the last one (`batch_done`), so batches never pile up in Qt's queue and the event loop always
gets to run between them. Starting and stopping runtimes happens off the GUI
thread too: nothing here blocks it.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

from PySide6.QtCore import QObject, Signal
from tf_device_panel.core import events
from tf_device_panel.core.config import DeviceConfig
from tf_device_panel.core.events import Event
from tf_device_panel.core.history import RunHistory
from tf_device_panel.core.runtime import BUSY, EXITED, READY, STARTING, RuntimeProcess, RuntimeUnavailable
from tf_device_panel.core.session import JobRun

BATCH_INTERVAL_S = 0.05
MAX_BATCH = 4000          # events per signal: one batch is a bounded amount of GUI work
MAX_BUFFERED = 100_000    # past this, the oldest raw log lines are skipped (the run history keeps them)
ACK_WAIT_S = 1.0          # how long the pump waits for the window to take a batch before sending more
STOP_TIMEOUT_S = 5.0
CANCEL_GRACE_S = 5.0


class RuntimeController(QObject):
    eventsArrived = Signal(list)         # list[Event], in order, on the GUI thread
    stateChanged = Signal(str)           # not started / starting / ready / busy / exited
    jobFinished = Signal(object)         # JobOutcome
    problem = Signal(str)                # a message for the user

    def __init__(self, history: RunHistory | None = None, parent: QObject | None = None, *,
                 cancel_grace_s: float = CANCEL_GRACE_S, stop_timeout_s: float = STOP_TIMEOUT_S):
        super().__init__(parent)
        self.history = history or RunHistory()
        # How long a cancelled job may take to stop before its runtime is killed (and restarted), and how long
        # a runtime may take to stop; settable so that tests need not wait out the defaults.
        self.cancel_grace_s = cancel_grace_s
        self.stop_timeout_s = stop_timeout_s
        self.runtime: RuntimeProcess | None = None
        self.applied: DeviceConfig | None = None
        self.job_run: JobRun | None = None
        self._buffer: list[Event] = []
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._taken = threading.Event()
        self._closing = threading.Event()
        self._pump = threading.Thread(target=self._pump_loop, name="gui-event-pump", daemon=True)
        self._pump.start()
        self._retired: list[threading.Thread] = []
        self._generation = 0

    @property
    def state(self) -> str:
        return self.runtime.state if self.runtime is not None else "not started"

    @property
    def ready_info(self) -> dict[str, Any] | None:
        return self.runtime.ready_info if self.runtime is not None else None

    # -- runtime lifecycle ---------------------------------------------------------------------
    def apply(self, config: DeviceConfig) -> None:
        """Replace the runtime with a fresh one using `config` (the old one is stopped in the background)."""
        old, self.runtime = self.runtime, None
        if old is not None:
            self._retire(old)
        self.applied = config
        self._generation += 1
        generation = self._generation
        runtime = RuntimeProcess(config, on_event=lambda event: self._on_event(generation, event))
        self.runtime = runtime
        try:
            runtime.start()
        except OSError as exc:
            self.problem.emit(f"Could not start the TensorFlow runtime: {exc}")
        self.stateChanged.emit(runtime.state)

    def _retire(self, runtime: RuntimeProcess) -> None:
        if self.job_run is not None and not self.job_run.finished:
            runtime.kill(reason="replaced by a new configuration")
        thread = threading.Thread(target=runtime.stop, args=(self.stop_timeout_s,), name="runtime-stop",
                                  daemon=True)
        thread.start()
        self._retired.append(thread)

    def run(self, job: str, params: Mapping[str, Any]) -> bool:
        runtime = self.runtime
        if runtime is None or runtime.state != READY:
            self.problem.emit(f"The runtime is {self.state}; wait until it is ready, or press Apply to start one.")
            return False
        assert self.applied is not None
        self.job_run = JobRun(job, params, self.applied, runtime.ready_info, self.history)
        try:
            self.job_run.attach(runtime.submit(job, params))
        except RuntimeUnavailable as exc:
            self.job_run.fail("RuntimeUnavailable", str(exc))
            self.problem.emit(str(exc))
            return False
        self.stateChanged.emit(BUSY)
        return True

    def cancel(self) -> bool:
        """Ask the running job to stop (its runtime is killed, and restarted, if it has not in `cancel_grace_s`)."""
        if self.runtime is not None and self.runtime.state == BUSY:
            self.runtime.cancel(self.cancel_grace_s)
            return True
        return False

    def kill_runtime(self) -> None:
        if self.runtime is not None:
            self.runtime.kill(reason="Runtime → Kill runtime was chosen")

    def shutdown(self, timeout: float | None = None) -> None:
        """Stop the job and the runtime; wait for every helper thread. Called when the window closes."""
        timeout = self.stop_timeout_s if timeout is None else timeout
        runtime, self.runtime = self.runtime, None
        if runtime is not None:
            if runtime.state == BUSY:
                runtime.kill(reason="the window was closed during a run")
            runtime.stop(timeout)
        for thread in self._retired:
            thread.join(timeout)
        self._closing.set()
        self._wake.set()
        self._pump.join(timeout)

    # -- events ------------------------------------------------------------------------------
    def _on_event(self, generation: int, event: Event) -> None:
        """Runs on a runtime's reader thread. Events of replaced runtimes are dropped."""
        if generation != self._generation:
            return
        run = self.job_run
        if run is not None and not run.finished and (event.job_id == run.job_id
                                                     or event.type == events.RUNTIME_EXITED):
            run.feed(event)
        with self._lock:
            self._buffer.append(event)
            if len(self._buffer) > MAX_BUFFERED:
                self._skip_old_log_lines()
        self._wake.set()

    def _skip_old_log_lines(self) -> None:
        """Keep the buffer bounded when output arrives faster than the window can draw it."""
        half = len(self._buffer) // 2
        kept = [e for e in self._buffer[:half] if e.type != events.LOG]
        skipped = half - len(kept)
        if skipped:
            notice = Event(events.LOG, {"stream": "panel", "kind": "warning",
                                        "text": f"… {skipped} log lines skipped to keep the window responsive "
                                                "(the run history has them all)"})
            self._buffer = [*kept, notice, *self._buffer[half:]]

    def batch_done(self) -> None:
        """Called by the window when it has handled an `eventsArrived` batch."""
        self._taken.set()

    def _pump_loop(self) -> None:
        while not self._closing.is_set():
            self._wake.wait()
            with self._lock:
                backlog = len(self._buffer) >= MAX_BATCH
            if not backlog:
                self._closing.wait(BATCH_INTERVAL_S)  # gather what else arrives meanwhile
            with self._lock:
                batch, self._buffer = self._buffer[:MAX_BATCH], self._buffer[MAX_BATCH:]
                if not self._buffer:
                    self._wake.clear()
            if batch:
                self._taken.clear()
                self._emit_batch(batch)
                self._taken.wait(ACK_WAIT_S)

    def _emit_batch(self, batch: list[Event]) -> None:
        self.eventsArrived.emit(batch)
        for event in batch:
            if event.type in (events.READY, events.RUNTIME_EXITED, events.STARTUP_ERROR):
                self.stateChanged.emit(self.state if event.type != events.RUNTIME_EXITED else EXITED)
            if event.type == events.JOB_FINISHED and self.job_run is not None \
                    and event.job_id == self.job_run.job_id:
                self.jobFinished.emit(self.job_run.outcome)
                self.stateChanged.emit(self.state)


__all__ = ["BUSY", "EXITED", "READY", "STARTING", "RuntimeController"]
