"""The window under pytest-qt (offscreen) with real TensorFlow runtimes behind it."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import numpy as np
import psutil
import pytest
from helpers import ROOT, wait_for_message

pytest.importorskip("PySide6")
from PySide6.QtCore import Qt, QTimer
from PySide6.QtWidgets import QMessageBox
from tf_device_panel.core.client.session import JobEnded
from tf_device_panel.core.config import DeviceConfig, to_python_snippet
from tf_device_panel.core.devices.nvml import GpuSnapshot
from tf_device_panel.core.protocol import events
from tf_device_panel.gui.shell.main_window import MainWindow
from tf_device_panel.gui.views.log_view import MAX_LOG_LINES

READY_TIMEOUT_MS = 120_000


def dismiss_notices(win: MainWindow) -> list[str]:
    """Close the window's open notices as a user would, and return their titles."""
    boxes = [box for box in win.findChildren(QMessageBox, "notice") if box.isVisible()]
    for box in boxes:
        box.close()
    return [box.windowTitle() for box in boxes]


def apply_and_wait(qtbot, win: MainWindow, **changes) -> None:
    win.config_panel.set_config(win.config_panel.config().with_changes(**changes))
    qtbot.mouseClick(win.config_panel.apply_button, Qt.MouseButton.LeftButton)
    # "Run", not "Run when ready": the window has taken the ready state (Run is pressable while it warms too)
    qtbot.waitUntil(lambda: win.manager.state == "ready" and win.runs.run_button.isEnabled()
                    and win.runs.run_button.text() == "Run", timeout=READY_TIMEOUT_MS)


def run_and_wait(qtbot, win: MainWindow, job: str, timeout: int = 120_000, **params) -> None:
    win.runs.select_job(job)
    for name, value in params.items():
        win.runs.form().set_value(name, value)
    with wait_for_message(qtbot, win.controller, JobEnded, timeout):
        qtbot.mouseClick(win.runs.run_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: not win.runs.stop_button.isEnabled(), timeout=5000)


def table_values(win: MainWindow) -> list[list[str]]:
    table = win.runs.result.tables[0]
    return [[table.item(r, c).text() for c in range(table.columnCount())] for r in range(table.rowCount())]


def placements(win: MainWindow) -> set[tuple[str, str]]:
    return {(row[1], row[2]) for row in win.panels["log"].model.rows}


def test_replicate_on_two_logical_cpus_end_to_end(qtbot, window: MainWindow) -> None:
    apply_and_wait(qtbot, window, cpu_devices=2)
    # The Devices panel lists the ready report when its event reaches it, which may be a batch after the
    # manager's state says ready (a CI run read the tree still empty).
    qtbot.waitUntil(lambda: window.panels["devices"].tree.topLevelItem(1) is not None, timeout=10_000)
    logical = window.panels["devices"].tree.topLevelItem(1)
    assert [logical.child(i).text(0) for i in range(logical.childCount())] == ["/CPU:0", "/CPU:1"]
    assert "TensorFlow sees no GPU" in window.panels["devices"].note.text()
    run_and_wait(qtbot, window, "replicate")
    assert table_values(window) == [["44", "56"], ["98", "128"]]
    assert {("MatMul", "/CPU:0"), ("MatMul", "/CPU:1"), ("AddN", "/CPU:0")} <= placements(window)
    assert "/CPU:1" in window.panels["log"].summary.text()
    window.history_panel.refresh()
    assert window.history_panel.wait_until_loaded()
    assert window.history_panel.table.item(0, 1).text() == "replicate"
    dialog = window.history_panel.open_run(window.history_panel.table.item(0, 1).data(Qt.ItemDataRole.UserRole))
    assert ("MatMul", "/CPU:1") in {(row[1], row[2]) for row in dialog.log.model.rows}
    dialog.close()


