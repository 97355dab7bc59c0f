"""Help → About: the versions a bug report needs."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QMessageBox, QWidget
from tf_device_panel.core.devices.nvml import shared as shared_nvml

from tf_device_panel import resources


def show_about(parent: QWidget, tf_version: str | None) -> QMessageBox:
    box = QMessageBox(QMessageBox.Icon.Information, "About TF Device Panel",
                      about_html(tf_version, shared_nvml().driver_version()), QMessageBox.StandardButton.Ok, parent)
    box.setObjectName("about")
    box.setTextFormat(Qt.TextFormat.RichText)
    box.setTextInteractionFlags(Qt.TextInteractionFlag.TextBrowserInteraction)
    box.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
    box.open()
    return box


def about_html(tf_version: str | None, driver: str | None) -> str:
    """The versions a bug report needs; TensorFlow's comes from the runtime, as this process never imports it."""
    from importlib import metadata

    import pyqtgraph
    import PySide6
    from PySide6.QtCore import qVersion

    try:
        app_version = metadata.version("tf-device-panel")
    except metadata.PackageNotFoundError:
        app_version = "unknown (not installed)"
    readme = resources.readme_url()
    link = (f"<p><a href='{readme}'>README: how to use it</a></p>" if readme
            else "<p>How to use it: <code>tf-device-panel --help</code></p>")
    rows = [("TF Device Panel", app_version),
            ("TensorFlow", tf_version or "not known yet (no runtime has started)"),
            ("Qt", f"{qVersion()} (PySide6 {PySide6.__version__})"), ("pyqtgraph", pyqtgraph.__version__),
            ("NVIDIA driver (NVML)", driver or "none found")]
    table = "".join(f"<tr><td>{name}</td><td><b>{value}</b></td></tr>" for name, value in rows)
    return (f"<p>See the devices TensorFlow can use, configure them before TensorFlow initializes, and see "
            f"where every op runs.</p><table cellspacing=4>{table}</table>{link}")
