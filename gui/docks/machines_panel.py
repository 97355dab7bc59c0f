"""The Machines view: a grid of tiles, one per machine of a lab, from a Prometheus server or exporters.

Fetching happens on a background thread (core.lab.machines does the HTTP, bounded by core.lab.fetch: a byte cap per
answer, a deadline per target and per refresh); results arrive through a queued signal, so the GUI thread only lays
out what came back. Stopping (another source, closing a dialog or the window) cancels a fetch in flight within a
tenth of a second, so the GUI thread never waits out a misbehaving target's deadline. Tiles are painted by hand,
not built from widgets per GPU: 30 machines × 8 GPUs would be 240 progress bars, and repainting a few rectangles
costs far less. Opening a tile shows that machine's memory graphs, with history from Prometheus range queries (or
what an exporter source has fetched so far). The source and the grid's column count are remembered in QSettings.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence

import pyqtgraph as pg
from PySide6.QtCore import QRectF, QSettings, Qt, QTimer, Signal
from PySide6.QtGui import QColor, QFont, QFontMetrics, QMouseEvent, QPainter, QPaintEvent, QPen, QResizeEvent
from PySide6.QtWidgets import (
    QComboBox,
    QDialog,
    QGridLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QScrollArea,
    QSizePolicy,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)
from tf_device_panel.core.lab.machines import MachineStatus, Source, SourceError, make_source
from tf_device_panel.core.units import GIB, gib_figure
from tf_device_panel.gui.docks import RIGHT, DockSpec
from tf_device_panel.gui.widgets.common import guard_wheel
from tf_device_panel.gui.widgets.worker import Worker, create_worker

log = logging.getLogger(__name__)

PROMETHEUS, EXPORTERS = "Prometheus", "Exporters"
REFRESH_S = 1.0
HISTORY_S = 15 * 60.0
TILE_WIDTH = 250
ROW_HEIGHT = 17
OFFLINE = QColor("#c62828")
BAR_BACK = QColor("#e0e0e0")
BAR_FILL = QColor("#1e88e5")
BAR_HIGH = QColor("#fb8c00")  # memory nearly full
HOST_FILL = QColor("#43a047")
OFFLINE_ROWS = 3  # the reason a machine is offline, wrapped (Prometheus's errors are long: 'Get "http://…": dial …')


def _age_text(seconds: float | None) -> str:
    if seconds is None:
        return "no sample"
    if seconds < 120:
        return f"{seconds:.0f} s ago"
    return f"{seconds / 60:.0f} min ago"


class MachineTile(QWidget):
    """One machine, painted: name, target and age of the last sample, a memory bar and utilization per GPU,
    the host's memory; offline shows the reason in red."""

    opened = Signal(str)

    def __init__(self, instance: str, parent: QWidget | None = None):
        super().__init__(parent)
        self.instance = instance
        self.machine = MachineStatus(instance)
        self.now = time.time()
        self.setFixedWidth(TILE_WIDTH)
        self.setCursor(Qt.CursorShape.PointingHandCursor)
        self.setToolTip("Open this machine's memory graphs")
        self.setObjectName("machine-tile")
        self._bold = QFont(self.font())
        self._bold.setBold(True)

    def set_machine(self, machine: MachineStatus, now: float) -> None:
        rows = len(machine.gpus) if machine.online else OFFLINE_ROWS
        height = 2 * ROW_HEIGHT + 8 + ROW_HEIGHT * (rows + 1)
        if machine.online != self.machine.online or machine.error != self.machine.error:
            self.setToolTip(f"Offline: {machine.error}" if not machine.online else "Open this machine's memory graphs")
        self.machine, self.now = machine, now
        if self.height() != height:
            self.setFixedHeight(height)
        self.update()

    def lines(self) -> list[str]:
        """What the tile shows, as text (tests and screen readers read this, not pixels)."""
        machine = self.machine
        lines = [machine.name, f"{machine.instance} · {_age_text(machine.age_s(self.now))}"]
        if not machine.online:
            return [*lines, f"OFFLINE: {machine.error or 'no answer'}"]
        for gpu in machine.gpus:
            utilization = "N/A" if gpu.utilization_ratio is None else f"{gpu.utilization_ratio * 100:.0f}%"
            lines.append(f"gpu{gpu.index} {gib_figure(gpu.memory_used_bytes)}/{gib_figure(gpu.memory_total_bytes)} GiB "
                         f"{utilization}")
        lines.append(f"host {gib_figure(machine.host_memory_used_bytes)}/"
                     f"{gib_figure(machine.host_memory_total_bytes)} GiB")
        return lines

    def paintEvent(self, event: QPaintEvent) -> None:
        painter = QPainter(self)
        machine = self.machine
        palette = self.palette()
        painter.setPen(QPen(OFFLINE if not machine.online else palette.mid().color(), 2 if not machine.online else 1))
        painter.setBrush(palette.base())
        painter.drawRoundedRect(QRectF(self.rect()).adjusted(1, 1, -1, -1), 4, 4)
        lines = self.lines()
        width = self.width() - 12
        metrics = QFontMetrics(self.font())
        painter.setPen(palette.text().color())
        painter.setFont(self._bold)
        painter.drawText(6, ROW_HEIGHT, metrics.elidedText(lines[0], Qt.TextElideMode.ElideRight, width))
        painter.setFont(self.font())
        painter.setPen(palette.placeholderText().color())
        painter.drawText(6, 2 * ROW_HEIGHT, metrics.elidedText(lines[1], Qt.TextElideMode.ElideMiddle, width))
        top = 2 * ROW_HEIGHT + 6
        if not machine.online:
            painter.setPen(OFFLINE)
            painter.setFont(self._bold)
            painter.drawText(QRectF(6, top, width, ROW_HEIGHT * (OFFLINE_ROWS + 1) - 6),
                             int(Qt.TextFlag.TextWrapAnywhere) | int(Qt.AlignmentFlag.AlignTop), lines[2])
            return
        rows: list[tuple[str, float | None, float | None, QColor]] = [
            (line, gpu.memory_used_bytes, gpu.memory_total_bytes, BAR_FILL)
            for line, gpu in zip(lines[2:], machine.gpus, strict=False)]
        rows.append((lines[-1], machine.host_memory_used_bytes, machine.host_memory_total_bytes, HOST_FILL))
        for row, (text, used, total, fill) in enumerate(rows):
            bar = QRectF(6, top + row * ROW_HEIGHT, width, ROW_HEIGHT - 3)
            painter.fillRect(bar, BAR_BACK)
            if used is not None and total:
                share = min(max(used / total, 0.0), 1.0)
                painter.fillRect(QRectF(bar.x(), bar.y(), bar.width() * share, bar.height()),
                                 BAR_HIGH if share > 0.9 and fill is BAR_FILL else fill)
            painter.setPen(QColor("#000000"))
            painter.drawText(bar.adjusted(4, 0, -4, 0), Qt.AlignmentFlag.AlignVCenter, text)

    def mouseReleaseEvent(self, event: QMouseEvent) -> None:
        if event.button() == Qt.MouseButton.LeftButton:
            self.opened.emit(self.instance)


