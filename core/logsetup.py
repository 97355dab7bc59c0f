"""Diagnostics go through `logging`, under the `tf_device_panel` logger tree, never `print`.

A process's stdout carries what the user asked for (a job's output, `--json`), and TensorFlow's C++ code
writes there too, so a diagnostic printed from a background thread would land in the middle of it. The
command line sends the tree's records to stderr (`configure_logging`); the window shows its warnings in
the status bar (gui/shell/log_handler.py).
"""

from __future__ import annotations

import logging
import sys
import threading

PACKAGE_LOGGER = "tf_device_panel"
FORMAT = "tf-device-panel %(levelname)s %(name)s: %(message)s"


class _CurrentStderr(logging.Handler):
    """Writes to whatever `sys.stderr` is when a record comes (pytest's capture, a caller's redirect), as logging's
    own last-resort handler does."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            sys.stderr.write(self.format(record) + "\n")
            sys.stderr.flush()
        except Exception:
            self.handleError(record)


class _Formatter(logging.Formatter):
    """The command line shows no traceback unless asked (`--verbose`), as its own error messages do."""

    def __init__(self, tracebacks: bool):
        super().__init__(FORMAT)
        self.tracebacks = tracebacks

    def format(self, record: logging.LogRecord) -> str:
        if self.tracebacks or not record.exc_info:
            return super().format(record)
        # A copy: the record itself goes on to other handlers (the window's), which may want the traceback.
        bare = logging.makeLogRecord({**record.__dict__, "exc_info": None, "exc_text": None})
        return super().format(bare) + " (--verbose shows the traceback)"



def configure_logging(verbose: bool = False) -> None:
    """The package's records from WARNING to stderr, or from DEBUG with tracebacks when `verbose`.

    Calling it again only changes the level: one process, one stderr handler.
    """
    package = logging.getLogger(PACKAGE_LOGGER)
    handler = next((h for h in package.handlers if isinstance(h, _CurrentStderr)), None)
    if handler is None:
        handler = _CurrentStderr()
        package.addHandler(handler)
    handler.setFormatter(_Formatter(tracebacks=verbose))
    package.setLevel(logging.DEBUG if verbose else logging.WARNING)


class RepeatedFailureLog:
    """Logs a callback's failure with its traceback, but the same failure again only once in a row.

    The callbacks run per event, per line or per tick: a bug in one fails the same way hundreds of times a
    second, and one traceback says all there is to say.
    """

    def __init__(self, logger: logging.Logger):
        self._logger = logger
        self._last = ""
        self._lock = threading.Lock()

    def failed(self, what: str, exc: BaseException) -> None:
        text = f"{what} failed ({type(exc).__name__}: {exc})"
        with self._lock:
            if text == self._last:
                return
            self._last = text
        self._logger.error("%s; going on", text, exc_info=exc)
