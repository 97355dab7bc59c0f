"""Issue 23 item 10: the configuration applied last is restored on start, and the first spare warms with it."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("PySide6")
from PySide6.QtCore import QSettings
from tf_device_panel.core.client.history import RunHistory
from tf_device_panel.core.client.run_manager import RunManager
from tf_device_panel.core.config import DeviceConfig, save_profile
from tf_device_panel.gui.shell.main_window import APPLIED_KEY, MainWindow


def test_the_applied_configuration_comes_back_on_restart(qtbot, tmp_path: Path, monkeypatch) -> None:
    applied: list[DeviceConfig] = []
    monkeypatch.setattr(RunManager, "apply", lambda self, config: applied.append(config))
    settings = QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat)
    profile = tmp_path / "class.json"
    save_profile(DeviceConfig(cpu_devices=1), profile)
    first = MainWindow(str(profile), settings=settings, history=RunHistory(), start_runtime=False)
    qtbot.addWidget(first)
    three = first.config_panel.config().with_changes(cpu_devices=3, soft_placement=False)
    first.config_panel.set_config(three)
    first.apply_current()
    assert applied == [three]
    first.close()
    settings.sync()

    again = MainWindow(settings=QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat),
                       history=RunHistory(), start_runtime=True)
    qtbot.addWidget(again)
    assert again.config_panel.config() == three  # not the profile's 1 CPU it was opened from
    assert applied[-1] == three  # the first spare warms with it
    again.close()


def test_an_unreadable_saved_configuration_is_said_and_skipped(qtbot, tmp_path: Path) -> None:
    settings = QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat)
    settings.setValue(APPLIED_KEY, '{"cpu_devices": "many"}')
    window = MainWindow(settings=settings, history=RunHistory(), start_runtime=False)
    qtbot.addWidget(window)
    assert window.config_panel.config() == DeviceConfig()
    qtbot.waitUntil(lambda: any("could not be restored" in warning for warning in window.status.logged_warnings))
    window.close()
