"""What a class must be able to read in the window, as checks that walk the widgets (issue 41): every table cell's
text fits its column, every column in sight, every caption ends on a whole line, the job's output shows its last
line. Each returns the problems it found, in words, empty when all reads."""

from __future__ import annotations

from PySide6.QtCore import QModelIndex, Qt
from PySide6.QtGui import QFont, QFontMetrics, QIcon
from PySide6.QtWidgets import (
    QAbstractItemView,
    QHeaderView,
    QLabel,
    QScrollArea,
    QStyle,
    QStyleOptionViewItem,
    QTableView,
    QWidget,
)
from tf_device_panel.gui.docks.runs_panel import RunsPanel
from tf_device_panel.gui.widgets.common import text_line_bottoms

# (width, height, presentation mode): the sizes a classroom's projector shows the window at
CLASSROOM_SIZES = ((1024, 768, False), (1280, 720, False), (1920, 1080, False), (1280, 720, True))


def size_name(size: tuple[int, int, bool]) -> str:
    return f"{size[0]}x{size[1]}{'-presentation' if size[2] else ''}"


def in_sight(widget: QWidget) -> bool:
    return widget.isVisible() and not widget.visibleRegion().isEmpty()


def _text_width(view: QAbstractItemView, text: str, font: object) -> int:
    metrics = QFontMetrics(font) if isinstance(font, QFont) else view.fontMetrics()
    margin = 2 * (view.style().pixelMetric(QStyle.PixelMetric.PM_FocusFrameHMargin, None, view) + 1)
    return max(metrics.horizontalAdvance(line) for line in text.split("\n")) + margin


def _text_room(view: QAbstractItemView, index: QModelIndex, text: str, icon: object) -> int:
    """The px the style leaves a decorated cell's text, as Qt's item layout places the icon before it."""
    option = QStyleOptionViewItem()
    option.initFrom(view)
    option.rect = view.visualRect(index)
    features = QStyleOptionViewItem.ViewItemFeature
    option.features = features.HasDisplay | features.HasDecoration
    option.decorationSize = view.iconSize()
    option.text = text
    if isinstance(icon, QIcon):
        option.icon = icon
    return view.style().subElementRect(QStyle.SubElement.SE_ItemViewItemText, option, view).width()


def elided_cells(root: QWidget) -> list[str]:
    """Every cell of every table in sight under `root` whose text is wider than its column, every column cut by
    the table's edge, and every column title cut (a title may wrap at its spaces, but not lose letters)."""
    problems = []
    for view in root.findChildren(QTableView):
        if not in_sight(view):
            continue
        model = view.model()
        name = view.objectName() or view.accessibleName() or type(view).__name__
        header: QHeaderView = view.horizontalHeader()
        room = view.viewport().width()
        for column in range(model.columnCount()):
            if view.isColumnHidden(column):
                continue
            width = view.columnWidth(column)
            title = str(model.headerData(column, Qt.Orientation.Horizontal) or "")
            left = view.columnViewportPosition(column)
            if left + width > room + 1:
                problems.append(f"{name}: column {title or column} reaches {left + width} px, past the table's "
                                f"{room} px")
            for row in range(model.rowCount()):
                index = model.index(row, column)
                text = model.data(index, Qt.ItemDataRole.DisplayRole)
                if text is None or str(text) == "":
                    continue
                font = model.data(index, Qt.ItemDataRole.FontRole)
                needed = _text_width(view, str(text), font)
                icon = model.data(index, Qt.ItemDataRole.DecorationRole)
                if icon is not None:  # a swatch before it (a table that is its plot's legend): Qt's own layout
                    needed, width = _text_width(view, str(text), font), _text_room(view, index, str(text), icon)
                if needed > width:
                    problems.append(f"{name}: {title or column} row {row + 1}: {str(text)!r} needs {needed} px, "
                                    f"its column is {width}")
            if header.isVisible() and title:
                margin = 2 * header.style().pixelMetric(QStyle.PixelMetric.PM_HeaderMargin, None, header)
                words = max(header.fontMetrics().horizontalAdvance(word) for word in title.split())
                lines = header.fontMetrics().boundingRect(
                    0, 0, max(header.sectionSize(column) - margin, 1), 10_000,
                    int(Qt.AlignmentFlag.AlignCenter.value) | int(Qt.TextFlag.TextWordWrap.value), title).height()
                if words + margin > header.sectionSize(column) or lines > header.height():
                    problems.append(f"{name}: the title {title!r} is cut ({header.sectionSize(column)}×"
                                    f"{header.height()} px for {words + margin}×{lines})")
    return problems


def cut_captions(root: QWidget) -> list[str]:
    """Every caption strip in sight (a result's title and lines above its plots) that ends in the middle of a
    line: a strip shows its whole lines, and scrolls for the rest."""
    problems = []
    for strip in root.findChildren(QScrollArea):
        label = strip.widget()
        if strip.objectName() != "result-caption" or not isinstance(label, QLabel) or not in_sight(strip):
            continue
        shown = strip.viewport().height() + strip.verticalScrollBar().value()
        bottoms = text_line_bottoms(label, label.contentsRect().width() + 2 * label.margin())
        if not bottoms or bottoms[-1] <= shown + 1:
            continue
        cut = [bottom for bottom in bottoms if bottom > shown + 1]
        tops = [bottom - label.fontMetrics().height() for bottom in cut]
        if tops and tops[0] < shown - 2:
            problems.append(f"the caption's line {len(bottoms) - len(cut) + 1} of {len(bottoms)} is cut: the strip "
                            f"shows {shown} px, the line spans {tops[0]:.0f}–{cut[0]:.0f}")
        lines_in_sight = len(bottoms) - len(cut)
        if lines_in_sight < 1:
            problems.append(f"the caption shows no whole line ({shown} px)")
    return problems


def output_end_hidden(runs: RunsPanel, least_lines: int = 0) -> list[str]:
    """The job's output pane not showing its last line (scrolled up by itself), or shorter than `least_lines`."""
    problems = []
    text = runs.console.view
    bar = text.verticalScrollBar()
    if text.document().characterCount() > 1 and bar.value() < bar.maximum():
        problems.append(f"the output shows line {bar.value() + 1}…, not its end (it scrolls to {bar.maximum()})")
    lines = text.viewport().height() // text.fontMetrics().lineSpacing()
    if lines < least_lines:
        problems.append(f"the output pane shows {lines} lines (at least {least_lines})")
    return problems
