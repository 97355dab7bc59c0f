"""Python's garbage collection only on the GUI thread while the window lives.

Python collects reference cycles on whichever thread happens to allocate when a generation fills up. The
window's background threads (a run's reader, the samplers, the workers) allocate all the time, and a cycle
often holds a Qt wrapper (a widget, an action, a menu): collected on a background thread, the wrapper's C++
object is deleted there. Qt objects must be deleted on their own thread; when one is, the deleting thread takes
Qt's mutexes and then needs the GIL to ask Python for overrides, while the GUI thread, holding the GIL, waits on
the same mutexes (a deadlock seen in the classroom test), or the process crashes outright.

So while a holder lives, automatic collection is off and a timer on the GUI thread collects instead, as
automatic collection would have: a generation when its count passes its threshold (pyqtgraph's
`GarbageCollector` does the same). Holders nest (the window, a test), and the last one released turns
automatic collection back on if it was on before.
"""

from __future__ import annotations

import contextlib
import gc

from PySide6.QtCore import QObject, QThread, QTimer

INTERVAL_MS = 500  # objects in cycles wait at most this long; a generation 0 fills in well under a second

_holding: set[GuiThreadCollection] = set()  # strong references: a holder never vanishes while it holds
_was_enabled = True


def collect_due() -> int:
    """Collect the generations automatic collection would have collected by now; the objects found."""
    # As CPython decides once generation 0 is full: the oldest generation whose count passed its threshold
    # (each collection of a generation counts one towards the next).
    first, second, third = gc.get_threshold()
    count0, count1, count2 = gc.get_count()
    if count0 <= first:
        return 0
    if count2 > third:
        return gc.collect(2)
    if count1 > second:
        return gc.collect(1)
    return gc.collect(0)


class GuiThreadCollection(QObject):
    """One holder of "collect on the GUI thread": `start()` in the GUI thread, `stop()` when done."""

    def __init__(self, parent: QObject | None = None, interval_ms: int = INTERVAL_MS):
        super().__init__(parent)
        self.timer = QTimer(self)
        self.timer.setInterval(interval_ms)
        self.timer.timeout.connect(collect_due)

    @property
    def holding(self) -> bool:
        return self in _holding

    def start(self) -> None:
        global _was_enabled
        if self.holding:
            return
        if QThread.currentThread() is not self.thread():
            raise RuntimeError("garbage collection can only be moved to the GUI thread from the GUI thread")
        if not _holding:
            _was_enabled = gc.isenabled()
            gc.disable()
        _holding.add(self)
        self.timer.start()

    def stop(self) -> None:
        if not self.holding:
            return
        _holding.discard(self)
        with contextlib.suppress(RuntimeError):  # its window's C++ side already deleted: so is the timer
            self.timer.stop()
        if not _holding:
            collect_due()  # what piled up since the last tick, still here on the GUI thread
            if _was_enabled:
                gc.enable()


def holders() -> list[GuiThreadCollection]:
    """The holders keeping collection on the GUI thread now (a test checks that a window gave it back)."""
    return list(_holding)


__all__ = ["INTERVAL_MS", "GuiThreadCollection", "collect_due", "holders"]
