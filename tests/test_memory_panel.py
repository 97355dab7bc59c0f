"""The Memory dock under pytest-qt, fed by a fake NVML and synthetic runtime events."""

from __future__ import annotations

import math
import os
import time
from pathlib import Path

import pytest
from fake_nvml import FakeGpus, no_library, process
from helpers import read_csv

pytest.importorskip("PySide6")
from PySide6.QtGui import QImage
from tf_device_panel.core.devices.inventory import DeviceInventory
from tf_device_panel.core.devices.nvml import Nvml
from tf_device_panel.core.protocol import events
from tf_device_panel.core.protocol.events import Event
from tf_device_panel.gui.docks.memory_panel import MemoryPanel


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> FakeGpus:
    gpus = FakeGpus(2, unsupported=("power",))
    gpus.processes[0] = [process(os.getpid(), 700), process(31337, None)]
    gpus.install(monkeypatch)
    return gpus


@pytest.fixture
def panel(qtbot, fake: FakeGpus):
    widget = MemoryPanel(Nvml(), interval_s=0.1)
    qtbot.addWidget(widget)
    widget.show()
    yield widget
    widget.stop()


def ready_event(pid: int) -> Event:
    return events.from_json({"type": events.READY, "data": {"pid": pid, "gpu_devices": [
        {"logical": "/GPU:0", "memory_mb": 2048, "physical": 0, "name": "Fake GPU 0", "pci_bus_id": "0000:01:00.0"},
        {"logical": "/GPU:1", "memory_mb": 2048, "physical": 0, "name": "Fake GPU 0", "pci_bus_id": "0000:01:00.0"},
        {"logical": "/GPU:2", "memory_mb": 8000, "physical": 1, "name": "Fake GPU 1", "pci_bus_id": "0000:02:00.0"}]}})


def cell(panel: MemoryPanel, row: int, column: str) -> str:
    from tf_device_panel.gui.docks.memory_panel import GPU_COLUMNS

    item = panel.table.item(row, GPU_COLUMNS.index(column))
    return "" if item is None else item.text()  # the rows exist before the first sample fills them


def test_rows_show_each_gpu_with_na_fields_and_the_runtime_marked(qtbot, panel: MemoryPanel) -> None:
    panel.on_events([ready_event(os.getpid())])
    qtbot.waitUntil(lambda: panel.table.rowCount() == 2 and panel.last_sample.runtime_pid == os.getpid(),
                    timeout=5000)
    assert cell(panel, 0, "Memory") == "1024 / 16384 MiB" and cell(panel, 0, "Power") == "N/A"
    assert cell(panel, 0, "Util") == "42 %" and cell(panel, 1, "Memory") == "2048 / 16384 MiB"
    processes = cell(panel, 0, "Processes")
    assert f"pid {os.getpid()} (this panel's runtime) 700 MiB" in processes and "31337" in processes
    assert "N/A" in processes  # the driver could not tell that process's memory


def test_a_lost_gpu_becomes_one_red_row(qtbot, panel: MemoryPanel, fake: FakeGpus) -> None:
    qtbot.waitUntil(lambda: panel.table.rowCount() == 2, timeout=5000)
    fake.lose(1)
    fake.used[0] = 5 * 2**30
    qtbot.waitUntil(lambda: "lost" in cell(panel, 1, "Memory"), timeout=5000)
    qtbot.waitUntil(lambda: cell(panel, 0, "Memory").startswith("5120"), timeout=5000)


def test_host_only_mode_without_nvml(qtbot, monkeypatch: pytest.MonkeyPatch) -> None:
    no_library(monkeypatch)
    widget = MemoryPanel(Nvml(), interval_s=0.1)
    qtbot.addWidget(widget)
    try:
        assert "host-only" in widget.note.text()
        assert set(widget.plots) == {"host", "cpu"}
        qtbot.waitUntil(lambda: widget.last_sample is not None, timeout=5000)
        assert widget.table.rowCount() == 0
        widget.redraw()
        times, values = widget.curves["host.ram_used_mib"].getData()
        assert times is not None and len(times) >= 1 and values[-1] > 0
    finally:
        widget.stop()


