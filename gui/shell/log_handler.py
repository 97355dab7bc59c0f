"""Warnings logged anywhere in the package, from any thread, shown where a person sees them: in the window.

Records come from the sampler, the runtime's reader and the doctor's threads; Qt widgets may only be
touched on the GUI thread, so the handler only emits a signal, and Qt queues it to the window's thread.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from PySide6.QtCore import QObject, Qt, Signal
from tf_device_panel.core.logsetup import PACKAGE_LOGGER


class _Relay(QObject):
    logged = Signal(int, str)  # level, message


class WindowLogHandler(logging.Handler):
    """Hands WARNING+ records of the `tf_device_panel` logger tree to `show(level, message)` on the GUI thread."""

    def __init__(self, show: Callable[[int, str], None], level: int = logging.WARNING):
        super().__init__(level)
        self._relay = _Relay()  # made on the GUI thread, so Qt delivers the queued emissions there
        self._relay.logged.connect(show, Qt.ConnectionType.QueuedConnection)
        self._logger = logging.getLogger(PACKAGE_LOGGER)

    def install(self) -> None:
        self._logger.addHandler(self)

    def remove(self) -> None:
        self._logger.removeHandler(self)

    def emit(self, record: logging.LogRecord) -> None:
        try:
            # The message alone: a traceback belongs in the terminal's log, not in a status bar.
            self._relay.logged.emit(record.levelno, record.getMessage())
        except Exception:
            self.handleError(record)
