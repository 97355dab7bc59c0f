"""A job's result in the window: any `core.results.Presentation` drawn generically, or a plain message.

No result kind is known here: core.results describes each kind once, and the command line prints the
same description. Tables become table widgets sized to their content, plots pyqtgraph plots with their
legend beside the curves. Device names are shown short (/CPU:1), the full name on hover; a failure is one
line, its traceback a click away.
"""

from __future__ import annotations

import html
import math
import re
from typing import TYPE_CHECKING, Any

import pyqtgraph as pg
from pyqtgraph.graphicsItems.LegendItem import ItemSample
from PySide6.QtCore import QEvent, QSize, Qt, QTimer, Signal
from PySide6.QtGui import QColor, QFont, QGuiApplication, QIcon, QPainter, QPixmap, QResizeEvent, QShowEvent
from PySide6.QtWidgets import (
    QAbstractItemView,
    QCheckBox,
    QLabel,
    QScrollArea,
    QSizePolicy,
    QSplitter,
    QStackedWidget,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)
from tf_device_panel.core.client.records import RunError
from tf_device_panel.core.client.run_record import JobOutcome
from tf_device_panel.core.client.session import JobEnded
from tf_device_panel.core.protocol.output_lines import short_device_name
from tf_device_panel.core.results import Column, Plot, Presentation, Series, Table, present
from tf_device_panel.gui.views.job_state import INTERNAL_ERROR_TYPES, STATUS_WORDS, error_summary
from tf_device_panel.gui.views.oom_view import OomView
from tf_device_panel.gui.widgets import view_settings
from tf_device_panel.gui.widgets.colors import device_color, palette_colors, theme_axes
from tf_device_panel.gui.widgets.common import (
    ExpandableDetail,
    WrappingHeader,
    content_widths,
    move_in_layout,
    take_from_layout,
    text_line_bottoms,
)
from tf_device_panel.gui.widgets.view_settings import series_style

if TYPE_CHECKING:
    from tf_device_panel.gui.shell.controller import RuntimeController

_DEVICE = re.compile(r"(?:/job:[\w-]+(?:/replica:\d+)?(?:/task:\d+)?)?/(?:device:)?(?:CPU|GPU):\d+")
_DASHES = {"solid": Qt.PenStyle.SolidLine, "dash": Qt.PenStyle.DashLine, "dot": Qt.PenStyle.DotLine,
           "dashdot": Qt.PenStyle.DashDotLine}
MIN_CURVES_WIDTH = 220  # px of curves a plot keeps beside its legend; narrower, the legend goes below
LEAST_CURVES_WIDTH = 130  # px of curves a plot keeps beside a table whose columns all read whole
SAY_SAME_SERIES = 4  # a plot of at most this many series names, in its legend, a series equal to another
MIN_CURVES_HEIGHT = 120  # px of curves a plot keeps above a legend below them; shorter, the legend stays beside
# px each result plot keeps in sight: at 1024×768 and 1280×720 (the form folds to one line while a result is
# shown), and in presentation mode, where the result and the device map take the screen
MIN_PLOT_HEIGHT, PRESENTATION_PLOT_HEIGHT = 200, 300
MIN_COLUMN_WIDTH = 48  # px an elided column keeps: a few letters and the ellipsis
CAPTION_LEAST_LINES = 2  # the caption's lines always in sight; longer, it scrolls within its own strip
TABLE_SLACK = 8        # px beyond the columns, so the last one is never cut by a rounding
PLOT_AXIS_ROOM = 60    # px of a plot's width its value axis and margins take
STACKED_TABLE_ROWS = 3  # rows of a table shown above its plot (the rest scroll)
SWATCH_SIZE = QSize(20, 12)  # a curve's line and symbol before the table rows it draws
WANTED_TABLE_ROWS = 8   # rows a table of a result without plots asks for; Qt's own hint gave about that


def plot_min_height() -> int:
    """The height each result plot keeps in sight, as the window is drawn now (presentation mode: more)."""
    return PRESENTATION_PLOT_HEIGHT if view_settings.current().presentation else MIN_PLOT_HEIGHT


def short_devices(text: str) -> str:
    """Every device name in `text` in its short form: /job:localhost/replica:0/task:0/device:CPU:0 -> /CPU:0."""
    return _DEVICE.sub(lambda match: short_device_name(match.group()), text)


def rich_text(text: str) -> str:
    """`text` escaped for a label, each device name short and in its colour, spaces kept."""
    parts, last = [], 0
    for match in _DEVICE.finditer(text):
        short = short_device_name(match.group())
        parts.append(html.escape(text[last:match.start()]))
        # never split across lines ("not over /" then "CPU:0")
        parts.append(f"<span style='color:{device_color(short).name()}; white-space:nowrap'>"
                     f"{html.escape(short)}</span>")
        last = match.end()
    parts.append(html.escape(text[last:]))
    return f"<span style='white-space:pre-wrap'>{''.join(parts)}</span>"


def caption_html(presentation: Presentation) -> str:
    lines = [f"<b>{rich_text(presentation.title)}</b>"] if presentation.title else []
    lines += [f"<b style='color:#d33'>⚠ {rich_text(warning)}</b>" for warning in presentation.warnings]
    lines += [rich_text(line) for line in presentation.lines]
    return "<br>".join(lines)


