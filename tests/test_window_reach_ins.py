"""MainWindow keeps docks, menus and settings: it talks to a panel through that panel's public methods and
signals, never through its private members or the widgets inside it (read from the window's source), and what
it used to reach in for still works through the panel's own methods."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

pytest.importorskip("PySide6")
from PySide6.QtCore import QSettings
from tf_device_panel.core.client.history import RunHistory
from tf_device_panel.core.protocol import events
from tf_device_panel.gui.docks.log_panel import LogPanel
from tf_device_panel.gui.shell.main_window import MainWindow

WINDOW = Path(__file__).parent.parent / "gui" / "shell" / "main_window.py"
# The panels the window holds by name; it reaches the others as `self.panel(Kind)` or `self.panels[name]`.
PANELS = {"runs", "config_panel", "history_panel", "doctor"}


def is_panel(node: ast.expr) -> bool:
    """`self.<panel>`, `self.panel(...)` or `self.panels[...]`."""
    if isinstance(node, ast.Call):
        node = node.func
        return isinstance(node, ast.Attribute) and is_self(node.value) and node.attr == "panel"
    if isinstance(node, ast.Subscript):
        node = node.value
        return isinstance(node, ast.Attribute) and is_self(node.value) and node.attr == "panels"
    return isinstance(node, ast.Attribute) and is_self(node.value) and node.attr in PANELS


def is_self(node: ast.expr) -> bool:
    return isinstance(node, ast.Name) and node.id == "self"


def reach_ins(source: str) -> list[str]:
    """`<panel>._private` and `<panel>.<member>.<anything>` (but a signal's connect) in the source."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Attribute):
            continue
        private = is_panel(node.value) and node.attr.startswith("_")
        inside = isinstance(node.value, ast.Attribute) and is_panel(node.value.value) and node.attr != "connect"
        if private or inside:  # (a panel's public signal, connected, is no reach-in)
            found.append(f"line {node.lineno}: {ast.unparse(node)}")
    return found


def test_the_window_does_not_reach_into_its_panels() -> None:
    assert reach_ins(WINDOW.read_text(encoding="utf-8")) == []


def test_a_reach_in_is_found_however_the_window_holds_the_panel() -> None:
    planted = ("self.doctor._worker\nself.panel(LogPanel).view.clear()\nself.panels['map'].canvas.refresh()\n"
               "self.panel(DevicesPanel).doctorRequested.connect(self.open_doctor)\nself.runs.select_job('fit')\n")
    assert reach_ins(planted) == ["line 1: self.doctor._worker", "line 2: self.panel(LogPanel).view.clear",
                                  "line 3: self.panels['map'].canvas.refresh"]


def test_a_fits_loss_and_save_log_go_through_the_panels_own_methods(qtbot, tmp_path: Path, monkeypatch) -> None:
    saved: list[LogPanel] = []
    monkeypatch.setattr(LogPanel, "save_dialog", lambda panel: saved.append(panel))
    window = MainWindow(settings=QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat),
                        history=RunHistory(), start_runtime=False)
    qtbot.addWidget(window)
    window.runs.select_job("fit")
    window.runs.job_started("fit")
    window.controller.deliver([events.Metric(name="loss", step=1, value=0.5, job_id="j"),
                       events.Metric(name="loss", step=2, value=0.25, job_id="j")])
    assert window.runs.result.live_losses == [0.5, 0.25]
    file_menu = window.menuBar().actions()[0].menu()
    (save_log,) = [action for action in file_menu.actions() if action.text() == "Save &log…"]
    save_log.trigger()
    assert saved == [window.panels["log"]]
    window.close()
