"""The Machines view under pytest-qt: tiles from a fake source (fetched off the GUI thread), the offline state,
a source that fails, remembered settings, and a tile opened onto its history."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("PySide6")
from hostile_http import HostileServer, huge, trickle_body
from PySide6.QtCore import QPoint, QSettings, Qt, QTimer
from tf_device_panel.core.lab.machines import ExporterSource, GpuStatus, MachineStatus, SourceError
from tf_device_panel.gui.docks.machines_panel import EXPORTERS, PROMETHEUS, MachinesPanel

GIB = 2**30


def lab(count: int, gpus: int = 2, offline: tuple[int, ...] = (), step: int = 0) -> list[MachineStatus]:
    now = time.time()
    machines = []
    for index in range(count):
        instance = f"gpu{index:02d}:9848"
        if index in offline:
            machines.append(MachineStatus(instance, name=instance, online=False, error="connection refused"))
            continue
        machines.append(MachineStatus(
            instance, name=f"gpu{index:02d}.lab", last_sample=now - 3,
            gpus=[GpuStatus(str(g), "Fake GPU", f"GPU-{index}-{g}", (g + 1 + step) * GIB, 16 * GIB, 0.42)
                  for g in range(gpus)],
            host_memory_used_bytes=4 * GIB, host_memory_total_bytes=32 * GIB, exporters=["tfdp"]))
    return machines


class FakeSource:
    """A source whose answers the test sets; records the threads it was called on."""

    def __init__(self, machines: list[MachineStatus]):
        self.description = "a fake lab"
        self.machines = machines
        self.error: str | None = None
        self.threads: set[str] = set()
        self.gate = threading.Event()
        self.gate.set()
        self.fetches = 0

    def fetch(self, stopping: threading.Event | None = None) -> list[MachineStatus]:
        self.threads.add(threading.current_thread().name)
        self.gate.wait(10)
        self.fetches += 1
        if self.error:
            raise SourceError(self.error)
        return self.machines

    def history(self, instance: str, seconds: float, *,
                stopping: threading.Event | None = None) -> dict[str, list[tuple[float, float]]]:
        self.threads.add(threading.current_thread().name)
        now = time.time()
        return {"gpu0": [(now - 20, 1.0 * GIB), (now - 10, 1.5 * GIB)], "gpu0.total": [(now - 20, 16.0 * GIB)],
                "host": [(now - 20, 4.0 * GIB)]}


@pytest.fixture
def settings(tmp_path: Path) -> QSettings:
    return QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat)


@pytest.fixture
def panel(qtbot, settings: QSettings) -> Iterator[MachinesPanel]:
    view = MachinesPanel(settings, refresh_s=0.1)
    qtbot.addWidget(view)
    view.resize(1100, 700)
    view.show()
    yield view
    view.stop()
    view.close()


def test_tiles_show_each_machine_and_the_offline_one(qtbot, panel: MachinesPanel) -> None:
    source = FakeSource(lab(3, offline=(1,)))
    panel.set_source(source)
    qtbot.waitUntil(lambda: len(panel.tiles) == 3, timeout=10_000)
    lines = panel.tile_lines()
    assert lines["gpu00:9848"][0] == "gpu00.lab"
    assert lines["gpu00:9848"][1].startswith("gpu00:9848 · ") and lines["gpu00:9848"][1].endswith(" s ago")
    assert lines["gpu00:9848"][2:] == ["gpu0 1.0/16.0 GiB 42%", "gpu1 2.0/16.0 GiB 42%", "host 4.0/32.0 GiB"]
    assert lines["gpu01:9848"][2] == "OFFLINE: connection refused"
    assert "3 machine(s) from a fake lab: 2 online, 4 GPU(s), 1 offline" in panel.status.text()
    assert "MainThread" not in source.threads  # fetching never runs on the GUI thread

    source.machines = lab(2, step=1)  # values change, a machine leaves the lab
    qtbot.waitUntil(lambda: len(panel.tiles) == 2 and panel.tile_lines()["gpu00:9848"][2].startswith("gpu0 2.0"),
                    timeout=10_000)


def test_a_slow_source_does_not_block_the_gui_thread(qtbot, panel: MachinesPanel) -> None:
    source = FakeSource(lab(2))
    source.gate.clear()  # every fetch waits until the test lets it go
    panel.set_source(source)
    # Had the GUI thread fetched, it would have waited at the closed gate and come back with a fetch done (a
    # check that no machine's load can fail, as a bound on the seconds could).
    assert source.fetches == 0 and threading.main_thread().name not in source.threads
    assert panel.tiles == {} and "Connecting to a fake lab" in panel.status.text()
    source.gate.set()
    qtbot.waitUntil(lambda: len(panel.tiles) == 2, timeout=10_000)


def test_a_failing_source_keeps_the_last_answer_and_says_why(qtbot, panel: MachinesPanel) -> None:
    source = FakeSource(lab(2))
    panel.set_source(source)
    qtbot.waitUntil(lambda: len(panel.tiles) == 2, timeout=10_000)
    source.error = "cannot reach Prometheus at http://prom:9090: Connection refused"
    qtbot.waitUntil(lambda: "cannot reach Prometheus" in panel.status.text(), timeout=10_000)
    assert len(panel.tiles) == 2


def test_a_bad_address_is_named_and_nothing_starts(qtbot, panel: MachinesPanel) -> None:
    panel.kind.setCurrentText(PROMETHEUS)
    panel.address.setText("ftp://nowhere")
    assert not panel.connect_source()
    assert "expected an http:// or https:// URL" in panel.status.text() and panel.fetcher is None


def test_source_and_columns_are_remembered(qtbot, panel: MachinesPanel, settings: QSettings) -> None:
    panel.kind.setCurrentText(EXPORTERS)
    panel.address.setText("http://127.0.0.1:9 http://127.0.0.1:10")
    panel.columns.setValue(3)
    assert panel.connect_source()
    qtbot.waitUntil(lambda: len(panel.tiles) == 2, timeout=10_000)  # both offline: nothing listens there
    assert all(lines[2].startswith("OFFLINE") for lines in panel.tile_lines().values())
    panel.stop()
    again = MachinesPanel(settings, refresh_s=0.1)
    qtbot.addWidget(again)
    assert again.kind.currentText() == EXPORTERS and again.address.text() == "http://127.0.0.1:9 http://127.0.0.1:10"
    assert again.columns.value() == 3
    assert again.fetcher is None  # nothing is fetched until the view is shown
    again.on_shown(True)
    try:
        qtbot.waitUntil(lambda: len(again.tiles) == 2, timeout=10_000)
    finally:
        again.stop()


def test_the_grid_follows_the_column_count(qtbot, panel: MachinesPanel) -> None:
    panel.columns.setValue(2)
    panel.set_source(FakeSource(lab(5)))
    qtbot.waitUntil(lambda: len(panel.tiles) == 5, timeout=10_000)
    positions = {panel.grid.getItemPosition(panel.grid.indexOf(t))[:2] for t in panel.tiles.values()}
    assert positions == {(0, 0), (0, 1), (1, 0), (1, 1), (2, 0)}
    panel.columns.setValue(5)  # five 250 px tiles do not fit in 1100 px: four, and the grid never scrolls sideways
    positions = {panel.grid.getItemPosition(panel.grid.indexOf(t))[:2] for t in panel.tiles.values()}
    assert positions == {(0, c) for c in range(4)} | {(1, 0)}
    panel.resize(1400, 700)
    qtbot.waitUntil(lambda: panel.fitting_columns() == 5, timeout=5000)
    positions = {panel.grid.getItemPosition(panel.grid.indexOf(t))[:2] for t in panel.tiles.values()}
    assert positions == {(0, c) for c in range(5)}


def test_opening_a_tile_shows_its_history(qtbot, panel: MachinesPanel) -> None:
    source = FakeSource(lab(2))
    panel.set_source(source)
    qtbot.waitUntil(lambda: len(panel.tiles) == 2, timeout=10_000)
    tile = panel.tiles["gpu01:9848"]
    with qtbot.waitSignal(tile.opened, timeout=5000):
        qtbot.mouseClick(tile, Qt.MouseButton.LeftButton, pos=QPoint(20, 10))
    [dialog] = panel.dialogs
    qtbot.waitUntil(lambda: "graph(s)" in dialog.status.text(), timeout=10_000)
    assert dialog.series["gpu0"][-1][1] == 1.5 * GIB
    assert "2 graph(s) from a fake lab" in dialog.status.text()
    assert len(dialog.graphs.ci.items) == 2  # GPU 0 and the host
    source.history = lambda instance, seconds, stopping=None: {"gpu0": [(time.time(), 3.0 * GIB)]}  # type: ignore[method-assign]
    qtbot.mouseClick(dialog.reload_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: dialog.series["gpu0"][-1][1] == 3.0 * GIB, timeout=10_000)
    assert len(dialog.graphs.ci.items) == 1
    second = panel.open_machine("gpu00:9848")
    assert second is not None and len(panel.dialogs) == 2
    panel.stop()  # closes every open dialog
    assert panel.dialogs == [] and not dialog.isVisible() and not second.isVisible()


def test_the_window_docks_the_view_and_stops_it_on_close(qtbot, settings: QSettings) -> None:
    from tf_device_panel.core.client.history import RunHistory
    from tf_device_panel.gui.shell.main_window import MainWindow

    window = MainWindow(settings=settings, history=RunHistory(), start_runtime=False)
    qtbot.addWidget(window)
    window.show()
    dock = window.docks["machines"]
    assert not dock.isVisible()
    view_menu = next(a.menu() for a in window.menuBar().actions() if a.text() == "&View")
    assert dock.toggleViewAction() in view_menu.actions() and dock.toggleViewAction().text() == "Machines (lab)"
    dock.show()
    window.panels["machines"].set_source(FakeSource(lab(2)))
    qtbot.waitUntil(lambda: len(window.panels["machines"].tiles) == 2, timeout=10_000)
    window.close()
    assert window.panels["machines"].fetcher is None


def test_misbehaving_targets_leave_the_grid_responsive_and_a_stop_prompt(qtbot, panel: MachinesPanel) -> None:
    """Issue 32, item 1: a trickling and a 40 MiB target, real sockets: the GUI thread keeps its pace, each tile
    says why within the deadline, and stopping with a fetch in flight does not wait for that fetch."""
    ticks: list[float] = []
    timer = QTimer()
    timer.setInterval(20)
    timer.timeout.connect(lambda: ticks.append(time.monotonic()))
    with HostileServer(trickle_body(0.2)) as slow, HostileServer(huge(40 * 2**20)) as big:
        timer.start()
        panel.set_source(ExporterSource([slow.url, big.url], timeout=1.0))
        qtbot.waitUntil(lambda: len(panel.tiles) == 2
                        and all(lines[-1].startswith("OFFLINE") for lines in panel.tile_lines().values()),
                        timeout=15_000)
        lines = {instance: tile_lines[-1] for instance, tile_lines in panel.tile_lines().items()}
        assert lines[slow.url.removeprefix("http://")] == "OFFLINE: no complete answer within 1 s"
        assert "larger than the 8 MiB allowed" in lines[big.url.removeprefix("http://")]
        # The trickle lasts the fetch's whole second: a GUI thread that waited on it would not tick until it ended
        # (Qt fires a timer held up that long once, after). Counted, not timed: a busy machine delays ticks.
        trickled = slow.connections[0]
        qtbot.waitUntil(lambda: trickled.ended is not None, timeout=5_000)
        timer.stop()
        assert trickled.ended is not None
        during = [tick for tick in ticks if trickled.started < tick < trickled.ended]
        assert len(during) >= 3, f"the GUI thread ticked {len(during)} times in the trickle's " \
                                 f"{trickled.ended - trickled.started:.2f} s"

        # Counted before the new source starts: its first fetch may connect before the next line runs, and the
        # one after it would wait for the 20 s deadline (CI once timed out that way).
        connected = len(slow.connections)
        panel.set_source(ExporterSource([slow.url], timeout=20.0))  # a long deadline: the fetch is in flight
        qtbot.waitUntil(lambda: len(slow.connections) > connected, timeout=10_000)
        started = time.monotonic()
        panel.stop()
        assert time.monotonic() - started < 1.0
