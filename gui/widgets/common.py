"""Small widgets that keep the layout steady: text that never widens its panel, code shown in a monospace font."""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import QEvent, QModelIndex, QObject, QPointF, QRect, QSize, Qt
from PySide6.QtGui import (
    QFont,
    QFontDatabase,
    QFontInfo,
    QFontMetrics,
    QGuiApplication,
    QPainter,
    QPaintEvent,
    QResizeEvent,
    QTextDocument,
    QTextOption,
    QWheelEvent,
)
from PySide6.QtWidgets import (
    QAbstractItemView,
    QAbstractScrollArea,
    QAbstractSlider,
    QAbstractSpinBox,
    QApplication,
    QComboBox,
    QDialog,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QPlainTextEdit,
    QPushButton,
    QScrollArea,
    QScrollBar,
    QSizePolicy,
    QStyle,
    QTableView,
    QToolButton,
    QVBoxLayout,
    QWidget,
)


def monospace_font() -> QFont:
    """The system's fixed-pitch font; where the platform names one it cannot resolve to a fixed-pitch face
    (Qt's offscreen and minimal platforms), the first installed fixed-pitch family."""
    font = QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont)
    if QFontInfo(font).fixedPitch():
        return font
    family = next((name for name in QFontDatabase.families() if QFontDatabase.isFixedPitch(name)
                   and not QFontDatabase.isPrivateFamily(name)), None)
    if family is not None:
        font.setFamily(family)
    return font


class ElidedLabel(QLabel):
    """One line of plain text, cut with "…" to the width it is given; the whole text is its tooltip.

    A QLabel asks for the width of its whole text, so one long message (an error, a path) would widen
    the panel holding it and everything beside it; this one asks for almost nothing."""

    def __init__(self, text: str = "", parent: QWidget | None = None):
        super().__init__(parent)
        self._full = ""
        self.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.setText(text)

    def setText(self, text: str) -> None:
        self._full = text
        one_line = " ".join(text.split())
        super().setText(one_line)
        self.setToolTip(text if self._elided_text() != one_line or "\n" in text else "")
        self.update()

    def full_text(self) -> str:
        return self._full

    def is_elided(self) -> bool:
        return self._elided_text() != super().text()

    def _elided_text(self) -> str:
        return self.fontMetrics().elidedText(super().text(), Qt.TextElideMode.ElideRight, max(self.width(), 1))

    def minimumSizeHint(self) -> QSize:
        return QSize(self.fontMetrics().horizontalAdvance("…") * 4, self.fontMetrics().height())

    def sizeHint(self) -> QSize:
        return QSize(min(self.fontMetrics().horizontalAdvance(super().text()) + 4, 400), self.fontMetrics().height())

    def resizeEvent(self, event: QResizeEvent) -> None:
        super().resizeEvent(event)
        self.setToolTip(self._full if self.is_elided() or "\n" in self._full else "")

    def paintEvent(self, event: QPaintEvent) -> None:
        painter = QPainter(self)
        painter.setPen(self.palette().color(self.foregroundRole()))
        painter.drawText(self.rect(), int(self.alignment() | Qt.AlignmentFlag.AlignVCenter), self._elided_text())


LONG_WORD = 40  # characters: a longer run without a space may break anywhere (a path, a device list)


def breakable(text: str) -> str:
    """`text` with a zero-width space after every LONG_WORD characters of an unbroken run, so a wrapping label
    can wrap a 2,000-character word instead of asking for its width."""
    out: list[str] = []
    run = 0
    for char in text:
        out.append(char)
        run = 0 if char.isspace() else run + 1
        if run >= LONG_WORD:
            out.append("\u200b")
            run = 0
    return "".join(out)


class WrappedMessage(QLabel):
    """Plain text shown whole, wrapped to the width it is given (any word may break), selectable; it never
    widens its panel. `full_text()` is the text as given."""

    def __init__(self, text: str = "", parent: QWidget | None = None):
        super().__init__(parent)
        self._full = ""
        self.setWordWrap(True)
        self.setTextFormat(Qt.TextFormat.PlainText)
        self.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.setAlignment(Qt.AlignmentFlag.AlignTop | Qt.AlignmentFlag.AlignLeft)
        self.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Minimum)
        self.setText(text)

    def setText(self, text: str) -> None:
        self._full = text
        super().setText(breakable(text))

    def full_text(self) -> str:
        return self._full


