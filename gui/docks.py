"""What a dock declares of itself (spyder's dock plugins, in small): its name, its title, where it docks and
which docks it shares a place with. The window iterates its dock list and lays the docks out from these
declarations; each panel wires itself to the session (`wire`), so the window routes nothing between them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, Protocol

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QWidget

if TYPE_CHECKING:
    from tf_device_panel.gui.controller import RuntimeController

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


class DockPanel(Protocol):
    """A panel the window docks: it declares its dock and wires itself to what it draws."""

    DOCK: ClassVar[DockSpec]

    def wire(self, link: RuntimeController) -> None:
        """Subscribe to the session's changes and the controller's signals this panel draws."""

    def dock_body(self) -> QWidget:
        """The widget the dock holds (the panel itself, or the panel with what it pins around it)."""
