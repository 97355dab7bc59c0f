"""Issue 43 item 1 and 5, issue 40 item 4: a long history. History reads it off the GUI thread a page at a time and
reaches every run (not only the newest 500); a run keeps its memory peaks in run.json (the allocator's per device
and its process's RSS peak), and a run recorded before that has them read from its events.jsonl, never on the GUI
thread; `runs --json` streams, holding one run at a time. (How fast the window opens with 500 hour-long runs is a
benchmark: benchmarks/history_open.py.)"""

from __future__ import annotations

import contextlib
import json
import threading
import tracemalloc
from pathlib import Path
from typing import Any

import pytest
from tf_device_panel.core.cli import main as cli_main
from tf_device_panel.core.client import run_memory
from tf_device_panel.core.client.history import RunHistory
from tf_device_panel.core.client.records import RunPeaks, RunSummary
from tf_device_panel.core.config import DeviceConfig
from tf_device_panel.core.protocol import events


def write_runs(history: RunHistory, count: int, *, placements: int = 0, peaks: bool = True) -> list[str]:
    """`count` finished runs written as run.json alone (fast), oldest first; `placements` bulk each summary up
    (a run's placement counts are most of a real summary's size)."""
    history.root.mkdir(parents=True, exist_ok=True)
    ids = []
    counts: list[list[object]] = [[f"Op{i}", "/job:localhost/replica:0/task:0/device:CPU:0", i]
                                  for i in range(placements)]
    for index in range(count):
        run_id = f"20260101-{index // 3600:02d}{index // 60 % 60:02d}{index % 60:02d}-fit-{index:06x}"
        summary = RunSummary(run_id=run_id, job="fit", status="ok", started=1_767_225_600.0 + index,
                             params={"epochs": 1}, config=DeviceConfig().to_json(), duration_s=1.0, client_pid=1,
                             placement_counts=counts,
                             peaks=RunPeaks({"/CPU:0": float(index)}, 100.0 + index) if peaks else None)
        folder = history.root / run_id
        folder.mkdir()
        (folder / "run.json").write_text(json.dumps(summary.to_json()))
        (folder / "events.jsonl").write_text("")
        ids.append(run_id)
    return ids


def old_record(history: RunHistory, figures: list[tuple[str, float]], rss_peak: float | None) -> str:
    """A run as a version before run.json kept peaks recorded it: its peaks only in events.jsonl."""
    recorder = history.new_run("fit", {}, DeviceConfig().to_json(), None)
    for device, peak in figures:
        recorder.append(events.TfMemory(device=device, current_mib=1.0, peak_mib=peak))
    recorder.append(events.JobFinished(job="fit", status="ok", rss_mib=1.0, rss_peak_mib=rss_peak))
    recorder.finish(status="ok", duration_s=1.0)
    path = history.root / recorder.run_id / "run.json"
    summary = json.loads(path.read_text())
    assert summary.pop("peaks") == {"allocator_mib": dict(sorted(dict(figures).items())), "rss_mib": rss_peak}
    path.write_text(json.dumps(summary))
    return recorder.run_id


def test_a_run_keeps_its_peaks_in_its_summary_and_an_older_record_has_them_read_from_its_events() -> None:
    history = RunHistory()
    old = old_record(history, [("/GPU:0", 10.0), ("/GPU:0", 40.25), ("/GPU:1", 3.0)], rss_peak=812.5)
    (summary,) = history.summaries()
    assert summary.peaks is None
    peaks = run_memory.summary_peaks(history, summary)
    assert peaks == RunPeaks({"/GPU:0": 40.25, "/GPU:1": 3.0}, 812.5)
    assert run_memory.events_peaks(history, old).allocator_mib == {"/GPU:0": 40.25, "/GPU:1": 3.0}

    recorder = history.new_run("fit", {}, DeviceConfig().to_json(), None)
    recorder.append(events.TfMemory(device="/CPU:0", current_mib=1.0, peak_mib=7.5))
    recorder.append(events.JobFinished(job="fit", status="ok", rss_peak_mib=300.0))
    recorder.finish(status="ok", duration_s=1.0)
    (history.root / recorder.run_id / "events.jsonl").write_text("")  # the summary alone tells them now
    assert history.get(recorder.run_id).peaks == RunPeaks({"/CPU:0": 7.5}, 300.0)
    assert json.loads((history.root / recorder.run_id / "run.json").read_text())["peaks"] == {
        "allocator_mib": {"/CPU:0": 7.5}, "rss_mib": 300.0}