class WrappingText(QPlainTextEdit):
    """Read-only text that wraps anywhere (a 2,000-character word included) and scrolls down, never sideways."""

    def __init__(self, text: str = "", *, monospace: bool = False, parent: QWidget | None = None):
        super().__init__(text, parent)
        self.setReadOnly(True)
        self.setLineWrapMode(QPlainTextEdit.LineWrapMode.WidgetWidth)
        self.setWordWrapMode(self.wordWrapMode().WrapAtWordBoundaryOrAnywhere)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        if monospace:
            self.setFont(monospace_font())

    def minimumSizeHint(self) -> QSize:
        return QSize(80, 3 * self.fontMetrics().height())


class ExpandableDetail(QWidget):
    """The whole message, wrapped, with a "Details" toggle that reveals the rest (the error's class, the
    traceback) below it."""

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.summary = WrappedMessage()
        self.toggle = QToolButton()
        self.toggle.setText("Details ▸")
        self.toggle.setCheckable(True)
        self.toggle.setToolTip("Show the whole message and the traceback")
        self.toggle.toggled.connect(self._toggled)
        self.detail = WrappingText(monospace=True)
        self.detail.hide()
        top = QHBoxLayout()
        top.setContentsMargins(0, 0, 0, 0)
        top.addWidget(self.summary, 1)
        top.addWidget(self.toggle, 0, Qt.AlignmentFlag.AlignTop)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addLayout(top)
        layout.addWidget(self.detail, 1)

    def set_content(self, summary: str, detail: str) -> None:
        self.summary.setText(summary)
        self.detail.setPlainText(detail)
        self.toggle.setVisible(bool(detail.strip()) and detail.strip() != summary.strip())
        self.toggle.setChecked(False)

    def _toggled(self, shown: bool) -> None:
        self.toggle.setText("Details ▾" if shown else "Details ▸")
        self.detail.setVisible(shown)


def code_dialog(parent: QWidget, title: str, heading: str, code: str, *, object_name: str) -> QDialog:
    """Code to read and copy: a monospace view that keeps lines whole, and a Copy button."""
    dialog = QDialog(parent)
    dialog.setWindowTitle(title)
    dialog.setObjectName(object_name)
    view = QPlainTextEdit(code)
    view.setReadOnly(True)
    view.setFont(monospace_font())
    # As wide as the longest line where the screen allows; a longer line wraps, never scrolls sideways (a
    # sideways scroll bar cuts a snippet's comments out of sight).
    view.setLineWrapMode(QPlainTextEdit.LineWrapMode.WidgetWidth)
    view.setWordWrapMode(QTextOption.WrapMode.WrapAtWordBoundaryOrAnywhere)
    view.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
    longest = max((view.fontMetrics().horizontalAdvance(line) for line in code.splitlines()), default=0)
    screen = parent.screen() if parent is not None else QGuiApplication.primaryScreen()
    room = int(screen.availableGeometry().width() * 0.9) - 40 if screen is not None else 1200
    wide = longest + 2 * view.frameWidth() + int(2 * view.document().documentMargin()) \
        + view.verticalScrollBar().sizeHint().width() + 4
    view.setMinimumSize(max(640, min(wide, room)), 360)
    copy = QPushButton("Copy")
    copy.setToolTip("Copy the whole text to the clipboard")

    def copy_all() -> None:
        QGuiApplication.clipboard().setText(view.toPlainText())
        copy.setText("Copied ✓")

    copy.clicked.connect(copy_all)
    label = QLabel(heading)
    label.setWordWrap(True)
    buttons = QHBoxLayout()
    buttons.addStretch(1)
    buttons.addWidget(copy)
    layout = QVBoxLayout(dialog)
    layout.addWidget(label)
    layout.addWidget(view, 1)
    layout.addLayout(buttons)
    return dialog


def take_from_layout(graphics_layout: Any, item: Any) -> None:
    """Take `item` out of a pyqtgraph GraphicsLayout's grid (its cells free), leaving it in the scene: see
    `move_in_layout` for why never pyqtgraph's removeItem."""
    grid = graphics_layout.layout
    for index in range(grid.count() - 1, -1, -1):
        if grid.itemAt(index) is item:
            grid.removeAt(index)
    for r, c in graphics_layout.items.pop(item, []):
        graphics_layout.rows.get(r, {}).pop(c, None)


def move_in_layout(graphics_layout: Any, item: Any, row: int, col: int, rowspan: int = 1, colspan: int = 1) -> None:
    """Move `item` to another cell of a pyqtgraph GraphicsLayout without taking it out of the scene.

    pyqtgraph's removeItem also removes the item from the QGraphicsScene; re-adding it then painted a view
    over a removed item (a segmentation fault in GraphicsView.paintEvent, seen once in ~50 test runs)."""
    take_from_layout(graphics_layout, item)
    grid = graphics_layout.layout
    grid.addItem(item, row, col, rowspan, colspan)
    cells = [(row + r, col + c) for r in range(rowspan) for c in range(colspan)]
    graphics_layout.items[item] = cells
    for r, c in cells:
        graphics_layout.rows.setdefault(r, {})[c] = item


