"""Past runs from the run history; each opens with its log, placements and result."""

from __future__ import annotations

import time

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QDialog,
    QHBoxLayout,
    QPushButton,
    QSplitter,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)
from tf_device_panel.core.config import DeviceConfig
from tf_device_panel.core.history import RunHistory
from tf_device_panel.core.session import JobRun
from tf_device_panel.gui.log_panel import LogPanel
from tf_device_panel.gui.result_view import ResultView


class HistoryPanel(QWidget):

    def __init__(self, history: RunHistory, parent: QWidget | None = None):
        super().__init__(parent)
        self.history = history
        self.table = QTableWidget(0, 5)
        self.table.setHorizontalHeaderLabels(["Started", "Job", "Status", "Duration", "Run"])
        self.table.setSelectionBehavior(QTableWidget.SelectionBehavior.SelectRows)
        self.table.setEditTriggers(QTableWidget.EditTrigger.NoEditTriggers)
        self.table.verticalHeader().setVisible(False)
        self.table.horizontalHeader().setStretchLastSection(True)
        self.table.doubleClicked.connect(lambda _: self.open_selected())
        refresh = QPushButton("Refresh")
        refresh.clicked.connect(self.refresh)
        open_button = QPushButton("Open")
        open_button.clicked.connect(self.open_selected)
        buttons = QHBoxLayout()
        buttons.addWidget(refresh)
        buttons.addWidget(open_button)
        buttons.addStretch(1)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.addLayout(buttons)
        layout.addWidget(self.table, 1)
        self.dialogs: list[QDialog] = []

    def refresh(self) -> None:
        runs = self.history.summaries(limit=500)
        self.table.setRowCount(len(runs))
        for row, run in enumerate(runs):
            started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(run.get("started", 0)))
            duration = run.get("duration_s")
            values = [started, run.get("job", "?"), run.get("status", "?"),
                      f"{duration:.2f} s" if isinstance(duration, (int, float)) else "", run["run_id"]]
            for column, value in enumerate(values):
                item = QTableWidgetItem(str(value))
                item.setData(Qt.ItemDataRole.UserRole, run["run_id"])
                self.table.setItem(row, column, item)
        self.table.resizeColumnsToContents()

    def open_selected(self) -> None:
        item = self.table.currentItem()
        if item is not None:
            self.open_run(str(item.data(Qt.ItemDataRole.UserRole)))

    def open_run(self, run_id: str) -> QDialog:
        dialog = RunDialog(self.history, run_id, self)
        self.dialogs.append(dialog)
        dialog.finished.connect(lambda _: self.dialogs.remove(dialog))
        dialog.show()
        return dialog


class RunDialog(QDialog):
    def __init__(self, history: RunHistory, run_id: str, parent: QWidget | None = None):
        super().__init__(parent)
        self.setWindowTitle(f"Run {run_id}")
        self.resize(900, 600)
        self.log = LogPanel()
        self.result_view = ResultView()
        try:
            summary = history.get(run_id)
            recorded = history.events(run_id)
        except (KeyError, OSError, ValueError) as exc:
            self.result_view.show_message(f"<b>This run cannot be read:</b> {exc}")
            summary, recorded = {}, []
        if summary:
            self.log.add_events(recorded)
            config = DeviceConfig.from_json(summary["config"]) if summary.get("config") else DeviceConfig()
            replay = JobRun(summary.get("job", "?"), summary.get("params", {}), config, summary.get("devices"))
            replay.attach(summary.get("job_id") or next((e.job_id for e in recorded if e.job_id), ""))
            for event in recorded:
                replay.feed(event)
            if not replay.finished:
                replay.outcome.status = summary.get("status", "interrupted")
                replay.outcome.error = summary.get("error") or {"type": "Interrupted",
                                                                "message": "this run did not finish"}
            self.result_view.show_outcome(replay.outcome)
        splitter = QSplitter(Qt.Orientation.Vertical)
        splitter.addWidget(self.result_view)
        splitter.addWidget(self.log)
        layout = QVBoxLayout(self)
        layout.addWidget(splitter)

