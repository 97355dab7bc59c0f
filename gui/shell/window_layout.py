"""How the window lays its docks out: a dock for each panel, placed as the panel declares (`dock_panels`), sizes
fitted to the screen, the reading docks (Doctor, History) given their width, the bottom docks grown to show each
memory plot whole, zoom and presentation mode, and the layout saved and restored. The window holds the docks; this
makes them and decides where they go and how large they are."""

from __future__ import annotations

from typing import TYPE_CHECKING

from PySide6.QtCore import QByteArray, QRect, QSize, Qt, QTimer
from PySide6.QtGui import QColor, QFont, QPalette
from PySide6.QtWidgets import QDockWidget, QWidget
from tf_device_panel.gui.docks.device_map import DeviceMapPanel
from tf_device_panel.gui.docks.memory_panel import MemoryPanel
from tf_device_panel.gui.shell.menus import PRESENTATION
from tf_device_panel.gui.widgets import view_settings

from tf_device_panel import resources

if TYPE_CHECKING:
    from tf_device_panel.gui.docks import DockSpec, Panel
    from tf_device_panel.gui.shell.main_window import MainWindow

DEFAULT_SIZE = (1280, 820)
SIDE_DOCK_WIDTH = 340     # Devices / Configuration: the widest field plus its scroll bar
READING_DOCK_WIDTH = 560  # Doctor and History: check names, evidence and each run's parameters readable
READING_DOCK_LEAST = 390  # px they keep even where the job's form then takes one column (at 1280: 393 leave it two)
# Saved layouts from another version of the window are not restored: their docks may no longer exist or fit.
LAYOUT_VERSION = 2
ZOOM_KEY, PRESENTATION_KEY = "view/zoom", "view/presentation"
# the device map's share of the height in presentation mode (the result keeps its 300 px plots at 1280×720)
PRESENTATION_BOTTOM_SHARE, PRESENTATION_BOTTOM_SHARE_LARGE = 0.2, 0.25  # from LARGE_SCREEN_HEIGHT: the larger
SIDE_DOCKS = ("devices", "config", "history", "doctor")
READING_DOCKS = ("history", "doctor")
BOTTOM_DOCKS = ("log", "memory", "map")
BOTTOM_DOCK_SHARE = 0.22   # of the window's height: the device map, log or memory under the job's result
MEMORY_PLOT_SMALL, MEMORY_PLOT_LARGE = 150, 200  # px per memory plot when that dock is raised
LARGE_SCREEN_HEIGHT = 950  # px of window from which memory plots get MEMORY_PLOT_LARGE
SCREEN_SHARE = 0.9          # of a screen larger than FILL_SCREEN
FILL_SCREEN = (1920, 1080)  # a screen up to this size (a classroom's projector, a laptop) is filled
ZOOM_SETTLE_MS = 60  # zoom steps this close together are drawn once, at the last step's size


