"""Issue 23 items 4, 6, 7: each job keeps its own status, progress, clock and result; a failure is said once,
whole; Run may be pressed while the runtime warms (real widgets offscreen, no runtime unless said)."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from helpers import job_ended

pytest.importorskip("PySide6")
from fake_runtime import FakeProcess, fake_factory
from PySide6.QtCore import QSettings, Qt
from PySide6.QtGui import QAction
from PySide6.QtWidgets import QApplication, QMessageBox
from tf_device_panel.core.client.history import RunHistory
from tf_device_panel.core.client.records import RunError
from tf_device_panel.core.client.run_manager import RunManager
from tf_device_panel.core.client.run_record import JobOutcome
from tf_device_panel.core.config import DeviceConfig
from tf_device_panel.core.protocol import events
from tf_device_panel.gui.shell.main_window import MainWindow
from tf_device_panel.gui.views.job_state import JobState, error_summary

LONG_TAIL = "but available devices are [ " + ", ".join(f"/job:localhost/replica:0/task:0/device:CPU:{n}"
                                                      for n in range(12)) + " ]"


FIT = {"kind": "training", "devices": ["/CPU:0", "/CPU:1"], "replicas_in_sync": 2, "global_batch_size": 10,
       "batch_per_replica": 5, "loss": [0.71, 0.52, 0.44], "model": "dense", "parameters": 2}


@pytest.fixture
def window_size() -> tuple[int, int]:
    return (1280, 720)


def outcome(job: str, status: str = "ok", duration_s: float = 1.0, error_type: str = "", message: str = "",
            result: dict | None = None) -> JobOutcome:
    error = RunError(type=error_type, message=message, traceback="Traceback …\n" + error_type) if error_type else None
    return JobOutcome(job, {}, {}, status=status, duration_s=duration_s, error=error, result=result)


def shown(win: MainWindow) -> tuple[str, int, str]:
    runs = win.runs
    value = -1 if runs.progress.maximum() == 0 else runs.progress.value()
    return runs.status.full_text(), value, runs.elapsed.text().strip()


def test_each_job_keeps_its_own_status_progress_clock_and_result(qtbot, window: MainWindow) -> None:
    runs = window.runs
    runs.select_job("script")
    runs.job_started("script")
    job_ended(runs, outcome("script", "error", 0.004, "FileNotFoundError", "No such file: '/tmp/none.py'"))
    assert shown(window) == ("Failed in 0.00 s", 0, "0.0 s")
    # another job never run shows nothing of the script's failure (it showed "Failed in 0.00 s — FileNotFoundError")
    runs.select_job("multi-worker")
    assert shown(window) == ("Not run yet", 0, "")
    assert "Run a job" in runs.result.message.text() and not runs.result.error.isVisible()
    # a running job's progress stays its own while another is looked at
    runs.select_job("fit")
    runs.job_started("fit")
    runs.show_progress(4, 8, "epoch 4/8")
    assert shown(window)[:2] == ("epoch 4/8", 500)
    runs.select_job("matmul")
    assert shown(window) == ("Not run yet", 0, "")
    runs.select_job("fit")
    assert shown(window)[:2] == ("epoch 4/8", 500)
    job_ended(runs, outcome("fit", duration_s=13.77, result=FIT))
    runs.select_job("parameter-server")
    runs.job_started("parameter-server")
    job_ended(runs, outcome("parameter-server", duration_s=8.30))
    assert shown(window) == ("Finished in 8.30 s", 1000, "8.3 s")
    runs.select_job("fit")
    assert shown(window) == ("Finished in 13.77 s", 1000, "13.8 s") and runs.result.plots
    runs.select_job("script")
    assert shown(window)[0] == "Failed in 0.00 s" and "No such file" in runs.result.error.summary.full_text()


def test_a_failure_is_said_once_whole_and_without_the_panels_class_names(qtbot, window: MainWindow) -> None:
    runs = window.runs
    runs.select_job("matmul")
    runs.job_started("matmul")
    message = f"Could not satisfy device specification '/job:localhost/replica:0/task:0/device:GPU:2' {LONG_TAIL}"
    job_ended(runs, outcome("matmul", "error", 1.5, "InvalidArgumentError", message))
    QApplication.processEvents()
    status = runs.status.full_text()
    summary = runs.result.error.summary
    assert status == "Failed in 1.50 s" and "Could not" not in status  # the message once, below
    assert summary.isVisible() and summary.full_text().endswith("CPU:11 ]")  # whole, without a click
    assert summary.height() >= 2 * summary.fontMetrics().height()  # wrapped, not elided
    assert "'/GPU:2'" in summary.full_text()  # short device names; the full ones are in the details
    # the panel's own exception names stay in the details
    for internal in ("JobError", "ScriptExit"):
        runs.select_job("script")
        runs.job_started("script")
        job_ended(runs, outcome("script", "error", 0.2, internal, "train.py exited with status 3"))
        text = runs.result.error.summary.full_text()
        assert text == "train.py exited with status 3" and internal not in runs.status.full_text()
        assert internal in runs.result.error.detail.toPlainText()
    assert error_summary(outcome("x", "error", 1, "ValueError", "boom")) == "ValueError: boom"


def test_job_state_is_plain_python() -> None:
    """The per-job state needs no Qt (issue 22: it can move to the app model as it is)."""
    state = JobState()
    state.start("fit", now=10.0)
    state.report(2, 8, "epoch 2/8")
    assert state.running and state.progress == 0.25 and state.elapsed(now=12.5) == 2.5
    state.finish(outcome("fit", "cancelled", 3.0, "Cancelled", "cancelled by the user"))
    assert not state.running and state.status == "Cancelled in 3.00 s" and state.progress == 0.25


def test_run_pressed_while_the_spare_warms_waits_and_says_so(qtbot, tmp_path: Path) -> None:
    """The waiting job is the manager's (core.client.run_manager): here it drives fake processes, which warm,
    finish and fail when the test says."""
    made: list[FakeProcess] = []
    manager = RunManager(RunHistory(), spares=1, describe=False, process_factory=fake_factory(made))
    settings = QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat)
    window = MainWindow(settings=settings, history=RunHistory(), start_runtime=False, run_manager=manager)
    qtbot.addWidget(window)
    runs = window.runs
    try:
        window.apply(DeviceConfig())  # the spare warms
        window._refresh_status()
        assert runs.run_button.isEnabled() and runs.run_button.text() == "Run when ready"
        runs.select_job("matmul")
        qtbot.mouseClick(runs.run_button, Qt.MouseButton.LeftButton)
        assert runs.run_button.text() == "Starts when ready…" and not runs.run_button.isEnabled()
        assert runs.stop_button.isEnabled() and "Waiting for the runtime" in runs.status.full_text()
        spare = made[-1]
        assert spare.job is None
        spare.warm_up()
        qtbot.waitUntil(lambda: runs.running_job == "matmul")
        assert spare.job is not None and spare.job[0] == "matmul"
        assert runs.status.full_text() == "Running matmul…" and runs.run_button.text() == "Run"
        spare.finish_job()
        qtbot.waitUntil(lambda: runs.running_job is None)
        # Stop while waiting: the job does not start
        next_spare = made[-1]
        window._refresh_status()
        qtbot.mouseClick(runs.run_button, Qt.MouseButton.LeftButton)
        qtbot.mouseClick(runs.stop_button, Qt.MouseButton.LeftButton)
        next_spare.warm_up()
        qtbot.waitUntil(lambda: window.manager.state == "ready")
        QApplication.processEvents()
        assert next_spare.job is None and "Not started" in runs.status.full_text() and runs.run_button.isEnabled()
        # the spare dies while a job waits: it is not started, and says why (never a wait without end)
        window.apply(DeviceConfig())
        window._refresh_status()
        qtbot.mouseClick(runs.run_button, Qt.MouseButton.LeftButton)
        made[-1].exit(returncode=-9, description="killed by SIGKILL", expected=False)
        qtbot.waitUntil(lambda: runs.status.full_text() == "Not started: the runtime is exited")
        window._refresh_status()
        assert window.session.pending is None
        assert not runs.run_button.isEnabled() and made[-1].job is None
    finally:
        window.close()


def log(job_id: str | None, text: str, kind: str = "output", stream: str = "stdout", partial: bool = False):
    return events.Log(stream=stream, kind=kind, text=text, partial=partial, job_id=job_id)


def test_the_jobs_output_is_under_its_result_with_the_live_line(qtbot, window: MainWindow) -> None:
    """Item 5: the script's stdout is in the Runs panel, the "\\r" line live, placement lines not mixed in, and
    the next spare's start-up lines never push it away."""
    from tf_device_panel.core.client.run_record import JobRun
    from tf_device_panel.core.config import DeviceConfig

    runs = window.runs
    run = JobRun("script", {}, DeviceConfig(), None)
    run.attach("7-1-1")
    window.manager.job_run = run
    runs.select_job("script")
    runs.job_started("script")
    window.controller.deliver([log("7-1-1", "epoch 1 starting"), log("7-1-1", "step 3/20", partial=True)])
    console = runs.console
    assert console.view.toPlainText() == "epoch 1 starting" and console.live_plain == "step 3/20"
    assert console.live_line.isVisible()
    window.controller.deliver([
        log("7-1-1", "MatMul: (MatMul): /job:localhost/replica:0/task:0/device:CPU:0", kind="placement",
            stream="stderr"),
        log("7-1-1", "step 20/20"), log("7-1-1", "done: loss 0.01"),
        log(None, "I tensorflow/core/platform/cpu_feature_guard.cc: the next spare starting", kind="tf-info",
            stream="stderr"),
        log(None, "a spare's own output")])
    assert console.view.toPlainText().splitlines() == ["epoch 1 starting", "step 20/20", "done: loss 0.01"]
    assert not console.live_line.isVisible()
    assert "MatMul" in window.panels["log"].view.toPlainText()  # placements stay in the Placement log
    job_ended(runs, outcome("script"))
    runs.select_job("matmul")
    assert console.view.toPlainText() == ""  # another job's console is its own
    runs.select_job("script")
    assert console.text().splitlines()[-1] == "done: loss 0.01"
    assert console.view.horizontalScrollBar().maximum() == 0


