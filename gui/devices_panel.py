"""Physical devices and the logical devices the running runtime actually created."""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import Qt
from PySide6.QtGui import QBrush
from PySide6.QtWidgets import (
    QLabel,
    QPushButton,
    QSizePolicy,
    QTreeWidget,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)
from tf_device_panel.core.devices.gpus import nvml_gpu_for_physical, tf_gpu_messages
from tf_device_panel.core.protocol import events
from tf_device_panel.gui.colors import device_color


class DevicesPanel(QWidget):
    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.tree = QTreeWidget()
        self.tree.setHeaderLabels(["Device", "Details"])
        # Details wrap in their column and the whole text is each row's tooltip: no sideways scrolling.
        self.tree.setWordWrap(True)
        self.tree.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.tree.header().setStretchLastSection(True)
        self.tree.setMinimumHeight(160)
        self.note = QLabel("Starting the TensorFlow runtime…")
        self.note.setWordWrap(True)
        # A long failure wraps to the dock's width instead of widening the dock.
        self.note.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        self.doctor_button = QPushButton("Why? Ask the Doctor…")
        self.doctor_button.setToolTip("Check the driver, CUDA libraries, packages and environment (Ctrl+D)")
        self.doctor_button.hide()
        layout.addWidget(self.note)
        layout.addWidget(self.doctor_button)
        layout.addWidget(self.tree, 1)

    def show_devices(self, info: events.Ready, nvml_gpus: list[dict[str, Any]], tf_lines: list[str]) -> None:
        self.tree.clear()
        build = info.build
        cuda = (f"CUDA {build.get('cuda_version')}, cuDNN {build.get('cudnn_version')}"
                if build.get("is_cuda_build") else "no CUDA")
        physical = QTreeWidgetItem([f"Physical ({len(info.physical)})", f"TensorFlow {info.tf_version}, {cuda}"])
        for device in info.physical:
            details = ""
            if device["device_type"] == "GPU":
                nv = nvml_gpu_for_physical(device["index"], info.gpu_devices, nvml_gpus)
                parts = [device.get("device_name") or nv.get("name") or "",
                         f"{nv['memory_total_mib']} MiB" if nv.get("memory_total_mib") else "",
                         f"compute {device['compute_capability']}" if device.get("compute_capability") else "",
                         f"PCI {nv['pci_bus_id']}" if nv.get("pci_bus_id") else "",
                         "" if device.get("visible", True) else "hidden"]
                details = ", ".join(p for p in parts if p)
            item = QTreeWidgetItem([device["name"].replace("/physical_device:", ""), details])
            item.setToolTip(0, device["name"])
            item.setToolTip(1, details)
            physical.addChild(item)
        logical = QTreeWidgetItem([f"Logical ({len(info.logical)})", "created by the running runtime"])
        for shown in info.logical:
            limit = f"memory limit {shown['memory_limit_mib']} MiB" if "memory_limit_mib" in shown else ""
            item = QTreeWidgetItem([shown["short_name"], limit or shown["device_type"]])
            item.setForeground(0, QBrush(device_color(shown["short_name"])))
            item.setToolTip(0, shown["name"])  # one spelling shown, the full name on hover
            item.setToolTip(1, shown["name"])
            logical.addChild(item)
        self.tree.addTopLevelItems([physical, logical])
        self.tree.expandAll()
        self.tree.resizeColumnToContents(0)
        self.tree.setColumnWidth(0, min(self.tree.columnWidth(0), 160))
        no_gpu = not any(d["device_type"] == "GPU" for d in info.physical)
        self.doctor_button.setVisible(no_gpu)
        if no_gpu:
            reasons = tf_gpu_messages(tf_lines)[-3:]
            self.note.setText("<b>TensorFlow sees no GPU.</b>" + (
                "<br>TensorFlow said: " + "<br>".join(f"<i>{_esc(r)}</i>" for r in reasons) if reasons else ""))
        else:
            self.note.setText(f"Runtime pid {info.pid}, Python {info.python}")

    def show_message(self, html: str) -> None:
        self.note.setText(html)


def _esc(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
