"""The device map: physical devices as boxes, the logical devices TensorFlow made of them inside, each with its
op count and memory while and after a job runs, and an arrow for every soft-placement fallback.

The geometry comes from `gui.device_map_layout` (Qt-free, tested on its own); this module feeds it the
runtime's events and paints what it returns.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Any, cast

from PySide6.QtCore import QPointF, QRectF, QSize, Qt
from PySide6.QtGui import QColor, QFontMetrics, QPainter, QPaintEvent, QPalette, QPen, QPolygonF
from PySide6.QtWidgets import QLabel, QScrollArea, QSizePolicy, QVBoxLayout, QWidget
from tf_device_panel.core import events
from tf_device_panel.core.events import Event
from tf_device_panel.core.placement import canonical_device
from tf_device_panel.core.telemetry import Sample
from tf_device_panel.gui.colors import device_color
from tf_device_panel.gui.device_map_layout import (
    PADDING,
    DeviceMap,
    PhysicalDevice,
    Rect,
    devices_from_ready,
    layout_device_map,
)

FALLBACK_COLOR = "#d97706"


def _rect(rect: Rect) -> QRectF:
    return QRectF(rect.x, rect.y, rect.width, rect.height)


class DeviceMapCanvas(QWidget):
    """Paints a `DeviceMap` laid out for its current width; as tall as the map needs."""

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.devices: list[PhysicalDevice] = []
        self.ops: Counter[str] = Counter()
        self.memory: dict[str, float] = {}
        self.fallbacks: list[tuple[str, str]] = []
        self.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Fixed)
        self.setMouseTracking(True)
        self.room = 0.0  # the height the scroll area shows: the boxes grow into it

    def current_map(self) -> DeviceMap:
        return layout_device_map(self.devices, max(self.width() - 2, 1), ops=self.ops, memory=self.memory,
                                 fallbacks=self.fallbacks, height=max(self.room - 4, 0) or None)

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

    def paintEvent(self, event: QPaintEvent) -> None:
        painter = QPainter(self)
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        painter.translate(1, 1)
        palette = self.palette()
        text = palette.color(QPalette.ColorRole.Text)
        metrics = QFontMetrics(self.font())
        device_map = self.current_map()
        for box in device_map.boxes:
            frame = _rect(box.rect)
            pen = QPen(palette.color(QPalette.ColorRole.Mid), 1.5)
            if box.missing or box.hidden:
                pen.setStyle(Qt.PenStyle.DashLine)
            painter.setPen(pen)
            painter.setBrush(palette.color(QPalette.ColorRole.Base))
            painter.drawRoundedRect(frame, 6, 6)
            painter.setPen(palette.color(QPalette.ColorRole.PlaceholderText) if box.hidden else text)
            title_font = painter.font()
            title_font.setBold(True)
            painter.setFont(title_font)
            title_rect = QRectF(frame.x() + PADDING, frame.y() + PADDING, frame.width() - 2 * PADDING, 18)
            painter.drawText(title_rect, Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter,
                             QFontMetrics(title_font).elidedText(box.title, Qt.TextElideMode.ElideRight,
                                                                 int(title_rect.width())))
            title_font.setBold(False)
            painter.setFont(title_font)
            if box.unassigned is not None:
                painter.setPen(QPen(palette.color(QPalette.ColorRole.Mid), 1, Qt.PenStyle.DotLine))
                painter.setBrush(Qt.BrushStyle.NoBrush)
                free = _rect(box.unassigned)
                painter.drawRect(free)
                painter.setPen(palette.color(QPalette.ColorRole.PlaceholderText))
                painter.drawText(free, Qt.AlignmentFlag.AlignCenter,
                                 metrics.elidedText("not given", Qt.TextElideMode.ElideRight, int(free.width())))
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
                y = area.y() + 3
                for number, line in enumerate(segment.lines):
                    if y + metrics.height() > area.bottom() + 1:
                        break
                    font = painter.font()
                    font.setBold(number == 0)
                    painter.setFont(font)
                    shown = QFontMetrics(font).elidedText(line, Qt.TextElideMode.ElideRight, int(area.width()) - 6)
                    painter.drawText(QRectF(area.x() + 3, y, area.width() - 6, metrics.height()),
                                     Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter, shown)
                    y += metrics.height()
                font = painter.font()
                font.setBold(False)
                painter.setFont(font)
        for arrow in device_map.arrows:
            self._paint_arrow(painter, [QPointF(*point) for point in arrow.points])

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

    def event(self, event: Any) -> bool:
        if event.type() == event.Type.ToolTip:
            position = event.pos()
            for box in self.current_map().boxes:
                for segment in box.segments:
                    if _rect(segment.rect).contains(QPointF(position)):
                        self.setToolTip(f"{segment.full_name}\n" + "\n".join(segment.lines[1:]))
                        return super().event(event)
            self.setToolTip("")
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

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self._tf_index_of: dict[int, int] = {}  # NVML index -> TensorFlow's physical index
        self.canvas = DeviceMapCanvas()
        self.note = QLabel("The devices appear here once the TensorFlow runtime is ready.")
        self.note.setWordWrap(True)
        self.note.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        scroll = _RoomReportingScrollArea(self.canvas)
        scroll.setWidgetResizable(True)
        scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        scroll.setFrameShape(QScrollArea.Shape.NoFrame)
        scroll.setWidget(self.canvas)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.addWidget(self.note)
        layout.addWidget(scroll, 1)

    def set_devices(self, info: dict[str, Any], config: dict[str, Any] | None,
                    nvml: dict[int, dict[str, Any]]) -> None:
        """A ready runtime's devices: `config` the applied profile's JSON (else the one the report carries),
        `nvml` NVML's record of each of TensorFlow's physical GPUs by TF's index (matched by bus id)."""
        self._tf_index_of = {record["index"]: tf_index for tf_index, record in nvml.items() if "index" in record}
        totals = {tf_index: record.get("memory_total_mib") for tf_index, record in nvml.items()}
        self.canvas.devices = devices_from_ready(info, info.get("config") or config, totals)
        self.canvas.ops.clear()
        self.canvas.memory.clear()
        self.canvas.fallbacks.clear()
        self.note.setText("Each box is a physical device; inside it, the logical devices TensorFlow made of it "
                          "(GPUs sized by their memory limits). A job's op counts and memory appear as it runs.")
        self.canvas.refresh()

    def on_events(self, batch: list[Event]) -> None:
        changed = False
        for event in batch:
            data = event.data
            if event.type == events.JOB_STARTED:
                self.canvas.ops.clear()
                self.canvas.fallbacks.clear()
                changed = True
            elif event.type == events.PLACEMENT:
                self.canvas.ops[str(data.get("short_device", ""))] += 1
                changed = True
            elif event.type == events.FALLBACK:
                fallback = cast(events.FallbackData, data)
                pair = (canonical_device(fallback.get("requested_short") or fallback["requested"]),
                        fallback["actual_short"])
                if pair not in self.canvas.fallbacks:
                    self.canvas.fallbacks.append(pair)
                changed = True
            elif event.type == events.TF_MEMORY:
                figures = cast(events.TfMemoryData, data)
                self.canvas.memory[figures["device"]] = figures["current_mib"]
                changed = True
        if changed:
            self.canvas.refresh()

    def on_sample(self, sample: Sample) -> None:
        """Live memory of each physical device: NVML's used memory per GPU, the runtime's resident memory."""
        for gpu in sample.gpus:
            tf_index = self._tf_index_of.get(gpu.index)
            if gpu.memory_used_mib is not None and tf_index is not None:
                self.canvas.memory[f"GPU {tf_index}"] = gpu.memory_used_mib
        if sample.host.runtime_rss_mib:  # 0: the run's process has exited and awaits its parent (a zombie)
            self.canvas.memory["CPU"] = sample.host.runtime_rss_mib
        if self.canvas.devices:
            self.canvas.update()
