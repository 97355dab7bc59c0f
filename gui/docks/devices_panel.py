"""Physical devices and the logical devices the running runtime actually created."""

from __future__ import annotations

import html as html_text
from typing import TYPE_CHECKING

from PySide6.QtCore import Qt, Signal
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
from tf_device_panel.core.client import wording
from tf_device_panel.core.client.session import AppliedChanged, InventoryChanged, RunStateChanged
from tf_device_panel.core.devices.gpus import tf_gpu_messages
from tf_device_panel.core.devices.inventory import DeviceInventory
from tf_device_panel.core.protocol import events
from tf_device_panel.gui.docks import LEFT, DockSpec
from tf_device_panel.gui.widgets.colors import device_color

if TYPE_CHECKING:
    from tf_device_panel.gui.shell.controller import RuntimeController


class DevicesPanel(QWidget):
    DOCK = DockSpec("devices", "Devices", LEFT)
    doctorRequested = Signal()  # "Why? Ask the Doctor…", shown when TensorFlow sees no GPU

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
        self.doctor_button.clicked.connect(self.doctorRequested)
        layout.addWidget(self.note)
        layout.addWidget(self.doctor_button)
        layout.addWidget(self.tree, 1)

    def show_devices(self, ready: events.Ready, inventory: DeviceInventory, tf_lines: list[str]) -> None:
        """A ready run's devices; each GPU's memory and bus id are NVML's record of it, as `inventory` matched it."""
        self.tree.clear()
        build = ready.build
        cuda = (f"CUDA {build.get('cuda_version')}, cuDNN {build.get('cudnn_version')}"
                if build.get("is_cuda_build") else "no CUDA")
        physical = QTreeWidgetItem([f"Physical ({len(ready.physical)})", f"TensorFlow {ready.tf_version}, {cuda}"])
        for device in ready.physical:
            details = ""
            gpu = inventory.gpu(device["index"]) if device["device_type"] == "GPU" else None
            if gpu is not None:
                parts = [gpu.name,
                         f"{gpu.memory_total_mib} MiB" if gpu.memory_total_mib else "",
                         f"compute {gpu.compute_capability}" if gpu.compute_capability else "",
                         f"PCI {gpu.pci_bus_id}" if gpu.pci_bus_id else "",
                         "" if gpu.visible else "hidden"]
                details = ", ".join(p for p in parts if p)
            item = QTreeWidgetItem([device["name"].replace("/physical_device:", ""), details])
            item.setToolTip(0, device["name"])
            item.setToolTip(1, details)
            physical.addChild(item)
        logical = QTreeWidgetItem([f"Logical ({len(ready.logical)})", "created by the running runtime"])
        for made in ready.logical:
            limit = f"memory limit {made['memory_limit_mib']} MiB" if "memory_limit_mib" in made else ""
            item = QTreeWidgetItem([made["short_name"], limit or made["device_type"]])
            item.setForeground(0, QBrush(device_color(made["short_name"])))
            item.setToolTip(0, made["name"])  # one spelling shown, the full name on hover
            item.setToolTip(1, made["name"])
            logical.addChild(item)
        self.tree.addTopLevelItems([physical, logical])
        self.tree.expandAll()
        self.tree.resizeColumnToContents(0)
        self.tree.setColumnWidth(0, min(self.tree.columnWidth(0), 160))
        no_gpu = not any(d["device_type"] == "GPU" for d in ready.physical)
        self.doctor_button.setVisible(no_gpu)
        if no_gpu:
            reasons = tf_gpu_messages(tf_lines)[-3:]
            self.note.setText("<b>TensorFlow sees no GPU.</b>" + (
                "<br>TensorFlow said: " + "<br>".join(f"<i>{_esc(r)}</i>" for r in reasons) if reasons else ""))
        else:
            self.note.setText(f"Runtime pid {ready.pid}, Python {ready.python}")

    def show_message(self, html: str) -> None:
        self.note.setText(html)

    # -- wired to the session ------------------------------------------------------------------------
    def dock_body(self) -> QWidget:
        return self

    def wire(self, link: RuntimeController) -> None:
        self._link = link
        link.subscribe(self, InventoryChanged, lambda change: self.show_devices(
            change.ready, change.value, list(change.tf_lines)) if change.ready is not None else None)
        link.subscribe(self, AppliedChanged, self._starting)
        link.subscribe(self, RunStateChanged, self._run_news)

    def _starting(self, change: AppliedChanged) -> None:
        if change.value is not None:
            self.show_message("Starting a TensorFlow runtime with: " + change.value.summary())

    def _run_news(self, change: RunStateChanged) -> None:
        for error in change.changes.startup_errors:
            self.show_message(f"<b style='color:#d33'>{html_text.escape(wording.startup_error(error))}</b>")
        for exited in change.changes.exits:
            if exited.expected and not exited.killed_for_cancel:
                continue  # a planned exit (replaced, stopped) is news to no one
            self.show_message(f"<b style='color:#d33'>The runtime {exited.description}.</b>")
            applied = self._link.session.applied
            if exited.killed_for_cancel and applied is not None:
                # Like a notebook kernel, the next run gets a fresh runtime with the same configuration (the
                # manager's spare).
                self.show_message("The job did not stop in time, so its runtime was killed. The next run gets "
                                  "a fresh runtime with: " + applied.summary())


def _esc(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
