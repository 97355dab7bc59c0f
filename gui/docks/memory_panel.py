"""Live memory graphs: one plot per GPU (used, total, TF current/peak, logical limits), host memory and CPU.

Samples come from `core.devices.telemetry.Sampler` on its own thread, through a signal; the plots redraw on a
timer from the bounded history, thinned to two points per pixel column (`gui.decimation`) before pyqtgraph
sees them, and a curve whose data has not changed is not handed over again. Curves know their bounds from the
data they were handed and draw it as polylines (`Curve`); a live redraw repaints the curves and the time axis,
not the value axes or their labels. Each plot's legend sits to its right, outside the curves, where marker
labels cannot cover it.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QRectF, Qt, QTimer, Signal
from PySide6.QtGui import QBrush, QColor, QFontMetrics, QImage, QPainter, QPolygonF, QResizeEvent
from PySide6.QtWidgets import (
    QComboBox,
    QFileDialog,
    QGraphicsView,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QMessageBox,
    QPushButton,
    QScrollArea,
    QSizePolicy,
    QSpinBox,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)
from tf_device_panel.core.client.run_state import RunChanges, RunState
from tf_device_panel.core.client.session import InventoryChanged, RunStateChanged
from tf_device_panel.core.devices.inventory import DeviceInventory, InventoryLogicalGpu
from tf_device_panel.core.devices.nvml import GpuSample, Nvml
from tf_device_panel.core.devices.telemetry import HeldOnGpu, History, Marker, Sample, Sampler
from tf_device_panel.core.protocol.events import Event
from tf_device_panel.core.units import mib_text
from tf_device_panel.gui.docks import BOTTOM, DockSpec
from tf_device_panel.gui.shell.notice import show_notice
from tf_device_panel.gui.views.decimation import columns_for
from tf_device_panel.gui.views.marker_layout import label_rows, layout_marker_labels
from tf_device_panel.gui.widgets.colors import device_color, palette_colors, theme_axes
from tf_device_panel.gui.widgets.common import guard_wheel, move_in_layout
from tf_device_panel.gui.widgets.worker import to_gui_thread

if TYPE_CHECKING:
    from tf_device_panel.gui.shell.controller import RuntimeController

WINDOWS = (("1 min", 60.0), ("5 min", 300.0), ("15 min", 900.0), ("1 hour", 3600.0), ("All", None))
REDRAW_MS = 500
MARKER_READ_PX = 12  # the read-out names markers this close to the cursor
MARKER_COLORS = {"runtime-start": "#2e9d4f", "runtime-exit": "#888888", "job-start": "#3b82c4",
                 "job-end": "#6c71c4", "error": "#d33"}
GPU_COLUMNS = ("GPU", "Name", "Memory", "Util", "Temp", "Power", "Clocks (SM/mem)", "Processes")
PLOT_MIN_HEIGHT = 150  # px per plot row; with many GPUs the graphs scroll instead of shrinking
GRAPHS_MIN_HEIGHT = 60   # px of the graphs' scroll area in a short dock (raised, the dock grows)
ONE_ROW_PLOT_WIDTH = 400  # px a plot keeps (with its legend) when the plots stand side by side
LABEL_ROWS = 2         # marker label rows kept clear above the top plot's curves (labels never cover a curve)
MIN_SPAN_S = 60.0      # the shortest time span drawn, so a fresh window's first samples are not one line


def _label_background() -> QColor:
    background = QColor(palette_colors()[0])
    background.setAlpha(210)  # labels stay readable over the curves, which still show through
    return background


def faint(color: QColor, amount: float) -> QColor:
    """`color` mixed with the plot background: as light as a translucent pen, without blending each pixel."""
    background = QColor(palette_colors()[0])

    def mix(own: float, behind: float) -> float:
        return own + (behind - own) * amount

    return QColor.fromRgbF(mix(color.redF(), background.redF()), mix(color.greenF(), background.greenF()),
                           mix(color.blueF(), background.blueF()))


def nice_ceiling(value: float) -> float:
    """The next of 1, 2, 2.5, 5 × 10^k at or above `value`."""
    if value <= 0:
        return 1.0
    scale = 10 ** math.floor(math.log10(value))
    return next(step * scale for step in (1, 2, 2.5, 5, 10) if step * scale >= value)


def _fmt(value: float | None, unit: str, digits: int = 0) -> str:
    return "N/A" if value is None else f"{value:.{digits}f}{unit}"


class Curve(pg.PlotCurveItem):
    """A curve whose bounds are found once, when its (already thinned) data is set.

    pyqtgraph works a curve's bounds out again (NaN-aware min and max of both axes, plus a pixel's size in data
    units for the pen) after every `setData` and again after every change of the view's range: twice per curve
    per live redraw, about a quarter of the redraw's cost with 27 curves. Here they come from the data handed
    over in `set_points`, padded by a pixel in data units as the plot last measured it; a change of the x range
    (every live redraw) leaves them as they are.
    """

    def __init__(self, **options: Any):
        super().__init__(**options)
        self.highest = math.nan  # the highest value shown, for the plot's scale
        self._rect = QRectF()
        self._limits: tuple[tuple[float | None, float | None], ...] = ((None, None), (None, None))
        self._lines: list[QPolygonF] | None = None

    def set_points(self, times: np.ndarray, values: np.ndarray, pixel: tuple[float, float]) -> None:
        if len(times):
            low, high = float(np.fmin.reduce(values)), float(np.fmax.reduce(values))  # NaN only if all are
        else:
            low = high = math.nan
        self.highest = high
        if len(times) and not math.isnan(high):
            left, right = float(times[0]), float(times[-1])
            self._limits = ((left, right), (low, high))
            self._rect = QRectF(left - pixel[0], low - pixel[1], right - left + 2 * pixel[0],
                                high - low + 2 * pixel[1])
        else:
            self._limits = ((None, None), (None, None))
            self._rect = QRectF()
        self._lines = None
        self.setData(times, values)

    def _polylines(self) -> list[QPolygonF]:
        """The data as one polyline per run of finite values (NaN is a gap), built once per `set_points`."""
        if self._lines is None:
            times, values = self.getData()
            self._lines = []
            if times is not None and len(times) > 1:
                finite = np.isfinite(values)
                if finite.all():
                    runs = [(0, len(times))]
                else:
                    edges = np.flatnonzero(np.diff(np.concatenate(([False], finite, [False])).astype(np.int8)))
                    runs = list(zip(edges[0::2].tolist(), edges[1::2].tolist(), strict=True))
                self._lines = [pg.functions.arrayToQPolygonF(times[a:b], values[a:b]) for a, b in runs if b - a > 1]
        return self._lines

    def paint(self, painter: QPainter, option: Any, widget: Any = None) -> None:
        if self.opts["connect"] != "finite" or self._exportOpts is not False:
            super().paint(painter, option, widget)
            return
        # Polylines straight to the painter: pyqtgraph would build a QPainterPath of the same points first.
        painter.setRenderHint(QPainter.RenderHint.Antialiasing, bool(self.opts["antialias"]))
        painter.setPen(self.opts["pen"])
        for line in self._polylines():
            painter.drawPolyline(line)

    def dataBounds(self, ax: int, frac: float = 1.0, orthoRange: Any = None) -> Any:
        if frac >= 1.0 and orthoRange is None:
            return self._limits[ax]
        return super().dataBounds(ax, frac, orthoRange)

    def boundingRect(self) -> QRectF:
        return self._rect

    def viewTransformChanged(self) -> None:
        pass  # the bounds are in data units: a new view range leaves them as they are


class MarkerImages:
    """The marker lines of one redraw as opaque images, one per plot size, shared by the plots of that size: the
    plots' background with a marker's colour in each pixel column a marker falls in."""

    def __init__(self, marks: list[tuple[np.ndarray, int]], background: int, start: float, end: float):
        self.marks = marks  # (times, 0xffRRGGBB) per kind, later kinds on top
        self._background, self._start, self._end = background, start, end
        self._images: dict[tuple[int, int], tuple[QImage, np.ndarray]] = {}

    def image(self, width: int, height: int) -> QImage:
        found = self._images.get((width, height))
        if found is None:
            row = np.full(width, self._background, dtype=np.uint32)
            for times, color in self.marks:
                columns = ((times - self._start) * (width / (self._end - self._start))).astype(np.int64)
                row[columns[(columns >= 0) & (columns < width)]] = color
            pixels = np.ascontiguousarray(np.broadcast_to(row, (height, width)))
            # the image reads the array's memory, which is kept with it
            found = self._images[width, height] = (QImage(pixels.data, width, height, width * 4,
                                                          QImage.Format.Format_RGB32), pixels)
        return found[0]


class MarkerLines(pg.GraphicsObject):
    """A plot's marker lines, every kind, drawn as one opaque image (`MarkerImages`) under its curves. Stroking
    400 markers' lines in each of 9 plots cost more than all the curves together (the 1-pixel line stroker goes
    pixel by pixel); an opaque image is copied row by row."""

    def __init__(self) -> None:
        super().__init__()
        self.setZValue(-1)  # under the curves: it is the plot's background
        self._images: MarkerImages | None = None
        self._rect = QRectF()

    def set_images(self, images: MarkerImages | None, rect: QRectF) -> None:
        """The marker images for `rect`, the plot's view range (data units)."""
        if rect != self._rect:
            self.prepareGeometryChange()
            self._rect = rect
        self._images = images
        self.update()

    def boundingRect(self) -> QRectF:
        return self._rect

    def paint(self, painter: QPainter, option: Any, widget: Any = None) -> None:
        target = painter.transform().mapRect(self._rect).toAlignedRect()  # in pixels
        if self._images is None or not self._images.marks or target.width() < 1 or target.height() < 1:
            return
        painter.save()
        painter.resetTransform()
        painter.drawImage(target.topLeft(), self._images.image(target.width(), target.height()))
        painter.restore()


