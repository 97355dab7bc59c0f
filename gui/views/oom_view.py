"""An out-of-memory error explained, drawn: the device's memory as the allocator held it when it failed.

Fed one run's `oom` (core.oom.explain: a plain dict, from the run's outcome or record). The bar is the
allocator's chunks in address order, to scale: in use, free, not yet taken from the device; the largest free
block is outlined, and under it the failed request is drawn at the same scale, so "it did not fit anywhere"
and "it would fit in all, but not in one piece" read at a glance. The figures and what to try are the same
lines the command line prints. Self-contained: the window only calls `set_oom`.
"""

from __future__ import annotations

import html
import math

from PySide6.QtCore import QEvent, QRectF, QSize, Qt
from PySide6.QtGui import QBrush, QColor, QFontMetricsF, QPainter, QPaintEvent, QPen
from PySide6.QtWidgets import QLabel, QSizePolicy, QToolButton, QVBoxLayout, QWidget
from tf_device_panel.core.oom import OomReport, oom_text
from tf_device_panel.core.units import MIB, bytes_text

COLORS = {"in_use": "#d9534f", "mixed": "#c9a04a", "free": "#5cb85c", "unallocated": "#b0bec5"}
WORDS = {"in_use": "in use", "mixed": "in use and free in pieces too small to draw", "free": "free",
         "unallocated": "not yet taken"}
REQUEST_COLOR = "#f0ad4e"
ROW_GAP = 4.0


class OomBar(QWidget):
    """Two rows at one scale: the device's memory (chunks by state, the largest free block outlined), and the
    request that failed."""

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.segments: list[tuple[str, int]] = []
        self.request = 0
        self.largest_free = 0
        self.painted: list[tuple[str, QRectF]] = []  # (what, rectangle) of the last paint, for tests
        self.label_rect = QRectF()  # where the request's label was drawn
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        self.setFixedHeight(math.ceil(2 * self._row() + ROW_GAP) + 2)

    def _row(self) -> float:
        return QFontMetricsF(self.font()).height() + 4

    def changeEvent(self, event: QEvent) -> None:
        super().changeEvent(event)
        if event.type() in (QEvent.Type.FontChange, QEvent.Type.StyleChange):  # the zoom, presentation mode
            self.setFixedHeight(math.ceil(2 * self._row() + ROW_GAP) + 2)

    def sizeHint(self) -> QSize:
        return QSize(300, self.height())

    def set_figures(self, segments: list[tuple[str, int]], request: int, largest_free: int) -> None:
        self.segments = [(state, int(size)) for state, size in segments if size > 0]
        self.request, self.largest_free = int(request), int(largest_free)
        total = sum(size for _, size in self.segments)
        tip = [f"{WORDS.get(state, state)}: {bytes_text(size)}" for state, size in self._totals().items()]
        if total:
            tip.append(f"the request: {bytes_text(self.request)} ({self.request / total:.1%} of the device's memory)")
        self.setToolTip("\n".join(tip))
        self.update()

    def _totals(self) -> dict[str, int]:
        totals: dict[str, int] = {}
        for state, size in self.segments:
            totals[state] = totals.get(state, 0) + size
        return totals

    def paintEvent(self, event: QPaintEvent) -> None:
        self.painted = []
        total = sum(size for _, size in self.segments)
        if total <= 0:
            return
        painter = QPainter(self)
        try:
            width = max(self.width() - 2.0, 1.0)
            row = self._row()
            scale = width / max(total, self.request)
            x = 1.0
            largest_at: QRectF | None = None
            for state, size in self.segments:
                rect = QRectF(x, 1.0, size * scale, row)
                painter.fillRect(rect, QColor(COLORS.get(state, "#888")))
                self.painted.append((state, rect))
                if state in ("free", "unallocated") and size == self.largest_free and largest_at is None:
                    largest_at = rect
                x += size * scale
            if largest_at is not None:
                painter.setPen(QPen(QColor("#222"), 2))
                painter.drawRect(largest_at)
                self.painted.append(("largest_free", largest_at))
            request = QRectF(1.0, row + ROW_GAP, max(self.request * scale, 2.0), row)
            painter.fillRect(request, QBrush(QColor(REQUEST_COLOR), Qt.BrushStyle.BDiagPattern))
            painter.setPen(QPen(QColor(REQUEST_COLOR).darker(140), 1))
            painter.drawRect(request)
            self.painted.append(("request", request))
            painter.setPen(self.palette().color(self.foregroundRole()))
            label = f"request {bytes_text(self.request)}"
            # beside the request where it fits, else inside it from its left end: never cut at the bar's edge
            needed = QFontMetricsF(self.font()).horizontalAdvance(label) + 6
            left = request.right() + 6 if width - request.right() - 6 >= needed else request.left() + 4
            text_rect = QRectF(left, request.top(), max(width - left, needed), row)
            self.label_rect = QRectF(left, request.top(), needed - 6, row)
            painter.drawText(text_rect, int(Qt.AlignmentFlag.AlignVCenter | Qt.AlignmentFlag.AlignLeft), label)
        finally:
            painter.end()


