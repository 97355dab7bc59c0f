"""Telemetry costs: the sampler's time per tick with 1 and 8 (fake) GPUs, and one redraw of the Memory dock
with 8 GPUs and a full hour of history at the default interval. Prints medians."""

from __future__ import annotations

import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from fake_nvml import FakeGpus
from tf_device_panel.core.nvml import Nvml
from tf_device_panel.core.telemetry import History, Sampler


class Patcher:
    """The part of pytest's monkeypatch that FakeGpus.install uses."""

    def setattr(self, target: object, name: str, value: object) -> None:
        setattr(target, name, value)


def sampler_cost(gpus: int, ticks: int = 300) -> float:
    FakeGpus(gpus).install(Patcher())
    sampler = Sampler(nvml=Nvml())
    sampler.start()
    sampler.stop()
    times = []
    for _ in range(ticks):
        started = time.perf_counter()
        sampler.sample()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def redraw_cost(gpus: int = 8, hours: float = 1.0, interval: float = 0.5, markers: int = 0) -> tuple[float, int]:
    from PySide6.QtWidgets import QApplication

    app = QApplication.instance() or QApplication([])
    FakeGpus(gpus).install(Patcher())
    from tf_device_panel.gui.memory_panel import MemoryPanel

    panel = MemoryPanel(Nvml(), start=False)
    panel.sampler.start()
    panel.sampler.stop()
    panel.history = panel.sampler.history = History(interval)
    panel.build_plots(list(range(gpus)))
    panel.resize(1200, 1600)
    panel.show()
    now = time.time()
    points = int(hours * 3600 / interval)
    series = [name for name in panel.curves]
    for i in range(points):
        t = now - (points - i) * interval
        panel.history.record(t, {name: 1000.0 + (i % 600) for name in series})
    for run in range(markers // 2):  # jobs of 5 s, evenly spread over the hour
        started = now - hours * 3600 + run * hours * 3600 / (markers // 2)
        panel.history.mark(started, "job-start", "fit started")
        panel.history.mark(started + 5, "job-end", "fit ok")
    panel.window_choice.setCurrentIndex(panel.window_choice.count() - 1)  # All
    times = []
    for _ in range(15):
        started = time.perf_counter()
        panel.redraw()
        app.processEvents()  # includes the paint
        times.append(time.perf_counter() - started)
    panel.stop()
    return statistics.median(times), len(series)


def main() -> None:
    for gpus in (1, 8):
        print(f"sampler: {sampler_cost(gpus) * 1000:.3f} ms per tick with {gpus} fake GPU(s) (median of 300)")
    for markers in (0, 400):
        cost, count = redraw_cost(markers=markers)
        print(f"redraw: {cost * 1000:.1f} ms median for {count} series × 1 h at 0.5 s (7200 points each), "
              f"8 GPU plots + host, {markers} markers (target: well under the 500 ms redraw period)")


if __name__ == "__main__":
    main()
