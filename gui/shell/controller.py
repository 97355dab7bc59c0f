"""The window's link to its session and run manager: their news, moved onto the GUI thread.

The run lifecycle (spare, run, record, restart policies) is the manager's (core.client.run_manager); what the
window shows, and every piece of news about it, is the session's (core.client.session, a hub). What is left here is
the hop onto the GUI thread, two ways: a panel subscribes to the session through `subscribe`, and a message
published on a background thread (a reader's, the pump's) reaches its handler queued onto the GUI thread; the run's
events, which can come 100,000 a run, come through the event pump below, in batches the window takes one at a time.
No widget is ever touched from another thread.

The event pump (Qt-free; only the window uses it: the command line prints each event as it comes): events arrive on
the processes' reader threads and are buffered. A pump thread hands the buffer on as one batch every 50 ms, so a
flood of placement lines reaches widgets as a few large updates. It sends the next batch only once the consumer has
taken the last one (`batch_done`), so batches never pile up in a GUI event queue and its loop always gets to run
between them. When output arrives faster than the consumer can take it, the oldest raw log lines are skipped (the
run history keeps them) and a notice says how many.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, TypeVar

from PySide6.QtCore import QObject, QThread, Signal
from tf_device_panel.core.catalogue import ParamValues
from tf_device_panel.core.client.history import RunHistory
from tf_device_panel.core.client.run_manager import RunManager, Submission
from tf_device_panel.core.client.runtime import BUSY, EXITED, NOT_STARTED, READY, STARTING
from tf_device_panel.core.client.session import ManagerStateChanged, Session
from tf_device_panel.core.hub import Message, Subscription
from tf_device_panel.core.protocol import events
from tf_device_panel.core.protocol.events import Event
from tf_device_panel.core.protocol.streams import split_lines

M = TypeVar("M", bound=Message)

BATCH_INTERVAL_S = 0.05
MAX_BATCH = 4000          # events per batch: one batch is a bounded amount of GUI work
MAX_BUFFERED = 100_000    # past this, the oldest raw log lines are skipped (the run history keeps them)
ACK_WAIT_S = 1.0          # how long the pump waits for the consumer to take a batch before sending more


class EventPump:
    """Buffers events from any thread; `on_batch(list[Event])` is called on the pump's own thread."""

    def __init__(self, on_batch: Callable[[list[Event]], None]):
        self.on_batch = on_batch
        self._buffer: list[Event] = []
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._taken = threading.Event()
        self._closing = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="gui-event-pump", daemon=True)
        self._thread.start()

    def put(self, event: Event) -> None:
        with self._lock:
            self._buffer.append(event)
            if len(self._buffer) > MAX_BUFFERED:
                self._skip_old_log_lines()
        self._wake.set()

    def batch_done(self) -> None:
        """The consumer has handled the last batch."""
        self._taken.set()

    def close(self, timeout: float) -> list[Event]:
        """Stop the pump; returns what it had no time left to send, as one last batch (split into lines)."""
        self._closing.set()
        self._wake.set()
        self._thread.join(timeout)
        with self._lock:
            rest, self._buffer = self._buffer, []
        return [line for event in rest for line in split_lines(event)]

    def _skip_old_log_lines(self) -> None:
        """Keep the buffer bounded when output arrives faster than the consumer can take it."""
        half = len(self._buffer) // 2
        kept = [e for e in self._buffer[:half] if not isinstance(e, events.Log)]
        skipped = half - len(kept)
        if skipped:
            notice = events.Log(stream="panel", kind="warning",
                                text=f"… {skipped} log events skipped to keep the window responsive "
                                     "(the run history has them all)")
            self._buffer = [*kept, notice, *self._buffer[half:]]

    def _loop(self) -> None:
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
                self.on_batch([line for event in batch for line in split_lines(event)])
                self._taken.wait(ACK_WAIT_S)



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
