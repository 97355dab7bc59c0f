"""The window's adapter to its `RunManager`: the manager's news, moved onto the GUI thread as Qt signals.

The run lifecycle (spare, run, record, restart policies) is the manager's (core.client.run_manager); the
batching and backpressure of events is the pump's (core.client.event_pump). What is left here is Qt: the
pump's batches and the manager's callbacks come on background threads and leave as queued signals. The window
reads the run's state from `manager`; nothing here blocks the GUI thread.
"""

from __future__ import annotations

from PySide6.QtCore import QObject, QThread, Signal
from tf_device_panel.core.client.event_pump import EventPump
from tf_device_panel.core.client.history import RunHistory
from tf_device_panel.core.client.run_manager import RunManager
from tf_device_panel.core.client.runtime import BUSY, EXITED, NOT_STARTED, READY, STARTING, RuntimeState
from tf_device_panel.core.protocol import events
from tf_device_panel.core.protocol.events import Event


class RuntimeController(QObject):
    eventsArrived = Signal(list)         # list[Event], in order, on the GUI thread
    stateChanged = Signal(str)           # not started / starting / ready / busy / stopping / exited
    jobFinished = Signal(object)         # JobOutcome, after the batch that held the job's last events
    waitingStarted = Signal(str)         # a job that waited for the spare was handed to it
    waitingRefused = Signal(str, str)    # (job, why): the spare a job waited for failed
    problem = Signal(str)                # a message for the user

    def __init__(self, history: RunHistory | None = None, parent: QObject | None = None, *,
                 manager: RunManager | None = None):
        super().__init__(parent)
        self.manager = manager or RunManager(history or RunHistory(), spares=1)
        self.pump = EventPump(self._emit_batch)
        self.manager.subscribe(events=self.pump.put, state=self._state_changed,
                               job_started=self.waitingStarted.emit, waiting_refused=self.waitingRefused.emit,
                               problem=self.problem.emit)

    def batch_done(self) -> None:
        """Called by the window when it has handled an `eventsArrived` batch."""
        self.pump.batch_done()

    def shutdown(self, timeout: float | None = None) -> None:
        """Stop every process and helper thread. Called when the window closes."""
        self.manager.shutdown(timeout)
        # What the pump had no time left to send (the running job's last events): handed over here, on the
        # GUI thread, so the window still sees the job finish.
        rest = self.pump.close(self.manager.stop_timeout_s if timeout is None else timeout)
        if rest:
            self._emit_batch(rest)

    def _state_changed(self, state: RuntimeState) -> None:
        # Asked on the GUI thread (Apply, Run): said at once. Reached on a reader thread: said after the batch
        # holding the event that moved it, so the window never shows "ready" before the devices it lists.
        if QThread.currentThread() is self.thread():
            self.stateChanged.emit(str(state))

    def _emit_batch(self, batch: list[Event]) -> None:
        self.eventsArrived.emit(batch)
        run = self.manager.job_run
        for event in batch:
            match event:
                case events.Warm() | events.Ready() | events.RuntimeExited() | events.StartupError():
                    self.stateChanged.emit(str(self.manager.state))
                case events.JobFinished(job_id=job_id) if run is not None and job_id == run.job_id:
                    self.jobFinished.emit(run.outcome)
                    self.stateChanged.emit(str(self.manager.state))


__all__ = ["BUSY", "EXITED", "NOT_STARTED", "READY", "STARTING", "RuntimeController"]
