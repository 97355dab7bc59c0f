"""Messages for the user that never block the event loop (a modal `exec()` would freeze runs and tests)."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QMessageBox, QWidget


def show_notice(parent: QWidget, title: str, text: str, *,
                icon: QMessageBox.Icon = QMessageBox.Icon.Warning) -> QMessageBox:
    box = QMessageBox(icon, title, text, QMessageBox.StandardButton.Ok, parent)
    box.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
    box.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
    box.setObjectName("notice")
    box.open()  # window-modal, returns at once
    return box