def outcome_summary(outcome: JobOutcome) -> str:
    """One line for a finished run: "Failed: InvalidArgumentError: Could not satisfy…", each word said once."""
    word = STATUS_WORDS.get(outcome.status, outcome.status.capitalize())
    error = outcome.error or RunError(type="", message="")
    kind = error.type
    message = next((line.strip() for line in error.message.splitlines() if line.strip()), "")
    parts = [word]
    if kind and kind not in INTERNAL_ERROR_TYPES and kind.lower() != word.lower():
        parts.append(kind)
    if message and message.lower().rstrip(".") not in (word.lower(), kind.lower(), "cancelled by the user"):
        parts.append(short_devices(message))
    return ": ".join(parts)


def user_frames(traceback_text: str) -> str:
    """A traceback with the panel's and installed packages' frames left out: what the user's own code did.
    When no frame is the user's (a built-in job), the whole traceback is kept."""
    kept: list[str] = []
    dropped = 0
    in_dropped_frame = False
    for line in traceback_text.splitlines():
        if line.startswith("  File "):
            in_dropped_frame = "tf_device_panel" in line or "-packages" in line
            dropped += in_dropped_frame
        elif not line.startswith("  "):  # the header or the exception line
            in_dropped_frame = False
        if not in_dropped_frame:
            kept.append(line)
    if not any(line.startswith("  File ") for line in kept):
        return traceback_text
    if dropped:
        kept.insert(1 if kept and kept[0].startswith("Traceback") else 0,
                    f"  ({dropped} frame(s) of the panel and installed packages left out)")
    return "\n".join(kept)


def error_details(outcome: JobOutcome) -> str:
    error = outcome.error or RunError(type="Error", message="")
    return "\n\n".join(part for part in (f"{error.type}: {error.message}", user_frames(error.traceback or ""))
                       if part)


class IntegerAxis(pg.AxisItem):
    """An axis of epochs or steps: ticks on whole numbers only (one point gives "1", not 0.6 … 1.4)."""

    def tickValues(self, minVal: float, maxVal: float, size: float) -> list[tuple[float, list[float]]]:
        levels = [(spacing, [v for v in values if float(v).is_integer()])
                  for spacing, values in super().tickValues(minVal, maxVal, size) if spacing >= 1]
        levels = [(spacing, values) for spacing, values in levels if values]
        if not levels and math.isfinite(minVal) and math.isfinite(maxVal) and maxVal - minVal < 1000:
            levels = [(1.0, [float(v) for v in range(math.ceil(minVal), math.floor(maxVal) + 1)])]
        return levels


