"""The configuration panel's split bar: a GPU's logical-GPU limits against its memory, each with its size and
share written in it, and the memory left over.

Drawn to scale while every piece then has room for its numbers; otherwise (a 2 GiB limit on an 80 GB GPU
is 1/40 of the bar) each piece gets the width its text needs and the rest shares what is left, as on the
device map (`device_map_layout.fit_pieces`). Pieces that cannot share one row wrap onto more.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from PySide6.QtCore import QRectF, QSize, Qt
from PySide6.QtGui import QBrush, QColor, QFont, QFontMetricsF, QPainter, QPaintEvent, QPalette, QPen
from PySide6.QtWidgets import QSizePolicy, QWidget
from tf_device_panel.core.units import short_mib_text
from tf_device_panel.gui.views.device_map_layout import Fit, Piece, fit_pieces, share_text
from tf_device_panel.gui.widgets.colors import device_color

TEXT_PAD = 4.0
OVER_COLOR = "#d33"


@dataclass(frozen=True)
class BarPiece:
    kind: str              # "limit", "rest" (memory left), "over" (the limits exceed the GPU), "unknown"
    value: float           # MiB
    labels: tuple[str, ...]  # longest first
    device: str = ""       # the logical GPU's short name, for its colour


class MemoryBar(QWidget):
    """Logical GPU limits drawn against the physical GPU's total memory, each limit's size and share, and what
    is left, written as numbers."""

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.limits: list[int] = []
        self.total: int | None = None
        self.first_logical = 0
        self.painted: list[tuple[str, QRectF]] = []  # (text, its rectangle) of the last paint, for tests
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        self.setFixedHeight(self._row_height())

    def _row_height(self) -> int:
        return math.ceil(QFontMetricsF(self.font()).height()) + 6

    def sizeHint(self) -> QSize:
        return QSize(200, self.height())

    def set_values(self, limits: list[int], total: int | None, first_logical: int) -> None:
        self.limits, self.total, self.first_logical = limits, total, first_logical
        used = sum(limits)
        if total:
            lines = [f"{used:,} of {total:,} MiB ({share_text(used, total)}) assigned to {len(limits)} logical GPU(s)"]
            lines += [f"/GPU:{first_logical + n}: {limit:,} MiB ({share_text(limit, total)})"
                      for n, limit in enumerate(limits)]
            lines.append(f"left: {max(total - used, 0):,} MiB" if used <= total else
                         f"over by {used - total:,} MiB: TensorFlow refuses limits above the GPU's memory")
            self.setToolTip("\n".join(lines))
        else:
            self.setToolTip("total memory unknown (no NVML reading)")
        self._fit_height()
        self.update()

    def pieces(self) -> list[BarPiece]:
        total = self.total
        result = []
        for offset, limit in enumerate(self.limits):
            device = f"/GPU:{self.first_logical + offset}"
            size = short_mib_text(limit)
            labels = (f"{device} {size} · {share_text(limit, total)}", f"{size} · {share_text(limit, total)}",
                      size) if total else (f"{device} {size}", size)
            result.append(BarPiece("limit", limit, labels, device))
        used = sum(self.limits)
        if not total:
            result.append(BarPiece("unknown", 0, ("GPU memory unknown", "size unknown", "?")))
        elif used > total:
            over = short_mib_text(used - total)
            result.append(BarPiece("over", 0, (f"over by {over}", f"over by {over}", f"+{over}")))
        elif total - used >= 1:
            rest = total - used
            what = "left" if self.limits else "whole GPU"
            result.append(BarPiece("rest", rest, (f"{short_mib_text(rest)} {what} · {share_text(rest, total)}",
                                                  f"{short_mib_text(rest)} {what}", short_mib_text(rest))))
        return result

    def layout_pieces(self, width: float) -> tuple[list[BarPiece], list[str], Fit]:
        """The pieces, the label each shows and where: the longest labels that let every piece share one row
        (to scale if they allow it); else each limit's size and share on two rows (the share is what the bar is
        for); else the shortest labels, wrapped."""
        metrics = QFontMetricsF(self.font())
        pieces = self.pieces()
        scale = max(self.total or 0, sum(self.limits))

        def attempt(limit_level: int, other_level: int) -> tuple[list[str], Fit]:
            labels = [p.labels[min(limit_level if p.kind == "limit" else other_level, len(p.labels) - 1)]
                      for p in pieces]
            return labels, fit_pieces([Piece(p.value, math.ceil(metrics.horizontalAdvance(label)) + 1 + 2 * TEXT_PAD)
                                       for p, label in zip(pieces, labels, strict=True)], scale, width)

        # Shorten the limits' labels first (their device name), the rest's after them; sizes and shares stay.
        for limit_level, other_level in ((0, 0), (1, 0), (1, 1)):
            labels, fit = attempt(limit_level, other_level)
            if fit.rows <= 1:
                return pieces, labels, fit
        labels, fit = attempt(1, 1)
        if fit.rows <= 2:
            return pieces, labels, fit
        for limit_level, other_level in ((2, 1), (2, 2)):
            labels, fit = attempt(limit_level, other_level)
            if fit.rows <= 2:
                break
        return pieces, labels, fit

    def _fit_height(self) -> None:
        _, _, fit = self.layout_pieces(max(self.width() - 1, 1))
        height = self._row_height() * max(fit.rows, 1)
        if height != self.height():
            self.setFixedHeight(height)

    def resizeEvent(self, event: Any) -> None:
        super().resizeEvent(event)
        self._fit_height()

    def paintEvent(self, event: QPaintEvent) -> None:
        painter = QPainter(self)
        self.painted = []
        palette = self.palette()
        rect = QRectF(self.rect()).adjusted(0.5, 0.5, -0.5, -0.5)
        painter.fillRect(rect, palette.color(QPalette.ColorRole.Base))
        pieces, labels, fit = self.layout_pieces(rect.width())
        row_height = rect.height() / max(fit.rows, 1)
        font = QFont(self.font())
        painter.setFont(font)
        metrics = QFontMetricsF(font)
        for piece, label, placed in zip(pieces, labels, fit.placed, strict=True):
            area = QRectF(rect.left() + placed.x, rect.top() + placed.row * row_height, placed.width, row_height)
            if piece.kind == "limit":
                color = device_color(piece.device)
                color.setAlpha(200)
                painter.fillRect(area, color)
            elif piece.kind == "over":
                painter.fillRect(area, QColor(OVER_COLOR))
            elif piece.kind == "unknown":
                painter.fillRect(area, QBrush(palette.color(QPalette.ColorRole.Mid), Qt.BrushStyle.BDiagPattern))
            painter.setPen(QPen(palette.color(QPalette.ColorRole.Mid), 1))
            painter.drawRect(area)
            painter.setPen(palette.color(QPalette.ColorRole.PlaceholderText) if piece.kind == "rest"
                           else palette.color(QPalette.ColorRole.Text))
            text_rect = area.adjusted(TEXT_PAD, 0, -TEXT_PAD, 0)
            shown = metrics.elidedText(label, Qt.TextElideMode.ElideRight, text_rect.width())
            painter.drawText(text_rect, Qt.AlignmentFlag.AlignCenter, shown)
            self.painted.append((shown, text_rect))