def test_limits_markers_tf_memory_and_window(qtbot, panel: MemoryPanel) -> None:
    now = time.time()
    ready = ready_event(os.getpid())
    panel.on_events([ready,
                     events.JobStarted(job="memory", job_id="j1", time=now + 0.1),
                     events.TfMemory(device="/GPU:0", current_mib=256.0, peak_mib=512.0, job_id="j1", time=now + 0.2),
                     events.Error(error_type="ResourceExhaustedError", job_id="j1", time=now + 0.3),
                     events.JobFinished(job="memory", status="error", job_id="j1", time=now + 0.4)])
    assert isinstance(ready, events.Ready)
    panel.set_inventory(DeviceInventory.from_ready(ready, panel.sampler.gpus))  # as the window's model tells it
    # both logical GPUs of physical GPU 0 draw their limit on GPU 0's plot, the third on GPU 1's
    assert sorted(line.value() for line in panel.limit_lines[0]) == [2048, 2048]
    assert [line.value() for line in panel.limit_lines[1]] == [8000]
    assert "tf/GPU:0.current_mib" in panel.curves
    qtbot.waitUntil(lambda: panel.redraws >= 2, timeout=5000)
    labels = panel.marker_labels()
    assert any("started" in label and "runtime" in label for label in labels)
    assert {"memory started", "ResourceExhaustedError", "memory error"} <= set(labels)
    assert panel.history.series["tf/GPU:0.peak_mib"].last() == 512.0
    # the time window selector sets the visible range; pause freezes redraws
    panel.window_choice.setCurrentIndex(0)  # 1 min, but it starts at the first sample: no empty minute
    (x0, x1), _ = panel.plots["gpu0"].viewRange()
    first_sample = panel.history.series["gpu0.memory_used_mib"].arrays()[0][0]
    assert x0 == pytest.approx(first_sample) and 59 <= x1 - x0 <= 61
    panel.pause_button.click()
    count = panel.redraws
    panel.redraw()  # what the redraw timer does on its next tick: while paused, it must draw nothing
    assert panel.redraws == count and panel.pause_button.text() == "Resume"
    panel.pause_button.click()
    assert panel.redraws > count
    text = panel.read_at(now + 0.2)
    assert "GPU 0 used 1024 MiB" in text and "TensorFlow /GPU:0 peak 512 MiB" in text  # human names
    assert "memory_used_mib" not in text
    assert panel.read_at(now - 3600).endswith("no samples here")  # only real samples, none an hour before


def test_exports_parse_back(qtbot, panel: MemoryPanel, tmp_path: Path) -> None:
    qtbot.waitUntil(lambda: len(panel.history.series.get("gpu0.memory_used_mib", [])) >= 3, timeout=5000)
    panel.redraw()
    csv_path, png_path = tmp_path / "t.csv", tmp_path / "t.png"
    assert panel.export_csv(csv_path) > 0
    back = read_csv(csv_path)
    assert all(value == 1024.0 for _, value in back["gpu0.memory_used_mib"])
    assert panel.export_png(png_path)
    image = QImage(str(png_path))
    assert not image.isNull() and image.width() > 100


def quick_runs(now: float, apart: float) -> list[Event]:
    runs = []
    for n in range(4):
        runs += [events.JobStarted(job="matmul", job_id=f"j{n}", time=now + n * apart),
                 events.JobFinished(job="matmul", status="ok", job_id=f"j{n}", time=now + n * apart + apart / 5)]
    return runs


def test_labels_of_quick_runs_share_one_label_instead_of_overprinting(qtbot, panel: MemoryPanel) -> None:
    now = time.time() - 50
    panel.window_choice.setCurrentIndex(0)  # 1 min: the runs are 0.5 s apart, a few pixels
    panel.on_events([*quick_runs(now, 0.5)])
    qtbot.waitUntil(lambda: len(panel.marker_labels()) == 8, timeout=5000)
    panel.redraw()
    shown = panel.visible_marker_labels()
    assert 1 <= len(shown) < 8 and shown[0].startswith("matmul started +")
    assert sum(int(label.rsplit("+", 1)[1]) + 1 if "+" in label else 1 for label in shown) == 8  # none lost
    # the read-out at the cursor names every marker of the crowd
    text = panel.read_at(now + 0.6)
    assert text.count("matmul started") >= 2 and "matmul ok" in text


def test_labels_far_apart_are_all_shown(qtbot, panel: MemoryPanel) -> None:
    now = time.time() - 58
    panel.resize(1400, 800)  # the plots ~1150 px wide, beside their legends; room for two rows of labels
    panel.window_choice.setCurrentIndex(0)
    panel.on_events([*quick_runs(now, 14)])  # 14 s apart in a 1-minute window: wider than a label
    qtbot.waitUntil(lambda: len(panel.marker_labels()) == 8, timeout=5000)
    panel.redraw()
    assert panel.visible_marker_labels() == ["matmul started", "matmul ok"] * 4


