"""Where the memory graphs put their marker labels: pure arithmetic, no Qt, so it is tested on its own.

Each kind of marker has its row from the top of the plot; on a row, a label that would overprint the one
before it joins that one instead, which then reads "matmul ok +3" (the read-out names them all).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from tf_device_panel.core.devices.telemetry import Marker

# Label rows from the top of each plot; a plot too short for all rows folds the kinds onto the rows it has.
MARKER_LABEL_ROWS = {"runtime-start": 0, "runtime-exit": 0, "job-start": 1, "job-end": 2, "error": 3}
LABEL_GAP_PX = 8
CROWD_SUFFIX = " +99"  # room kept for the count a label may get


@dataclass
class MarkerLabel:
    marker: Marker
    row: int
    right_of_line: bool    # text right of the marker's line (left half of the plot), else left of it
    right_edge_px: float
    followers: int = 0     # later markers whose labels would have overprinted this one

    @property
    def text(self) -> str:
        return self.marker.label + (f" +{self.followers}" if self.followers else "")


def label_rows(height_px: float, row_height_px: float) -> int:
    """How many label rows fit: at least one, at most one per row of MARKER_LABEL_ROWS."""
    return max(1, min(len(set(MARKER_LABEL_ROWS.values())), int(height_px // row_height_px)))


def layout_marker_labels(markers: Iterable[Marker], start: float, end: float, width_px: float, rows: int,
                         text_width: Callable[[str], float]) -> list[MarkerLabel]:
    """The labels to draw for `markers` on a plot showing [start, end] over `width_px`, in time order."""
    px_per_second = width_px / (end - start) if width_px > 0 and end > start else 0.0
    last_on_row: dict[int, MarkerLabel] = {}
    labels: list[MarkerLabel] = []
    for marker in sorted(markers, key=lambda m: m.time):
        # Fewer rows than kinds: the kinds take turns (a job's start and its end land on different rows).
        row = MARKER_LABEL_ROWS.get(marker.kind, 0) % max(rows, 1)
        x = (marker.time - start) * px_per_second
        text_px = text_width(marker.label + CROWD_SUFFIX)
        right_of_line = x < width_px / 2
        left, right = (x, x + text_px) if right_of_line else (x - text_px, x)
        previous = last_on_row.get(row)
        if previous is not None and left < previous.right_edge_px + LABEL_GAP_PX:
            previous.followers += 1
            continue
        label = MarkerLabel(marker, row, right_of_line, right)
        last_on_row[row] = label
        labels.append(label)
    return labels
