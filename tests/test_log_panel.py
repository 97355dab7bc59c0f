"""The placement log under pytest-qt: it follows new output unless the person scrolled up, filters without
scrolling sideways, and its text filter and order apply to the placement table too."""

from __future__ import annotations

import pytest

pytest.importorskip("PySide6")
from PySide6.QtCore import Qt
from tf_device_panel.core.protocol import events
from tf_device_panel.core.protocol.events import Event
from tf_device_panel.gui.docks.log_panel import LogPanel


def lines(start: int, count: int, text: str = "output") -> list[Event]:
    return [events.Log(stream="stdout", kind="output", text=f"{text} line {n} " + "wide " * 60, job_id="job-1")
            for n in range(start, start + count)]


def placed(op: str, op_type: str, device: str, times: int = 1) -> list[Event]:
    return [events.Placement(op=op, op_type=op_type, kernel=op_type, short_device=device,
                             device=f"/job:localhost/replica:0/task:0/device:{device[1:]}",
                             mode="eager", line=f"Executing op {op_type} in device {device}")] * times


@pytest.fixture
def panel(qtbot) -> LogPanel:
    widget = LogPanel()
    qtbot.addWidget(widget)
    widget.resize(900, 300)
    widget.show()
    qtbot.waitExposed(widget)
    return widget


def test_the_log_follows_new_output_after_filtering(qtbot, panel: LogPanel) -> None:
    panel.add_events(lines(0, 200))
    assert panel.is_at_end()
    qtbot.keyClicks(panel.filter_text, "line 1")
    assert panel.view.horizontalScrollBar().value() == 0  # filtering never scrolls the lines' beginnings away
    panel.add_events(lines(200, 200))
    assert panel.is_at_end() and not panel.jump_button.isVisible()
    assert panel.view.horizontalScrollBar().value() == 0
    panel.filter_text.clear()
    assert panel.is_at_end()


def test_scrolling_up_stops_following_until_jump_to_end(qtbot, panel: LogPanel) -> None:
    panel.add_events(lines(0, 300))
    panel.view.verticalScrollBar().setValue(10)  # the person reads something further up
    assert not panel.following
    panel.add_events(lines(300, 50))
    assert panel.view.verticalScrollBar().value() == 10 and panel.jump_button.isVisible()
    qtbot.mouseClick(panel.jump_button, Qt.MouseButton.LeftButton)
    assert panel.is_at_end() and not panel.jump_button.isVisible()
    panel.add_events(lines(350, 50))
    assert panel.is_at_end()


def test_the_text_filter_and_order_apply_to_the_placement_table(qtbot, panel: LogPanel) -> None:
    panel.add_events(placed("_Arg", "_Arg", "/CPU:0", 3) + placed("MatMul", "MatMul", "/CPU:1", 5)
                     + placed("MatMul_1", "MatMul", "/CPU:0", 5) + placed("_Retval", "_Retval", "/CPU:0", 1))
    table = panel.table.model()

    def shown() -> list[tuple[str, str, int]]:
        return [(table.index(r, 0).data(), table.index(r, 2).data(), table.index(r, 3).data())
                for r in range(table.rowCount())]

    # by count, then device
    assert shown() == [("MatMul_1", "/CPU:0", 5), ("MatMul", "/CPU:1", 5), ("_Arg", "/CPU:0", 3),
                       ("_Retval", "/CPU:0", 1)]
    qtbot.keyClicks(panel.filter_text, "matmul")
    assert [row[0] for row in shown()] == ["MatMul_1", "MatMul"]
    panel.filter_text.setText("cpu:1")
    assert shown() == [("MatMul", "/CPU:1", 5)]


def test_the_next_runtimes_start_up_never_follows_the_jobs_last_line(qtbot, panel: LogPanel) -> None:
    """Issue 33: after every job the log ended on the next spare's start-up ("failed call to cuInit")."""
    cuinit = "E0000 00:00:1795663871.545337    7979 cuda_executor.cc:1228] failed call to cuInit: INTERNAL: CUDA error"
    panel.add_events([events.Log(stream="stdout", kind="output", text="the job's last line", job_id="job-1"),
                      events.Log(stream="stderr", kind="error", text=cuinit, source="tensorflow"),
                      events.JobFinished(job="matmul", status="ok", job_id="job-1"),
                      events.Log(stream="stderr", kind="tf-info", text="I0000 spare: cpu_feature_guard.cc")])
    shown = panel.view.toPlainText().splitlines()
    assert "the job's last line" in shown and cuinit not in shown and not any("spare" in line for line in shown)
    assert panel.startup_toggle.isVisible() and panel.startup_toggle.text() == "next runtime starting (2 lines)"
    assert not panel.startup_view.isVisible()  # collapsed
    qtbot.mouseClick(panel.startup_toggle, Qt.MouseButton.LeftButton)
    assert panel.startup_view.isVisible() and panel.startup_view.toPlainText().splitlines()[0] == cuinit
    # The next job: its runtime's start-up comes first, before its own first line.
    panel.add_events([events.JobStarted(job="fit", job_id="job-2"),
                      events.Log(stream="stdout", kind="output", text="\x1b[1mEpoch 1/2\x1b[0m", job_id="job-2")])
    shown = panel.view.toPlainText().splitlines()
    assert shown.index(cuinit) < shown.index("Epoch 1/2")  # colour codes drawn away in the log too
    assert not panel.startup_toggle.isVisible() and not panel.startup_view.isVisible()
