"""A job's result in the window: any `core.results.Presentation` drawn generically, or a plain message.

No result kind is known here: core.results describes each kind once, and the command line prints the
same description. Tables become table widgets sized to their content, plots pyqtgraph plots.
"""

from __future__ import annotations

import html
import re

import pyqtgraph as pg
from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QAbstractItemView,
    QLabel,
    QSizePolicy,
    QSplitter,
    QStackedWidget,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)
from tf_device_panel.core.results import Plot, Presentation, Series, Table, present
from tf_device_panel.core.session import JobOutcome
from tf_device_panel.gui.colors import device_color, themed_plot

_DEVICE = re.compile(r"(?:/job:[\w-]+(?:/replica:\d+)?(?:/task:\d+)?)?/(?:device:)?(?:CPU|GPU):\d+")
_PEN_STYLES = (Qt.PenStyle.SolidLine, Qt.PenStyle.DashLine, Qt.PenStyle.DotLine)
MAX_TABLE_WIDTH = 520  # px; a wider table scrolls sideways and leaves the rest to the plot
FAILED = {"cancelled": "Cancelled", "crashed": "The runtime died"}


def rich_text(text: str) -> str:
    """`text` escaped for a label, each device name in its colour, spaces kept (raw JSON stays indented)."""
    parts, last = [], 0
    for match in _DEVICE.finditer(text):
        parts.append(html.escape(text[last:match.start()]))
        parts.append(f"<span style='color:{device_color(match.group()).name()}'>{html.escape(match.group())}</span>")
        last = match.end()
    parts.append(html.escape(text[last:]))
    return f"<span style='white-space:pre-wrap'>{''.join(parts)}</span>"


def caption_html(presentation: Presentation) -> str:
    lines = [f"<b>{rich_text(presentation.title)}</b>"] if presentation.title else []
    lines += [f"<b style='color:#d33'>⚠ {rich_text(warning)}</b>" for warning in presentation.warnings]
    lines += [rich_text(line) for line in presentation.lines]
    return "<br>".join(lines)


def _table_widget(table: Table) -> QTableWidget:
    widget = QTableWidget(len(table.rows), len(table.columns))
    widget.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
    if table.matrix:
        widget.horizontalHeader().setVisible(False)
    else:
        widget.setHorizontalHeaderLabels([column.title for column in table.columns])
    widget.verticalHeader().setVisible(table.matrix)
    for r, texts in enumerate(table.texts()):
        for c, (text, column) in enumerate(zip(texts, table.columns, strict=True)):
            item = QTableWidgetItem(text)
            if column.align == "right":
                item.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
            if text.startswith("/"):
                item.setForeground(device_color(text))
            widget.setItem(r, c, item)
    widget.resizeColumnsToContents()
    widget.resizeRowsToContents()
    # As tall as its rows, so a small table does not sit in a large empty grid; a long one scrolls.
    frame = 2 * widget.frameWidth()
    width = widget.horizontalHeader().length() + frame + (widget.verticalHeader().sizeHint().width() if table.matrix
                                                          else 0)
    widget.setMinimumWidth(min(width, MAX_TABLE_WIDTH))  # the splitter then gives the table its columns' width
    header = 0 if table.matrix else widget.horizontalHeader().sizeHint().height()
    scrollbar = widget.horizontalScrollBar().sizeHint().height() if width > MAX_TABLE_WIDTH else 0
    widget.setMaximumHeight(header + widget.verticalHeader().length() + frame + scrollbar)
    widget.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Maximum)
    return widget


def _plot_widget(plot: Plot) -> pg.PlotWidget:
    widget = themed_plot()
    widget.setLabel("bottom", plot.x_label)
    widget.setLabel("left", plot.y_label)
    widget.showGrid(x=True, y=True, alpha=0.3)
    widget.setMinimumHeight(120)
    if len(plot.series) > 1:
        widget.addLegend(offset=(10, 10))
    for number, series in enumerate(plot.series):
        _draw(widget, series, number)
    return widget


