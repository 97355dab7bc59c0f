"""The main window: devices, configuration, runs, placement log, history, runtime status."""

from __future__ import annotations

import html
import json
import logging
from collections import deque
from pathlib import Path
from typing import Any

from PySide6.QtCore import QByteArray, QRect, QSettings, Qt, QTimer
from PySide6.QtGui import QAction, QCloseEvent, QColor, QFont, QIcon, QKeySequence, QPalette
from PySide6.QtWidgets import (
    QDialog,
    QDockWidget,
    QFileDialog,
    QHBoxLayout,
    QMainWindow,
    QMessageBox,
    QPushButton,
    QVBoxLayout,
    QWidget,
)
from tf_device_panel.core.catalogue import JOBS
from tf_device_panel.core.client import wording
from tf_device_panel.core.client.app_model import AppModel
from tf_device_panel.core.client.history import RunHistory
from tf_device_panel.core.client.run_manager import PendingRun, RunManager, Submission
from tf_device_panel.core.client.run_record import JobOutcome
from tf_device_panel.core.client.run_state import RunChanges, RunState
from tf_device_panel.core.config import (
    ConfigError,
    DeviceConfig,
    ProfileError,
    load_profile,
    save_profile,
    to_python_snippet,
)
from tf_device_panel.core.devices.gpus import tf_gpu_messages
from tf_device_panel.core.devices.nvml import shared as shared_nvml
from tf_device_panel.core.protocol import events
from tf_device_panel.core.protocol.events import Event
from tf_device_panel.gui import view_settings
from tf_device_panel.gui.config_panel import ConfigPanel
from tf_device_panel.gui.controller import BUSY, EXITED, NOT_STARTED, READY, STARTING, RuntimeController
from tf_device_panel.gui.device_map import DeviceMapPanel
from tf_device_panel.gui.devices_panel import DevicesPanel
from tf_device_panel.gui.doctor_panel import DoctorPanel
from tf_device_panel.gui.history_panel import HistoryPanel
from tf_device_panel.gui.log_handler import WindowLogHandler
from tf_device_panel.gui.log_panel import LogPanel
from tf_device_panel.gui.machines_panel import MachinesPanel
from tf_device_panel.gui.memory_panel import MemoryPanel
from tf_device_panel.gui.notice import show_notice
from tf_device_panel.gui.runs_panel import RunsPanel
from tf_device_panel.gui.widgets import DownScrollArea, ElidedLabel, code_dialog

from tf_device_panel import resources

ORGANIZATION, APPLICATION = "TF Device Panel", "tf-device-panel"
KEPT_WARNINGS = 200
DEFAULT_SIZE = (1280, 820)
SIDE_DOCK_WIDTH = 340     # Devices / Configuration: the widest field plus its scroll bar
READING_DOCK_WIDTH = 560  # Doctor and History: check names, evidence and each run's parameters readable
READING_DOCK_LEAST = 390  # px they keep even where the job's form then takes one column (at 1280: 393 leave it two)
# Saved layouts from another version of the window are not restored: their docks may no longer exist or fit.
LAYOUT_VERSION = 2
ZOOM_KEY, PRESENTATION_KEY = "view/zoom", "view/presentation"
# the device map's share of the height in presentation mode (the result keeps its 300 px plots at 1280×720)
PRESENTATION_BOTTOM_SHARE, PRESENTATION_BOTTOM_SHARE_LARGE = 0.2, 0.25  # from LARGE_SCREEN_HEIGHT: the larger
APPLIED_KEY = "applied_config"  # the configuration last applied, as JSON: restored on the next start
SIDE_DOCKS = ("devices", "config", "history", "doctor")
BOTTOM_DOCK_SHARE = 0.22   # of the window's height: the device map, log or memory under the job's result
MEMORY_PLOT_SMALL, MEMORY_PLOT_LARGE = 150, 200  # px per memory plot when that dock is raised
LARGE_SCREEN_HEIGHT = 950  # px of window from which memory plots get MEMORY_PLOT_LARGE
SCREEN_SHARE = 0.9
ZOOM_SETTLE_MS = 60  # zoom steps this close together are drawn once, at the last step's size


