"""The job's own output under its result, as a terminal would show it: printed lines, and the line a progress
bar redraws with "\\r" live at the bottom. TensorFlow's placement and start-up lines stay in the Placement log,
so they neither mix with the job's lines nor push them away when the next runtime starts.

Terminal colours: the lines are drawn through core.protocol.ansi (SGR colours and bold, `\\r`/`\\b` redraws;
any other escape sequence is swallowed), so Keras 3's coloured progress bar reads as in a terminal and never as
escape bytes; copying gives the plain text."""

from __future__ import annotations

import html

from PySide6.QtCore import QEvent, QMimeData, QObject, QSize, Qt, QTimer, Signal
from PySide6.QtGui import QColor, QFont, QResizeEvent, QTextCharFormat, QTextCursor
from PySide6.QtWidgets import QLabel, QPlainTextEdit, QSizePolicy, QVBoxLayout, QWidget
from tf_device_panel.core.protocol import ansi
from tf_device_panel.gui.views.job_state import MAX_OUTPUT_LINES, JobState
from tf_device_panel.gui.widgets.common import monospace_font

EMPTY_TEXT = "The job's own output (print, logging, progress bars) appears here as it runs."


def char_format(style: ansi.Style) -> QTextCharFormat:
    """How a styled run of the job's output is drawn (the console's own colours where the job set none)."""
    fmt = QTextCharFormat()
    fg, bg = (style.bg, style.fg) if style.inverse else (style.fg, style.bg)
    if fg:
        fmt.setForeground(QColor(fg))
    if bg:
        fmt.setBackground(QColor(bg))
    if style.bold:
        fmt.setFontWeight(QFont.Weight.Bold)
    if style.italic:
        fmt.setFontItalic(True)
    if style.underline:
        fmt.setFontUnderline(True)
    if style.strike:
        fmt.setFontStrikeOut(True)
    return fmt


def segments_html(segments: list[ansi.Segment]) -> str:
    """A line of styled segments as rich text (the live line under the console)."""
    parts = []
    for text, style in segments:
        css = []
        fg, bg = (style.bg, style.fg) if style.inverse else (style.fg, style.bg)
        if fg:
            css.append(f"color:{fg}")
        if bg:
            css.append(f"background-color:{bg}")
        if style.bold:
            css.append("font-weight:bold")
        if style.italic:
            css.append("font-style:italic")
        if style.underline:
            css.append("text-decoration:underline")
        escaped = html.escape(text).replace(" ", "&nbsp;")
        parts.append(f"<span style='{';'.join(css)}'>{escaped}</span>" if css else escaped)
    return "<span style='white-space:pre'>" + "".join(parts) + "</span>"


class ConsoleText(QPlainTextEdit):
    """The console's text: copying gives plain text only (what a terminal's copy gives, no colours). The live
    line (a progress bar redrawn with "\\r") is drawn inside its frame, under the last finished line, as a terminal
    draws it: the finished lines' viewport gives it the room at the bottom."""

    resized = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.live: QLabel | None = None

    def set_live(self, live: QLabel) -> None:
        self.live = live
        live.setParent(self)
        live.setAutoFillBackground(True)
        live.setBackgroundRole(self.viewport().backgroundRole())
        live.installEventFilter(self)
        self._place_live()

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        if watched is self.live and event.type() in (QEvent.Type.Show, QEvent.Type.Hide):
            self._place_live()
        return super().eventFilter(watched, event)

    def _place_live(self) -> None:
        live = self.live
        if live is None:
            return
        height = live.sizeHint().height() if not live.isHidden() else 0
        self.setViewportMargins(0, 0, 0, height)
        frame = self.frameWidth()
        scroll_bar = self.verticalScrollBar().width() if self.verticalScrollBar().isVisible() else 0
        live.setGeometry(frame, self.height() - frame - height, self.width() - 2 * frame - scroll_bar, height)

    def resizeEvent(self, event: QResizeEvent) -> None:
        super().resizeEvent(event)
        self._place_live()
        self.resized.emit()

    def createMimeDataFromSelection(self) -> QMimeData:
        data = QMimeData()
        data.setText(self.textCursor().selection().toPlainText())
        return data


