"""What a job sees while it runs in its run process: progress, cancellation, fallbacks."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from tf_device_panel.core.config import DeviceConfig
from tf_device_panel.core.protocol import events
from tf_device_panel.core.protocol.output_lines import canonical_device, short_device_name

PROGRESS_INTERVAL_S = 0.05


class JobCancelled(BaseException):
    """Raised inside a job when the user asked it to stop.

    A BaseException, like KeyboardInterrupt, so a script's `except Exception:` does not swallow it.
    """


class ScriptExit(Exception):
    """A user's script ended with a non-zero status: `sys.exit(N)` or an uncaught exception.

    Declared here, not with the script job (core.runproc.jobs.script), so the run process can tell it apart
    without importing that job's module for every run."""

    def __init__(self, code: int, error_type: str, message: str, traceback_text: str = ""):
        super().__init__(message)
        self.code = code
        self.error_type = error_type
        self.message = message
        self.traceback = traceback_text


class JobContext:
    def __init__(self, job_id: str, emit: Callable[[events.Event], None],
                 device_config: DeviceConfig | None = None):
        self.job_id = job_id
        self._emit = emit
        self.device_config = device_config or DeviceConfig()  # the runtime's, applied before TF initialized
        self.cancel_requested = threading.Event()
        self._last_progress = 0.0
        self._progress_lock = threading.Lock()
        self._held_progress: tuple[float, float, str] | None = None
        self._progress_timer: threading.Timer | None = None

    def emit(self, event: events.Event) -> None:
        """Send an event of this job (its job_id set here)."""
        self._emit(event.replace(job_id=self.job_id))

    def progress(self, done: float, total: float, message: str = "", *, force: bool = False) -> None:
        """Report progress, at most 20 times a second unless `force` (e.g. the last step).

        A report that comes too soon is held and sent when its turn comes, unless a newer one replaces
        it: the last word is never lost, or a phase's message ("training…") would stay unseen.
        """
        with self._progress_lock:
            wait = PROGRESS_INTERVAL_S - (time.monotonic() - self._last_progress)
            if force or done >= total or wait <= 0:
                self._held_progress = None
                self._send_progress(done, total, message)
                return
            self._held_progress = (done, total, message)
            if self._progress_timer is None:
                self._progress_timer = threading.Timer(wait, self._send_held_progress)
                self._progress_timer.daemon = True
                self._progress_timer.start()

    def _send_progress(self, done: float, total: float, message: str) -> None:
        self._last_progress = time.monotonic()
        self.emit(events.Progress(done=done, total=total, message=message))

    def _send_held_progress(self) -> None:
        with self._progress_lock:
            self._progress_timer = None
            held, self._held_progress = self._held_progress, None
            if held is not None:
                self._send_progress(*held)

    def finish(self) -> None:
        """The job has ended: drop a held progress report, which would arrive after its result."""
        with self._progress_lock:
            if self._progress_timer is not None:
                self._progress_timer.cancel()
            self._progress_timer, self._held_progress = None, None

    def metric(self, name: str, value: float, step: int | None = None, **extra: Any) -> None:
        self.emit(events.Metric(name=name, value=value, step=step, labels=extra))

    def check_cancelled(self) -> None:
        if self.cancel_requested.is_set():
            raise JobCancelled("cancelled by the user")

    def check_placement(self, requested: str, actual: str, op: str) -> bool:
        """Report a soft-placement fallback when an op did not run where it was pinned. True if it did."""
        if not requested or canonical_device(requested) == short_device_name(actual):
            return True
        self.emit(events.Fallback(op=op, requested=requested, requested_short=canonical_device(requested),
                                  actual=actual, actual_short=short_device_name(actual)))
        return False