class ResultPlot(pg.GraphicsLayoutWidget):
    """One plot with its legend to the right of the curves, never over them."""

    def __init__(self, plot: Plot):
        super().__init__()
        self.setBackground(palette_colors()[0])
        self.setFrameShape(pg.GraphicsLayoutWidget.Shape.NoFrame)  # the plot's own axes frame it
        whole_x = all(float(x).is_integer() for series in plot.series for x in series.x)
        axes = {"bottom": IntegerAxis("bottom")} if whole_x else {}
        self.plot_item: pg.PlotItem = self.addPlot(row=0, col=0, axisItems=axes)
        theme_axes(self.plot_item)
        self.plot_item.setLabel("bottom", plot.x_label)
        self.plot_item.setLabel("left", plot.y_label)
        for name in ("left", "bottom"):
            self.plot_item.getAxis(name).enableAutoSIPrefix(False)  # a loss reads 0.6, not 600 (x0.001)
        self.plot_item.showGrid(x=True, y=True, alpha=0.3)
        self.setMinimumHeight(plot_min_height())
        self.legend: pg.LegendItem | None = None
        settings = view_settings.current()
        if settings.scale != 1.0:
            font = QFont(self.font())
            font.setPointSizeF(font.pointSizeF() * settings.scale if font.pointSizeF() > 0 else 9 * settings.scale)
            for name in ("left", "bottom"):
                self.plot_item.getAxis(name).setStyle(tickFont=font)
            # the axis titles too ("epoch" stayed small beside large ticks)
            title_size = {"font-size": f"{9 * settings.scale:.0f}pt"}
            self.plot_item.setLabel("bottom", plot.x_label, **title_size)
            self.plot_item.setLabel("left", plot.y_label, **title_size)
        if len(plot.series) > 1:
            self.legend = pg.LegendItem(labelTextColor=palette_colors()[1],
                                        labelTextSize=f"{9 * settings.scale:.0f}pt")
            self.addItem(self.legend, row=0, col=1)
            # Its rows as tall as their text, at the top: stretched to the plot's height, each label's text sat
            # at the top of a tall row while its swatch sat in the middle.
            self.legend.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Maximum)
            self.ci.layout.setAlignment(self.legend, Qt.AlignmentFlag.AlignTop)
        # Each series its device's colour when every series has a device of its own; otherwise (a benchmark's
        # dtypes on one device) twelve distinct colours. A symbol and a dash pattern are a second cue either way.
        devices = [self._device(series) for series in plot.series]
        self.by_device = all(d.startswith("/") for d in devices) and len({device_color(d).name() for d in devices}) \
            == len(devices)
        self.originals: list[tuple[list[float], list[float]]] = []
        self.names: list[str] = []
        self.series_count = len(plot.series)
        self.legend_below = False
        self.legend_shown = self.legend is not None
        self._legend_width = 0.0
        self._overhead = float(PLOT_AXIS_ROOM)
        self._beside_columns = 1
        # laid out again once the curves have their new size (the plot's own layout follows its resize later)
        self.plot_item.getViewBox().sigResized.connect(lambda _box: QTimer.singleShot(0, self, self._place_legend))
        self.log_y = False
        for number, series in enumerate(plot.series):
            self.draw(series, number)

    def set_legend_shown(self, shown: bool) -> None:
        """The legend in the plot, or out of it (hidden) while a table beside the plot marks each of its rows with
        its curve's swatch: the curves get the legend's width."""
        if self.legend is None or shown == self.legend_shown:
            return
        self.legend_shown = shown
        if shown:
            move_in_layout(self.ci, self.legend, *((1, 0) if self.legend_below else (0, 1)))
            self.ci.layout.setAlignment(self.legend, Qt.AlignmentFlag.AlignTop)
            self.legend.show()
            QTimer.singleShot(0, self, self._place_legend)
        else:
            take_from_layout(self.ci, self.legend)
            self.legend.hide()

    def swatch(self, number: int) -> QIcon:
        """Series `number`'s line and symbol, as its legend draws them, for a table row it plots."""
        items = self.plot_item.listDataItems()
        # drawn before the plot is in a window (its own ratio is 1 then): at the sharpest screen's
        app = QGuiApplication.instance()
        scale = app.devicePixelRatio() if isinstance(app, QGuiApplication) else 1.0
        pixmap = QPixmap(round(SWATCH_SIZE.width() * scale), round(SWATCH_SIZE.height() * scale))
        pixmap.setDevicePixelRatio(scale)
        pixmap.fill(Qt.GlobalColor.transparent)
        if 0 <= number < len(items):
            painter = QPainter(pixmap)
            # the legend's sample is 20 × 20 px, its line at y 11: drawn scaled into the swatch
            painter.scale(SWATCH_SIZE.width() / 20, SWATCH_SIZE.height() / 20)
            ItemSample(items[number]).paint(painter)
            painter.end()
        return QIcon(pixmap)

    def legend_width(self) -> float:
        """The legend's width beside the curves (0 without one), measured before it went below them."""
        if self.legend is None:
            return 0.0
        if self.legend_below:
            return self._legend_width
        return max(self.legend.boundingRect().width(), self.legend.preferredWidth())

    @staticmethod
    def _device(series: Series) -> str:
        return short_device_name(series.name.split()[0]) if series.name else ""

    def draw(self, series: Series, number: int) -> pg.PlotDataItem:
        colour, symbol, dash = series_style(number)
        color = device_color(self._device(series)) if self.by_device else QColor(colour)
        width = view_settings.current().line_width
        name = short_devices(series.name)
        # A series with the same values as one drawn before (two workers' losses that agree) would hide it: it is
        # drawn hollow and dashed over it, and a short legend (a few workers, not a benchmark's many series, whose
        # curves the longer labels would squeeze) says so.
        same_as = next((self.names[index] for index, (xs, ys) in enumerate(self.originals)
                        if xs == list(series.x) and ys == list(series.y)), None)
        if same_as is not None:
            name = f"{name} (= {same_as})" if self.series_count <= SAY_SAME_SERIES else name
            dash = "dash"
        item = self.plot_item.plot(list(series.x), list(series.y), name=name, symbol=symbol,
                                   symbolSize=(9 if same_as is not None else 5) + 2 * width,
                                   symbolBrush=None if same_as is not None else color, symbolPen=color,
                                   pen=pg.mkPen(color, width=width, style=_DASHES[dash]))
        self.originals.append((list(series.x), list(series.y)))
        self.names.append(short_devices(series.name))
        if self.legend is not None:
            self.legend.addItem(item, name)
            sample, label = self.legend.items[-1]
            for part in (sample, label):  # the swatch sat lower than its label
                self.legend.layout.setAlignment(part, Qt.AlignmentFlag.AlignVCenter)
        return item

    def wants_log_scale(self) -> bool:
        """A loss falling over two orders of magnitude or more reads on a log scale (linear, it is a flat line
        after its first epochs)."""
        values = [y for _, ys in self.originals for y in ys if y > 0 and math.isfinite(y)]
        return bool(values) and max(values) / min(values) >= 100

    def set_log_y(self, on: bool) -> None:
        """Log scale for the values; zeros (a loss that reached 0.0) sit a decade below the smallest value."""
        self.log_y = on
        positive = [y for _, ys in self.originals for y in ys if y > 0 and math.isfinite(y)]
        floor = min(positive) / 10 if positive else 1e-12
        for item, (xs, ys) in zip(self.plot_item.listDataItems(), self.originals, strict=False):
            item.setData(xs, [max(y, floor) for y in ys] if on else ys)
        self.plot_item.setLogMode(x=False, y=on)
        self.plot_item.getAxis("left").enableAutoSIPrefix(False)

    def listDataItems(self) -> list[Any]:
        return self.plot_item.listDataItems()

    def getPlotItem(self) -> pg.PlotItem:
        return self.plot_item

    def resizeEvent(self, event: QResizeEvent) -> None:
        super().resizeEvent(event)
        QTimer.singleShot(0, self, self._place_legend)  # once the legend has been laid out at this size

    def _place_legend(self) -> None:
        """The legend beside the curves while they keep LEAST_CURVES_WIDTH px; below them, in columns, when the
        plot is narrower (the benchmark's nine series beside a wide table left the curves 50 px) and tall enough
        that the curves keep MIN_CURVES_HEIGHT px under it (below a short plot, it left them 30 px high)."""
        legend = getattr(self, "legend", None)  # resized while it is being built
        if legend is None or not hasattr(self, "legend_below") or not self.legend_shown:
            return
        width = self._legend_width if self.legend_below else max(legend.boundingRect().width(), legend.preferredWidth())
        curves = self.plot_item.getViewBox()
        if not self.legend_below and curves.width() > 0:
            # what the axis and the legend's margins take beside the curves, as laid out now (more than
            # PLOT_AXIS_ROOM in presentation mode's larger ticks)
            self._overhead = max(self.width() - curves.width() - width, PLOT_AXIS_ROOM)
        beside = self.width() - width - self._overhead >= LEAST_CURVES_WIDTH - 2  # 2: a rounding of the legend
        columns = max(1, min(len(legend.items), int(self.width() // 170)))
        row = max((label.boundingRect().height() for _, label in legend.items), default=20) + 4
        tall = self.height() - math.ceil(len(legend.items) / columns) * row - PLOT_AXIS_ROOM >= MIN_CURVES_HEIGHT + 12
        below = not beside and tall
        if not below:
            # beside a plot shorter than its rows (a stacked table took the height), in as many columns as keep
            # it within the plot: taller, it pushed the axis title off the bottom
            fit_rows = max(int((self.height() - 8) // row), 1)
            beside_columns = max(1, math.ceil(len(legend.items) / fit_rows))
            if beside_columns != self._beside_columns:
                self._beside_columns = beside_columns
                if not self.legend_below:
                    legend.setColumnCount(beside_columns)
        if below == self.legend_below:
            return
        if not self.legend_below:
            self._legend_width = max(legend.boundingRect().width(), legend.preferredWidth())
        self.legend_below = below
        legend.setColumnCount(columns if below else self._beside_columns)
        move_in_layout(self.ci, legend, *((1, 0) if below else (0, 1)))
        self.ci.layout.setAlignment(legend, Qt.AlignmentFlag.AlignTop)


class ResultTable(QTableWidget):
    """A result's table: never a sideways scroll bar, never an elided number. Its columns take their cells' width,
    its titles wrap at their spaces (WrappingHeader); the result view gives it that width beside its plot, or
    stacks it above. Only where no layout could (a window narrower than any classroom's) do the widest columns
    give way and elide, each cell's whole text on hover."""

    def __init__(self, rows: int, columns: int):
        super().__init__(rows, columns)
        self.natural: list[int] = []
        self.setHorizontalHeader(WrappingHeader(self))
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setTextElideMode(Qt.TextElideMode.ElideMiddle)  # "/job:ps/…/CPU:0" keeps both ends
        self.setWordWrap(False)

    def measure(self) -> None:
        self.natural = content_widths(self)
        self.fit_columns()

    def sizeHint(self) -> QSize:
        """As tall as its rows (size_table's maximum height): Qt's 192 px showed 9 of the benchmark's 21 rows
        beside a plot with room under them; where the height is short it still shrinks, and scrolls."""
        return QSize(super().sizeHint().width(), self.maximumHeight())

    def wanted_height(self) -> int:
        """What a result without plots asks for this table: its rows, WANTED_TABLE_ROWS at most (then it
        scrolls), so a long table never takes the output's lines."""
        rows = min(self.rowCount(), WANTED_TABLE_ROWS) * (self.rowHeight(0) if self.rowCount() else 0)
        header = self.horizontalHeader().sizeHint().height() if self.horizontalHeader().isVisible() else 0
        return min(self.maximumHeight(), header + rows + 2 * self.frameWidth())

    def changeEvent(self, event: QEvent) -> None:
        super().changeEvent(event)
        if event.type() in (QEvent.Type.FontChange, QEvent.Type.StyleChange) and self.natural:
            # the window's zoom or presentation mode reached it: its columns measured again in the new font
            QTimer.singleShot(0, self, lambda: size_table(self, self.verticalHeader().isVisible()))

    def fit_columns(self) -> None:
        if not self.natural:
            return
        widths = fitted_widths(self.natural, self.viewport().width())
        for column, width in enumerate(widths):
            if self.columnWidth(column) != width:
                self.setColumnWidth(column, width)

    def resizeEvent(self, event: QResizeEvent) -> None:
        super().resizeEvent(event)
        self.fit_columns()
        QTimer.singleShot(0, self, self.fit_columns)  # once a vertical scroll bar has come or gone


def fitted_widths(natural: list[int], room: int) -> list[int]:
    """Column widths that fit `room` px: each its natural width when all fit; otherwise the widest ones cut to
    one common width (never below MIN_COLUMN_WIDTH), the narrow ones kept whole."""
    if sum(natural) <= room or not natural:
        return list(natural)
    ordered = sorted(natural)
    cap, spent = ordered[-1], 0
    for index, width in enumerate(ordered):
        left = len(ordered) - index
        if spent + width * left >= room:
            cap = (room - spent) // left
            break
        spent += width
    cap = max(cap, MIN_COLUMN_WIDTH)
    return [min(width, cap) for width in natural]


def _table_widget(table: Table) -> QTableWidget:
    widget = ResultTable(len(table.rows), len(table.columns))
    widget.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
    if table.matrix:
        widget.horizontalHeader().setVisible(False)
    else:
        widget.setHorizontalHeaderLabels([column.title for column in table.columns])
    widget.verticalHeader().setVisible(table.matrix)
    for r, texts in enumerate(table.texts()):
        for c, (text, column) in enumerate(zip(texts, table.columns, strict=True)):
            shown = short_devices(text)
            item = QTableWidgetItem(shown)
            item.setToolTip(text)  # the whole text where the column elides; the full device name, as exports keep it
            if column.align == "right":
                item.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
            if shown.startswith("/"):
                item.setForeground(device_color(shown.split()[0]))
            widget.setItem(r, c, item)
    widget.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Maximum)
    widget.setMinimumWidth(80)  # never widens the window: the splitter gives it its columns' width when it can
    size_table(widget, table.matrix)
    return widget


def size_table(widget: QTableWidget, matrix: bool) -> None:
    """Columns and rows to their contents, in the font the table is drawn with (call again once it is in the
    window: the window's zoom reaches it through the style sheet only then)."""
    widget.ensurePolished()
    if isinstance(widget, ResultTable):
        widget.measure()
    else:
        widget.resizeColumnsToContents()
    widget.resizeRowsToContents()
    # As tall as its rows, so a small table does not sit in a large empty grid; a long one scrolls.
    frame = 2 * widget.frameWidth()
    header = 0 if matrix else widget.horizontalHeader().sizeHint().height()  # its titles wrapped at these widths
    widget.setMaximumHeight(header + widget.verticalHeader().length() + frame)
    widget.setMaximumWidth(table_content_width(widget))  # nor stretches into an empty grid beside a small table


def table_content_width(widget: QTableWidget) -> int:
    """The width that shows every column whole, a vertical scroll bar included in case the rows overflow."""
    vertical_header = widget.verticalHeader().sizeHint().width() if widget.verticalHeader().isVisible() else 0
    natural = widget.natural if isinstance(widget, ResultTable) and widget.natural else None
    columns = sum(natural) if natural else widget.horizontalHeader().length()
    return (columns + vertical_header + 2 * widget.frameWidth()
            + widget.verticalScrollBar().sizeHint().width() + TABLE_SLACK)


def _live_loss_presentation(caption: str, losses: list[float], unit: str = "epoch",
                            warnings: tuple[str, ...] = ()) -> Presentation:
    xs = tuple(float(n) for n in range(1, len(losses) + 1))
    table = Table((Column(unit, "right"), Column("loss", "right", "loss")),
                  tuple((n, value) for n, value in enumerate(losses, 1)))
    return Presentation(caption, warnings=warnings, tables=(table,) if losses else (),
                        plots=(Plot(unit, "loss", (Series("loss", xs, tuple(losses)),)),))


class _MessageScroll(QScrollArea):
    """The message page: it asks for almost no room (a scroll area asks for its content's), so the job's
    form above keeps every row; a long message scrolls within whatever the result area has."""

    def sizeHint(self) -> QSize:
        return QSize(200, self.fontMetrics().height())

    def minimumSizeHint(self) -> QSize:
        return QSize(0, self.fontMetrics().height())


class _ResultPage(QWidget):
    """Caption above tables and plots. Its height for a width is the caption's strip and the least the tables
    and plots need (their preferred heights made the page scroll in an area that could show it)."""

    def __init__(self, view: ResultView):
        super().__init__()
        self._view = view

    def hasHeightForWidth(self) -> bool:
        return True

    def heightForWidth(self, width: int) -> int:
        layout = self.layout()
        spacing = layout.spacing() if layout is not None else 0
        return (self._view.caption_scroll.minimumHeight() + spacing
                + self._view.body.minimumSizeHint().height())


class ResultView(QStackedWidget):
    """Page 0: a message (running, failed, with its details). Page 1: a presentation: caption, tables, plots."""

    shown = Signal()  # another message or result is shown: the panel around it gives it its room again

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.message = QLabel("Run a job to see its result here.")
        self.message.setWordWrap(True)
        self.message.setAlignment(Qt.AlignmentFlag.AlignTop | Qt.AlignmentFlag.AlignLeft)
        self.message.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        # Ignored: the label wraps to the width it gets instead of asking for its longest word's width.
        self.message.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.error = ExpandableDetail()
        self.error.summary.setStyleSheet("color: #d33; font-weight: bold;")
        self.error.hide()
        message_body = QWidget()
        message_layout = QVBoxLayout(message_body)
        message_layout.setContentsMargins(0, 0, 0, 0)
        message_layout.addWidget(self.message)
        # An out-of-memory failure explained (the run's `oom`): its plain sentence first, the error's own text
        # (red) right under it, in sight; the allocator's bar and figures below.
        self.oom = OomView()
        message_layout.addWidget(self.oom.sentence)
        message_layout.addWidget(self.error)
        message_layout.addWidget(self.oom)
        message_layout.addStretch(1)  # all of it at the top, the room below (the bar sat far from its legend)
        # A long message scrolls down within the result area, never sideways, never widening the window.
        message_page = _MessageScroll()
        message_page.setWidgetResizable(True)
        message_page.setFrameShape(QScrollArea.Shape.NoFrame)
        message_page.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        message_page.setWidget(message_body)
        self.caption = QLabel()
        self.caption.setWordWrap(True)
        self.caption.setTextFormat(Qt.TextFormat.RichText)
        self.caption.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.caption.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self._tables_box = QWidget()
        self._tables_layout = QVBoxLayout(self._tables_box)
        self._tables_layout.setContentsMargins(0, 0, 0, 0)
        self._plots_box = QWidget()
        self._plots_layout = QVBoxLayout(self._plots_box)
        self._plots_layout.setContentsMargins(0, 0, 0, 0)
        self.body = QSplitter()
        self.body.setChildrenCollapsible(False)
        self.body.addWidget(self._tables_box)
        self.body.addWidget(self._plots_box)
        page_body = _ResultPage(self)
        layout = QVBoxLayout(page_body)
        layout.setContentsMargins(0, 0, 0, 0)
        # The caption in a strip of its own: whole where the room allows, else its first lines with the rest a
        # scroll away, so a long caption never pushes the plots out of sight.
        self.caption_scroll = QScrollArea()
        self.caption_scroll.setObjectName("result-caption")
        self.caption_scroll.setWidgetResizable(True)
        self.caption_scroll.setFrameShape(QScrollArea.Shape.NoFrame)
        self.caption_scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.caption_scroll.setWidget(self.caption)
        layout.addWidget(self.caption_scroll)
        layout.addWidget(self.body, 1)
        # Where the result area is shorter than the caption and a readable plot (a dock beside the Runs panel
        # at 1280×720), the result scrolls down instead of cutting the caption's last lines.
        page = _MessageScroll()
        page.setWidgetResizable(True)
        page.setFrameShape(QScrollArea.Shape.NoFrame)
        page.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        page.setWidget(page_body)
        self.presentation_page = page
        self.addWidget(message_page)
        self.addWidget(page)
        self.presentation: Presentation | None = None
        self.tables: list[QTableWidget] = []
        self.plots: list[ResultPlot] = []
        self.table_is_legend = False  # the first table's rows carry the plot's swatches (_mark_rows)
        self.log_boxes: list[QCheckBox] = []
        self.live_losses: list[float] = []
        self._live_curve: pg.PlotDataItem | None = None
        self._stale = False  # drawn at another zoom than the window's: drawn again when shown

    def showEvent(self, event: QShowEvent) -> None:
        super().showEvent(event)
        if self._stale:
            self.redraw(now=True)

    def show_message(self, html_text: str) -> None:
        self.message.setText(html_text)
        self.error.hide()
        self.oom.set_oom(None)
        self._live_curve = None
        self.setCurrentIndex(0)
        self.shown.emit()

    def show_error(self, outcome: JobOutcome) -> None:
        """The failure once, whole: the status line above says only how the run ended and when."""
        how = {"cancelled": "was cancelled", "crashed": "stopped: its runtime died"}.get(outcome.status, "failed")
        self.message.setText(f"<b>{html.escape(outcome.job)}</b> {how}:")
        self.error.set_content(short_devices(error_summary(outcome)) or outcome_summary(outcome),
                               error_details(outcome))
        self.error.show()
        self.oom.set_oom(outcome.oom)
        self._live_curve = None
        self.setCurrentIndex(0)
        self.shown.emit()

    def follow(self, link: RuntimeController, job: str) -> None:
        """Show each outcome of `job` the session tells of, as it ends (the runs panel passes nothing on)."""
        link.subscribe(self, JobEnded, lambda ended: self.show_outcome(ended.outcome),
                       filter=lambda ended: ended.outcome.job == job)

    def show_outcome(self, outcome: JobOutcome) -> None:
        presentation = present(outcome.result)
        if outcome.status == "ok":
            if presentation is None:
                self.show_message(f"<b>{html.escape(outcome.job)}</b> finished; it returns no result.")
            else:
                self.show_presentation(presentation)
            return
        reason = outcome_summary(outcome)
        if presentation is not None:  # a cancelled or failed run that still produced something: keep it
            self.show_presentation(Presentation(presentation.title, presentation.lines,
                                                (reason, *presentation.warnings), presentation.tables,
                                                presentation.plots))
        elif self.live_losses and outcome.status == "cancelled":
            done = len(self.live_losses)
            self.show_presentation(_live_loss_presentation(
                f"{outcome.job}: the loss of the {done} epoch(s) finished before it stopped", self.live_losses,
                warnings=(reason,)))
        else:
            self.show_error(outcome)

    def show_presentation(self, presentation: Presentation) -> None:
        self.presentation = presentation
        self._live_curve = None
        self.error.hide()
        self.caption.setText(caption_html(presentation))
        full = "\n".join([presentation.title, *presentation.warnings, *presentation.lines])
        self.caption.setToolTip(full if short_devices(full) != full else "")
        for layout in (self._tables_layout, self._plots_layout):
            while layout.count():
                item = layout.takeAt(0)
                widget = item.widget() if item is not None else None
                if widget is not None:
                    widget.deleteLater()
        self.tables = [_table_widget(table) for table in presentation.tables]
        self.plots = [ResultPlot(plot) for plot in presentation.plots]
        self.table_is_legend = self._mark_rows(presentation)
        for table, table_spec in zip(self.tables, presentation.tables, strict=True):
            self._tables_layout.addWidget(table)
            size_table(table, table_spec.matrix)  # now in the window: in its (zoomed) font
        self.log_boxes = []
        for plot, spec in zip(self.plots, presentation.plots, strict=True):
            if "loss" in spec.y_label.lower():  # a loss plot offers a log scale, on when the loss spans decades
                box = QCheckBox("Log scale" if len(self.plots) == 1 else f"Log scale ({spec.y_label})")
                box.setToolTip("Show the loss on a logarithmic scale (its late epochs are a flat line otherwise)")
                box.toggled.connect(plot.set_log_y)
                box.setChecked(plot.wants_log_scale())
                self.log_boxes.append(box)
                # under the table, where there is room; above the plot when there is no table
                (self._tables_layout if self.tables else self._plots_layout).addWidget(box)
            self._plots_layout.addWidget(plot)
        self._tables_layout.addStretch(1)  # small tables sit at the top
        self._tables_box.setVisible(bool(self.tables))
        self._plots_box.setVisible(bool(self.plots))
        self.setCurrentIndex(1)
        self._fit_caption()
        self._fit_tables()
        self.shown.emit()

    def redraw(self, now: bool = False) -> None:
        """Draw the shown presentation again (the zoom or presentation mode changed its fonts and lines); a view
        out of sight only notes it, and is drawn again when shown (`now`)."""
        if not (now or self.isVisible()):
            self._stale = True
            return
        self._stale = False
        if self.presentation is not None and self.currentIndex() == 1 and self._live_curve is None:
            logs = [box.isChecked() for box in self.log_boxes]
            self.show_presentation(self.presentation)
            for box, checked in zip(self.log_boxes, logs, strict=False):
                box.setChecked(checked)

    def _mark_rows(self, presentation: Presentation) -> bool:
        """Each row of the first table that one curve of the one plot draws gets that curve's swatch, when every
        curve names its rows (the benchmark's 21 rows, seven curves): the table is then the plot's legend, and
        the plot beside it needs no legend of its own (at 1280×720 the benchmark's 177 px legend stacked the table
        above the plot, three of its rows in sight, and left the output pane three lines)."""
        if len(self.plots) != 1 or not self.tables or len(presentation.plots[0].series) < 2:
            return False
        table, series = self.tables[0], presentation.plots[0].series
        rows = [row for curve in series for row in curve.rows]
        if not all(curve.rows for curve in series) or len(set(rows)) != len(rows) or \
                not all(0 <= row < table.rowCount() for row in rows):
            return False
        table.setIconSize(SWATCH_SIZE)
        for number, curve in enumerate(series):
            icon = self.plots[0].swatch(number)
            for row in curve.rows:
                item = table.item(row, 0)
                if item is not None:
                    item.setIcon(icon)
        return True  # show_presentation measures the columns next, swatches included

    @property
    def _tables_width(self) -> int:
        """The width that shows every column of every table whole, as they are measured now."""
        return max((table_content_width(table) for table in self.tables), default=0)

    def _legend_room(self) -> int:
        """The width the plots' legends take beside their curves (0 without a legend, or where the table beside
        the plot is its legend)."""
        if self.table_is_legend:
            return 0
        widths = [plot.legend_width() for plot in self.plots]
        return int(max(widths, default=0))

    def _plot_room(self) -> int:
        """The width a plot needs for its curves, value axis and legend beside them."""
        return MIN_CURVES_WIDTH + PLOT_AXIS_ROOM + self._legend_room()

    def _plot_least_width(self) -> int:
        """The narrowest a plot beside a table may be: its axis, its legend and LEAST_CURVES_WIDTH px of curves."""
        return LEAST_CURVES_WIDTH + PLOT_AXIS_ROOM + self._legend_room()

    def stacked(self) -> bool:
        """Tables above the plots: beside them, the plot would keep less than its curves' width and legend (at
        1024×768 the benchmark's seven-series legend went below the curves and left them 40 px high), and the
        height allows a few of the table's rows above the plots' least height. Where the table beside the plot
        would have to elide numbers (`must_stack`), it stacks even when the plot then keeps less than its least
        height, down to MIN_PLOT_HEIGHT: the numbers come first (the real benchmark's seven columns in presentation
        mode at 1280×720)."""
        if not (self.tables and self.plots):
            return False
        room = self.body.width() - self.body.handleWidth() - self._tables_width
        if room >= self._plot_room():
            return False
        caption = self.caption_least_height() + 6
        if self.must_stack():  # the plots may give up height down to MIN_PLOT_HEIGHT each
            plots = MIN_PLOT_HEIGHT * len(self.plots) + self._plots_layout.spacing() * (len(self.plots) - 1)
            return self.height() >= caption + self.stacked_table_height(1) + self.body.handleWidth() + plots
        return self.height() >= caption + self.stacked_table_height() + self.body.handleWidth() + self._plots_least()

    def must_stack(self) -> bool:
        """Whether the tables beside the plots would have to elide their columns (the plot at its least width):
        then the result asks for the height to stack them above the plots, and the console gives it."""
        if not (self.tables and self.plots) or self.body.width() <= 0:
            return False
        room = self.body.width() - self.body.handleWidth() - self._tables_width
        return room < self._plot_least_width()

    def stacked_table_height(self, rows_shown: int = STACKED_TABLE_ROWS) -> int:
        """The tables' height above the plots: their rows, at most `rows_shown` of them (then they scroll)."""
        rows = rows_shown * max((table.rowHeight(0) for table in self.tables if table.rowCount()), default=24)
        most = sum(min(table.maximumHeight(), table.horizontalHeader().sizeHint().height() + rows
                       + 2 * table.frameWidth()) for table in self.tables)
        return most + (len(self._tables_box.findChildren(QCheckBox)) * (self.fontMetrics().height() + 10))

    def _fit_tables(self) -> None:
        """Tables beside the plots, with their columns' width and the plots the rest; or, where the plot would
        be too narrow beside them, above the plots, full width, a few rows high."""
        if not (self.tables and self.plots):
            return
        stacked = self.stacked()
        for plot in self.plots:  # stacked, the table shows a few rows: the plot keeps its own legend
            plot.set_legend_shown(stacked or not self.table_is_legend)
        orientation = Qt.Orientation.Vertical if stacked else Qt.Orientation.Horizontal
        if self.body.orientation() != orientation:
            self.body.setOrientation(orientation)
            self._fit_caption()
        if stacked:
            total = self.body.height() - self.body.handleWidth()
            # the plots their least where the height allows; where not, the table one row at least (it scrolls)
            table_height = min(self.stacked_table_height(), max(total - self._plots_least(),
                                                                 self.stacked_table_height(1)))
            # a plot gives up height below its least rather than make the result's page scroll
            spacing = self._plots_layout.spacing() * (len(self.plots) - 1)
            per_plot = (total - table_height - spacing) // len(self.plots)
            for plot in self.plots:
                least = min(plot_min_height(), max(per_plot, MIN_CURVES_HEIGHT))
                if plot.minimumHeight() != least:
                    plot.setMinimumHeight(least)
            self.body.setSizes([table_height, max(total - table_height, 1)])
            return
        total = self.body.width() - self.body.handleWidth()
        # Every column whole: the plot takes what the table leaves, narrower than its roomy width if need be, down
        # to its least; only a window narrower than that makes the widest columns elide (the table a third at least).
        table_width = min(self._tables_width, max(total - self._plot_least_width(), total // 3))
        self.body.setSizes([table_width, max(total - table_width, 1)])

    def _plots_least(self) -> int:
        return plot_min_height() * len(self.plots) + self._plots_layout.spacing() * (len(self.plots) - 1)

    def least_body_height(self) -> int:
        """What the tables and plots need in sight: each plot its least height (stacked, the tables' few rows
        above them); tables alone a few rows."""
        if self.plots:
            stacked = self.stacked_table_height() + self.body.handleWidth() if (self.stacked() or self.must_stack()) \
                else 0
            return self._plots_least() + stacked
        if self.tables:
            return min(sum(table.maximumHeight() for table in self.tables), 4 * self.fontMetrics().height() + 40)
        return 0

    def caption_least_height(self) -> int:
        """The caption's first lines (all of a short one): what it keeps in sight above the plots."""
        width = self.caption_scroll.viewport().width() or self.width()
        needed = max(self.caption.heightForWidth(width), 0)
        lines = 1 if view_settings.current().presentation else CAPTION_LEAST_LINES  # the room is the plots' there
        return min(needed, lines * self.caption.fontMetrics().lineSpacing() + 4)

    def least_height(self) -> int:
        """The least the result needs in sight: the message whole, or the caption's first lines and the tables'
        and plots' least."""
        if self.currentIndex() == 0:
            return self.wanted_height()
        page = self.caption_scroll.parentWidget()
        page_layout = page.layout() if page is not None else None
        spacing = page_layout.spacing() if page_layout is not None else 6
        return self.caption_least_height() + spacing + self.least_body_height()

    def wanted_height(self) -> int:
        """The height that shows the whole result: the message, or the caption, tables and plots (plots at their
        least). The console under it gets the rest (a script's one-line result left 250 px empty above it)."""
        if self.currentIndex() == 0:
            body = self.message.parentWidget()
            return body.sizeHint().height() if body is not None else 0
        tables = 0
        if self.tables:  # the tables box without its tables' whole heights: each asks for a few rows
            tables = self._tables_box.sizeHint().height() - sum(
                table.sizeHint().height() - table.wanted_height() for table in self.tables
                if isinstance(table, ResultTable))
        caption = self.caption.heightForWidth(max(self.caption_scroll.viewport().width(), 200))
        return caption + 6 + max(tables, self.least_body_height())

    def _fit_caption(self) -> None:
        """The caption whole while the plots keep their least height beside it; else its first lines, scrolling."""
        width = self.caption_scroll.viewport().width() or self.width()
        needed = max(self.caption.heightForWidth(width), 0)
        lines = 1 if view_settings.current().presentation else CAPTION_LEAST_LINES  # the room is the plots' there
        least = lines * self.caption.fontMetrics().lineSpacing() + 4
        page = self.caption_scroll.parentWidget()
        page_layout = page.layout() if page is not None else None
        spacing = page_layout.spacing() if page_layout is not None else 6
        room = self.height() - self.least_body_height() - spacing
        height = max(min(needed, room), min(needed, least))
        if needed > height:  # its first lines whole, never a line cut in half at the strip's edge
            scroll_bar = self.caption_scroll.verticalScrollBar().sizeHint().width()
            bottoms = text_line_bottoms(self.caption, width - (0 if self.caption_scroll.verticalScrollBar().isVisible()
                                                               else scroll_bar))
            whole = [bottom for bottom in bottoms if bottom <= height]
            height = math.ceil(whole[-1] if whole else bottoms[0]) + 1 if bottoms else height
        if self.caption_scroll.height() != height or self.caption_scroll.minimumHeight() != height:
            self.caption_scroll.setFixedHeight(height)
        self.caption_scroll.setVerticalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAsNeeded if needed > height
                                                       else Qt.ScrollBarPolicy.ScrollBarAlwaysOff)

    def resizeEvent(self, event: QResizeEvent) -> None:
        super().resizeEvent(event)
        self._fit_caption()
        self._fit_tables()

    def add_live_loss(self, step: int, value: float) -> None:
        """Training's loss as it comes; only the curve's data changes, so a fast loop stays cheap to draw."""
        self.live_losses.append(value)
        caption = f"Training… epoch {step}: loss {value:.5f}"
        if self._live_curve is None:
            self.show_presentation(Presentation(caption, plots=(
                Plot("epoch", "loss", (Series("loss", (1.0,), (value,)),)),)))
            self._live_curve = self.plots[0].listDataItems()[0]
        else:
            self.caption.setText(caption_html(Presentation(caption)))
        self._live_curve.setData(list(range(1, len(self.live_losses) + 1)), self.live_losses)