def test_soft_placement_fallback_is_highlighted_and_hard_placement_shows_tf_error(qtbot, window: MainWindow) -> None:
    apply_and_wait(qtbot, window)
    run_and_wait(qtbot, window, "matmul", device="/GPU:2")
    assert table_values(window) == [["22", "28"], ["49", "64"]]
    assert window.panels["log"].fallback_banner.isVisible() and "/GPU:2" in window.panels["log"].fallback_banner.text()
    assert any(row[4] for row in window.panels["log"].model.rows if row[1] == "MatMul")
    assert "soft-placement fallback" in window.runs.result.caption.text()

    apply_and_wait(qtbot, window, soft_placement=False)
    run_and_wait(qtbot, window, "matmul", device="/GPU:2")
    error = window.runs.result.error  # TF's whole message, wrapped; its traceback a click away
    assert error.isVisible() and error.summary.full_text().startswith("InvalidArgumentError: ")
    assert "'/GPU:2'" in error.summary.full_text()  # the short spelling, the full one in the details
    assert "/job:localhost/replica:0/task:0/device:GPU:2" in error.detail.toPlainText()
    assert window.runs.status.text().startswith("Failed")


def test_validation_blocks_apply_and_stale_marker_follows_changes(qtbot, window: MainWindow) -> None:
    apply_and_wait(qtbot, window)
    panel = window.config_panel
    assert not window.session.is_stale and "STALE" not in window.status.runtime_label.text()
    # The status bar said "all GPUs" on a machine with none (CI has none; a GPU machine checks the other branch).
    has_gpu = any(d["device_type"] == "GPU" for d in window.manager.devices.physical)
    assert ("all GPUs" in window.status.runtime_label.text()) == has_gpu
    assert ("no GPU on this machine" in window.status.runtime_label.text()) == (not has_gpu)
    # A passing message no longer takes the runtime's state out of sight.
    state = window.status.runtime_label.text()
    window.status.flash("Saved /tmp/profile.json")
    assert window.status.message_label.full_text() == "Saved /tmp/profile.json"
    assert window.status.runtime_label.text() == state
    panel.inputs["cpu_devices"].setValue(3)
    assert window.session.is_stale and "STALE" in window.status.runtime_label.text()
    assert "Apply" in panel.stale_label.text()
    apply_and_wait(qtbot, window)
    assert not window.session.is_stale and "STALE" not in window.status.runtime_label.text()

    panel.set_config(DeviceConfig(memory_growth=True, virtual_gpus={0: (1024,)}))
    growth = panel.field_problems["memory_growth"]
    assert growth.isVisible() and "virtual GPUs" in growth.text()
    assert "GPU 0 does not exist" in panel.field_problems["visible_gpus"].text()
    assert not panel.apply_button.isEnabled()
    pid = window.manager.runtime.pid
    window.apply_current()  # the menu action too refuses, without starting a runtime
    assert window.manager.runtime.pid == pid
    assert "Fix the configuration problems" in window.status.notices[-1]
    assert dismiss_notices(window) == ["TF Device Panel"]


def test_a_scripts_output_is_under_its_result_and_run_waits_for_the_spare(qtbot, window: MainWindow,
                                                                          tmp_path: Path) -> None:
    """Issue 23 items 5 and 6 with a real runtime: Run pressed while the spare warms starts the job once it is
    ready; the script's stdout, its "\\r" progress bar included, is in the Runs panel's console, without
    TensorFlow's placement lines, and the next spare's start-up lines do not push it away."""
    script = tmp_path / "train.py"
    script.write_text("import sys, tensorflow as tf\n"
                      "print('hello from train.py', flush=True)\n"
                      "for step in range(1, 4):\n"
                      "    sys.stdout.write(f'\\rstep {step}/3'); sys.stdout.flush()\n"
                      "print()\n"
                      "print(tf.matmul([[1.0]], [[2.0]]).numpy().tolist())\n"
                      "print('done', flush=True)\n")
    window.config_panel.set_config(window.config_panel.config().with_changes(cpu_devices=2))
    window.apply_current()
    window.runs.select_job("script")
    window.runs.form().set_value("path", str(script))
    with wait_for_message(qtbot, window.controller, JobEnded, READY_TIMEOUT_MS) as finished:
        qtbot.mouseClick(window.runs.run_button, Qt.MouseButton.LeftButton)
        # Asked after the press, not before it: on a busy machine the spare may be ready by the time the press
        # is handled, and the job then starts at once. The job waiting for it is the press's own answer.
        if window.session.pending is not None:
            assert window.runs.run_button.text() == "Starts when ready…"
    assert finished[0].outcome.status == "ok", finished[0].outcome.error
    console = window.runs.console
    lines = console.text().splitlines()
    assert lines[0] == "hello from train.py" and "step 3/3" in lines and lines[-1] == "done"
    assert not any("device:CPU" in line for line in lines)  # placements stay in the Placement log
    qtbot.waitUntil(lambda: window.manager.state == "ready", timeout=READY_TIMEOUT_MS)  # the next spare
    assert console.text().splitlines()[-1] == "done"