class MainWindow(QMainWindow):
    def __init__(self, profile: str | None = None, *, settings: QSettings | None = None,
                 history: RunHistory | None = None, start_runtime: bool = True,
                 run_manager: RunManager | None = None):
        super().__init__()
        self.setWindowTitle("TF Device Panel")
        self.setMinimumSize(760, 520)
        self.setWindowIcon(QIcon(str(resources.path("icons/tf-device-panel.svg"))))
        self._style = resources.path("style.qss").read_text(encoding="utf-8")
        self.setStyleSheet(self._style)
        self.settings = settings or QSettings(ORGANIZATION, APPLICATION)
        self.history = history or RunHistory()
        self.profile_path: Path | None = None
        self.closing = False
        self.notices: list[str] = []  # every message shown to the user, newest last
        self.logged_warnings: deque[str] = deque(maxlen=KEPT_WARNINGS)
        self.warning_count = 0
        # Installed before the panels start their threads, so the first sampler or NVML warning is shown too.
        self.log_handler = WindowLogHandler(self._show_logged)
        self.log_handler.install()

        self.view = view_settings.current()
        self._base_font = QFont(self.font())
        self._base_palette = QPalette(self.palette())
        self._layout_before_presentation: QByteArray | None = None
        # A zoom step answers at once (its level in the status bar); the window is restyled once a burst of
        # steps ends: each restyle took seconds while every result was drawn again, so presses queued up.
        self._view_timer = QTimer(self)
        self._view_timer.setSingleShot(True)
        self._view_timer.setInterval(ZOOM_SETTLE_MS)
        self._view_timer.timeout.connect(self.apply_view)
        # The window's state without Qt: the configuration, the device inventory and the one telemetry sampler
        # (the memory graphs and the device map read it); started here, after the log handler, so the first
        # sampler or NVML warning is shown too.
        self.model = AppModel(nvml=shared_nvml())
        self.model.start()
        # The run lifecycle is the manager's (`run_manager`: a test's, with fake processes); the controller
        # brings its news onto this thread.
        self.controller = RuntimeController(self.history, self, manager=run_manager)
        self.manager = self.controller.manager
        self.model.run_manager = self.manager
        self.devices = DevicesPanel()
        self.config_panel = ConfigPanel()
        self.runs = RunsPanel()
        self.log = LogPanel()
        self.run_state = RunState()  # the current run as every panel draws it, fed by _handle_events
        self.history_panel = HistoryPanel(self.history)
        self.doctor = DoctorPanel(self.config_panel.config)
        self.memory = MemoryPanel(sampler=self.model.sampler)
        self.model.inventory_changed.subscribe(self.memory.set_inventory)
        self.machines = MachinesPanel(self.settings)
        self.device_map = DeviceMapPanel()
        self.memory.sampleShown.connect(self.device_map.on_sample)

        self.setCentralWidget(self.runs)
        # The panel's fields wrap or elide, so the dock scrolls down, never sideways; what cannot shrink (a GPU's
        # split rows, which come with the runtime's report) widens the dock rather than being cut off.
        config_scroll = DownScrollArea(self.config_panel)
        self.config_scroll = config_scroll
        # Apply and Copy as Python stay in sight below the fields, however far those scroll.
        config_dock_body = QWidget()
        config_column = QVBoxLayout(config_dock_body)
        config_column.setContentsMargins(0, 0, 0, 4)
        config_column.addWidget(config_scroll, 1)
        panel_layout = self.config_panel.layout()
        for pinned in (self.config_panel.stale_label, self.config_panel.apply_button, self.config_panel.snippet_button):
            if panel_layout is not None:
                panel_layout.removeWidget(pinned)
        config_buttons = QHBoxLayout()
        config_buttons.setContentsMargins(8, 0, 8, 0)
        config_buttons.addWidget(self.config_panel.apply_button)
        config_buttons.addWidget(self.config_panel.snippet_button)
        config_column.addWidget(self.config_panel.stale_label)
        config_column.addLayout(config_buttons)
        self.docks = {
            "devices": self._dock("Devices", self.devices, Qt.DockWidgetArea.LeftDockWidgetArea),
            "config": self._dock("Configuration", config_dock_body, Qt.DockWidgetArea.LeftDockWidgetArea,
                                 "Configuration (before TF initializes)"),
            "log": self._dock("Placement log", self.log, Qt.DockWidgetArea.BottomDockWidgetArea),
            "history": self._dock("History", self.history_panel, Qt.DockWidgetArea.RightDockWidgetArea),
            "doctor": self._dock("Doctor", self.doctor, Qt.DockWidgetArea.RightDockWidgetArea, "Doctor (why no GPU?)"),
            "memory": self._dock("Memory (live)", self.memory, Qt.DockWidgetArea.BottomDockWidgetArea),
            "machines": self._dock("Machines (lab)", self.machines, Qt.DockWidgetArea.RightDockWidgetArea),
            "map": self._dock("Device map", self.device_map, Qt.DockWidgetArea.BottomDockWidgetArea),
        }
        self.tabifyDockWidget(self.docks["log"], self.docks["memory"])
        self.tabifyDockWidget(self.docks["log"], self.docks["map"])
        self.docks["map"].raise_()  # the picture an instructor points at
        self.tabifyDockWidget(self.docks["history"], self.docks["doctor"])
        self.tabifyDockWidget(self.docks["devices"], self.docks["config"])
        self.docks["config"].raise_()
        self.docks["history"].hide()
        self.docks["doctor"].hide()
        self.docks["machines"].hide()  # it fetches only once shown: a window without a lab asks no network
        self.docks["machines"].visibilityChanged.connect(self.machines.on_shown)
        for name in ("history", "doctor"):
            self.docks[name].visibilityChanged.connect(self._widen_reading_dock)
        # Memory graphs are read when raised: the bottom docks grow to show each plot whole, and go back to
        # their height when another tab is raised.
        self._height_before_memory: int | None = None
        for name in ("log", "memory", "map"):
            self.docks[name].visibilityChanged.connect(self._fit_bottom_docks)

        # Elided with the whole text as its tooltip: a long failure must not widen the window.
        self.runtime_label = ElidedLabel("Runtime: not started")
        # Passing messages have a label of their own: they used to replace the runtime's state for 10 s.
        self.message_label = ElidedLabel()
        self.message_label.setObjectName("status-message")
        self.message_timer = QTimer(self)
        self.message_timer.setSingleShot(True)
        self.message_timer.timeout.connect(self._clear_message)
        self.restart_button = QPushButton("Start runtime")
        self.restart_button.clicked.connect(self.apply_current)
        self.restart_button.hide()
        self.warnings_button = QPushButton()
        self.warnings_button.setObjectName("warnings-button")
        self.warnings_button.setFlat(True)
        self.warnings_button.setToolTip("Warnings logged since the window opened")
        self.warnings_button.clicked.connect(self.show_logged_warnings)
        self.warnings_button.hide()
        self.statusBar().addWidget(self.runtime_label, 3)
        self.statusBar().addWidget(self.message_label, 2)
        self.statusBar().addPermanentWidget(self.warnings_button)
        self.statusBar().addPermanentWidget(self.restart_button)
        self._build_menus()

        self.controller.eventsArrived.connect(self._on_events)
        self.controller.stateChanged.connect(self._on_state)
        self.controller.jobFinished.connect(self._on_job_finished)
        self.controller.problem.connect(self._show_problem)
        self.controller.waitingStarted.connect(self._waiting_job_started)
        self.controller.waitingRefused.connect(self._waiting_job_refused)
        self.config_panel.applyRequested.connect(self.apply)
        self.config_panel.changed.connect(self._refresh_status)
        self.config_panel.changed.connect(self._draft_changed)
        self.config_panel.snippet_button.clicked.connect(self.show_snippet)
        self.runs.runRequested.connect(self.run_job)
        self.runs.stopRequested.connect(self.stop_job)
        self.history_panel.runAgainRequested.connect(self.run_again)
        self.history_panel.applyConfigRequested.connect(self.apply_from_history)
        self.history_panel.refresh()
        self.devices.doctorRequested.connect(self.open_doctor)

        self.resizeDocks([self.docks["devices"]], [SIDE_DOCK_WIDTH], Qt.Orientation.Horizontal)
        self._default_state = self.saveState(LAYOUT_VERSION)
        self._restore_settings()
        self._restore_view()
        if profile is not None:
            self.open_profile(profile)
        elif self.settings.value("last_profile"):
            last = str(self.settings.value("last_profile"))
            if Path(last).is_file():
                self.open_profile(last, quiet=True)
        if profile is None:
            # The configuration last applied, as it was (the profile may have been changed after it was opened):
            # the first spare warms with it.
            restored = self._saved_applied_config()
            if restored is not None:
                self.config_panel.set_config(restored)
        if start_runtime:
            self.apply(self.config_panel.config())

    # -- zoom and presentation mode ------------------------------------------------------------------
    def _restore_view(self) -> None:
        try:
            zoom = float(str(self.settings.value(ZOOM_KEY, 1.0)))
        except ValueError:
            zoom = 1.0
        self.view.zoom = min(max(zoom, view_settings.ZOOM_MIN), view_settings.ZOOM_MAX)
        self.view.presentation = False
        self.apply_view()
        if str(self.settings.value(PRESENTATION_KEY, "false")).lower() == "true":
            self.set_presentation(True)

    def zoom_in(self) -> None:
        self.view.zoom_in()
        self._view_changed()

    def zoom_out(self) -> None:
        self.view.zoom_out()
        self._view_changed()

    def zoom_reset(self) -> None:
        self.view.zoom = 1.0
        self._view_changed()

    def _view_changed(self) -> None:
        self.settings.setValue(ZOOM_KEY, self.view.zoom)
        self._view_timer.start()  # apply_view, once the steps pause
        self.flash(f"Zoom {self.view.zoom * 100:.0f} %" + (" (presentation mode)" if self.view.presentation else ""),
                   3000)

    def set_presentation(self, on: bool) -> None:
        """View → Presentation mode: larger text and lines, high contrast, the side docks put away so the job's
        result and the device map take the room; leaving it puts the layout back as it was."""
        on = bool(on)
        if on == self.view.presentation:
            self.presentation_action.setChecked(on)
            return
        if on:
            self._layout_before_presentation = self.saveState(LAYOUT_VERSION)
        self.view.presentation = on
        self._view_timer.stop()  # a zoom step waiting to be drawn is drawn now, with the mode
        self.presentation_action.setChecked(on)
        self.settings.setValue(PRESENTATION_KEY, on)
        # The map's explanation is the presenter's to say: its two large lines cut the boxes' op counts at 720 px.
        self.device_map.set_presenting(on)
        # Its title bar too: the map is alone at the bottom, and its boxes need the 25 px.
        self.docks["map"].setTitleBarWidget(QWidget() if on else None)  # type: ignore[arg-type]  # None: the default
        self.apply_view()
        if on:
            # The log and memory tabs too: their least heights held the map's tab group taller than the result
            # could spare (a 300 px plot at 1280×720); leaving the mode brings them back.
            for name in (*SIDE_DOCKS, "log", "memory"):
                self.docks[name].hide()
            self.docks["map"].show()
            self.docks["map"].raise_()
            share = PRESENTATION_BOTTOM_SHARE_LARGE if self.height() >= LARGE_SCREEN_HEIGHT else \
                PRESENTATION_BOTTOM_SHARE
            self.resizeDocks([self.docks["map"]], [int(self.height() * share)], Qt.Orientation.Vertical)
            QTimer.singleShot(0, self, self._fit_presentation_map)  # once the map has its larger font
        elif self._layout_before_presentation is not None:
            self.restoreState(self._layout_before_presentation, LAYOUT_VERSION)
            self._layout_before_presentation = None

    def _fit_presentation_map(self) -> None:
        """The device map's boxes whole in presentation mode (at 1280×720 a fifth of the height cut them)."""
        dock = self.docks["map"]
        if self.closing or not self.view.presentation or dock.isFloating() or not dock.isVisible():
            return
        need = self.device_map.least_height()
        if dock.height() < need:
            self.resizeDocks([dock], [need], Qt.Orientation.Vertical)

    def apply_view(self) -> None:
        """Fonts scaled by the zoom (widgets with a font of their own, the monospace views, scale too), plot
        lines thickened, and in presentation mode a high-contrast palette."""
        scale = self.view.scale
        # Through the style sheet: with one set, a font set on the window does not reach its children; a size
        # rule there reaches every widget and keeps each one's family (the monospace views stay monospace).
        size = self._base_font.pointSizeF() * scale
        self.setStyleSheet(self._style + (f"\n* {{ font-size: {size:.1f}pt; }}" if scale != 1.0 else ""))
        self.setPalette(self._contrast_palette() if self.view.presentation else self._base_palette)
        self.memory.set_line_width(2 if self.view.presentation else 1)
        self.runs.fit_job_list()
        self.runs.redraw_results()

    def _contrast_palette(self) -> QPalette:
        palette = QPalette(self._base_palette)
        for role, color in ((QPalette.ColorRole.Window, "#ffffff"), (QPalette.ColorRole.Base, "#ffffff"),
                            (QPalette.ColorRole.WindowText, "#000000"), (QPalette.ColorRole.Text, "#000000"),
                            (QPalette.ColorRole.ButtonText, "#000000"), (QPalette.ColorRole.PlaceholderText,
                                                                         "#333333")):
            palette.setColor(role, QColor(color))
        return palette

    def _saved_applied_config(self) -> DeviceConfig | None:
        saved = self.settings.value(APPLIED_KEY)
        if not saved:
            return None
        try:
            return DeviceConfig.from_json(json.loads(str(saved)))
        except (ValueError, ConfigError) as exc:  # from another version, or edited by hand: say so, start fresh
            logging.getLogger(__name__).warning("The configuration applied last time could not be restored (%s)",
                                                exc)
            return None

    def open_doctor(self) -> None:
        self.docks["doctor"].show()
        self.docks["doctor"].raise_()
        if not self.doctor.checks and not self.doctor.running:
            self.doctor.run()

    def _dock(self, title: str, widget: QWidget, area: Qt.DockWidgetArea, long_title: str = "") -> QDockWidget:
        """A dock titled `title`: a tab's text when docks share a place, so short enough that four tabs read
        whole in a 390 px side dock ("De…", "H…" before); `long_title` says more in the View menu and on hover."""
        dock = QDockWidget(title, self)
        dock.setObjectName(title.split()[0].lower() + "-dock")
        dock.setWidget(widget)
        if long_title:
            dock.toggleViewAction().setText(long_title)
            dock.setToolTip(long_title)
        self.addDockWidget(area, dock)
        return dock

    def _build_menus(self) -> None:
        file_menu = self.menuBar().addMenu("&File")
        self._action(file_menu, "&Open profile…", self._open_dialog, QKeySequence.StandardKey.Open)
        self._action(file_menu, "&Save profile", self.save_profile, QKeySequence.StandardKey.Save)
        self._action(file_menu, "Save profile &as…", self._save_as_dialog, QKeySequence.StandardKey.SaveAs)
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
        self._action(view_menu, "&Actual size", self.zoom_reset, "Ctrl+0")
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
        self.log.clear_placements()
        self.devices.show_message("Starting a TensorFlow runtime with: " + config.summary())
        self.manager.apply(config)
        self.config_panel.mark_applied(config)
        self.model.mark_applied(config)
        self.runs.show_configuration(config)
        self.settings.setValue(APPLIED_KEY, json.dumps(config.to_json()))
        self._refresh_status()

    @property
    def pending_run(self) -> PendingRun | None:
        """The job waiting for the spare to warm (the manager starts it, or refuses it)."""
        return self.manager.pending

    def stop_job(self) -> None:
        if self.manager.cancel_waiting():
            self.runs.cancel_queued()
        elif self.manager.cancel():
            self.runs.show_stopping(self.manager.cancel_grace_s)

    def run_job(self, job: str, params: dict[str, Any]) -> None:
        """Run now if the spare is warm; while it warms (after every run, on start, after Apply) the job waits
        for it and the manager starts it by itself."""
        submission = self.manager.run(job, params)
        if submission == Submission.WAITING:
            self.runs.job_queued(job)
        elif submission == Submission.STARTED:
            self._waiting_job_started(job)
        self._refresh_status()

    def _waiting_job_started(self, job: str) -> None:
        self.log.clear_placements()
        self.runs.job_started(job)
        self._refresh_status()

    def _waiting_job_refused(self, job: str, reason: str) -> None:
        self.runs.cancel_queued(reason)
        self.flash(f"{reason[:1].upper()}{reason[1:]}: the waiting job was not started", 10_000)

    def run_again(self, job: str, params: dict[str, Any]) -> None:
        """A past run's job and parameters in the form, run at once when the runtime can take it."""
        self.runs.load_params(job, params)
        if self.manager.state in (READY, STARTING) and self.manager.pending is None:
            self.runs.run_button.click()  # the form checks the parameters first, as a press of Run does
        else:
            self.flash(f"{job}'s parameters are in the form; press Run once the running job has ended", 10_000)

    def apply_from_history(self, config: DeviceConfig) -> None:
        self.config_panel.set_config(config)
        self.apply_current()

    def _on_events(self, batch: list[Event]) -> None:
        try:
            self._handle_events(batch)
        finally:
            self.controller.batch_done()

    def _handle_events(self, batch: list[Event]) -> None:
        # The run state is fed each event once, in order; the panels draw what it made of the batch. A run's
        # report, its job's start, placements and end often come in one batch: counted in one place, they no
        # longer have to be handed on around each ready report.
        changes = self.run_state.apply_all(batch)
        self.log.add_events(batch, changes)
        self._show_job_output(changes)
        self.memory.on_events(batch, changes)
        for event in batch:
            match event:
                case events.Ready():
                    self._on_ready(event)
                case events.Progress(done=done, total=total, message=message):
                    self.runs.show_progress(done, total, message)
                case events.Metric(name="loss", step=step, value=value):
                    self.runs.add_live_loss(int(step or 0), float(value))
                case events.StartupError():
                    self.devices.show_message(f"<b style='color:#d33'>{html.escape(wording.startup_error(event))}</b>")
                case events.RuntimeExited(expected=False) | events.RuntimeExited(killed_for_cancel=True):
                    self._runtime_died(event)  # a kill for a cancel is expected (the run's outcome), yet news
        self.device_map.on_events(batch, self.run_state)  # after _on_ready: a ready report sets its devices

    def _show_job_output(self, changes: RunChanges) -> None:
        """The running job's own lines to its console (a spare's start-up lines have no job id: never there)."""
        run = self.manager.job_run
        if run is None or run.job_id is None or run.job_id != self.run_state.job_id:
            return
        if changes.output:
            self.runs.add_output(run.outcome.job, changes.output)

    def _draft_changed(self) -> None:
        if not self.config_panel.problems:  # a draft with problems is no configuration yet
            self.model.set_draft(self.config_panel.config())

    def _on_ready(self, ready: events.Ready) -> None:
        runtime = self.manager.runtime
        tf_lines = runtime.tf_lines() if runtime is not None else []  # TensorFlow's own, never a job's
        # TensorFlow's GPUs matched to NVML's once; the Devices list, the GPU editors (CUDA's totals), the device
        # map and the memory graphs (subscribed to the model) all read this one answer.
        inventory = self.model.runtime_ready(ready)
        self.devices.show_devices(ready, inventory, tf_lines)
        reasons = tf_gpu_messages(tf_lines)[-2:]
        self.config_panel.set_gpus(inventory.gpu_infos(), "TensorFlow said: " + " / ".join(reasons) if reasons else "")
        self.runs.set_devices([d["short_name"] for d in ready.logical])
        applied = self.manager.applied
        self.device_map.set_devices(ready, applied.to_json() if applied else None, inventory)

    def _runtime_died(self, info: events.RuntimeExited) -> None:
        """Says so; a run killed for a cancel is restarted by the manager (the window does not decide that)."""
        tail = "\n".join(info.last_lines[-8:])
        self.devices.show_message(f"<b style='color:#d33'>The runtime {info.description}.</b>")
        if self.closing:
            return
        self.flash(f"Runtime {info.description}", 10_000)
        self.runtime_label.setToolTip(f"Last output:\n{tail}" if tail else "")
        applied = self.manager.applied
        if info.killed_for_cancel and applied is not None:
            # Stop had to kill the runtime: like a notebook kernel, the next run gets a fresh one with the same
            # configuration (the manager's spare).
            self.flash(f"Runtime {info.description}; the next run gets a fresh one with the same configuration",
                       10_000)
            self.devices.show_message("The job did not stop in time, so its runtime was killed. The next run gets "
                                      "a fresh runtime with: " + applied.summary())

    def _on_job_finished(self, outcome: JobOutcome) -> None:
        self.runs.job_finished(outcome)
        self.log.no_placements_because(placement_silence(outcome))
        self.history_panel.refresh()
        self._refresh_status()

    def _on_state(self, _state: str) -> None:
        self._refresh_status()

    def _refresh_status(self) -> None:
        manager = self.manager
        state = manager.state
        applied = manager.applied
        physical = manager.devices.physical if manager.devices is not None else None
        gpus_present = None if physical is None else any(d["device_type"] == "GPU" for d in physical)
        summary = applied.summary(gpus_present) if applied else ""
        stale = self.config_panel.is_stale and state not in (EXITED, NOT_STARTED)
        text = f"Runtime: {manager.status_text()} — {summary}" if summary else "Runtime not started"
        if stale:
            text = "⟳ STALE (configuration changed; Apply to restart) — " + text
        self.runtime_label.setText(text)
        self.restart_button.setVisible(state in (EXITED, NOT_STARTED))
        self.restart_button.setText("Restart runtime" if state == EXITED else "Start runtime")
        self.runs.set_can_run(state == READY, "" if state == READY else f"The runtime is {state}",
                              warming=state == STARTING)

    def flash(self, text: str, timeout_ms: int = 10_000) -> None:
        """A passing message in the status bar, beside the runtime's state."""
        self.message_label.setText(text)
        self.message_timer.start(timeout_ms)

    def current_message(self) -> str:
        return self.message_label.full_text()

    def _clear_message(self) -> None:
        self.message_label.setText("")

    def notify(self, title: str, message: str) -> None:
        self.notices.append(f"{title}: {message}")
        self.flash(message.splitlines()[0] if message else title, 10_000)
        if not self.closing:
            show_notice(self, title, message)

    def _show_problem(self, message: str) -> None:
        self.notify("TF Device Panel", message)

    def _show_logged(self, level: int, message: str) -> None:
        """A warning logged anywhere in the package (delivered on this thread by the log handler)."""
        if self.closing:
            return
        text = f"{logging.getLevelName(level).capitalize()}: {message}"
        self.notices.append(text)
        self.logged_warnings.append(text)
        self.warning_count += 1
        # The status bar, not a dialog: the same warning can come from a background thread many times over.
        self.flash("⚠ " + (message.splitlines() or [""])[0], 10_000)
        self.warnings_button.setText(f"⚠ {self.warning_count}")
        self.warnings_button.show()

    def show_logged_warnings(self) -> None:
        shown = list(self.logged_warnings)
        older = self.warning_count - len(shown)
        text = "\n\n".join(shown) + (f"\n\n({older} older warning(s) not kept)" if older else "")
        show_notice(self, "Warnings", text)

    # -- profiles ----------------------------------------------------------------------------------
    def open_profile(self, path: str | Path, quiet: bool = False) -> bool:
        try:
            config = load_profile(path)
        except ProfileError as exc:
            if not quiet:
                self._profile_error("Cannot open profile", exc)
            return False
        self.profile_path = Path(path)
        self.config_panel.set_config(config)
        self.settings.setValue("last_profile", str(self.profile_path))
        self.setWindowTitle(f"TF Device Panel — {self.profile_path.name}")
        return True

    def _profile_error(self, title: str, exc: ProfileError) -> None:
        details = "\n".join(f"• {p}" for p in exc.problems)
        self.notify(title, f"{exc.path}\n\n{details}")

    def _open_dialog(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Open profile", str(self.profile_path or ""), "Profiles (*.json)")
        if path:
            self.open_profile(path)

    def save_profile(self, path: str | Path | None = None) -> bool:
        target = Path(path) if path else self.profile_path
        if target is None:
            return self._save_as_dialog()
        try:
            save_profile(self.config_panel.config(), target)
        except ProfileError as exc:
            self._profile_error("Profile not saved", exc)
            return False
        except OSError as exc:
            self.notify("Profile not saved", f"{target}: {exc.strerror}")
            return False
        self.profile_path = target
        self.settings.setValue("last_profile", str(target))
        self.flash(f"Saved {target}", 5000)
        return True

    def _save_as_dialog(self) -> bool:
        path, _ = QFileDialog.getSaveFileName(self, "Save profile as", str(self.profile_path or "profile.json"),
                                              "Profiles (*.json)")
        return self.save_profile(path) if path else False

    def show_snippet(self) -> QDialog:
        dialog = code_dialog(self, "Configuration as Python",
                             "Paste this at the very top of your training script, before anything imports "
                             "TensorFlow's devices:", to_python_snippet(self.config_panel.config()),
                             object_name="snippet-dialog")
        dialog.show()
        return dialog

    def show_share(self) -> QDialog:
        from tf_device_panel.gui.share_dialog import ShareDialog

        dialog = ShareDialog(self.config_panel.config(), self)  # the seats start from the window's configuration
        dialog.show()
        return dialog

    def show_about(self) -> QMessageBox:
        info = self.manager.ready_info
        box = QMessageBox(QMessageBox.Icon.Information, "About TF Device Panel",
                          about_html(info.tf_version if info is not None else None, shared_nvml().driver_version()),
                          QMessageBox.StandardButton.Ok, self)
        box.setObjectName("about")
        box.setTextFormat(Qt.TextFormat.RichText)
        box.setTextInteractionFlags(Qt.TextInteractionFlag.TextBrowserInteraction)
        box.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        box.open()
        return box

    # -- settings and closing ----------------------------------------------------------------------
    def _available(self) -> QRect:
        screen = self.screen()
        return screen.availableGeometry() if screen is not None else QRect(0, 0, *DEFAULT_SIZE)

    def _fit_to_screen(self) -> None:
        """The default size, shrunk to the screen the window opens on (its frame and title bar included)."""
        available = self._available()
        frame_w = max(self.frameGeometry().width() - self.width(), 0)
        frame_h = max(self.frameGeometry().height() - self.height(), 0) or 32
        # Most of a large screen, all of a small one.
        width = min(max(DEFAULT_SIZE[0], int(available.width() * SCREEN_SHARE)), available.width() - frame_w)
        height = min(max(DEFAULT_SIZE[1], int(available.height() * SCREEN_SHARE)), available.height() - frame_h)
        self.resize(max(width, self.minimumWidth()), max(height, self.minimumHeight()))
        self.move(available.topLeft())
        self._default_dock_sizes()

    def _default_dock_sizes(self) -> None:
        """Side docks as wide as their fields; the bottom docks about a quarter of the height, so the job form and its
        result keep the rest even on a 720-pixel screen."""
        self.resizeDocks([self.docks["devices"]], [SIDE_DOCK_WIDTH], Qt.Orientation.Horizontal)
        bottom = max(int(self.height() * BOTTOM_DOCK_SHARE), 150)
        self.resizeDocks([self.docks["log"]], [bottom], Qt.Orientation.Vertical)

    def reset_layout(self) -> None:
        """Docks where a fresh window has them, and the window fitted to its screen."""
        self.restoreState(self._default_state, LAYOUT_VERSION)
        for dock in self.docks.values():
            if dock.isFloating():
                dock.setFloating(False)
        self._fit_to_screen()

    def layout_fits(self) -> bool:
        """Whether the window lies within its screen and its centre has room for the job list and form."""
        available = self._available()
        frame = self.frameGeometry()
        inside = available.contains(frame) or (frame.width() <= available.width()
                                                and frame.height() <= available.height())
        centre = self.centralWidget()
        room = centre is None or centre.width() >= centre.minimumSizeHint().width()
        side_docks = [self.docks[name] for name in SIDE_DOCKS]
        return inside and room and all(dock.width() <= self.width() // 2 for dock in side_docks
                                       if dock.isVisible() and not dock.isFloating())

    def _restore_settings(self) -> None:
        geometry = self.settings.value("geometry")
        state = self.settings.value("window_state")
        restored = (isinstance(geometry, QByteArray) and self.restoreGeometry(geometry)
                    and isinstance(state, QByteArray) and self.restoreState(state, LAYOUT_VERSION))
        if not restored:
            self._fit_to_screen()
        elif not self.layout_fits():
            # A layout saved on a larger screen, or squeezed by an old bug, would come back unusable.
            self.reset_layout()

    def _widen_reading_dock(self, shown: bool) -> None:
        dock = self.sender()
        if not isinstance(dock, QDockWidget) or not shown or dock.isFloating() or self.closing:
            return
        QTimer.singleShot(0, lambda: self._place_reading_dock(dock))  # once the dock has been laid out

    def _place_reading_dock(self, dock: QDockWidget) -> None:
        """Doctor and History need READING_DOCK_WIDTH; the Runs panel its least width. Where the window is too
        narrow for both beside the side docks (1280 px), the reading dock opens as a tab over Devices and
        Configuration, which can spare their width while it is read, instead of squeezing the job's form."""
        if self.closing or dock.isFloating() or not dock.isVisible():
            return
        centre = self.centralWidget()
        least = centre.minimumSizeHint().width() if centre is not None else 0
        left_area = Qt.DockWidgetArea.LeftDockWidgetArea
        left = [d for d in (self.docks["devices"], self.docks["config"])
                if d.isVisible() and not d.isFloating() and self.dockWidgetArea(d) == left_area]
        left_width = max((d.width() for d in left), default=0)
        in_left = self.dockWidgetArea(dock) == left_area
        beside = 0 if in_left else left_width
        if not in_left and left and self.width() - beside - least - 12 < READING_DOCK_WIDTH:
            self.tabifyDockWidget(left[-1], dock)
            in_left = True
        # As wide as leaves the job's form its two columns, at least READING_DOCK_LEAST (then one column).
        roomy = self.runs.two_column_width() if centre is self.runs else least
        width = max(min(READING_DOCK_WIDTH, self.width() - roomy - (0 if in_left else left_width) - 12),
                    min(READING_DOCK_LEAST, self.width() // 2))
        if dock.width() != width:
            self.resizeDocks([dock], [width], Qt.Orientation.Horizontal)
        dock.raise_()

    def memory_plot_height(self) -> int:
        """The least height of each memory plot when its dock is raised: 150 px on a 720-pixel screen, 200
        from about 1080."""
        return MEMORY_PLOT_LARGE if self.height() >= LARGE_SCREEN_HEIGHT else MEMORY_PLOT_SMALL

    def _fit_bottom_docks(self, shown: bool) -> None:
        dock = self.sender()
        if not shown or not isinstance(dock, QDockWidget) or dock.isFloating() or self.closing:
            return
        QTimer.singleShot(0, lambda: self._resize_bottom_for(dock))  # once the tab switch has laid out

    def _resize_bottom_for(self, dock: QDockWidget, attempt: int = 0, requested: int = 0) -> None:
        if self.closing or dock.isFloating() or not dock.isVisible():
            return
        if dock is self.docks["memory"]:
            missing = self.memory.height_missing(self.memory_plot_height())
            centre = self.centralWidget()
            spare = centre.height() - centre.minimumSizeHint().height() if centre is not None else 0
            grow = min(missing, max(spare, 0))  # never below what the job's form needs
            if grow > 0 and attempt < 3:  # the docks' layout rounds: measure again after each step
                if self._height_before_memory is None:
                    self._height_before_memory = dock.height()
                # the whole tab group, sized through each of its docks (one alone was held to its old size)
                # A size asked of resizeDocks includes the tab bar under the area: ask more until it shows.
                asked = (requested or dock.height()) + grow
                group = [d for d in self.tabifiedDockWidgets(dock) if not d.isFloating()] + [dock]
                self.resizeDocks(group, [asked] * len(group), Qt.Orientation.Vertical)
                QTimer.singleShot(0, lambda: self._resize_bottom_for(dock, attempt + 1, asked))
        elif self._height_before_memory is not None:
            group = [d for d in self.tabifiedDockWidgets(dock) if not d.isFloating()] + [dock]
            self.resizeDocks(group, [self._height_before_memory] * len(group), Qt.Orientation.Vertical)
            self._height_before_memory = None

    def closeEvent(self, event: QCloseEvent) -> None:
        self.closing = True
        self.message_timer.stop()
        self._view_timer.stop()
        self.log_handler.remove()
        self.settings.setValue("geometry", self.saveGeometry())
        self.settings.setValue("window_state", self._layout_before_presentation
                               if self._layout_before_presentation is not None else self.saveState(LAYOUT_VERSION))
        self.settings.sync()  # a window opened next (a restart) reads the same file
        self.controller.shutdown()
        self.view.zoom, self.view.presentation = 1.0, False  # the next window reads its own from its settings
        self.runs.stop_clock()  # a job stopped by closing may never report its end
        self.memory.stop()
        self.model.stop()
        self.machines.stop()
        self.doctor.wait(30)
        super().closeEvent(event)


def placement_silence(outcome: JobOutcome) -> str:
    """Why a finished run logged no placement, as the person can change it."""
    spec = JOBS.get(outcome.job)
    own = next((param for param in spec.params if param.name == "log_placement"), None) if spec else None
    if own is not None and outcome.params.get("log_placement") is False:
        return (f"{spec.title if spec else outcome.job}'s own “{own.label}” switch was off for this run; tick it in "
                "the job's form to see where its ops run.")
    if outcome.config.get("log_placement") is False:
        return "“Log device placement” is off in the Configuration; tick it and Apply to see where ops run."
    if outcome.status != "ok":
        return f"the run ended ({outcome.status}) before any op was placed."
    return "this run placed no TensorFlow op."


def about_html(tf_version: str | None, driver: str | None) -> str:
    """The versions a bug report needs; TensorFlow's comes from the runtime, as this process never imports it."""
    from importlib import metadata

    import pyqtgraph
    import PySide6
    from PySide6.QtCore import qVersion

    try:
        app_version = metadata.version("tf-device-panel")
    except metadata.PackageNotFoundError:
        app_version = "unknown (not installed)"
    readme = resources.readme_url()
    link = (f"<p><a href='{readme}'>README: how to use it</a></p>" if readme
            else "<p>How to use it: <code>tf-device-panel --help</code></p>")
    rows = [("TF Device Panel", app_version),
            ("TensorFlow", tf_version or "not known yet (no runtime has started)"),
            ("Qt", f"{qVersion()} (PySide6 {PySide6.__version__})"), ("pyqtgraph", pyqtgraph.__version__),
            ("NVIDIA driver (NVML)", driver or "none found")]
    table = "".join(f"<tr><td>{name}</td><td><b>{value}</b></td></tr>" for name, value in rows)
    return (f"<p>See the devices TensorFlow can use, configure them before TensorFlow initializes, and see "
            f"where every op runs.</p><table cellspacing=4>{table}</table>{link}")
