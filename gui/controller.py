"""The window's link to its run processes: a warm spare per configuration, the run in progress, the devices.

Every run gets a fresh process. The controller keeps one *spare* for the applied configuration, already
started, TensorFlow imported and configured but not initialized; Run hands the job to it and at once starts
warming the next spare. Apply replaces the spare. The device list comes from a short describe run of the
configuration (cached per configuration), or from a run's own `ready` event.

Events arrive on the processes' reader threads; they are recorded there (run history) and buffered.
A pump thread emits the buffer as one `eventsArrived` batch every 50 ms, so a flood of placement
lines reaches widgets as a few large updates. The pump sends the next batch only once the window has
taken the last one (`batch_done`), so batches never pile up in Qt's queue and the event loop always
gets to run between them. Nothing here blocks the GUI thread: stopping processes happens on helper threads.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

from PySide6.QtCore import QObject, Signal
from tf_device_panel.core.client.history import RunHistory
from tf_device_panel.core.client.runtime import (
    BUSY,
    EXITED,
    READY,
    STARTING,
    RuntimeProcess,
    RuntimeUnavailable,
    cached_devices,
    remember_devices,
)
from tf_device_panel.core.client.session import JobRun
from tf_device_panel.core.config import DeviceConfig
from tf_device_panel.core.protocol import events
from tf_device_panel.core.protocol.events import Event, make_event
from tf_device_panel.core.protocol.streams import split_lines

BATCH_INTERVAL_S = 0.05
MAX_BATCH = 4000          # events per signal: one batch is a bounded amount of GUI work
MAX_BUFFERED = 100_000    # past this, the oldest raw log lines are skipped (the run history keeps them)
ACK_WAIT_S = 1.0          # how long the pump waits for the window to take a batch before sending more
STOP_TIMEOUT_S = 5.0
CANCEL_GRACE_S = 5.0
SPARE, DESCRIBE = "spare", "describe"  # a run's process starts as a spare


class RuntimeController(QObject):
    eventsArrived = Signal(list)         # list[Event], in order, on the GUI thread
    stateChanged = Signal(str)           # not started / starting / ready / busy / exited
    jobFinished = Signal(object)         # JobOutcome
    problem = Signal(str)                # a message for the user

    def __init__(self, history: RunHistory | None = None, parent: QObject | None = None, *,
                 cancel_grace_s: float = CANCEL_GRACE_S, stop_timeout_s: float = STOP_TIMEOUT_S):
        super().__init__(parent)
        self.history = history or RunHistory()
        # How long a cancelled job may take to stop before its process is killed, and how long a process
        # may take to stop; settable so that tests need not wait out the defaults.
        self.cancel_grace_s = cancel_grace_s
        self.stop_timeout_s = stop_timeout_s
        self.spare: RuntimeProcess | None = None       # warm (or warming) for the applied configuration
        self.current: RuntimeProcess | None = None     # the process of the last job handed over
        self.describer: RuntimeProcess | None = None
        self.devices: dict[str, Any] | None = None     # the applied configuration's devices, once known
        self.device_lines: list[str] = []              # the output of the run that described them
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
    def running(self) -> bool:
        """A job is in progress (its process may outlive its outcome by the kernel's teardown, tens of ms)."""
        return (self.current is not None and self.current.state == BUSY
                and self.job_run is not None and not self.job_run.finished)

    @property
    def runtime(self) -> RuntimeProcess | None:
        """The process the window describes: the run in progress, else the spare."""
        return self.current if self.running else self.spare

    @property
    def state(self) -> str:
        """Ready once the spare is warm and the configuration's devices are known (forms pick from them)."""
        if self.running:
            return BUSY
        if self.spare is None:
            return "not started"
        if self.spare.state == READY and self.devices is None:
            return STARTING
        return self.spare.state

    @property
    def ready_info(self) -> dict[str, Any] | None:
        """The applied configuration's devices (with the spare's pid once it is warm)."""
        if self.devices is None:
            return None
        spare = self.spare.warm_info if self.spare is not None else None
        return {**self.devices, "pid": spare["pid"]} if spare else self.devices

    def status_text(self) -> str:
        """The spare's and the run's state in a few words, for the status bar."""
        if self.running and self.job_run is not None:
            return f"running {self.job_run.outcome.job} (pid {self.current.pid if self.current else '?'})"
        spare = self.spare
        if spare is None:
            return "no runtime"
        if spare.state == STARTING:
            return "spare warming…"
        if spare.state == READY and spare.warm_info is not None:
            logical = [d["short_name"] for d in (self.devices or {}).get("logical", [])]
            count = f"{len(logical)} logical device{'s' if len(logical) != 1 else ''}"
            devices = f", {count}" if logical else ", devices being listed…"
            return f"spare ready (TF {spare.warm_info.get('tf_version')}{devices})"
        if spare.state == EXITED and spare.exit_info is not None:
            if spare.startup_error:
                return "spare exited: " + spare.failure_message()
            return f"spare exited: {spare.exit_info['description']}"
        return f"spare {spare.state}"

    # -- processes -------------------------------------------------------------------------------
    def apply(self, config: DeviceConfig) -> None:
        """A fresh spare (and device list) for `config`; the old processes are stopped in the background."""
        self._generation += 1
        for old in (self.spare, self.describer):
            if old is not None:
                self._retire(old)
        if self.running and self.current is not None:
            self.current.kill(reason="replaced by a new configuration")
        self.spare = self.describer = None
        self.applied = config
        self.devices, self.device_lines = None, []
        cached = cached_devices(config)
        if cached is not None:
            self.devices, self.device_lines = cached
            self._buffer_event(make_event(events.READY, dict(cached[0])))
        else:
            self.describer = self._start(DESCRIBE)
        self.spare = self._start(SPARE)
        self.stateChanged.emit(self.state)

    def _start(self, role: str) -> RuntimeProcess | None:
        assert self.applied is not None
        generation = self._generation
        started: list[RuntimeProcess] = []  # its events come only after start(), when this holds it
        process = RuntimeProcess(self.applied,
                                 on_event=lambda event: self._on_event(generation, role, started[0], event))
        started.append(process)
        try:
            process.start()
        except OSError as exc:
            self.problem.emit(f"Could not start a TensorFlow process: {exc}")
            return None
        return process

    def _retire(self, process: RuntimeProcess) -> None:
        thread = threading.Thread(target=process.stop, args=(self.stop_timeout_s,), name="runtime-stop",
                                  daemon=True)
        thread.start()
        self._retired.append(thread)

    def run(self, job: str, params: Mapping[str, Any]) -> bool:
        spare = self.spare
        if self.running or spare is None or spare.state != READY:
            self.problem.emit(f"The runtime is {self.state}; wait until it is ready, or press Apply to start one.")
            return False
        assert self.applied is not None
        self.job_run = JobRun(job, params, self.applied, self.devices, self.history)
        previous = self.current
        leaving = previous.pid if previous is not None and previous.state != EXITED else None
        # The spare is the run's process, and the run knows its job id, before the job is handed over: its
        # events come on the reader thread and may all be in (a job that fails at once) before submit returns.
        job_id = spare.new_job_id()
        self.job_run.attach(job_id)
        self.current = spare
        try:
            spare.submit(job, params, after_pid=leaving, job_id=job_id)
        except RuntimeUnavailable as exc:
            self.current = previous
            self.job_run.fail("RuntimeUnavailable", str(exc))
            self.problem.emit(str(exc))
            return False
        # The next spare starts warming at once.
        self.spare = self._start(SPARE)
        self.stateChanged.emit(BUSY)
        return True

    def cancel(self) -> bool:
        """Ctrl+C for the running job: SIGINT, then SIGTERM, then kill after `cancel_grace_s`."""
        if self.running and self.current is not None:
            self.current.cancel(self.cancel_grace_s)
            return True
        return False

    def kill_runtime(self) -> None:
        """Runtime → Kill: the running job's process if there is one, else the spare."""
        target = self.current if self.running else self.spare
        if target is not None:
            target.kill(reason="Runtime → Kill runtime was chosen")

    def shutdown(self, timeout: float | None = None) -> None:
        """Stop every process; wait for every helper thread. Called when the window closes."""
        timeout = self.stop_timeout_s if timeout is None else timeout
        self._generation += 1  # no spare's or describe run's events any more; the running job's still count
        processes = [p for p in (self.current, self.spare, self.describer) if p is not None]
        for process in processes:
            if process.state == BUSY:
                process.kill(reason="the window was closed during a run")
        for process in processes:
            process.stop(timeout)
        self.current = self.spare = self.describer = None
        for thread in self._retired:
            thread.join(timeout)
        self._closing.set()
        self._wake.set()
        self._pump.join(timeout)
        # What the pump had no time left to send (the running job's last events): handed over here, on the
        # GUI thread, so the window still sees the job finish.
        with self._lock:
            rest, self._buffer = self._buffer, []
        if rest:
            self._emit_batch([line for event in rest for line in split_lines(event)])

    # -- events ------------------------------------------------------------------------------
    def _on_event(self, generation: int, role: str, process: RuntimeProcess, event: Event) -> None:
        """Runs on a process's reader thread. Events of replaced processes are dropped, except a running
        job's own, which its run record and the window still need."""
        run = self.job_run
        is_current_run = process is self.current
        if is_current_run and run is not None and not run.finished and (
                event.job_id == run.job_id or event.type == events.RUNTIME_EXITED):
            run.feed(event)
        if event.type == events.READY:  # a run's or a describe run's: TensorFlow's devices for this configuration
            remember_devices(process.config, event.data, process.recent_lines())
            if generation == self._generation:
                self.devices, self.device_lines = event.data, process.recent_lines()
        if role == DESCRIBE:
            if event.type == events.WARM:
                try:
                    process.describe()
                except RuntimeUnavailable as exc:
                    self.problem.emit(f"Could not list the devices: {exc}")
            if generation != self._generation:
                return
            if event.type == events.RUNTIME_EXITED and self.devices is None and not process.startup_error:
                # Without the list, runs still work: their own `ready` brings the devices.
                self.devices = {**(process.warm_info or {}), "logical": []}
                self.problem.emit(f"Could not list the devices: {process.failure_message()}")
                self.stateChanged.emit(self.state)
                return
            if event.type != events.READY:
                return
        elif not is_current_run:
            if generation != self._generation or process is not self.spare:
                return
            if event.type == events.RUNTIME_EXITED and event.data.get("expected"):
                return
        elif event.type == events.RUNTIME_EXITED and event.data.get("killed_for_cancel"):
            # Stop had to kill the run's process: the job's outcome says so; the spare is already there.
            event = make_event(event.type, {**event.data, "expected": True}, time=event.time)
        self._buffer_event(event)

    def _buffer_event(self, event: Event) -> None:
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
            notice = make_event(events.LOG, {"stream": "panel", "kind": "warning",
                                        "text": f"… {skipped} log events skipped to keep the window responsive "
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
                self._emit_batch([line for event in batch for line in split_lines(event)])
                self._taken.wait(ACK_WAIT_S)

    def _emit_batch(self, batch: list[Event]) -> None:
        self.eventsArrived.emit(batch)
        for event in batch:
            if event.type in (events.WARM, events.READY, events.RUNTIME_EXITED, events.STARTUP_ERROR):
                self.stateChanged.emit(self.state)
            if event.type == events.JOB_FINISHED and self.job_run is not None \
                    and event.job_id == self.job_run.job_id:
                self.jobFinished.emit(self.job_run.outcome)
                self.stateChanged.emit(self.state)


__all__ = ["BUSY", "EXITED", "READY", "STARTING", "RuntimeController"]