def test_stop_cancels_a_running_fit(qtbot, window: MainWindow) -> None:
    apply_and_wait(qtbot, window, cpu_devices=2)
    window.runs.select_job("fit")
    window.runs.form().set_value("epochs", 10_000)
    window.runs.form().set_value("samples", 2000)
    qtbot.mouseClick(window.runs.run_button, Qt.MouseButton.LeftButton)
    # The bar stays "busy" (maximum 0) until the first progress report, which comes after the first step: Stop
    # then interrupts real training, not the model's set-up.
    qtbot.waitUntil(lambda: window.runs.progress.maximum() > 0, timeout=60_000)
    assert window.runs.stop_button.isEnabled() and not window.runs.run_button.isEnabled()
    with wait_for_message(qtbot, window.controller, JobEnded, 30_000) as finished:
        qtbot.keyClick(window, Qt.Key.Key_Escape)
    assert finished[0].outcome.status == "cancelled", finished[0].outcome.error
    assert window.runs.status.text().startswith("Cancelled")
    # the live graphs marked the job and followed its process's memory while it ran
    memory = window.panels["memory"]
    qtbot.waitUntil(lambda: {"fit started", "fit cancelled"} <= set(memory.marker_labels()), timeout=5000)
    _, rss = memory.history.series["host.runtime_rss_mib"].arrays()
    assert np.nanmax(rss) > 100
    qtbot.waitUntil(lambda: window.runs.run_button.isEnabled(), timeout=5000)


def test_killed_runtime_is_reported_and_restartable(qtbot, window: MainWindow) -> None:
    apply_and_wait(qtbot, window)
    os.kill(window.manager.runtime.pid, signal.SIGKILL)
    qtbot.waitUntil(lambda: "SIGKILL" in window.status.runtime_label.text(), timeout=20_000)
    assert window.status.restart_button.isVisible() and not window.runs.run_button.isEnabled()
    qtbot.mouseClick(window.status.restart_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: window.manager.state == "ready", timeout=READY_TIMEOUT_MS)
    assert not window.status.restart_button.isVisible()


def test_stop_that_must_kill_the_runtime_brings_a_fresh_one(qtbot, window: MainWindow, tmp_path) -> None:
    apply_and_wait(qtbot, window, cpu_devices=2)
    script = tmp_path / "stuck.py"
    script.write_text("import signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\n"
                      "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
                      "print('stuck in C', flush=True)\ntime.sleep(600)\n")
    window.manager.cancel_grace_s = 1.0  # the job cannot stop: waiting longer for it proves nothing
    window.runs.select_job("script")
    window.runs.form().set_value("path", str(script))
    qtbot.mouseClick(window.runs.run_button, Qt.MouseButton.LeftButton)
    # ignoring Ctrl+C and SIGTERM by then: only the kill after the grace period ends it
    qtbot.waitUntil(lambda: any(text == "stuck in C" for _, text in window.panels["log"].entries), timeout=60_000)
    old_pid = window.manager.runtime.pid
    with wait_for_message(qtbot, window.controller, JobEnded, 30_000) as finished:
        qtbot.keyClick(window, Qt.Key.Key_Escape)
        assert window.runs.status.text().startswith("Stopping…") and not window.runs.stop_button.isEnabled()
    assert finished[0].outcome.status == "cancelled"
    assert "did not stop within" in finished[0].outcome.error.message
    # the same configuration comes back by itself, ready for the next run
    qtbot.waitUntil(lambda: window.manager.state == "ready" and window.manager.runtime.pid != old_pid,
                    timeout=READY_TIMEOUT_MS)
    assert window.manager.runtime.config.cpu_devices == 2
    qtbot.waitUntil(window.runs.run_button.isEnabled, timeout=5000)
    assert not window.status.restart_button.isVisible()


