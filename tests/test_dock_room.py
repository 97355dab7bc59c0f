"""Issue 23 items 2 and 3: docks opened beside the Runs panel never squeeze its forms, and no panel scrolls
sideways (Configuration after 0 + Tab in Logical CPU devices, the Placement log, Machines). Real widgets,
offscreen, no runtime."""

from __future__ import annotations

import time

import pytest

pytest.importorskip("PySide6")
from PySide6.QtCore import Qt
from PySide6.QtGui import QFont, QFontMetrics
from PySide6.QtTest import QTest
from PySide6.QtWidgets import QApplication, QLabel
from tf_device_panel.core.catalogue import JOBS
from tf_device_panel.core.lab.machines import GpuStatus, MachineStatus
from tf_device_panel.core.protocol import events
from tf_device_panel.gui.shell.main_window import MainWindow

SIZES = ((1280, 720), (1920, 1080))


def settle(qtbot) -> None:
    for _ in range(3):
        QApplication.processEvents()
        qtbot.wait(10)


def squeezed(qtbot, win: MainWindow) -> list[str]:
    """What of the Runs panel is cut: a label or field not wholly in sight or narrower than it needs, a job's
    title, the progress bar."""
    runs = win.runs
    found = []
    for job in JOBS:
        runs.select_job(job)
        settle(qtbot)
        form = runs.forms[job]
        for name in form.shown_rows():
            for part in (form.labels[name], form.widgets[name]):
                whole = part.visibleRegion().boundingRect().size() == part.size()
                if not whole or part.width() < part.minimumSizeHint().width():
                    found.append(f"{job}.{name}")
    bold = QFont(runs.job_list.font())
    bold.setBold(True)
    widest = max(QFontMetrics(bold).horizontalAdvance(spec.title) for spec in JOBS.values())
    if runs.job_list.viewport().width() < widest + 12:
        found.append("job titles")
    if runs.progress.width() < runs.progress.minimumWidth():
        found.append("progress")
    return sorted(set(found))


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("dock", ["doctor", "history", "machines"])
def test_a_dock_beside_runs_never_squeezes_its_forms(qtbot, window: MainWindow, size, dock) -> None:
    window.resize(*size)
    window.dock_layout.reset_layout()
    window.resize(*size)
    settle(qtbot)
    assert squeezed(qtbot, window) == []
    window.docks[dock].show()
    settle(qtbot)
    assert squeezed(qtbot, window) == [], f"with {dock} open"
    assert window.docks[dock].isVisible() and not window.docks[dock].visibleRegion().isEmpty()
    if dock != "machines":
        assert window.docks[dock].width() >= (390 if size[0] < 1920 else 540)  # still wide enough to read
        if True:  # the forms keep their two columns beside it, at 1280 too
            window.runs.select_job("fit")
            settle(qtbot)
            assert window.runs.forms["fit"].columns == 2
    # after Reset layout the training forms stand in two columns again
    window.dock_layout.reset_layout()
    window.resize(*size)
    settle(qtbot)
    window.runs.select_job("fit")
    settle(qtbot)
    assert window.runs.forms["fit"].columns == 2 and window.runs.form_scroll.verticalScrollBar().maximum() == 0


def test_configuration_never_scrolls_sideways_after_zero_and_tab(qtbot, window: MainWindow) -> None:
    window.resize(1280, 720)
    window.dock_layout.reset_layout()
    window.resize(1280, 720)
    window.docks["config"].raise_()
    settle(qtbot)
    spin = window.config_panel.inputs["cpu_devices"]
    spin.setFocus()
    spin.selectAll()
    QTest.keyClicks(spin, "0")
    QTest.keyClick(spin, Qt.Key.Key_Tab)
    settle(qtbot)
    bar = window.config_panel.scroll_area.horizontalScrollBar()
    assert window.config_panel.problems and bar.maximum() == 0 and bar.value() == 0
    assert window.config_panel.width() <= window.config_panel.scroll_area.viewport().width()
    for label in window.config_panel.findChildren(QLabel):
        if label.isVisible() and label.text():
            assert label.visibleRegion().boundingRect().width() == label.width(), label.text()
    window.apply_current()  # refused: the problem is named, nothing shifts
    for box in window.findChildren(__import__("PySide6.QtWidgets", fromlist=["QMessageBox"]).QMessageBox):
        box.close()
    window.dock_layout.reset_layout()
    settle(qtbot)
    assert bar.maximum() == 0 and bar.value() == 0


def test_the_placement_log_and_machines_never_scroll_sideways(qtbot, window: MainWindow) -> None:
    window.resize(1280, 720)
    long_line = "MatMul: (MatMul): /job:localhost/replica:0/task:0/device:CPU:0 " + "x" * 400
    window.panels["log"].add_events([events.Log(stream="stderr", kind="placement", text=long_line)])
    window.docks["log"].raise_()
    settle(qtbot)
    assert window.panels["log"].view.horizontalScrollBar().maximum() == 0
    panel = window.panels["machines"]
    window.docks["machines"].show()
    settle(qtbot)
    now = time.time()
    panel.show_machines([MachineStatus(f"gpu{n:02d}:9848", name=f"gpu{n:02d}.lab", last_sample=now,
                                       gpus=[GpuStatus("0", "Fake GPU", f"GPU-{n}", 2**30, 16 * 2**30, 0.4)])
                         for n in range(8)], now)
    settle(qtbot)
    scroll = panel.grid_scroll
    assert scroll.horizontalScrollBar().maximum() == 0
    assert panel.grid_host.width() <= scroll.viewport().width() and panel.fitting_columns() >= 1


def test_machines_says_no_answer_yet_when_there_never_was_one(qtbot, window: MainWindow) -> None:
    machines = window.panels["machines"]
    machines._failed("connection refused")
    assert "no answer yet" in machines.status.text() and "last answer" not in machines.status.text()


def test_with_history_open_at_1280_the_result_caption_is_never_cut(qtbot, window: MainWindow) -> None:
    from test_window_layout import FIT_RESULT as fit
    from tf_device_panel.core.client.run_record import JobOutcome

    window.resize(1280, 720)
    window.dock_layout.reset_layout()
    window.resize(1280, 720)
    window.docks["history"].show()
    window.runs.select_job("fit")
    window.runs.result.show_outcome(JobOutcome("fit", {}, {}, status="ok", result=fit))
    settle(qtbot)
    view = window.runs.result
    caption = view.caption
    assert caption.height() >= caption.heightForWidth(caption.width())
    bar = view.presentation_page.verticalScrollBar()
    whole = caption.visibleRegion().boundingRect().size() == caption.size()
    strip = view.caption_scroll.verticalScrollBar()
    assert whole or bar.maximum() > 0 or strip.maximum() > 0  # in sight, or a scroll away: never cut off for good
    bar.setValue(bar.maximum())
    assert view.plots[0].height() >= 120
