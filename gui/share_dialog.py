"""File → Share a GPU…: the `share` command in a dialog. The window's configuration is the base profile; the
command (`tf-device-panel share … --json`, a child process: the window never runs TensorFlow) writes one profile
per seat into a folder and, with Verify, runs the seats side by side; the dialog shows each seat's limit, peak and
status, or the command's own error."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

from PySide6.QtCore import QProcess, Qt
from PySide6.QtWidgets import (
    QCheckBox,
    QDialog,
    QDialogButtonBox,
    QFileDialog,
    QFormLayout,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QPushButton,
    QSpinBox,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)
from tf_device_panel.core.client.share import MAX_SEATS, ShareReport
from tf_device_panel.core.config import DeviceConfig, save_profile
from tf_device_panel.core.processes import module_command

MIB = 1024 * 1024
SEAT_COLUMNS = ("Seat", "Profile", "Limit", "Peak", "Status")


def mib_text(value: Any) -> str:
    return "—" if not isinstance(value, (int, float)) else f"{value / MIB:,.1f} MiB"


class ShareDialog(QDialog):
    def __init__(self, config: DeviceConfig, parent: QWidget | None = None):
        super().__init__(parent)
        self.setObjectName("share-dialog")
        self.setWindowTitle("Share a GPU")
        self.config = config
        self._folder = tempfile.TemporaryDirectory(prefix="tf-share-base-")
        self.process: QProcess | None = None
        self.report: ShareReport | None = None
        intro = QLabel("Split the GPU this configuration uses (or its CPU memory cap, on a machine without a GPU) "
                       "into seats: one profile per seat to hand out, each holding its share of the memory, the "
                       "CUDA context of each seat's process reserved.")
        intro.setWordWrap(True)
        self.seats = QSpinBox()
        self.seats.setRange(1, MAX_SEATS)
        self.seats.setValue(3)
        self.seats.setMaximumWidth(120)
        self.out = QLineEdit()
        self.out.setPlaceholderText("a new or empty folder")
        browse = QPushButton("Browse…")
        browse.clicked.connect(self._browse)
        out_row = QHBoxLayout()
        out_row.addWidget(self.out, 1)
        out_row.addWidget(browse)
        self.verify = QCheckBox("Verify: run the seats side by side and measure each one's peak")
        self.verify.setChecked(True)
        self.force = QCheckBox("Write into a folder that is not empty")
        form = QFormLayout()
        form.addRow("Seats", self.seats)
        form.addRow("Folder", out_row)
        form.addRow("", self.verify)
        form.addRow("", self.force)
        self.status = QLabel("")
        self.status.setWordWrap(True)
        self.status.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.table = QTableWidget(0, len(SEAT_COLUMNS))
        self.table.setHorizontalHeaderLabels(list(SEAT_COLUMNS))
        self.table.setEditTriggers(QTableWidget.EditTrigger.NoEditTriggers)
        self.table.verticalHeader().setVisible(False)
        self.table.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        self.table.horizontalHeader().setSectionResizeMode(1, QHeaderView.ResizeMode.Stretch)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        self.share_button = buttons.addButton("Write profiles", QDialogButtonBox.ButtonRole.ActionRole)
        self.share_button.clicked.connect(self.start)
        buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addWidget(intro)
        layout.addLayout(form)
        layout.addWidget(self.status)
        layout.addWidget(self.table, 1)
        layout.addWidget(buttons)
        self.resize(760, 460)

    def _browse(self) -> None:
        folder = QFileDialog.getExistingDirectory(self, "Folder for the seats' profiles", self.out.text())
        if folder:
            self.out.setText(folder)

    def start(self) -> None:
        if self.process is not None:
            return
        out = self.out.text().strip()
        if not out:
            self.status.setText("Choose a folder for the seats' profiles.")
            return
        base = Path(self._folder.name) / "base.json"
        save_profile(self.config, base)
        args = ["share", "--seats", str(self.seats.value()), "--config", str(base), "--out", out, "--json"]
        args += ["--verify"] * self.verify.isChecked() + ["--force"] * self.force.isChecked()
        self.report = None
        self.table.setRowCount(0)
        self.status.setText("Verifying the seats side by side…" if self.verify.isChecked() else "Writing…")
        self.share_button.setEnabled(False)
        command = module_command("tf_device_panel", *args)
        self.process = QProcess(self)
        self.process.finished.connect(self._finished)
        self.process.start(command[0], command[1:])

    def _finished(self, code: int, _status: Any) -> None:
        process, self.process = self.process, None
        self.share_button.setEnabled(True)
        if process is None:
            return
        out = bytes(process.readAllStandardOutput().data()).decode(errors="replace")
        err = bytes(process.readAllStandardError().data()).decode(errors="replace")
        process.deleteLater()
        try:
            self.report = json.loads(out)  # what `share --json` printed
        except ValueError:
            errors = [line for line in err.splitlines() if line.startswith("error")] or err.strip().splitlines()[-1:]
            self.status.setText("\n".join(errors) or f"the share command ended with exit code {code}")
            return
        self.show_report(self.report, code)

    def show_report(self, report: ShareReport, code: int = 0) -> None:
        seats = report.get("seats") or []
        reserve = report.get("reserved_mib_per_seat") or 0
        text = (f"{report.get('device')}: {report.get('source')}"
                + (f", less {reserve} MiB per seat for its CUDA context and headroom" if reserve else "")
                + f": {len(seats)} seats of {report.get('seat_limit_mib')} MiB, written to {report.get('out')}.")
        if "verified" in report:
            text += " All seats held." if report["verified"] else " A seat did not hold."
        self.status.setText(text)
        self.table.setRowCount(len(seats))
        for row, seat in enumerate(seats):
            status = seat.get("status", "written")
            if seat.get("error"):
                status += f": {seat['error']}"
            values = (str(seat.get("seat")), str(seat.get("profile")), mib_text(seat.get("limit_bytes")),
                      mib_text(seat.get("peak_bytes")), status)
            for column, value in enumerate(values):
                item = QTableWidgetItem(value)
                item.setToolTip(value)
                self.table.setItem(row, column, item)

    def done(self, result: int) -> None:
        if self.process is not None:  # closed while verifying: the seats die with the command
            self.process.kill()
            self.process.waitForFinished(5000)
            self.process = None
        self._folder.cleanup()
        super().done(result)