def test_log_flood_keeps_the_event_loop_responsive(qtbot, window: MainWindow) -> None:
    lines_at_ticks: list[int] = []  # how many lines the window had taken each time the event loop ran a timer
    timer = QTimer()
    timer.timeout.connect(lambda: lines_at_ticks.append(window.panels["log"].total_lines))
    timer.start(5)
    # Stands in for a run's reader thread (there is no public way to feed events but a real process).
    line = ("I0000 00:00:1795270979.856597 5908 execute.cc:1775] Executing op MatMul in device "
            "/job:localhost/replica:0/task:0/device:CPU:0")

    def flood() -> None:
        for number in range(100_000):
            if number % 2:
                window.controller.pump.put(events.Placement(
                    op="MatMul", op_type="MatMul", kernel="MatMul", short_device="/CPU:0",
                    device="/job:localhost/replica:0/task:0/device:CPU:0", mode="eager", line=line, job_id="flood-1"))
            else:  # a job's lines (a runtime's start-up lines, without a job id, are held apart)
                window.controller.pump.put(events.Log(stream="stderr", kind="tf-info", text=f"line {number}",
                                                      job_id="flood-1"))

    thread = threading.Thread(target=flood)
    thread.start()
    qtbot.waitUntil(lambda: window.panels["log"].total_lines >= 100_000, timeout=60_000)
    thread.join()
    timer.stop()
    # A window that took the flood in one go (or blocked until it ended) never ran its timers in between.
    assert any(0 < lines < 100_000 for lines in lines_at_ticks), "the event loop did not run while the flood arrived"
    assert window.panels["log"].view.blockCount() <= MAX_LOG_LINES
    assert len(window.panels["log"].entries) == MAX_LOG_LINES
    assert window.panels["log"].model.rows[0][3] == 50_000


def test_closing_mid_run_stops_job_and_runtime(qtbot, window: MainWindow) -> None:
    apply_and_wait(qtbot, window)
    window.runs.select_job("fit")
    window.runs.form().set_value("epochs", 10_000)
    qtbot.mouseClick(window.runs.run_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: window.manager.state == "busy", timeout=10_000)
    runtime_pid = window.manager.runtime.pid
    window.close()
    assert not psutil.pid_exists(runtime_pid) or psutil.Process(runtime_pid).status() == psutil.STATUS_ZOMBIE


def test_profiles_open_save_and_snippet(qtbot, window: MainWindow, tmp_path: Path, monkeypatch) -> None:
    warnings = window.status.notices
    broken = tmp_path / "broken.json"
    broken.write_text("{oops")
    assert not window.profiles.open(broken)
    assert "not valid JSON" in warnings[-1]
    assert not window.profiles.save(broken)
    assert broken.read_text() == "{oops" and "left untouched" in warnings[-1]
    good = tmp_path / "good.json"
    good.write_text('{"version": 1, "cpu_devices": 4, "soft_placement": false}')
    assert window.profiles.open(good)
    inputs = window.config_panel.inputs
    assert inputs["cpu_devices"].value() == 4 and not inputs["soft_placement"].isChecked()
    window.config_panel.inputs["cpu_devices"].setValue(2)
    assert window.profiles.save()
    assert '"cpu_devices": 2' in good.read_text()
    dialog = window.config_panel.show_snippet()
    text = dialog.findChild(type(window.panels["log"].view)).toPlainText()
    assert "LogicalDeviceConfiguration()] * 2" in text and "set_soft_device_placement(False)" in text
    dialog.close()
    assert dismiss_notices(window) == ["Cannot open profile", "Profile not saved"]


def test_a_warning_logged_on_another_thread_shows_in_the_window(qtbot, window: MainWindow) -> None:
    message = "GPU 3: temperature unreadable (test)"
    logger = logging.getLogger("tf_device_panel.core.devices.telemetry")
    thread_names: list[str] = []

    def log_like_the_sampler() -> None:
        thread_names.append(threading.current_thread().name)
        logger.info("for the terminal only (test)")
        logger.warning(message)

    worker = threading.Thread(target=log_like_the_sampler, name="test-sampler")
    worker.start()
    worker.join(10)
    qtbot.waitUntil(lambda: message in window.status.message_label.full_text(), timeout=5000)
    assert thread_names == ["test-sampler"]
    assert f"Warning: {message}" in window.status.notices and window.status.warnings_button.isVisible()
    # The INFO record was logged first on the same thread, so it would have arrived first: it was never sent.
    assert not any("for the terminal only" in notice for notice in window.status.notices)
    qtbot.mouseClick(window.status.warnings_button, Qt.MouseButton.LeftButton)
    box = window.findChild(QMessageBox, "notice")
    assert box is not None and message in box.text()
    box.close()
    handler = window.log_handler
    assert handler in logging.getLogger("tf_device_panel").handlers
    window.close()
    assert handler not in logging.getLogger("tf_device_panel").handlers


