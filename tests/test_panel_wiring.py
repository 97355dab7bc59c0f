"""Panels wire themselves: each declares its dock and subscribes to the session through the controller, which
moves every change onto the GUI thread; the window lays the dock list out and routes nothing between panels."""

from __future__ import annotations

import ast
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("PySide6")
from fake_runtime import FakeProcess, fake_factory
from PySide6.QtCore import QSettings
from PySide6.QtWidgets import QMessageBox
from tf_device_panel.core.client.history import RunHistory
from tf_device_panel.core.client.run_manager import RunManager
from tf_device_panel.core.client.session import (
    JobEnded,
    JobHandedOver,
    JobQueued,
    ManagerStateChanged,
    ProblemNotice,
    RunPidChanged,
    RunStateChanged,
)
from tf_device_panel.core.config import DeviceConfig
from tf_device_panel.core.devices.nvml import Nvml
from tf_device_panel.core.devices.telemetry import Sample, Sampler
from tf_device_panel.core.protocol import events
from tf_device_panel.gui.docks.dock_list import PANELS
from tf_device_panel.gui.docks.memory_panel import MemoryPanel
from tf_device_panel.gui.shell.controller import RuntimeController
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
    window.controller.subscribe(heard, ManagerStateChanged, lambda change: heard.append(
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
    window.controller.subscribe(pids, RunPidChanged, lambda change: pids.append(change.value))
    try:
        config = DeviceConfig(cpu_devices=2)
        window.apply(config)
        assert window.config_panel.applied is window.session.applied is window.manager.applied is config
        window.config_panel.set_config(DeviceConfig(cpu_devices=3))
        assert window.session.draft == DeviceConfig(cpu_devices=3)
        assert window.session.is_stale and "STALE" in window.status.runtime_label.text()
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
    window.controller.subscribe(seen_at_end, JobEnded, lambda ended: seen_at_end.append(
        (ended.outcome.status, window.session.run_state.finished is not None, window.manager.state)))
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


@pytest.fixture
def controller(qtbot) -> Iterator[RuntimeController]:
    """A controller over a manager with no spare pool (no process starts here)."""
    made: list[FakeProcess] = []
    link = RuntimeController(manager=RunManager(RunHistory(), spares=0, process_factory=fake_factory(made)))
    yield link
    link.shutdown(timeout=1.0)


def test_messages_published_on_a_background_thread_reach_their_handlers_on_the_gui_thread_in_order(
        qtbot, controller: RuntimeController) -> None:
    """One queued hop for every kind of message: their order across kinds is the order they were published."""
    heard: list[tuple[str, str]] = []
    gui_thread = threading.current_thread().name
    panel = object()
    controller.subscribe(panel, JobQueued, lambda queued: heard.append((queued.job, threading.current_thread().name)))
    controller.subscribe(panel, ProblemNotice,
                         lambda notice: heard.append((notice.text, threading.current_thread().name)))
    controller.subscribe(panel, JobHandedOver, lambda handed_over: heard.append(
        (handed_over.job, threading.current_thread().name)), filter=lambda handed_over: handed_over.job != "skip")
    news = [JobQueued("1"), ProblemNotice("2"), JobHandedOver("skip"), JobHandedOver("3"), JobQueued("4"),
            ProblemNotice("5")]
    reader = threading.Thread(target=lambda: [controller.session.publish(message) for message in news],
                              name="runtime-reader-9")
    reader.start()
    reader.join()
    assert heard == []  # on their way: handled when the GUI thread's loop runs
    qtbot.waitUntil(lambda: len(heard) == 5, timeout=5000)
    assert heard == [(text, gui_thread) for text in "12345"]
    controller.session.publish(JobQueued("6"))  # published here: handled at once, here
    assert heard[-1] == ("6", gui_thread)


def test_a_message_on_its_way_to_an_unsubscribed_handler_is_dropped(qtbot, controller: RuntimeController) -> None:
    heard: list[str] = []
    closing, staying = object(), object()
    controller.subscribe(closing, ProblemNotice, lambda notice: heard.append(f"closing {notice.text}"))
    stop = controller.subscribe(staying, JobQueued, lambda queued: heard.append(f"one {queued.job}"))
    controller.subscribe(staying, ProblemNotice, lambda notice: heard.append(f"staying {notice.text}"))
    reader = threading.Thread(target=lambda: [controller.session.publish(ProblemNotice("a")),
                                              controller.session.publish(JobQueued("b"))])
    reader.start()
    reader.join()
    controller.unsubscribe_all(closing)  # the panel closed while the messages were queued for it
    stop()
    qtbot.waitUntil(lambda: heard == ["staying a"], timeout=5000)
    controller.session.publish(ProblemNotice("c"))
    assert heard == ["staying a", "staying c"]


def test_a_handler_that_fails_on_the_gui_thread_is_reported_and_the_window_shows_it(qtbot, tmp_path: Path) -> None:
    window, _ = fake_window(qtbot, tmp_path)
    heard: list[str] = []

    def draws_badly(notice: ProblemNotice) -> None:
        raise RuntimeError(f"could not draw {notice.text}")

    try:
        window.controller.subscribe(draws_badly, ProblemNotice, draws_badly)
        window.controller.subscribe(heard, ProblemNotice, lambda notice: heard.append(notice.text))
        reader = threading.Thread(target=window.session.publish, args=(ProblemNotice("the zygote died"),))
        reader.start()
        reader.join()
        qtbot.waitUntil(lambda: any("draws_badly failed" in notice for notice in window.status.notices),
                        timeout=5000)
        assert heard == ["the zygote died"]  # the others were told
        failure = next(notice for notice in window.status.notices if "draws_badly failed" in notice)
        assert "RuntimeError: could not draw the zygote died" in failure
        assert any(notice.endswith(": the zygote died") for notice in window.status.notices)  # the problem itself
        for box in window.findChildren(QMessageBox, "notice"):
            box.close()  # as the person would
    finally:
        window.close()


def test_the_state_a_reader_moved_is_said_after_the_batch_that_moved_it(qtbot, tmp_path: Path) -> None:
    """The manager publishes its state on the reader's thread before the window has the batch holding the event
    that moved it: the window hears it once the batch is folded (the devices it lists come first)."""
    window, made = fake_window(qtbot, tmp_path)
    order: list[str] = []
    window.controller.subscribe(order, ManagerStateChanged, lambda change: order.append(str(change.value)))
    window.controller.subscribe(order, RunStateChanged, lambda change: order.append(
        "batch with warm" if any(isinstance(e, events.Warm) for e in change.batch) else "batch"))
    try:
        window.apply(DeviceConfig())
        reader = threading.Thread(target=made[-1].warm_up, name="runtime-reader-2")
        reader.start()
        reader.join()
        assert window.session.manager_state == "ready" and order == ["starting"]  # not yet: its batch comes first
        qtbot.waitUntil(lambda: "ready" in order, timeout=5000)
        assert order.index("batch with warm") < order.index("ready")
    finally:
        window.close()


def test_the_configuration_form_is_bound_both_ways_to_the_sessions_draft(qtbot, tmp_path: Path) -> None:
    """An edit sets the session's draft; a draft set elsewhere shows in the widgets; stale is the session's."""
    window, _ = fake_window(qtbot, tmp_path)
    panel = window.config_panel
    try:
        panel.inputs["cpu_devices"].setValue(4)
        assert window.session.draft == panel.config() and window.session.draft.cpu_devices == 4
        window.session.set_draft(DeviceConfig(cpu_devices=2, soft_placement=False))
        assert panel.inputs["cpu_devices"].value() == 2 and not panel.inputs["soft_placement"].isChecked()
        assert panel.config() == window.session.draft
        window.apply(panel.config())
        assert window.session.applied == window.session.draft and not window.session.is_stale
        assert panel.stale_label.text() == "" and "STALE" not in window.status.runtime_label.text()
        panel.inputs["cpu_devices"].setValue(3)
        assert window.session.is_stale and "Apply" in panel.stale_label.text()
        assert "STALE" in window.status.runtime_label.text()
    finally:
        window.close()


def test_a_memory_panel_given_the_windows_sampler_leaves_the_run_pid_to_the_session(qtbot) -> None:
    sampler = Sampler(nvml=Nvml())
    sampler.set_runtime_pid(4242)  # the run's, as the window's session told it
    panel = MemoryPanel(sampler=sampler, start=False)
    qtbot.addWidget(panel)
    assert sampler.runtime_pid == 4242


def test_a_closed_window_hears_no_more_samples_and_loads_no_more_history(qtbot, tmp_path: Path) -> None:
    """Closing ends every panel's subscription to the sampler (the device map's too) and stops History's loader:
    a job that ends while the window closes starts no reading of the history."""
    window, _ = fake_window(qtbot, tmp_path)
    sampler = window.session.sampler
    assert sampler is not None
    listening = {type(s.subscriber).__name__ for s in sampler.hub._subscriptions if s.message_class is Sample}
    assert "DeviceMapPanel" in listening
    window.close()
    assert not [s for s in sampler.hub._subscriptions if s.message_class is Sample]
    loaders = {thread for thread in threading.enumerate() if thread.name == "history-loader"}
    window.history_panel.refresh()  # as `_job_finished` would, for a job that ended in the closing window's last batch
    assert {thread for thread in threading.enumerate() if thread.name == "history-loader"} <= loaders
    assert not window.history_panel._poll.isActive()
