"""Run records decoded once (core.client.records): run.json files as earlier versions wrote them load into the same
rows, are written back as they were read, and a damaged or unfamiliar field is named or kept, never a KeyError."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from tf_device_panel.core.cli.output import run_line
from tf_device_panel.core.client.history import RunHistory
from tf_device_panel.core.client.records import Cancel, OutputRecord, RunError, RunSummary, SummaryError, TailSegment
from tf_device_panel.core.client.run_record import JobRun
from tf_device_panel.core.config import DeviceConfig
from tf_device_panel.core.protocol import events

# Written by the recorder before records were typed (the code at af47707), for a cancelled run whose output
# passed the record's cap; `finished` set to a fixed time.
CANCELLED = {
    "run_id": "20260101-120000-matmul-abc123", "job": "matmul", "params": {"size": 256, "dtype": "float32"},
    "config": {"cpu_devices": 2}, "devices": None, "status": "cancelled", "started": 1767268800.0, "client_pid": 4242,
    "job_id": "1-1-1",
    "output": {"bytes": 5890, "lines": 200, "dropped_lines": 72, "cap_bytes": 4096, "tail": [
        {"file": "output.tail.5", "start": 4150, "lines": 18, "bytes": 540},
        {"file": "output.tail.6", "start": 4690, "lines": 18, "bytes": 540},
        {"file": "output.tail.7", "start": 5230, "lines": 18, "bytes": 540},
        {"file": "output.tail.8", "start": 5770, "lines": 4, "bytes": 120}]},
    "result": {"seconds": 0.5}, "error": {"type": "Cancelled", "message": "cancelled by the user"},
    "duration_s": 2.25, "returncode": 0, "oom": None,
    "fallbacks": [{"op": "MatMul", "requested": "/GPU:0", "device": "/CPU:0"}],
    "placement_counts": [["MatMul", "/CPU:0", 3]],
    "cancel": {"by": "Ctrl+C in the terminal", "how": "cancelled", "signal": 2}, "finished": 1767268802.5}
# The first recorder's fields (2fabc8b): no returncode, oom, cancel, output, job_id.
OLDEST = {
    "run_id": "20251121-144646-fit-0a1b2c", "job": "fit", "params": {"epochs": 3}, "config": {"cpu_devices": 1},
    "devices": None, "status": "error", "started": 1763736406.0, "client_pid": 1, "result": None,
    "error": {"type": "ValueError", "message": "bad shape\nsecond line"}, "duration_s": 1.5, "fallbacks": [],
    "placement_counts": [["MatMul", "/CPU:0", 1]], "finished": 1763736407.5}
# A run whose client died mid-run, with a field this version does not know.
RUNNING = {
    "run_id": "20251122-000000-script-ffffff", "job": "script", "params": {}, "config": None, "devices": None,
    "status": "running", "started": 1763769600.0, "client_pid": 2**22 + 12345, "gpu_notes": "kept"}
# `tf-device-panel runs` over these three, as the code before typed records printed it (TZ=UTC).
RUNS_TEXT = [
    "20260101-120000-matmul-abc123            2026-01-01 12:00:00  cancelled      2.25 s  stopped by Ctrl+C in the "
    "terminal; cancelled",
    "20251122-000000-script-ffffff            2025-11-22 00:00:00  interrupted",
    "20251121-144646-fit-0a1b2c               2025-11-21 14:46:46  error          1.50 s  bad shape …"]


@pytest.fixture
def utc(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def write_runs(panel_home: Path, *records: dict[str, object]) -> RunHistory:
    for record in records:
        folder = panel_home / "runs" / str(record["run_id"])
        folder.mkdir(parents=True)
        (folder / "run.json").write_text(json.dumps(record))
    return RunHistory()


def test_records_of_earlier_versions_load_into_the_same_rows(panel_home: Path, utc: None) -> None:
    history = write_runs(panel_home, CANCELLED, OLDEST, RUNNING)
    rows = history.summaries()
    assert [run_line(row) for row in rows] == RUNS_TEXT
    cancelled, running, oldest = rows
    assert cancelled.cancel == Cancel(by="Ctrl+C in the terminal", how="cancelled", signal=2)
    assert cancelled.error == RunError(type="Cancelled", message="cancelled by the user")
    assert cancelled.output is not None and cancelled.output.dropped_lines == 72
    assert cancelled.output.tail[-1] == TailSegment(file="output.tail.8", start=5770, lines=4, bytes=120)
    assert oldest.returncode is None and oldest.oom is None and oldest.cancel is None and oldest.output is None
    assert oldest.placement_counts == [["MatMul", "/CPU:0", 1]] and oldest.error is not None
    assert oldest.error.message == "bad shape\nsecond line"
    assert running.status == "interrupted" and running.unknown == {"gpu_notes": "kept"}


def test_a_record_is_written_back_as_it_was_read(panel_home: Path) -> None:
    """`runs --json` prints each row's to_json: the record as it was written, its fields and nulls alike."""
    history = write_runs(panel_home, CANCELLED, OLDEST, RUNNING)
    cancelled, running, oldest = (row.to_json() for row in history.summaries())
    assert cancelled == CANCELLED and list(cancelled) == list(CANCELLED)
    assert oldest == OLDEST and list(oldest) == list(OLDEST)
    assert running == {**RUNNING, "status": "interrupted"}


