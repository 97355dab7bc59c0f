"""The Placement log dock: the log's view (gui.log_view), wired to the window's session: each batch as the run
state made of it, a fresh table for each run, and why a finished run logged no placement."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tf_device_panel.core.catalogue import JOBS
from tf_device_panel.core.client.run_record import JobOutcome
from tf_device_panel.core.client.session import AppliedChanged, JobEnded, JobHandedOver, RunStateChanged
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
        link.subscribe(self, RunStateChanged, lambda change: self.add_events(list(change.batch), change.changes))
        link.subscribe(self, AppliedChanged, lambda _change: self.clear_placements())
        link.subscribe(self, JobHandedOver, lambda _handed_over: self.clear_placements())
        link.subscribe(self, JobEnded, lambda ended: self.no_placements_because(placement_silence(ended.outcome)))


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