def test_a_live_redraw_redoes_only_what_moved(qtbot, monkeypatch: pytest.MonkeyPatch) -> None:
    """A live redraw (a new sample for every series) repaints the curves, and the time axis only when the window
    has moved by a pixel or more; nothing else: no value axis repainted, no axis label re-laid out, no curve's
    bounds scanned again. Those made a redraw of 8 GPUs + host over an hour cost ~18 ms (benchmarks/telemetry.py):
    pyqtgraph's automatic SI prefix re-lays out every axis label's HTML on every range change; its curves scan
    their data for NaN-aware bounds after each setData and again after each range change; Qt repaints one pixel
    around the curves' area, which took in the value axes while their ticks pointed inwards and touched it; and
    every sample moved the window by a fraction of a pixel, which redrew the time axis and moved every view."""
    import types

    import pyqtgraph as pg
    from PySide6.QtWidgets import QApplication
    from tf_device_panel.core.devices.telemetry import History
    from tf_device_panel.gui.docks import memory_panel

    painted: list[str] = []
    relabelled: list[str] = []
    scanned: list[object] = []
    paint, update_label, data_bounds = pg.AxisItem.paint, pg.AxisItem._updateLabel, pg.PlotCurveItem.dataBounds

    def counting_paint(self: pg.AxisItem, *args: object) -> None:
        painted.append(self.orientation)
        paint(self, *args)

    def counting_update_label(self: pg.AxisItem) -> None:
        relabelled.append(self.orientation)
        update_label(self)

    def counting_bounds(self: pg.PlotCurveItem, *args: object, **kwargs: object) -> object:
        scanned.append(self)
        return data_bounds(self, *args, **kwargs)

    # patched before the panel makes its items: PySide looks a Python override of a virtual up once per object
    monkeypatch.setattr(pg.AxisItem, "paint", counting_paint)
    monkeypatch.setattr(pg.AxisItem, "_updateLabel", counting_update_label)
    monkeypatch.setattr(pg.PlotCurveItem, "dataBounds", counting_bounds)
    # The panel's clock, moved by hand: the window ends at "now". It starts just past a round hour, so the
    # 0.05 s step below never crosses a grid line of the window's ends (grids are 1, 2, 2.5 or 5 × 10^k s; from
    # a time.time() start it crossed one in about 1 run of 5 and the window moved by a pixel).
    clock = [math.floor(time.time() / 3600) * 3600 + 0.01]
    monkeypatch.setattr(memory_panel, "time", types.SimpleNamespace(time=lambda: clock[0], strftime=time.strftime,
                                                                    localtime=time.localtime))
    FakeGpus(2).install(monkeypatch)
    panel = MemoryPanel(Nvml(), start=False)
    qtbot.addWidget(panel)
    panel.sampler.start()  # finds the GPUs
    panel.sampler.stop()
    panel.history = panel.sampler.history = History(0.5)
    panel.build_plots([0, 1])
    panel.resize(1200, 900)
    panel.show()
    for i in range(400):  # 200 s: longer than the shortest span drawn, so the window moves with the clock
        panel.history.record(clock[0] - 200 + i * 0.5, {name: 1000.0 + i % 7 for name in panel.curves})
    panel.window_choice.setCurrentIndex(panel.window_choice.count() - 1)  # All
    for _ in range(3):  # the value axes find their scale, the layout settles
        panel.redraw()
        QApplication.processEvents()
    plot = panel.plots["gpu0"]

    def live_redraw(seconds: float) -> None:
        painted.clear()
        relabelled.clear()
        scanned.clear()
        clock[0] += seconds
        panel.history.record(clock[0], {name: 1003.0 for name in panel.curves})
        panel.redraw()

    # a sample 5 s on: the window moves by a few pixels, the time axis with it
    live_redraw(5.0)
    qtbot.waitUntil(lambda: "bottom" in painted, timeout=5000)
    assert "left" not in painted
    assert relabelled == []
    assert scanned == []
    # a sample a twentieth of a second on: less than a pixel (200 s over ~900 px); the curves take it, the window
    # stays where it is
    window = plot.viewRange()[0]
    live_redraw(0.05)
    assert plot.viewRange()[0] == window
    assert panel.curves["gpu0.memory_used_mib"].getData()[1][-1] == 1003.0


def test_the_cpus_allocator_figures_are_drawn_with_the_host_memory(qtbot, monkeypatch: pytest.MonkeyPatch) -> None:
    """Under cpu_memory_limit_mib the CPU's allocator reports current/peak (tf_memory for /CPU:0), as a GPU's
    does: on a machine without GPUs they are drawn on the host plot."""
    no_library(monkeypatch)
    panel = MemoryPanel(Nvml(), interval_s=0.1)
    qtbot.addWidget(panel)
    panel.show()
    try:
        now = time.time()
        panel.on_events([events.TfMemory(device="/CPU:0", current_mib=40.0, peak_mib=60.0, job_id="j1",
                                         time=now)])
        assert panel.curve_plots["tf/CPU:0.current_mib"] == "host"
        assert panel.curve_plots["tf/CPU:0.peak_mib"] == "host"
        assert panel.history.series["tf/CPU:0.peak_mib"].last() == 60.0
    finally:
        panel.stop()