def test_the_gui_process_never_imports_tensorflow(tmp_path: Path) -> None:
    """A fresh process drives the window through a runtime's start and a job, then lists what it imported. (Asked
    in this process the question depends on what other tests imported, and alone on what this one did.) It
    fails when any window code, at import or on the way (a lazy import in a handler), imports TensorFlow."""
    script = textwrap.dedent("""
        import json, sys, time
        from PySide6.QtCore import QSettings
        from PySide6.QtWidgets import QApplication
        from tf_device_panel.core.client.session import JobEnded
        from tf_device_panel.core.config import DeviceConfig
        from tf_device_panel.gui.shell.main_window import MainWindow

        app = QApplication([])
        win = MainWindow(settings=QSettings(sys.argv[1], QSettings.Format.IniFormat), start_runtime=False)
        win.show()
        finished = []
        win.controller.subscribe(finished, JobEnded, lambda ended: finished.append(ended.outcome))

        def wait(condition):
            deadline = time.monotonic() + 120
            while not condition() and time.monotonic() < deadline:
                app.processEvents()
                time.sleep(0.02)

        win.apply(DeviceConfig(cpu_devices=2))
        wait(lambda: win.manager.state == "ready")
        win.controller.run("replicate", {})
        wait(lambda: finished)
        app.processEvents()
        win.close()
        print(json.dumps({"status": finished[0].status if finished else None,
                          "tensorflow": sorted(m for m in sys.modules if m.split(".")[0] in ("tensorflow", "keras"))}))
    """)
    done = subprocess.run([sys.executable, "-c", script, str(tmp_path / "settings.ini")], cwd=ROOT,
                          capture_output=True, text=True, timeout=240,
                          env={**os.environ, "QT_QPA_PLATFORM": "offscreen"})
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["status"] == "ok", done.stderr[-3000:]  # the window really ran a job
    assert report["tensorflow"] == []


def test_result_views_for_every_result_kind(qtbot) -> None:
    from tf_device_panel.core.client.run_record import JobOutcome
    from tf_device_panel.gui.views.result_view import ResultView

    view = ResultView()
    qtbot.addWidget(view)
    benchmark = {"kind": "table", "title": "Matmul throughput (GFLOP/s)", "repeats": 2,
                 # the columns and plot the benchmark job returns with its rows
                 "columns": ["device", "dtype", "size", "gflops", "seconds"],
                 "plot": {"x": "size", "y": "gflops", "series": ["device", "dtype"]}, "rows": [
        {"device": "/CPU:0", "dtype": "float32", "size": 64, "gflops": 3.5, "seconds": 0.01},
        {"device": "/CPU:0", "dtype": "float16", "size": 64, "gflops": None, "seconds": None, "unsupported": "x"},
        {"device": "NumPy (CPU)", "dtype": "float32", "size": 64, "gflops": 4.0, "seconds": 0.01}]}
    view.show_outcome(JobOutcome("benchmark", {}, {}, status="ok", result=benchmark))
    assert view.tables[0].rowCount() == 3 and view.tables[0].item(1, 3).text() == "—"
    assert len(view.plots[0].listDataItems()) == 2
    memory = {"kind": "memory", "short_device": "/CPU:1", "step_mib": 8, "notes": ["n"], "rows": [
        {"step": 0, "label": "before", "allocated_mib": 0, "current_mib": None, "peak_mib": None, "rss_mib": 500.0},
        {"step": 1, "label": "allocated", "allocated_mib": 8, "current_mib": None, "peak_mib": None,
         "rss_mib": 508.0}]}
    view.show_outcome(JobOutcome("memory", {}, {}, status="ok", result=memory))
    assert view.tables[0].rowCount() == 2 and "/CPU:1" in view.caption.text()
    cluster = {"kind": "cluster", "strategy": "ParameterServerStrategy", "workers": 2,
               "addresses": {"ps": ["127.0.0.1:1"]}, "variables": {"weight:0": "/job:ps/replica:0/task:0/device:CPU:0"},
               "values": {"weight:0": 0.6}, "loss": [0.5, 0.4], "steps": 2, "steps_per_s": 9.0,
               "timings": {"coordinator": {"connect_s": 0.1, "train_s": 0.2}}}
    view.show_outcome(JobOutcome("parameter-server", {}, {}, status="ok", result=cluster))
    assert view.tables[0].item(0, 1).text().startswith("/job:ps/")


