"""Issue 23 item 8: a History record opens the way the live run looked — a cancelled fit's epochs, its
placements with every column in sight, its log from the start (real widgets offscreen, a real run record)."""

from __future__ import annotations

import pytest

pytest.importorskip("PySide6")
from PySide6.QtWidgets import QApplication
from tf_device_panel.core.client.history import RunHistory
from tf_device_panel.core.client.records import RunError
from tf_device_panel.core.config import DeviceConfig
from tf_device_panel.core.protocol import events
from tf_device_panel.gui.docks.history_panel import HistoryPanel

PLACED = ("I0000 00:00:1795270979.856597 5908 execute.cc:1775] Executing op MatMul in device "
          "/job:localhost/replica:0/task:0/device:CPU:0")


def record_cancelled_fit(history: RunHistory, epochs: int = 31, log_placement: bool = True) -> str:
    config = DeviceConfig(cpu_devices=2, log_placement=log_placement)
    recorder = history.new_run("fit", {"epochs": 100}, config.to_json(), None)
    job_id = "9-1-1"
    recorder.summary.job_id = job_id
    recorder.append(events.JobStarted(job="fit", params={"epochs": 100}, job_id=job_id))
    if log_placement:
        for _ in range(3):
            recorder.append(events.Log(stream="stderr", kind="placement", text=PLACED, job_id=job_id))
    for epoch in range(1, epochs + 1):
        recorder.append(events.Log(stream="stdout", kind="output", job_id=job_id,
                                   text=f"Epoch {epoch}/100 " + "=" * 30 + f" loss: {1 / epoch:.4f}"))
        recorder.append(events.Metric(name="loss", step=epoch, value=1 / epoch, job_id=job_id))
    recorder.append(events.Error(error_type="Cancelled", message="cancelled by the user", job_id=job_id))
    recorder.append(events.JobFinished(job="fit", status="cancelled", duration_s=9.0, job_id=job_id))
    recorder.finish(status="cancelled", result=None, error=RunError(type="Cancelled", message="cancelled by the user"),
                    duration_s=9.0)
    return recorder.run_id


def test_a_cancelled_fit_opens_with_its_epochs_placements_and_log_from_the_start(qtbot) -> None:
    history = RunHistory()
    run_id = record_cancelled_fit(history)
    panel = HistoryPanel(history)
    qtbot.addWidget(panel)
    dialog = panel.open_run(run_id)
    qtbot.addWidget(dialog)
    dialog.resize(1400, 900)  # as on a 1920×1080 screen
    qtbot.waitExposed(dialog)
    QApplication.processEvents()
    view = dialog.result_view
    assert view.tables and view.tables[0].rowCount() == 31  # all 31 epochs, not only "Cancelled"
    (curve,) = view.plots[0].listDataItems()
    assert len(curve.xData) == 31 and "Cancelled" in view.caption.text()
    log = dialog.log
    assert log.model.rows and "No placements" not in log.summary.text()
    table = log.table
    for column in (2, 3):  # Device and Count in sight
        rect = table.visualRect(table.model().index(0, column))
        assert table.viewport().rect().contains(rect), column
    bar = log.view.verticalScrollBar()
    assert bar.value() == 0 and log.view.horizontalScrollBar().value() == 0  # from its start, not the far right
    assert log.view.firstVisibleBlock().text() == "[panel] job fit started"  # the first line
    dialog.close()


def test_a_record_without_placements_says_why(qtbot) -> None:
    history = RunHistory()
    run_id = record_cancelled_fit(history, epochs=2, log_placement=False)
    panel = HistoryPanel(history)
    qtbot.addWidget(panel)
    dialog = panel.open_run(run_id)
    qtbot.addWidget(dialog)
    assert "Log device placement was off" in dialog.log.summary.text()
    dialog.close()
