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
    QFormLayout,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QRadioButton,
    QSpinBox,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)
from tf_device_panel.core import units
from tf_device_panel.core.catalogue.fit_work import BATCH
from tf_device_panel.core.catalogue.share_params import (
    SHARE_OPTIONS,
    SHARE_WORKS,
    ShareWork,
    command_args,
    share_option,
)
from tf_device_panel.core.client.share import ShareReport, seats_text
from tf_device_panel.core.config import DeviceConfig, Kind, save_profile
from tf_device_panel.core.processes import module_command
from tf_device_panel.core.units import MIB
from tf_device_panel.gui.widgets.common import guard_wheel
from tf_device_panel.gui.widgets.form_builder import Declared, Editor, build_editor, option_declared

SEAT_COLUMNS = ("Seat", "Profile", "Limit", "Peak", "Process", "Status")
FROM_THE_WINDOW = ("config",)     # the window's configuration is the base profile: no field of the dialog's
# The form's own field: which of the works (core.catalogue.share_params) each seat runs.
WORK = Declared("work", Kind.CHOICE, "Each seat runs", choices=tuple(work.words for work in SHARE_WORKS),
                default=SHARE_WORKS[0].words)
# The form's rows, in its order: the work, then its file and arguments, the batch, the seats (the switch between
# the most and a number of seats stands on their row, before the count), the folder and the two switches.
ROWS = ("work", "script", "model", "args", "batch", "seats", "out", "verify", "force")
FILE_ROW = "File"                 # the row of the file the chosen work runs, whichever it is
ON_THE_ROW_OF = {"max": "seats"}
SPIN_WIDTH = 120
# The dialog's name for each input a refusal is about (the command names them by its options).
FIELD_WORDS = {option.name: option.param.label for option in SHARE_OPTIONS} | {"work": "The work"}


def show_share(parent: QWidget, config: DeviceConfig) -> ShareDialog:
    """File → Share a GPU…: the seats start from `config`, the window's configuration."""
    dialog = ShareDialog(config, parent)
    guard_wheel(dialog)
    dialog.show()
    return dialog


def bytes_as_mib(value: Any) -> str:
    """A seat's figure in bytes as MiB ("—" where the record has none)."""
    return "—" if not isinstance(value, (int, float)) else units.mib_text(value / MIB)


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
        # Each field built from its option's declaration (core.catalogue.share_params), as the command line's are.
        self.editors: dict[str, Editor] = {option.name: build_editor(option_declared(option))
                                           for option in SHARE_OPTIONS if option.name not in FROM_THE_WINDOW}
        self.editors["work"] = build_editor(WORK)
        self.work = cast(QComboBox, self.editors["work"].widget)
        self.script_args = cast(QLineEdit, self.editors["args"].widget)
        self.batch = cast(QSpinBox, self.editors["batch"].widget)
        self.seats = cast(QSpinBox, self.editors["seats"].widget)
        self.most, self.chosen = self.editors["max"].widget.findChildren(QRadioButton)
        self.out = self._line(self.editors["out"])
        self.verify = cast(QCheckBox, self.editors["verify"].widget)
        self.force = cast(QCheckBox, self.editors["force"].widget)
        for spin in (self.batch, self.seats):
            spin.setMaximumWidth(SPIN_WIDTH)
        form = QFormLayout()
        self.row_labels: dict[str, QLabel] = {}
        for name in ROWS:
            if name != "work" and share_option(name).param.kind is Kind.TOGGLE:
                form.addRow("", self.editors[name].widget)  # its label is on its box
                continue
            self.row_labels[name] = QLabel(WORK.label if name == "work" else FILE_ROW if self._is_work_file(name)
                                           else share_option(name).param.label)
            beside = [self.editors[other].widget for other, row in ON_THE_ROW_OF.items() if row == name]
            if not beside:
                form.addRow(self.row_labels[name], self.editors[name].widget)
                continue
            row = QHBoxLayout()
            for widget in (*beside, self.editors[name].widget):
                row.addWidget(widget)
            row.addStretch(1)
            form.addRow(self.row_labels[name], row)
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

    @staticmethod
    def _line(editor: Editor) -> QLineEdit:
        """A path's text field, beside its Browse… button."""
        line = editor.widget.findChild(QLineEdit)
        assert line is not None  # a PATH's editor is a text field and its button
        return line

    @staticmethod
    def _is_work_file(name: str) -> bool:
        return any(work.options[:1] == (name,) for work in SHARE_WORKS)

    @property
    def chosen_work(self) -> ShareWork:
        return SHARE_WORKS[self.work.currentIndex()]

    @property
    def work_file(self) -> QLineEdit | None:
        """The text field of the file the chosen work runs (None: the built-in cnn runs no file)."""
        options = self.chosen_work.options
        return self._line(self.editors[options[0]]) if options else None

    def _work_changed(self) -> None:
        shown = set(self.chosen_work.options)
        for work in SHARE_WORKS:
            for name in work.options:
                self.row_labels[name].setVisible(name in shown)
                self.editors[name].widget.setVisible(name in shown)

    def _mode_changed(self) -> None:
        most = self.most.isChecked()
        self.seats.setEnabled(not most)
        self.verify.setEnabled(not most)  # finding the most always runs the seats
        self.share_button.setText("Find how many" if most else "Write profiles")

    def work_args(self) -> list[str] | None:
        """The command's arguments for the work and batch; None (and the status says why) when incomplete."""
        work = self.chosen_work
        values = {name: self.editors[name].read() for name in work.options}
        if work.options and not str(values[work.options[0]]).strip():
            self.status.setText(f"Choose the {work.what} each seat runs.")
            return None
        values = {name: value.strip() if share_option(name).param.kind is Kind.PATH else value
                  for name, value in values.items()}
        script_has_batch = BATCH in str(values.get("args", BATCH))
        if (self.most.isChecked() or self.verify.isChecked()) and script_has_batch:
            values["batch"] = self.batch.value()
        return command_args(values)

    def share_args(self) -> list[str] | None:
        """The `share` command's arguments for what the dialog says; None (and the status says why) when
        incomplete. The window's configuration is saved as the base profile."""
        out = self.out.text().strip()
        if not out:
            self.status.setText("Choose a folder for the seats' profiles.")
            return None
        work = self.work_args()
        if work is None:
            return None
        base = Path(self._folder.name) / "base.json"
        save_profile(self.config, base)
        most = self.most.isChecked()
        chosen = {"max": most, "seats": None if most else self.seats.value(), "config": str(base), "out": out,
                  "verify": self.verify.isChecked() and not most, "force": self.force.isChecked()}
        return ["share", *command_args(chosen), *work, "--json"]

    def start(self) -> None:
        if self.process is not None:
            return
        args = self.share_args()
        if args is None:
            return
        most = self.most.isChecked()
        self.report = None
        self.table.setRowCount(0)
        self.status.setText("Measuring the work alone, then running the seats side by side…"
                            if most or self.verify.isChecked() else "Writing…")
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
        overhead = report.get("overhead")
        if overhead:
            text += f"\nBeyond each seat's allocator: {overhead['said']}."
        for warning in report.get("warnings") or ():
            text += f"\nNote: {warning}"
        self.status.setText(text)
        self.table.setRowCount(len(seats))
        for row, seat in enumerate(seats):
            status = seat.get("status", "written")
            if seat.get("error"):
                status += f": {seat['error']}"
            values = (str(seat.get("seat")), str(seat.get("profile")), bytes_as_mib(seat.get("limit_bytes")),
                      bytes_as_mib(seat.get("peak_bytes")), bytes_as_mib(seat.get("process_peak_bytes")), status)
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