def plain_sentence(oom: OomReport) -> str:
    """The error in a teacher's words, first: what ran out, how much was asked, how much there was, what to do.
    The allocator's own words and figures come after it, folded."""
    device = oom.get("short_device") or oom.get("device") or "the device"
    request, free, largest, limit = (oom.get("request_bytes"), oom.get("free_bytes"), oom.get("largest_free_bytes"),
                                     oom.get("limit_bytes"))
    by = f" ({oom['op']})" if oom.get("op") else ""
    asked = f"the job asked for {bytes_text(request)} more{by}" if request is not None else \
        f"the job asked for more{by}"
    of_limit = f" of its {bytes_text(limit)}" if limit else ""
    verdict = oom.get("verdict")
    if verdict == "shortage" and free is not None and request is not None and request - free < MIB:
        # "asked for 4.00 MiB, 4.00 MiB free" would read as no shortage at all
        had = f"but only {bytes_text(free)}{of_limit} was free, {request - free:,} bytes too few"
    elif verdict == "shortage" and free is not None:
        had = f"but only {bytes_text(free)}{of_limit} was free"
    elif verdict == "fragmentation" and free is not None and largest is not None:
        had = f"and {bytes_text(free)}{of_limit} was free in all, but in pieces: the largest was {bytes_text(largest)}"
    elif free is not None:
        had = f"and {bytes_text(free)}{of_limit} was free when it was read"
    else:
        had = "(the allocator did not print how much was free)"
    tips = oom.get("advice") or []
    todo = f" What to try: {tips[0].split(' — ')[0]}." if tips else ""
    return f"{device} ran out of memory: {asked}, {had}.{todo}"


class OomView(QWidget):
    """The explanation of one OOM: one plain sentence, the bar, and the allocator's figures and every tip folded
    under "Allocator's figures"; hidden without one."""

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.sentence = QLabel()
        self.sentence.setObjectName("oom-sentence")
        self.sentence.setWordWrap(True)
        self.sentence.setStyleSheet("font-weight: bold;")
        self.bar = OomBar()
        self.legend = QLabel()
        self.legend.setWordWrap(True)
        self.toggle = QToolButton()
        self.toggle.setText("Allocator's figures ▸")
        self.toggle.setCheckable(True)
        self.toggle.setToolTip("What the allocator printed: its name, the limit, what was in use and free, the "
                               "largest live allocations, and every tip")
        self.toggle.toggled.connect(self._unfold)
        self.headline = QLabel()  # the allocator's verdict, in its words
        self.headline.setWordWrap(True)
        self.details = QLabel()
        self.details.setWordWrap(True)
        self.details.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.folded = QWidget()
        folded_layout = QVBoxLayout(self.folded)
        folded_layout.setContentsMargins(12, 0, 0, 0)
        folded_layout.addWidget(self.headline)
        folded_layout.addWidget(self.details)
        self.folded.hide()
        for label in (self.sentence, self.headline, self.legend, self.details):
            label.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 4, 0, 4)
        layout.addWidget(self.sentence)
        layout.addWidget(self.bar)
        layout.addWidget(self.legend)
        layout.addWidget(self.toggle, 0, Qt.AlignmentFlag.AlignLeft)
        layout.addWidget(self.folded)
        self.oom: OomReport | None = None
        self.sentence.hide()
        self.hide()

    def _unfold(self, shown: bool) -> None:
        self.toggle.setText("Allocator's figures ▾" if shown else "Allocator's figures ▸")
        self.folded.setVisible(shown)

    def set_oom(self, oom: OomReport | None) -> None:
        self.oom = oom
        self.toggle.setChecked(False)
        self.sentence.setVisible(bool(oom))  # the result view may hold it elsewhere (above the error's text)
        if not oom:
            self.hide()
            return
        lines = oom_text(oom)
        self.sentence.setText(plain_sentence(oom))
        self.headline.setText(f"{lines[0]}. {oom.get('explanation', '')}")
        bar = [(str(segment[0]), int(segment[1])) for segment in oom.get("bar") or []]
        self.bar.set_figures(bar, int(oom.get("request_bytes") or 0), int(oom.get("largest_free_bytes") or 0))
        self.bar.setVisible(bool(bar))
        totals = self.bar._totals()
        self.legend.setText(" ".join(
            f'<span style="color:{COLORS[state]}">■</span> {WORDS[state]} {html.escape(bytes_text(totals[state]))}'
            for state in COLORS if state in totals)
            + (f' <span style="color:{REQUEST_COLOR}">▨</span> request' if bar else "")
            + (" (the largest free block outlined)" if bar and oom.get("largest_free_bytes") else ""))
        self.legend.setVisible(bool(bar))
        self.details.setText("\n".join(line.strip() for line in lines[1:] if line.strip()
                                       and not line.strip().startswith(oom.get("explanation", "\0"))))
        self.show()
