"""The window's docked panels, in dock order: the window makes, docks and wires each one as it declares
(`gui/docks/__init__.py`). A panel added here appears as a dock, with its View menu entry."""

from __future__ import annotations

from tf_device_panel.gui.docks import Panel
from tf_device_panel.gui.docks.config_panel import ConfigPanel
from tf_device_panel.gui.docks.device_map import DeviceMapPanel
from tf_device_panel.gui.docks.devices_panel import DevicesPanel
from tf_device_panel.gui.docks.doctor_panel import DoctorPanel
from tf_device_panel.gui.docks.history_panel import HistoryPanel
from tf_device_panel.gui.docks.log_panel import LogPanel
from tf_device_panel.gui.docks.machines_panel import MachinesPanel
from tf_device_panel.gui.docks.memory_panel import MemoryPanel

PANELS: tuple[type[Panel], ...] = (DevicesPanel, ConfigPanel, LogPanel, HistoryPanel, DoctorPanel, MemoryPanel,
                                   MachinesPanel, DeviceMapPanel)
