"""The window's status bar: the runtime's state in a few words, passing messages beside it, the warnings logged
since the window opened, and the Start/Restart runtime button."""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable

from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QMainWindow, QPushButton
from tf_device_panel.core.client.run_manager import RunManager
from tf_device_panel.core.client.runtime import EXITED, NOT_STARTED, READY, STARTING
from tf_device_panel.core.client.session import RunStateChanged
from tf_device_panel.core.config import DeviceConfig
from tf_device_panel.gui.shell.notice import show_notice
from tf_device_panel.gui.widgets.common import ElidedLabel

KEPT_WARNINGS = 200


class RuntimeStatusBar:
    """Builds its widgets into `window`'s status bar; `restart` is what Start/Restart runtime does."""

    def __init__(self, window: QMainWindow, restart: Callable[[], None]):
        self.window = window
        self.closing = False
        self.notices: list[str] = []  # every message shown to the user, newest last
        self.logged_warnings: deque[str] = deque(maxlen=KEPT_WARNINGS)
        self.warning_count = 0
        self.gpus_present: bool | None = None  # whether the last ready runtime saw a GPU (None: none has reported)
        # Elided with the whole text as its tooltip: a long failure must not widen the window.
        self.runtime_label = ElidedLabel("Runtime: not started")
        # Passing messages have a label of their own, so the runtime's state stays in sight while one shows.
        self.message_label = ElidedLabel()
        self.message_label.setObjectName("status-message")
        self.message_timer = QTimer(window)
        self.message_timer.setSingleShot(True)
        self.message_timer.timeout.connect(lambda: self.message_label.setText(""))
        self.restart_button = QPushButton("Start runtime")
        self.restart_button.clicked.connect(restart)
        self.restart_button.hide()
        self.warnings_button = QPushButton()
        self.warnings_button.setObjectName("warnings-button")
        self.warnings_button.setFlat(True)
        self.warnings_button.setToolTip("Warnings logged since the window opened")
        self.warnings_button.clicked.connect(self.show_logged_warnings)
        self.warnings_button.hide()
        bar = window.statusBar()
        bar.addWidget(self.runtime_label, 3)
        bar.addWidget(self.message_label, 2)
        bar.addPermanentWidget(self.warnings_button)
        bar.addPermanentWidget(self.restart_button)

    # -- passing messages ----------------------------------------------------------------------------
    def flash(self, text: str, timeout_ms: int = 10_000) -> None:
        self.message_label.setText(text)
        self.message_timer.start(timeout_ms)

    def notify(self, title: str, message: str) -> None:
        self.notices.append(f"{title}: {message}")
        self.flash(message.splitlines()[0] if message else title, 10_000)
        if not self.closing:
            show_notice(self.window, title, message)

    def show_logged(self, level: int, message: str) -> None:
        """A warning logged anywhere in the package (delivered on the GUI thread by the log handler)."""
        if self.closing:
            return
        text = f"{logging.getLevelName(level).capitalize()}: {message}"
        self.notices.append(text)
        self.logged_warnings.append(text)
        self.warning_count += 1
        # The status bar, not a dialog: the same warning can come from a background thread many times over.
        self.flash("⚠ " + (message.splitlines() or [""])[0], 10_000)
        self.warnings_button.setText(f"⚠ {self.warning_count}")
        self.warnings_button.show()

    def show_logged_warnings(self) -> None:
        shown = list(self.logged_warnings)
        older = self.warning_count - len(shown)
        text = "\n\n".join(shown) + (f"\n\n({older} older warning(s) not kept)" if older else "")
        show_notice(self.window, "Warnings", text)

    # -- the runtime ---------------------------------------------------------------------------------
    def runtime_news(self, change: RunStateChanged, applied: DeviceConfig | None) -> None:
        """A runtime that exited unplanned (or was killed for a cancel) says so for a while."""
        for exited in change.changes.exits:
            if (exited.expected and not exited.killed_for_cancel) or self.closing:
                continue
            tail = "\n".join(exited.last_lines[-8:])
            self.flash(f"Runtime {exited.description}", 10_000)
            self.runtime_label.setToolTip(f"Last output:\n{tail}" if tail else "")
            if exited.killed_for_cancel and applied is not None:
                self.flash(f"Runtime {exited.description}; the next run gets a fresh one with the same "
                           "configuration", 10_000)

    def refresh(self, manager: RunManager, stale: bool) -> str:
        """The runtime's state; what the Run button may do, for the runs panel (`state`)."""
        state = manager.state
        applied = manager.applied
        physical = manager.devices.physical if manager.devices is not None else None
        if physical is not None:
            self.gpus_present = any(d["device_type"] == "GPU" for d in physical)
        # While the next runtime warms (no report of its own yet) the last runtime's answer stands: a warming
        # spare said "all GPUs" on a machine with none.
        gpus_present = self.gpus_present
        summary = applied.summary(gpus_present) if applied else ""
        text = f"Runtime: {manager.status_text()} — {summary}" if summary else "Runtime not started"
        if stale and state not in (EXITED, NOT_STARTED):
            text = "⟳ STALE (configuration changed; Apply to restart) — " + text
        self.runtime_label.setText(text)
        self.restart_button.setVisible(state in (EXITED, NOT_STARTED))
        self.restart_button.setText("Restart runtime" if state == EXITED else "Start runtime")
        return str(state)


__all__ = ["READY", "STARTING", "RuntimeStatusBar"]
