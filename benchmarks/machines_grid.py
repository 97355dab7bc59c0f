"""The Machines view's cost: 30 machines × 8 GPUs from a fake source, updated once a second; GUI-thread time per
update (the tiles' update and their paint), median. Target: ≤ 50 ms."""

from __future__ import annotations

import os
import statistics
import time

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from figures import report
from PySide6.QtWidgets import QApplication
from tf_device_panel.core.lab.machines import GpuStatus, MachineStatus
from tf_device_panel.core.units import GIB
from tf_device_panel.gui.docks.machines_panel import MachinesPanel

TARGET_MS = 50.0


def lab(step: int, machines: int = 30, gpus: int = 8) -> list[MachineStatus]:
    now = time.time()
    return [MachineStatus(f"gpu{m:02d}:9848", name=f"gpu{m:02d}.lab", last_sample=now - 1,
                          gpus=[GpuStatus(str(g), "NVIDIA H100 80GB HBM3", f"GPU-{m}-{g}",
                                          ((step + m + g) % 80) * GIB, 80 * GIB, ((step + g) % 100) / 100)
                                for g in range(gpus)],
                          host_memory_used_bytes=(100 + step % 50) * GIB, host_memory_total_bytes=512 * GIB,
                          exporters=["tfdp"]) for m in range(machines)]


def main(updates: int = 60) -> None:
    app = QApplication.instance() or QApplication([])
    panel = MachinesPanel(None)
    panel.columns.setValue(6)
    panel.resize(1700, 1100)
    panel.show()
    panel.show_machines(lab(0))  # the first answer builds the tiles; later ones only update them
    app.processEvents()
    times = []
    for step in range(1, updates + 1):
        answer = lab(step)  # made off the clock: the source's thread builds it
        started = time.perf_counter()
        panel.show_machines(answer)
        app.processEvents()  # includes the tiles' paint
        times.append(time.perf_counter() - started)
    panel.stop()
    median = statistics.median(times) * 1000
    report("machines grid: GUI-thread time per update, 30 machines × 8 GPUs", median, TARGET_MS, unit="ms",
           detail=f"median of {updates} updates, max {max(times) * 1000:.1f} ms")


if __name__ == "__main__":
    main()
