"""What a job sees while it runs in the runtime process: progress, cancellation, fallbacks."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from core import events
from core.placement import canonical_device, short_device_name


class JobCancelled(Exception):
    """Raised inside a job when the user asked it to stop."""


class JobError(Exception):
    """A job could not run as asked; the message is shown to the user as is."""


class JobContext:
    def __init__(self, job_id: str, emit: Callable[[events.Event], None]):
        self.job_id = job_id
        self._emit = emit
        self.cancel_requested = threading.Event()
        self._last_progress = 0.0

    def emit(self, event_type: str, /, **data: Any) -> None:
        self._emit(events.Event(event_type, data, job_id=self.job_id))

    def progress(self, done: float, total: float, message: str = "", *, force: bool = False) -> None:
        """Report progress; rate-limited to 20 per second unless `force` (e.g. the last step)."""
        now = time.monotonic()
        if not force and done < total and now - self._last_progress < 0.05:
            return
        self._last_progress = now
        self.emit(events.PROGRESS, done=done, total=total, message=message)

    def metric(self, name: str, value: float, step: int | None = None, **extra: Any) -> None:
        self.emit(events.METRIC, name=name, value=value, step=step, **extra)

    def check_cancelled(self) -> None:
        if self.cancel_requested.is_set():
            raise JobCancelled("cancelled by the user")

    def check_placement(self, requested: str, actual: str, op: str) -> bool:
        """Report a soft-placement fallback when an op did not run where it was pinned. True if it did."""
        if not requested or canonical_device(requested) == short_device_name(actual):
            return True
        self.emit(events.FALLBACK, op=op, requested=requested, requested_short=canonical_device(requested),
                  actual=actual, actual_short=short_device_name(actual))
        return False
