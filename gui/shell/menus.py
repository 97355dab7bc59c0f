"""The menu bar as data (napari's actions, in small): each menu's actions in order, with what each does given the
window, a line between groups, and where the View menu lists the docks (one entry per dock, from the dock list).
`add_menus` turns them into the window's QActions."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from PySide6.QtGui import QAction, QKeySequence
from tf_device_panel.gui.dialogs.share_dialog import show_share
from tf_device_panel.gui.docks.log_panel import LogPanel

if TYPE_CHECKING:
    from tf_device_panel.gui.shell.main_window import MainWindow

StandardKey = QKeySequence.StandardKey


@dataclass(frozen=True)
class Action:
    text: str
    run: Callable[[MainWindow], object]       # what it does, given the window (never the action's `checked`)
    keys: tuple[str | QKeySequence.StandardKey, ...] = ()  # its shortcuts; the menu shows the first
    checkable: bool = False
    tooltip: str = ""


LINE = "line"                 # a line between two groups of a menu
DOCK_TOGGLES = "dock toggles"  # each dock's show/hide entry, in dock order
PRESENTATION = "&Presentation mode"  # the window's layout keeps this action's check in step with the mode

MENUS: tuple[tuple[str, tuple[Action | str, ...]], ...] = (
    ("&File", (
        Action("&Open profile…", lambda window: window.profiles.open_dialog(), (StandardKey.Open,)),
        Action("&Save profile", lambda window: window.profiles.save(), (StandardKey.Save,)),
        Action("Save profile &as…", lambda window: window.profiles.save_as_dialog(), (StandardKey.SaveAs,)),
        LINE,
        Action("Copy configuration as &Python…", lambda window: window.config_panel.show_snippet()),
        Action("S&hare a GPU…", lambda window: show_share(window, window.config_panel.config())),
        Action("Save &log…", lambda window: window.panel(LogPanel).save_dialog()),
        LINE,
        Action("&Quit", lambda window: window.close(), (StandardKey.Quit,)),
    )),
    ("&Runtime", (
        Action("&Apply configuration (restart runtime)", lambda window: window.apply_current(), ("Ctrl+Shift+A",)),
        Action("&Kill runtime", lambda window: window.manager.kill_runtime()),
        Action("&Doctor: why no GPU?", lambda window: window.open_doctor(), ("Ctrl+D",)),
    )),
    ("&View", (
        DOCK_TOGGLES,
        LINE,
        Action(PRESENTATION, lambda window: window.dock_layout.set_presentation(
            window.menu_actions[PRESENTATION].isChecked()), ("Ctrl+Shift+P",), checkable=True,
            tooltip="Larger text, thicker lines, high contrast; the result and the device map take the room (for "
                    "a projector)"),
        Action("Zoom &in", lambda window: window.dock_layout.zoom_in(), ("Ctrl+=", "Ctrl++")),
        Action("Zoom &out", lambda window: window.dock_layout.zoom_out(), ("Ctrl+-",)),
        Action("&Actual size", lambda window: window.dock_layout.zoom_reset(), ("Ctrl+0",)),
        LINE,
        Action("&Reset layout", lambda window: window.dock_layout.reset_layout()),
    )),
    ("&Help", (
        Action("&About TF Device Panel…", lambda window: window.show_about()),
    )),
)


def add_menus(window: MainWindow) -> dict[str, QAction]:
    """The window's menu bar from MENUS; its actions by their text."""
    actions: dict[str, QAction] = {}
    for title, entries in MENUS:
        menu = window.menuBar().addMenu(title)
        for entry in entries:
            if entry == LINE:
                menu.addSeparator()
            elif entry == DOCK_TOGGLES:
                for dock in window.docks.values():
                    menu.addAction(dock.toggleViewAction())
            elif isinstance(entry, Action):
                action = actions[entry.text] = QAction(entry.text, window)
                sequences = [QKeySequence(key) for key in entry.keys]
                action.setShortcuts([keys for keys in sequences if not keys.isEmpty()])  # a standard key may be unbound
                action.setCheckable(entry.checkable)
                if entry.tooltip:
                    action.setToolTip(entry.tooltip)
                action.triggered.connect(_runner(entry.run, window))
                menu.addAction(action)
    return actions


def _runner(run: Callable[[MainWindow], object], window: MainWindow) -> Callable[[], object]:
    return lambda: run(window)  # no parameter: Qt's `checked` reaches no target as its first argument
