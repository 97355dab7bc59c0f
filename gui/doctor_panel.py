"""The Doctor: why TensorFlow does not see or use a GPU, checked in the background, with fixes."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from PySide6.QtCore import QObject, Qt, Signal
from PySide6.QtGui import QBrush, QColor, QGuiApplication
from PySide6.QtWidgets import (
    QHBoxLayout,
    QLabel,
    QPushButton,
    QSizePolicy,
    QTreeWidget,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)
from tf_device_panel.core import doctor
from tf_device_panel.core.config import DeviceConfig

log = logging.getLogger(__name__)

STATUS_COLORS = {doctor.PASS: "#2e9d4f", doctor.WARN: "#c77700", doctor.FAIL: "#d33", doctor.SKIPPED: "#888888"}


class _Relay(QObject):
    finished = Signal(object, object)   # (checks, facts) or (None, error text)


class DoctorPanel(QWidget):
    """Runs `core.doctor` on a worker thread; results come back through a signal."""

    finished = Signal()

    def __init__(self, config_source: Callable[[], DeviceConfig | None], parent: QWidget | None = None):
        super().__init__(parent)
        self.config_source = config_source
        self.checks: list[doctor.Check] = []
        self.facts: doctor.Facts | None = None
        self._thread: threading.Thread | None = None
        self._relay = _Relay(self)
        self._relay.finished.connect(self._show)
        self.summary = QLabel("Press <b>Run checks</b> to find out why TensorFlow does or does not use a GPU here.")
        self.summary.setWordWrap(True)
        self.summary.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.tree = QTreeWidget()
        self.tree.setHeaderLabels(["Check", "Result"])
        self.tree.setColumnWidth(0, 220)
        # Evidence and fixes wrap in their column (full text in the tooltip): the panel never scrolls sideways.
        self.tree.setWordWrap(True)
        self.tree.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.tree.header().setStretchLastSection(True)
        self.tree.setAccessibleName("Doctor checks")
        self.run_button = QPushButton("Run checks")
        self.run_button.setObjectName("primary")
        self.run_button.clicked.connect(self.run)
        self.copy_button = QPushButton("Copy report")
        self.copy_button.setToolTip("Copy the report as Markdown, ready to paste into a bug report")
        self.copy_button.setEnabled(False)
        self.copy_button.clicked.connect(self.copy_report)
        buttons = QHBoxLayout()
        buttons.addWidget(self.run_button)
        buttons.addWidget(self.copy_button)
        buttons.addStretch(1)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.addLayout(buttons)
        layout.addWidget(self.summary)
        layout.addWidget(self.tree, 1)

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def run(self) -> None:
        if self.running:
            return
        self.run_button.setEnabled(False)
        self.run_button.setText("Checking…")
        self.summary.setText("Examining this machine: NVML, packages, and TensorFlow in a probe process…")
        config = self.config_source()
        self._thread = threading.Thread(target=self._work, args=(config,), name="doctor", daemon=True)
        self._thread.start()

    def _work(self, config: DeviceConfig | None) -> None:
        try:
            facts = doctor.gather(config)
            self._relay.finished.emit(doctor.diagnose(facts), facts)
        except Exception as exc:  # reported in the panel, never a traceback in the user's face
            log.debug("the doctor could not run", exc_info=exc)  # the traceback, for --verbose
            self._relay.finished.emit(None, f"{type(exc).__name__}: {exc}")

    def wait(self, timeout: float) -> None:
        if self._thread is not None:
            self._thread.join(timeout)

    def _show(self, checks: list[doctor.Check] | None, facts: doctor.Facts | str) -> None:
        self.run_button.setEnabled(True)
        self.run_button.setText("Run again")
        if checks is None:
            self.summary.setText(f"<b style='color:#d33'>The checks could not run:</b> {facts}")
            self.finished.emit()
            return
        assert isinstance(facts, doctor.Facts)
        self.checks, self.facts = checks, facts
        self.tree.clear()
        for check in checks:
            item = QTreeWidgetItem([f"{doctor.ICONS[check.status]}  {check.title}", check.summary])
            color = QBrush(QColor(STATUS_COLORS[check.status]))
            item.setForeground(0, color)
            item.setToolTip(1, check.summary)
            item.setData(0, Qt.ItemDataRole.UserRole, check.id)
            for line in check.evidence:
                if line:
                    child = QTreeWidgetItem(["Evidence", line])
                    child.setToolTip(1, line)
                    item.addChild(child)
            if check.fix:
                fix = QTreeWidgetItem(["Fix", check.fix])
                fix.setToolTip(1, check.fix)
                font = fix.font(1)
                font.setBold(True)
                fix.setFont(1, font)
                item.addChild(fix)
            self.tree.addTopLevelItem(item)
            item.setExpanded(check.status in (doctor.WARN, doctor.FAIL))
        counts = {s: sum(c.status == s for c in checks) for s in STATUS_COLORS}
        self.summary.setText(" · ".join(f"<span style='color:{STATUS_COLORS[s]}'><b>{n}</b> {s}</span>"
                                        for s, n in counts.items()))
        self.copy_button.setEnabled(True)
        self.finished.emit()

    def report_markdown(self) -> str:
        return doctor.to_markdown(self.checks, self.facts) if self.facts is not None else ""

    def copy_report(self) -> None:
        QGuiApplication.clipboard().setText(self.report_markdown())