class ConsoleView(QWidget):
    """Shows one JobState's output; follows the end while the person has not scrolled up."""

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.view = ConsoleText()
        self.view.setReadOnly(True)
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
        self.live_line.setTextFormat(Qt.TextFormat.RichText)
        self.live_line.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.live_line.hide()
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(0)
        layout.addWidget(self.view, 1)
        self.view.set_live(self.live_line)
        self.state: JobState | None = None
        self.renderer = ansi.AnsiRenderer()  # the style carries from line to line, as in a terminal
        self.live_plain = ""  # the live line as a person reads it
        self._has_lines = False  # a line was drawn (a first empty line leaves the document empty)
        # Following the end until the person scrolls up, and again once they scroll back down: new lines, a
        # taller or shorter pane (the result above taking its room when the job ends) keep the last line in sight.
        self.following = True
        bar = self.view.verticalScrollBar()
        bar.actionTriggered.connect(self._scrolled)  # the person's scrolls only (wheel, drag, click), not Qt's
        bar.rangeChanged.connect(self._range_changed)
        self.view.resized.connect(self._resized)

    def show_state(self, state: JobState) -> None:
        """Another job selected: its own lines."""
        self.state = state
        self.renderer = ansi.AnsiRenderer()
        self.view.clear()
        self._has_lines = False
        self._add_lines(list(state.output))
        self._scroll_to_end()
        self._show_live()

    def append(self, lines: list[str]) -> None:
        """New finished lines of the shown job (already in its state)."""
        if lines:
            self._add_lines(lines)
        self._show_live()
        if self.following:
            self._scroll_to_end()

    def _scrolled(self, _action: int) -> None:
        bar = self.view.verticalScrollBar()
        self.following = bar.sliderPosition() >= bar.maximum()

    def _resized(self) -> None:
        # lines wrapped anew keep their top line in sight, not the end: back to the end, now and once laid out
        self._range_changed()
        QTimer.singleShot(0, self, self._range_changed)

    def _range_changed(self, *_: int) -> None:
        if self.following:
            self._scroll_to_end()

    def _add_lines(self, lines: list[str]) -> None:
        """Finished lines at the end, each drawn as a terminal draws it (plain lines in one insertion)."""
        if not lines:
            return
        cursor = QTextCursor(self.view.document())
        cursor.movePosition(QTextCursor.MoveOperation.End)
        cursor.beginEditBlock()
        first = not self._has_lines
        self._has_lines = True
        plain_format = QTextCharFormat()
        formats: dict[ansi.Style, QTextCharFormat] = {}
        for line in "\n".join(lines).split("\n"):  # a block of plain output is one entry
            if not first:
                cursor.insertBlock()
            first = False
            for text, style in self.renderer.line(line):
                if style.plain:
                    cursor.insertText(text, plain_format)
                else:
                    if style not in formats:
                        formats[style] = char_format(style)
                    cursor.insertText(text, formats[style])
        cursor.endEditBlock()

    def _show_live(self) -> None:
        live = self.state.live_line if self.state is not None else ""
        # Drawn with a copy of the renderer: a live line's colours do not carry into the finished lines.
        renderer = ansi.AnsiRenderer()
        renderer.style = self.renderer.style
        segments = renderer.line(live) if live else []
        self.live_plain = "".join(segment.text for segment in segments)
        self.live_line.setText(segments_html(segments) if segments else "")
        self.live_line.setVisible(bool(live))

    def _scroll_to_end(self) -> None:
        self.following = True
        bar = self.view.verticalScrollBar()
        bar.setValue(bar.maximum())
        self.view.horizontalScrollBar().setValue(0)

    def height_for_lines(self, lines: int) -> int:
        """The pane's height that shows `lines` finished lines (and the live line, while there is one)."""
        live = self.live_line.sizeHint().height() if not self.live_line.isHidden() else 0
        return lines * self.view.fontMetrics().lineSpacing() + 2 * self.view.frameWidth() + 8 + live

    def sizeHint(self) -> QSize:
        # A few lines: the result above takes most of the height (a text edit would ask for 192 px).
        return QSize(400, 4 * self.view.fontMetrics().height() + 2 * self.view.frameWidth())

    def minimumSizeHint(self) -> QSize:
        return QSize(80, 2 * self.view.fontMetrics().height())

    def text(self) -> str:
        """What a person reads: the finished lines, then the live one."""
        live = self.live_plain if not self.live_line.isHidden() else ""
        return self.view.toPlainText() + (("\n" + live) if live else "")
