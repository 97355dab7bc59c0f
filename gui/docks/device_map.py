"""The device map: physical devices as boxes, the logical devices TensorFlow made of them inside, each with its
op count and memory while and after a job runs, and an arrow for every soft-placement fallback.

The geometry comes from `gui.device_map_layout` (Qt-free, tested on its own); this module feeds it the
runtime's events and paints what it returns.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import QPointF, QRectF, QSize, Qt
from PySide6.QtGui import QBrush, QColor, QFont, QFontMetricsF, QPainter, QPaintEvent, QPalette, QPen, QPolygonF
from PySide6.QtWidgets import QLabel, QScrollArea, QSizePolicy, QVBoxLayout, QWidget
from tf_device_panel.core.client.run_state import RunChanges, RunState
from tf_device_panel.core.client.session import InventoryChanged, RunStateChanged, SelectedJobChanged
from tf_device_panel.core.devices.inventory import DeviceInventory
from tf_device_panel.core.devices.telemetry import Sample
from tf_device_panel.core.hub import Subscription
from tf_device_panel.core.protocol import events
from tf_device_panel.core.protocol.events import Event
from tf_device_panel.core.units import mib_text
from tf_device_panel.gui.docks import BOTTOM, DockSpec
from tf_device_panel.gui.views.device_map_layout import (
    BREAK_MARK,
    PADDING,
    TEXT_PAD,
    TITLE_HEIGHT,
    Box,
    DeviceMap,
    GpuUse,
    PhysicalDevice,
    Rect,
    UsageBar,
    devices_from_ready,
    fold_task_placements,
    layout_device_map,
)
from tf_device_panel.gui.widgets.colors import device_color
from tf_device_panel.gui.widgets.worker import to_gui_thread

if TYPE_CHECKING:
    from tf_device_panel.gui.shell.controller import RuntimeController

FALLBACK_COLOR = "#d97706"
RUN_COLOR = "#8fa3bf"      # what the run's process holds: a neutral slate, unlike any device's colour


def _rect(rect: Rect) -> QRectF:
    return QRectF(rect.x, rect.y, rect.width, rect.height)


class DeviceMapCanvas(QWidget):
    """Paints a `DeviceMap` laid out for its current width and font; as tall as the map needs."""

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.devices: list[PhysicalDevice] = []
        self.ops: Counter[str] = Counter()
        self.ops_by_task: dict[str, Counter[str]] = {}  # a cluster's: of each device's ops, each task's
        self.memory: dict[str, float] = {}
        self.use: dict[int, GpuUse] = {}  # NVML's reading per physical GPU, by TensorFlow's index
        self.fallbacks: list[tuple[str, str]] = []
        self.painted: list[tuple[str, QRectF, bool]] = []  # (text, its rectangle, bold) of the last paint
        self.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Fixed)
        self.setMouseTracking(True)
        self.room = 0.0  # the height the scroll area shows: the boxes grow into it

    def metrics(self, bold: bool = False) -> QFontMetricsF:
        font = QFont(self.font())
        font.setBold(bold)
        return QFontMetricsF(font)

    def line_height(self) -> float:
        return math.ceil(self.metrics().height()) + 1

    def current_map(self) -> DeviceMap:
        normal, bold = self.metrics(), self.metrics(bold=True)

        def measure(text: str, is_bold: bool) -> float:
            return math.ceil((bold if is_bold else normal).horizontalAdvance(text)) + 1

        return layout_device_map(self.devices, max(self.width() - 2, 1), ops=self.ops, memory=self.memory,
                                 use=self.use, fallbacks=self.fallbacks, height=max(self.room - 4, 0) or None,
                                 measure=measure, line_height=self.line_height(), ops_by_task=self.ops_by_task)

    def refresh(self) -> None:
        self.setFixedHeight(math.ceil(self.current_map().height) + 4)
        self.update()

    def set_room(self, height: float) -> None:
        if height != self.room:
            self.room = height
            self.refresh()

    def sizeHint(self) -> QSize:
        return QSize(600, self.height())

    def resizeEvent(self, event: Any) -> None:
        super().resizeEvent(event)
        height = math.ceil(self.current_map().height) + 4
        if height != self.height():
            self.setFixedHeight(height)

    def _text(self, painter: QPainter, rect: QRectF, text: str, bold: bool,
              align: Qt.AlignmentFlag = Qt.AlignmentFlag.AlignLeft) -> None:
        """One line, elided only if the layout could not make room (then the tooltip has it whole)."""
        font = QFont(self.font())
        font.setBold(bold)
        painter.setFont(font)
        shown = QFontMetricsF(font).elidedText(text, Qt.TextElideMode.ElideRight, rect.width())
        painter.drawText(rect, align | Qt.AlignmentFlag.AlignVCenter, shown)
        self.painted.append((shown, QRectF(rect), bold))

    def _lines(self, painter: QPainter, area: QRectF, lines: list[str], *, centred: bool = False) -> None:
        height = self.line_height()
        block = height * len(lines)
        y = area.y() + (max((area.height() - block) / 2, TEXT_PAD) if centred else TEXT_PAD)
        align = Qt.AlignmentFlag.AlignHCenter if centred else Qt.AlignmentFlag.AlignLeft
        for number, line in enumerate(lines):
            if y + height > area.bottom() + 1:
                break
            self._text(painter, QRectF(area.x() + TEXT_PAD, y, area.width() - 2 * TEXT_PAD, height), line,
                       number == 0, align)
            y += height

    def paintEvent(self, event: QPaintEvent) -> None:
        painter = QPainter(self)
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        painter.translate(1, 1)
        self.painted = []
        palette = self.palette()
        text = palette.color(QPalette.ColorRole.Text)
        faint = palette.color(QPalette.ColorRole.PlaceholderText)
        mid = palette.color(QPalette.ColorRole.Mid)
        device_map = self.current_map()
        for box in device_map.boxes:
            frame = _rect(box.rect)
            pen = QPen(mid, 1.5)
            if box.missing or box.hidden:
                pen.setStyle(Qt.PenStyle.DashLine)
            painter.setPen(pen)
            painter.setBrush(palette.color(QPalette.ColorRole.Base))
            painter.drawRoundedRect(frame, 6, 6)
            painter.setPen(faint if box.hidden else text)
            self._text(painter, QRectF(frame.x() + PADDING, frame.y() + PADDING, frame.width() - 2 * PADDING,
                                       TITLE_HEIGHT - 2), box.title, True)
            if box.usage is not None:
                self._paint_usage(painter, box.usage, text, mid)
            if box.unassigned is not None:
                self._paint_gap(painter, box, faint, mid)
            for segment in box.segments:
                area = _rect(segment.rect).adjusted(1, 1, -1, -1)
                color = QColor(FALLBACK_COLOR) if segment.missing else device_color(segment.device)
                fill = QColor(color)
                fill.setAlpha(60 if segment.missing else 150)
                painter.setBrush(fill)
                outline = QPen(color.darker(130), 1.5)
                if segment.missing or box.growth:
                    outline.setStyle(Qt.PenStyle.DashLine)  # growth: the device's size is not fixed
                painter.setPen(outline)
                painter.drawRoundedRect(area, 4, 4)
                painter.setPen(text)
                self._lines(painter, area, segment.lines)
        for arrow in device_map.arrows:
            self._paint_arrow(painter, [QPointF(*point) for point in arrow.points])

    def _paint_usage(self, painter: QPainter, usage: UsageBar, text: QColor, mid: QColor) -> None:
        bar = _rect(usage.rect)
        painter.setPen(QPen(mid, 1))
        painter.setBrush(Qt.BrushStyle.NoBrush)
        painter.drawRect(bar)
        if usage.run_width:
            painter.fillRect(QRectF(bar.x(), bar.y(), usage.run_width, bar.height()), QColor(RUN_COLOR))
        if usage.others_width:
            painter.fillRect(QRectF(bar.x() + usage.run_width, bar.y(), usage.others_width, bar.height()),
                             QBrush(mid, Qt.BrushStyle.BDiagPattern))
        painter.setPen(text)
        self._text(painter, bar.adjusted(TEXT_PAD, 0, -TEXT_PAD, 0), usage.label, False)

    def _paint_gap(self, painter: QPainter, box: Box, faint: QColor, mid: QColor) -> None:
        assert box.unassigned is not None
        gap = box.unassigned
        free = _rect(gap.rect).adjusted(1, 1, -1, -1)
        painter.setPen(QPen(mid, 1, Qt.PenStyle.DotLine))
        painter.setBrush(QBrush(mid, Qt.BrushStyle.BDiagPattern) if box.hidden else Qt.BrushStyle.NoBrush)
        painter.drawRect(free)
        if gap.compressed:  # a break mark, as on a chart's cut axis: this part is drawn shorter than it is
            painter.setPen(QPen(mid, 1.5))
            for offset in (5.0, 10.0):
                x = free.x() + offset
                painter.drawLine(QPointF(x - 3, free.bottom() - 2), QPointF(x + 3, free.top() + 2))
        painter.setPen(faint)
        self._lines(painter, free.adjusted(BREAK_MARK if gap.compressed else 0, 0, 0, 0), gap.lines, centred=True)

    @staticmethod
    def _paint_arrow(painter: QPainter, points: list[QPointF]) -> None:
        color = QColor(FALLBACK_COLOR)
        painter.setPen(QPen(color, 3))
        painter.setBrush(Qt.BrushStyle.NoBrush)
        painter.drawPolyline(QPolygonF(points))
        start, end = points[-2], points[-1]
        angle = math.atan2(end.y() - start.y(), end.x() - start.x())
        head = [end, end - QPointF(math.cos(angle - 0.4) * 14, math.sin(angle - 0.4) * 14),
                end - QPointF(math.cos(angle + 0.4) * 14, math.sin(angle + 0.4) * 14)]
        painter.setBrush(color)
        painter.drawPolygon(QPolygonF(head))

    def tooltip_at(self, position: QPointF) -> str:
        """The whole story of what is under the pointer, with exact figures (the map rounds to GiB)."""
        position = position - QPointF(1, 1)  # the painter's offset
        for box, device in zip(self.current_map().boxes, [*self.devices, None], strict=False):
            for segment in box.segments:
                if _rect(segment.rect).contains(position):
                    return f"{segment.full_name}\n" + "\n".join(segment.lines[1:])
            if device is None or device.kind != "GPU":
                continue
            total = f" of {mib_text(device.total_mib, 0)}" if device.total_mib else ""
            if box.usage is not None and _rect(box.usage.rect).contains(position):
                reading = self.use.get(device.index)
                if reading is None or reading.run_mib is None:
                    return f"{box.usage.label}\n(NVML's per-process memory of this run's process)"
                held = "held at its last reading, before its process exited" if reading.run_ended else "holds"
                others = f"\nother processes: {mib_text(reading.others_mib, 0)}" if reading.others_mib else ""
                return (f"this run's process {held} {mib_text(reading.run_mib, 0)}{total} (NVML){others}\n"
                        f"{device.mode}")
            if box.unassigned is not None and _rect(box.unassigned.rect).contains(position):
                if box.hidden:
                    return "\n".join(box.unassigned.lines)
                limits = sum(d.memory_limit_mib or 0 for d in device.logical)
                rest = (device.total_mib or 0) - limits
                note = ("\nDrawn narrower than its share so that every logical GPU's figures can be read."
                        if box.unassigned.compressed else "")
                return (f"{mib_text(rest, 0)}{total} not given to any logical GPU (limits: {mib_text(limits, 0)}; "
                        f"NVML counts memory the driver keeps, which CUDA does not offer){note}")
        return ""

    def event(self, event: Any) -> bool:
        if event.type() == event.Type.ToolTip:
            self.setToolTip(self.tooltip_at(QPointF(event.pos())))
        return super().event(event)


class _RoomReportingScrollArea(QScrollArea):
    """Tells the canvas how tall its view is, so a map with few boxes fills it instead of leaving it empty."""

    def __init__(self, canvas: DeviceMapCanvas):
        super().__init__()
        self._canvas = canvas

    def resizeEvent(self, event: Any) -> None:
        super().resizeEvent(event)
        self._canvas.set_room(self.viewport().height())


class DeviceMapPanel(QWidget):
    """The map in a vertical scroll area: the window gives it a ready runtime's devices; the runtime's events
    and the telemetry samples then fill in op counts and memory."""

    DOCK = DockSpec("map", "Device map", BOTTOM, tab_with="log", raised=True)

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self._tf_index_of: dict[int, int] = {}  # NVML index -> TensorFlow's physical index
        self._reported_by: int | None = None  # the pid of the process whose ready report the map draws
        self.run_state = RunState()  # fed only when the map is used on its own (the window passes its own)
        self._samples: Subscription | None = None  # the telemetry sampler's, once wired
        self.canvas = DeviceMapCanvas()
        self.note = QLabel("The devices appear here once the TensorFlow runtime is ready.")
        self.note.setWordWrap(True)
        self.note.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        scroll = _RoomReportingScrollArea(self.canvas)
        scroll.setWidgetResizable(True)
        scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        scroll.setFrameShape(QScrollArea.Shape.NoFrame)
        scroll.setWidget(self.canvas)
        # Whose ops and memory the boxes show: the last run's, named, and said when another job is selected.
        self.whose = QLabel()
        self.whose.setObjectName("device-map-whose")
        self.whose.setWordWrap(True)
        self.whose.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.whose.hide()
        self._shown_job = ""
        self._shown_job_ended = False
        self._selected_job = ""
        self._presenting = False
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.addWidget(self.note)
        layout.addWidget(self.whose)
        layout.addWidget(scroll, 1)

    def set_presenting(self, on: bool) -> None:
        """Presentation mode: the explanation line is the presenter's to say (its two large lines cut the
        boxes' op counts at 1280×720); back again when it ends."""
        self.note.setVisible(not on)
        self._presenting = on
        self._say_whose()

    def least_height(self) -> int:
        """The height that shows every box whole: the canvas (in the font drawn), the note if shown, margins."""
        layout = self.layout()
        margins = layout.contentsMargins() if layout is not None else None
        spacing = layout.spacing() if layout is not None else 6
        note = sum(label.heightForWidth(max(self.width(), 200)) + spacing for label in (self.note, self.whose)
                   if label.isVisibleTo(self))
        return self.canvas.height() + note + (margins.top() + margins.bottom() if margins is not None else 8) + 2

    def set_devices(self, ready: events.Ready, config: dict[str, Any] | None, inventory: DeviceInventory) -> None:
        """A ready runtime's devices: `config` the applied profile's JSON (else the one the report carries),
        `inventory` its GPUs matched to NVML's (by bus id), for each GPU's memory and NVML index. The report's
        pid is the run's process, whose NVML per-process memory each GPU's bar then shows."""
        self._tf_index_of = {gpu.nvml_index: gpu.tf_index for gpu in inventory.gpus if gpu.nvml_index is not None}
        self._reported_by = ready.pid
        self.canvas.devices = devices_from_ready(ready, ready.config or config, inventory.totals_by_tf_index())
        self.canvas.ops.clear()
        self.canvas.ops_by_task = {}
        self._shown_job = ""
        self._say_whose()
        self.canvas.memory.clear()
        self.canvas.use.clear()
        self.canvas.fallbacks.clear()
        self.note.setText("Physical devices as boxes, the logical devices TensorFlow made of them inside, with a "
                          "job's op counts; a GPU's bar: what this run's process holds there (NVML). Hover for "
                          "exact figures.")
        self.canvas.refresh()

    def on_events(self, batch: list[Event]) -> None:
        """A batch fed to the map's own run state (a map used on its own; the window's map is wired to the
        window's session instead)."""
        self.show_run_news(self.run_state.apply_all(batch), self.run_state)

    def show_run_news(self, changes: RunChanges, state: RunState, *, redraw: bool = False) -> None:
        """Op counts, fallbacks and TensorFlow's memory as the run state has them; `redraw`: even when the batch
        changed none (a ready report's new devices start empty, the state keeps what the run placed)."""
        finished = [e for e in changes.finished if e.rss_mib]
        if finished:
            # The job's own figure as it ended: the CPU box says the run's resident memory after every job,
            # not only after one long enough for a sample to have read it while it ran.
            self.canvas.memory["CPU"] = float(finished[-1].rss_mib or 0)
        if changes.device_changes or redraw:
            self.show_run(state)
        elif finished:
            self.canvas.refresh()

    # -- wired to the session --------------------------------------------------------------------------
    def dock_body(self) -> QWidget:
        return self

    def select_job(self, job: str) -> None:
        """The job selected in the Runs panel: the map says when its boxes show another job's run."""
        self._selected_job = job
        self._say_whose()

    def _say_whose(self) -> None:
        job, ops = self._shown_job, sum(self.canvas.ops.values())
        if not job or not self.canvas.devices:
            self.whose.hide()
            return
        tasks = sorted({task for counts in self.canvas.ops_by_task.values() for task in counts})
        text = f"Ops placed by {job}" + (f" (its tasks {', '.join(tasks)}, each in a process of its own)" if tasks
                                         else "") + ("" if self._shown_job_ended else ", so far")
        if self._shown_job_ended and not ops:
            text = (f"{job} placed no ops in the runtime's process: its work ran in processes of its own, or "
                    "placement logging was off")
        other = bool(self._selected_job) and self._selected_job != job
        if other:
            text += f". {self._selected_job} has not run since: these are {job}'s."
        self.whose.setText(text)
        # Only when it tells more than the selected job's counts do (another job's, a cluster's tasks, none placed
        # here): the room is the boxes' (at 1024×768 a line more made the map scroll). In presentation mode, where
        # the presenter says the rest, only when the boxes show another job's run.
        self.whose.setVisible(other or (not self._presenting and (bool(tasks) or (self._shown_job_ended and not ops))))

    def wire(self, link: RuntimeController) -> None:
        self._link = link
        link.subscribe(self, SelectedJobChanged, lambda change: self.select_job(str(change.value or "")))
        link.subscribe(self, InventoryChanged, self._inventory)
        link.subscribe(self, RunStateChanged,
                       lambda change: self.show_run_news(change.changes, change.value, redraw=True))
        if link.session.sampler is not None:  # samples come on the sampler's thread
            self._samples = link.session.sampler.hub.subscribe(self, Sample, to_gui_thread(self.on_sample, self))

    def shut_down(self) -> None:
        """The window is closing: no sample is queued for it any more."""
        if self._samples is not None:
            self._samples()
            self._samples = None

    def _inventory(self, change: InventoryChanged) -> None:
        if change.ready is not None:
            applied = self._link.session.applied
            self.set_devices(change.ready, applied.to_json() if applied else None, change.value)

    def show_run(self, state: RunState) -> None:
        self.canvas.ops, self.canvas.ops_by_task = fold_task_placements(state.ops_per_device)
        self._shown_job = state.job
        self._shown_job_ended = state.job != "" and not state.job_in_flight
        self._say_whose()
        self.canvas.fallbacks = list(state.fallback_pairs)
        host = {name: mib for name, mib in self.canvas.memory.items() if name == "CPU"}  # from the samples
        self.canvas.memory = {**host, **{device: figures.current_mib for device, figures in state.tf_memory.items()}}
        self.canvas.refresh()

    def on_sample(self, sample: Sample) -> None:
        """Live memory of each physical device: on a GPU what the run's process holds (NVML's per-process
        memory) and all processes; on the host the runtime's resident memory. Once the run's process has
        exited, its last reading stays, marked as such: the picture after a job is what the job had."""
        live = self._reported_by is not None and sample.runtime_pid == self._reported_by
        for gpu in sample.gpus:
            tf_index = self._tf_index_of.get(gpu.index)
            if tf_index is None or self._reported_by is None:
                continue
            last = self.canvas.use.get(tf_index, GpuUse())
            if not live:
                self.canvas.use[tf_index] = GpuUse(last.run_mib, last.others_mib, run_ended=True)
                continue
            held = sample.held_on(gpu)  # the sample's figure for its run's process, as the graphs draw it
            self.canvas.use[tf_index] = GpuUse(None) if held is None else GpuUse(held.run_mib, held.others_mib)
        # The run's own process only (0: it has exited and awaits its parent, a zombie); after it, its figure at
        # the job's end (JobFinished) stays, as the GPU bars keep theirs.
        if live and sample.host.runtime_rss_mib:
            self.canvas.memory["CPU"] = sample.host.runtime_rss_mib
        if self.canvas.devices:
            self.canvas.update()
