"""The job's own output under its result, as a terminal would show it: printed lines, and the line a progress
bar redraws with "\\r" live at the bottom. TensorFlow's placement and start-up lines stay in the Placement log,
so they neither mix with the job's lines nor push them away when the next runtime starts."""

from __future__ import annotations

from PySide6.QtCore import QSize, Qt
from PySide6.QtWidgets import QLabel, QPlainTextEdit, QSizePolicy, QVBoxLayout, QWidget
from tf_device_panel.gui.job_state import MAX_OUTPUT_LINES, JobState
from tf_device_panel.gui.widgets import monospace_font

EMPTY_TEXT = "The job's own output (print, logging, progress bars) appears here as it runs."


class ConsoleView(QWidget):
    """Shows one JobState's output; follows the end while the person has not scrolled up."""

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.view = QPlainTextEdit(readOnly=True)
        self.view.setObjectName("console")
        self.view.setAccessibleName("Job output")
        self.view.setMaximumBlockCount(MAX_OUTPUT_LINES)
        # Wrapped, never a sideways scroll bar: a long line reads whole on the next row.
        self.view.setLineWrapMode(QPlainTextEdit.LineWrapMode.WidgetWidth)
        self.view.setWordWrapMode(self.view.wordWrapMode().WrapAtWordBoundaryOrAnywhere)
        self.view.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.view.setFont(monospace_font())
        self.view.setPlaceholderText(EMPTY_TEXT)
        self.live_line = QLabel()
        self.live_line.setObjectName("console-live")
        self.live_line.setFont(monospace_font())
        self.live_line.setTextFormat(Qt.TextFormat.PlainText)
        self.live_line.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.live_line.hide()
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(0)
        layout.addWidget(self.view, 1)
        layout.addWidget(self.live_line)
        self.state: JobState | None = None

    def show_state(self, state: JobState) -> None:
        """Another job selected: its own lines."""
        self.state = state
        self.view.setPlainText("\n".join(state.output))
        self._scroll_to_end()
        self._show_live()

    def append(self, lines: list[str]) -> None:
        """New finished lines of the shown job (already in its state)."""
        bar = self.view.verticalScrollBar()
        following = bar.value() >= bar.maximum()
        if lines:
            self.view.appendPlainText("\n".join(lines))
        if following:
            self._scroll_to_end()
        self._show_live()

    def _show_live(self) -> None:
        live = self.state.live_line if self.state is not None else ""
        self.live_line.setText(live)
        self.live_line.setVisible(bool(live))

    def _scroll_to_end(self) -> None:
        bar = self.view.verticalScrollBar()
        bar.setValue(bar.maximum())
        self.view.horizontalScrollBar().setValue(0)

    def sizeHint(self) -> QSize:
        # A few lines: the result above takes most of the height (a text edit would ask for 192 px).
        return QSize(400, 4 * self.view.fontMetrics().height() + 2 * self.view.frameWidth())

    def minimumSizeHint(self) -> QSize:
        return QSize(80, 2 * self.view.fontMetrics().height())

    def text(self) -> str:
        """What a person reads: the finished lines, then the live one."""
        live = self.live_line.text() if not self.live_line.isHidden() else ""
        return self.view.toPlainText() + (("\n" + live) if live else "")
