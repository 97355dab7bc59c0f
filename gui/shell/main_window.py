"""The main window: it makes the panels that gui/docks/dock_list.py lists, each with what it declares it needs, docks
them as they declare, and builds the menus declared in gui/shell/menus.py. Each panel wires itself to the session
(`wire`); the window routes nothing between them."""

from __future__ import annotations

from typing import TypeVar

from PySide6.QtCore import QSettings, QTimer
from PySide6.QtGui import QAction, QCloseEvent, QIcon, QShowEvent
from PySide6.QtWidgets import QMainWindow, QMessageBox
from tf_device_panel.core.catalogue import ParamValues
from tf_device_panel.core.client import session as news
from tf_device_panel.core.client.history import RunHistory
from tf_device_panel.core.client.run_manager import RunManager
from tf_device_panel.core.config import DeviceConfig
from tf_device_panel.core.devices.nvml import shared as shared_nvml
from tf_device_panel.core.devices.telemetry import Sampler
from tf_device_panel.core.hub import HandlerFailed
from tf_device_panel.gui.dialogs.about import show_about
from tf_device_panel.gui.docks import HoldsThreads, Panel, WaitsToBeShown, dock_list
from tf_device_panel.gui.docks.config_panel import ConfigPanel
from tf_device_panel.gui.docks.devices_panel import DevicesPanel
from tf_device_panel.gui.docks.doctor_panel import DoctorPanel
from tf_device_panel.gui.docks.history_panel import HistoryPanel
from tf_device_panel.gui.docks.runs_panel import RunsPanel
from tf_device_panel.gui.shell.controller import BUSY, READY, STARTING, RuntimeController
from tf_device_panel.gui.shell.garbage import GuiThreadCollection
from tf_device_panel.gui.shell.log_handler import WindowLogHandler
from tf_device_panel.gui.shell.menus import add_menus
from tf_device_panel.gui.shell.profiles import APPLIED_KEY, Profiles
from tf_device_panel.gui.shell.status_bar import RuntimeStatusBar
from tf_device_panel.gui.shell.window_layout import LAYOUT_VERSION, WindowLayout

from tf_device_panel import resources

ORGANIZATION, APPLICATION = "TF Device Panel", "tf-device-panel"
P = TypeVar("P")


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
        self.dock_layout: WindowLayout = WindowLayout(self)
        # The run lifecycle is the manager's (`run_manager`: a test's, with fake processes); what the window shows
        # is its session's, with the process's one telemetry sampler (the memory graphs and the device map read it).
        self.controller: RuntimeController = RuntimeController(self.history, self, manager=run_manager)
        self.manager: RunManager = self.controller.manager
        self.session = self.controller.session
        self.session.attach_sampler(Sampler(nvml=shared_nvml()))
        if not shared_nvml().init():  # no NVIDIA driver: the first spare warming says so, not "all GPUs"
            self.status.gpus_present = False
        self.session.start_telemetry()

        self.runs = RunsPanel()  # the centre: the jobs, a job's form and its result
        self.setCentralWidget(self.runs)
        self.runs.wire(self.controller)
        # Each listed panel made with what it declares it needs, docked as it declares, then wired.
        given = {"history": self.history, "settings": self.settings, "sampler": self.session.sampler,
                 "config_source": lambda: self.config_panel.config()}
        self.panels: dict[str, Panel] = {kind.DOCK.name: kind(**{need: given[need] for need in kind.DOCK.needs})
                                         for kind in dock_list.PANELS}  # by dock name, in dock order
        self.docks = self.dock_layout.dock_panels(self.panels)
        for name, panel in self.panels.items():
            panel.wire(self.controller)
            if isinstance(panel, WaitsToBeShown):
                self.docks[name].visibilityChanged.connect(panel.on_shown)
        # The panels whose requests the window answers (applying a configuration, running again, the Doctor).
        self.config_panel: ConfigPanel = self.panel(ConfigPanel)
        self.history_panel, self.doctor = self.panel(HistoryPanel), self.panel(DoctorPanel)
        self.profiles: Profiles = Profiles(self, self.settings, self.config_panel, self.status.notify,
                                           self.status.flash)
        self.menu_actions: dict[str, QAction] = add_menus(self)
        self._hear_news()
        self.config_panel.applyRequested.connect(self.apply)
        self.history_panel.runAgainRequested.connect(self.run_again)
        self.history_panel.applyConfigRequested.connect(self.apply_from_history)
        self.history_panel.refresh()
        self.panel(DevicesPanel).doctorRequested.connect(self.open_doctor)

        self.runs.restore_forms(self.settings)
        self.dock_layout.follow_docks()
        self.dock_layout.restore()
        self.profiles.restore(profile)
        if start_runtime:
            self.apply(self.config_panel.config())

    def panel(self, kind: type[P]) -> P:
        """The window's panel of that class."""
        return next(panel for panel in self.panels.values() if isinstance(panel, kind))

    def _hear_news(self) -> None:
        for kind in (news.ManagerStateChanged, news.JobHandedOver, news.JobQueued, news.DraftChanged):
            self.controller.subscribe(self, kind, self._refresh_status)
        self.controller.subscribe(self, news.JobEnded, self._job_finished)
        self.controller.subscribe(self, news.ProblemNotice, lambda notice: self._show_problem(notice.text))
        self.controller.subscribe(self, HandlerFailed, lambda failed: self._show_problem(failed.text))
        self.controller.subscribe(self, news.WaitingRefused, lambda refused: self._waiting_refused(refused.job,
                                                                                                  refused.why))
        self.controller.subscribe(self, news.RunStateChanged,
                                  lambda change: self.status.runtime_news(change, self.session.applied))

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
            self.status.flash(f"{job}'s parameters are in the form; press Run once the running job has ended", 10_000)

    def apply_from_history(self, config: DeviceConfig) -> None:
        self.config_panel.set_config(config)
        self.apply_current()

    def open_doctor(self) -> None:
        self.docks["doctor"].show()
        self.docks["doctor"].raise_()
        if not self.doctor.checks and not self.doctor.running:
            self.doctor.run()

    def _waiting_refused(self, _job: str, reason: str) -> None:
        self.status.flash(f"{reason[:1].upper()}{reason[1:]}: the waiting job was not started", 10_000)

    def _job_finished(self, _outcome: object = None) -> None:
        self.history_panel.refresh()
        self._refresh_status()

    def _refresh_status(self, *_news: object) -> None:
        state = self.status.refresh(self.manager, self.session.is_stale)
        self.runs.set_can_run(state == READY, "" if state == READY else f"The runtime is {state}",
                              warming=state == STARTING)

    def _show_problem(self, message: str) -> None:
        self.status.notify("TF Device Panel", message)

    def showEvent(self, event: QShowEvent) -> None:
        super().showEvent(event)
        if not self._shown_once:
            self._shown_once = True
            QTimer.singleShot(0, self, self.dock_layout.fill_screen)  # its frame is known once shown

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
        holders = [panel for panel in (self.runs, *self.panels.values()) if isinstance(panel, HoldsThreads)]
        for panel in sorted(holders, key=lambda panel: panel is self.doctor):  # its probe's wait (≤ 30 s) last
            panel.shut_down()
        self.session.stop_telemetry()
        self.garbage.stop()
        super().closeEvent(event)


__all__ = ["APPLICATION", "APPLIED_KEY", "LAYOUT_VERSION", "ORGANIZATION", "MainWindow"]