class DownScrollArea(QScrollArea):
    """Scrolls down, never sideways: its least width follows its widget's least width (plus the vertical scroll
    bar), so content that grows (a GPU's editor arriving with the runtime's report) widens the dock instead of
    being cut at the right edge with no way to see it."""

    def __init__(self, widget: QWidget, parent: QWidget | None = None):
        super().__init__(parent)
        self.setWidgetResizable(True)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setWidget(widget)
        widget.installEventFilter(self)

    def minimumSizeHint(self) -> QSize:
        hint = super().minimumSizeHint()
        widget = self.widget()
        if widget is None:
            return hint
        least = widget.minimumSizeHint().width() + self.verticalScrollBar().sizeHint().width() \
            + 2 * self.frameWidth()
        return QSize(max(hint.width(), least), hint.height())

    def eventFilter(self, watched: Any, event: Any) -> bool:
        if watched is self.widget() and event.type() == QEvent.Type.LayoutRequest:
            self.updateGeometry()  # the widget's least width may have changed: the dock asks again
        return super().eventFilter(watched, event)


# -- a stray wheel changes nothing ------------------------------------------------------------------------

_WHEEL_GUARDED = (QAbstractSpinBox, QComboBox, QAbstractSlider)


class WheelGuard(QObject):
    """A spin box, combo box or slider without the keyboard focus ignores the mouse wheel: the wheel scrolls the
    form around it instead. Scrolling down a form otherwise changed whichever field passed under the pointer
    (the GPU allocator became cuda_malloc_async, the logical CPUs went from 2 to 3). Once clicked (focused), the
    field takes the wheel as usual."""

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        if event.type() != QEvent.Type.Wheel or not isinstance(watched, QWidget) or watched.hasFocus():
            return False
        area = watched.parentWidget()
        while area is not None and not isinstance(area, QAbstractScrollArea):
            area = area.parentWidget()
        if area is not None and isinstance(event, QWheelEvent):
            # Handed to the scroll area around the form itself: Qt hands an ignored wheel on to the parents only
            # when it came from the mouse, not from a test or an event sent in code.
            viewport = area.viewport()
            position = QPointF(viewport.mapFromGlobal(event.globalPosition().toPoint()))
            QApplication.sendEvent(viewport, QWheelEvent(
                position, event.globalPosition(), event.pixelDelta(), event.angleDelta(), event.buttons(),
                event.modifiers(), event.phase(), event.inverted()))
        event.ignore()
        return True


_WHEEL_GUARD = WheelGuard()  # one for every field of every form


def guard_wheel(widget: QWidget) -> QWidget:
    """`widget`, and every spin box, combo box and slider inside it, guarded by the one WheelGuard (see there);
    they take the focus by click or Tab only, never by the wheel. Returns `widget`."""
    fields = [field for field in (widget, *widget.findChildren(QWidget))
              if isinstance(field, _WHEEL_GUARDED) and not isinstance(field, QScrollBar)]  # scroll bars scroll
    for field in fields:
        field.setFocusPolicy(Qt.FocusPolicy.StrongFocus)
        field.removeEventFilter(_WHEEL_GUARD)  # installed once, however often a form guards it
        field.installEventFilter(_WHEEL_GUARD)
    return widget


# -- tables whose every cell reads whole ---------------------------------------------------------------------

CELL_PADDING = 2  # px beyond the style's own margins, so a rounding never cuts a cell's last digit
TITLE_LINES = 2   # lines a column's title may wrap to (more took the rows' height from a table stacked on a plot)


