"""Events from reader threads to a slower consumer (the window) in bounded batches, with backpressure. Qt-free.

Events arrive on the processes' reader threads and are buffered. A pump thread hands the buffer on as one
batch every 50 ms, so a flood of placement lines reaches widgets as a few large updates. It sends the next
batch only once the consumer has taken the last one (`batch_done`), so batches never pile up in a GUI
event queue and its loop always gets to run between them. When output arrives faster than the consumer can
take it, the oldest raw log lines are skipped (the run history keeps them) and a notice says how many.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from tf_device_panel.core.protocol import events
from tf_device_panel.core.protocol.events import Event
from tf_device_panel.core.protocol.streams import split_lines

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