def _fetch_every(source: Source, interval: float, stopping: threading.Event
                 ) -> Iterator[tuple[list[MachineStatus], float] | str]:
    """`source.fetch()` every `interval` seconds until `stopping` is set (gui.worker runs it off the GUI thread):
    each answer with when it came, or what went wrong, as text."""
    while not stopping.is_set():
        started = time.monotonic()
        try:
            machines = source.fetch(stopping=stopping)
        except SourceError as exc:
            if stopping.is_set():
                break
            yield str(exc)
        except Exception as exc:  # a bug in one fetch must not end the view's updates
            log.warning("fetching machines failed: %s: %s", type(exc).__name__, exc)
            yield f"{type(exc).__name__}: {exc}"
        else:
            yield machines, time.time()
        stopping.wait(max(interval - (time.monotonic() - started), 0.05))


class MachineDialog(QDialog):
    """One machine's memory over the last minutes: a graph per GPU and the host, history fetched off the GUI
    thread."""

    def __init__(self, source: Source, machine: MachineStatus, parent: QWidget | None = None):
        super().__init__(parent)
        self.setObjectName("machine-dialog")
        self.setWindowTitle(f"{machine.name} — memory")
        self.source, self.machine = source, machine
        self.series: dict[str, list[tuple[float, float]]] = {}
        layout = QVBoxLayout(self)
        self.status = QLabel(f"{machine.instance}: loading the last {HISTORY_S / 60:.0f} min of history…")
        self.reload_button = QPushButton("Reload")
        self.reload_button.clicked.connect(self.refresh)
        top = QHBoxLayout()
        top.addWidget(self.status, 1)
        top.addWidget(self.reload_button)
        layout.addLayout(top)
        self.graphs = pg.GraphicsLayoutWidget()
        layout.addWidget(self.graphs, 1)
        self.resize(700, 520)
        self._worker: Worker | None = None
        self.refresh()

    def refresh(self) -> None:
        if self._worker is not None and self._worker.running:
            return
        self._worker = create_worker(self.source.history, self.machine.instance, HISTORY_S, name="machines-history",
                                     parent=self, returned=self._show, errored=self._show_failure,
                                     pass_stopping=True)

    def wait(self, timeout: float = 10.0) -> None:
        if self._worker is not None:
            self._worker.wait(timeout)

    def cancel(self) -> None:
        """Give up a history fetch in flight (it ends within core.lab.fetch.SLICE_S); nothing it got is shown."""
        if self._worker is not None:
            self._worker.stop()

    def _show_failure(self, exc: BaseException) -> None:
        self._show(str(exc) if isinstance(exc, SourceError) else f"{type(exc).__name__}: {exc}")

    def _show(self, answer: object) -> None:
        if isinstance(answer, str):
            self.status.setText(f"{self.machine.instance}: {answer}")
            return
        assert isinstance(answer, dict)
        self.series = answer
        self.graphs.clear()
        names = sorted({name.split(".")[0] for name in answer}, key=lambda n: (n == "host", len(n), n))
        for row, name in enumerate(names):
            title = "host memory (GiB)" if name == "host" else f"{name.replace('gpu', 'GPU ')} memory (GiB)"
            plot = self.graphs.addPlot(row=row, col=0, title=title, axisItems={"bottom": pg.DateAxisItem()})
            for key, pen in ((name, pg.mkPen("#1e88e5", width=2)), (f"{name}.total", pg.mkPen("#9e9e9e",
                                                                                              style=Qt.PenStyle.DashLine))):
                points = answer.get(key, [])
                if points:
                    plot.plot([t for t, _ in points], [v / GIB for _, v in points], pen=pen)
        self.status.setText(f"{self.machine.instance}: {len(names)} graph(s) from {self.source.description}"
                            if names else f"{self.machine.instance}: no history yet")

    def done(self, result: int) -> None:
        self.cancel()
        super().done(result)


