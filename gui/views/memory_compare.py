"""Two past runs' memory side by side: each device's allocator peak in either run, and the change."""

from __future__ import annotations

import html

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QHeaderView,
    QLabel,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)
from tf_device_panel.core.client.run_memory import PeakChange, compare_peaks
from tf_device_panel.core.units import mib_text

COMPARE_COLUMNS = ("Device", "First run", "Second run", "Change")


def _figure(mib: float | None) -> str:
    return "—" if mib is None else mib_text(mib)


def _change(row: PeakChange) -> str:
    change, first = row.change_mib, row.first_mib
    if change is None:
        return "only in one run"
    share = f" ({change / first:+.0%})" if first else ""
    return mib_text(change, signed=True) + share


class MemoryCompareDialog(QDialog):
    """`first` and `second`: (a line naming the run, its peaks per device in MiB)."""

    def __init__(self, first: tuple[str, dict[str, float]], second: tuple[str, dict[str, float]],
                 parent: QWidget | None = None):
        super().__init__(parent)
        self.setObjectName("memory-compare-dialog")
        self.setWindowTitle("Compare runs' memory")
        self.rows = compare_peaks(first[1], second[1])
        names = QLabel(f"<b>First run:</b> {html.escape(first[0])}<br><b>Second run:</b> {html.escape(second[0])}")
        names.setTextFormat(Qt.TextFormat.RichText)
        names.setWordWrap(True)
        self.table = QTableWidget(len(self.rows), len(COMPARE_COLUMNS))
        self.table.setHorizontalHeaderLabels(list(COMPARE_COLUMNS))
        self.table.setEditTriggers(QTableWidget.EditTrigger.NoEditTriggers)
        self.table.verticalHeader().setVisible(False)
        self.table.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.Stretch)
        for number, row in enumerate(self.rows):
            values = (row.device, _figure(row.first_mib), _figure(row.second_mib), _change(row))
            for column, value in enumerate(values):
                item = QTableWidgetItem(value)
                if column:
                    item.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
                self.table.setItem(number, column, item)
        self.note = QLabel("Allocator peaks from each run's record (TensorFlow's get_memory_info, sampled while it "
                           "ran)." if self.rows else
                           "Neither run recorded allocator figures: on the CPU they need cpu_memory_limit_mib.")
        self.note.setWordWrap(True)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addWidget(names)
        layout.addWidget(self.table, 1)
        layout.addWidget(self.note)
        layout.addWidget(buttons)
        self.resize(640, 320)
