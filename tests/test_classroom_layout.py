"""Issue 33: every job's result readable on a classroom's projector. Each job runs for real in the window
(offscreen, 2 logical CPUs, small parameters); after each, at 1024×768 and 1280×720, with and without
presentation mode, every result plot keeps its least height in sight and no scroll area scrolls sideways. A
result reopened from History keeps its plot in sight too."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("PySide6")
from helpers import job_ended, wait_for_message
from PySide6.QtCore import Qt
from PySide6.QtTest import QTest
from PySide6.QtWidgets import QAbstractScrollArea, QApplication, QTabBar, QWidget
from test_window_layout import RESULTS
from tf_device_panel.core.client.run_record import JobOutcome
from tf_device_panel.core.client.session import JobEnded
from tf_device_panel.gui.docks.history_panel import RunDialog
from tf_device_panel.gui.docks.runs_panel import CONSOLE_LINES
from tf_device_panel.gui.shell.main_window import MainWindow
from tf_device_panel.gui.shell.menus import PRESENTATION
from tf_device_panel.gui.views.result_view import ResultView

READY_TIMEOUT_MS = 180_000
FIT_BATCH_TIMEOUT_MS = 900_000
MIN_PLOT_HEIGHT, PRESENTATION_PLOT_HEIGHT = 200, 300  # px of each plot in sight: the figures
CURVES_LEAST = 120  # px of curves each way inside a plot, beside or above its legend
SIZES = ((1280, 720), (1024, 768))
# Each job with parameters small enough to end in seconds, yet tables and plots of a real run's shape (the
# benchmark's seven series and 21 rows, a fit's eight epochs on a log scale).
JOB_RUNS: list[tuple[str, dict[str, Any]]] = [
    ("benchmark", {"sizes": "64,128,256", "repeats": 1}),
    ("fit", {"epochs": 8, "samples": 40}),
    ("fit", {"model": "cnn", "epochs": 2, "samples": 16, "image_size": 8}),
    ("memory", {"steps": 3, "step_mib": 8}),
    ("matmul", {}),
    ("replicate", {}),
    ("session", {}),
    ("custom-loop", {"steps": 4}),
    ("multi-worker", {"steps": 2}),
    ("parameter-server", {"steps": 3}),
    ("fit-batch", {"model": "dense", "budget_mib": 64}),
    ("script", {}),
]


def sideways(win: QWidget) -> list[str]:
    """Every horizontal scroll bar a person can see and move in `win`."""
    found = []
    for area in win.findChildren(QAbstractScrollArea):
        bar = area.horizontalScrollBar()
        if area.isVisible() and not area.visibleRegion().isEmpty() and bar.isVisible() and bar.maximum() > 0:
            found.append(f"{type(area).__name__} {area.objectName() or area.accessibleName()} scrolls sideways "
                         f"({bar.maximum()} px)")
    return found


def result_problems(view: ResultView, least: int, curves_too: bool = True) -> list[str]:
    """What keeps the result from being read: a plot with fewer than `least` px in sight, a result that must be
    scrolled to be seen."""
    problems = []
    for number, plot in enumerate(view.plots):
        shown = plot.viewport().visibleRegion().boundingRect().height()
        if shown < least:
            problems.append(f"plot {number + 1} of {len(view.plots)}: {shown} px in sight (at least {least})")
        curves = plot.plot_item.getViewBox()  # its legend, below or beside, leaves the curves room
        if curves_too and min(curves.height(), curves.width()) < CURVES_LEAST:
            problems.append(f"plot {number + 1}: its curves {curves.width():.0f}×{curves.height():.0f} px (the legend "
                            f"took the room; at least {CURVES_LEAST} each way)")
    page_bar = view.presentation_page.verticalScrollBar()
    if view.currentIndex() == 1 and page_bar.maximum() > 0:
        problems.append(f"the result scrolls down ({page_bar.maximum()} px out of sight)")
    return problems


def plot_least(view: ResultView, presentation: bool) -> int:
    """The height a result's plots keep in sight: 300 px in presentation mode, but 200 under a table stacked above
    them so that none of its numbers is elided (issue 41: the numbers come first)."""
    if presentation and not view.must_stack():
        return PRESENTATION_PLOT_HEIGHT
    return MIN_PLOT_HEIGHT


def settle(qtbot) -> None:
    for _ in range(3):
        QApplication.processEvents()
        qtbot.wait(20)  # posted layout requests and single-shot fits run on later passes of the loop


@pytest.fixture
def window_size() -> tuple[int, int]:
    return SIZES[0]


@pytest.mark.slow
# 170-210 s on an idle 2-core machine, past 300 s beside a load of 10: a wider bound than the suite's, so a busy
# machine slows it without killing its worker.
@pytest.mark.timeout(900)
def test_every_jobs_result_keeps_its_plots_in_sight_at_classroom_sizes(qtbot, window: MainWindow,
                                                                       tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text("print('epoch 1: loss 0.5')\nprint('done')\n", encoding="utf-8")
    window.config_panel.set_config(window.config_panel.config().with_changes(cpu_devices=2))
    qtbot.mouseClick(window.config_panel.apply_button, Qt.MouseButton.LeftButton)
    runs = window.runs
    problems: list[str] = []
    run_ids: dict[str, str] = {}
    for job, params in JOB_RUNS:
        if job == "script":
            params = {"path": str(script)}
        window.resize(*SIZES[0])
        runs.select_job(job)
        for name, value in params.items():
            runs.form().set_value(name, value)
        qtbot.waitUntil(runs.run_button.isEnabled, timeout=READY_TIMEOUT_MS)
        # fit-batch runs its work in a dozen or more fresh processes, two at a time (3 minutes on a busy machine)
        limit = FIT_BATCH_TIMEOUT_MS if job == "fit-batch" else READY_TIMEOUT_MS
        with wait_for_message(qtbot, window.controller, JobEnded, limit) as finished:
            qtbot.mouseClick(runs.run_button, Qt.MouseButton.LeftButton)
        outcome = finished[0].outcome
        label = f"{job} {params}" if params else job
        assert outcome.status == "ok", f"{label}: {outcome.status} {outcome.error}"
        run_ids[job] = next(summary.run_id for summary in window.history.summaries() if summary.job == job)
        for presentation in (False, True):
            window.dock_layout.set_presentation(presentation)
            for size in SIZES:
                window.resize(*size)
                settle(qtbot)
                view = runs.result
                least = plot_least(view, presentation)
                assert view.currentIndex() == 1 or job == "script", f"{label}: no result shown"
                assert not runs.form_scroll.isVisible(), f"{label}: the form did not fold under its result"
                where = f"{label} at {size[0]}×{size[1]}{' in presentation mode' if presentation else ''}"
                problems += [f"{where}: {problem}" for problem in result_problems(view, least) + sideways(window)]
                canvas = window.panels["map"].canvas  # presentation mode: the device map whole beside the result
                if presentation and canvas.visibleRegion().boundingRect().height() < canvas.height():
                    problems.append(f"{where}: the device map shows {canvas.visibleRegion().boundingRect().height()}"
                                    f" of its {canvas.height()} px")
        window.dock_layout.set_presentation(False)
    assert not problems, "\n".join(problems)

    # The benchmark reopened from History: its plot in sight too, its table not sideways.
    window.resize(*SIZES[0])
    dialog = RunDialog(window.history, run_ids["benchmark"], window)
    qtbot.addWidget(dialog)
    for size in SIZES:
        dialog.resize(*size)
        dialog.show()
        settle(qtbot)
        assert dialog.result_view.plots, "the reopened benchmark shows no plot"
        assert not result_problems(dialog.result_view, MIN_PLOT_HEIGHT) + sideways(dialog), size
    dialog.close()


def test_the_form_folds_to_one_line_under_a_result_and_opens_to_edit(qtbot, window: MainWindow) -> None:
    runs = window.runs
    runs.select_job("fit")
    runs.form().set_value("epochs", 8)
    assert runs.form_scroll.isVisible() and not runs.fold_button.isVisible()  # no result yet: the form is open
    runs.job_started("fit")
    job_ended(runs, JobOutcome("fit", {}, {}, status="ok", result={
        "kind": "training", "devices": ["/CPU:0"], "replicas_in_sync": 1, "global_batch_size": 5,
        "batch_per_replica": 5, "loss": [0.9, 0.5, 0.3], "model": "dense", "parameters": 2}))
    settle(qtbot)
    assert not runs.form_scroll.isVisible()
    assert runs.description.full_text().startswith("Keras fit: Epochs 8 · ")  # the values it ran with
    assert runs.fold_button.isVisible() and "Edit" in runs.fold_button.text()
    qtbot.mouseClick(runs.fold_button, Qt.MouseButton.LeftButton)
    settle(qtbot)
    assert runs.form_scroll.isVisible() and "Fold" in runs.fold_button.text()
    runs.select_job("matmul")  # another job, without a result: its form is open
    assert runs.form_scroll.isVisible() and not runs.fold_button.isVisible()
    runs.select_job("fit")  # opened stays opened until its next result
    assert runs.form_scroll.isVisible()
    qtbot.mouseClick(runs.fold_button, Qt.MouseButton.LeftButton)
    assert not runs.form_scroll.isVisible()


# -- the same rule, fast: every result kind as a real run returns it, no runtime -----------------------------


@pytest.mark.parametrize("presentation", [False, True], ids=["normal", "presentation"])
@pytest.mark.parametrize("size", SIZES, ids=lambda size: f"{size[0]}x{size[1]}")
def test_every_result_kind_reads_at_classroom_sizes(qtbot, window: MainWindow, size, presentation) -> None:
    window.resize(*size)
    window.dock_layout.set_presentation(presentation)
    problems = []
    for job, result in {**RESULTS, "benchmark": BENCHMARK}.items():
        window.runs.select_job(job)
        window.runs.job_started(job)
        job_ended(window.runs, JobOutcome(job, {}, {}, status="ok", result=result))
        settle(qtbot)
        least = plot_least(window.runs.result, presentation)
        problems += [f"{job}: {problem}" for problem in result_problems(window.runs.result, least) + sideways(window)]
        console = window.runs.console
        lines = console.view.viewport().height() / console.view.fontMetrics().lineSpacing()
        if size == (1280, 720) and not presentation and lines < CONSOLE_LINES:
            # the real benchmark's 7-column table stacked above its plot and left the output 2.8 lines: its rows
            # now carry the curves' swatches, the plot drops its legend, and the table fits beside it
            problems.append(f"{job}: the output shows {lines:.1f} lines, under {CONSOLE_LINES}")
    assert not problems, "\n".join(problems)


# The benchmark as a real run on 2 logical CPUs returns it: 21 rows, seven columns, seven series, six lines of
# caption.
BENCHMARK = {
    "kind": "table", "title": "Matmul throughput (GFLOP/s)", "repeats": 5,
    "columns": ["device", "dtype", "size", "gflops", "seconds", "vs_numpy", "check"],
    "column_titles": {"device": "Device", "dtype": "Dtype", "size": "Size", "gflops": "GFLOP/s", "seconds": "Seconds",
                      "vs_numpy": "TF ÷ NumPy", "check": "Check"},
    "plot": {"x": "size", "y": "gflops", "series": ["device", "dtype"]},
    "notes": ["float16 on /CPU:0 is emulated: slower than float32 here, as on any CPU",
              "bfloat16 on /CPU:0, /CPU:1 runs through oneDNN where the CPU has AVX-512 BF16, else emulated",
              "NumPy (CPU) is the same matmul outside TensorFlow, for comparison",
              "TF32: not applicable (no NVIDIA GPU)"],
    "rows": [{"device": device, "dtype": dtype, "size": size, "gflops": 12.345 * size / 256, "seconds": 0.00123,
              "vs_numpy": 0.4522, "check": "ok"}
             for device in ("/job:localhost/replica:0/task:0/device:CPU:0",
                            "/job:localhost/replica:0/task:0/device:CPU:1", "NumPy (CPU)")
             for dtype in (("float32",) if device == "NumPy (CPU)" else ("float32", "float16", "bfloat16"))
             for size in (256, 512, 1024)],
}


def test_zoom_steps_answer_at_once_and_keep_the_result_in_sight(qtbot, window: MainWindow) -> None:
    """Ctrl+= three times at 1280×720 with every job's result drawn: each press is answered within 100 ms (each
    took seconds: presses queued, a later click opened the wrong menu), and the result stays in sight."""

    for job, result in {**RESULTS, "benchmark": BENCHMARK}.items():
        window.runs.select_job(job)
        window.runs.job_started(job)
        job_ended(window.runs, JobOutcome(job, {}, {}, status="ok", result=result))
    window.runs.select_job("benchmark")
    settle(qtbot)
    base = window.runs.status.fontInfo().pointSizeF()
    answers = []
    for _ in range(3):
        start = time.perf_counter()
        QTest.keyClick(window, Qt.Key.Key_Equal, Qt.KeyboardModifier.ControlModifier)
        answers.append(time.perf_counter() - start)
        assert f"Zoom {window.dock_layout.view.zoom * 100:.0f} %" in window.status.message_label.full_text()
    assert window.dock_layout.view.zoom == pytest.approx(1.15 ** 3, rel=0.01)
    assert max(answers) < 0.1, f"zoom steps took {[round(a * 1000) for a in answers]} ms"
    qtbot.waitUntil(lambda: window.runs.status.fontInfo().pointSizeF() >= 1.4 * base, timeout=5000)
    settle(qtbot)
    # In sight; not its curves' width: at 152 % the benchmark's seven-series legend beside a table leaves them
    # narrow at 1280×720 (a known limit: the legend's text grows with the zoom, and there is no height to stack).
    assert not result_problems(window.runs.result, MIN_PLOT_HEIGHT, curves_too=False) + sideways(window)
    window.runs.select_job("fit")  # a result drawn at the old zoom is drawn again when shown
    settle(qtbot)
    (plot,) = window.runs.result.plots
    assert plot.listDataItems()[0].opts["pen"].widthF() >= 2.0 * window.dock_layout.view.zoom - 0.01


# -- cosmetics ---------------------------------------------------------------------------------------------


def test_side_dock_tabs_read_whole(qtbot, window: MainWindow) -> None:
    """Devices, Configuration, History and Doctor as tabs in one side dock at 1280×720: every title whole (they
    read "De…", "H…")."""
    window.docks["history"].show()
    window.open_doctor()
    qtbot.waitUntil(lambda: window.dockWidgetArea(window.docks["doctor"]) == Qt.DockWidgetArea.LeftDockWidgetArea
                    and window.docks["doctor"].isVisible(), timeout=3000)
    settle(qtbot)
    seen = {}
    for bar in window.findChildren(QTabBar):
        if not bar.isVisible():
            continue
        for index in range(bar.count()):
            text = bar.tabText(index)
            seen[text] = bar.tabRect(index).width() >= bar.fontMetrics().horizontalAdvance(text) + 8
    assert {"Devices", "Configuration", "History", "Doctor"} <= set(seen), seen
    assert all(seen.values()), f"cut tab titles: {[text for text, whole in seen.items() if not whole]}"
    assert window.docks["config"].toggleViewAction().text() == "Configuration (before TF initializes)"


def test_copy_as_python_reads_without_a_sideways_scroll_bar(qtbot, window: MainWindow) -> None:
    window.resize(1024, 768)
    dialog = window.config_panel.show_snippet()
    qtbot.waitExposed(dialog)
    settle(qtbot)
    assert not sideways(dialog)
    dialog.close()


def test_a_run_without_placements_says_why_where_they_would_be(qtbot, window: MainWindow) -> None:
    result = {"kind": "cluster", "strategy": "ParameterServerStrategy", "workers": 2, "loss": [0.5, 0.4],
              "steps": 2, "steps_per_s": 9.0, "addresses": {}, "variables": {}, "values": {}}
    window.runs.job_started("parameter-server")
    window.session.publish(JobEnded(JobOutcome("parameter-server", {"log_placement": False},
                                               {"log_placement": True}, status="ok", result=result)))
    assert "own “Log placement” switch was off" in window.panels["log"].summary.text()
    window.runs.job_started("matmul")
    window.session.publish(JobEnded(JobOutcome("matmul", {}, {"log_placement": False}, status="ok",
                                               result={"matrix": [[1.0]], "device": "/CPU:0"})))
    assert "“Log device placement” is off in the Configuration" in window.panels["log"].summary.text()


@pytest.mark.parametrize("size", SIZES, ids=lambda size: f"{size[0]}x{size[1]}")
def test_the_placement_log_keeps_several_lines_and_rows(qtbot, window: MainWindow, size) -> None:
    """The bottom dock's least: the log five lines, the placement table three rows (4 lines and 1-2 rows)."""
    window.resize(*size)
    window.docks["log"].raise_()
    settle(qtbot)
    log = window.panels["log"]
    assert log.view.viewport().height() // log.view.fontMetrics().lineSpacing() >= 5
    assert log.table.viewport().height() // log.table.verticalHeader().defaultSectionSize() >= 3
    assert not result_problems(window.runs.result, MIN_PLOT_HEIGHT)


