"""The Placement log dock: the log's view (gui.views.log_view), which follows the window's session itself (each
batch as the run state made of it, a fresh table for each run, why a finished run logged no placement); History
shows the same view for a recorded run."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tf_device_panel.gui.docks import BOTTOM, DockSpec
from tf_device_panel.gui.views.log_view import LogView

if TYPE_CHECKING:
    from PySide6.QtWidgets import QWidget
    from tf_device_panel.gui.shell.controller import RuntimeController


class LogPanel(LogView):
    DOCK = DockSpec("log", "Placement log", BOTTOM)

    def dock_body(self) -> QWidget:
        return self

    def wire(self, link: RuntimeController) -> None:
        self.follow(link)
