"""File → Share a GPU…: "how many students can share this machine?" in a dialog. It asks for the work each seat
runs (the panel's CNN, the user's script, or a saved Keras model) and answers with the most seats that held it
side by side, or splits into a number of seats chosen. The window's configuration is the base profile; the
`share` command (`tf-device-panel share … --json`, a child process: the window never runs TensorFlow) writes one
profile per seat into a folder; the dialog shows each seat's limit, peak and status, and any refusal in the
window's own words (the field at fault, never a command-line option)."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any, cast

from PySide6.QtCore import QProcess, Qt
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QFileDialog,
    QFormLayout,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QPushButton,
    QRadioButton,
    QSpinBox,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)
from tf_device_panel.core.client.share import MAX_SEATS, VERIFY_BATCH, ShareReport, seats_text
from tf_device_panel.core.config import DeviceConfig, save_profile
from tf_device_panel.core.processes import module_command
from tf_device_panel.core.units import MIB
from tf_device_panel.gui.widgets.common import guard_wheel

SEAT_COLUMNS = ("Seat", "Profile", "Limit", "Peak", "Process", "Status")
# What each seat runs: the dialog's words, and the file a choice asks for.
WORKS = ("The panel's CNN", "Your script", "Your saved Keras model")
FILE_FILTERS = {1: "Python files (*.py)", 2: "Keras models (*.keras)"}
# The dialog's name for each input a refusal is about (the command names them by its options).
FIELD_WORDS = {"seats": "Seats", "out": "Folder", "config": "This configuration", "batch": "Batch",
               "script": "Script", "args": "Script arguments", "model": "Keras model", "work": "The work"}
MAX_BATCH = 1_000_000


def show_share(parent: QWidget, config: DeviceConfig) -> ShareDialog:
    """File → Share a GPU…: the seats start from `config`, the window's configuration."""
    dialog = ShareDialog(config, parent)
    guard_wheel(dialog)
    dialog.show()
    return dialog


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
        intro = QLabel("How many people can share this machine? Choose what each seat runs; the panel measures it "
                       "alone, then runs that many seats side by side under their own share of the GPU (or of the "
                       "CPU memory cap, on a machine without a GPU), one profile per seat to hand out.")
        intro.setWordWrap(True)
        self.work = QComboBox()
        self.work.addItems(list(WORKS))
        self.work_file = QLineEdit()
        self.work_file.setPlaceholderText("the file each seat runs")
        self.work_browse = QPushButton("Browse…")
        self.work_browse.clicked.connect(self._browse_work)
        file_row = QHBoxLayout()
        file_row.addWidget(self.work_file, 1)
        file_row.addWidget(self.work_browse)
        self.script_args = QLineEdit()
        self.script_args.setPlaceholderText("e.g. --batch-size {batch}  ({batch}: the batch below)")
        self.batch = QSpinBox()
        self.batch.setRange(1, MAX_BATCH)
        self.batch.setValue(VERIFY_BATCH)
        self.batch.setMaximumWidth(120)
        self.most = QRadioButton("As many as hold the work (found by running them)")
        self.chosen = QRadioButton("This many:")
        self.most.setChecked(True)
        self.seats = QSpinBox()
        self.seats.setRange(1, MAX_SEATS)
        self.seats.setValue(3)
        self.seats.setMaximumWidth(120)
        seats_row = QHBoxLayout()
        seats_row.addWidget(self.most)
        seats_row.addWidget(self.chosen)
        seats_row.addWidget(self.seats)
        seats_row.addStretch(1)
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
        form.addRow("Each seat runs", self.work)
        self.file_label = QLabel("File")
        form.addRow(self.file_label, file_row)
        self.args_label = QLabel("Script arguments")
        form.addRow(self.args_label, self.script_args)
        form.addRow("Batch", self.batch)
        form.addRow("Seats", seats_row)
        form.addRow("Folder", out_row)
        form.addRow("", self.verify)
        form.addRow("", self.force)
        self._file_row = file_row
        self.work.currentIndexChanged.connect(self._work_changed)
        self.most.toggled.connect(self._mode_changed)
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
        self.share_button = buttons.addButton("Find how many", QDialogButtonBox.ButtonRole.ActionRole)
        self.share_button.clicked.connect(self.start)
        buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addWidget(intro)
        layout.addLayout(form)
        layout.addWidget(self.status)
        layout.addWidget(self.table, 1)
        layout.addWidget(buttons)
        self.resize(820, 560)
        self._work_changed()
        self._mode_changed()

    def _work_changed(self) -> None:
        index = self.work.currentIndex()
        for widget in (self.file_label, self.work_file, self.work_browse):
            widget.setVisible(index > 0)
        self.args_label.setVisible(index == 1)
        self.script_args.setVisible(index == 1)

    def _mode_changed(self) -> None:
        most = self.most.isChecked()
        self.seats.setEnabled(not most)
        self.verify.setEnabled(not most)  # finding the most always runs the seats
        self.share_button.setText("Find how many" if most else "Write profiles")

    def _browse_work(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "What each seat runs", self.work_file.text(),
                                              FILE_FILTERS.get(self.work.currentIndex(), ""))
        if path:
            self.work_file.setText(path)

    def _browse(self) -> None:
        folder = QFileDialog.getExistingDirectory(self, "Folder for the seats' profiles", self.out.text())
        if folder:
            self.out.setText(folder)

    def work_args(self) -> list[str] | None:
        """The command's arguments for the work and batch; None (and the status says why) when incomplete."""
        index = self.work.currentIndex()
        path = self.work_file.text().strip()
        if index and not path:
            self.status.setText(f"Choose the {'script' if index == 1 else 'saved Keras model'} each seat runs.")
            return None
        args = ["--script", path, "--args", self.script_args.text()] if index == 1 else []
        args += ["--model", path] if index == 2 else []
        script_has_batch = index != 1 or "{batch}" in self.script_args.text()
        if self.most.isChecked() or self.verify.isChecked():
            args += ["--batch", str(self.batch.value())] if script_has_batch else []
        return args

    def start(self) -> None:
        if self.process is not None:
            return
        out = self.out.text().strip()
        if not out:
            self.status.setText("Choose a folder for the seats' profiles.")
            return
        work = self.work_args()
        if work is None:
            return
        base = Path(self._folder.name) / "base.json"
        save_profile(self.config, base)
        most = self.most.isChecked()
        seats = ["--max"] if most else ["--seats", str(self.seats.value())]
        args = ["share", *seats, "--config", str(base), "--out", out, "--json", *work]
        args += ["--verify"] * (self.verify.isChecked() and not most) + ["--force"] * self.force.isChecked()
        self.report = None
        self.table.setRowCount(0)
        self.status.setText("Measuring the work alone, then running the seats side by side…" if most else
                            "Verifying the seats side by side…" if self.verify.isChecked() else "Writing…")
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
            printed = json.loads(out)  # what `share --json` printed: its report, or the input it refused
        except ValueError:
            printed = None
        if isinstance(printed, dict) and isinstance(printed.get("error"), dict):
            error = printed["error"]
            self.status.setText(f"{FIELD_WORDS.get(str(error.get('field')), 'The work')}: {error.get('message')}")
            return
        if not isinstance(printed, dict):
            # A refusal before the command could say it as JSON (an invalid configuration): its own lines, less
            # the command's "error:" prefix.
            errors = [line.removeprefix("error: ") for line in err.splitlines() if line.startswith("error")]
            self.status.setText("\n".join(errors or err.strip().splitlines()[-1:])
                                or f"the share command ended with exit code {code}")
            return
        self.report = cast(ShareReport, printed)
        self.show_report(self.report, code)

    def show_report(self, report: ShareReport, code: int = 0) -> None:
        seats = report.get("seats") or []
        reserve = report.get("reserved_mib_per_seat") or 0
        text = (f"{report.get('device')}: {report.get('source')}"
                + (f", less {reserve} MiB per seat for its CUDA context and headroom" if reserve else "")
                + f": {seats_text(len(seats))} of {report.get('seat_limit_mib')} MiB, written to {report.get('out')}.")
        most = report.get("most")
        if most:
            text = (f"{seats_text(most['seats'])} can share this machine for {report.get('work')} (batch "
                    f"{report.get('batch')}): all held side by side; {most.get('above')}.\n" + text)
        elif "verified" in report:
            text += " All seats held." if report["verified"] else " A seat did not hold."
        for warning in report.get("warnings") or ():
            text += f"\nNote: {warning}"
        self.status.setText(text)
        self.table.setRowCount(len(seats))
        for row, seat in enumerate(seats):
            status = seat.get("status", "written")
            if seat.get("error"):
                status += f": {seat['error']}"
            values = (str(seat.get("seat")), str(seat.get("profile")), mib_text(seat.get("limit_bytes")),
                      mib_text(seat.get("peak_bytes")), mib_text(seat.get("process_peak_bytes")), status)
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
