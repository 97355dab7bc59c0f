"""The window's link to its session and run manager: their news, moved onto the GUI thread.

The run lifecycle (spare, run, record, restart policies) is the manager's (core.client.run_manager); what the
window shows, and every piece of news about it, is the session's (core.client.session, a hub); the batching and
backpressure of events is the pump's (core.client.event_pump). What is left here is Qt: a panel subscribes to the
session through `subscribe`, and a message published on a background thread (a reader's, the pump's) reaches its
handler queued onto the GUI thread, so no widget is ever touched from another thread.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from PySide6.QtCore import QObject, QThread, Signal
from tf_device_panel.core.catalogue import ParamValues
from tf_device_panel.core.client.event_pump import EventPump
from tf_device_panel.core.client.history import RunHistory
from tf_device_panel.core.client.run_manager import RunManager, Submission
from tf_device_panel.core.client.runtime import BUSY, EXITED, NOT_STARTED, READY, STARTING
from tf_device_panel.core.client.session import ManagerStateChanged, Session
from tf_device_panel.core.hub import Message, Subscription
from tf_device_panel.core.protocol.events import Event

M = TypeVar("M", bound=Message)


class RuntimeController(QObject):
    eventsArrived = Signal(list)  # list[Event], in order: folded into the session on the GUI thread
    # A message published on another thread, with its subscription and handler, on its way to this one. One
    # signal for every kind of message: they reach the GUI thread in the order they were published.
    _hop = Signal(object, object, object)

    def __init__(self, history: RunHistory | None = None, parent: QObject | None = None, *,
                 manager: RunManager | None = None, session: Session | None = None):
        super().__init__(parent)
        self.manager = manager or RunManager(history or RunHistory(), spares=1, session=session)
        self.session = self.manager.session
        self._subscriptions: list[Subscription] = []  # made here: ended when the window closes
        self._hop.connect(self._handle)  # queued when emitted on another thread
        self.pump = EventPump(self.eventsArrived.emit)  # emitted on the pump's thread: queued to `deliver`
        self.eventsArrived.connect(self.deliver)
        self.manager.event_sink = self.pump.put

    # -- what panels subscribe to ------------------------------------------------------------------
    def subscribe(self, subscriber: object, message_class: type[M], handler: Callable[[M], object],
                  filter: Callable[[M], bool] | None = None) -> Subscription:
        """`handler(message)` on the GUI thread for each message of `message_class` (or a subclass) the session
        publishes and `filter` passes (asked on the thread that publishes), in the order they were published;
        returns the subscription, whose call unsubscribes it (a message already on its way is then dropped).

        The manager's state is said after the batch of events that moved it (`deliver`), never ahead of it: a
        `ManagerStateChanged` published on another thread is not moved here, so the window never shows "ready"
        before the devices it lists."""
        def to_gui_thread(message: M) -> None:
            if QThread.currentThread() is self.thread():
                self._handle(subscription, handler, message)
            elif not isinstance(message, ManagerStateChanged):  # `deliver` says it, after the batch
                self._hop.emit(subscription, handler, message)

        # Made before it is added: a message published on another thread meanwhile finds it already named.
        subscription = self.session.add(Subscription(self.session, subscriber, message_class, to_gui_thread, filter))
        self._subscriptions = [*(s for s in self._subscriptions if s.active), subscription]
        return subscription

    def unsubscribe_all(self, subscriber: object) -> None:
        self.session.unsubscribe_all(subscriber)
        self._subscriptions = [subscription for subscription in self._subscriptions if subscription.active]

    def _handle(self, subscription: Subscription, handler: Callable[[Any], object], message: Message) -> None:
        if not subscription.active:
            return
        try:
            handler(message)
        except Exception as exc:  # reported as the session reports its own handlers' failures
            self.session.handler_failed(subscription.subscriber, handler, message, exc)

    # -- what panels ask -----------------------------------------------------------------------------
    def run(self, job: str, params: ParamValues) -> Submission:
        """Run now if the spare is warm; while it warms (after every run, on start, after Apply) the job waits
        for it and the manager starts it by itself."""
        return self.manager.run(job, params)

    def deliver(self, batch: list[Event]) -> None:
        """A batch of the run's events, on the GUI thread: folded into the session once (every panel draws
        what the run state made of it, then hears of the job it ended); then the state it moved is said, and the
        pump may send the next."""
        try:
            run, runtime = self.manager.job_run, self.manager.runtime
            changes = self.session.fold(batch, tf_lines=lambda: runtime.tf_lines() if runtime is not None else [],
                                        run=run)
            ended = run is not None and any(finished.job_id == run.job_id for finished in changes.finished)
            # Said after the batch, so the window never shows "ready" before the devices it lists.
            if changes.moves_a_process or ended:
                self.session.publish(ManagerStateChanged(self.manager.state))
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
        for subscription in self._subscriptions:  # a process stopping late tells the session, not this window
            subscription()
        self._subscriptions = []


__all__ = ["BUSY", "EXITED", "NOT_STARTED", "READY", "STARTING", "RuntimeController"]
