"""Issue 23 item 1: the Memory graphs are large enough to read when their dock is raised, GPU plots first, and
their marker labels never sit on a curve; issue 20 item 7: each GPU says what this run's process holds
(real widgets offscreen, a fake NVML with the H100's recorded figures)."""

from __future__ import annotations

import os
import time

import pytest
from fake_nvml import MIB, FakeGpus, process

pytest.importorskip("PySide6")
from PySide6.QtWidgets import QApplication
from tf_device_panel.core.devices.nvml import Nvml
from tf_device_panel.core.protocol import events
from tf_device_panel.gui.docks.memory_panel import MemoryPanel
from tf_device_panel.gui.shell.main_window import MainWindow

H100_TOTAL_MIB = 81_559
# NVML's per-process memory of the run after its first op, measured on the H100 (shared/gpu-host/README.md)
H100_HELD_MIB = {"default": 79_274, "memory growth": 522, "split 2048+4096": 2_570, "memory_fraction 0.25": 20_790}


def plot_heights_in_sight(panel: MemoryPanel) -> dict[str, int]:
    """Each plot's height (title, curves and axis) that lies inside the graphs' scroll viewport."""
    viewport = panel.graphs_scroll.viewport()
    shown = {}
    for key, plot in panel.plots.items():
        rect = panel.graphs.mapFromScene(plot.sceneBoundingRect()).boundingRect()
        top_left = panel.graphs.mapTo(viewport, rect.topLeft())
        in_sight = rect.translated(top_left - rect.topLeft()).intersected(viewport.rect())
        shown[key] = in_sight.height()
    return shown


@pytest.mark.parametrize(("size", "least"), [((1280, 720), 150), ((1920, 1080), 200)])
@pytest.mark.parametrize("gpus", [0, 1])
def test_raised_memory_graphs_are_each_large_enough_to_read(qtbot, window: MainWindow, size, least, gpus) -> None:
    window.resize(*size)
    if gpus:
        window.panels["memory"].build_plots(list(range(gpus)))
    window.dock_layout.reset_layout()
    window.resize(*size)
    QApplication.processEvents()
    window.docks["memory"].raise_()
    qtbot.waitUntil(lambda: min(plot_heights_in_sight(window.panels["memory"]).values()) >= least, timeout=3000)
    keys = list(window.panels["memory"].plots)
    assert keys[:gpus] == [f"gpu{n}" for n in range(gpus)]  # GPU plots first
    # the centre keeps its form: the job's rows are not squeezed by the grown dock
    assert window.runs.form_scroll.height() >= window.runs.form_scroll.minimumSizeHint().height()
    # another tab raised: the bottom docks go back to their height
    window.docks["map"].raise_()
    qtbot.waitUntil(lambda: window.docks["map"].height() < window.height() * 0.3, timeout=3000)


@pytest.mark.parametrize(("setting", "held"), list(H100_HELD_MIB.items()))
def test_each_gpu_says_what_this_runs_process_holds(qtbot, monkeypatch, setting, held) -> None:
    fake = FakeGpus(1)
    fake.total = H100_TOTAL_MIB * MIB
    fake.used[0] = (held + 300) * MIB
    fake.processes[0] = [process(31337, 1000), process(os.getpid(), held)]
    fake.install(monkeypatch)
    panel = MemoryPanel(Nvml(), interval_s=0.1)
    qtbot.addWidget(panel)
    try:
        panel.on_events([events.Ready(pid=os.getpid())])
        expected = f"this run holds {held:,} of {H100_TOTAL_MIB:,} MiB"
        qtbot.waitUntil(lambda: expected in panel.gpu_title(0), timeout=5000)
        assert panel.gpu_title(0).startswith("GPU 0: Fake GPU 0")
    finally:
        panel.stop()


def test_marker_labels_never_sit_on_a_curve_and_collapse_to_ticks_when_short(qtbot, monkeypatch) -> None:
    fake = FakeGpus(1)
    fake.used[0] = fake.total - 100 * MIB  # the used line at the very top, where labels used to go
    fake.install(monkeypatch)
    panel = MemoryPanel(Nvml(), interval_s=0.1)
    qtbot.addWidget(panel)
    try:
        panel.resize(1280, 520)
        panel.show()
        panel.window_choice.setCurrentIndex(0)
        now = time.time() - 30
        panel.on_events([events.Ready(pid=os.getpid(), time=now),
                         events.JobStarted(job="fit", job_id="j", time=now + 10),
                         events.JobFinished(job="fit", status="ok", job_id="j", time=now + 20)])
        qtbot.waitUntil(lambda: panel.curves["gpu0.memory_total_mib"].highest > 0, timeout=5000)
        panel.redraw()
        assert panel.visible_marker_labels()
        plot = panel.plots["gpu0"]
        top_curve = max(curve.highest for key, curve in panel.curves.items() if panel.curve_plots[key] == "gpu0")
        for item in panel._marker_texts:
            if item.isVisible():
                box = plot.getViewBox().mapSceneToView(item.sceneBoundingRect()).boundingRect()
                assert min(box.top(), box.bottom()) > top_curve, f"{item.toPlainText()} covers a curve"
        # too short for a row of labels above the curves (a projector's large font): lines only, named on hover
        font = panel.font()
        font.setPointSize(40)
        panel.setFont(font)
        QApplication.processEvents()
        panel._markers_drawn = None
        panel.redraw()
        assert panel.visible_marker_labels() == []
        panel.read_at(now + 10)
        assert "fit started" in panel.graphs.toolTip()
    finally:
        panel.stop()
