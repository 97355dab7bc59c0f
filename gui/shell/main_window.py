"""The main window: the dock list, the menus and the layout. Each panel wires itself to the session (`wire`);
the window routes nothing between them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from PySide6.QtCore import QSettings, QTimer
from PySide6.QtGui import QAction, QCloseEvent, QIcon, QKeySequence, QShowEvent
from PySide6.QtWidgets import QDialog, QDockWidget, QMainWindow, QMessageBox, QWidget
from tf_device_panel.core.catalogue import ParamValues
from tf_device_panel.core.client.history import RunHistory
from tf_device_panel.core.client.run_manager import RunManager
from tf_device_panel.core.client.session import (
    DraftChanged,
    JobEnded,
    JobHandedOver,
    JobQueued,
    ManagerStateChanged,
    ProblemNotice,
    RunStateChanged,
    WaitingRefused,
)
from tf_device_panel.core.config import DeviceConfig
from tf_device_panel.core.devices.nvml import shared as shared_nvml
from tf_device_panel.core.devices.telemetry import Sampler
from tf_device_panel.core.hub import HandlerFailed
from tf_device_panel.gui.dialogs.about import show_about
from tf_device_panel.gui.docks import RIGHT, DockSpec
from tf_device_panel.gui.docks.config_panel import ConfigPanel
from tf_device_panel.gui.docks.device_map import DeviceMapPanel
from tf_device_panel.gui.docks.devices_panel import DevicesPanel
from tf_device_panel.gui.docks.doctor_panel import DoctorPanel
from tf_device_panel.gui.docks.history_panel import HistoryPanel
from tf_device_panel.gui.docks.log_panel import LogPanel
from tf_device_panel.gui.docks.machines_panel import MachinesPanel
from tf_device_panel.gui.docks.memory_panel import MemoryPanel
from tf_device_panel.gui.docks.runs_panel import RunsPanel
from tf_device_panel.gui.shell.controller import BUSY, READY, STARTING, RuntimeController
from tf_device_panel.gui.shell.garbage import GuiThreadCollection
from tf_device_panel.gui.shell.log_handler import WindowLogHandler
from tf_device_panel.gui.shell.profiles import APPLIED_KEY, Profiles
from tf_device_panel.gui.shell.status_bar import RuntimeStatusBar
from tf_device_panel.gui.shell.window_layout import LAYOUT_VERSION, WindowLayout
from tf_device_panel.gui.widgets.common import guard_wheel

from tf_device_panel import resources

ORGANIZATION, APPLICATION = "TF Device Panel", "tf-device-panel"
# The docks of panels that are no part of the session (their declarations here, beside the dock list).
HISTORY_DOCK = DockSpec("history", "History", RIGHT, hidden=True)
DOCTOR_DOCK = DockSpec("doctor", "Doctor", RIGHT, "Doctor (why no GPU?)", tab_with="history", hidden=True)


class MainWindow(QMainWindow):
    def __init__(self, profile: str | None = None, *, settings: QSettings | None = None,
                 history: RunHistory | None = None, start_runtime: bool = True,
                 run_manager: RunManager | None = None):
        super().__init__()
        self.setWindowTitle("TF Device Panel")
        self.setMinimumSize(760, 520)
        self.setWindowIcon(QIcon(str(resources.path("icons/tf-device-panel.svg"))))
        self.settings = settings or QSettings(ORGANIZATION, APPLICATION)
        self.history = history or RunHistory()
        self.closing = False
        # Before any thread starts: cycles holding Qt wrappers are then collected here, never on a run's reader.
        self.garbage = GuiThreadCollection(self)
        self.garbage.start()
        self.status = RuntimeStatusBar(self, self.apply_current)
        # Installed before the panels start their threads, so the first sampler or NVML warning is shown too.
        self.log_handler = WindowLogHandler(self.status.show_logged)
        self.log_handler.install()
        self._shown_once = False
        self.dock_layout = WindowLayout(self)
        self.view = self.dock_layout.view
        # The run lifecycle is the manager's (`run_manager`: a test's, with fake processes); what the window shows
        # is its session's, with the process's one telemetry sampler (the memory graphs and the device map read it).
        self.controller = RuntimeController(self.history, self, manager=run_manager)
        self.manager, self.session = self.controller.manager, self.controller.session
        self.session.attach_sampler(Sampler(nvml=shared_nvml()))
        if not shared_nvml().init():  # no NVIDIA driver: the first spare warming says so, not "all GPUs"
            self.status.gpus_present = False
        self.session.start_telemetry()

        self.devices = DevicesPanel()
        self.config_panel = ConfigPanel()
        self.runs = RunsPanel()
        self.log = LogPanel()
        self.history_panel = HistoryPanel(self.history)
        self.doctor = DoctorPanel(self.config_panel.config)
        self.memory = MemoryPanel(sampler=self.session.sampler)
        self.machines = MachinesPanel(self.settings)
        self.device_map = DeviceMapPanel()
        self.setCentralWidget(self.runs)
        self.profiles = Profiles(self, self.settings, self.config_panel, self.notify, self.flash)
        dock_list: list[tuple[DockSpec, QWidget]] = [
            (DevicesPanel.DOCK, self.devices), (ConfigPanel.DOCK, self.config_panel.dock_body()),
            (LogPanel.DOCK, self.log), (HISTORY_DOCK, self.history_panel), (DOCTOR_DOCK, self.doctor),
            (MemoryPanel.DOCK, self.memory), (MachinesPanel.DOCK, self.machines),
            (DeviceMapPanel.DOCK, self.device_map)]
        self.docks = {spec.name: self._dock(spec, body) for spec, body in dock_list}
        for spec, _body in dock_list:
            if spec.tab_with:
                self.tabifyDockWidget(self.docks[spec.tab_with], self.docks[spec.name])
        for spec, _body in dock_list:
            if spec.raised:
                self.docks[spec.name].raise_()
            if spec.hidden:
                self.docks[spec.name].hide()
        for panel in (self.devices, self.config_panel, self.runs, self.log, self.memory, self.machines,
                      self.device_map):
            panel.wire(self.controller)
        self.docks["machines"].visibilityChanged.connect(self.machines.on_shown)
        self._build_menus()

        for news in (ManagerStateChanged, JobHandedOver, JobQueued, DraftChanged):
            self.controller.subscribe(self, news, self._refresh_status)
        self.controller.subscribe(self, JobEnded, self._job_finished)
        self.controller.subscribe(self, ProblemNotice, lambda notice: self._show_problem(notice.text))
        self.controller.subscribe(self, HandlerFailed, lambda failed: self._show_problem(failed.text))
        self.controller.subscribe(self, WaitingRefused, lambda refused: self._waiting_refused(refused.job, refused.why))
        self.controller.subscribe(self, RunStateChanged,
                                  lambda change: self.status.runtime_news(change, self.session.applied))
        self.config_panel.applyRequested.connect(self.apply)
        self.history_panel.runAgainRequested.connect(self.run_again)
        self.history_panel.applyConfigRequested.connect(self.apply_from_history)
        self.history_panel.refresh()
        self.devices.doctorRequested.connect(self.open_doctor)

        self.runs.restore_forms(self.settings)
        self.dock_layout.follow_docks()
        self.dock_layout.restore()
        if profile is not None:
            self.open_profile(profile)
        else:
            self.profiles.open_last()
            # The configuration last applied, as it was (the profile may have been changed after it was opened):
            # the first spare warms with it.
            restored = self.profiles.applied_last_time()
            if restored is not None:
                self.config_panel.set_config(restored)
        if start_runtime:
            self.apply(self.config_panel.config())

    def _dock(self, spec: DockSpec, widget: QWidget) -> QDockWidget:
        """A dock titled `spec.title`: a tab's text when docks share a place; `long_title` says more in the View
        menu and on hover."""
        dock = QDockWidget(spec.title, self)
        dock.setObjectName(spec.title.split()[0].lower() + "-dock")
        dock.setWidget(widget)
        if spec.long_title:
            dock.toggleViewAction().setText(spec.long_title)
            dock.setToolTip(spec.long_title)
        self.addDockWidget(spec.area, dock)
        return dock

    # -- the layout's, as the menus and tests ask ----------------------------------------------------
    def set_presentation(self, on: bool) -> None:
        self.dock_layout.set_presentation(on)

    def reset_layout(self) -> None:
        self.dock_layout.reset_layout()

    def zoom_in(self) -> None:
        self.dock_layout.zoom_in()

    def zoom_out(self) -> None:
        self.dock_layout.zoom_out()

    def _build_menus(self) -> None:
        file_menu = self.menuBar().addMenu("&File")
        self._action(file_menu, "&Open profile…", self.profiles.open_dialog, QKeySequence.StandardKey.Open)
        self._action(file_menu, "&Save profile", lambda: self.profiles.save(), QKeySequence.StandardKey.Save)
        self._action(file_menu, "Save profile &as…", self.profiles.save_as_dialog, QKeySequence.StandardKey.SaveAs)
        file_menu.addSeparator()
        self._action(file_menu, "Copy configuration as &Python…", self.show_snippet)
        self._action(file_menu, "S&hare a GPU…", self.show_share)
        self._action(file_menu, "Save &log…", self.log.save_dialog)
        file_menu.addSeparator()
        self._action(file_menu, "&Quit", self.close, QKeySequence.StandardKey.Quit)
        runtime_menu = self.menuBar().addMenu("&Runtime")
        self._action(runtime_menu, "&Apply configuration (restart runtime)", self.apply_current, "Ctrl+Shift+A")
        self._action(runtime_menu, "&Kill runtime", lambda: self.manager.kill_runtime())  # not `checked` as its reason
        self._action(runtime_menu, "&Doctor: why no GPU?", self.open_doctor, "Ctrl+D")
        view_menu = self.menuBar().addMenu("&View")
        for dock in self.docks.values():
            view_menu.addAction(dock.toggleViewAction())
        view_menu.addSeparator()
        self.presentation_action = self._action(view_menu, "&Presentation mode", self.set_presentation,
                                                "Ctrl+Shift+P")
        self.presentation_action.setCheckable(True)
        self.presentation_action.setToolTip("Larger text, thicker lines, high contrast; the result and the device "
                                            "map take the room (for a projector)")
        zoom_in = self._action(view_menu, "Zoom &in", self.zoom_in, QKeySequence.StandardKey.ZoomIn)
        zoom_in.setShortcuts([QKeySequence("Ctrl+="), QKeySequence("Ctrl++")])
        self._action(view_menu, "Zoom &out", self.zoom_out, "Ctrl+-")
        self._action(view_menu, "&Actual size", self.dock_layout.zoom_reset, "Ctrl+0")
        view_menu.addSeparator()
        self._action(view_menu, "&Reset layout", self.reset_layout)
        help_menu = self.menuBar().addMenu("&Help")
        self._action(help_menu, "&About TF Device Panel…", self.show_about)

    def _action(self, menu: Any, text: str, slot: Any, shortcut: Any = None) -> QAction:
        action = QAction(text, self)
        if shortcut is not None:
            action.setShortcut(QKeySequence(shortcut))
        action.triggered.connect(slot)
        menu.addAction(action)
        return action

    # -- configuration and runtime -----------------------------------------------------------------
    def apply_current(self) -> None:
        if self.config_panel.problems:
            self._show_problem("Fix the configuration problems shown in red before applying.")
            return
        self.apply(self.config_panel.config())

    def apply(self, config: DeviceConfig) -> None:
        if self.manager.state == BUSY:
            answer = QMessageBox.question(
                self, "Restart the runtime?",
                "A job is running. Applying the configuration stops it and starts a fresh runtime. Continue?")
            if answer != QMessageBox.StandardButton.Yes:
                return
        self.manager.apply(config)  # the one writer of the applied configuration: the panels hear AppliedChanged
        self.profiles.remember_applied(config)
        self._refresh_status()

    def run_again(self, job: str, params: ParamValues) -> None:
        """A past run's job and parameters in the form, run at once when the runtime can take it."""
        self.runs.load_params(job, params)
        if self.manager.state in (READY, STARTING) and self.session.pending is None:
            self.runs.request_run()  # the form checks the parameters first, as a press of Run does
        else:
            self.flash(f"{job}'s parameters are in the form; press Run once the running job has ended", 10_000)

    def apply_from_history(self, config: DeviceConfig) -> None:
        self.config_panel.set_config(config)
        self.apply_current()

    def open_doctor(self) -> None:
        self.docks["doctor"].show()
        self.docks["doctor"].raise_()
        if not self.doctor.checks and not self.doctor.running:
            self.doctor.run()

    def _waiting_refused(self, _job: str, reason: str) -> None:
        self.flash(f"{reason[:1].upper()}{reason[1:]}: the waiting job was not started", 10_000)

    def _job_finished(self, _outcome: object = None) -> None:
        self.history_panel.refresh()
        self._refresh_status()

    def _refresh_status(self, *_news: object) -> None:
        state = self.status.refresh(self.manager, self.session.is_stale)
        self.runs.set_can_run(state == READY, "" if state == READY else f"The runtime is {state}",
                              warming=state == STARTING)

    # -- messages --------------------------------------------------------------------------------------
    def flash(self, text: str, timeout_ms: int = 10_000) -> None:
        """A passing message in the status bar, beside the runtime's state."""
        self.status.flash(text, timeout_ms)

    def current_message(self) -> str:
        return self.status.message_label.full_text()

    def notify(self, title: str, message: str) -> None:
        self.status.notify(title, message)

    def _show_problem(self, message: str) -> None:
        self.notify("TF Device Panel", message)

    # -- profiles ----------------------------------------------------------------------------------
    def open_profile(self, path: str | Path, quiet: bool = False) -> bool:
        return self.profiles.open(path, quiet)

    def save_profile(self, path: str | Path | None = None) -> bool:
        return self.profiles.save(path)

    def showEvent(self, event: QShowEvent) -> None:
        super().showEvent(event)
        if not self._shown_once:
            self._shown_once = True
            QTimer.singleShot(0, self, self.dock_layout.fill_screen)  # its frame is known once shown

    def show_snippet(self) -> QDialog:
        return self.config_panel.show_snippet()

    def show_share(self) -> QDialog:
        from tf_device_panel.gui.dialogs.share_dialog import ShareDialog

        dialog = ShareDialog(self.config_panel.config(), self)  # the seats start from the window's configuration
        guard_wheel(dialog)
        dialog.show()
        return dialog

    def show_about(self) -> QMessageBox:
        info = self.manager.ready_info
        return show_about(self, info.tf_version if info is not None else None)

    # -- closing ---------------------------------------------------------------------------------------
    def closeEvent(self, event: QCloseEvent) -> None:
        self.closing = self.status.closing = True
        self.status.message_timer.stop()
        self.log_handler.remove()
        self.settings.setValue("geometry", self.saveGeometry())
        self.settings.setValue("window_state", self.dock_layout.saved_state())
        self.runs.save_forms(self.settings)
        self.settings.sync()  # a window opened next (a restart) reads the same file
        self.controller.shutdown()
        self.dock_layout.close()
        self.runs.stop_clock()  # a job stopped by closing may never report its end
        self.memory.stop()
        self.session.stop_telemetry()
        self.machines.stop()
        self.doctor.wait(30)
        self.garbage.stop()
        super().closeEvent(event)


__all__ = ["APPLICATION", "APPLIED_KEY", "LAYOUT_VERSION", "ORGANIZATION", "MainWindow"]
