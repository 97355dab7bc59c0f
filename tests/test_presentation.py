"""Issue 23 item 11: presentation mode (larger text, thicker lines, high contrast, room for the result and the
device map), zoom remembered, twelve distinct series, a log scale for losses (real widgets offscreen)."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import job_ended

pytest.importorskip("PySide6")
from PySide6.QtCore import Qt
from PySide6.QtGui import QAction, QColor, QKeySequence, QPalette
from PySide6.QtTest import QTest
from PySide6.QtWidgets import QApplication
from test_window_layout import make_window
from tf_device_panel.core.client.run_record import JobOutcome
from tf_device_panel.core.results import Plot, Presentation, Series
from tf_device_panel.gui.shell.main_window import MainWindow
from tf_device_panel.gui.shell.menus import PRESENTATION
from tf_device_panel.gui.views.result_view import ResultView
from tf_device_panel.gui.widgets.view_settings import SERIES_COLORS, series_style

FIT = {"kind": "training", "devices": ["/CPU:0", "/CPU:1"], "replicas_in_sync": 2, "global_batch_size": 10,
       "batch_per_replica": 5, "loss": [0.074, 0.0028, 0.000108, 0.000004, 0.0000003, 0.0, 0.0, 0.0],
       "model": "dense", "parameters": 2}


@pytest.fixture
def window_size() -> tuple[int, int]:
    return (1920, 1080)


def test_presentation_mode_enlarges_thickens_contrasts_and_gives_back_the_layout(qtbot, window: MainWindow) -> None:
    runs = window.runs
    runs.select_job("fit")
    runs.job_started("fit")
    job_ended(runs, JobOutcome("fit", {}, {}, status="ok", duration_s=3.0, result=FIT))
    base_text = runs.status.fontInfo().pixelSize()
    base_console = runs.console.view.fontInfo().pixelSize()
    (plot,) = runs.result.plots
    base_pen = plot.listDataItems()[0].opts["pen"].widthF()
    base_result_width, base_map_height = runs.result.width(), window.docks["map"].height()
    QTest.keyClick(window, Qt.Key.Key_P, Qt.KeyboardModifier.ControlModifier | Qt.KeyboardModifier.ShiftModifier)
    QApplication.processEvents()
    assert window.dock_layout.view.presentation and window.menu_actions[PRESENTATION].isChecked()
    assert runs.status.fontInfo().pixelSize() >= 1.4 * base_text
    assert runs.status.fontInfo().pixelSize() >= 18  # readable from the back of a room at 1920×1080
    assert runs.console.view.fontInfo().pixelSize() >= 1.4 * base_console  # the monospace views too
    (plot,) = runs.result.plots
    assert plot.listDataItems()[0].opts["pen"].widthF() >= 1.5 * base_pen
    assert window.palette().color(QPalette.ColorRole.Text) == QColor("#000000")
    assert not window.docks["config"].isVisible() and window.docks["map"].isVisible()
    # the side docks put away: the result and the device map take the window's width
    qtbot.waitUntil(lambda: runs.result.width() >= base_result_width + 200, timeout=3000)
    assert window.docks["map"].height() >= base_map_height + 50
    window.menu_actions[PRESENTATION].trigger()
    QApplication.processEvents()
    assert not window.dock_layout.view.presentation and window.docks["config"].isVisible()
    assert runs.status.fontInfo().pixelSize() == base_text


def test_zoom_is_remembered(qtbot, tmp_path: Path) -> None:
    first = make_window(tmp_path)
    qtbot.addWidget(first)
    first.show()
    base = first.runs.status.fontInfo().pointSizeF()
    zoom_in, zoom_out = (next(a for a in first.findChildren(QAction) if a.text() == text)
                         for text in ("Zoom &in", "Zoom &out"))
    assert QKeySequence("Ctrl+=") in zoom_in.shortcuts() and zoom_out.shortcut() == QKeySequence("Ctrl+-")
    zoom_in.trigger()
    zoom_in.trigger()
    assert first.dock_layout.view.zoom == pytest.approx(1.15 ** 2, rel=0.01)
    qtbot.waitUntil(lambda: first.runs.status.fontInfo().pointSizeF() > 1.25 * base, timeout=2000)
    first.close()
    again = make_window(tmp_path)
    qtbot.addWidget(again)
    assert again.dock_layout.view.zoom == pytest.approx(1.15 ** 2, rel=0.01)
    next(a for a in again.findChildren(QAction) if a.text() == "Zoom &out").trigger()
    assert again.dock_layout.view.zoom == pytest.approx(1.15, rel=0.01)
    again.close()


def test_twelve_series_stay_distinct_by_colour_and_shape(qtbot) -> None:
    styles = [series_style(n) for n in range(12)]
    assert len({colour for colour, _, _ in styles}) == 12 and len({symbol for _, symbol, _ in styles}) == 12
    colours = [QColor(c) for c in SERIES_COLORS]
    closest = min(abs(a.red() - b.red()) + abs(a.green() - b.green()) + abs(a.blue() - b.blue())
                  for i, a in enumerate(colours) for b in colours[i + 1:])
    assert closest >= 60  # no two nearly alike
    # nine benchmark series on one device (dtypes, sizes) were 3 hues with dashes: now nine colours
    series = tuple(Series(f"/job:localhost/replica:0/task:0/device:CPU:0 {dtype} {n}", (1.0, 2.0), (n, n + 1.0))
                   for n, dtype in enumerate(["float32", "bfloat16", "float16"] * 3))
    view = ResultView()
    qtbot.addWidget(view)
    view.show_presentation(Presentation("bench", plots=(Plot("size", "GFLOP/s", series),)))
    pens = [item.opts["pen"].color().name() for item in view.plots[0].listDataItems()]
    assert len(set(pens)) == 9


def test_a_loss_spanning_decades_is_drawn_on_a_log_scale_and_can_go_back(qtbot) -> None:
    view = ResultView()
    qtbot.addWidget(view)
    view.show_outcome(JobOutcome("fit", {}, {}, status="ok", result=FIT))
    (box,) = view.log_boxes
    (plot,) = view.plots
    assert box.isChecked() and plot.log_y and plot.plot_item.getAxis("left").logMode
    ys = list(plot.listDataItems()[0].yData)
    assert min(ys) > 0  # the epochs that reached 0.0 sit a decade below the smallest loss, not at -inf
    box.setChecked(False)
    assert not plot.plot_item.getAxis("left").logMode and list(plot.listDataItems()[0].yData)[-1] == 0.0


def test_legend_swatches_sit_level_with_their_labels(qtbot) -> None:
    series = tuple(Series(f"worker {n}", (1.0, 2.0), (1.0, 0.5)) for n in range(3))
    view = ResultView()
    qtbot.addWidget(view)
    view.resize(800, 400)
    view.show()
    view.show_presentation(Presentation("losses", plots=(Plot("step", "loss", series),)))
    qtbot.waitExposed(view)
    QApplication.processEvents()
    legend = view.plots[0].legend
    for sample, label in legend.items:
        centre_sample = sample.sceneBoundingRect().center().y()
        centre_label = label.item.sceneBoundingRect().center().y()  # the text, not its (stretched) cell
        assert abs(centre_sample - centre_label) <= 2, label.text


def test_a_benchmarks_curves_keep_their_width_beside_a_wide_table(qtbot, tmp_path: Path) -> None:
    """Item 1: the benchmark's nine series beside its wide table left the curves about 50 px wide at 1280×720.
    Now the legend goes below curves that are narrow but tall, or (issue 33, where the height allows) the table
    stacks above the plot; the curves keep 120 px each way, the legend off them, and (issue 41) every column of
    the table whole: the plot gives the table its width before a number is elided."""
    from readable import elided_cells
    from test_window_layout import RESULTS

    win = make_window(tmp_path)
    qtbot.addWidget(win)
    win.resize(1280, 720)
    win.show()
    qtbot.waitExposed(win)
    win.runs.select_job("benchmark")
    win.runs.result.show_outcome(JobOutcome("benchmark", {}, {}, status="ok", result=RESULTS["benchmark"]))
    plot = win.runs.result.plots[0]
    curves = plot.plot_item.getViewBox()
    qtbot.waitUntil(lambda: curves.width() >= 120 and curves.height() >= 120, timeout=3000)
    assert not elided_cells(win.runs.result)
    assert plot.plot_item.sceneBoundingRect().right() <= plot.viewport().width() + 1  # the curves in sight
    view = win.runs.result
    # beside the plot the table is its legend (each row its curve's swatch), and the plot draws none
    assert view.table_is_legend and not view.stacked() and not plot.legend.isVisible()
    table = view.tables[0]
    assert all(not table.item(row, 0).icon().isNull() for row in range(table.rowCount()))
    win.close()


def test_the_benchmarks_table_is_its_plots_legend_beside_it_and_the_legend_comes_back_when_stacked(
        qtbot, tmp_path: Path) -> None:
    """Issue 41: the real benchmark's seven columns beside a plot with a 177 px legend stacked above it at
    1280×720, three rows in sight, and left the output under three lines. Its rows now carry their curves'
    swatches, the plot beside it drops its legend, and the output keeps its 8 lines; stacked (1024×768) the
    table shows a few rows only, and the plot keeps its legend."""
    from test_classroom_layout import BENCHMARK
    from tf_device_panel.gui.docks.runs_panel import CONSOLE_LINES

    win = make_window(tmp_path)
    qtbot.addWidget(win)
    win.resize(1280, 720)
    win.show()
    qtbot.waitExposed(win)
    runs = win.runs
    runs.select_job("benchmark")
    runs.job_started("benchmark")
    job_ended(runs, JobOutcome("benchmark", {}, {}, status="ok", result=BENCHMARK))
    view = runs.result
    (plot,) = view.plots
    table = view.tables[0]
    qtbot.waitUntil(lambda: not view.stacked() and not plot.legend.isVisible(), timeout=3000)
    swatches = [table.item(row, 0).icon().cacheKey() for row in range(table.rowCount())]
    assert len(set(swatches)) == 7 and swatches[0] == swatches[2] != swatches[3]  # one per curve, 3 rows each
    lines = lambda: runs.console.view.viewport().height() / runs.console.view.fontMetrics().lineSpacing()  # noqa: E731
    qtbot.waitUntil(lambda: lines() >= CONSOLE_LINES, timeout=3000)
    win.resize(1024, 768)
    qtbot.waitUntil(lambda: view.stacked() and plot.legend.isVisible(), timeout=3000)
    assert not plot.legend.sceneBoundingRect().intersects(plot.plot_item.getViewBox().sceneBoundingRect())
    win.close()