def test_presentation_mode_at_1280x720_shows_the_result_and_the_whole_device_map(qtbot, window: MainWindow) -> None:
    from tf_device_panel.core.protocol import events

    def cpu(index: int) -> events.LogicalDevice:
        return {"name": f"/job:localhost/replica:0/task:0/device:CPU:{index}", "short_name": f"/CPU:{index}",
                "device_type": "CPU"}

    window.controller.deliver([events.Ready(
        tf_version="2.21.0", python="3.12.3", pid=4242, build={"is_cuda_build": True},
        physical=({"name": "/physical_device:CPU:0", "device_type": "CPU", "index": 0, "visible": True},),
        logical=(cpu(0), cpu(1)), config={"cpu_devices": 2})])
    window.menu_actions[PRESENTATION].trigger()
    window.runs.select_job("benchmark")
    window.runs.job_started("benchmark")
    job_ended(window.runs, JobOutcome("benchmark", {}, {}, status="ok", result=BENCHMARK))
    canvas = window.panels["map"].canvas
    qtbot.waitUntil(lambda: canvas.visibleRegion().boundingRect().height() >= canvas.height() > 50, timeout=3000)
    settle(qtbot)
    assert not result_problems(window.runs.result, PRESENTATION_PLOT_HEIGHT) + sideways(window)
    window.menu_actions[PRESENTATION].trigger()
    assert window.panels["map"].note.isVisible() and window.docks["log"].isVisible()


