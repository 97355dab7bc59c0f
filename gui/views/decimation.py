"""Thinning a long series to what a plot can show: pure numpy, no Qt, tested on its own.

An hour at 500 ms is 7,200 points per curve; a plot shows at most a few values per pixel column, so each
column's lowest and highest value is all pyqtgraph is given. Peaks survive, and gaps (NaN) stay gaps.
Series sampled together share their times, so the columns are found once (`Columns`) and reused for each.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Columns:
    """Which points of a time array fall in the window, and where each pixel column's points begin and end."""

    first: int                      # the window's points are times[first:last]
    last: int
    starts: np.ndarray | None       # None: few enough points to keep them all
    ends: np.ndarray | None

    def apply_rows(self, times: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The shown points of several series of the same times, one per row of `rows`: one pass of numpy over
        all of them instead of one per series."""
        times, rows = times[self.first:self.last], rows[:, self.first:self.last]
        if self.starts is None or self.ends is None:
            return times, rows
        with np.errstate(invalid="ignore"):
            lows = np.fmin.reduceat(rows, self.starts, axis=1)
            highs = np.fmax.reduceat(rows, self.starts, axis=1)
        out_times = np.empty(2 * len(self.starts))
        out_rows = np.empty((len(rows), 2 * len(self.starts)))
        out_times[0::2], out_times[1::2] = times[self.starts], times[self.ends]
        out_rows[:, 0::2], out_rows[:, 1::2] = lows, highs
        return out_times, out_rows


def columns_for(times: np.ndarray, start: float, end: float, pixels: int) -> Columns:
    """The columns of `times` (sorted) for a window [start, end] drawn `pixels` columns wide; one point either
    side of the window is kept, so lines run to its edges."""
    first = max(int(np.searchsorted(times, start)) - 1, 0)
    last = min(int(np.searchsorted(times, end, side="right")) + 1, len(times))
    inside = times[first:last]
    if pixels <= 0 or len(inside) <= 2 * pixels or end <= start:
        return Columns(first, last, None, None)
    column = np.clip(((inside - start) * (pixels / (end - start))).astype(np.int64), -1, pixels)
    starts = np.flatnonzero(np.diff(column, prepend=column[0] - 1))
    ends = np.append(starts[1:], len(inside)) - 1
    return Columns(first, last, starts, ends)