def test_a_waiting_jobs_first_lines_that_arrive_before_its_start_stay_in_its_console(qtbot, window: MainWindow) -> None:
    """A job that waited for the spare is said to have started by the thread that handed it over, its output by
    the event pump: under load its first lines came first, and its start wiped them (a stress run lost a
    script's "hello" and progress bar that way)."""
    from tf_device_panel.core.client.run_record import JobRun

    runs = window.runs
    run = JobRun("script", {}, DeviceConfig(), None)
    run.attach("9-1-1")
    window.manager.job_run = run
    runs.select_job("script")
    window.controller.deliver([log("9-1-1", "hello from train.py"), log("9-1-1", "step 1/3", partial=True)])
    runs.job_started("script")  # the hand-over's news, late
    window.controller.deliver([log("9-1-1", "done")])
    assert runs.console.view.toPlainText().splitlines() == ["hello from train.py", "done"]
    assert runs.state.status == "Running script…"
    job_ended(runs, outcome("script"))

    # The next run of the same job starts with an empty console: its start comes before its lines.
    second = JobRun("script", {}, DeviceConfig(), None)
    second.attach("9-2-1")
    window.manager.job_run = second
    runs.job_started("script")
    assert runs.console.view.toPlainText() == ""
    window.controller.deliver([log("9-2-1", "second run")])
    assert runs.console.view.toPlainText() == "second run"


