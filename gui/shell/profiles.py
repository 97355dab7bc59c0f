"""Profiles: the configuration saved to and opened from a JSON file (File → Open / Save profile), and the one
last applied, kept in the window's settings so that the next start warms its first spare with it."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import QSettings
from PySide6.QtWidgets import QFileDialog, QMainWindow
from tf_device_panel.core.config import ConfigError, DeviceConfig, ProfileError, load_profile, save_profile
from tf_device_panel.gui.docks.config_panel import ConfigPanel

APPLIED_KEY = "applied_config"  # the configuration last applied, as JSON: restored on the next start


class Profiles:
    """Opens and saves the Configuration panel's configuration; `notify(title, message)` and `flash(text, ms)`
    say how it went."""

    def __init__(self, window: QMainWindow, settings: QSettings, config_panel: ConfigPanel,
                 notify: Callable[[str, str], None], flash: Callable[[str, int], None]):
        self.window, self.settings, self.config_panel = window, settings, config_panel
        self.notify, self.flash = notify, flash
        self.path: Path | None = None

    def open(self, path: str | Path, quiet: bool = False) -> bool:
        try:
            config = load_profile(path)
        except ProfileError as exc:
            if not quiet:
                self._error("Cannot open profile", exc)
            return False
        self.path = Path(path)
        self.config_panel.set_config(config)
        self.settings.setValue("last_profile", str(self.path))
        self.window.setWindowTitle(f"TF Device Panel — {self.path.name}")
        return True

    def restore(self, profile: str | None) -> None:
        """The window's configuration as it opens: `profile` (the command line's), else the profile opened last
        time and the configuration last applied, as it was (the profile may have been changed after it was
        opened): the first spare warms with it."""
        if profile is not None:
            self.open(profile)
            return
        self.open_last()
        restored = self.applied_last_time()
        if restored is not None:
            self.config_panel.set_config(restored)

    def open_last(self) -> None:
        """The profile opened last time, if it is still there (quietly: it may have been edited since)."""
        last = self.settings.value("last_profile")
        if last and Path(str(last)).is_file():
            self.open(str(last), quiet=True)

    def open_dialog(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self.window, "Open profile", str(self.path or ""), "Profiles (*.json)")
        if path:
            self.open(path)

    def save(self, path: str | Path | None = None) -> bool:
        target = Path(path) if path else self.path
        if target is None:
            return self.save_as_dialog()
        try:
            save_profile(self.config_panel.config(), target)
        except ProfileError as exc:
            self._error("Profile not saved", exc)
            return False
        except OSError as exc:
            self.notify("Profile not saved", f"{target}: {exc.strerror}")
            return False
        self.path = target
        self.settings.setValue("last_profile", str(target))
        self.flash(f"Saved {target}", 5000)
        return True

    def save_as_dialog(self) -> bool:
        path, _ = QFileDialog.getSaveFileName(self.window, "Save profile as", str(self.path or "profile.json"),
                                              "Profiles (*.json)")
        return self.save(path) if path else False

    def _error(self, title: str, exc: ProfileError) -> None:
        self.notify(title, f"{exc.path}\n\n" + "\n".join(f"• {p}" for p in exc.problems))

    # -- the configuration applied last ----------------------------------------------------------------
    def remember_applied(self, config: DeviceConfig) -> None:
        self.settings.setValue(APPLIED_KEY, json.dumps(config.to_json()))

    def applied_last_time(self) -> DeviceConfig | None:
        saved = self.settings.value(APPLIED_KEY)
        if not saved:
            return None
        try:
            return DeviceConfig.from_json(json.loads(str(saved)))
        except (ValueError, ConfigError) as exc:  # from another version, or edited by hand: say so, start fresh
            logging.getLogger(__name__).warning("The configuration applied last time could not be restored (%s)",
                                                exc)
            return None