def test_a_new_result_kind_shows_in_the_window_and_on_the_command_line(qtbot, tmp_path: Path) -> None:
    from tf_device_panel.core.cli.output import format_result
    from tf_device_panel.core.client.run_record import JobOutcome
    from tf_device_panel.core.results import PRESENTERS, Column, Plot, Presentation, Series, Table, presenter
    from tf_device_panel.gui.views.result_view import ResultView

    @presenter("latency")  # a kind neither front end has heard of
    def latency(result: dict) -> Presentation:
        samples = result["ms"]
        return Presentation(f"latency on {result['device']}", (f"{len(samples)} samples",), (),
                            (Table((Column("sample", "right"), Column("ms", "right", "number")),
                                   tuple(enumerate(samples, 1))),),
                            (Plot("sample", "ms", (Series("/CPU:1 latency", (1.0, 2.0, 3.0), tuple(samples)),)),))

    view = ResultView()
    qtbot.addWidget(view)
    try:
        outcome = JobOutcome("ping", {}, {}, status="ok", result={"kind": "latency", "device": "/CPU:1",
                                                                   "ms": [0.25, 12.5, 3.0]})
        assert format_result(outcome) == ["result: latency on /CPU:1", "  sample    ms", "       1  0.25",
                                          "       2  12.5", "       3   3.0", "  3 samples"]
        view.show_outcome(outcome)
    finally:
        del PRESENTERS["latency"]
    view.resize(700, 300)
    view.show()
    qtbot.waitUntil(view.isVisible, timeout=2000)
    assert "latency on" in view.caption.text() and "3 samples" in view.caption.text()
    (table,) = view.tables
    assert [table.horizontalHeaderItem(c).text() for c in range(2)] == ["sample", "ms"]
    assert [table.item(r, 1).text() for r in range(3)] == ["0.25", "12.5", "3.0"]
    assert table.height() < 200  # sized to its three rows, not stretched over the page
    (plot,) = view.plots
    (curve,) = plot.listDataItems()
    assert list(curve.yData) == [0.25, 12.5, 3.0] and curve.name() == "/CPU:1 latency"
    view.grab().save(str(tmp_path / "new-kind.png"))

    # A job may also return the pieces themselves: no presenter at all.
    pieces = Presentation("pieces", warnings=("look here",),
                          tables=(Table((Column("k"), Column("v", "right")), (("a", 1),)),))
    outcome = JobOutcome("ping", {}, {}, status="ok", result=pieces.to_result())
    assert format_result(outcome) == ["result: pieces", "  ⚠ look here", "  k  v", "  a  1"]
    view.show_outcome(outcome)
    assert [view.tables[0].item(0, c).text() for c in range(2)] == ["a", "1"] and view.plots == []
    assert "look here" in view.caption.text()


def test_show_code_dialog(qtbot, window: MainWindow) -> None:
    window.runs.select_job("custom-loop")
    assert "Custom training loop" in window.runs.description.text()
    dialog = window.runs.show_code()
    assert "compute_average_loss" in dialog.findChild(type(window.panels["log"].view)).toPlainText()
    dialog.close()
    window.runs.select_job("parameter-server")
    dialog = window.runs.show_code()
    code = dialog.findChild(type(window.panels["log"].view)).toPlainText()
    assert "tf.distribute.ParameterServerStrategy(resolver)" in code and "tf.distribute.Server(" in code
    dialog.close()