def _draw(widget: pg.PlotWidget, series: Series, number: int) -> pg.PlotDataItem:
    device = series.name.split()[0] if series.name else ""
    color = device_color(device) if device.startswith("/") else pg.intColor(number, hues=9)
    return widget.plot(list(series.x), list(series.y), name=series.name, symbol="o", symbolSize=5, symbolBrush=color,
                       pen=pg.mkPen(color, width=2, style=_PEN_STYLES[number % len(_PEN_STYLES)]))


class ResultView(QStackedWidget):
    """Page 0: a message (running, failed). Page 1: a presentation: caption, tables, plots."""

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.message = QLabel("Run a job to see its result here.")
        self.message.setWordWrap(True)
        self.message.setAlignment(Qt.AlignmentFlag.AlignTop | Qt.AlignmentFlag.AlignLeft)
        self.message.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.caption = QLabel()
        self.caption.setWordWrap(True)
        self.caption.setTextFormat(Qt.TextFormat.RichText)
        self.caption.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self._tables_box = QWidget()
        self._tables_layout = QVBoxLayout(self._tables_box)
        self._tables_layout.setContentsMargins(0, 0, 0, 0)
        self._plots_box = QWidget()
        self._plots_layout = QVBoxLayout(self._plots_box)
        self._plots_layout.setContentsMargins(0, 0, 0, 0)
        body = QSplitter()
        body.addWidget(self._tables_box)
        body.addWidget(self._plots_box)
        body.setStretchFactor(0, 3)
        body.setStretchFactor(1, 2)
        page = QWidget()
        layout = QVBoxLayout(page)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.caption)
        layout.addWidget(body, 1)
        self.addWidget(self.message)
        self.addWidget(page)
        self.presentation: Presentation | None = None
        self.tables: list[QTableWidget] = []
        self.plots: list[pg.PlotWidget] = []
        self.live_losses: list[float] = []
        self._live_curve: pg.PlotDataItem | None = None

    def show_message(self, html_text: str) -> None:
        self.message.setText(html_text)
        self._live_curve = None
        self.setCurrentIndex(0)

    def show_outcome(self, outcome: JobOutcome) -> None:
        presentation = present(outcome.result) if outcome.status == "ok" else None
        if presentation is None:
            error = outcome.error or {}
            title = FAILED.get(outcome.status, "Failed") if outcome.status != "ok" else "Finished"
            self.show_message(f"<b>{title}</b> — {html.escape(error.get('type', ''))}<br>"
                              f"<pre style='white-space: pre-wrap'>{html.escape(error.get('message', ''))}</pre>")
            return
        self.show_presentation(presentation)

    def show_presentation(self, presentation: Presentation) -> None:
        self.presentation = presentation
        self._live_curve = None
        self.caption.setText(caption_html(presentation))
        for layout in (self._tables_layout, self._plots_layout):
            while layout.count():
                item = layout.takeAt(0)
                widget = item.widget() if item is not None else None
                if widget is not None:
                    widget.deleteLater()
        self.tables = [_table_widget(table) for table in presentation.tables]
        self.plots = [_plot_widget(plot) for plot in presentation.plots]
        for table in self.tables:
            self._tables_layout.addWidget(table)
        self._tables_layout.addStretch(1)  # small tables sit at the top
        for plot in self.plots:
            self._plots_layout.addWidget(plot)
        self._tables_box.setVisible(bool(self.tables))
        self._plots_box.setVisible(bool(self.plots))
        self.setCurrentIndex(1)

    def add_live_loss(self, step: int, value: float) -> None:
        """Training's loss as it comes; only the curve's data changes, so a fast loop stays cheap to draw."""
        self.live_losses.append(value)
        caption = f"Training… epoch {step}: loss {value:.5f}"
        if self._live_curve is None:
            self.show_presentation(Presentation(caption, plots=(
                Plot("epoch", "loss", (Series("loss", (), ()),)),)))
            self._live_curve = self.plots[0].getPlotItem().listDataItems()[0]
        else:
            self.caption.setText(caption_html(Presentation(caption)))
        self._live_curve.setData(list(range(1, len(self.live_losses) + 1)), self.live_losses)
