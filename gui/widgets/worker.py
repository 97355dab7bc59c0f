"""Background work for the window, in one place (napari's `create_worker`, napari/_qt/qthreading.py, is the model).

A `Worker` runs a function on a Python thread of its own and hands what it gives back to the GUI thread as
signals: `returned` with a function's value, `yielded` with each value a generator function yields, `errored`
with the exception that ended it, then `finished`. `stop()` asks it to end (a generator is closed at its next
yield; a loop waits on `stopping` rather than sleeping, so it ends at once) and joins its thread; nothing is
delivered after `stop()` has returned, so a panel may drop its state right after.

`to_gui_thread(callback, parent)` is the other half: a function another thread (the telemetry sampler) may call,
which calls `callback` with the same value on the GUI thread.
"""

from __future__ import annotations

import inspect
import logging
import threading
from collections.abc import Callable
from typing import Any

from PySide6.QtCore import QObject, Qt, Signal

log = logging.getLogger(__name__)


class Worker(QObject):
    """`func(*args, **kwargs)` on a thread named `name`; its results as signals on the GUI thread.

    Create it on the GUI thread (its signals are delivered to the thread it lives on)."""

    started = Signal()
    returned = Signal(object)   # the function's value
    yielded = Signal(object)    # each value a generator function yields
    errored = Signal(object)    # the exception that ended the work
    finished = Signal()         # after returned/errored, or when a stopped generator ended

    # From the worker's thread to this object's (queued): delivered only while the worker is not stopped.
    _returned = Signal(object)
    _yielded = Signal(object)
    _errored = Signal(object)
    _finished = Signal()

    def __init__(self, func: Callable[..., Any], *args: Any, name: str = "worker", parent: QObject | None = None,
                 pass_stopping: bool = False, **kwargs: Any):
        """`pass_stopping`: call `func(*args, stopping=<the stopping event>, **kwargs)`, for a loop that waits
        between rounds and must end at once when stopped."""
        super().__init__(parent)
        self.stopping = threading.Event()  # set by stop(): a long loop waits on it instead of sleeping
        self.func, self.args = func, args
        self.kwargs = {**kwargs, "stopping": self.stopping} if pass_stopping else kwargs
        self.name = name
        self._thread: threading.Thread | None = None
        queued = Qt.ConnectionType.QueuedConnection
        self._returned.connect(self._deliver_returned, queued)
        self._yielded.connect(self._deliver_yielded, queued)
        self._errored.connect(self._deliver_errored, queued)
        self._finished.connect(self._deliver_finished, queued)

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> None:
        if self.running:
            return
        self.stopping.clear()
        self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
        self._thread.start()
        self.started.emit()

    def stop(self, timeout: float = 10.0) -> None:
        """Ask the work to end, and wait up to `timeout` s for its thread; nothing is delivered after this."""
        self.stopping.set()
        self.wait(timeout)

    def wait(self, timeout: float = 10.0) -> bool:
        """Wait up to `timeout` s for the work to end (without asking it to); whether it has."""
        if self._thread is not None:
            self._thread.join(timeout)
        return not self.running

    def _run(self) -> None:
        try:
            result = self.func(*self.args, **self.kwargs)
            if inspect.isgenerator(result):
                try:
                    for value in result:
                        if self.stopping.is_set():
                            break
                        self._yielded.emit(value)
                finally:
                    result.close()
            else:
                self._returned.emit(result)
        except Exception as exc:  # said on the GUI thread by whoever listens; the traceback for --verbose
            log.debug("background work %r failed", self.name, exc_info=exc)
            self._errored.emit(exc)
        self._finished.emit()

    def _deliver_returned(self, value: object) -> None:
        if not self.stopping.is_set():
            self.returned.emit(value)

    def _deliver_yielded(self, value: object) -> None:
        if not self.stopping.is_set():
            self.yielded.emit(value)

    def _deliver_errored(self, exc: object) -> None:
        if not self.stopping.is_set():
            self.errored.emit(exc)

    def _deliver_finished(self) -> None:
        if not self.stopping.is_set():
            self.finished.emit()


def create_worker(func: Callable[..., Any], *args: Any, name: str = "worker", parent: QObject | None = None,
                  returned: Callable[[Any], None] | None = None, yielded: Callable[[Any], None] | None = None,
                  errored: Callable[[Any], None] | None = None, finished: Callable[[], None] | None = None,
                  start: bool = True, pass_stopping: bool = False, **kwargs: Any) -> Worker:
    """A `Worker` for `func(*args, **kwargs)` with its signals connected to the callbacks given, started unless
    `start` is False."""
    worker = Worker(func, *args, name=name, parent=parent, pass_stopping=pass_stopping, **kwargs)
    for signal, callback in ((worker.returned, returned), (worker.yielded, yielded), (worker.errored, errored),
                             (worker.finished, finished)):
        if callback is not None:
            signal.connect(callback)
    if start:
        worker.start()
    return worker


class _GuiCall(QObject):
    called = Signal(object)


def to_gui_thread(callback: Callable[[Any], None], parent: QObject) -> Callable[[Any], None]:
    """A function any thread may call with one value: `callback` gets it on `parent`'s (the GUI) thread, queued,
    and never once `parent` is gone."""
    relay = _GuiCall(parent)
    relay.called.connect(callback, Qt.ConnectionType.QueuedConnection)
    return relay.called.emit
