"""Past runs from the run history: when, what and with which configuration; each opens with its log,
placements and result, and can run again or give back its configuration.

The history is read off the GUI thread, a page of PAGE_SIZE runs at a time (Newer/Older reach every run): a
loader thread reads the page's summaries, then the peaks of the runs whose run.json does not keep them (records
from before it did: their events.jsonl is read, a second for an hour-long run), and hands each result over a
queue that a timer on the GUI thread drains. The GUI thread reads no record's events."""

from __future__ import annotations

import html
import os
import queue
import threading
import time
from dataclasses import dataclass, field

from PySide6.QtCore import QEvent, Qt, QTimer, Signal
from PySide6.QtGui import QGuiApplication, QTextCursor
from PySide6.QtWidgets import (
    QApplication,
    QDialog,
    QGridLayout,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QPushButton,
    QSizePolicy,
    QSplitter,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)
from tf_device_panel.core.client.history import HistoryError, RunHistory
from tf_device_panel.core.client.records import RunError, RunPeaks, RunSummary
from tf_device_panel.core.client.run_memory import events_peaks, peaks_text, rss_text
from tf_device_panel.core.client.run_record import JobRun
from tf_device_panel.core.config import DeviceConfig
from tf_device_panel.core.protocol import events
from tf_device_panel.gui.docks import RIGHT, DockSpec
from tf_device_panel.gui.views.log_view import LogView as LogPanel
from tf_device_panel.gui.views.memory_compare import MemoryCompareDialog
from tf_device_panel.gui.views.result_view import ResultView
from tf_device_panel.gui.widgets.common import WrappingHeader, content_widths

COLUMNS = ("Date", "Job", "Status", "Duration", "Peak (MiB)")
DIALOG_SIZE = (1400, 900)  # px at most; 90 % of a smaller screen
PAGE_SIZE = 500            # runs listed at once; Newer and Older page through the rest
POLL_MS = 25               # how often the GUI thread takes what the loader read
# The peaks read from events start this long after the page is listed: an hour-long run's events take the loader a
# second, holding the GIL half the time, and read while the window was still being built they made it open in 1.5 s
# instead of 0.5 s (benchmarks/history_open.py, 500 such runs).
PEAKS_AFTER_MS = 250
NOT_READ_YET = "being read…"

EventsKey = tuple[int, int]  # an events.jsonl's (size, mtime): its peaks are read again only when it changed


@dataclass(frozen=True)
class PageRead:
    """The loader's first word: how many runs there are, and the page's summaries."""

    generation: int
    total: int
    offset: int
    runs: list[RunSummary]
    texts: dict[str, tuple[str, str]]  # run -> its parameters and configuration in words (made here, off the GUI)


@dataclass(frozen=True)
class PeaksRead:
    """The peaks of one run whose run.json does not keep them, read from its events.jsonl."""

    generation: int
    run_id: str
    key: EventsKey
    peaks: RunPeaks


@dataclass(frozen=True)
class LoadEnded:
    generation: int
    error: str | None = None   # the history folder itself could not be listed
    # Set by the GUI thread once it has taken this (and so stopped its timer): the loader ends only then, so no
    # timer outlives the loader's thread.
    taken: threading.Event = field(default_factory=threading.Event)


TAKEN_WAIT_S = 5.0  # how long a loader waits for the GUI thread to take its last result


def _end(results: queue.SimpleQueue[object], ended: LoadEnded, superseded: threading.Event) -> None:
    """Put the loader's last result and wait until the GUI thread took it (its poll timer then stops first), or
    until the page is superseded: a closed window takes nothing more, and its loader must not outlive it."""
    results.put(ended)
    deadline = time.monotonic() + TAKEN_WAIT_S
    while time.monotonic() < deadline and not superseded.is_set():
        if ended.taken.wait(0.05):
            return


