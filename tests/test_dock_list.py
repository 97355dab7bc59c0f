"""The window's docks come from one list (gui/docks/dock_list.py): a panel added there is made with what it
declares it needs, docked as it declares, wired, given its View menu entry and shut down on close, with no line of
the window's own; the menus come from their declaration (gui/shell/menus.py); and the window stays small."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("PySide6")
from PySide6.QtCore import QSettings
from PySide6.QtGui import QKeySequence
from PySide6.QtWidgets import QLabel, QMenu, QWidget
from tf_device_panel.core.client.history import RunHistory
from tf_device_panel.gui.docks import RIGHT, DockSpec, dock_list
from tf_device_panel.gui.shell.controller import RuntimeController
from tf_device_panel.gui.shell.main_window import MainWindow
from tf_device_panel.gui.shell.menus import DOCK_TOGGLES, LINE, MENUS, Action

WINDOW = Path(__file__).parent.parent / "gui" / "shell" / "main_window.py"
MOST_LINES = 200


class NotesPanel(QLabel):
    """A panel the window has never heard of."""

    DOCK = DockSpec("notes", "Notes", RIGHT, "Notes (kept per machine)", hidden=True, needs=("settings", "history"))

    def __init__(self, settings: QSettings, history: RunHistory):
        super().__init__("Notes")
        self.settings, self.history = settings, history
        self.link: RuntimeController | None = None
        self.shown: list[bool] = []
        self.shut_downs = 0

    def dock_body(self) -> QWidget:
        return self

    def wire(self, link: RuntimeController) -> None:
        self.link = link

    def on_shown(self, shown: bool) -> None:
        self.shown.append(shown)

    def shut_down(self) -> None:
        self.shut_downs += 1


def make_window(qtbot, tmp_path: Path) -> MainWindow:
    window = MainWindow(settings=QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat),
                        history=RunHistory(tmp_path / "home"), start_runtime=False)
    qtbot.addWidget(window)
    return window


def menu(window: MainWindow, title: str) -> QMenu:
    found = next(action.menu() for action in window.menuBar().actions() if action.text() == title)
    assert isinstance(found, QMenu)
    return found


def test_the_window_stays_small() -> None:
    lines = len(WINDOW.read_text(encoding="utf-8").splitlines())
    assert lines <= MOST_LINES, f"main_window.py has {lines} lines: what it does belongs to its owners"


def test_a_panel_added_to_the_list_becomes_a_dock_with_its_view_entry(qtbot, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(dock_list, "PANELS", (*dock_list.PANELS, NotesPanel))
    window = make_window(qtbot, tmp_path)
    window.show()
    qtbot.waitExposed(window)
    notes = window.panels["notes"]
    assert isinstance(notes, NotesPanel)
    assert notes.settings is window.settings and notes.history is window.history  # what it declared it needs
    assert notes.link is window.controller
    dock = window.docks["notes"]
    assert dock.widget() is notes and dock.objectName() == "notes-dock" and window.dockWidgetArea(dock) == RIGHT
    assert not dock.isVisible() and notes.shown == []
    assert list(window.docks) == [kind.DOCK.name for kind in dock_list.PANELS]  # every dock, in list order
    toggles = [dock.toggleViewAction() for dock in window.docks.values()]
    assert menu(window, "&View").actions()[:len(toggles)] == toggles
    assert toggles[-1].text() == "Notes (kept per machine)"
    toggles[-1].trigger()
    qtbot.waitUntil(lambda: notes.shown == [True], timeout=5000)
    window.close()
    assert notes.shut_downs == 1


def test_the_menus_are_built_from_their_declaration(qtbot, tmp_path: Path) -> None:
    window = make_window(qtbot, tmp_path)
    assert [action.text() for action in window.menuBar().actions()] == [title for title, _ in MENUS]
    for title, entries in MENUS:
        expected: list[str] = []
        for entry in entries:
            if entry == DOCK_TOGGLES:
                expected += [dock.toggleViewAction().text() for dock in window.docks.values()]
            elif isinstance(entry, Action):
                expected.append(entry.text)
            else:
                assert entry == LINE
                expected.append("")  # a separator's text
        made = menu(window, title).actions()
        assert [action.text() for action in made] == expected, title
        for action in made:
            declared = next((entry for entry in entries if isinstance(entry, Action) and entry.text == action.text()),
                            None)
            if declared is not None:
                bound = [QKeySequence(key) for key in declared.keys if not QKeySequence(key).isEmpty()]
                assert action.shortcuts() == bound, action.text()
                assert action.isCheckable() == declared.checkable
    window.close()
