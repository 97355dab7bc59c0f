"""How large and how contrasted the window is drawn: zoom and presentation mode (for a projector).

Qt-free, one state every part reads: the window applies it; plots read it when they draw; the settings file
remembers it.
"""

from __future__ import annotations

from dataclasses import dataclass

ZOOM_STEP = 1.15
ZOOM_MIN, ZOOM_MAX = 0.7, 3.0
PRESENTATION_ZOOM = 1.5  # presentation mode multiplies the zoom by this (text about 20 px at 1920×1080)

# Twelve colours that stay apart from one another (Tableau's ten and two dark ones), for plots whose series
# share a device: the benchmark's nine series drew in three hues before.
SERIES_COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b",
                 "#e377c2", "#7f7f7f", "#bcbd22", "#17becf", "#000080", "#000000")
# A second cue besides colour (a projector washes colours out; some people cannot tell them apart).
SERIES_SYMBOLS = ("o", "s", "t", "d", "+", "x", "star", "p", "h", "t1", "t2", "t3")
SERIES_DASHES = ("solid", "dash", "dot", "dashdot")


@dataclass
class ViewSettings:
    zoom: float = 1.0
    presentation: bool = False

    @property
    def scale(self) -> float:
        """How much larger than normal text is drawn."""
        return self.zoom * (PRESENTATION_ZOOM if self.presentation else 1.0)

    @property
    def line_width(self) -> float:
        """Plot lines: 2 px normally, thicker in presentation mode and as the zoom grows."""
        return max(2.0, 2.0 * self.scale) if self.presentation else max(2.0, 2.0 * self.zoom)

    def zoom_in(self) -> None:
        self.zoom = min(ZOOM_MAX, round(self.zoom * ZOOM_STEP, 3))

    def zoom_out(self) -> None:
        self.zoom = max(ZOOM_MIN, round(self.zoom / ZOOM_STEP, 3))


def series_style(number: int) -> tuple[str, str, str]:
    """(colour, symbol, dash) of the `number`th series: colour and symbol differ between any two of the first
    12; the dash is a third cue."""
    return (SERIES_COLORS[number % len(SERIES_COLORS)], SERIES_SYMBOLS[number % len(SERIES_SYMBOLS)],
            SERIES_DASHES[number % len(SERIES_DASHES)])


CURRENT = ViewSettings()  # the window's; plots drawn later read it


def current() -> ViewSettings:
    return CURRENT