class WrappingHeader(QHeaderView):
    """A table's column titles, wrapped at their spaces ("Predicted peak (MiB)" on two or three lines) and the
    header as tall as its most wrapped title: a column needs only its title's longest word, not its whole title,
    so a title never makes a column of short numbers wide, nor is it cut at both ends."""

    def __init__(self, parent: QWidget | None = None):
        super().__init__(Qt.Orientation.Horizontal, parent)
        self.setDefaultAlignment(Qt.AlignmentFlag.AlignCenter | Qt.AlignmentFlag(Qt.TextFlag.TextWordWrap.value))
        self.setTextElideMode(Qt.TextElideMode.ElideNone)
        self.setSectionsClickable(False)
        self.setHighlightSections(False)
        self.sectionResized.connect(self._remeasure)

    def title(self, section: int) -> str:
        model = self.model()
        return str(model.headerData(section, Qt.Orientation.Horizontal) or "") if model is not None else ""

    def _margin(self) -> int:
        return 2 * self.style().pixelMetric(QStyle.PixelMetric.PM_HeaderMargin, None, self) + CELL_PADDING

    def least_width(self, section: int) -> int:
        """The width the title needs on at most TITLE_LINES lines (its longest word at least)."""
        metrics = self.fontMetrics()
        title = self.title(section)
        width = max(metrics.horizontalAdvance(word) for word in title.split() or [""])
        while self._lines(title, width) > TITLE_LINES:
            width += 4
        return width + self._margin()

    def _lines(self, title: str, text_width: int) -> int:
        flags = int(Qt.AlignmentFlag.AlignCenter.value) | int(Qt.TextFlag.TextWordWrap.value)
        height = self.fontMetrics().boundingRect(QRect(0, 0, max(text_width, 1), 10_000), flags, title).height()
        return round(height / max(self.fontMetrics().height(), 1))

    def wrapped_height(self, section: int) -> int:
        lines = self._lines(self.title(section), self.sectionSize(section) - self._margin())
        return lines * self.fontMetrics().height()

    def sectionSizeFromContents(self, logicalIndex: int) -> QSize:
        size = super().sectionSizeFromContents(logicalIndex)
        one_line = self.fontMetrics().height()
        return QSize(size.width(), size.height() + max(self.wrapped_height(logicalIndex) - one_line, 0))

    def _remeasure(self, *_: Any) -> None:
        if self.count():  # the cached height is dropped when the titles "change"
            self.headerDataChanged(Qt.Orientation.Horizontal, 0, self.count() - 1)


def cell_text_width(view: QAbstractItemView, row: int, column: int) -> int:
    """The px a cell's text needs to read whole in `view` (its own font where it has one), margins included."""
    model = view.model()
    index = model.index(row, column)
    text = model.data(index, Qt.ItemDataRole.DisplayRole)
    if text is None or text == "":
        return 0
    font = model.data(index, Qt.ItemDataRole.FontRole)
    metrics = QFontMetrics(font) if isinstance(font, QFont) else view.fontMetrics()
    margin = 2 * (view.style().pixelMetric(QStyle.PixelMetric.PM_FocusFrameHMargin, None, view) + 1)
    # a swatch before the text (a table that is its plot's legend): the icon and the gap after it
    return max(metrics.horizontalAdvance(line) for line in str(text).split("\n")) + margin + CELL_PADDING \
        + decoration_width(view, index)


def decoration_width(view: QAbstractItemView, index: QModelIndex) -> int:
    """The px a cell's icon takes before its text (a table that is its plot's legend), with the margins Qt's
    item layout puts around it; 0 without one."""
    if view.model().data(index, Qt.ItemDataRole.DecorationRole) is None:
        return 0
    size = view.iconSize()
    icon = size.width() if size.isValid() else view.style().pixelMetric(QStyle.PixelMetric.PM_SmallIconSize, None, view)
    return icon + 2 * (view.style().pixelMetric(QStyle.PixelMetric.PM_FocusFrameHMargin, None, view) + 1)


def content_widths(view: QTableView) -> list[int]:
    """Each column's width that shows every cell whole and its title's longest word (the title wraps)."""
    model = view.model()
    header = view.horizontalHeader()
    widths = []
    for column in range(model.columnCount()):
        cells = max((cell_text_width(view, row, column) for row in range(model.rowCount())), default=0)
        title = header.least_width(column) if isinstance(header, WrappingHeader) else header.sectionSizeHint(column)
        widths.append(max(cells, 0 if header.isHidden() else title, header.minimumSectionSize()))
    return widths


def text_line_bottoms(label: QLabel, width: int) -> list[float]:
    """Where each line of a label's (rich) text ends, from its top, wrapped at `width` px: a strip that shows the
    label's first lines ends at one of them, never across a line."""
    document = QTextDocument()
    document.setDefaultFont(label.font())
    document.setDocumentMargin(0)
    if label.textFormat() == Qt.TextFormat.PlainText:
        document.setPlainText(label.text())
    else:
        document.setHtml(label.text())
    document.setTextWidth(max(width - 2 * label.margin(), 1))
    document.size()  # lays the text out: until then no block has lines
    bottoms = []
    block = document.begin()
    while block.isValid():
        layout = block.layout()
        top = layout.position().y()
        for number in range(layout.lineCount()):
            line = layout.lineAt(number)
            bottoms.append(top + line.y() + line.height())
        block = block.next()
    return bottoms
