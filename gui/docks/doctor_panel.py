"""The Doctor: why TensorFlow does not see or use a GPU, checked in the background, with fixes."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from PySide6.QtCore import QModelIndex, QPersistentModelIndex, QRect, QSize, Qt, Signal
from PySide6.QtGui import QBrush, QColor, QFont, QFontMetrics, QGuiApplication, QResizeEvent
from PySide6.QtWidgets import (
    QHBoxLayout,
    QLabel,
    QPushButton,
    QSizePolicy,
    QStyle,
    QStyledItemDelegate,
    QStyleOptionViewItem,
    QTreeWidget,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)
from tf_device_panel.core.client import doctor
from tf_device_panel.core.config import DeviceConfig
from tf_device_panel.gui.docks import RIGHT, DockSpec
from tf_device_panel.gui.widgets.worker import Worker, create_worker

STATUS_COLORS = {doctor.PASS: "#2e9d4f", doctor.WARN: "#c77700", doctor.FAIL: "#d33", doctor.SKIPPED: "#888888"}
NAME_SHARE = 0.5     # at most this share of the width goes to the check names, which wrap within it
MIN_NAME_WIDTH = 150


def text_margin(widget: QWidget) -> int:
    """The space Qt's item views leave each side of a cell's text."""
    return widget.style().pixelMetric(QStyle.PixelMetric.PM_FocusFrameHMargin, None, widget) + 1


class CheckTree(QTreeWidget):
    """Checks (name, result) with their evidence and fix below: every cell wraps in its column, and each row is
    as tall as its wrapped text (Qt's own tree sizes a row by one line, and elided the check names). The names'
    column is as wide as the longest name, up to half the width; the result takes the rest."""

    def __init__(self) -> None:
        super().__init__()
        self.setHeaderLabels(["Check", "Result"])
        self.setWordWrap(True)
        self.setUniformRowHeights(False)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.header().setStretchLastSection(True)
        self.setItemDelegate(_WrappingDelegate(self))
        self.header().sectionResized.connect(self._rows_again)

    def cell_text_width(self, index: QModelIndex | QPersistentModelIndex) -> int:
        """The width the text of `index` wraps in: its column, less the branch indentation and the margins."""
        width = self.columnWidth(index.column())
        if index.column() == 0:
            depth, parent = 0, index.parent()
            while parent.isValid():
                depth, parent = depth + 1, parent.parent()
            width -= self.indentation() * (depth + (1 if self.rootIsDecorated() else 0))
        return max(width - 2 * text_margin(self), 1)

    def fit_columns(self) -> None:
        names = [item for i in range(self.topLevelItemCount()) if (item := self.topLevelItem(i)) is not None]
        needed = max((QFontMetrics(item.font(0)).horizontalAdvance(item.text(0)) for item in names), default=0)
        needed += self.indentation() + 2 * text_margin(self) + 2
        share = int(self.viewport().width() * NAME_SHARE)
        self.setColumnWidth(0, max(min(needed, share), min(MIN_NAME_WIDTH, share)))

    def _rows_again(self, *_: Any) -> None:
        self.doItemsLayout()  # row heights follow the new column widths

    def resizeEvent(self, event: QResizeEvent) -> None:
        super().resizeEvent(event)
        self.fit_columns()


class _WrappingDelegate(QStyledItemDelegate):
    def __init__(self, tree: CheckTree):
        super().__init__(tree)
        self._tree = tree

    def sizeHint(self, option: QStyleOptionViewItem, index: QModelIndex | QPersistentModelIndex) -> QSize:
        hint = super().sizeHint(option, index)
        font = index.data(Qt.ItemDataRole.FontRole)
        metrics = QFontMetrics(font if isinstance(font, QFont) else option.font)
        text = str(index.data(Qt.ItemDataRole.DisplayRole) or "")
        wrapped = metrics.boundingRect(QRect(0, 0, self._tree.cell_text_width(index), 100_000),
                                       Qt.TextFlag.TextWordWrap, text)
        return QSize(hint.width(), max(hint.height(), wrapped.height() + 4))


def _row(name: str, text: str) -> QTreeWidgetItem:
    """A row of the checks' tree, its cells' text from the top (a wrapped neighbour may make it tall)."""
    item = QTreeWidgetItem([name, text])
    for column in (0, 1):
        item.setTextAlignment(column, Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignTop)
    return item


def _examine(config: DeviceConfig | None) -> tuple[list[doctor.Check], doctor.Facts]:
    """The checks and the facts they read (on the worker's thread: the probe process takes seconds)."""
    facts = doctor.gather(config)
    return doctor.diagnose(facts), facts


class DoctorPanel(QWidget):
    """Runs `core.client.doctor` on a worker thread (gui.worker); results come back on the GUI thread."""

    DOCK = DockSpec("doctor", "Doctor", RIGHT, "Doctor (why no GPU?)", tab_with="history", hidden=True,
                    needs=("config_source",))
    finished = Signal()

    def __init__(self, config_source: Callable[[], DeviceConfig | None], parent: QWidget | None = None):
        super().__init__(parent)
        self.config_source = config_source
        self.checks: list[doctor.Check] = []
        self.facts: doctor.Facts | None = None
        self._worker: Worker | None = None
        self.summary = QLabel("Press <b>Run checks</b> to find out why TensorFlow does or does not use a GPU here.")
        self.summary.setWordWrap(True)
        self.summary.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        # Names, results, evidence and fixes wrap in their column (each whole in its tooltip too): the panel
        # never scrolls sideways, and a check's name reads whole at any dock width.
        self.tree = CheckTree()
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
        return self._worker is not None and self._worker.running

    def run(self) -> None:
        if self.running:
            return
        self.run_button.setEnabled(False)
        self.run_button.setText("Checking…")
        self.summary.setText("Examining this machine: NVML, packages, and TensorFlow in a probe process…")
        config = self.config_source()
        self._worker = create_worker(_examine, config, name="doctor", parent=self,
                                     returned=self._show_examined, errored=self._show_failure)

    def wait(self, timeout: float) -> None:
        if self._worker is not None:
            self._worker.wait(timeout)

    def dock_body(self) -> QWidget:
        return self

    def wire(self, _link: object) -> None:
        """The checks examine this machine when asked (`run`), apart from the session."""

    def shut_down(self) -> None:
        self.wait(30)  # the probe process cannot be cut short: its checks end first

    def _show_examined(self, examined: tuple[list[doctor.Check], doctor.Facts]) -> None:
        self._show(*examined)

    def _show_failure(self, exc: BaseException) -> None:
        # reported in the panel, never a traceback in the user's face (the worker logs it for --verbose)
        self._show(None, f"{type(exc).__name__}: {exc}")

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
            item = _row(f"{doctor.ICONS[check.status]}  {check.title}", check.summary)
            color = QBrush(QColor(STATUS_COLORS[check.status]))
            item.setForeground(0, color)
            item.setToolTip(0, check.title)
            item.setToolTip(1, check.summary)
            item.setData(0, Qt.ItemDataRole.UserRole, check.id)
            for line in check.evidence:
                if line:
                    child = _row("Evidence", line)
                    child.setToolTip(1, line)
                    item.addChild(child)
            if check.fix:
                fix = _row("Fix", check.fix)
                fix.setToolTip(1, check.fix)
                font = fix.font(1)
                font.setBold(True)
                fix.setFont(1, font)
                item.addChild(fix)
            self.tree.addTopLevelItem(item)
            item.setExpanded(check.status in (doctor.WARN, doctor.FAIL))
        self.tree.fit_columns()
        counts = {s: sum(c.status == s for c in checks) for s in STATUS_COLORS}
        self.summary.setText(" · ".join(f"<span style='color:{STATUS_COLORS[s]}'><b>{n}</b> {s}</span>"
                                        for s, n in counts.items()))
        self.copy_button.setEnabled(True)
        self.finished.emit()

    def report_markdown(self) -> str:
        return doctor.to_markdown(self.checks, self.facts) if self.facts is not None else ""

    def copy_report(self) -> None:
        QGuiApplication.clipboard().setText(self.report_markdown())
