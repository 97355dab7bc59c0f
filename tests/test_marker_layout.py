"""Marker label layout of the memory graphs, without Qt: which markers share a label, and on which row."""

from __future__ import annotations

import subprocess
import sys

from tf_device_panel.core.devices.telemetry import Marker
from tf_device_panel.gui.views.marker_layout import LABEL_GAP_PX, MARKER_LABEL_ROWS, label_rows, layout_marker_labels


def width(text: str) -> float:
    return 7.0 * len(text)  # a monospaced font, 7 px a character


def quick_runs(start: float, apart: float, count: int = 4) -> list[Marker]:
    markers = []
    for n in range(count):
        markers += [Marker(start + n * apart, "job-start", "matmul started"),
                    Marker(start + n * apart + apart / 5, "job-end", "matmul ok")]
    return markers


def test_markers_closer_than_a_label_share_one_and_none_is_lost() -> None:
    labels = layout_marker_labels(quick_runs(10.0, 0.5), 0.0, 60.0, 600.0, 4, width)  # 10 px a second
    assert [label.text for label in labels] == ["matmul started +3", "matmul ok +3"]
    assert [label.row for label in labels] == [MARKER_LABEL_ROWS["job-start"], MARKER_LABEL_ROWS["job-end"]]
    assert sum(label.followers + 1 for label in labels) == 8


def test_markers_far_apart_each_get_their_label_on_their_kinds_row() -> None:
    markers = quick_runs(1.0, 14.0)
    labels = layout_marker_labels(markers, 0.0, 60.0, 1200.0, 4, width)
    assert [label.text for label in labels] == ["matmul started", "matmul ok"] * 4
    assert [label.marker for label in labels] == sorted(markers, key=lambda m: m.time)


def test_a_label_just_clear_of_the_one_before_stands_alone() -> None:
    text_px = width("a +99")
    step_s = (text_px + LABEL_GAP_PX) / 10.0  # exactly the label's width and the gap apart, at 10 px a second
    markers = [Marker(at, "error", "a") for at in (1.0, 1.0 + step_s, 1.0 + 2 * step_s - 0.1)]
    labels = layout_marker_labels(markers, 0.0, 100.0, 1000.0, 4, width)
    assert [label.text for label in labels] == ["a", "a +1"]


def test_labels_face_inwards_and_short_plots_fold_rows() -> None:
    markers = [Marker(10.0, "runtime-start", "runtime started"), Marker(90.0, "error", "OOM")]
    left, right = layout_marker_labels(markers, 0.0, 100.0, 1000.0, 4, width)
    assert left.right_of_line and not right.right_of_line
    assert right.right_edge_px == 900.0 and right.row == 3
    assert label_rows(height_px=50.0, row_height_px=20.0) == 2 and label_rows(5.0, 20.0) == 1
    assert label_rows(1000.0, 20.0) == len(set(MARKER_LABEL_ROWS.values()))
    (_, folded) = layout_marker_labels(markers, 0.0, 100.0, 1000.0, 2, width)
    assert folded.row == 1
    # A plot not laid out yet (no width) still gives every marker a place, all crowded into the first.
    assert [label.text for label in layout_marker_labels(quick_runs(0.0, 1.0, 2), 0.0, 10.0, 0.0, 4, width)] == \
        ["matmul started +1", "matmul ok +1"]


def test_the_layout_module_needs_no_qt() -> None:
    code = ("import sys, tf_device_panel.gui.views.marker_layout; "
            "sys.exit(any(m.split('.')[0] in ('PySide6', 'shiboken6', 'pyqtgraph') for m in sys.modules))")
    assert subprocess.run([sys.executable, "-c", code], timeout=60).returncode == 0