class WindowLayout:
    def __init__(self, window: MainWindow):
        self.window = window
        self._style = resources.path("style.qss").read_text(encoding="utf-8")
        window.setStyleSheet(self._style)
        self.view = view_settings.current()
        self._base_font = QFont(window.font())
        self._base_palette = QPalette(window.palette())
        self._layout_before_presentation: QByteArray | None = None
        self._height_before_memory: int | None = None
        self._default_state = QByteArray()
        self._fitted: QSize | None = None  # the default size this window was given for its screen, if it was
        # A zoom step answers at once (its level in the status bar); the window is restyled once a burst of
        # steps ends: a restyle draws every result again, seconds each, and presses would queue up behind them.
        self._view_timer = QTimer(window)
        self._view_timer.setSingleShot(True)
        self._view_timer.setInterval(ZOOM_SETTLE_MS)
        self._view_timer.timeout.connect(self.apply_view)

    def dock_panels(self, panels: dict[str, Panel]) -> dict[str, QDockWidget]:
        """A dock for each panel, in order, placed as it declares (`DockSpec`): its area, the dock it shares a
        place with as a tab, the tab raised there, hidden until asked for."""
        docks = {name: self._dock(type(panel).DOCK, panel.dock_body()) for name, panel in panels.items()}
        specs = [type(panel).DOCK for panel in panels.values()]
        for spec in specs:
            if spec.tab_with:
                self.window.tabifyDockWidget(docks[spec.tab_with], docks[spec.name])
        for spec in specs:
            if spec.raised:
                docks[spec.name].raise_()
            if spec.hidden:
                docks[spec.name].hide()
        return docks

    def _dock(self, spec: DockSpec, widget: QWidget) -> QDockWidget:
        """A dock titled `spec.title`: a tab's text when docks share a place; `long_title` says more in the View
        menu and on hover."""
        dock = QDockWidget(spec.title, self.window)
        dock.setObjectName(spec.title.split()[0].lower() + "-dock")  # saved window states restore docks by it
        dock.setWidget(widget)
        if spec.long_title:
            dock.toggleViewAction().setText(spec.long_title)
            dock.setToolTip(spec.long_title)
        self.window.addDockWidget(spec.area, dock)
        return dock

    def follow_docks(self) -> None:
        """Reading docks widen when shown; the bottom docks grow for the memory graphs when raised, and go
        back to their height when another tab is raised. The layout as built is the one Reset layout restores."""
        for name in READING_DOCKS:
            dock = self.window.docks[name]
            dock.visibilityChanged.connect(lambda shown, dock=dock: self._widen_reading_dock(dock, shown))
        for name in BOTTOM_DOCKS:
            dock = self.window.docks[name]
            dock.visibilityChanged.connect(lambda shown, dock=dock: self._fit_bottom_docks(dock, shown))
        self.window.resizeDocks([self.window.docks["devices"]], [SIDE_DOCK_WIDTH], Qt.Orientation.Horizontal)
        self._default_state = self.window.saveState(LAYOUT_VERSION)

    def restore(self) -> None:
        """The saved geometry and layout (else the default, fitted to the screen), then the saved zoom."""
        self._restore_settings()
        self._restore_view()

    def saved_state(self) -> QByteArray:
        """The layout to save: the one before presentation mode, if it is on."""
        if self._layout_before_presentation is not None:
            return self._layout_before_presentation
        return self.window.saveState(LAYOUT_VERSION)

    def close(self) -> None:
        self._view_timer.stop()
        self.view.zoom, self.view.presentation = 1.0, False  # the next window reads its own from its settings

    def _restore_view(self) -> None:
        try:
            zoom = float(str(self.window.settings.value(ZOOM_KEY, 1.0)))
        except ValueError:
            zoom = 1.0
        self.view.zoom = min(max(zoom, view_settings.ZOOM_MIN), view_settings.ZOOM_MAX)
        self.view.presentation = False
        self.apply_view()
        if str(self.window.settings.value(PRESENTATION_KEY, "false")).lower() == "true":
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
        self.window.settings.setValue(ZOOM_KEY, self.view.zoom)
        self._view_timer.start()  # apply_view, once the steps pause
        mode = " (presentation mode)" if self.view.presentation else ""
        self.window.status.flash(f"Zoom {self.view.zoom * 100:.0f} %{mode}", 3000)

    def set_presentation(self, on: bool) -> None:
        """View → Presentation mode: larger text and lines, high contrast, the side docks put away so the job's
        result and the device map take the room; leaving it puts the layout back as it was."""
        on = bool(on)
        if on == self.view.presentation:
            self.window.menu_actions[PRESENTATION].setChecked(on)
            return
        if on:
            self._layout_before_presentation = self.window.saveState(LAYOUT_VERSION)
        self.view.presentation = on
        self._view_timer.stop()  # a zoom step waiting to be drawn is drawn now, with the mode
        self.window.menu_actions[PRESENTATION].setChecked(on)
        self.window.settings.setValue(PRESENTATION_KEY, on)
        # The map's explanation is the presenter's to say: its two large lines cut the boxes' op counts at 720 px.
        self.window.panel(DeviceMapPanel).set_presenting(on)
        # Its title bar too: the map is alone at the bottom, and its boxes need the 25 px.
        self.window.docks["map"].setTitleBarWidget(QWidget() if on else None)  # type: ignore[arg-type]  # None: the default
        self.apply_view()
        if on:
            # The log and memory tabs too: their least heights held the map's tab group taller than the result
            # could spare (a 300 px plot at 1280×720); leaving the mode brings them back.
            for name in (*SIDE_DOCKS, "log", "memory"):
                self.window.docks[name].hide()
            self.window.docks["map"].show()
            self.window.docks["map"].raise_()
            share = PRESENTATION_BOTTOM_SHARE_LARGE if self.window.height() >= LARGE_SCREEN_HEIGHT else \
                PRESENTATION_BOTTOM_SHARE
            self.window.resizeDocks([self.window.docks["map"]], [int(self.window.height() * share)],
                                    Qt.Orientation.Vertical)
            QTimer.singleShot(0, self.window, self._fit_presentation_map)  # once the map has its larger font
        elif self._layout_before_presentation is not None:
            self.window.restoreState(self._layout_before_presentation, LAYOUT_VERSION)
            self._layout_before_presentation = None

    def _fit_presentation_map(self) -> None:
        """The device map's boxes whole in presentation mode (at 1280×720 a fifth of the height cut them)."""
        dock = self.window.docks["map"]
        if self.window.closing or not self.view.presentation or dock.isFloating() or not dock.isVisible():
            return
        need = self.window.panel(DeviceMapPanel).least_height()
        if dock.height() < need:
            self.window.resizeDocks([dock], [need], Qt.Orientation.Vertical)

    def apply_view(self) -> None:
        """Fonts scaled by the zoom (widgets with a font of their own, the monospace views, scale too), plot
        lines thickened, and in presentation mode a high-contrast palette."""
        scale = self.view.scale
        # Through the style sheet: with one set, a font set on the window does not reach its children; a size
        # rule there reaches every widget and keeps each one's family (the monospace views stay monospace).
        size = self._base_font.pointSizeF() * scale
        self.window.setStyleSheet(self._style + (f"\n* {{ font-size: {size:.1f}pt; }}" if scale != 1.0 else ""))
        self.window.setPalette(self._contrast_palette() if self.view.presentation else self._base_palette)
        self.window.panel(MemoryPanel).set_line_width(2 if self.view.presentation else 1)
        self.window.runs.fit_job_list()
        self.window.runs.redraw_results()

    def _contrast_palette(self) -> QPalette:
        palette = QPalette(self._base_palette)
        for role, color in ((QPalette.ColorRole.Window, "#ffffff"), (QPalette.ColorRole.Base, "#ffffff"),
                            (QPalette.ColorRole.WindowText, "#000000"), (QPalette.ColorRole.Text, "#000000"),
                            (QPalette.ColorRole.ButtonText, "#000000"), (QPalette.ColorRole.PlaceholderText,
                                                                         "#333333")):
            palette.setColor(role, QColor(color))
        return palette

    def _available(self) -> QRect:
        screen = self.window.screen()
        return screen.availableGeometry() if screen is not None else QRect(0, 0, *DEFAULT_SIZE)

    def _fit_to_screen(self, frame_known: bool = False) -> None:
        """The default size fitted to the screen the window opens on, its frame and title bar included: all of a
        classroom's screen (up to 1920×1080), most of a larger one. Before the window is shown its frame is not
        known (a title bar is assumed); `fill_screen` fits it again once it is."""
        available = self._available()
        frame_w = max(self.window.frameGeometry().width() - self.window.width(), 0)
        frame_h = max(self.window.frameGeometry().height() - self.window.height(), 0)
        if not frame_known:
            frame_h = frame_h or 32
        share = 1.0 if (available.width() <= FILL_SCREEN[0] and available.height() <= FILL_SCREEN[1]) \
            else SCREEN_SHARE
        width = min(max(DEFAULT_SIZE[0], int(available.width() * share)), available.width() - frame_w)
        height = min(max(DEFAULT_SIZE[1], int(available.height() * share)), available.height() - frame_h)
        self.window.resize(max(width, self.window.minimumWidth()), max(height, self.window.minimumHeight()))
        self.window.move(available.topLeft())
        self._fitted = self.window.size()
        self._default_dock_sizes()

    def fill_screen(self) -> None:
        """Once the window is shown and its frame known (none without a window manager: the window opened 32 px
        short of the screen), a window given the default size fills its screen again with the real frame."""
        if self._fitted == self.window.size() and not self.window.closing and not self.window.isMaximized():
            self._fit_to_screen(frame_known=True)

    def _default_dock_sizes(self) -> None:
        """Side docks as wide as their fields; the bottom docks about a quarter of the height, so the job form and its
        result keep the rest even on a 720-pixel screen."""
        self.window.resizeDocks([self.window.docks["devices"]], [SIDE_DOCK_WIDTH], Qt.Orientation.Horizontal)
        bottom = max(int(self.window.height() * BOTTOM_DOCK_SHARE), 150)
        self.window.resizeDocks([self.window.docks["log"]], [bottom], Qt.Orientation.Vertical)

    def reset_layout(self) -> None:
        """Docks where a fresh window has them, and the window fitted to its screen."""
        self.window.restoreState(self._default_state, LAYOUT_VERSION)
        for dock in self.window.docks.values():
            if dock.isFloating():
                dock.setFloating(False)
        self._fit_to_screen()

    def layout_fits(self) -> bool:
        """Whether the window lies within its screen and its centre has room for the job list and form."""
        available = self._available()
        frame = self.window.frameGeometry()
        inside = available.contains(frame) or (frame.width() <= available.width()
                                                and frame.height() <= available.height())
        centre = self.window.centralWidget()
        room = centre is None or centre.width() >= centre.minimumSizeHint().width()
        side_docks = [self.window.docks[name] for name in SIDE_DOCKS]
        return inside and room and all(dock.width() <= self.window.width() // 2 for dock in side_docks
                                       if dock.isVisible() and not dock.isFloating())

    def _restore_settings(self) -> None:
        geometry = self.window.settings.value("geometry")
        state = self.window.settings.value("window_state")
        restored = (isinstance(geometry, QByteArray) and self.window.restoreGeometry(geometry)
                    and isinstance(state, QByteArray) and self.window.restoreState(state, LAYOUT_VERSION))
        if not restored:
            self._fit_to_screen()
        elif not self.layout_fits():
            # A layout saved on a larger screen, or squeezed by an old bug, would come back unusable.
            self.reset_layout()

    def _widen_reading_dock(self, dock: QDockWidget, shown: bool) -> None:
        if not shown or dock.isFloating() or self.window.closing:
            return
        QTimer.singleShot(0, lambda: self._place_reading_dock(dock))  # once the dock has been laid out

    def _place_reading_dock(self, dock: QDockWidget) -> None:
        """Doctor and History need READING_DOCK_WIDTH; the Runs panel its least width. Where the window is too
        narrow for both beside the side docks (1280 px), the reading dock opens as a tab over Devices and
        Configuration, which can spare their width while it is read, instead of squeezing the job's form."""
        if self.window.closing or dock.isFloating() or not dock.isVisible():
            return
        centre = self.window.centralWidget()
        least = centre.minimumSizeHint().width() if centre is not None else 0
        left_area = Qt.DockWidgetArea.LeftDockWidgetArea
        left = [d for d in (self.window.docks["devices"], self.window.docks["config"])
                if d.isVisible() and not d.isFloating() and self.window.dockWidgetArea(d) == left_area]
        left_width = max((d.width() for d in left), default=0)
        in_left = self.window.dockWidgetArea(dock) == left_area
        beside = 0 if in_left else left_width
        if not in_left and left and self.window.width() - beside - least - 12 < READING_DOCK_WIDTH:
            self.window.tabifyDockWidget(left[-1], dock)
            in_left = True
        # As wide as leaves the job's form its two columns, at least READING_DOCK_LEAST (then one column).
        roomy = self.window.runs.two_column_width() if centre is self.window.runs else least
        width = max(min(READING_DOCK_WIDTH, self.window.width() - roomy - (0 if in_left else left_width) - 12),
                    min(READING_DOCK_LEAST, self.window.width() // 2))
        if dock.width() != width:
            self.window.resizeDocks([dock], [width], Qt.Orientation.Horizontal)
        dock.raise_()

    def memory_plot_height(self) -> int:
        """The least height of each memory plot when its dock is raised: 150 px on a 720-pixel screen, 200
        from about 1080."""
        return MEMORY_PLOT_LARGE if self.window.height() >= LARGE_SCREEN_HEIGHT else MEMORY_PLOT_SMALL

    def _fit_bottom_docks(self, dock: QDockWidget, shown: bool) -> None:
        if not shown or dock.isFloating() or self.window.closing:
            return
        QTimer.singleShot(0, lambda: self._resize_bottom_for(dock))  # once the tab switch has laid out

    def _resize_bottom_for(self, dock: QDockWidget, attempt: int = 0, requested: int = 0) -> None:
        if self.window.closing or dock.isFloating() or not dock.isVisible():
            return
        if dock is self.window.docks["memory"]:
            missing = self.window.panel(MemoryPanel).height_missing(self.memory_plot_height())
            centre = self.window.centralWidget()
            spare = centre.height() - centre.minimumSizeHint().height() if centre is not None else 0
            grow = min(missing, max(spare, 0))  # never below what the job's form needs
            if grow > 0 and attempt < 3:  # the docks' layout rounds: measure again after each step
                if self._height_before_memory is None:
                    self._height_before_memory = dock.height()
                # the whole tab group, sized through each of its docks (one alone is held to its size)
                # A size asked of resizeDocks includes the tab bar under the area: ask more until it shows.
                asked = (requested or dock.height()) + grow
                group = [d for d in self.window.tabifiedDockWidgets(dock) if not d.isFloating()] + [dock]
                self.window.resizeDocks(group, [asked] * len(group), Qt.Orientation.Vertical)
                QTimer.singleShot(0, lambda: self._resize_bottom_for(dock, attempt + 1, asked))
        elif self._height_before_memory is not None:
            group = [d for d in self.window.tabifiedDockWidgets(dock) if not d.isFloating()] + [dock]
            self.window.resizeDocks(group, [self._height_before_memory] * len(group), Qt.Orientation.Vertical)
            self._height_before_memory = None
