"""What a dock declares of itself (spyder's dock plugins, in small): its name, its title, where it docks, which
docks it shares a place with, and what it needs from the window. The list of panels, in dock order, is
`gui/docks/dock_list.py` (apart from this module: a panel importing the module that imports every panel would tie
each panel to the others, against the contract that keeps them independent). The window makes each listed panel
with what it declares it needs, docks it as declared, and calls its hooks (`Panel`); each panel wires itself to
the session (`wire`), so the window routes nothing between them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from PySide6.QtCore import Qt

if TYPE_CHECKING:
    from PySide6.QtWidgets import QWidget
    from tf_device_panel.gui.shell.controller import RuntimeController

LEFT = Qt.DockWidgetArea.LeftDockWidgetArea
RIGHT = Qt.DockWidgetArea.RightDockWidgetArea
BOTTOM = Qt.DockWidgetArea.BottomDockWidgetArea


@dataclass(frozen=True)
class DockSpec:
    name: str                    # the window's key for it (`window.docks[name]`, `window.panels[name]`)
    title: str                   # a tab's text when docks share a place: short enough for four tabs in 390 px
    area: Qt.DockWidgetArea
    long_title: str = ""         # the View menu's and the tooltip's, where the title says too little
    tab_with: str = ""           # the dock it shares a place with, as a tab (one listed before it)
    raised: bool = False         # the tab shown first in its place
    hidden: bool = False         # shown from the View menu (or by the window) only
    # Its constructor's keyword arguments, which the window gives: "history" (the run history), "settings" (the
    # window's QSettings), "sampler" (the session's telemetry sampler), "config_source" (a function returning the
    # configuration being edited). The session and the run's news come to every panel by `wire`.
    needs: tuple[str, ...] = ()


class Panel(Protocol):
    """What the window asks of each listed panel class."""

    DOCK: DockSpec  # declared on the class

    def dock_body(self) -> QWidget:
        """The widget its dock shows (the panel itself, or the panel with what is pinned around it)."""
        ...

    def wire(self, link: RuntimeController) -> None:
        """Subscribe to the session's changes and the run's news through the window's controller."""
        ...


@runtime_checkable
class HoldsThreads(Protocol):
    """A panel with threads or timers of its own: the window stops them as it closes, before the session."""

    def shut_down(self) -> None: ...


@runtime_checkable
class WaitsToBeShown(Protocol):
    """A panel that starts its work only once its dock is shown (or its tab raised): told by the dock."""

    def on_shown(self, shown: bool) -> None: ...
