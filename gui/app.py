"""Start the window, or say plainly why Qt cannot start and point to the command line."""

from __future__ import annotations

import ctypes.util
import os
import sys


def display_problem() -> str | None:
    """Why Qt would fail to open a window here, checked before Qt aborts the process itself."""
    platform = os.environ.get("QT_QPA_PLATFORM", "")
    if platform in ("offscreen", "minimal", "vnc") or sys.platform != "linux":
        return None
    if not os.environ.get("DISPLAY") and not os.environ.get("WAYLAND_DISPLAY"):
        return ("No display found (neither DISPLAY nor WAYLAND_DISPLAY is set), so the window cannot open.\n"
                "Over SSH, use `ssh -X`, or use the command line: tf-device-panel devices | run JOB | --help")
    if (platform in ("", "xcb") and not os.environ.get("WAYLAND_DISPLAY")
            and ctypes.util.find_library("xcb-cursor") is None):
        return ("Qt's X11 platform plugin needs the system library libxcb-cursor0, which is not installed.\n"
                "Install it with: sudo apt-get install libxcb-cursor0   (Fedora: sudo dnf install xcb-util-cursor)\n"
                "Meanwhile the command line works: tf-device-panel devices | run JOB | --help")
    return None


def main(profile: str | None = None) -> int:
    problem = display_problem()
    if problem:
        print(f"tf-device-panel: {problem}", file=sys.stderr)
        return 2
    try:
        from PySide6.QtWidgets import QApplication
    except ImportError as exc:
        print(f"tf-device-panel: the window needs PySide6, which failed to load ({exc}).\n"
              "Reinstall with: pip install -e .   — or use the command line: tf-device-panel --help",
              file=sys.stderr)
        return 2
    from gui.main_window import APPLICATION, ORGANIZATION, MainWindow

    existing = QApplication.instance()
    app = existing if isinstance(existing, QApplication) else QApplication(sys.argv[:1])
    app.setOrganizationName(ORGANIZATION)
    app.setApplicationName(APPLICATION)
    app.setApplicationDisplayName("TF Device Panel")
    window = MainWindow(profile)
    window.show()
    return int(app.exec())