class _GridScroll(QScrollArea):
    """The tiles' scroll area: a change of width may change how many columns fit."""

    def __init__(self, on_resize: Callable[[], None]):
        super().__init__()
        self._on_resize = on_resize

    def resizeEvent(self, event: QResizeEvent) -> None:
        super().resizeEvent(event)
        self._on_resize()


class MachinesPanel(QWidget):
    """The grid of machines and its source bar."""

    updated = Signal()

    # Hidden at first: it fetches only once shown (`on_shown`), so a window without a lab asks no network.
    DOCK = DockSpec("machines", "Machines (lab)", RIGHT, hidden=True, needs=("settings",))

    def __init__(self, settings: QSettings | None = None, *, refresh_s: float = REFRESH_S,
                 source_factory: Callable[[str, str], Source] | None = None):
        super().__init__()
        self.settings = settings
        self.refresh_s = refresh_s
        self.source_factory = source_factory or self._make_source
        self.source: Source | None = None
        self.fetcher: Worker | None = None
        self.tiles: dict[str, MachineTile] = {}
        self._laid_columns = 0
        self._laid_tiles: list[int] = []
        self.dialogs: list[MachineDialog] = []

        self.kind = QComboBox()
        self.kind.addItems([PROMETHEUS, EXPORTERS])
        self.kind.setToolTip("Read a Prometheus server, or scrape exporters directly (a small lab)")
        self.address = QLineEdit()
        self.address.setPlaceholderText("http://prometheus.lab:9090  —  or exporters: gpu01:9848 gpu02:9848 …")
        self.address.returnPressed.connect(self.connect_source)
        self.connect_button = QPushButton("Connect")
        self.connect_button.clicked.connect(self.connect_source)
        self.columns = QSpinBox()
        self.columns.setRange(1, 12)
        self.columns.setValue(4)
        self.columns.setPrefix("columns: ")
        self.columns.valueChanged.connect(self._relayout)
        guard_wheel(self.kind)
        guard_wheel(self.columns)
        bar = QHBoxLayout()
        bar.addWidget(self.kind)
        bar.addWidget(self.address, 1)
        bar.addWidget(self.connect_button)
        bar.addWidget(self.columns)
        self.status = QLabel("Name a Prometheus server or exporters, then Connect.")
        self.status.setWordWrap(True)
        self.grid_host = QWidget()
        self.grid = QGridLayout(self.grid_host)
        self.grid.setAlignment(Qt.AlignmentFlag.AlignTop | Qt.AlignmentFlag.AlignLeft)
        self.grid.setSpacing(8)
        scroll = _GridScroll(self._relayout)
        scroll.setWidgetResizable(True)
        scroll.setWidget(self.grid_host)
        # As many columns as fit (at most the chosen number): the grid scrolls down, never sideways.
        scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.grid_scroll = scroll
        self.answered = False  # whether any fetch has answered yet
        scroll.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Expanding)
        layout = QVBoxLayout(self)
        layout.addLayout(bar)
        layout.addWidget(self.status)
        layout.addWidget(scroll, 1)
        self._age_timer = QTimer(self)  # ages tick between fetches, and say so when a source stops answering
        self._age_timer.setInterval(1000)
        self._age_timer.timeout.connect(self._tick_ages)
        self._restore()

    # -- settings ---------------------------------------------------------------------------------
    def _restore(self) -> None:
        if self.settings is None:
            return
        kind = str(self.settings.value("machines/kind", PROMETHEUS))
        self.kind.setCurrentText(kind if kind in (PROMETHEUS, EXPORTERS) else PROMETHEUS)
        self.address.setText(str(self.settings.value("machines/address", "")))
        with contextlib.suppress(TypeError, ValueError):
            self.columns.setValue(int(self.settings.value("machines/columns", 4)))  # type: ignore[call-overload]

    def _save(self) -> None:
        if self.settings is None:
            return
        self.settings.setValue("machines/kind", self.kind.currentText())
        self.settings.setValue("machines/address", self.address.text())
        self.settings.setValue("machines/columns", self.columns.value())

    def dock_body(self) -> QWidget:
        return self

    def wire(self, _link: object) -> None:
        """The lab's machines are no part of the window's session: nothing to subscribe to."""

    def on_shown(self, shown: bool) -> None:
        """Connect to the remembered source, if any, once the dock is shown: a window whose user never opens the
        Machines view asks nothing of the network."""
        if shown and self.address.text().strip() and self.fetcher is None:
            self.connect_source()

    # -- the source -------------------------------------------------------------------------------
    @staticmethod
    def _make_source(kind: str, address: str) -> Source:
        if kind == PROMETHEUS:
            return make_source(address.strip(), None)
        return make_source(None, address.replace(",", " ").split())

    def connect_source(self) -> bool:
        try:
            source = self.source_factory(self.kind.currentText(), self.address.text())
        except SourceError as exc:
            self.status.setText(f"⚠ {exc}")
            return False
        self.set_source(source)
        self._save()
        return True

    def set_source(self, source: Source) -> None:
        self.stop()
        self.source = source
        self.status.setText(f"Connecting to {source.description}…")
        self.fetcher = create_worker(_fetch_every, source, self.refresh_s, name="machines-fetch", parent=self,
                                     yielded=self._fetched, pass_stopping=True)
        self._age_timer.start()

    def stop(self) -> None:
        self._age_timer.stop()
        if self.fetcher is not None:
            fetcher, self.fetcher = self.fetcher, None
            fetcher.stop()  # nothing it fetched is shown after this
        for dialog in list(self.dialogs):  # closing one removes it from the list
            dialog.cancel()
            dialog.close()
        self.dialogs.clear()

    def shut_down(self) -> None:
        self.stop()

    def _fetched(self, answer: tuple[list[MachineStatus], float] | str) -> None:
        if isinstance(answer, str):
            self._failed(answer)
        else:
            self.show_machines(*answer)

    def _failed(self, message: str) -> None:
        shown = "showing the last answer; " if self.answered else "no answer yet; "
        self.status.setText(f"⚠ {message} ({shown}retrying every {self.refresh_s:g} s)")

    # -- the grid ---------------------------------------------------------------------------------
    def show_machines(self, machines: Sequence[MachineStatus], now: float | None = None) -> None:
        self.answered = True
        now = now or time.time()
        seen = set()
        layout_changed = False
        for machine in machines:
            seen.add(machine.instance)
            tile = self.tiles.get(machine.instance)
            if tile is None:
                tile = self.tiles[machine.instance] = MachineTile(machine.instance, self.grid_host)
                tile.opened.connect(self.open_machine)
                layout_changed = True
            tile.set_machine(machine, now)
        for instance in [i for i in self.tiles if i not in seen]:
            tile = self.tiles.pop(instance)
            self.grid.removeWidget(tile)
            tile.deleteLater()
            layout_changed = True
        if layout_changed:
            self._relayout()
        online = sum(1 for m in machines if m.online)
        gpus = sum(len(m.gpus) for m in machines if m.online)
        source = self.source.description if self.source is not None else "a source"
        self.status.setText(f"{len(machines)} machine(s) from {source}: {online} online, {gpus} GPU(s)"
                            + ("" if online == len(machines) else f", {len(machines) - online} offline"))
        self.updated.emit()

    def fitting_columns(self) -> int:
        """The chosen number of columns, fewer when the dock is too narrow for that many tiles."""
        chosen = self.columns.value()
        if not self.tiles:
            return chosen
        tile = max(max(t.minimumWidth(), t.minimumSizeHint().width()) for t in self.tiles.values()) \
            + self.grid.horizontalSpacing()
        room = self.grid_scroll.viewport().width() - self.grid.contentsMargins().left() \
            - self.grid.contentsMargins().right()
        return max(1, min(chosen, room // max(tile, 1)))

    def _relayout(self) -> None:
        columns = self.fitting_columns()
        if columns == self._laid_columns and not self._tiles_changed():
            return
        self._laid_columns = columns
        ordered = sorted(self.tiles.values(), key=lambda t: (t.machine.name, t.instance))
        self._laid_tiles = [id(t) for t in ordered]
        for tile in ordered:
            self.grid.removeWidget(tile)
        for position, tile in enumerate(ordered):
            self.grid.addWidget(tile, position // columns, position % columns, Qt.AlignmentFlag.AlignTop)
            tile.show()
        if self.settings is not None:
            self.settings.setValue("machines/columns", self.columns.value())

    def _tiles_changed(self) -> bool:
        return [id(t) for t in sorted(self.tiles.values(), key=lambda t: (t.machine.name, t.instance))] \
            != self._laid_tiles

    def _tick_ages(self) -> None:
        now = time.time()
        for tile in self.tiles.values():
            tile.now = now
            tile.update()

    def open_machine(self, instance: str) -> MachineDialog | None:
        tile = self.tiles.get(instance)
        if tile is None or self.source is None:
            return None
        dialog = MachineDialog(self.source, tile.machine, self)
        dialog.finished.connect(lambda _=0, d=dialog: self.dialogs.remove(d) if d in self.dialogs else None)
        self.dialogs.append(dialog)
        dialog.show()
        return dialog

    def tile_lines(self) -> dict[str, list[str]]:
        return {instance: tile.lines() for instance, tile in self.tiles.items()}