def test_runs_json_carries_each_runs_peaks_old_records_included(capsys: pytest.CaptureFixture[str]) -> None:
    history = RunHistory()
    old_record(history, [("/CPU:0", 12.0)], rss_peak=None)
    write_runs(history, 2)
    assert cli_main(["runs", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [run["peaks"] for run in listed] == [
        {"allocator_mib": {"/CPU:0": 12.0}, "rss_mib": None},  # the newest: the old record, read from its events
        {"allocator_mib": {"/CPU:0": 1.0}, "rss_mib": 101.0},
        {"allocator_mib": {"/CPU:0": 0.0}, "rss_mib": 100.0}]
    assert cli_main(["runs", "--json", "--limit", "0"]) == 0
    assert json.loads(capsys.readouterr().out) == []


def _runs_peak_memory(args: list[str], out: Path) -> tuple[int, str]:
    """Python's peak allocation while `runs ARGS` runs in this process (printing to a file), and what it printed."""
    with out.open("w", encoding="utf-8") as sink:
        tracemalloc.start()
        try:
            with contextlib.redirect_stdout(sink):
                assert cli_main(["runs", *args]) == 0
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    return peak, out.read_text(encoding="utf-8")


def test_runs_streams_its_memory_flat_in_the_number_of_runs(tmp_path: Path) -> None:
    """Each summary here is ~60 KB in memory (its placement counts); 600 of them listed at once took ~36 MB, 300
    took ~18 MB."""
    history = RunHistory()
    write_runs(history, 300, placements=400)
    out = tmp_path / "out.txt"
    few, few_text = _runs_peak_memory(["--json", "--limit", "20"], out)
    many, many_text = _runs_peak_memory(["--json", "--limit", "300"], out)
    listed = json.loads(many_text)
    assert len(listed) == 300 and len(json.loads(few_text)) == 20
    assert listed[0] == history.get(listed[0]["run_id"]).to_json()  # as `runs --json` always printed a summary
    assert many_text == json.dumps(listed, indent=2) + "\n"  # the same text json.dumps of the whole list gives
    assert many - few < 4 * 1024 * 1024, f"{many - few:,} bytes more for 280 more runs"
    text_peak, text = _runs_peak_memory(["--limit", "300"], out)
    assert len(text.splitlines()) == 300
    assert text_peak - few < 4 * 1024 * 1024


@pytest.fixture
def events_reads(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, bool]]:
    """Every events.jsonl opened for reading: (its run, whether on the main (GUI) thread)."""
    seen: list[tuple[str, bool]] = []
    from tf_device_panel.core.client import history as history_module

    def watching(original: Any) -> Any:
        def open_regular(path: Path) -> Any:
            if Path(path).name == "events.jsonl":
                seen.append((Path(path).parent.name, threading.current_thread() is threading.main_thread()))
            return original(path)
        return open_regular

    monkeypatch.setattr(run_memory, "open_regular", watching(run_memory.open_regular))
    monkeypatch.setattr(history_module, "open_regular", watching(history_module.open_regular))
    return seen


def test_history_reads_no_events_file_on_the_gui_thread(qtbot: Any, events_reads: list[tuple[str, bool]]) -> None:
    pytest.importorskip("PySide6")
    from tf_device_panel.gui.docks.history_panel import COLUMNS, HistoryPanel

    history = RunHistory()
    old = old_record(history, [("/CPU:0", 64.0)], rss_peak=900.0)
    write_runs(history, 3)
    panel = HistoryPanel(history)
    qtbot.addWidget(panel)
    panel.refresh()
    assert panel.wait_until_loaded()
    assert panel.table.rowCount() == 4
    assert not [run for run, on_gui in events_reads if on_gui], "events.jsonl was read on the GUI thread"
    assert events_reads == [(old, False)], "only the record without peaks in its summary is read, and only once"
    rows = {panel.table.item(r, 0).data(0x0100): r for r in range(panel.table.rowCount())}  # UserRole
    assert panel.table.item(rows[old], COLUMNS.index("Peak (MiB)")).text() == "64.0"
    assert "Process peak (RSS): 900.0 MiB" in panel.table.item(rows[old], 0).toolTip()
    panel.refresh()  # the same records again: nothing read twice
    assert panel.wait_until_loaded()
    assert len(events_reads) == 1


def test_the_loader_reads_no_events_before_the_page_is_listed() -> None:
    """An older record's events are read only once the GUI thread has listed the page (and after a pause): read
    while the window was still being built, 500 hour-long runs made it open in 1.5 s instead of 0.5 s."""
    import queue

    pytest.importorskip("PySide6")
    from tf_device_panel.gui.docks.history_panel import LoadEnded, PageRead, PeaksRead, load_page

    history = RunHistory()
    old = old_record(history, [("/CPU:0", 64.0)], rss_peak=900.0)
    results: queue.SimpleQueue[object] = queue.SimpleQueue()
    superseded, listed = threading.Event(), threading.Event()
    loader = threading.Thread(target=load_page, args=(history, 0, 1, {}, results, superseded, listed))
    loader.start()
    assert isinstance(results.get(timeout=30), PageRead)
    loader.join(0.3)
    assert loader.is_alive() and results.empty(), "the peaks were read before the page was listed"
    listed.set()
    peaks = results.get(timeout=30)
    assert isinstance(peaks, PeaksRead) and peaks.run_id == old and peaks.peaks.allocator_mib == {"/CPU:0": 64.0}
    ended = results.get(timeout=30)
    assert isinstance(ended, LoadEnded)
    ended.taken.set()
    loader.join(30)
    # A page refreshed meanwhile (superseded) ends a loader that waits, with nothing read.
    results, superseded, listed = queue.SimpleQueue(), threading.Event(), threading.Event()
    loader = threading.Thread(target=load_page, args=(history, 0, 2, {}, results, superseded, listed))
    loader.start()
    assert isinstance(results.get(timeout=30), PageRead)
    superseded.set()
    loader.join(30)
    assert not loader.is_alive() and results.empty()


def test_refreshing_while_the_peaks_wait_for_their_pause_is_safe(qtbot: Any) -> None:
    """The pause before the peaks are read was a singleShot given the loader's Event's `set`: PySide keeps no
    reference to a bound method's object, and a refresh that dropped that Event crashed the process when the
    timer fired (a stress run lost 5 workers). Refreshes in a row, collected, then waited out."""
    import gc

    pytest.importorskip("PySide6")
    from tf_device_panel.gui.docks.history_panel import HistoryPanel

    history = RunHistory()
    old_record(history, [("/CPU:0", 64.0)], rss_peak=900.0)
    panel = HistoryPanel(history)
    qtbot.addWidget(panel)
    for _ in range(5):
        panel.refresh()
        qtbot.waitUntil(lambda: panel.table.rowCount() == 1, timeout=10_000)  # the page listed: the pause begins
        gc.collect()
    assert panel.wait_until_loaded()
    assert panel.peaks(panel.selected_run() or next(iter(panel.summaries))) == {"/CPU:0": 64.0}


def test_history_reaches_every_run_past_the_first_page(qtbot: Any) -> None:
    pytest.importorskip("PySide6")
    from tf_device_panel.gui.docks.history_panel import PAGE_SIZE, HistoryPanel

    history = RunHistory()
    ids = write_runs(history, PAGE_SIZE + 7)
    panel = HistoryPanel(history)
    qtbot.addWidget(panel)
    panel.refresh()
    assert panel.wait_until_loaded()

    def listed() -> list[str]:
        return [panel.table.item(r, 0).data(0x0100) for r in range(panel.table.rowCount())]

    assert listed() == ids[::-1][:PAGE_SIZE]
    assert panel.page_label.text() == f"Runs 1–{PAGE_SIZE} of {PAGE_SIZE + 7:,}, newest first"
    assert not panel.newer_button.isEnabled() and panel.older_button.isEnabled()
    panel.older_button.click()
    assert panel.wait_until_loaded()
    assert listed() == ids[::-1][PAGE_SIZE:]  # the oldest runs, the very first one included
    assert panel.page_label.text() == f"Runs {PAGE_SIZE + 1}–{PAGE_SIZE + 7} of {PAGE_SIZE + 7:,}, newest first"
    assert panel.newer_button.isEnabled() and not panel.older_button.isEnabled()
    panel.table.selectRow(listed().index(ids[0]))
    assert "fit" in panel.details.text() and "/CPU:0 0.0 MiB" in panel.details.text()
    panel.newer_button.click()
    assert panel.wait_until_loaded()
    assert listed()[0] == ids[-1]
