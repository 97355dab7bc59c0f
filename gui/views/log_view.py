"""The placement log's view: the raw output (filterable, bounded) and a placement table with a per-device summary.

Shown as the window's Placement log dock (gui.log_panel) and on its own for a past run (the History's dialog)."""

from __future__ import annotations

import html
from collections import Counter, deque
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import (
    QAbstractTableModel,
    QEvent,
    QModelIndex,
    QPersistentModelIndex,
    QSortFilterProxyModel,
    Qt,
)
from PySide6.QtGui import QBrush, QColor, QFont
from PySide6.QtWidgets import (
    QCheckBox,
    QFileDialog,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QPlainTextEdit,
    QPushButton,
    QSizePolicy,
    QSplitter,
    QTableView,
    QToolButton,
    QVBoxLayout,
    QWidget,
)
from tf_device_panel.core.catalogue import JOBS
from tf_device_panel.core.client import wording
from tf_device_panel.core.client.run_record import JobOutcome
from tf_device_panel.core.client.run_state import PlacementKey, RunChanges, RunState
from tf_device_panel.core.client.session import AppliedChanged, JobEnded, JobHandedOver, RunStateChanged
from tf_device_panel.core.protocol import ansi, events, output_lines
from tf_device_panel.core.protocol.events import Event
from tf_device_panel.gui.shell.notice import show_notice
from tf_device_panel.gui.widgets.colors import device_color

if TYPE_CHECKING:
    from tf_device_panel.gui.shell.controller import RuntimeController

MAX_LOG_LINES = 20_000
MAX_STARTUP_LINES = 2_000  # the next runtime's start-up lines held apart (a TensorFlow start-up prints tens)
KIND_LABELS = {output_lines.PLACEMENT: "Placement", output_lines.TF_INFO: "TF info", output_lines.WARNING: "Warnings",
               output_lines.ERROR: "Errors", output_lines.OUTPUT: "Job output"}
_Index = QModelIndex | QPersistentModelIndex


def event_log_entry(event: Event, after_cancel: bool = False) -> tuple[str, str] | None:
    """(kind, text) for events that belong in the raw log; `after_cancel`: the run's job was just cancelled."""
    match event:
        case events.Log(kind=kind, text=text):
            return kind, ansi.plain(text)  # a job's colour codes drawn away, never shown as escape bytes
        case events.Placement(line=line):
            return output_lines.PLACEMENT, line
        case events.Fallback():
            return output_lines.WARNING, f"[panel] {wording.fallback(event)}"
        case events.Error():
            return output_lines.ERROR, f"[panel] {wording.job_error(event)}"
        case events.StartupError():
            return output_lines.ERROR, f"[panel] {wording.startup_error(event)}"
        case events.RuntimeExited() if after_cancel:  # its exit code is the cancel's ("exited with code 1")
            return output_lines.TF_INFO, f"[panel] {wording.exited_after_cancel(event)}"
        case events.RuntimeExited(expected=expected):
            return output_lines.TF_INFO if expected else output_lines.ERROR, f"[panel] {wording.runtime_exited(event)}"
        case events.JobStarted():
            return output_lines.TF_INFO, f"[panel] {wording.job_started(event)}"
    return None


