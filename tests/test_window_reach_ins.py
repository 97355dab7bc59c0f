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
PANELS = {"devices", "config_panel", "runs", "log", "history_panel", "doctor", "memory", "machines", "device_map"}
# Reach-ins left to the helpers who own the code around them: none since the panels wire themselves (issue 30).
NOT_YET: set[tuple[str, str]] = set()


def reach_ins() -> list[str]:
    """`self.<panel>._private` and `self.<panel>.<member>.<anything>` (but a signal's connect) in the window's
    source."""
    found = []
    for node in ast.walk(ast.parse(WINDOW.read_text(encoding="utf-8"))):
        if not isinstance(node, ast.Attribute) or not isinstance(node.value, ast.Attribute):
            continue
        inner = node.value
        if isinstance(inner.value, ast.Name) and inner.value.id == "self" and inner.attr in PANELS:
            if node.attr.startswith("_"):
                found.append(f"line {node.lineno}: self.{inner.attr}.{node.attr}")
        elif (isinstance(inner.value, ast.Attribute) and isinstance(inner.value.value, ast.Name)
              and inner.value.value.id == "self" and inner.value.attr in PANELS
              and (inner.value.attr, inner.attr) not in NOT_YET
              and node.attr != "connect"):  # a panel's public signal, connected
            found.append(f"line {node.lineno}: self.{inner.value.attr}.{inner.attr}.{node.attr}")
    return found


def test_the_window_does_not_reach_into_its_panels() -> None:
    assert reach_ins() == []


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
    assert saved == [window.log]
    window.close()
