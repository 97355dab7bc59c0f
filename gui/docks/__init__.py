"""What a dock declares of itself (spyder's dock plugins, in small): its name, its title, where it docks and
which docks it shares a place with. The window iterates its dock list and lays the docks out from these
declarations; each panel wires itself to the session (`wire`), so the window routes nothing between them.
"""

from __future__ import annotations

from dataclasses import dataclass

from PySide6.QtCore import Qt

LEFT = Qt.DockWidgetArea.LeftDockWidgetArea
RIGHT = Qt.DockWidgetArea.RightDockWidgetArea
BOTTOM = Qt.DockWidgetArea.BottomDockWidgetArea


@dataclass(frozen=True)
class DockSpec:
    name: str                    # the window's key for it (`window.docks[name]`)
    title: str                   # a tab's text when docks share a place: short enough for four tabs in 390 px
    area: Qt.DockWidgetArea
    long_title: str = ""         # the View menu's and the tooltip's, where the title says too little
    tab_with: str = ""           # the dock it shares a place with, as a tab
    raised: bool = False         # the tab shown first in its place
    hidden: bool = False         # shown from the View menu (or by the window) only