class PlacementModel(QAbstractTableModel):
    HEADERS = ("Op", "Op type", "Device", "Count")

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.rows: list[list[Any]] = []          # [op, op_type, short_device, count, fallback]
        self._index: dict[PlacementKey, int] = {}
        self.fallback_ops: set[tuple[str, str]] = set()   # (op_type, actual device)

    def clear(self) -> None:
        self.beginResetModel()
        self.rows, self._index, self.fallback_ops = [], {}, set()
        self.endResetModel()

    def add(self, counts: Mapping[PlacementKey, int]) -> None:
        """Counts the run state added, by (op, op type, device): new keys become rows, known ones count up."""
        new_rows: list[list[Any]] = []
        changed: set[int] = set()
        for key, count in counts.items():
            row = self._index.get(key)
            if row is None:
                self._index[key] = len(self.rows) + len(new_rows)
                new_rows.append([key.op, key.op_type, key.device, count, False])
            else:
                self.rows[row][3] += count
                changed.add(row)
        if changed:
            self.dataChanged.emit(self.index(min(changed), 3), self.index(max(changed), 3))
        if new_rows:
            self.beginInsertRows(QModelIndex(), len(self.rows), len(self.rows) + len(new_rows) - 1)
            self.rows.extend(new_rows)
            self.endInsertRows()
        self._mark_fallbacks()

    def mark_fallback(self, op_type: str, device: str) -> None:
        self.fallback_ops.add((op_type, device))
        self._mark_fallbacks()

    def _mark_fallbacks(self) -> None:
        for number, row in enumerate(self.rows):
            flagged = (row[1], row[2]) in self.fallback_ops
            if flagged != row[4]:
                row[4] = flagged
                self.dataChanged.emit(self.index(number, 0), self.index(number, 3))

    def per_device(self) -> Counter[str]:
        totals: Counter[str] = Counter()
        for row in self.rows:
            totals[row[2]] += row[3]
        return totals

    def rowCount(self, parent: _Index = QModelIndex()) -> int:  # noqa: B008 (Qt's signature)
        return 0 if parent.isValid() else len(self.rows)

    def columnCount(self, parent: _Index = QModelIndex()) -> int:  # noqa: B008
        return 4

    def headerData(self, section: int, orientation: Qt.Orientation, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if orientation == Qt.Orientation.Horizontal and role == Qt.ItemDataRole.DisplayRole:
            return self.HEADERS[section]
        return None

    def data(self, index: _Index, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if not index.isValid():
            return None
        row = self.rows[index.row()]
        column = index.column()
        if role in (Qt.ItemDataRole.DisplayRole, Qt.ItemDataRole.EditRole):
            value = row[column]
            return value if column == 3 or role == Qt.ItemDataRole.EditRole else str(value)
        if role == Qt.ItemDataRole.ForegroundRole and column == 2:
            return QBrush(device_color(row[2]))
        if role == Qt.ItemDataRole.BackgroundRole and row[4]:
            return QBrush(QColor(255, 170, 0, 90))
        if role == Qt.ItemDataRole.ToolTipRole and row[4]:
            return "Soft placement moved this op: it was pinned to a device that does not exist"
        if role == Qt.ItemDataRole.ToolTipRole and column == 0:
            return row[0]  # a long graph node name is elided in its cell
        if role == Qt.ItemDataRole.FontRole and column == 2:
            font = QFont()
            font.setBold(True)
            return font
        return None


class PlacementProxy(QSortFilterProxyModel):
    """The placement table's order and filter: by count, ties by device, so MatMul is not buried under
    hundreds of _Arg/_Retval rows; the log's text filter matches any column."""

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.setSortRole(Qt.ItemDataRole.EditRole)
        self.setFilterKeyColumn(-1)
        self.setFilterCaseSensitivity(Qt.CaseSensitivity.CaseInsensitive)

    def headerData(self, section: int, orientation: Qt.Orientation, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        # The order said in words' direction: "Count ▼" while the largest come first (the style's own indicator
        # drew ▲ for that).
        title = super().headerData(section, orientation, role)
        if (role == Qt.ItemDataRole.DisplayRole and orientation == Qt.Orientation.Horizontal
                and section == self.sortColumn() and title):
            return f"{title} {'▼' if self.sortOrder() == Qt.SortOrder.DescendingOrder else '▲'}"
        return title

    def lessThan(self, left: _Index, right: _Index) -> bool:
        model = self.sourceModel()
        if left.column() == 3 and isinstance(model, PlacementModel):
            a, b = model.rows[left.row()], model.rows[right.row()]
            if a[3] != b[3]:
                return bool(a[3] < b[3])
            return bool(a[2] > b[2])  # in the (default) descending order, equal counts list devices A→Z
        return bool(super().lessThan(left, right))


LOG_LEAST_LINES, TABLE_LEAST_ROWS = 5, 3


class LogView(QWidget):
    """Bounded, batched raw log with filters, and the placement table.

    The log follows new output while its view is at the end; once the person scrolls up it stays put and a
    "Jump to end" button offers the way back."""

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.entries: deque[tuple[str, str]] = deque(maxlen=MAX_LOG_LINES)
        self._cancelled = False  # the last job finished was cancelled: its process's exit is no failure
        # What the table shows. The window's dock is given what its session's run state made of each batch; a
        # log shown on its own (a past run's) feeds this one.
        self.run_state = RunState()
        self.total_lines = 0

        self.filter_text = QLineEdit(placeholderText="Filter log…")
        self.filter_text.setClearButtonEnabled(True)
        self.kind_boxes: dict[str, QCheckBox] = {}
        filters = QHBoxLayout()
        filters.addWidget(self.filter_text, 1)
        for kind, label in KIND_LABELS.items():
            box = QCheckBox(label)
            box.setChecked(True)
            box.toggled.connect(self._refilter)
            self.kind_boxes[kind] = box
            filters.addWidget(box)
        self.save_button = QPushButton("Save log…")
        self.save_button.clicked.connect(self.save_dialog)
        self.clear_button = QPushButton("Clear")
        self.clear_button.clicked.connect(self.clear)
        self.jump_button = QPushButton("⤓ Jump to end")
        self.jump_button.setToolTip("New output arrived below; follow it again")
        self.jump_button.clicked.connect(self.jump_to_end)
        self.jump_button.hide()
        filters.addWidget(self.jump_button)
        filters.addWidget(self.save_button)
        filters.addWidget(self.clear_button)
        self.filter_text.textChanged.connect(self._refilter)

        self.view = QPlainTextEdit(readOnly=True)
        self.view.setMaximumBlockCount(MAX_LOG_LINES)
        # Long lines (a placement's full device name, a traceback) wrap: the log scrolls down, never sideways.
        self.view.setLineWrapMode(QPlainTextEdit.LineWrapMode.WidgetWidth)
        self.view.setWordWrapMode(self.view.wordWrapMode().WrapAtWordBoundaryOrAnywhere)
        self.view.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        mono = QFont("monospace")
        mono.setStyleHint(QFont.StyleHint.Monospace)
        self.view.setFont(mono)
        self.live_line = QLabel()
        self.live_line.setFont(mono)
        self.live_line.setTextFormat(Qt.TextFormat.PlainText)
        # A long progress bar is clipped rather than widening the panel (and the window with it).
        self.live_line.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.live_line.hide()
        # The next runtime's start-up lines (a spare starting while or after a job runs: lines without a job id)
        # are held apart, collapsed under "next runtime starting", so the log never ends on, say, a spare's
        # "failed call to cuInit" after the job's last line; they join the log just before the next job's first.
        self.startup: list[tuple[str, str]] = []
        self._log_job_id: str | None = None  # the job whose lines the log shows last
        self.startup_toggle = QToolButton()
        self.startup_toggle.setCheckable(True)
        self.startup_toggle.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextBesideIcon)
        self.startup_toggle.setArrowType(Qt.ArrowType.RightArrow)
        self.startup_toggle.setAutoRaise(True)
        self.startup_toggle.setToolTip("The next runtime's start-up output, apart from the job's: it joins the log "
                                       "before the next job's first line")
        self.startup_toggle.toggled.connect(self._show_startup)
        self.startup_toggle.hide()
        self.startup_view = QPlainTextEdit(readOnly=True)
        self.startup_view.setObjectName("next-runtime-starting")
        self.startup_view.setLineWrapMode(QPlainTextEdit.LineWrapMode.WidgetWidth)
        self.startup_view.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.startup_view.setFont(mono)
        self.startup_view.hide()
        self.following = True
        self._appending = False  # scroll moves made here are not the person's
        self.view.verticalScrollBar().valueChanged.connect(self._on_scrolled)

        self.model = PlacementModel(self)
        self.proxy = PlacementProxy(self)
        self.proxy.setSourceModel(self.model)
        self.table = QTableView()
        self.table.setModel(self.proxy)
        self.table.setSortingEnabled(True)
        self.table.sortByColumn(3, Qt.SortOrder.DescendingOrder)
        self.table.horizontalHeader().setSortIndicatorShown(False)  # the header's own text says the order
        # The op name takes the room left and elides (hover for it); the table never scrolls sideways.
        header = self.table.horizontalHeader()
        header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        header.setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
        self.table.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.table.setTextElideMode(Qt.TextElideMode.ElideMiddle)
        self.table.verticalHeader().setVisible(False)
        self.table.setAlternatingRowColors(True)
        self.table.setMinimumWidth(280)
        self.summary = QLabel("No placements yet.")
        self.summary.setTextFormat(Qt.TextFormat.RichText)
        self.summary.setWordWrap(True)
        self.fallback_banner = QLabel()
        self.fallback_banner.setStyleSheet("background: rgba(255,170,0,0.35); padding: 4px; border-radius: 3px;")
        self.fallback_banner.setWordWrap(True)
        self.fallback_banner.hide()

        right = QWidget()
        right_layout = QVBoxLayout(right)
        right_layout.setContentsMargins(0, 0, 0, 0)
        right_layout.addWidget(self.fallback_banner)
        right_layout.addWidget(self.summary)
        right_layout.addWidget(self.table, 1)
        # The filter row spans the panel: under the log alone its width squeezed the placement table.
        splitter = QSplitter()
        left = QWidget()
        left_layout = QVBoxLayout(left)
        left_layout.setContentsMargins(0, 0, 0, 0)
        left_layout.addWidget(self.view, 1)
        left_layout.addWidget(self.live_line)
        left_layout.addWidget(self.startup_toggle)
        left_layout.addWidget(self.startup_view)
        splitter.addWidget(left)
        splitter.addWidget(right)
        splitter.setStretchFactor(0, 3)
        splitter.setStretchFactor(1, 2)
        splitter.setSizes([600, 400])
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.addLayout(filters)
        layout.addWidget(splitter, 1)
        self._fit_minimums()

    def _fit_minimums(self) -> None:
        """A useful least: the log LOG_LEAST_LINES lines, the table its header and TABLE_LEAST_ROWS rows, in the
        font they are drawn with (the window's zoom). The bottom dock gave them 4 lines and 1-2 rows at 1280×720."""
        lines = LOG_LEAST_LINES * self.view.fontMetrics().lineSpacing() + 2 * self.view.frameWidth() + 8
        self.view.setMinimumHeight(lines)
        rows = (self.table.horizontalHeader().sizeHint().height() + 2 * self.table.frameWidth()
                + TABLE_LEAST_ROWS * self.table.verticalHeader().defaultSectionSize())
        self.table.setMinimumHeight(rows)

    def changeEvent(self, event: QEvent) -> None:
        super().changeEvent(event)
        if event.type() in (QEvent.Type.FontChange, QEvent.Type.StyleChange):
            self._fit_minimums()

    # -- feeding -------------------------------------------------------------------------------
    def follow(self, link: RuntimeController) -> None:
        """Show the session's runs as they happen: each batch as the run state made of it, a fresh table for each
        run (or configuration), and why a finished run logged no placement."""
        link.subscribe(self, RunStateChanged, lambda change: self.add_events(list(change.batch), change.changes))
        link.subscribe(self, AppliedChanged, lambda _change: self.clear_placements())
        link.subscribe(self, JobHandedOver, lambda _handed_over: self.clear_placements())
        link.subscribe(self, JobEnded, lambda ended: self.no_placements_because(placement_silence(ended.outcome)))

    def add_events(self, batch: list[Event], changes: RunChanges | None = None) -> None:
        """One batch from the controller: a single text append and a single table update. `changes`: what the
        window's run state made of the batch (the table shows the run state's counts, never its own)."""
        if changes is None:
            changes = self.run_state.apply_all(batch)
        lines: list[tuple[str, str]] = []
        held = len(self.startup)
        for event in batch:
            match event:
                case events.Log(partial=True, text=text):
                    # A progress bar redrawing its line with "\r": one live line, replaced until the line ends.
                    self.live_line.setText(ansi.plain(text))
                    self.live_line.show()
                    continue
                case events.JobFinished(status=status):
                    self._cancelled = status == "cancelled"
            if event.job_id is not None and event.job_id != self._log_job_id:
                self._log_job_id = event.job_id  # a new job's first line: its runtime's start-up comes first
                lines.extend(self._take_startup())
            entry = event_log_entry(event, self._cancelled)
            if isinstance(event, events.RuntimeExited):
                self._cancelled = False
            if entry is not None and self._is_startup(event):
                self.startup.append(entry)
                continue
            if entry is not None:
                lines.append(entry)
                if isinstance(event, events.Log):
                    self.live_line.hide()
        if len(self.startup) != held:
            del self.startup[:-MAX_STARTUP_LINES]
            self._update_startup()
        if changes.fresh:
            self.clear_placements()
        for fallback in changes.fallbacks:
            self.model.mark_fallback(fallback.op, fallback.actual_short)
            self._show_fallback(fallback)
        if changes.placements:
            self.model.add(changes.placements)
            self._update_summary()
        if lines:
            self.total_lines += len(lines)
            self.entries.extend(lines[-MAX_LOG_LINES:])
            visible = [text for kind, text in lines[-MAX_LOG_LINES:] if self._passes(kind, text)]
            if visible:
                self._append("\n".join(visible))

    # -- the next runtime's start-up, apart ----------------------------------------------------
    @staticmethod
    def _is_startup(event: Event) -> bool:
        """A runtime's output before it runs a job (TensorFlow's start-up lines): no job id, not the panel's."""
        return (isinstance(event, (events.Log, events.Placement)) and event.job_id is None
                and event.stream in ("stdout", "stderr"))

    def _take_startup(self) -> list[tuple[str, str]]:
        if not self.startup:
            return []
        taken = [(output_lines.TF_INFO, f"[panel] the runtime starting ({len(self.startup)} lines):"), *self.startup]
        self.startup = []
        self._update_startup()
        return taken

    def _update_startup(self) -> None:
        count = len(self.startup)
        self.startup_toggle.setVisible(count > 0)
        self.startup_toggle.setText(f"next runtime starting ({count} line{'s' if count != 1 else ''})")
        if count == 0:
            self.startup_toggle.setChecked(False)
        if self.startup_toggle.isChecked():
            self.startup_view.setPlainText("\n".join(text for _, text in self.startup))
        self.startup_view.setVisible(count > 0 and self.startup_toggle.isChecked())

    def _show_startup(self, shown: bool) -> None:
        self.startup_toggle.setArrowType(Qt.ArrowType.DownArrow if shown else Qt.ArrowType.RightArrow)
        self._update_startup()

    # -- following the end -----------------------------------------------------------------------
    def _append(self, text: str) -> None:
        sideways = self.view.horizontalScrollBar().value()
        self._appending = True
        try:
            self.view.appendPlainText(text)
            self.view.horizontalScrollBar().setValue(sideways)
            if self.following:
                self._scroll_to_end()
        finally:
            self._appending = False
        self.jump_button.setVisible(not self.following)

    def _scroll_to_end(self) -> None:
        bar = self.view.verticalScrollBar()
        bar.setValue(bar.maximum())

    def is_at_end(self) -> bool:
        bar = self.view.verticalScrollBar()
        return bar.value() >= bar.maximum()

    def _on_scrolled(self, _value: int) -> None:
        if self._appending:
            return
        self.following = self.is_at_end()
        if self.following:
            self.jump_button.hide()

    def jump_to_end(self) -> None:
        self.following = True
        self._scroll_to_end()
        self.jump_button.hide()

    def clear_placements(self) -> None:
        """An empty placement table (a new run, or Clear); the raw log keeps its history."""
        self.model.clear()
        self.fallback_banner.hide()
        self._update_summary()

    def clear(self) -> None:
        self.entries.clear()
        self.startup = []
        self._update_startup()
        self.view.clear()
        self.jump_to_end()
        self.clear_placements()

    def _show_fallback(self, fallback: events.Fallback) -> None:
        self.fallback_banner.setText(
            f"⚠ Soft placement: <b>{fallback.op}</b> was pinned to <b>{fallback.requested}</b>, which does not "
            f"exist here, and ran on <b>{fallback.actual_short}</b> instead.")
        self.fallback_banner.show()

    def no_placements_because(self, reason: str) -> None:
        """A finished run logged no placement: say why where its placements would be."""
        if not self.model.rows:
            self.summary.setText(html.escape(f"No placements: {reason}"))

    def _update_summary(self) -> None:
        totals = self.model.per_device()
        if not totals:
            self.summary.setText("No placements yet.")
            return
        parts = [f'<span style="color:{device_color(d).name()}"><b>{d}</b></span>: {n}'
                 for d, n in sorted(totals.items())]
        self.summary.setText(f"{sum(totals.values())} placements — " + " · ".join(parts))

    # -- filtering and saving ----------------------------------------------------------------
    def _passes(self, kind: str, text: str) -> bool:
        box = self.kind_boxes.get(kind)
        if box is not None and not box.isChecked():
            return False
        needle = self.filter_text.text()
        return not needle or needle.lower() in text.lower()

    def _refilter(self) -> None:
        visible = [text for kind, text in self.entries if self._passes(kind, text)]
        self._appending = True
        try:
            self.view.setPlainText("\n".join(visible))
            # Lines start at their beginning (moving the cursor to the very end scrolled long lines sideways).
            self.view.horizontalScrollBar().setValue(0)
            if self.following:
                self._scroll_to_end()
        finally:
            self._appending = False
        self.proxy.setFilterFixedString(self.filter_text.text())

    def save(self, path: str | Path) -> None:
        saved = [text for _, text in self.entries]
        if self.startup:
            saved += [f"[panel] next runtime starting ({len(self.startup)} lines):", *(t for _, t in self.startup)]
        Path(path).write_text("\n".join(saved) + "\n", encoding="utf-8")

    def save_dialog(self) -> None:
        """Ask where, and save the log there (File → Save log and the panel's own button)."""
        path, _ = QFileDialog.getSaveFileName(self, "Save log", "placement-log.txt", "Text files (*.txt)")
        if path:
            try:
                self.save(path)
            except OSError as exc:
                show_notice(self, "Save log", f"Could not save the log to {path}:\n{exc.strerror}")


def placement_silence(outcome: JobOutcome) -> str:
    """Why a finished run logged no placement, as the person can change it."""
    spec = JOBS.get(outcome.job)
    own = next((param for param in spec.params if param.name == "log_placement"), None) if spec else None
    if own is not None and outcome.params.get("log_placement") is False:
        return (f"{spec.title if spec else outcome.job}'s own “{own.label}” switch was off for this run; tick it in "
                "the job's form to see where its ops run.")
    if outcome.config.get("log_placement") is False:
        return "“Log device placement” is off in the Configuration; tick it and Apply to see where ops run."
    if outcome.status != "ok":
        return f"the run ended ({outcome.status}) before any op was placed."
    return "this run placed no TensorFlow op."
