"""Thinning a series to a plot's pixel width keeps its peaks, its gaps and its window."""

from __future__ import annotations

import numpy as np
from tf_device_panel.gui.views.decimation import columns_for


def decimate(times: np.ndarray, values: np.ndarray, start: float, end: float,
             pixels: int) -> tuple[np.ndarray, np.ndarray]:
    """One series through the memory graphs' thinning: its columns for the window, then their lows and highs."""
    shown_times, rows = columns_for(times, start, end, pixels).apply_rows(times, values[np.newaxis, :])
    return shown_times, rows[0]


def test_an_hour_becomes_two_points_per_pixel_and_keeps_the_peaks() -> None:
    times = np.arange(7200) * 0.5
    values = np.sin(times / 60) * 100
    values[3333] = 10_000.0  # one spike
    t, v = decimate(times, values, 0.0, 3600.0, 500)
    assert len(t) <= 2 * 501 and np.all(np.diff(t) >= 0)
    assert v.max() == 10_000.0 and v.min() == values.min()


def test_gaps_stay_gaps_and_short_series_are_untouched() -> None:
    times = np.arange(5000, dtype=float)
    values = np.ones(5000)
    values[1000:2000] = np.nan
    _, v = decimate(times, values, 0.0, 5000.0, 100)
    assert np.isnan(v).any() and np.nanmax(v) == 1.0
    short_t, short_v = decimate(times[:50], values[:50], 0.0, 50.0, 100)
    assert np.array_equal(short_t, times[:50]) and np.array_equal(short_v, values[:50])


def test_only_the_window_is_kept_with_one_point_either_side() -> None:
    times = np.arange(1000, dtype=float)
    t, _ = decimate(times, times.copy(), 500.0, 600.0, 1000)
    assert t[0] == 499.0 and t[-1] == 601.0