def test_a_jobs_own_placement_switch_says_it_overrides_the_configuration(qtbot, window: MainWindow) -> None:
    """Item 9: soft placement and placement logging are the Configuration's; the TF1 session's and the clusters'
    own switches say plainly that they override it, and what it is."""
    from tf_device_panel.core.config import DeviceConfig

    # No restart here: only the applied configuration is written, as the manager writes it (its one writer).
    window.manager.apply = lambda config: window.session.set("applied", config)
    window.apply(DeviceConfig(soft_placement=True, log_placement=False))
    texts = {job: window.runs.forms[job].widgets[name].text()
             for job, name in (("session", "soft_placement"), ("multi-worker", "log_placement"),
                               ("parameter-server", "log_placement"))}
    assert texts == {"session": "this job only (Configuration: on)",
                     "multi-worker": "this job only (Configuration: off)",
                     "parameter-server": "this job only (Configuration: off)"}
    assert "overrides the Configuration" in window.runs.forms["session"].widgets["soft_placement"].toolTip()


def test_the_small_things_of_item_13(qtbot, window: MainWindow) -> None:
    runs = window.runs
    # a refused parameter is named by its label ("Script"), not its name ("path")
    runs.select_job("script")
    window._refresh_status()
    runs.set_can_run(True)
    runs.run_button.click()
    assert runs.form_error.text().startswith("Script:") and "path:" not in runs.form_error.text()
    # "Running fit…" said once, in the status line
    runs.select_job("fit")
    runs.job_started("fit")
    assert runs.status.full_text() == "Running fit…" and "Running" not in runs.result.message.text()
    job_ended(runs, outcome("fit", "cancelled", 1.0, "Cancelled", "cancelled by the user"))
    # after a cancel, the run's process ending is no failure
    window.panels["log"].add_events([events.JobFinished(job="fit", status="cancelled", job_id="1"),
                           events.RuntimeExited(description="exited with code 1", expected=False)])
    last = window.panels["log"].view.toPlainText().splitlines()[-1]
    assert "after its job was cancelled" in last and window.panels["log"].entries[-1][0] != "error"
    # the placement table says its order the way it is: the largest counts first, "Count ▼"
    header = window.panels["log"].proxy.headerData(3, Qt.Orientation.Horizontal, Qt.ItemDataRole.DisplayRole)
    assert header == "Count ▼"
    # View → History raises it (it was a tab behind the Doctor)
    window.docks["doctor"].show()
    window.docks["history"].toggleViewAction().trigger()
    from PySide6.QtWidgets import QTabBar

    def raised_tab() -> list[str]:
        return [bar.tabText(bar.currentIndex()) for bar in window.findChildren(QTabBar)
                if any(bar.tabText(i).startswith("Doctor") for i in range(bar.count()))]

    qtbot.waitUntil(lambda: raised_tab() == ["History"], timeout=3000)