def unkept(run: RunSummary) -> bool:
    """A run whose peaks its run.json does not keep (recorded before it did): they are read from its events. An
    unreadable run has no events to read."""
    return run.peaks is None and bool(run.job)


def load_page(history: RunHistory, offset: int, generation: int, known: dict[str, tuple[EventsKey, RunPeaks]],
              results: queue.SimpleQueue[object], superseded: threading.Event, listed: threading.Event) -> None:
    """On the loader thread: one page of summaries, then, once the GUI thread has `listed` them, the peaks run.json
    does not keep (from `known` where the events file has not changed since), until `superseded` (a newer refresh
    reads them). Touches no widget: everything goes through `results`."""
    try:
        total = len(history.run_ids())
        runs = history.summaries(limit=PAGE_SIZE, offset=offset)
    except HistoryError as exc:
        _end(results, LoadEnded(generation, str(exc)), superseded)
        return
    texts = {run.run_id: (params_text(run), config_text(run)) for run in runs}
    results.put(PageRead(generation, total, offset, runs, texts))
    reads = [run for run in runs if unkept(run)]
    while reads and not listed.wait(0.05):
        if superseded.is_set():
            return
    for run in reads:
        if superseded.is_set():
            return
        try:
            info = os.stat(history.root / run.run_id / "events.jsonl")
            key = (info.st_size, info.st_mtime_ns)
        except OSError:
            key = (-1, -1)
        cached = known.get(run.run_id)
        peaks = cached[1] if cached is not None and cached[0] == key else events_peaks(history, run.run_id)
        results.put(PeaksRead(generation, run.run_id, key, peaks))
    _end(results, LoadEnded(generation), superseded)


def date_text(summary: RunSummary) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(summary.started))


def short_date_text(summary: RunSummary) -> str:
    """The date in the table: today's runs by their time, older ones by day and minute (the whole date is in
    the details below and in the run's window)."""
    started = time.localtime(summary.started)
    today = time.localtime()
    same_day = (started.tm_year, started.tm_yday) == (today.tm_year, today.tm_yday)
    return time.strftime("%H:%M:%S" if same_day else "%m-%d %H:%M", started)


def params_text(summary: RunSummary) -> str:
    return ", ".join(f"{name}={value}" for name, value in summary.params.items() if value != "") or "defaults"


def run_config(summary: RunSummary) -> DeviceConfig | None:
    try:
        return DeviceConfig.from_json(summary.config) if summary.config else None
    except (ValueError, TypeError, KeyError):
        return None  # written by another version: the run still opens, without Apply


def config_text(summary: RunSummary) -> str:
    config = run_config(summary)
    return config.summary() if config is not None else "unknown"


