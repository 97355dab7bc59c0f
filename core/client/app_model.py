"""The application's state without Qt (glue's "state"): what the window shows and edits, in one object.

- the configuration being edited (the draft) and the one last applied, and whether they differ (stale);
- the device inventory: TensorFlow's GPUs matched to NVML's once per ready run (core.devices.inventory);
- the one telemetry sampler of the process, which the memory graphs, the device map and an exporter
  (core.lab.exporter.Exporter(sampler=...)) all subscribe to instead of each sampling NVML;
- the run manager, attached where the window builds it (`run_manager`).

Each piece of news has its own `Listeners`: a panel subscribes with a plain callback and gets the new value.
Draft, applied and inventory news are given on the thread that changed them (the window's, as the window is
the only one that changes them); samples on the sampler's own thread, so a Qt subscriber moves them onto the
GUI thread itself.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from tf_device_panel.core.config import DeviceConfig
from tf_device_panel.core.devices.inventory import DeviceInventory
from tf_device_panel.core.devices.nvml import GpuSnapshot, Nvml
from tf_device_panel.core.devices.telemetry import DEFAULT_INTERVAL_S, Sample, Sampler
from tf_device_panel.core.listeners import Listeners
from tf_device_panel.core.protocol import events


class AppModel:
    def __init__(self, *, nvml: Nvml | None = None, sampler: Sampler | None = None,
                 interval_s: float = DEFAULT_INTERVAL_S):
        self.sampler = sampler if sampler is not None else Sampler(interval=interval_s, nvml=nvml)
        self.nvml_gpus: list[GpuSnapshot] = []   # NVML's GPUs, read once when the sampler starts
        self.draft = DeviceConfig()
        self.applied: DeviceConfig | None = None
        self.inventory = DeviceInventory()
        # The run lifecycle's owner (core.client.run_manager.RunManager), attached by whoever builds the window
        # or the command line's run: the model holds it so panels reach runs through the model, not the window.
        self.run_manager: Any = None
        self.draft_changed: Listeners[DeviceConfig] = Listeners()
        self.applied_changed: Listeners[DeviceConfig] = Listeners()
        self.inventory_changed: Listeners[DeviceInventory] = Listeners()

    # -- telemetry ---------------------------------------------------------------------------------
    def start(self) -> None:
        """Start sampling; NVML's GPUs (name, bus id, memory) are read once here, for the inventory too."""
        self.sampler.start()
        self.nvml_gpus = list(self.sampler.gpus)

    def stop(self) -> None:
        self.sampler.stop()

    def subscribe_samples(self, on_sample: Callable[[Sample], None]) -> Callable[[], None]:
        """Every telemetry Sample, on the sampler's thread; returns the function that unsubscribes."""
        return self.sampler.subscribe(on_sample)

    # -- configuration -----------------------------------------------------------------------------
    def set_draft(self, config: DeviceConfig) -> None:
        if config == self.draft:
            return
        self.draft = config
        self.draft_changed.notify(config)

    def mark_applied(self, config: DeviceConfig) -> None:
        """`config` was handed to the runtime: the draft is it, and nothing is stale."""
        self.set_draft(config)
        self.applied = config
        self.applied_changed.notify(config)

    @property
    def is_stale(self) -> bool:
        """The runtime runs another configuration than the one being edited."""
        return self.applied is not None and self.draft != self.applied

    # -- devices -----------------------------------------------------------------------------------
    def runtime_ready(self, ready: events.Ready) -> DeviceInventory:
        """A run's TensorFlow is ready: match its GPUs to NVML's, once, and tell every subscriber."""
        self.inventory = DeviceInventory.from_ready(ready, self.nvml_gpus, os.environ.get("CUDA_VISIBLE_DEVICES"))
        self.inventory_changed.notify(self.inventory)
        return self.inventory
