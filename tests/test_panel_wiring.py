"""Panels wire themselves: each declares its dock and subscribes to the session through the controller, which
moves every change onto the GUI thread; the window lays the dock list out and routes nothing between panels."""

from __future__ import annotations

import ast
import threading
from pathlib import Path

import pytest

pytest.importorskip("PySide6")
from fake_runtime import FakeProcess, fake_factory
from PySide6.QtCore import QSettings
from tf_device_panel.core.client.history import RunHistory
from tf_device_panel.core.client.run_manager import RunManager
from tf_device_panel.core.client.session import ManagerStateChanged, RunPidChanged
from tf_device_panel.core.config import DeviceConfig
from tf_device_panel.core.protocol import events
from tf_device_panel.gui.docks.dock_list import PANELS
from tf_device_panel.gui.shell.main_window import MainWindow

WINDOW = Path(__file__).parent.parent / "gui" / "shell" / "main_window.py"


def fake_window(qtbot, tmp_path: Path) -> tuple[MainWindow, list[FakeProcess]]:
    made: list[FakeProcess] = []
    manager = RunManager(RunHistory(), spares=1, describe=False, process_factory=fake_factory(made))
    window = MainWindow(settings=QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat),
                        history=RunHistory(), start_runtime=False, run_manager=manager)
    qtbot.addWidget(window)
    return window, made


def test_each_dock_is_laid_out_as_its_panel_declares(qtbot, tmp_path: Path) -> None:
    window, _ = fake_window(qtbot, tmp_path)
    window.show()
    qtbot.waitExposed(window)
    try:
        for panel in PANELS:
            spec = panel.DOCK
            dock = window.docks[spec.name]
            assert dock.windowTitle() == spec.title and window.dockWidgetArea(dock) == spec.area, spec
            assert dock.isVisible() != spec.hidden, spec
            if spec.long_title:
                assert dock.toggleViewAction().text() == spec.long_title
        assert window.docks["map"].visibleRegion().isEmpty() is False  # raised over the log and memory tabs
        for dock in window.docks.values():  # a hidden dock is in no tab group until it is shown
            dock.show()
        for panel in PANELS:
            if panel.DOCK.tab_with:
                tabs = window.tabifiedDockWidgets(window.docks[panel.DOCK.tab_with])
                assert window.docks[panel.DOCK.name] in tabs, panel.DOCK
    finally:
        window.close()


def test_the_window_routes_no_batch_and_reaches_into_no_panels_layout() -> None:
    """No batch is pattern-matched in the window, no panel's button is clicked or taken out of its layout."""
    tree = ast.parse(WINDOW.read_text(encoding="utf-8"))
    assert not [node for node in ast.walk(tree) if isinstance(node, ast.Match)]
    names = {node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute)}
    assert not names & {"click", "removeWidget", "eventsArrived", "add_events", "on_events", "show_progress",
                        "add_output", "set_devices", "show_devices", "set_gpus", "set_inventory"}


def test_a_change_made_on_a_reader_thread_reaches_the_panels_on_the_gui_thread(qtbot, tmp_path: Path) -> None:
    window, made = fake_window(qtbot, tmp_path)
    heard: list[tuple[str, str]] = []
    window.controller.on(ManagerStateChanged, lambda change: heard.append(
        (str(change.value), threading.current_thread().name)))
    try:
        window.apply(DeviceConfig())
        assert heard == [("starting", threading.current_thread().name)]  # made here: told at once, here
        reader = threading.Thread(target=made[-1].warm_up, name="runtime-reader-1")
        reader.start()
        reader.join()
        qtbot.waitUntil(lambda: len(heard) == 2, timeout=5000)
        assert heard[1] == ("ready", threading.current_thread().name)
        qtbot.waitUntil(lambda: window.runs.run_button.isEnabled(), timeout=5000)
    finally:
        window.close()


def test_the_applied_configuration_and_the_run_pid_are_the_sessions_alone(qtbot, tmp_path: Path) -> None:
    """The Configuration panel reads the applied configuration from the session; the sampler, the memory graphs
    and the device map follow the session's run pid."""
    window, _ = fake_window(qtbot, tmp_path)
    pids: list[int | None] = []
    window.controller.on(RunPidChanged, lambda change: pids.append(change.value))
    try:
        config = DeviceConfig(cpu_devices=2)
        window.apply(config)
        assert window.config_panel.applied is window.session.applied is window.manager.applied is config
        window.config_panel.set_config(DeviceConfig(cpu_devices=3))
        assert window.config_panel.is_stale and "STALE" in window.status.runtime_label.text()
        window.controller.deliver([events.Ready(pid=4242, job_id="j")])
        assert pids == [4242] and window.session.sampler is not None
        assert window.panels["memory"].sampler is window.session.sampler  # the process's one sampler
        assert window.session.sampler.runtime_pid == 4242 == window.session.run_pid
        window.controller.deliver([events.RuntimeExited(returncode=0, expected=True, description="exited")])
        assert pids == [4242, None] and window.session.sampler.runtime_pid is None
    finally:
        window.close()


def test_a_jobs_end_is_said_once_the_batch_that_held_it_is_drawn(qtbot, tmp_path: Path) -> None:
    """The controller reads the run state's fold of a batch, not the batch: the end of the job comes once the
    panels have drawn the batch that held it, and the state it moved after it."""
    window, made = fake_window(qtbot, tmp_path)
    seen_at_end: list[tuple[str, bool, str]] = []
    window.controller.jobFinished.connect(lambda outcome: seen_at_end.append(
        (outcome.status, window.session.run_state.finished is not None, window.manager.state)))
    try:
        window.apply(DeviceConfig())
        made[-1].warm_up()
        qtbot.waitUntil(window.runs.run_button.isEnabled, timeout=5000)
        assert window.controller.run("matmul", {}) == "started"
        running = made[-2]
        reader = threading.Thread(target=running.finish_job, name="runtime-reader-3")
        reader.start()
        reader.join()
        qtbot.waitUntil(lambda: len(seen_at_end) == 1, timeout=5000)
        assert seen_at_end[0][:2] == ("ok", True)
        assert window.runs.states["matmul"].status == "Finished in 0.50 s"  # the runs panel took the outcome
    finally:
        window.close()
