"""Telemetry costs: the sampler's time per tick with 1 and 8 (fake) GPUs, and one redraw of the Memory dock
with 8 GPUs and a full hour of history at the default interval, as it happens live: a new sample for every
series, then the redraw and its paint. Prints medians (goal: 16 ms, one frame at 60 Hz). The graphs scroll by
whole pixels, so most live redraws of an hour's window leave the window where it is; those that move it (about
one in ten) cost more, and their median is printed too."""

from __future__ import annotations

import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from fake_nvml import FakeGpus
from figures import report
from tf_device_panel.core.devices.nvml import Nvml
from tf_device_panel.core.devices.telemetry import History, Sampler


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


def redraw_cost(gpus: int = 8, hours: float = 1.0, interval: float = 0.5,
                markers: int = 0) -> tuple[float, float, int, list[float]]:
    """(median wall seconds, median CPU seconds of this process, series drawn, the wall seconds of the redraws
    that scrolled the window) per live redraw. On a shared machine the wall time includes waiting for a core;
    the CPU time is what the redraw itself costs."""
    from PySide6.QtWidgets import QApplication

    app = QApplication.instance() or QApplication([])
    FakeGpus(gpus).install(Patcher())
    from tf_device_panel.gui.docks.memory_panel import MemoryPanel

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
    app.processEvents()
    walls, cpus, scrolled = [], [], []
    plot = next(iter(panel.plots.values()))
    for tick in range(31):
        panel.history.record(time.time(), {name: 1000.0 + tick for name in series})  # live: every curve changes
        window = plot.viewRange()[0]
        started, started_cpu = time.perf_counter(), time.process_time()
        panel.redraw()
        app.processEvents()  # includes the paint
        walls.append(time.perf_counter() - started)
        cpus.append(time.process_time() - started_cpu)
        if plot.viewRange()[0] != window:
            scrolled.append(walls[-1])
    panel.stop()
    return statistics.median(walls), statistics.median(cpus), len(series), scrolled


def main() -> None:
    for gpus in (1, 8):
        print(f"sampler: {sampler_cost(gpus) * 1000:.3f} ms per tick with {gpus} fake GPU(s) (median of 300)")
    for markers in (0, 400):
        wall, cpu, count, scrolled = redraw_cost(markers=markers)
        scrolling = (f"{statistics.median(scrolled) * 1000:.1f} ms median wall of the {len(scrolled)} of 31 that "
                     "scrolled the window" if scrolled else "none scrolled the window")
        report(f"Memory dock redraw, 8 GPUs + host × 1 h, {markers} markers", wall * 1000, 16, unit="ms",
               detail=f"median wall, {cpu * 1000:.1f} ms CPU, {count} series × 7200 points, a new sample each "
                      f"time; {scrolling}")


if __name__ == "__main__":
    main()