def gpu_process_text(gpu: GpuSample, held: HeldOnGpu | None) -> str:
    """"this run holds 522 of 81,559 MiB", from NVML's per-process figures ("" when it cannot say)."""
    total = gpu.memory_total_mib
    if held is None or total is None:
        return ""
    if not held.listed:
        return f"this run holds nothing of {mib_text(total, 0)}"
    if held.run_mib is None:
        return "this run's memory: N/A (the driver does not say)"
    return f"this run holds {held.run_mib:,.0f} of {total:,.0f} MiB ({100 * held.run_mib / total:.0f} %)"


class MemoryPanel(QWidget):
    DOCK = DockSpec("memory", "Memory (live)", BOTTOM, tab_with="log", needs=("sampler",))
    sampleShown = Signal(object)  # each telemetry Sample, on the GUI thread, once the table shows it

    def __init__(self, nvml: Nvml | None = None, *, sampler: Sampler | None = None, interval_s: float = 0.5,
                 start: bool = True, parent: QWidget | None = None):
        """`sampler`: the process's one sampler (core.client.session.Session's), which its owner starts and
        stops; without one the panel samples with a sampler of its own (`nvml`, `interval_s`)."""
        super().__init__(parent)
        self._sampled = to_gui_thread(self._on_sample, self)  # the sampler calls it on its own thread
        self._owns_sampler = sampler is None
        self.sampler = sampler if sampler is not None else Sampler(interval=interval_s, nvml=nvml)
        self._unsubscribe: Callable[[], None] | None = None
        self.history: History = self.sampler.history
        # Fed only when the panel is used on its own (`on_events`): the window's panel draws its session's run
        # state, and that session tells the sampler the run's pid.
        self.run_state = RunState()
        self.paused = False
        self.last_sample: Sample | None = None
        self.redraws = 0
        self.logical_gpus: dict[str, InventoryLogicalGpu] = {}    # "/GPU:0" -> its NVML index and limit
        # Markers: per plot one image of their lines (MarkerLines); labels are a few text items in the top plot.
        # (An InfiniteLine per marker and plot cost ~300 ms a redraw with 400 markers.)
        self._marker_lines: dict[str, MarkerLines] = {}  # plot -> its marker lines
        self._marker_texts: list[pg.TextItem] = []
        self._drawn_markers: list[Marker] = []
        self._shown_labels: list[str] = []  # in time order
        self._label_widths: dict[str, float] = {}  # label text -> its width in the panel's font
        self._label_widths_font = ""

        self.window_choice = QComboBox()
        for label, seconds in WINDOWS:
            self.window_choice.addItem(label, seconds)
        self.window_choice.setCurrentIndex(1)
        self.window_choice.setToolTip("How much history the graphs show")
        self.window_choice.currentIndexChanged.connect(self.redraw)
        self.pause_button = QPushButton("Pause")
        self.pause_button.setCheckable(True)
        self.pause_button.setToolTip("Freeze the graphs (sampling goes on)")
        self.pause_button.toggled.connect(self.set_paused)
        self.interval = QSpinBox()
        self.interval.setRange(100, 10_000)
        self.interval.setSingleStep(100)
        self.interval.setSuffix(" ms")
        self.interval.setValue(int(self.sampler.interval * 1000))
        self.interval.setToolTip("Sampling interval")
        guard_wheel(self.window_choice)
        guard_wheel(self.interval)
        self.interval.valueChanged.connect(lambda ms: self.sampler.set_interval(ms / 1000))
        csv_button = QPushButton("Export CSV…")
        csv_button.clicked.connect(self._export_csv_dialog)
        png_button = QPushButton("Export PNG…")
        png_button.clicked.connect(self._export_png_dialog)
        self.note = QLabel()  # where the numbers come from: NVML's GPUs, or why the graphs are host-only
        self.note.setWordWrap(True)
        toolbar = QHBoxLayout()
        for widget in (QLabel("Show:"), self.window_choice, self.pause_button, QLabel("Every:"), self.interval):
            toolbar.addWidget(widget)
        toolbar.addSpacing(12)
        toolbar.addWidget(self.note, 1)
        toolbar.addWidget(csv_button)
        toolbar.addWidget(png_button)

        self.readout = QLabel("Move the mouse over a graph to read its values.")
        self.readout.setTextFormat(Qt.TextFormat.RichText)
        self.readout.setWordWrap(True)
        self.readout.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.graphs = pg.GraphicsLayoutWidget()
        self.graphs.setBackground(palette_colors()[0])
        # Curves are drawn without antialiasing, so an update need not spill 2 px around what changed: 1 px is
        # Qt's least, which the 3 px between each value axis and its curves keep clear of the axis.
        self.graphs.setOptimizationFlag(QGraphicsView.OptimizationFlag.DontAdjustForAntialiasing, True)
        self.graphs_scroll = QScrollArea()
        self.graphs_scroll.setWidgetResizable(True)
        self.graphs_scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.graphs_scroll.setFrameShape(QScrollArea.Shape.NoFrame)
        self.graphs_scroll.setWidget(self.graphs)
        # Shorter than a plot when the dock is: the plots scroll. (A plot's height as the minimum made the
        # bottom docks take 250 of 720 px, and the job's form and result lost their rows.)
        self.graphs_scroll.setMinimumHeight(GRAPHS_MIN_HEIGHT)
        self.table = QTableWidget(0, len(GPU_COLUMNS))
        self.table.setHorizontalHeaderLabels(list(GPU_COLUMNS))
        self.table.verticalHeader().setVisible(False)
        self.table.setEditTriggers(QTableWidget.EditTrigger.NoEditTriggers)
        # Short columns fit their values; the process list takes the rest and elides (each cell's tooltip
        # has it whole): the table never scrolls sideways.
        header = self.table.horizontalHeader()
        header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        header.setSectionResizeMode(GPU_COLUMNS.index("Processes"), QHeaderView.ResizeMode.Stretch)
        self.table.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        # The table as tall as its rows (a GPU a row), the graphs the rest of the dock.
        self.table.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Maximum)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.addLayout(toolbar)
        layout.addWidget(self.readout)
        layout.addWidget(self.graphs_scroll, 1)
        layout.addWidget(self.table)

        self.plots: dict[str, pg.PlotItem] = {}
        self.plot_rows = 0
        self._one_row: bool | None = None
        self.gpu_titles: dict[str, str] = {}
        self._titles_shown: dict[str, str] = {}
        self.legends: dict[str, pg.LegendItem] = {}
        self.curves: dict[str, Curve] = {}
        self.curve_names: dict[str, str] = {}  # series key -> what a person calls it ("GPU 0 used")
        self.curve_plots: dict[str, str] = {}  # series key -> the key of its plot
        self._drawn: dict[str, tuple[Any, ...]] = {}  # series key -> what its curve was last given
        self._y_ranges: dict[str, float] = {}
        self._x_range: tuple[float, float] | None = None  # as last set
        self._markers_drawn: tuple[Any, ...] | None = None  # what the marker lines and labels were drawn for
        self.limit_lines: dict[int, list[pg.InfiniteLine]] = {}
        self.crosshairs: list[pg.InfiniteLine] = []
        self._timer = QTimer(self)
        self._timer.setInterval(REDRAW_MS)
        self._timer.timeout.connect(self.redraw)
        if start:
            self.start()

    # -- lifecycle ---------------------------------------------------------------------------------
    def start(self) -> None:
        if self._unsubscribe is None:
            self._unsubscribe = self.sampler.hub.subscribe(self, Sample, self._sampled)
        if self._owns_sampler:
            self.sampler.start()
        self.build_plots([g.index for g in self.sampler.gpus])
        self._timer.start()

    def stop(self) -> None:
        self._timer.stop()
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None
        if self._owns_sampler:
            self.sampler.stop()

    def shut_down(self) -> None:
        self.stop()

    def build_plots(self, gpu_indices: list[int]) -> None:
        self.graphs.clear()
        self.plots.clear()
        self.legends.clear()
        self.curves.clear()
        self.curve_names.clear()
        self.curve_plots.clear()
        self._drawn.clear()
        self._y_ranges.clear()
        self._x_range = None
        self._markers_drawn = None
        self.crosshairs.clear()
        self._marker_lines.clear()
        self._marker_texts.clear()
        self._drawn_markers = []
        names = {g.index: g.name for g in self.sampler.gpus}
        self.note.setText(self.sampler.note or f"{len(gpu_indices)} GPU(s) through NVML, and the host.")
        self.table.setVisible(bool(gpu_indices))
        self.table.setRowCount(len(gpu_indices))  # a row per GPU from the start: the table's height is known
        self._fit_table_height()
        first: pg.PlotItem | None = None
        specs: list[tuple[str, str, str]] = [(f"gpu{i}", f"GPU {i}: {names.get(i) or ''} — memory (MiB)", "MiB")
                                             for i in gpu_indices]
        specs += [("host", "Host memory (MiB): RAM in use, the runtime's resident memory", "MiB"),
                  ("cpu", "Host CPU (%)", "%")]
        self.gpu_titles = {f"gpu{i}": f"GPU {i}: {names.get(i) or ''} — memory (MiB)" for i in gpu_indices}
        self._titles_shown = {}
        for key, title, unit in specs:
            plot = pg.PlotItem(title=title, axisItems={"bottom": pg.DateAxisItem()})
            plot.setLabel("left", unit)
            theme_axes(plot)
            for side in ("left", "bottom", "right", "top"):  # the hidden ones follow the range too
                # MiB, % and clock time take no SI prefix; without this each range change re-lays out the axis
                # label's HTML, on every plot, every redraw.
                plot.getAxis(side).enableAutoSIPrefix(False)
            # Every live redraw repaints each plot's curve area (and Qt one pixel around it). With the value
            # axis's ticks pointing outwards and 3 px between it and the curves, that leaves the axis alone.
            plot.getAxis("left").setStyle(tickLength=5)
            plot.layout.setColumnSpacing(0, 3)
            # No grid: its translucent lines cost ~15 ms per plot per redraw; limits and totals are the guides.
            # No pyqtgraph downsampling either: redraw hands each curve no more than the pixels can show.
            legend = pg.LegendItem(labelTextSize="8pt", labelTextColor=palette_colors()[1])
            # Rows as tall as their text: stretched to the plot's height, each swatch sat 25 px below its label.
            legend.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Maximum)
            self.legends[key] = legend
            plot.setMouseEnabled(x=False, y=False)
            plot.getViewBox().enableAutoRange(axis="y", enable=False)
            if first is None:
                first = plot
            else:
                plot.setXLink(first)
            crosshair = pg.InfiniteLine(angle=90, movable=False, pen=pg.mkPen("#999", style=Qt.PenStyle.DotLine))
            crosshair.setVisible(False)
            plot.addItem(crosshair, ignoreBounds=True)
            self.crosshairs.append(crosshair)
            self.plots[key] = plot
        # One-pixel pens: a wider pen is stroked segment by segment and tripled the paint time of 8 GPUs.
        for index in gpu_indices:
            color = device_color(f"GPU:{index}")
            self._add_curve(f"gpu{index}", f"gpu{index}.memory_used_mib", "used", f"GPU {index} used",
                            pg.mkPen(color, width=1))
            # Faint rather than dashed: a dashed hour-long line is slow to paint.
            self._add_curve(f"gpu{index}", f"gpu{index}.memory_total_mib", "total", f"GPU {index} total",
                            pg.mkPen(faint(color, 0.55), width=1))
            self._add_curve(f"gpu{index}", f"gpu{index}.runtime_used_mib", "this run's process",
                            f"GPU {index} held by this run's process", pg.mkPen("#2aa198", width=1))
        self._one_row = None
        self._arrange_plots()
        self._add_curve("host", "host.ram_used_mib", "RAM used", "host RAM used", pg.mkPen("#3b82c4", width=1))
        self._add_curve("host", "host.runtime_rss_mib", "runtime RSS", "runtime resident memory",
                        pg.mkPen("#e4572e", width=1))
        self._add_curve("cpu", "host.cpu_percent", "CPU", "host CPU", pg.mkPen("#6c71c4", width=1))
        self.plots["cpu"].setYRange(0, 100, padding=0.02)
        self.graphs.scene().sigMouseMoved.connect(self._on_mouse)

    def _arrange_plots(self) -> None:
        """The plots side by side when the panel is wide enough for each to keep ONE_ROW_PLOT_WIDTH px (a
        short, wide dock at 1280×720 then shows each at its full height), else each GPU a row of its own and
        host memory beside CPU on the last; GPUs first either way."""
        if not self.plots:
            return
        one_row = self.width() >= ONE_ROW_PLOT_WIDTH * len(self.plots)
        if one_row == self._one_row:
            return
        self._one_row = one_row
        layout = self.graphs.ci
        keys = list(self.plots)
        gpus = [key for key in keys if key.startswith("gpu")]
        if one_row:
            places = {key: (0, 2 * n, 1) for n, key in enumerate(keys)}
            self.plot_rows = 1
        else:
            places = {key: (row, 0, 3) for row, key in enumerate(gpus)}
            places.update({"host": (len(gpus), 0, 1), "cpu": (len(gpus), 2, 1)})
            self.plot_rows = len(gpus) + 1
        bottom_row = max(row for row, _, _ in places.values())
        for key in keys:  # out of their cells first: a cell a plot leaves may be another's new one
            for item in (self.plots[key], self.legends[key]):
                if item in layout.items:
                    for r, c in layout.items.pop(item):
                        layout.rows.get(r, {}).pop(c, None)
        for key, (row, col, span) in places.items():
            plot = self.plots[key]
            if plot.scene() is None:
                self.graphs.addItem(plot, row=row, col=col, colspan=span)
                self.graphs.addItem(self.legends[key], row=row, col=col + span)
            else:  # moved within the layout, never out of the scene (see move_in_layout)
                move_in_layout(layout, plot, row, col, 1, span)
                move_in_layout(layout, self.legends[key], row, col + span)
            layout.layout.setAlignment(self.legends[key], Qt.AlignmentFlag.AlignTop)  # at the top of its cell
            # X is linked: one time axis under each bottom plot is enough and paints fast
            plot.showAxis("bottom", row == bottom_row)
        self.graphs.setMinimumHeight(PLOT_MIN_HEIGHT * self.plot_rows)
        self._markers_drawn = None

    def resizeEvent(self, event: QResizeEvent) -> None:
        super().resizeEvent(event)
        self._arrange_plots()

    def set_line_width(self, width: float) -> None:
        """Thicker curves for a projector (presentation mode); 1 px otherwise, the cheapest to paint."""
        for curve in self.curves.values():
            pen = pg.mkPen(curve.opts["pen"])
            if pen.widthF() != width:
                pen.setWidthF(width)
                curve.setPen(pen)

    def _add_curve(self, plot: str, key: str, legend: str, human: str, pen: Any) -> Curve:
        # A bare curve item: PlotDataItem's own downsampling and clipping would repeat the thinning (columns_for).
        curve = Curve(pen=pen, connect="finite", skipFiniteCheck=True)
        self.plots[plot].addItem(curve)
        self.legends[plot].addItem(curve, legend)
        sample, label = self.legends[plot].items[-1]
        for part in (sample, label):  # the swatch level with its label
            self.legends[plot].layout.setAlignment(part, Qt.AlignmentFlag.AlignVCenter)
        self.curves[key] = curve
        self.curve_names[key] = human
        self.curve_plots[key] = plot
        return curve

    # -- samples and runtime events ----------------------------------------------------------------
    def _on_sample(self, sample: Sample) -> None:
        self.last_sample = sample
        self._update_table(sample)
        self._update_gpu_titles(sample)
        self.sampleShown.emit(sample)

    def _update_gpu_titles(self, sample: Sample) -> None:
        """Each GPU's title says what this run's process holds of its total: 522 of 81,559 MiB (memory growth)
        and 79,274 of 81,559 (the default) differ at a glance, where the curves are two lines near the top."""
        for gpu in sample.gpus:
            key = f"gpu{gpu.index}"
            plot = self.plots.get(key)
            if plot is None:
                continue
            title = self.gpu_titles.get(key, key)
            held = gpu_process_text(gpu, sample.held_on(gpu))
            text = f"{title} — {held}" if held else title
            if self._titles_shown.get(key) != text:  # setting a title re-lays out its HTML
                self._titles_shown[key] = text
                plot.setTitle(text)

    def gpu_title(self, index: int) -> str:
        return self._titles_shown.get(f"gpu{index}", self.gpu_titles.get(f"gpu{index}", ""))

    def plot_heights(self) -> dict[str, int]:
        """Each plot's height (title, curves, axis) in sight inside the graphs' scroll viewport, in px."""
        viewport = self.graphs_scroll.viewport()
        heights = {}
        for key, plot in self.plots.items():
            rect = self.graphs.mapFromScene(plot.sceneBoundingRect()).boundingRect()
            top_left = self.graphs.mapTo(viewport, rect.topLeft())
            heights[key] = rect.translated(top_left - rect.topLeft()).intersected(viewport.rect()).height()
        return heights

    def height_missing(self, plot_height: int) -> int:
        """How many px taller the panel must be for every plot to be `plot_height` tall and in sight."""
        heights = self.plot_heights()
        if not heights:
            return 0
        shortfall = plot_height - min(heights.values())
        return max(0, shortfall) * self.plot_rows + (4 if shortfall > 0 else 0)

    def _update_table(self, sample: Sample) -> None:
        names = {g.index: g for g in self.sampler.gpus}
        self.table.setRowCount(len(sample.gpus))
        for row, gpu in enumerate(sample.gpus):
            info = names.get(gpu.index)
            processes = []
            for process in gpu.processes or []:
                who = "this panel's runtime" if process.pid == sample.runtime_pid else (process.name or "other")
                processes.append(f"pid {process.pid} ({who}) {_fmt(process.used_mib, ' MiB')}")
            if gpu.processes is None and gpu.error is None:
                processes = ["process list N/A"]
            memory = (f"{_fmt(gpu.memory_used_mib, '')} / {_fmt(gpu.memory_total_mib, ' MiB')}"
                      if gpu.error is None else gpu.error)
            values = [str(gpu.index), (info.name if info else "") or "", memory, _fmt(gpu.utilization, " %"),
                      _fmt(gpu.temperature_c, " °C"), _fmt(gpu.power_w, " W", 1),
                      f"{_fmt(gpu.sm_clock_mhz, '')} / {_fmt(gpu.memory_clock_mhz, ' MHz')}",
                      "; ".join(processes) or "none"]
            self._fit_table_height()
            for column, text in enumerate(values):
                item = QTableWidgetItem(text)
                item.setToolTip(text)
                if gpu.error is not None:
                    item.setForeground(QBrush(QColor("#d33")))
                self.table.setItem(row, column, item)

    def _fit_table_height(self) -> None:
        """The GPU table as tall as its rows (a GPU a row): the graphs get the rest of the dock."""
        self.table.resizeRowsToContents()
        height = (self.table.horizontalHeader().sizeHint().height() + self.table.verticalHeader().length()
                  + 2 * self.table.frameWidth() + 2)
        if self.table.maximumHeight() != height:
            self.table.setMaximumHeight(height)

    def on_events(self, batch: list[Event]) -> None:
        """A batch fed to the panel's own run state (a panel used on its own; the window's panel is wired to the
        window's session instead): its sampler follows the run's pid, the graphs its markers and figures."""
        changes = self.run_state.apply_all(batch)
        if self.run_state.pid != self.sampler.runtime_pid:
            self.sampler.set_runtime_pid(self.run_state.pid)
        self.show_run_news(changes)

    def show_run_news(self, changes: RunChanges) -> None:
        """What the run state made of a batch: its markers (a runtime's start and exit, a job's start, end and
        error) and TensorFlow's memory figures."""
        for marker in changes.markers:
            self.history.mark(marker.time, marker.kind, marker.label)
        for figures in changes.tf_memory:
            device = figures.device
            self.history.record(figures.time, {f"tf{device}.current_mib": figures.current_mib,
                                               f"tf{device}.peak_mib": figures.peak_mib})
            self._ensure_tf_curves(device)

    def dock_body(self) -> QWidget:
        return self

    def wire(self, link: RuntimeController) -> None:
        link.subscribe(self, RunStateChanged, lambda change: self.show_run_news(change.changes))
        link.subscribe(self, InventoryChanged, lambda change: self.set_inventory(change.value))

    def set_inventory(self, inventory: DeviceInventory) -> None:
        """A ready run's logical GPUs: on which NVML GPU each lives (the inventory matched them by PCI bus id)
        and its memory limit, drawn as a line on that GPU's plot."""
        self.logical_gpus = {gpu.name: gpu for gpu in inventory.logical_gpus}
        for index, lines in self.limit_lines.items():
            for line in lines:
                self.plots[f"gpu{index}"].removeItem(line)
        self.limit_lines = {}
        for logical, info in self.logical_gpus.items():
            gpu_index = info.nvml_index
            if gpu_index is None or f"gpu{gpu_index}" not in self.plots:
                continue
            line = pg.InfiniteLine(pos=info.limit_mib, angle=0, movable=False,
                                   pen=pg.mkPen(device_color(logical), width=1, style=Qt.PenStyle.DashDotLine),
                                   label=f"{logical} limit {info.limit_mib} MiB",
                                   labelOpts={"position": 0.1, "color": device_color(logical)})
            self.plots[f"gpu{gpu_index}"].addItem(line)
            self.limit_lines.setdefault(gpu_index, []).append(line)
        # TensorFlow's figures for a logical GPU that came before it was placed (in the ready run's own batch)
        # get their curves now.
        for logical in self.logical_gpus:
            if f"tf{logical}.current_mib" in self.history.series:
                self._ensure_tf_curves(logical)

    def _ensure_tf_curves(self, device: str) -> None:
        if f"tf{device}.current_mib" in self.curves:
            return
        known = self.logical_gpus.get(device)
        index = known.nvml_index if known is not None else None
        # The CPU's allocator (BFC under cpu_memory_limit_mib) is drawn with the host's memory.
        key = "host" if "CPU" in device else f"gpu{index}"
        plot = self.plots.get(key)
        if plot is None:
            return
        color = device_color(device)
        self._add_curve(key, f"tf{device}.current_mib", f"TF {device} current", f"TensorFlow {device} in use",
                        pg.mkPen(color, width=1, style=Qt.PenStyle.DotLine))
        self._add_curve(key, f"tf{device}.peak_mib", f"TF {device} peak", f"TensorFlow {device} peak",
                        pg.mkPen(color, width=1, style=Qt.PenStyle.DashLine))

    # -- drawing ------------------------------------------------------------------------------------
    def set_paused(self, paused: bool) -> None:
        self.paused = paused
        self.pause_button.setText("Resume" if paused else "Pause")
        if not paused:
            self.redraw()

    def window_seconds(self) -> float | None:
        return self.window_choice.currentData()

    def redraw(self) -> None:
        if self.paused or not self.plots:
            return
        now = time.time()
        seconds = self.window_seconds()
        since = None if seconds is None else now - seconds
        data = self.history.snapshot(since, self.curves)
        first_sample = min((t[0] for t, _ in data.values() if len(t)), default=now)
        first_sample = min([first_sample, *(m.time for m in self.history.markers_since(since))])
        # The window starts at the first sample (or marker): a fresh window is not mostly empty. It spans at
        # least a minute, which fills from the left as samples come (the time axis then reads in seconds).
        start = max(since if since is not None else first_sample, first_sample)
        end = max(now, start + MIN_SPAN_S)
        first = next(iter(self.plots.values()))
        pixels = max(int(first.getViewBox().width()), 100)
        # The graphs scroll by whole pixels: the window's ends lie on a grid of a round number of seconds at
        # least a pixel wide. A redraw that would move the window by less (an hour's graph moves 0.13 px per
        # half-second sample) leaves the range, the time axis and the markers as they are and hands the curves
        # their new samples only.
        grid = nice_ceiling((end - start) / pixels)
        start, end = math.floor(start / grid) * grid, math.ceil(end / grid) * grid
        # Series sampled together (every NVML and host figure of a tick) share their times: they are thinned
        # together, as the rows of one array, to a min/max pair per two pixels (as many points as the plot has
        # pixels, peaks kept).
        together: dict[tuple[Any, ...], list[str]] = {}
        for name in self.curves:
            times, _ = data.get(name, (np.empty(0), np.empty(0)))
            drawn = (len(times), times[-1] if len(times) else None, times[0] if len(times) else None, pixels)
            if self._drawn.get(name) == drawn:
                continue  # nothing new for this curve: handing pyqtgraph the same data costs a repaint
            self._drawn[name] = drawn
            together.setdefault(drawn[:3], []).append(name)
        pixel_sizes = {key: self._pixel_size(plot) for key, plot in self.plots.items()} if together else {}
        for names in together.values():
            times, _ = data.get(names[0], (np.empty(0), np.empty(0)))
            columns = columns_for(times, start, end, pixels // 2)
            rows = np.stack([data[name][1] for name in names]) if len(times) else np.empty((len(names), 0))
            shown_times, shown_rows = columns.apply_rows(times, rows)
            for name, shown_values in zip(names, shown_rows, strict=True):
                self.curves[name].set_points(shown_times, shown_values, pixel_sizes[self.curve_plots[name]])
        headroom = self._label_headroom()
        for key, plot in self.plots.items():
            if key == "cpu":
                continue
            ceiling = self._ceiling(key)
            if ceiling:
                # GPUs: their total memory. Host: a round number above the highest value. Either way the
                # scale stays put while values move.
                top = ceiling * 1.05 if key != "host" else nice_ceiling(ceiling * 1.1)
                if plot is first:
                    top *= headroom  # the marker labels' rows, above every curve
                if self._y_ranges.get(key) != top:
                    self._y_ranges[key] = top
                    plot.setYRange(0, top, padding=0)
        if (start, end) != self._x_range:
            self._x_range = (start, end)
            first.setXRange(start, end, padding=0)
        self._draw_markers(start, end)
        self.redraws += 1

    def _label_row_height(self) -> int:
        return QFontMetrics(self.font()).height() + 4

    def _label_rows(self) -> int:
        """How many rows of marker labels the top plot keeps above its curves: none on a plot too short to
        spare them (its markers are then lines only, named by the read-out and the tooltip on hover)."""
        first = next(iter(self.plots.values()), None)
        if first is None:
            return 0
        height = first.getViewBox().height()
        row = self._label_row_height()
        # the curves keep at least 3 rows' height below the labels
        return max(0, min(LABEL_ROWS, int(height // row) - 3))

    def _label_headroom(self) -> float:
        """The factor on the top plot's scale that leaves its label rows clear of the curves."""
        first = next(iter(self.plots.values()), None)
        rows = self._label_rows()
        if first is None or not rows:
            return 1.0
        height = first.getViewBox().height()
        return height / (height - rows * self._label_row_height())

    def _ceiling(self, key: str) -> float:
        """The highest value drawn on a plot (from the decimated curves, which keep every peak)."""
        if key == "host":
            names = ["host.ram_used_mib", "host.runtime_rss_mib"]
        else:
            names = [n for n in self.curves if n.startswith(f"{key}.")]
            on_this_gpu = {name for name, gpu in self.logical_gpus.items() if gpu.nvml_index == int(key[3:])}
            names += [n for n in self.curves if n.startswith("tf/") and n[2:].split(".")[0] in on_this_gpu]
        highest = 0.0
        for name in names:
            if not math.isnan(self.curves[name].highest):
                highest = max(highest, self.curves[name].highest)
        return highest

    @staticmethod
    def _pixel_size(plot: pg.PlotItem) -> tuple[float, float]:
        """One pixel of `plot` in its data units (x, y), as it is drawn now."""
        view = plot.getViewBox()
        (left, right), (bottom, top) = view.viewRange()
        width, height = view.width(), view.height()
        return ((right - left) / width if width > 0 else 0.0, (top - bottom) / height if height > 0 else 0.0)

    def _draw_markers(self, start: float, end: float) -> None:
        markers = self.history.markers_since(start)
        self._drawn_markers = markers
        view = next(iter(self.plots.values())).getViewBox()
        drawn = (start, end, len(markers), markers[-1].time if markers else None, view.width(), view.height(),
                 tuple(self._y_ranges.items()))
        if drawn == self._markers_drawn:
            return  # the same markers in the same window: their lines and labels stand
        self._markers_drawn = drawn
        marks = [(np.array([m.time for m in markers if m.kind == kind], dtype=float),
                  faint(QColor(color), 0.45).rgba()) for kind, color in MARKER_COLORS.items()]
        marks = [(times, color) for times, color in marks if len(times)]
        images = MarkerImages(marks, QColor(palette_colors()[0]).rgba(), start, end) if marks and end > start else None
        for key, plot in self.plots.items():
            lines = self._marker_lines.get(key)
            if lines is None:
                if images is None:
                    continue
                lines = self._marker_lines[key] = MarkerLines()
                plot.addItem(lines, ignoreBounds=True)
            (_, _), (bottom, top) = plot.viewRange()
            lines.set_images(images, QRectF(start, bottom, end - start, top - bottom))
        self._layout_labels(markers, start, end)

    def _layout_labels(self, markers: list[Marker], start: float, end: float) -> None:
        first = next(iter(self.plots.values()), None)
        if first is None:
            return
        view = first.getViewBox()
        width, height = view.width(), view.height()
        (_, _), (bottom, top) = first.viewRange()
        metrics = QFontMetrics(self.font())
        row_height = self._label_row_height()
        rows = self._label_rows()
        if self._label_widths_font != self.font().key():
            self._label_widths_font = self.font().key()
            self._label_widths.clear()
        widths = self._label_widths

        def text_width(text: str) -> float:  # a few distinct labels, measured once each (400 markers: 1.5 ms)
            width = widths.get(text)
            if width is None:
                width = widths[text] = metrics.horizontalAdvance(text)
            return width

        labels = (layout_marker_labels(markers, start, end, width, min(rows, label_rows(height, row_height)),
                                       text_width) if rows else [])
        for number, label in enumerate(labels):
            if number == len(self._marker_texts):
                text_item = pg.TextItem(fill=pg.mkBrush(_label_background()))
                first.addItem(text_item, ignoreBounds=True)
                self._marker_texts.append(text_item)
            item = self._marker_texts[number]
            if item.toPlainText() != label.text:  # setting the same text again re-lays out its HTML
                item.setText(label.text, color=MARKER_COLORS.get(label.marker.kind, "#888"))
            anchor = (0, 0.5) if label.right_of_line else (1, 0.5)
            if tuple(item.anchor) != anchor:  # each setAnchor moves the text again
                item.setAnchor(anchor)
            y = top - (label.row + 0.5) * row_height * (top - bottom) / height if height > 0 else top
            item.setPos(label.marker.time, y)
            item.setVisible(True)
        for item in self._marker_texts[len(labels):]:
            item.setVisible(False)
        self._shown_labels = [label.text for label in labels]

    def visible_marker_labels(self) -> list[str]:
        """The marker labels a person can read now, in time order ("matmul ok +3" stands for a crowd)."""
        return list(self._shown_labels)

    def markers_near(self, t: float, seconds: float) -> list[str]:
        return [m.label for m in self.history.markers_since(t - seconds) if abs(m.time - t) <= seconds]

    def marker_labels(self) -> list[str]:
        """The labels of every marker drawn in the visible window."""
        return [m.label for m in self._drawn_markers]

    # -- crosshair ----------------------------------------------------------------------------------
    def _on_mouse(self, position: Any) -> None:
        for plot in self.plots.values():
            if plot.sceneBoundingRect().contains(position):
                t = plot.getViewBox().mapSceneToView(position).x()
                self.read_at(t)
                return

    def read_at(self, t: float) -> str:
        """The values at time `t`, by their human names; a series with no sample near `t` says nothing."""
        for line in self.crosshairs:
            line.setPos(t)
            line.setVisible(True)
        first = next(iter(self.plots.values()), None)
        seconds_per_px = 0.0
        if first is not None and first.getViewBox().width() > 0:
            (x0, x1), _ = first.viewRange()
            seconds_per_px = (x1 - x0) / first.getViewBox().width()
        tolerance = max(1.5 * self.sampler.interval, 3 * seconds_per_px)
        data = self.history.snapshot(t - tolerance, self.curves)
        parts = []
        for name, (times, values) in sorted(data.items(), key=lambda item: self.curve_names.get(item[0], item[0])):
            near = np.flatnonzero(np.abs(times - t) <= tolerance)
            if not len(near):
                continue
            nearest = near[np.argmin(np.abs(times[near] - t))]
            if not np.isnan(values[nearest]):
                unit = " %" if name == "host.cpu_percent" else " MiB"
                parts.append(f"{self.curve_names.get(name, name)} {values[nearest]:.0f}{unit}")
        text = time.strftime("%H:%M:%S", time.localtime(t)) + " — " + (", ".join(parts) or "no samples here")
        near_markers: list[str] = []
        if first is not None and seconds_per_px > 0:  # a crowd of markers shares one label: name them all
            near_markers = self.markers_near(t, MARKER_READ_PX * seconds_per_px)
            if near_markers:
                text += " — " + ", ".join(near_markers)
        self.readout.setText(text)
        # Markers without a label (a short plot, a crowd) are named where the pointer is, too.
        self.graphs.setToolTip("\n".join(near_markers))
        return text

    # -- export --------------------------------------------------------------------------------------
    def export_csv(self, path: str | Path) -> int:
        return self.history.to_csv(path)

    def export_png(self, path: str | Path) -> bool:
        return bool(self.graphs.grab().save(str(path)))

    def _export_csv_dialog(self) -> None:
        path, _ = QFileDialog.getSaveFileName(self, "Export history as CSV", "telemetry.csv", "CSV (*.csv)")
        if path:
            try:
                rows = self.export_csv(path)
            except OSError as exc:
                show_notice(self, "Export CSV", f"Could not write {path}: {exc.strerror}")
                return
            show_notice(self, "Export CSV", f"Wrote {rows} values to {path}.", icon=QMessageBox.Icon.Information)

    def _export_png_dialog(self) -> None:
        path, _ = QFileDialog.getSaveFileName(self, "Export graphs as PNG", "telemetry.png", "PNG (*.png)")
        if path and not self.export_png(path):
            show_notice(self, "Export PNG", f"Could not write {path}.")
