"""The history's files on disk (issue 32, items 3, 9 and 10): special files where records should be never
block a reader, a run whose summary could not even be written is `incomplete`, and the history is private.

Every reader of the history goes through RunHistory (`runs`, the window's History, the exporter's panel state);
these tests drive each of them against real FIFOs (os.mkfifo) and real permission bits. The full disk is a real
1 MB tmpfs filled before the run (in a private mount namespace, where `unshare` allows it), and an injected
OSError(ENOSPC) at the recorder's write of its first summary (`history._write_json_atomic`)."""

from __future__ import annotations

import errno
import json
import logging
import os
import shutil
import stat
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
from helpers import ROOT
from tf_device_panel.core.cli.output import run_line
from tf_device_panel.core.client import history
from tf_device_panel.core.client.history import RunHistory
from tf_device_panel.core.client.records import RunSummary
from tf_device_panel.core.lab.exporter import PanelStateReader
from tf_device_panel.core.protocol import events

GOOD_ID = "20260101-000001-matmul-good00"
SPECIAL_ID = "20260101-000002-fit-abc123"


def cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([sys.executable, "-m", "tf_device_panel", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout, env=os.environ.copy())
    assert "Traceback" not in done.stderr, done.stderr
    return done


def good_run(root: Path) -> Path:
    recorder = history.RunRecorder(root / "runs" / GOOD_ID, RunSummary(
        run_id=GOOD_ID, job="matmul", config={}, status="running", started=1767225601.0, client_pid=os.getpid()))
    recorder.append(events.Log(stream="stdout", kind="output", text="hello", job_id="j"))
    recorder.finish(status="ok", duration_s=1.5, returncode=0)
    return recorder.folder


def running_run(root: Path) -> Path:
    """A run in progress (this process is its client) whose files the test replaces."""
    folder = root / "runs" / SPECIAL_ID
    folder.mkdir(parents=True)
    (folder / "run.json").write_text(json.dumps({"run_id": SPECIAL_ID, "job": "fit", "status": "running",
                                                 "started": time.time(), "client_pid": os.getpid(), "params": {}}))
    return folder


# -- item 3: a FIFO (or any special file) where a record should be -------------------------------------------
def test_runs_lists_a_fifo_summary_as_unreadable_beside_the_good_run(panel_home: Path) -> None:
    good_run(panel_home)
    folder = panel_home / "runs" / SPECIAL_ID
    folder.mkdir()
    os.mkfifo(folder / "run.json")  # its open used to wait forever for a writer
    done = cli("runs", "--json", timeout=30)
    assert done.returncode == 0, done.stderr
    runs = {run["run_id"]: run for run in json.loads(done.stdout)}
    assert runs[GOOD_ID]["status"] == "ok"
    assert runs[SPECIAL_ID]["status"] == "unreadable"
    assert runs[SPECIAL_ID]["error"]["message"] == "run.json: run.json is a FIFO (named pipe), not a regular file"
    text = cli("runs", timeout=30)
    assert text.returncode == 0 and "FIFO (named pipe)" in text.stdout and GOOD_ID in text.stdout


@pytest.mark.parametrize("name", ["events.jsonl", "output.txt"])
def test_a_fifo_for_a_runs_events_or_output_is_a_warning_not_a_hang(panel_home: Path, name: str) -> None:
    folder = running_run(panel_home)
    (folder / "events.jsonl").write_text('{"type": "job_started", "data": {"job": "fit"}, "at": 0}\n')
    (folder / "output.txt").write_bytes(b"line\n")
    (folder / name).unlink()
    os.mkfifo(folder / name)
    store = RunHistory()
    recorded = store.events(SPECIAL_ID)  # used to block in open()
    warning = recorded[0]
    assert isinstance(warning, events.Log) and warning.kind == "warning", recorded
    assert f"{name} is a FIFO (named pipe), not a regular file" in warning.text
    # The exporter reads the run in progress the same way, so its sampler no longer stalls on it.
    assert PanelStateReader(store).read().run.run_id == SPECIAL_ID


def test_a_folder_or_a_device_where_run_json_should_be_is_named(panel_home: Path) -> None:
    (panel_home / "runs" / "20260101-000003-fit-aaaaaa" / "run.json").mkdir(parents=True)
    (panel_home / "runs" / "20260101-000004-fit-bbbbbb").mkdir()
    (panel_home / "runs" / "20260101-000004-fit-bbbbbb" / "run.json").symlink_to("/dev/zero")
    reasons = {run.run_id: run.error.message for run in RunHistory().summaries()}
    assert reasons == {"20260101-000004-fit-bbbbbb": "run.json: run.json is a character device, not a regular file",
                       "20260101-000003-fit-aaaaaa": "run.json: run.json is a folder, not a regular file"}


def test_an_endless_line_in_the_event_log_is_skipped_within_the_cap(panel_home: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(history, "MAX_EVENT_LINE_BYTES", 1000)
    folder = good_run(panel_home)
    with (folder / "events.jsonl").open("ab") as handle:
        handle.write(b"x" * 5000 + b"\n" + b'{"type": "log", "data": {"stream": "panel", "text": "after"}}\n')
    recorded = RunHistory().events(GOOD_ID)
    assert recorded[0].text.startswith("1 damaged part(s)") and "longer than" in recorded[0].text
    assert "after" in [e.text for e in recorded if isinstance(e, events.Log)]


def test_an_event_log_past_its_cap_is_read_up_to_it(panel_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(history, "MAX_EVENTS_FILE_BYTES", 5000)
    folder = good_run(panel_home)
    line = b'{"type": "log", "data": {"stream": "panel", "text": "more"}}\n'
    (folder / "events.jsonl").write_bytes(line * 1000)
    recorded = RunHistory().events(GOOD_ID)
    assert "larger than 0 MB: the rest was not read" in recorded[0].text
    assert 0 < len([e for e in recorded if isinstance(e, events.Log) and e.text == "more"]) < 200


# -- item 9: a full disk before the run starts ----------------------------------------------------------------
def test_a_run_whose_first_summary_hit_a_full_disk_is_incomplete(panel_home: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    def full(*args: Any, **kwargs: Any) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(history, "_write_json_atomic", full)  # run.json, first and last
    recorder = RunHistory().new_run("fit", {}, {}, None)
    recorder.append(events.Log(stream="stdout", kind="output", text="x"))
    recorder.finish(status="ok", returncode=0)
    assert recorder.problem is not None and "No space left on device" in recorder.problem
    (summary,) = RunHistory().summaries()
    assert summary.status == "incomplete" and summary.job == "fit" and summary.error is None
    assert summary.incomplete == "run.json was never written (was the disk full when the run started?)"
    line = run_line(summary)
    assert "incomplete" in line and "unreadable" not in line
    assert RunHistory().get(recorder.run_id).status == "incomplete"


def test_a_first_summary_that_failed_is_written_at_the_end_when_it_can_be(panel_home: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    real = history._write_json_atomic
    calls = [0]

    def full_once(*args: Any, **kwargs: Any) -> None:
        calls[0] += 1
        if calls[0] == 1:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real(*args, **kwargs)

    monkeypatch.setattr(history, "_write_json_atomic", full_once)
    recorder = RunHistory().new_run("fit", {}, {}, None)
    recorder.finish(status="ok", returncode=0)
    (summary,) = RunHistory().summaries()
    assert summary.status == "ok" and "No space left on device" in summary.incomplete


# -- item 10: a private history -------------------------------------------------------------------------------
def modes(path: Path) -> set[int]:
    return {stat.S_IMODE(p.stat().st_mode) for p in path.rglob("*")} | {stat.S_IMODE(path.stat().st_mode)}


def test_the_history_is_created_private(panel_home: Path) -> None:
    old = os.umask(0o022)
    try:
        recorder = RunHistory().new_run("fit", {}, {}, None)
        for number in range(3):
            recorder.append(events.Log(stream="stdout", kind="output", text=f"line {number}"))
        recorder.append(events.JobStarted(job="fit", job_id="j"))
        recorder.finish(status="ok", returncode=0)
    finally:
        os.umask(old)
    folders = [panel_home, panel_home / "runs", recorder.folder]
    assert {stat.S_IMODE(p.stat().st_mode) for p in folders} == {0o700}
    files = [p for p in recorder.folder.iterdir()]
    assert {p.name for p in files} >= {"run.json", "events.jsonl", "output.txt"}
    assert {stat.S_IMODE(p.stat().st_mode) for p in files} == {0o600}


def test_a_tail_segment_is_private_too(panel_home: Path) -> None:
    recorder = RunHistory(cap_bytes=4000).new_run("fit", {}, {}, None)
    for number in range(1000):
        recorder.append(events.Log(stream="stdout", kind="output", text=f"line {number:04d}"))
    recorder.finish(status="ok", returncode=0)
    assert any(p.name.startswith("output.tail.") for p in recorder.folder.iterdir())
    assert modes(recorder.folder) == {0o700, 0o600}


def test_an_open_history_is_left_as_it_is_and_said_once(panel_home: Path, caplog: pytest.LogCaptureFixture) -> None:
    (panel_home / "runs").mkdir(parents=True, mode=0o755)
    os.chmod(panel_home, 0o755)
    os.chmod(panel_home / "runs", 0o755)
    with caplog.at_level(logging.WARNING, logger="tf_device_panel"):
        first = RunHistory().new_run("fit", {}, {}, None)
        first.finish(status="ok")
        second = RunHistory().new_run("fit", {}, {}, None)
        second.finish(status="ok")
    notices = [r.getMessage() for r in caplog.records if "can be read by other users" in r.getMessage()]
    assert len(notices) == 1, notices
    assert f"{panel_home / 'runs'} 755" in notices[0] and "said once" in notices[0]
    assert stat.S_IMODE((panel_home / "runs").stat().st_mode) == 0o755  # left as it was
    assert stat.S_IMODE(first.folder.stat().st_mode) == 0o700          # a new run's folder is private
    assert {run.status for run in RunHistory().summaries()} == {"ok"}


needs_tmpfs = pytest.mark.skipif(shutil.which("unshare") is None or subprocess.run(
    ["unshare", "--user", "--map-root-user", "--mount", "true"], capture_output=True).returncode != 0,
    reason="needs `unshare` to mount a small tmpfs in a private mount namespace")


@needs_tmpfs
def test_a_disk_full_before_the_run_starts_lists_the_run_as_incomplete(tmp_path: Path) -> None:
    """A real full disk: a 1 MB tmpfs filled up before `run`, in a mount namespace of this test's own."""
    script = tmp_path / "hello.py"
    script.write_text("print('hello')\n")
    disk = tmp_path / "disk"
    disk.mkdir()
    home = disk / "home"
    inner = textwrap.dedent(f"""
        mount -t tmpfs -o size=1m tmpfs {disk} || exit 99
        head -c 2000000 /dev/zero > {disk}/fill 2>/dev/null
        TF_DEVICE_PANEL_HOME={home} {sys.executable} -m tf_device_panel run script -p path={script} > /dev/null
        echo "exit=$?" >&2
        TF_DEVICE_PANEL_HOME={home} {sys.executable} -m tf_device_panel runs --json
    """)
    done = subprocess.run(["unshare", "--user", "--map-root-user", "--mount", "sh", "-c", inner], cwd=ROOT,
                          capture_output=True, text=True, timeout=180)
    assert "Traceback" not in done.stderr, done.stderr
    assert "exit=0" in done.stderr, done.stderr  # the run itself went on
    (summary,) = json.loads(done.stdout)
    assert summary["status"] == "incomplete" and summary["job"] == "script", summary  # was 'unreadable'
    assert "was the disk full" in summary["incomplete"]


def test_the_windows_history_lists_a_fifo_run_and_opens_one_with_a_fifo_event_log(panel_home: Path,
                                                                                  qtbot: Any) -> None:
    from tf_device_panel.gui.docks.history_panel import HistoryPanel, RunDialog

    good_run(panel_home)
    special = panel_home / "runs" / SPECIAL_ID
    special.mkdir()
    os.mkfifo(special / "run.json")
    events_fifo = good_run(panel_home.parent / "other")  # a good summary whose event log is a FIFO
    (events_fifo / "events.jsonl").unlink()
    os.mkfifo(events_fifo / "events.jsonl")
    events_fifo.rename(panel_home / "runs" / "20260101-000003-matmul-cccccc")
    panel = HistoryPanel(RunHistory())
    qtbot.addWidget(panel)
    panel.refresh()
    assert panel.wait_until_loaded()
    statuses = {panel.table.item(row, 0).data(256): panel.table.item(row, 2).text()
                for row in range(panel.table.rowCount())}
    assert statuses == {GOOD_ID: "ok", SPECIAL_ID: "unreadable", "20260101-000003-matmul-cccccc": "ok"}
    dialog = RunDialog(RunHistory(), "20260101-000003-matmul-cccccc")  # used to block in open()
    qtbot.addWidget(dialog)