def test_memory_legend_swatches_sit_level_with_their_labels(qtbot, window: MainWindow) -> None:
    """The host-memory legend's swatches sat 25 px below and 50 px left of their labels (the legend stretched to
    the plot's height)."""
    window.docks["memory"].raise_()
    memory = window.panels["memory"]
    qtbot.waitUntil(lambda: bool(memory.legends) and all(legend.items for legend in memory.legends.values()),
                    timeout=5000)
    settle(qtbot)
    for name, legend in memory.legends.items():
        for sample, label in legend.items:
            sample_box, text_box = sample.sceneBoundingRect(), label.item.sceneBoundingRect()
            assert abs(sample_box.center().y() - text_box.center().y()) <= 3, (name, label.text)
            assert 0 <= text_box.left() - sample_box.right() <= 20, (name, label.text)


def test_a_result_without_plots_leaves_the_console_the_room(qtbot, window: MainWindow) -> None:
    """Your script's one-line result sat above ~250 px of nothing and a 3-line console."""
    runs = window.runs
    runs.select_job("script")
    runs.job_started("script")
    runs.add_output("script", [(f"epoch {n}: loss {1 / n:.3f}", False) for n in range(1, 40)])
    job_ended(runs, JobOutcome("script", {}, {}, status="ok", result=RESULTS["script"]))
    settle(qtbot)
    view = runs.result
    shown = view.presentation_page.widget()  # the result's caption and table, no empty room under them
    assert view.height() <= shown.sizeHint().height() + 12, (view.height(), shown.sizeHint().height())
    assert runs.console.height() >= 8 * runs.console.view.fontMetrics().lineSpacing()
    assert not result_problems(view, MIN_PLOT_HEIGHT)


def test_a_long_table_without_a_plot_asks_for_a_few_rows_and_leaves_the_output_its_lines(
        qtbot, window: MainWindow) -> None:
    """A result table asks for its whole rows' height (beside a plot, the benchmark's 21 rows all in sight); a
    result without plots asks for a few of them only (then scrolls), so the output keeps its lines."""
    runs = window.runs
    runs.select_job("benchmark")
    runs.job_started("benchmark")
    result = {key: value for key, value in BENCHMARK.items() if key != "plot"}
    job_ended(runs, JobOutcome("benchmark", {}, {}, status="ok", result=result))
    settle(qtbot)
    table = runs.result.tables[0]
    assert table.rowCount() == 21 and table.height() < table.sizeHint().height()  # it scrolls
    console = runs.console
    assert console.view.viewport().height() / console.view.fontMetrics().lineSpacing() >= 6
    assert not result_problems(runs.result, MIN_PLOT_HEIGHT)
