"""One colour per device, the same everywhere in the window."""

from __future__ import annotations

import re
from typing import Any

from PySide6.QtGui import QColor

# Distinct hues readable on light and dark palettes; CPUs cool, GPUs warm.
_CPU = ["#3b82c4", "#2aa198", "#6c71c4", "#4c9a2a", "#1f78b4", "#00838f", "#5e60ce", "#33691e"]
_GPU = ["#e4572e", "#f4a259", "#d33682", "#b5651d", "#e9c46a", "#c0392b", "#ff7f50", "#a0522d"]
_OTHER = "#888888"


def device_color(device: str) -> QColor:
    match = re.search(r"([A-Za-z_]+):(\d+)$", device)
    if not match:
        return QColor(_OTHER)
    kind, index = match.group(1).upper(), int(match.group(2))
    if kind == "CPU":
        return QColor(_CPU[index % len(_CPU)])
    if kind == "GPU":
        return QColor(_GPU[index % len(_GPU)])
    return QColor(_OTHER)


def palette_colors() -> tuple[Any, Any]:
    """(background, text) colours of the application's palette, for plots that follow light and dark themes."""
    from PySide6.QtGui import QGuiApplication, QPalette

    palette = QGuiApplication.palette()
    return palette.color(QPalette.ColorRole.Base), palette.color(QPalette.ColorRole.Text)


def theme_axes(plot_item: Any) -> None:
    _, text = palette_colors()
    for name in ("left", "bottom"):
        axis = plot_item.getAxis(name)
        axis.setPen(text)
        axis.setTextPen(text)
    plot_item.titleLabel.setAttr("color", text)
