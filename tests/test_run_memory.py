"""Issue 35 item 5: each past run's allocator peak per device, from its record's tf_memory events, and two runs
compared — in the core (real runs of the panel's command line, real records) and in the History dock."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from tf_device_panel.core.client.history import RunHistory
from tf_device_panel.core.client.run_memory import PeakChange, compare_peaks, events_peaks, peaks_text
from tf_device_panel.core.config import DeviceConfig
from tf_device_panel.core.protocol import events

ROOT = Path(__file__).resolve().parent.parent


def _record(history: RunHistory, figures: list[tuple[str, float, float]], job: str = "fit") -> str:
    recorder = history.new_run(job, {"batch_per_replica": 8}, DeviceConfig().to_json(), None)
    for device, current, peak in figures:
        recorder.append(events.TfMemory(device=device, current_mib=current, peak_mib=peak))
        recorder.append(events.Log(stream="stderr", kind="placement", text="x" * 100))
    recorder.finish(status="ok", result=None, error=None, duration_s=1.0)
    return recorder.run_id


def test_a_records_peak_per_device_is_the_largest_its_tf_memory_events_give() -> None:
    history = RunHistory()
    run_id = _record(history, [("/GPU:0", 10.0, 12.5), ("/GPU:1", 3.0, 3.0), ("/GPU:0", 4.0, 40.25),
                               ("/GPU:0", 2.0, 40.25)])
    assert events_peaks(history, run_id).allocator_mib == {"/GPU:0": 40.25, "/GPU:1": 3.0}
    assert peaks_text(events_peaks(history, run_id).allocator_mib) == "/GPU:0 40.2 MiB, /GPU:1 3.0 MiB"
    assert events_peaks(history, _record(history, [])).allocator_mib == {} and peaks_text({}) == "not recorded"
    assert events_peaks(history, "../elsewhere").empty and events_peaks(history, "no-such-run").empty


def test_damaged_and_overlong_lines_are_skipped_not_fatal() -> None:
    history = RunHistory()
    run_id = _record(history, [("/CPU:0", 1.0, 5.0)])
    with open(history.root / run_id / "events.jsonl", "ab") as handle:
        handle.write(b'{"type": "tf_memory", "data": {"device": "/CPU:0", "peak_mib": "lots"}}\n')
        handle.write(b'{"type": "tf_memory", "data": ' + b"[" * 100_000 + b"\n")
        handle.write(b'{"type": "tf_memory", "time": 1, "data": {"device": "/CPU:0", "current_mib": 1, '
                     b'"peak_mib": 7.5}}\n')
    assert events_peaks(history, run_id).allocator_mib == {"/CPU:0": 7.5}


def test_two_runs_compared_device_by_device() -> None:
    rows = compare_peaks({"/GPU:0": 100.0, "/GPU:1": 8.0}, {"/GPU:0": 150.0, "/CPU:0": 2.0})
    assert rows == [
        PeakChange("/CPU:0", first_mib=None, second_mib=2.0, change_mib=None),
        PeakChange("/GPU:0", first_mib=100.0, second_mib=150.0, change_mib=50.0),
        PeakChange("/GPU:1", first_mib=8.0, second_mib=None, change_mib=None),
    ]


def test_real_runs_under_a_cpu_cap_record_peaks_that_grow_with_the_batch(tmp_path: Path, panel_home: Path) -> None:
    profile = tmp_path / "cap.json"
    profile.write_text(json.dumps({"version": 1, "cpu_memory_limit_mib": 256, "log_placement": False}))
    told = []
    for batch in (8, 128):
        done = subprocess.run([sys.executable, "-m", "tf_device_panel", "run", "fit", "--config", str(profile),
                               "-p", "model=cnn", "-p", f"batch_per_replica={batch}", "-p", f"samples={batch}",
                               "-p", "epochs=1", "--json"], cwd=ROOT, capture_output=True, text=True,
                              timeout=600, env=os.environ.copy())
        assert done.returncode == 0, done.stderr
        told.append(json.loads(done.stdout)["peaks"])
    history = RunHistory()
    newer, older = (run.run_id for run in history.summaries())
    small, large = events_peaks(history, older).allocator_mib, events_peaks(history, newer).allocator_mib
    # Issue 40 item 4: `run --json` and `runs --json` carry the allocator's peak per device and the process's RSS
    # peak (a process that imported TensorFlow holds hundreds of MiB).
    assert [peaks["allocator_mib"] for peaks in told] == [small, large]
    assert all(peaks["rss_mib"] > 100 for peaks in told), told
    listed = subprocess.run([sys.executable, "-m", "tf_device_panel", "runs", "--json"], cwd=ROOT, capture_output=True,
                            text=True, timeout=120, env=os.environ.copy())
    assert [run["peaks"] for run in json.loads(listed.stdout)] == told[::-1]
    assert set(small) == set(large) == {"/CPU:0"}
    assert 0 < small["/CPU:0"] < large["/CPU:0"] <= 256
    (row,) = compare_peaks(small, large)
    assert row.change_mib == pytest.approx(large["/CPU:0"] - small["/CPU:0"])


def test_the_history_dock_shows_each_runs_peak_and_compares_two(qtbot) -> None:
    pytest.importorskip("PySide6")
    from tf_device_panel.gui.docks.history_panel import COLUMNS, HistoryPanel
    from tf_device_panel.gui.views.memory_compare import COMPARE_COLUMNS, MemoryCompareDialog

    history = RunHistory()
    older = _record(history, [("/GPU:0", 50.0, 100.0)])
    newer = _record(history, [("/GPU:0", 60.0, 150.0), ("/CPU:0", 1.0, 2.0)], job="memory")
    panel = HistoryPanel(history)
    qtbot.addWidget(panel)
    panel.refresh()
    assert panel.wait_until_loaded()
    peak = COLUMNS.index("Peak (MiB)")
    rows = {panel.table.item(r, 0).data(0x0100): r for r in range(panel.table.rowCount())}  # UserRole
    assert panel.table.item(rows[older], peak).text() == "100.0"
    assert panel.table.item(rows[newer], peak).text() == "150.0"
    assert "Peak memory: /CPU:0 2.0 MiB, /GPU:0 150.0 MiB" in panel.table.item(rows[newer], 0).toolTip()
    panel.table.selectRow(rows[newer])
    assert "/GPU:0 150.0 MiB" in panel.details.text()
    assert not panel.compare_button.isEnabled()
    panel.table.selectAll()
    assert panel.compare_button.isEnabled()
    dialog = panel.compare_selected()
    assert isinstance(dialog, MemoryCompareDialog)
    qtbot.addWidget(dialog)
    cells = [[dialog.table.item(r, c).text() for c in range(len(COMPARE_COLUMNS))]
             for r in range(dialog.table.rowCount())]
    assert cells == [["/CPU:0", "—", "2.0 MiB", "only in one run"],
                     ["/GPU:0", "100.0 MiB", "150.0 MiB", "+50.0 MiB (+50%)"]]
    dialog.close()