def test_what_the_recorder_writes_reads_back_field_for_field(panel_home: Path) -> None:
    history = RunHistory()
    run = JobRun("matmul", {"size": 8}, DeviceConfig(cpu_devices=2), None, history)
    run.attach("1-1-1")
    run.note_cancel("Ctrl+C in the terminal", "cancelled", 2)
    for event in (events.JobStarted(job="matmul", job_id="1-1-1"),
                  events.Error(error_type="Cancelled", message="cancelled by the user", job_id="1-1-1"),
                  events.JobFinished(job="matmul", status="cancelled", duration_s=0.5, returncode=0, job_id="1-1-1")):
        run.feed(event)
    assert run.recorder is not None
    written = json.loads((run.recorder.folder / "run.json").read_text())
    (row,) = history.summaries()
    assert row.to_json() == written
    assert (row.status, row.job_id, row.duration_s, row.returncode) == ("cancelled", "1-1-1", 0.5, 0)
    assert row.error == RunError(type="Cancelled", message="cancelled by the user")
    assert row.cancel == Cancel(by="Ctrl+C in the terminal", how="cancelled", signal=2)
    assert row.client_pid == os.getpid() and row.config == DeviceConfig(cpu_devices=2).to_json()
    assert row.output == OutputRecord(bytes=0, lines=0, dropped_lines=0, cap_bytes=run.recorder.cap_bytes)


@pytest.mark.parametrize(("record", "reason"), [
    ({"job": "fit", "started": 1.0}, "run.json has no 'status'"),
    ({"job": "fit", "status": "ok"}, "run.json has no 'started'"),
    ({"job": "fit", "status": "ok", "started": 1.0, "cancel": {"by": 3}}, "'cancel' must be an object with strings"),
    ({"job": "fit", "status": "ok", "started": 1.0, "output": {"tail": [{"file": "x"}]}}, "'output' must be null"),
])
def test_a_missing_or_wrong_field_is_named(record: dict[str, object], reason: str) -> None:
    with pytest.raises(SummaryError, match=reason):
        RunSummary.from_json(record)


def test_missing_optional_fields_take_their_defaults() -> None:
    row = RunSummary.from_json({"job": "fit", "status": "ok", "started": 1.0}, run_id="r")
    assert (row.run_id, row.params, row.config, row.error, row.cancel, row.output) == ("r", {}, None, None, None, None)
    assert row.to_json() == {"job": "fit", "status": "ok", "started": 1.0, "run_id": "r"}


def test_an_error_without_a_type_reads_as_error() -> None:
    row = RunSummary.from_json({"job": "fit", "status": "error", "started": 1.0, "error": {"message": "boom"}})
    assert row.error == RunError(type="Error", message="boom")


def test_a_tail_segments_odd_counts_do_not_stop_the_record_loading() -> None:
    """Only a segment's file and start are read back; its counts were never checked, so odd ones still load."""
    output = {"tail": [{"file": "output.tail.1", "start": 0, "lines": float("inf"), "bytes": "many"}]}
    row = RunSummary.from_json({"job": "fit", "status": "ok", "started": 1.0, "output": output})
    assert row.output is not None and row.output.tail == (TailSegment(file="output.tail.1", start=0),)


def test_damaged_and_never_written_rows_print_as_before(panel_home: Path) -> None:
    """`runs --json`'s rows for a damaged run.json and for one never written: the fields the code before typed
    records printed, no more (no empty job, configuration or devices)."""
    damaged = panel_home / "runs" / "20260101-000000-fit-aaaaaa"
    damaged.mkdir(parents=True)
    (damaged / "run.json").write_text("[]")
    never = panel_home / "runs" / "20260101-000001-memory-bbbbbb"
    never.mkdir()
    never_row, damaged_row = (row.to_json() for row in RunHistory().summaries())
    assert damaged_row == {"run_id": damaged.name, "status": "unreadable", "started": damaged.stat().st_mtime,
                           "params": {}, "error": {"type": "Unreadable", "message": "run.json holds a list, not an "
                                                                                     "object"}}
    assert never_row == {"run_id": never.name, "status": "incomplete", "started": never.stat().st_mtime, "params": {},
                         "error": None, "incomplete": "run.json was never written (was the disk full when the run "
                                                      "started?)", "job": "memory"}