def test_doctor_panel_runs_in_the_background_and_copies_a_report(qtbot, window: MainWindow) -> None:
    with qtbot.waitSignal(window.doctor.finished, timeout=240_000):
        window.open_doctor()
        assert window.doctor.running and not window.doctor.run_button.isEnabled()
    tree = window.doctor.tree
    assert tree.topLevelItemCount() == 14
    items = {tree.topLevelItem(i).data(0, Qt.ItemDataRole.UserRole): tree.topLevelItem(i)
             for i in range(tree.topLevelItemCount())}
    assert "TensorFlow 2." in items["tensorflow"].text(1)
    pci = window.doctor.facts.pci
    if pci.get("readable") and not pci.get("nvidia"):  # no NVIDIA GPU at all: the first check says so
        hardware = items["hardware"]
        assert hardware.isExpanded() and any(hardware.child(i).text(0) == "Fix" for i in range(hardware.childCount()))
    elif not window.doctor.facts.nvml.get("available"):
        driver = items["driver"]
        assert driver.isExpanded() and any(driver.child(i).text(0) == "Fix" for i in range(driver.childCount()))
    window.doctor.copy_report()
    from PySide6.QtGui import QGuiApplication

    assert QGuiApplication.clipboard().text().startswith("## TensorFlow GPU diagnosis")


def test_the_launcher_explains_why_qt_cannot_start(monkeypatch) -> None:
    from tf_device_panel.gui.shell import app

    monkeypatch.setenv("QT_QPA_PLATFORM", "xcb")
    monkeypatch.delenv("DISPLAY", raising=False)
    monkeypatch.delenv("WAYLAND_DISPLAY", raising=False)
    assert "no display found" in app.display_problem() and "xvfb-run" in app.display_problem()
    monkeypatch.setenv("DISPLAY", ":99")
    monkeypatch.setattr(app, "x_display_answers", lambda display: True)
    monkeypatch.setattr(app, "x_display_refuses", lambda display: False)
    monkeypatch.setattr(app, "missing_xcb_libraries", lambda: ["libxcb-cursor.so.0", "libxkbcommon-x11.so.0"])
    message = app.display_problem()
    assert "sudo apt-get install libxcb-cursor0 libxkbcommon-x11-0" in message
    monkeypatch.setattr(app, "missing_xcb_libraries", lambda: [])
    assert app.display_problem() is None
    assert app.debian_package("libEGL.so.1") == "libegl1"


