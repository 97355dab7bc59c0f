"""The window's link to its session and run manager: their news, moved onto the GUI thread.

The run lifecycle (spare, run, record, restart policies) is the manager's (core.client.run_manager); what the
window shows is the session's (core.client.session); the batching and backpressure of events is the pump's
(core.client.event_pump). What is left here is Qt: news that comes on a background thread (a reader's, the
pump's) leaves as a queued signal, so no widget is ever touched from another thread. A panel wires itself to
what it draws through `on` (a session field's changes, on the GUI thread) and the signals below.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from PySide6.QtCore import QObject, QThread, Signal
from tf_device_panel.core.catalogue import ParamValues
from tf_device_panel.core.client.event_pump import EventPump
from tf_device_panel.core.client.history import RunHistory
from tf_device_panel.core.client.run_manager import RunManager, Submission
from tf_device_panel.core.client.runtime import BUSY, EXITED, NOT_STARTED, READY, STARTING, RuntimeState
from tf_device_panel.core.client.session import CHANGE_OF_FIELD, Change, Session
from tf_device_panel.core.protocol.events import Event


class RuntimeController(QObject):
    eventsArrived = Signal(list)         # list[Event], in order: folded into the session on the GUI thread
    stateChanged = Signal(str)           # not started / starting / ready / busy / stopping / exited
    jobFinished = Signal(object)         # JobOutcome, after the batch that held the job's last events
    jobQueued = Signal(str)              # a job asked for while the spare warms: it waits for it
    jobStarted = Signal(str)             # a job handed to a warm process (at once, or once it had waited)
    waitingRefused = Signal(str, str)    # (job, why): the spare a job waited for failed
    problem = Signal(str)                # a message for the user
    _changed = Signal(object)            # a session change made on another thread, on its way to this one

    def __init__(self, history: RunHistory | None = None, parent: QObject | None = None, *,
                 manager: RunManager | None = None, session: Session | None = None):
        super().__init__(parent)
        self.manager = manager or RunManager(history or RunHistory(), spares=1, session=session)
        self.session = self.manager.session
        self._watchers: dict[type[Change], list[Callable[[Any], None]]] = {}
        self._changed.connect(self._dispatch)  # queued when emitted on another thread
        self._stop_relaying = self.session.subscribe_all(self._relay)
        self.pump = EventPump(self.eventsArrived.emit)  # emitted on the pump's thread: queued to `deliver`
        self.eventsArrived.connect(self.deliver)
        self.manager.subscribe(events=self.pump.put, state=self._state_changed,
                               job_started=self.jobStarted.emit, waiting_refused=self.waitingRefused.emit,
                               problem=self.problem.emit)

    # -- what panels subscribe to ------------------------------------------------------------------
    def on(self, what: str | type[Change], callback: Callable[[Any], None]) -> None:
        """`callback(change)` on the GUI thread for each change of one session field (its name or its event
        class), in the order the changes were made."""
        kind = CHANGE_OF_FIELD[what] if isinstance(what, str) else what
        self._watchers.setdefault(kind, []).append(callback)

    def _relay(self, change: Change) -> None:
        if QThread.currentThread() is self.thread():
            self._dispatch(change)
        else:
            self._changed.emit(change)

    def _dispatch(self, change: Change) -> None:
        for callback in list(self._watchers.get(type(change), ())):
            callback(change)

    # -- what panels ask -----------------------------------------------------------------------------
    def run(self, job: str, params: ParamValues) -> Submission:
        """Run now if the spare is warm; while it warms (after every run, on start, after Apply) the job waits
        for it and the manager starts it by itself."""
        submission = self.manager.run(job, params)
        if submission == Submission.WAITING:
            self.jobQueued.emit(job)
        elif submission == Submission.STARTED:
            self.jobStarted.emit(job)
        return submission

    def deliver(self, batch: list[Event]) -> None:
        """A batch of the run's events, on the GUI thread: folded into the session once (every panel draws
        what the run state made of it); then the state it moved and the run it ended are said, and the pump may
        send the next."""
        try:
            run, runtime = self.manager.job_run, self.manager.runtime
            changes = self.session.fold(batch, tf_lines=lambda: runtime.tf_lines() if runtime is not None else [])
            # Said after the batch, so the window never shows "ready" before the devices it lists.
            if changes.moves_a_process:
                self.stateChanged.emit(str(self.manager.state))
            if run is not None and any(finished.job_id == run.job_id for finished in changes.finished):
                self.jobFinished.emit(run.outcome)
                self.stateChanged.emit(str(self.manager.state))
        finally:
            self.pump.batch_done()

    def shutdown(self, timeout: float | None = None) -> None:
        """Stop every process and helper thread. Called when the window closes."""
        self.manager.shutdown(timeout)
        # What the pump had no time left to send (the running job's last events): handed over here, on the
        # GUI thread, so the window still sees the job finish.
        rest = self.pump.close(self.manager.stop_timeout_s if timeout is None else timeout)
        if rest:
            self.deliver(rest)
        self._stop_relaying()  # a process stopping late tells the session, never this closed window

    def _state_changed(self, state: RuntimeState) -> None:
        # Asked on the GUI thread (Apply, Run): said at once. Reached on a reader thread: said after the batch
        # holding the event that moved it, so the window never shows "ready" before the devices it lists.
        if QThread.currentThread() is self.thread():
            self.stateChanged.emit(str(state))


__all__ = ["BUSY", "EXITED", "NOT_STARTED", "READY", "STARTING", "RuntimeController"]
