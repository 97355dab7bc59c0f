"""The window holds its layout, and results, forms and errors read at a glance (pytest-qt, offscreen, no runtime)."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import job_ended

pytest.importorskip("PySide6")
from PySide6.QtCore import QSettings, Qt
from PySide6.QtWidgets import QAbstractScrollArea, QApplication, QMessageBox, QScrollBar
from tf_device_panel.core.catalogue import JOBS
from tf_device_panel.core.client.history import RunHistory
from tf_device_panel.core.client.records import RunError
from tf_device_panel.core.client.run_record import JobOutcome
from tf_device_panel.gui.shell.main_window import MainWindow
from tf_device_panel.gui.views.result_view import ResultView, outcome_summary, user_frames

LONG = "x" * 2000  # one unbreakable word: a label that wraps at spaces cannot wrap it
SIZES = ((1280, 720), (1920, 1080))


def make_window(tmp_path: Path, name: str = "settings.ini") -> MainWindow:
    settings = QSettings(str(tmp_path / name), QSettings.Format.IniFormat)
    return MainWindow(settings=settings, history=RunHistory(), start_runtime=False)


@pytest.fixture
def window_size() -> tuple[int, int]:
    return (1280, 720)


def widths(win: MainWindow) -> dict[str, int]:
    found = {name: dock.width() for name, dock in win.docks.items() if dock.isVisible()}
    found["centre"] = win.centralWidget().width()
    found["window"] = win.width()
    return found


def sideways_scroll_bars(win: MainWindow) -> list[str]:
    """Every horizontal scroll bar a person can see and move, named by the widget that owns it, with each
    tabbed dock raised in turn (the docks behind a tab are "visible" to Qt, but off-screen)."""
    found = []
    for raised in ("log", "memory", "map"):
        win.docks[raised].raise_()
        QApplication.processEvents()
        for area in win.findChildren(QAbstractScrollArea):
            bar: QScrollBar = area.horizontalScrollBar()
            if area.isVisible() and not area.visibleRegion().isEmpty() and bar.isVisible() and bar.maximum() > 0:
                found.append(f"{raised}: {type(area).__name__} {area.objectName() or area.accessibleName()}")
    return sorted(set(found))


def settle(qtbot, win: MainWindow) -> None:
    QApplication.processEvents()
    qtbot.wait(0)  # posted layout requests run on the next loop pass
    QApplication.processEvents()


def failed(job: str, message: str, traceback: str = "", status: str = "error",
           error_type: str = "InvalidArgumentError") -> JobOutcome:
    return JobOutcome(job, {}, {}, status=status, duration_s=1.5,
                      error=RunError(type=error_type, message=message, traceback=traceback or None))


@pytest.mark.parametrize("size", SIZES)
def test_a_long_error_widens_nothing_and_nothing_scrolls_sideways(qtbot, window: MainWindow, size) -> None:
    window.resize(*size)
    settle(qtbot, window)
    assert sideways_scroll_bars(window) == []
    before = widths(window)
    window.runs.select_job("matmul")
    window.runs.job_started("matmul")
    job_ended(window.runs, failed("matmul", f"Could not satisfy device specification '/GPU:2': {LONG}"))
    window.panels["devices"].show_message("<b>The runtime died.</b> " + LONG)
    window.config_panel.set_gpus([], "TensorFlow said: " + LONG)
    window.status.runtime_label.setText("Runtime exited: " + LONG)  # after set_gpus, which refreshes the status
    window.panels["log"].add_events([])
    settle(qtbot, window)
    after = widths(window)
    assert after == before
    assert sideways_scroll_bars(window) == []
    # The failure once: the status line says how the run ended, the result area the whole message, wrapped.
    assert window.runs.status.text() == "Failed in 1.50 s"
    assert window.status.runtime_label.is_elided()
    view = window.runs.result
    assert view.error.isVisible() and not view.error.detail.isVisible()
    summary = view.error.summary
    assert summary.full_text().startswith("InvalidArgumentError: Could not satisfy") and LONG in summary.full_text()
    assert summary.height() > 10 * summary.fontMetrics().height()  # wrapped over many lines, not elided
    qtbot.mouseClick(view.error.toggle, Qt.MouseButton.LeftButton)
    assert view.error.detail.isVisible() and LONG in view.error.detail.toPlainText()
    settle(qtbot, window)
    assert widths(window) == before and sideways_scroll_bars(window) == []


def test_the_first_window_fits_its_screen_and_reset_layout_restores_the_docks(qtbot, tmp_path: Path) -> None:
    win = make_window(tmp_path)
    qtbot.addWidget(win)
    win.show()
    available = win.screen().availableGeometry()
    assert win.width() <= available.width() and win.frameGeometry().height() <= available.height()
    default_devices_width = win.docks["devices"].width()
    win.docks["log"].setFloating(True)
    win.docks["config"].hide()
    win.dock_layout.reset_layout()
    settle(qtbot, win)
    assert not win.docks["log"].isFloating() and win.docks["config"].isVisible()
    assert abs(win.docks["devices"].width() - default_devices_width) <= 2
    assert any(action.text() == "&Reset layout" for action in win.menuBar().actions()[2].menu().actions())
    win.close()


def test_a_saved_layout_that_no_longer_fits_is_discarded(qtbot, tmp_path: Path) -> None:
    win = make_window(tmp_path)
    qtbot.addWidget(win)
    win.show()
    win.resize(3000, 2000)  # saved on a much larger screen
    win.close()
    again = make_window(tmp_path)
    qtbot.addWidget(again)
    again.show()
    available = again.screen().availableGeometry()
    assert again.width() <= available.width() and again.height() <= available.height()
    again.close()


def test_doctor_and_history_open_wide_enough_to_read(qtbot, window: MainWindow) -> None:
    window.docks["history"].show()
    settle(qtbot, window)
    # 390 px at 1280 (the width that leaves the job's form its two columns and the result its plot); 560 on a
    # wider window
    assert window.docks["history"].width() >= 390
    window.docks["doctor"].show()
    window.docks["doctor"].raise_()
    settle(qtbot, window)
    assert window.docks["doctor"].width() >= 390
    window.docks["history"].hide()
    window.docks["doctor"].hide()


@pytest.mark.parametrize("size", SIZES)
def test_every_doctor_check_name_reads_whole(qtbot, window: MainWindow, size) -> None:
    """Each check's name wraps in its column and its row is tall enough for every line (Qt elided them at one
    line in a 220 px column: "GPU compute capability …"); names and results never scroll sideways."""
    from PySide6.QtCore import QRect
    from PySide6.QtGui import QFontMetrics
    from PySide6.QtWidgets import QStyle
    from tf_device_panel.core.client import doctor

    window.resize(*size)
    window.docks["doctor"].show()
    window.docks["doctor"].raise_()
    checks = doctor.diagnose(doctor.Facts())  # every check, as on a machine without TensorFlow or a driver
    visible = next(c for c in checks if c.id == "cuda-visible-devices")
    visible.evidence.append("CUDA_VISIBLE_DEVICES=" + ",".join(str(n) for n in range(40)))  # a long result
    window.doctor._show(checks, doctor.Facts())
    settle(qtbot, window)
    tree = window.doctor.tree
    margin = tree.style().pixelMetric(QStyle.PixelMetric.PM_FocusFrameHMargin, None, tree) + 1
    assert tree.topLevelItemCount() == len(checks) == 14
    for row in range(tree.topLevelItemCount()):
        item = tree.topLevelItem(row)
        for column in (0, 1):
            cell = tree.visualRect(tree.indexFromItem(item, column))
            text_width = cell.width() - 2 * margin
            needed = QFontMetrics(item.font(column)).boundingRect(QRect(0, 0, text_width, 100_000),
                                                                  Qt.TextFlag.TextWordWrap, item.text(column))
            # wider than its cell: a word longer than the column; taller: lines cut off below
            assert needed.width() <= text_width and needed.height() <= cell.height(), (size, item.text(column))
    assert sideways_scroll_bars(window) == []
    assert window.docks["doctor"].width() >= (390 if size[0] < 1920 else 540)
    window.docks["doctor"].hide()


def test_about_names_the_versions_without_importing_tensorflow(qtbot, window: MainWindow) -> None:
    box = window.show_about()
    text = box.text()
    assert "Qt" in text and "PySide6" in text and "not known yet" in text and "README" in text
    box.close()


# -- results at a glance --------------------------------------------------------------------------------------

RESULTS = {
    "matmul": {"matrix": [[22.0, 28.0], [49.0, 64.0]], "device": "/job:localhost/replica:0/task:0/device:CPU:0",
               "requested_device": "/GPU:2", "fallback": True},
    "replicate": {"matrix": [[44.0, 56.0], [98.0, 128.0]], "device": "/job:localhost/replica:0/task:0/device:CPU:0",
                  "replicas": {"/CPU:0": "/job:localhost/replica:0/task:0/device:CPU:0",
                               "/CPU:1": "/job:localhost/replica:0/task:0/device:CPU:1"}},
    "fit": {"kind": "training", "devices": ["/CPU:0", "/CPU:1"], "replicas_in_sync": 2, "global_batch_size": 10,
            "batch_per_replica": 5, "loss": [0.71, 0.52, 0.44], "model": "cnn", "parameters": 12345},
    "custom-loop": {"kind": "training", "devices": ["/CPU:0"], "replicas_in_sync": 1, "global_batch_size": 5,
                    "batch_per_replica": 5, "loss": [0.9 - n / 50 for n in range(20)], "loop": "custom"},
    "session": {"kind": "matrix", "matrix": [[22.0, 28.0], [49.0, 64.0]],
                "device": "/job:localhost/replica:0/task:0/device:CPU:0", "example": "placement",
                "session_config": {"log_device_placement": True, "allow_soft_placement": False},
                "device_mapping": {}, "gpu_options": {"allow_growth": False},
                "nodes": {"a": "/job:localhost/replica:0/task:0/device:CPU:0",
                          "MatMul": "/job:localhost/replica:0/task:0/device:CPU:0"}},
    "memory": {"kind": "memory", "short_device": "/GPU:0", "step_mib": 64, "notes": ["growth on"], "rows": [
        {"step": n, "label": "allocated" if n else "before", "allocated_mib": 64 * n, "current_mib": 64.0 * n + 1,
         "peak_mib": 64.0 * n + 2, "rss_mib": None} for n in range(9)]},
    "benchmark": {"kind": "table", "title": "Matmul throughput (GFLOP/s)", "repeats": 5,
                  "columns": ["device", "dtype", "size", "gflops", "seconds"],
                  "column_titles": {"device": "Device", "dtype": "Dtype", "size": "Size", "gflops": "GFLOP/s",
                                    "seconds": "Seconds"},
                  "plot": {"x": "size", "y": "gflops", "series": ["device", "dtype"]},
                  "rows": [{"device": device, "dtype": dtype, "size": size, "gflops": 123.456, "seconds": 0.00123}
                           for device in ("/job:localhost/replica:0/task:0/device:CPU:0", "NumPy (CPU)")
                           for dtype in ("float32", "bfloat16") for size in (256, 512, 1024)]},
    "multi-worker": {"kind": "cluster", "strategy": "MultiWorkerMirroredStrategy", "workers": 2,
                     "addresses": {"worker": ["127.0.0.1:40001", "127.0.0.1:40002"]}, "replicas_in_sync": 2,
                     "losses": {"worker 0": [0.5, 0.4], "worker 1": [0.5, 0.4]}, "losses_agree": True,
                     "timings": {"worker 0": {"connect_s": 0.52, "train_s": 1.25},
                                 "worker 1": {"connect_s": 0.61, "train_s": 1.31}},
                     "task_devices": {"worker 0": ["/job:worker/replica:0/task:0/device:CPU:0"]}},
    "parameter-server": {"kind": "cluster", "strategy": "ParameterServerStrategy", "workers": 2,
                         "addresses": {"ps": ["127.0.0.1:1"], "worker": ["127.0.0.1:2", "127.0.0.1:3"]},
                         "variables": {"dense/kernel:0": "/job:ps/replica:0/task:0/device:CPU:0",
                                       "dense/bias:0": "/job:ps/replica:0/task:0/device:CPU:0"},
                         "values": {"dense/kernel:0": 0.61, "dense/bias:0": 0.02}, "loss": [0.5, 0.4],
                         "steps": 20, "steps_per_s": 9.0,
                         "timings": {"coordinator": {"connect_s": 0.1, "train_s": 0.2}}},
    "script": {"kind": "script", "path": "/tmp/train.py", "argv": ["train.py", "--lr", "0.1"], "exit_code": 0},
    # `run fit-batch -p model=cnn -p budget_mib=256 --json` on the shared 2-core machine, as it answered
    "fit-batch": {'kind': 'fit_batch',
                   'model': 'cnn',
                   'work': {'model': 'cnn', 'script': '', 'args': ''},
                   'device': '/CPU:0',
                   'budget_mib': 256,
                   'predicted_max_batch': 415,
                   'prediction': 612,
                   'verified': True,
                   'boundary': {'held': 415, 'ran_out': 430},
                   'repeats': 4,
                   'answer_peaks': {'min_bytes': 210194176, 'max_bytes': 217724416, 'spread': 0.035},
                   'process_peak_bytes': 901578752,
                   'failures_near': {'fragmentation': 2},
                   'fit': {'fixed_bytes': 8347317, 'bytes_per_sample': 485730.5, 'margin': 0.85},
                   'probes': [{'batch': 8,
                               'fits': True,
                               'peak_bytes': 12559104,
                               'seconds': 18.7,
                               'rss_peak_bytes': 669679616,
                               'role': 'probe',
                               'side_by_side': 1},
                              {'batch': 32,
                               'fits': True,
                               'peak_bytes': 23558912,
                               'seconds': 21.9,
                               'rss_peak_bytes': 680099840,
                               'role': 'probe',
                               'side_by_side': 1},
                              {'batch': 128,
                               'fits': True,
                               'peak_bytes': 56000768,
                               'seconds': 20.9,
                               'rss_peak_bytes': 737300480,
                               'role': 'probe',
                               'side_by_side': 1},
                              {'batch': 612,
                               'fits': False,
                               'peak_bytes': 268302080,
                               'seconds': 28.1,
                               'rss_peak_bytes': 859467776,
                               'oom': {'verdict': 'shortage'},
                               'role': 'search',
                               'side_by_side': 2},
                              {'batch': 612,
                               'fits': False,
                               'peak_bytes': 268302080,
                               'seconds': 28.3,
                               'rss_peak_bytes': 861491200,
                               'oom': {'verdict': 'shortage'},
                               'role': 'search',
                               'side_by_side': 2},
                              {'batch': 370,
                               'fits': True,
                               'peak_bytes': 218932992,
                               'seconds': 18.3,
                               'rss_peak_bytes': 881061888,
                               'role': 'search',
                               'side_by_side': 2},
                              {'batch': 370,
                               'fits': True,
                               'peak_bytes': 178961408,
                               'seconds': 19.5,
                               'rss_peak_bytes': 847077376,
                               'role': 'search',
                               'side_by_side': 2},
                              {'batch': 491,
                               'fits': False,
                               'peak_bytes': 246989824,
                               'seconds': 23.1,
                               'rss_peak_bytes': 892977152,
                               'oom': {'verdict': 'fragmentation'},
                               'role': 'search',
                               'side_by_side': 2},
                              {'batch': 491,
                               'fits': True,
                               'peak_bytes': 213406464,
                               'seconds': 15.3,
                               'rss_peak_bytes': 905519104,
                               'role': 'search',
                               'side_by_side': 2},
                              {'batch': 430,
                               'fits': False,
                               'peak_bytes': 247462656,
                               'seconds': 21.9,
                               'rss_peak_bytes': 869236736,
                               'oom': {'verdict': 'fragmentation'},
                               'role': 'search',
                               'side_by_side': 2},
                              {'batch': 430,
                               'fits': True,
                               'peak_bytes': 214136064,
                               'seconds': 15.5,
                               'rss_peak_bytes': 884813824,
                               'role': 'search',
                               'side_by_side': 2},
                              {'batch': 400,
                               'fits': True,
                               'peak_bytes': 199094016,
                               'seconds': 18.9,
                               'rss_peak_bytes': 865968128,
                               'role': 'search',
                               'side_by_side': 2},
                              {'batch': 400,
                               'fits': True,
                               'peak_bytes': 215011072,
                               'seconds': 21.7,
                               'rss_peak_bytes': 892395520,
                               'role': 'search',
                               'side_by_side': 2},
                              {'batch': 415,
                               'fits': True,
                               'peak_bytes': 210194176,
                               'seconds': 17.9,
                               'rss_peak_bytes': 872091648,
                               'role': 'search',
                               'side_by_side': 2},
                              {'batch': 415,
                               'fits': True,
                               'peak_bytes': 217724416,
                               'seconds': 18.3,
                               'rss_peak_bytes': 901578752,
                               'role': 'search',
                               'side_by_side': 2},
                              {'batch': 415,
                               'fits': True,
                               'peak_bytes': 216432640,
                               'seconds': 19.1,
                               'rss_peak_bytes': 897802240,
                               'role': 'repeat',
                               'side_by_side': 2},
                              {'batch': 415,
                               'fits': True,
                               'peak_bytes': 216432640,
                               'seconds': 18.5,
                               'rss_peak_bytes': 891969536,
                               'role': 'repeat',
                               'side_by_side': 2}],
                   'runs': 17,
                   'run_s': 345.4,
                   'flags': []},
}


def test_every_job_kind_fits_its_table_at_1280x720(qtbot, window: MainWindow) -> None:
    assert set(RESULTS) | {"devices"} >= set(JOBS) - {"devices"}
    for job, result in RESULTS.items():
        window.runs.select_job(job)
        view = window.runs.result
        view.show_outcome(JobOutcome(job, {}, {}, status="ok", result=result))
        settle(qtbot, window)
        for table in view.tables:
            shown = table.viewport().width()
            needed = table.horizontalHeader().length()
            assert needed <= shown, f"{job}: the table needs {needed} px and shows {shown}"
            for row in range(table.rowCount()):
                for column in range(table.columnCount()):
                    assert "/job:localhost" not in table.item(row, column).text()
        for plot in view.plots:
            assert plot.height() >= 120
            if len(plot.listDataItems()) > 1:
                # hidden only where the table beside the plot is its legend (its rows carry the swatches)
                assert plot.legend.isVisible() == (view.stacked() or not view.table_is_legend), job
                if plot.legend.isVisible():  # beside the curves, not over them
                    legend = plot.legend.sceneBoundingRect()
                    assert not legend.intersects(plot.plot_item.getViewBox().sceneBoundingRect())
    # parameter-server: where the variables live is the point of the demo, shown short, full on hover
    window.runs.select_job("parameter-server")
    where = window.runs.result.tables[0].item(0, 1)
    assert where.text() == "/job:ps/task:0/CPU:0" and where.toolTip() == "/job:ps/replica:0/task:0/device:CPU:0"


def test_loss_axes_are_plain_with_whole_epoch_ticks(qtbot) -> None:
    view = ResultView()
    qtbot.addWidget(view)
    result = {"kind": "training", "devices": ["/CPU:0"], "replicas_in_sync": 1, "global_batch_size": 5,
              "batch_per_replica": 5, "loss": [0.000612]}
    view.show_outcome(JobOutcome("fit", {}, {}, status="ok", result=result))
    view.resize(700, 400)
    view.show()
    qtbot.waitExposed(view)
    plot = view.plots[0].plot_item
    assert plot.getAxis("left").labelString().count("x0.001") == 0
    ticks = [value for _, values in plot.getAxis("bottom").tickValues(0.6, 1.4, 400) for value in values]
    assert ticks == [1.0]
    ticks = [value for _, values in plot.getAxis("bottom").tickValues(1, 10, 400) for value in values]
    assert ticks and all(float(t).is_integer() for t in ticks)


def test_each_job_shows_its_own_result(qtbot, window: MainWindow) -> None:
    window.runs.select_job("matmul")
    window.runs.job_started("matmul")
    job_ended(window.runs, JobOutcome("matmul", {}, {}, status="ok", result=RESULTS["matmul"]))
    assert window.runs.result.tables
    window.runs.select_job("fit")
    assert not window.runs.result.tables and "Run a job" in window.runs.result.message.text()
    window.runs.select_job("matmul")
    assert window.runs.result.tables[0].item(0, 0).text() == "22"


def test_a_cancelled_fit_keeps_its_partial_loss_and_says_why_once(qtbot, window: MainWindow) -> None:
    window.runs.select_job("fit")
    window.runs.job_started("fit")
    window.runs.select_job("matmul")  # the live curve still goes to the running job's view
    for epoch, loss in enumerate((0.9, 0.7, 0.6), 1):
        window.runs.result.add_live_loss(epoch, loss)
    job_ended(window.runs, failed("fit", "cancelled by the user", status="cancelled", error_type="Cancelled"))
    assert not window.runs.result.plots  # matmul's view stayed empty
    window.runs.select_job("fit")
    view = window.runs.result
    (curve,) = view.plots[0].listDataItems()
    assert list(curve.yData) == [0.9, 0.7, 0.6]
    assert view.caption.text().count("Cancelled") == 1 and "3 epoch" in view.caption.text()
    assert window.runs.status.text().count("Cancelled") == 1


def test_errors_are_one_line_with_the_users_frames_expandable() -> None:
    trace = ("Traceback (most recent call last):\n"
             '  File "/site/tf_device_panel/core/jobs/script.py", line 30, in script\n'
             "    runpy.run_path(path)\n"
             '  File "/usr/lib/python3.11/runpy.py", line 291, in run_path\n'
             "    return _run(code)\n"
             '  File "/home/me/train.py", line 3, in <module>\n'
             "    raise ValueError('boom')\n"
             "ValueError: boom")
    outcome = failed("script", "boom", trace, error_type="ValueError")
    assert outcome_summary(outcome) == "Failed: ValueError: boom"
    mine = user_frames(trace)
    assert "/home/me/train.py" in mine and "tf_device_panel" not in mine and mine.endswith("ValueError: boom")
    cancelled = failed("fit", "cancelled by the user", status="cancelled", error_type="Cancelled")
    assert outcome_summary(cancelled) == "Cancelled"


# -- forms --------------------------------------------------------------------------------------------------


def test_every_parameter_declares_its_label(qtbot, window: MainWindow) -> None:
    for spec in JOBS.values():
        form = window.runs.forms[spec.name]
        for param in spec.params:
            assert param.label and param.label[0].isupper(), (spec.name, param.name)
            assert form.labels[param.name].text() == f"{param.label}:"
            assert form.labels[param.name].buddy() is form.widgets[param.name]
    memory = window.runs.forms["memory"]
    assert memory.widgets["step_mib"].suffix() == " MiB"
    device = memory.widgets["device"].lineEdit()
    assert device.placeholderText() == "empty: the first GPU, else the CPU"


def test_every_row_of_every_form_is_in_sight_at_1280x720(qtbot, window: MainWindow) -> None:
    """The job's form is not a scroll area to explore: each row, label and field, lies wholly inside the
    window's default layout. (Fit's nine rows in one column needed 248 px, of which its scroll area had 77.)"""
    from PySide6.QtWidgets import QLabel

    def rows_cut(job: str) -> list[str]:
        form = window.runs.forms[job]
        viewport = window.runs.form_scroll.viewport()
        cut = []
        for param in JOBS[job].params:
            if not form.is_relevant(param.name):
                continue
            field = form.problem_labels[param.name].parentWidget()  # the editor above its problem
            label = next(lb for lb in form.findChildren(QLabel) if lb.buddy() is form.widgets[param.name])
            for part in (label, field):
                box = part.rect().translated(part.mapTo(viewport, part.rect().topLeft()))
                if not viewport.rect().contains(box) or part.visibleRegion().boundingRect().size() != part.size():
                    cut.append(param.name)
        return sorted(set(cut))

    for job in JOBS:
        window.runs.select_job(job)
        settle(qtbot, window)
        assert rows_cut(job) == [], f"{job}: rows out of sight"
        assert window.runs.form_scroll.verticalScrollBar().maximum() == 0, f"{job}: its form scrolls"
    window.runs.select_job("fit")
    window.runs.form().set_value("model", "cnn")  # its tenth row, the image size
    settle(qtbot, window)
    assert rows_cut("fit") == [] and window.runs.form_scroll.verticalScrollBar().maximum() == 0


FIT_RESULT = {  # as the fit job returns it on 2 logical CPUs with the default cross-device ops
    "kind": "training", "model": "dense", "parameters": 2, "devices": ["/CPU:0", "/CPU:1"], "replicas_in_sync": 2,
    "global_batch_size": 10, "batch_per_replica": 5, "steps_per_epoch": 40, "input": "dataset",
    "loss": [0.074, 0.0028, 0.000108, 0.000004, 0.0000003, 0.0, 0.0, 0.0], "learning_rate": 0.01,
    "learning_rate_rule": "fixed", "strategy": "MirroredStrategy", "cross_device_ops": "HierarchicalCopyAllReduce",
    "requested_cross_device_ops": "NcclAllReduce", "evaluate": {"loss": 0.0},
    "notes": ["NcclAllReduce cannot run here (NCCL all-reduces between NVIDIA GPUs only, not over /CPU:0, "
              "/CPU:1); using HierarchicalCopyAllReduce instead — choose it (or ReductionToOneDevice) explicitly "
              "on this machine"]}


def test_the_fit_result_reads_whole_at_1280x720(qtbot, window: MainWindow) -> None:
    """Caption and notes whole, the loss plot at least 120 px tall, the loss table's columns whole with a few of
    its rows — all in sight, not merely laid out (the old layout gave them heights the window could not show,
    so the caption's last lines and most of the plot were cut off at the window's edge)."""
    window.runs.select_job("fit")
    view = window.runs.result
    view.show_outcome(JobOutcome("fit", {}, {}, status="ok", result=FIT_RESULT))
    settle(qtbot, window)
    caption = view.caption
    assert "explicitly on this machine" in caption.text()
    assert caption.height() >= caption.heightForWidth(caption.width()), "the caption's last lines are cut"
    # Its first lines whole in its strip, the rest a scroll away there (issue 41: the output's 8 lines take the
    # height that showed all of it).
    from readable import cut_captions
    assert not cut_captions(view)
    strip = view.caption_scroll
    whole = caption.visibleRegion().boundingRect().size() == caption.size()
    assert whole or strip.verticalScrollBar().maximum() > 0
    (plot,) = view.plots
    assert plot.viewport().visibleRegion().boundingRect().height() >= 120
    (table,) = view.tables
    assert table.horizontalHeader().length() <= table.viewport().width()
    shown_rows = table.viewport().visibleRegion().boundingRect().height() // table.rowHeight(0)
    assert shown_rows >= 3


def test_parameters_of_another_variant_are_hidden(qtbot, window: MainWindow) -> None:
    window.runs.select_job("fit")
    form = window.runs.form()
    settle(qtbot, window)
    assert not form.widgets["image_size"].isVisible() and form.widgets["model"].isVisible()
    form.set_value("model", "cnn")
    settle(qtbot, window)
    assert form.widgets["image_size"].isVisible()


def test_out_of_range_values_are_refused_with_the_range_named(qtbot, window: MainWindow) -> None:
    window.runs.set_can_run(True)
    window.runs.select_job("fit")
    form = window.runs.form()
    requested: list[tuple[str, dict]] = []
    window.runs.runRequested.disconnect(window.controller.run)  # no runtime here: only what the form sends matters
    window.runs.runRequested.connect(lambda job, params: requested.append((job, params)))
    form.widgets["epochs"].lineEdit().selectAll()
    qtbot.keyClicks(form.widgets["epochs"].lineEdit(), "100000")
    assert form.widgets["epochs"].value() == 100000  # taken as typed, not cut to 10
    qtbot.mouseClick(window.runs.run_button, Qt.MouseButton.LeftButton)
    assert requested == []
    assert "between 1 and 10000" in window.runs.form_error.text()
    assert form.problem_labels["epochs"].isVisible()
    form.set_value("epochs", 3)
    qtbot.mouseClick(window.runs.run_button, Qt.MouseButton.LeftButton)
    assert requested and requested[0][1]["epochs"] == 3
    # the configuration's logical CPUs too: refused with the limit, not silently cut
    window.config_panel.inputs["cpu_devices"].lineEdit().selectAll()
    qtbot.keyClicks(window.config_panel.inputs["cpu_devices"].lineEdit(), "100000")
    assert window.config_panel.inputs["cpu_devices"].value() == 100000
    assert "between 1 and 64" in window.config_panel.field_problems["cpu_devices"].text()
    assert not window.config_panel.apply_button.isEnabled()


def test_snippet_and_code_are_monospace_with_copy(qtbot, window: MainWindow) -> None:
    from PySide6.QtGui import QFontInfo, QGuiApplication
    from PySide6.QtWidgets import QPlainTextEdit, QPushButton

    for dialog in (window.config_panel.show_snippet(), window.runs.show_code()):
        text = dialog.findChild(QPlainTextEdit)
        assert QFontInfo(text.font()).fixedPitch()
        copy = next(b for b in dialog.findChildren(QPushButton) if b.text() == "Copy")
        qtbot.mouseClick(copy, Qt.MouseButton.LeftButton)
        assert QGuiApplication.clipboard().text() == text.toPlainText()
        dialog.close()
    for box in window.findChildren(QMessageBox):
        box.close()


# -- history ------------------------------------------------------------------------------------------------


def test_history_shows_date_parameters_and_configuration_and_offers_run_again_and_apply(qtbot,
                                                                                         window: MainWindow) -> None:
    from tf_device_panel.core.config import DeviceConfig

    config = DeviceConfig(cpu_devices=3, soft_placement=False)
    recorder = window.history.new_run("fit", {"epochs": 4, "model": "cnn", "devices": ""}, config.to_json(), None)
    recorder.finish(status="ok", result=RESULTS["fit"], error=None, duration_s=2.5)
    panel = window.history_panel
    panel.refresh()
    assert panel.wait_until_loaded()
    row = {panel.table.horizontalHeaderItem(c).text(): panel.table.item(0, c).text()
           for c in range(panel.table.columnCount())}
    assert row["Job"] == "fit" and row["Date"].count(":") == 2 and row["Duration"] == "2.50 s"
    details = panel.details.text()  # the selected run, written out below the table
    assert "epochs=4, model=cnn" in details
    assert "3 logical CPUs" in details and "soft placement off" in details
    window.docks["history"].show()
    settle(qtbot, window)
    assert panel.table.horizontalScrollBar().maximum() == 0

    dialog = panel.open_run(recorder.run_id)
    assert "epochs=4, model=cnn" in dialog.details.text() and "3 logical CPUs" in dialog.details.text()
    assert dialog.result_view.tables  # the recorded result, drawn again
    window.runs.set_can_run(False, "no runtime in this test")
    qtbot.mouseClick(dialog.run_again_button, Qt.MouseButton.LeftButton)
    assert window.runs.current_job == "fit" and window.runs.form().values()["epochs"] == 4
    assert window.runs.form().values()["model"] == "cnn"
    applied: list[DeviceConfig] = []
    window.manager.apply = applied.append  # the restart itself is the manager's; here, what it is given
    qtbot.mouseClick(dialog.apply_button, Qt.MouseButton.LeftButton)
    assert applied == [config] and window.config_panel.config() == config
    dialog.close()
    window.docks["history"].hide()