def test_a_display_that_does_not_answer_exits_2_with_one_line_before_qt(tmp_path: Path) -> None:
    """Issue 23 item 12: DISPLAY set but nothing listening (ssh without -X, a dead Xvfb) made Qt abort (exit 134)
    with "xcb-cursor0 … is needed"; now the display is checked first, and the line names xvfb-run and the
    command's full path."""
    from tf_device_panel.gui.shell import app

    command = Path(sys.executable).parent / "tf-device-panel"
    unused = next(n for n in range(7391, 7491) if not app.x_display_answers(f":{n}", timeout=0.5))
    env = {**os.environ, "QT_QPA_PLATFORM": "xcb", "DISPLAY": f":{unused}", "HOME": str(tmp_path)}
    env.pop("WAYLAND_DISPLAY", None)
    done = subprocess.run([str(command)], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert f"DISPLAY=:{unused} does not answer" in lines[0] and f"xvfb-run -a {command}" in lines[0]
    assert "xcb-cursor" not in done.stderr


def test_an_x_server_that_refuses_this_process_exits_2_with_one_line_before_qt(tmp_path: Path, monkeypatch) -> None:
    """An X server that answers but refuses the connection (XAUTHORITY unset or wrong: sudo, another user's
    display) passed the socket check and Qt aborted (exit 134) with a hint about xcb-cursor0. A real Xvfb that
    requires a key: without it, exit 2 and one line; with it, let in."""
    import secrets
    import shutil

    from helpers import wait_until
    from tf_device_panel.gui.shell import app

    xvfb, xauth = shutil.which("Xvfb"), shutil.which("xauth")
    if xvfb is None or xauth is None:
        pytest.skip("needs Xvfb and xauth (Debian: apt-get install xvfb xauth; .ci/run installs them)")
    number = next(n for n in range(7491, 7591) if not app.x_display_answers(f":{n}", timeout=0.5))
    display, key = f":{number}", tmp_path / "Xauthority"
    subprocess.run([xauth, "-f", str(key), "add", display, "MIT-MAGIC-COOKIE-1", secrets.token_hex(16)],
                   check=True, capture_output=True, timeout=30)
    server = subprocess.Popen([xvfb, display, "-auth", str(key), "-nolisten", "tcp"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_until(lambda: app.x_display_answers(display, timeout=0.5), timeout=60, message="Xvfb did not start")
        command = Path(sys.executable).parent / "tf-device-panel"
        env = {**os.environ, "QT_QPA_PLATFORM": "xcb", "DISPLAY": display, "HOME": str(tmp_path),
               "XAUTHORITY": str(tmp_path / "no-such-file")}
        env.pop("WAYLAND_DISPLAY", None)
        done = subprocess.run([str(command)], env=env, capture_output=True, text=True, timeout=60)
        assert done.returncode == 2, done.stderr
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and f"DISPLAY={display} answers but refuses this connection" in lines[0], done.stderr
        assert "xhost +SI:localuser:$USER" in lines[0] and "xcb-cursor" not in done.stderr
        monkeypatch.setenv("XAUTHORITY", str(key))
        assert not app.x_display_refuses(display)
        monkeypatch.setenv("XAUTHORITY", str(tmp_path / "no-such-file"))
        assert app.x_display_refuses(display)
    finally:
        server.terminate()
        server.wait(timeout=30)


def test_gpus_are_shown_and_configurable_matched_by_bus_id(qtbot, window: MainWindow) -> None:
    """A machine with two GPUs where CUDA_VISIBLE_DEVICES=1,0 makes TF's order the reverse of NVML's."""
    window.session.nvml_gpus = [
        GpuSnapshot(0, name="NVIDIA A100", pci_bus_id="00000000:01:00.0", memory_total_mib=40960),
        GpuSnapshot(1, name="NVIDIA L4", pci_bus_id="00000000:02:00.0", memory_total_mib=23034)]
    info = {"tf_version": "2.21.0", "python": "3.11", "pid": 1, "build": {"is_cuda_build": True},
            "physical": [{"name": "/physical_device:CPU:0", "device_type": "CPU", "index": 0},
                         {"name": "/physical_device:GPU:0", "device_type": "GPU", "index": 0, "visible": True,
                          "device_name": "NVIDIA L4", "compute_capability": "8.9"},
                         {"name": "/physical_device:GPU:1", "device_type": "GPU", "index": 1, "visible": True,
                          "device_name": "NVIDIA A100", "compute_capability": "8.0"}],
            "logical": [{"name": "/job:localhost/replica:0/task:0/device:GPU:0", "short_name": "/GPU:0",
                         "device_type": "GPU"}],
            "gpu_devices": [{"logical": "/GPU:0", "physical": 0, "memory_mb": 20000, "name": "NVIDIA L4",
                             "pci_bus_id": "0000:02:00.0"},
                            {"logical": "/GPU:1", "physical": 1, "memory_mb": 38000, "name": "NVIDIA A100",
                             "pci_bus_id": "0000:01:00.0"}]}
    # as a ready runtime is reported
    window.controller.eventsArrived.emit([events.from_json({"type": events.READY, "data": info})])
    physical = window.panels["devices"].tree.topLevelItem(0)
    details = {physical.child(i).text(0): physical.child(i).text(1) for i in range(physical.childCount())}
    assert "23034 MiB" in details["GPU:0"] and "PCI 00000000:02:00.0" in details["GPU:0"]
    assert "40960 MiB" in details["GPU:1"] and "compute 8.0" in details["GPU:1"]
    assert not window.panels["devices"].doctor_button.isVisible()

    panel = window.config_panel
    l4, a100 = panel.gpu_editors
    qtbot.waitUntil(l4.isVisible, timeout=2000)  # Qt shows widgets added to a visible layout on the next loop
    assert "23034 MiB" in l4.title() and a100.gpu.total_mib == 40960
    a100.visible.setChecked(False)
    l4.add_split(12000)
    l4.add_split(12000)
    assert panel.config().visible_gpus == (0,) and panel.config().virtual_gpus == {0: (12000, 12000)}
    assert "24000 MiB but GPU 0" in l4.problem_label.text(), (panel.problems, l4.problem_label.text())
    assert l4.problem_label.isVisible()
    assert not panel.apply_button.isEnabled() and l4.bar.total == 23034 and l4.bar.limits == [12000, 12000]
    l4.spins[1].setValue(8000)
    assert not l4.problem_label.isVisible() and panel.apply_button.isEnabled()
    panel.inputs["memory_growth"].setChecked(True)
    assert panel.field_problems["memory_growth"].isVisible() and not panel.apply_button.isEnabled()
    assert "set_logical_device_configuration" in to_python_snippet(panel.config())