class HistoryPanel(QWidget):
    DOCK = DockSpec("history", "History", RIGHT, hidden=True, needs=("history",))
    runAgainRequested = Signal(str, dict)   # job, params
    applyConfigRequested = Signal(object)   # DeviceConfig

    def __init__(self, history: RunHistory, parent: QWidget | None = None):
        super().__init__(parent)
        self.history = history
        self.summaries: dict[str, RunSummary] = {}  # the page listed
        self._rows: dict[str, int] = {}               # its runs' rows
        self._texts: dict[str, tuple[str, str]] = {}  # its runs' parameters and configuration in words
        self._read_peaks: dict[str, tuple[EventsKey, RunPeaks]] = {}  # runs whose run.json keeps none, read once
        self.total_runs = 0
        self.page_offset = 0
        self.loading = False
        self._generation = 0  # a newer refresh makes an older loader's results stale
        self._results: queue.SimpleQueue[object] = queue.SimpleQueue()
        self._superseded = threading.Event()
        self._listed = threading.Event()  # the page is in the table: the loader may read the peaks behind it
        self._closed = False
        self._poll = QTimer(self)
        self._poll.setInterval(POLL_MS)
        self._poll.timeout.connect(self._take_results)
        # A timer of the panel's calling a method of the panel's: a singleShot given the Event's own `set` crashed
        # the process when it fired after a refresh had dropped that Event (PySide held no reference to it).
        self._peaks_after = QTimer(self)
        self._peaks_after.setSingleShot(True)
        self._peaks_after.setInterval(PEAKS_AFTER_MS)
        self._peaks_after.timeout.connect(self._let_peaks_be_read)
        self.table = QTableWidget(0, len(COLUMNS))
        self.table.setHorizontalHeaderLabels(list(COLUMNS))
        self.table.setSelectionBehavior(QTableWidget.SelectionBehavior.SelectRows)
        # Two runs selected (Ctrl+click) compare their memory.
        self.table.setSelectionMode(QTableWidget.SelectionMode.ExtendedSelection)
        self.table.setEditTriggers(QTableWidget.EditTrigger.NoEditTriggers)
        self.table.verticalHeader().setVisible(False)
        # Short columns that fit their text; the selected run's parameters and configuration are written out
        # below, wrapped, so a dock of any width reads them whole and the table never scrolls sideways.
        # The same rule as every result table: each column its cells' width, its title wrapped (WrappingHeader);
        # the job's name takes the rest.
        header = WrappingHeader(self.table)
        self.table.setHorizontalHeader(header)
        header.setSectionResizeMode(QHeaderView.ResizeMode.Fixed)
        header.setSectionResizeMode(COLUMNS.index("Job"), QHeaderView.ResizeMode.Stretch)
        self.table.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.table.verticalHeader().setDefaultSectionSize(self.table.fontMetrics().height() + 8)
        self.table.currentCellChanged.connect(self._show_details)
        self.details = QLabel("Select a run to see its parameters and configuration.")
        self.details.setWordWrap(True)
        self.details.setTextFormat(Qt.TextFormat.RichText)
        self.details.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.details.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.table.doubleClicked.connect(lambda _: self.open_selected())
        refresh = QPushButton("Refresh")
        refresh.clicked.connect(self.refresh)
        open_button = QPushButton("Open")
        open_button.setToolTip("The run's result, log and placements")
        open_button.clicked.connect(self.open_selected)
        self.run_again_button = QPushButton("Run again")
        self.run_again_button.setToolTip("The same job with the same parameters, in the current runtime")
        # Bound methods, not lambdas: a lambda holding self ties the panel into a reference cycle, which Python's
        # garbage collector may then free on whatever thread it runs, and PySide deadlocks deleting widgets there.
        self.run_again_button.clicked.connect(self._run_again_selected)
        # Short, so the dock fits beside the job's two-column form at 1280 px (the tooltip says the rest).
        self.apply_button = QPushButton("Apply its config")
        self.apply_button.setToolTip("Load the run's device configuration and restart the runtime with it")
        self.apply_button.clicked.connect(self._apply_selected)
        self.compare_button = QPushButton("Compare")
        self.compare_button.setToolTip("Two runs' memory side by side: select two (Ctrl+click), then Compare")
        self.compare_button.setEnabled(False)
        self.compare_button.clicked.connect(self.compare_selected)
        self.table.itemSelectionChanged.connect(self._selection_changed)
        self.newer_button = QPushButton("‹ Newer")
        self.newer_button.setToolTip(f"The {PAGE_SIZE} runs before these")
        self.newer_button.clicked.connect(self.newer_page)
        self.older_button = QPushButton("Older ›")
        self.older_button.setToolTip(f"The {PAGE_SIZE} runs after these")
        self.older_button.clicked.connect(self.older_page)
        self.page_label = QLabel("")
        paging = QHBoxLayout()
        paging.addWidget(self.newer_button)
        paging.addWidget(self.page_label, 1, Qt.AlignmentFlag.AlignCenter)
        paging.addWidget(self.older_button)
        self._update_paging()
        # Two rows: five buttons in one would widen the dock past what the forms beside it can spare at 1280 px.
        buttons = QGridLayout()
        for index, button in enumerate((refresh, open_button, self.run_again_button, self.apply_button,
                                        self.compare_button)):
            buttons.addWidget(button, index // 3, index % 3)
        buttons.setColumnStretch(3, 1)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.addLayout(buttons)
        layout.addWidget(self.table, 1)
        layout.addLayout(paging)
        layout.addWidget(self.details)
        self.dialogs: list[QDialog] = []

    def dock_body(self) -> QWidget:
        return self

    def wire(self, _link: object) -> None:
        """The runs are read from the run history on disk (`refresh`), not heard from the session."""

    def shut_down(self) -> None:
        """The window is closing: the loader stops where it is and nothing more is taken from it."""
        self._superseded.set()
        self._poll.stop()
        self._peaks_after.stop()
        self._closed = True

    def refresh(self) -> None:
        """Read the page shown again, off the GUI thread (the table fills when it has been read)."""
        if self._closed:
            return  # a job that ended while the window closed: no loader may start then
        self._generation += 1
        self._superseded.set()  # the loader before stops: its page is not the one to show now
        self._superseded = threading.Event()
        self._listed = threading.Event()
        self._peaks_after.stop()  # it was the loader's before
        self.loading = True
        self._update_paging()
        thread = threading.Thread(target=load_page, name="history-loader", daemon=True,
                                  args=(self.history, self.page_offset, self._generation, dict(self._read_peaks),
                                        self._results, self._superseded, self._listed))
        thread.start()
        self._poll.start()

    def newer_page(self) -> None:
        if self.page_offset > 0:
            self.page_offset = max(self.page_offset - PAGE_SIZE, 0)
            self.refresh()

    def older_page(self) -> None:
        if self.page_offset + PAGE_SIZE < self.total_runs:
            self.page_offset += PAGE_SIZE
            self.refresh()

    def wait_until_loaded(self, timeout_s: float = 30.0) -> bool:
        """Let the GUI thread take the loader's results until the page and its peaks are in (tests, scripts)."""
        deadline = time.monotonic() + timeout_s
        while self.loading and time.monotonic() < deadline:
            QApplication.processEvents()
            self._take_results()
            time.sleep(0.005)
        return not self.loading

    def _let_peaks_be_read(self) -> None:
        self._listed.set()

    def _take_results(self) -> None:
        while True:
            try:
                result = self._results.get_nowait()
            except queue.Empty:
                return
            if getattr(result, "generation", None) != self._generation:
                if isinstance(result, LoadEnded):
                    result.taken.set()
                continue  # a refresh since: its loader's results count
            match result:
                case PageRead(total=total, offset=offset, runs=runs, texts=texts):
                    self.total_runs, self.page_offset = total, offset
                    self._texts = texts
                    self._fill(runs)
                    if any(unkept(run) for run in runs):  # the loader waits for the pause only then
                        self._peaks_after.start()
                case PeaksRead(run_id=run_id, key=key, peaks=peaks):
                    self._read_peaks[run_id] = (key, peaks)
                    self._show_peaks(run_id)
                case LoadEnded(error=error):
                    self.loading = False
                    self._poll.stop()
                    self._peaks_after.stop()
                    result.taken.set()
                    self._fit_columns()  # the peaks read since the page filled
                    if error is not None:  # the folder itself is unusable; a damaged run is a row of its own
                        self.summaries = {}
                        self.total_runs = 0
                        self.table.setRowCount(0)
                        self.details.setText(html.escape(error))
                    self._update_paging()

    def _fill(self, runs: list[RunSummary]) -> None:
        selected = self.selected_run()
        self.summaries = {run.run_id: run for run in runs}
        self._rows = {run.run_id: row for row, run in enumerate(runs)}
        self.table.setUpdatesEnabled(False)
        try:
            self.table.setRowCount(len(runs))
            for row, run in enumerate(runs):
                duration = run.duration_s
                values = [short_date_text(run), run.job or "?", run.status,
                          f"{duration:.2f} s" if duration is not None else "", ""]
                for column, value in enumerate(values):
                    item = QTableWidgetItem(str(value))
                    item.setData(Qt.ItemDataRole.UserRole, run.run_id)
                    if column in (COLUMNS.index("Duration"), COLUMNS.index("Peak (MiB)")):
                        item.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
                    self.table.setItem(row, column, item)
                self._show_peaks(run.run_id, row)
        finally:
            self.table.setUpdatesEnabled(True)
        self._fit_columns()
        rows = [row for row, run in enumerate(runs) if run.run_id == selected]
        if runs:
            self.table.setCurrentCell(rows[0] if rows else 0, 0)
        self._update_paging()
        self._show_details()

    def _show_peaks(self, run_id: str, row: int | None = None) -> None:
        """The run's Peak cell and tooltips (its peaks, or that they are being read)."""
        run = self.summaries.get(run_id)
        if run is None:
            return
        row = self._rows.get(run_id) if row is None else row
        if row is None:
            return
        peaks = self.run_peaks(run_id)
        allocator = peaks.allocator_mib if peaks is not None else {}
        peak_item = self.table.item(row, COLUMNS.index("Peak (MiB)"))
        if peak_item is not None:
            peak_item.setText(f"{max(allocator.values()):,.1f}" if allocator else "")
        memory = (f"Peak memory: {peaks_text(allocator)}\nProcess peak (RSS): {rss_text(peaks)}" if peaks is not None
                  else f"Peak memory: {NOT_READ_YET}")
        params, config = self._texts.get(run_id) or (params_text(run), config_text(run))
        tip = f"Parameters: {params}\nConfiguration: {config}\n{memory}\n(run {run_id})"
        for column in range(len(COLUMNS)):
            item = self.table.item(row, column)
            if item is not None:
                item.setToolTip(tip)
        if run_id == self.selected_run():
            self._show_details()

    def _update_paging(self) -> None:
        shown = len(self.summaries)
        if self.loading and not shown:
            text = "Reading the history…"
        elif not self.total_runs:
            text = "No runs yet"
        else:
            first, last = self.page_offset + 1, self.page_offset + shown
            text = f"Runs {first:,}–{last:,} of {self.total_runs:,}, newest first"
        self.page_label.setText(text)
        self.newer_button.setEnabled(self.page_offset > 0)
        self.older_button.setEnabled(self.page_offset + PAGE_SIZE < self.total_runs)

    def _fit_columns(self) -> None:
        self.table.ensurePolished()
        for column, width in enumerate(content_widths(self.table)):
            if column != COLUMNS.index("Job"):
                self.table.setColumnWidth(column, width)

    def changeEvent(self, event: QEvent) -> None:
        super().changeEvent(event)
        if event.type() in (QEvent.Type.FontChange, QEvent.Type.StyleChange):  # the zoom reached the table
            self._fit_columns()

    def _show_details(self) -> None:
        run_id = self.selected_run()
        summary = self.summaries.get(run_id) if run_id is not None else None
        if summary is None:
            self.details.setText("Select a run to see its parameters and configuration.")
            return
        peaks = self.run_peaks(summary.run_id)
        memory = (f"{html.escape(peaks_text(peaks.allocator_mib))}; <b>process peak (RSS):</b> "
                  f"{html.escape(rss_text(peaks))}" if peaks is not None else NOT_READ_YET)
        self.details.setText(f"<b>{html.escape(summary.job or '?')}</b> on {date_text(summary)}<br>"
                             f"<b>Parameters:</b> {html.escape(params_text(summary))}<br>"
                             f"<b>Configuration:</b> {html.escape(config_text(summary))}<br>"
                             f"<b>Peak memory:</b> {memory}")

    def run_peaks(self, run_id: str) -> RunPeaks | None:
        """The run's peaks as far as they are known on the GUI thread: kept in its run.json, or read by the loader
        from its events; None while they are being read."""
        summary = self.summaries.get(run_id)
        if summary is not None and summary.peaks is not None:
            return summary.peaks
        read = self._read_peaks.get(run_id)
        if read is not None:
            return read[1]
        return RunPeaks() if summary is not None and not summary.job else None

    def peaks(self, run_id: str) -> dict[str, float]:
        """The run's allocator peak per device (MiB); {} while unknown."""
        peaks = self.run_peaks(run_id)
        return peaks.allocator_mib if peaks is not None else {}

    def selected_runs(self) -> list[str]:
        """The selected runs, top to bottom (the newest first)."""
        rows = sorted({index.row() for index in self.table.selectionModel().selectedRows()})
        items = [self.table.item(row, 0) for row in rows]
        return [str(item.data(Qt.ItemDataRole.UserRole)) for item in items if item is not None]

    def _selection_changed(self) -> None:
        self.compare_button.setEnabled(len(self.selected_runs()) == 2)

    def compare_selected(self) -> QDialog | None:
        chosen = self.selected_runs()
        if len(chosen) != 2:
            return None
        newer, older = chosen  # the table lists the newest first: the older run is the first compared

        def named(run_id: str) -> tuple[str, dict[str, float]]:
            summary = self.summaries[run_id]  # the table lists exactly these runs
            return (f"{summary.job or '?'} on {date_text(summary)} ({summary.status}; {params_text(summary)})",
                    self.peaks(run_id))

        dialog = MemoryCompareDialog(named(older), named(newer), self)
        self.dialogs.append(dialog)
        dialog.finished.connect(lambda _: self.dialogs.remove(dialog))
        dialog.show()
        return dialog

    def selected_run(self) -> str | None:
        item = self.table.currentItem()
        return str(item.data(Qt.ItemDataRole.UserRole)) if item is not None else None

    def _run_again_selected(self) -> None:
        run_id = self.selected_run()
        if run_id is not None:
            self.run_again(run_id)

    def _apply_selected(self) -> None:
        run_id = self.selected_run()
        if run_id is not None:
            self.apply_config(run_id)

    def _dialog_of_sender(self) -> RunDialog | None:
        button = self.sender()
        dialog = button.window() if isinstance(button, QWidget) else None
        return dialog if isinstance(dialog, RunDialog) else None

    def _run_again_from_dialog(self) -> None:
        dialog = self._dialog_of_sender()
        if dialog is not None:
            self.run_again(dialog.run_id)

    def _apply_from_dialog(self) -> None:
        dialog = self._dialog_of_sender()
        if dialog is not None:
            self.apply_config(dialog.run_id)

    def run_again(self, run_id: str) -> None:
        summary = self.summaries.get(run_id) or self.history.get(run_id)
        self.runAgainRequested.emit(summary.job, dict(summary.params))

    def apply_config(self, run_id: str) -> None:
        config = run_config(self.summaries.get(run_id) or self.history.get(run_id))
        if config is not None:
            self.applyConfigRequested.emit(config)

    def open_selected(self) -> None:
        run_id = self.selected_run()
        if run_id is not None:
            self.open_run(run_id)

    def open_run(self, run_id: str) -> QDialog:
        dialog = RunDialog(self.history, run_id, self)
        dialog.run_again_button.clicked.connect(self._run_again_from_dialog)
        dialog.apply_button.clicked.connect(self._apply_from_dialog)
        self.dialogs.append(dialog)
        dialog.finished.connect(lambda _: self.dialogs.remove(dialog))
        dialog.show()
        return dialog


class RunDialog(QDialog):
    """One past run, opened the way the live window showed it: result (a cancelled fit's epochs included),
    placements, and its log from the start."""

    def __init__(self, history: RunHistory, run_id: str, parent: QWidget | None = None):
        super().__init__(parent)
        self.run_id = run_id
        self.setWindowTitle(f"Run {run_id}")
        self._fit_to_screen(parent)
        self.log = LogPanel()
        self.result_view = ResultView()
        self.details = QLabel()
        self.details.setWordWrap(True)
        self.details.setTextFormat(Qt.TextFormat.RichText)
        self.details.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.details.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.run_again_button = QPushButton("Run again")
        self.apply_button = QPushButton("Apply this configuration")
        try:
            summary = history.get(run_id)
            recorded = history.events(run_id)
        except (KeyError, OSError, ValueError) as exc:
            self.result_view.show_message(f"<b>This run cannot be read:</b> {html.escape(str(exc))}")
            summary, recorded = None, []
        self.run_again_button.setEnabled(summary is not None and bool(summary.job))
        self.apply_button.setEnabled(summary is not None and run_config(summary) is not None)
        if summary is not None:
            rows = [("Date", date_text(summary)), ("Job", summary.job or "?"),
                    ("Status", summary.status), ("Parameters", params_text(summary)),
                    ("Configuration", config_text(summary))]
            self.details.setText("<table cellspacing=2>" + "".join(
                f"<tr><td><b>{name}</b></td><td>{html.escape(value)}</td></tr>" for name, value in rows) + "</table>")
            self.log.add_events(recorded)
            config = run_config(summary) or DeviceConfig()
            replay = JobRun(summary.job or "?", summary.params, config, summary.devices)
            replay.attach(summary.job_id or next((e.job_id for e in recorded if e.job_id), ""))
            for event in recorded:
                replay.feed(event)
            if not replay.finished:  # events cut short: the summary written at the end still tells
                replay.outcome.status = summary.status
                replay.outcome.result = replay.outcome.result or summary.result
                replay.outcome.error = summary.error or (
                    None if replay.outcome.status == "ok" else RunError(type="Interrupted",
                                                                        message="this run did not finish"))
            # The loss of each epoch as the live window drew it: a cancelled fit shows its finished epochs.
            self.result_view.live_losses = [float(event.value) for event in recorded
                                            if isinstance(event, events.Metric) and event.name == "loss"
                                            and event.job_id == replay.job_id]
            self.result_view.show_outcome(replay.outcome)
            if not self.log.model.rows:
                self.log.summary.setText("No placements were logged in this run" + (
                    " (Log device placement was off)." if not config.log_placement else "."))
        # The log from its start, as it was written (a live log follows its end, scrolled to the far right).
        self.log.following = False
        self.log.view.moveCursor(QTextCursor.MoveOperation.Start)  # the view keeps its cursor in sight
        self.log.view.verticalScrollBar().setValue(0)
        self.log.view.horizontalScrollBar().setValue(0)
        splitter = QSplitter(Qt.Orientation.Vertical)
        splitter.addWidget(self.result_view)
        splitter.addWidget(self.log)
        splitter.setSizes([int(self.height() * 0.55), int(self.height() * 0.45)])
        buttons = QHBoxLayout()
        buttons.addWidget(self.run_again_button)
        buttons.addWidget(self.apply_button)
        buttons.addStretch(1)
        layout = QVBoxLayout(self)
        layout.addWidget(self.details)
        layout.addLayout(buttons)
        layout.addWidget(splitter, 1)

    def _fit_to_screen(self, parent: QWidget | None) -> None:
        """Most of the screen (the placement table's Device and Count columns were cut at 900 px)."""
        screen = (parent.screen() if parent is not None else None) or QGuiApplication.primaryScreen()
        available = screen.availableGeometry() if screen is not None else None
        if available is None:
            self.resize(DIALOG_SIZE[0], DIALOG_SIZE[1])
            return
        self.resize(min(DIALOG_SIZE[0], int(available.width() * 0.9)),
                    min(DIALOG_SIZE[1], int(available.height() * 0.9)))