def test_runtime_kill_from_the_menu_says_why(qtbot, tmp_path: Path) -> None:
    """Runtime → Kill runtime kills the spare with its reason (a QAction's `checked` is not taken for it)."""
    made: list[FakeProcess] = []
    manager = RunManager(RunHistory(), spares=1, describe=False, process_factory=fake_factory(made))
    settings = QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat)
    window = MainWindow(settings=settings, history=RunHistory(), start_runtime=False, run_manager=manager)
    qtbot.addWidget(window)
    try:
        window.apply(DeviceConfig())
        made[-1].warm_up()
        (kill,) = [a for a in window.findChildren(QAction) if a.text() == "&Kill runtime"]
        kill.trigger()
        assert made[-1].killed == "Runtime → Kill runtime was chosen" and manager.state == "exited"
    finally:
        window.close()


def fake_window(qtbot, tmp_path: Path, describe: bool) -> tuple[MainWindow, RunManager, list[FakeProcess]]:
    made: list[FakeProcess] = []
    manager = RunManager(RunHistory(), spares=1, describe=describe, process_factory=fake_factory(made))
    settings = QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat)
    window = MainWindow(settings=settings, history=RunHistory(), start_runtime=False, run_manager=manager)
    qtbot.addWidget(window)
    return window, manager, made


def test_a_cancel_that_had_to_kill_the_runtime_says_so(qtbot, tmp_path: Path) -> None:
    """The run's outcome says "cancelled"; the window also says why the runtime went and what comes next (the
    manager marks such an exit expected, and the window once heard only unexpected ones)."""
    window, manager, made = fake_window(qtbot, tmp_path, describe=False)
    try:
        window.apply(DeviceConfig())
        made[-1].warm_up()
        assert manager.run("script", {"path": "stuck.py"}) == "started"
        running = made[-2]
        manager.cancel()
        running.kill(reason="the job did not stop within 5 s of being cancelled")
        qtbot.waitUntil(lambda: "did not stop in time" in window.panels["devices"].note.text())
        assert "the next run gets a fresh one" in window.status.message_label.full_text()
    finally:
        window.close()


def test_a_describe_run_that_dies_leaves_the_window_ready(qtbot, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """Without the device list, runs still work: the window says it and shows Run, not "Run when ready"."""
    window, manager, made = fake_window(qtbot, tmp_path, describe=True)
    try:
        window.apply(DeviceConfig())
        describer, spare = made
        spare.warm_up()
        describer.warm_up()
        # the warm spare is shown
        qtbot.waitUntil(lambda: "devices being listed" in window.status.runtime_label.full_text())
        assert window.runs.run_button.text() == "Run when ready"
        # on its reader thread, as a real process's exit comes
        reader = threading.Thread(target=describer.exit, name="reader",
                                  kwargs={"returncode": -11, "description": "was killed by SIGSEGV", "expected": False})
        reader.start()
        reader.join()
        assert manager.state == "ready"
        qtbot.waitUntil(lambda: window.runs.run_button.text() == "Run")  # no refresh by hand: the window is told
        assert window.runs.run_button.isEnabled()
        assert any("Could not list the devices" in notice for notice in window.status.notices)
        for box in window.findChildren(QMessageBox, "notice"):
            box.close()  # as a user would
    finally:
        window.close()
