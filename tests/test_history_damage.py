"""A damaged history never hides the rest of it, and a record that cannot be written never stops a run.

Reading: any run.json or events.jsonl, however damaged, lists that run as `unreadable` with the reason, beside
every good run, in `runs`, `runs --json`, the exporter's panel state and the Qt-free data the window's History
shows. Writing: every write of the record goes through one guarded path; a failure (a full disk) marks the
record incomplete with the reason and the run goes on.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path
from typing import Any

import pytest
from helpers import ROOT
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tf_device_panel.core.cli.output import run_line
from tf_device_panel.core.client import history
from tf_device_panel.core.client.history import RunHistory
from tf_device_panel.core.client.records import RunSummary
from tf_device_panel.core.client.run_manager import run_job_once
from tf_device_panel.core.config import DeviceConfig
from tf_device_panel.core.lab.exporter import PanelStateReader
from tf_device_panel.core.protocol import events

GOOD_ID = "20260101-000001-matmul-good00"


def cli(*args: str, env: dict[str, str] | None = None, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([sys.executable, "-m", "tf_device_panel", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout, env=env or os.environ.copy())
    assert "Traceback" not in done.stderr, done.stderr
    return done


def good_run(root: Path) -> Path:
    """A finished run recorded by the real recorder, without TensorFlow."""
    recorder = history.RunRecorder(root / "runs" / GOOD_ID, RunSummary(
        run_id=GOOD_ID, job="matmul", config={}, status="running", started=1767225601.0, client_pid=os.getpid()))
    recorder.append(events.JobStarted(job="matmul", job_id="j"))
    recorder.append(events.Log(stream="stdout", kind="output", text="hello", job_id="j"))
    recorder.finish(status="ok", duration_s=1.5, returncode=0)
    return recorder.folder


def damaged_run(root: Path, name: str, content: bytes) -> Path:
    folder = root / "runs" / f"20260101-000002-{name}"
    folder.mkdir(parents=True)
    (folder / "run.json").write_bytes(content)
    return folder


def summary_with(**fields: Any) -> bytes:
    base = {"run_id": "x", "job": "fit", "status": "running", "started": 1767225602.0, "client_pid": os.getpid()}
    return json.dumps({**base, **fields}).encode()


# the damage the adversary found, each with words its reason must hold
DAMAGE = {
    "pid-text": (summary_with(client_pid="abc"), "client_pid"),
    "not-utf8": (b'{"job": "\xff\xfe"}', "not UTF-8"),
    "a-list": (b"[1, 2, 3]", "a list"),
    "null": (b"null", "null"),
    "huge-pid": (summary_with(client_pid=10**30), "client_pid"),
    "float-pid": (summary_with(client_pid=1.5), "client_pid"),
    "negative-pid": (summary_with(client_pid=-4), "client_pid"),
    "status-number": (summary_with(status=3), "status"),
    "error-text": (summary_with(status="error", error="boom"), "error"),
    "started-huge": (summary_with(started=1e300), "started"),
    "escaping-tail": (summary_with(status="ok", output={"tail": [{"file": "../../secret", "start": 0}]}), "output"),
    "no-job": (b'{"status": "ok", "started": 1}', "'job'"),
    "duplicate-key": (b'{"job": "a", "job": "b", "status": "ok", "started": 1}', "twice"),
    "not-json": (b"{oops", "not valid JSON"),
}


@pytest.mark.parametrize("name", DAMAGE)
def test_a_damaged_summary_is_listed_unreadable_with_the_reason_beside_the_good_run(panel_home: Path,
                                                                                    name: str) -> None:
    content, reason = DAMAGE[name]
    good_run(panel_home)
    damaged_run(panel_home, name, content)
    runs = {run.run_id: run for run in RunHistory().summaries()}
    assert runs[GOOD_ID].status == "ok"
    (damaged,) = (run for run_id, run in runs.items() if run_id != GOOD_ID)
    assert damaged.status == "unreadable" and reason in damaged.error.message, damaged
    assert RunHistory().get(damaged.run_id).status == "unreadable"
    assert len([run_line(run) for run in runs.values()]) == 2


def test_runs_lists_every_good_run_beside_all_the_damaged_ones(panel_home: Path) -> None:
    good_run(panel_home)
    for name, (content, _) in DAMAGE.items():
        damaged_run(panel_home, name, content)
    listed = cli("runs", "--json")
    assert listed.returncode == 0, listed.stderr
    runs = json.loads(listed.stdout)
    assert len(runs) == len(DAMAGE) + 1
    assert [run["status"] for run in runs if run["run_id"] == GOOD_ID] == ["ok"]
    assert {run["status"] for run in runs if run["run_id"] != GOOD_ID} == {"unreadable"}
    text = cli("runs")
    assert text.returncode == 0, text.stderr
    assert GOOD_ID in text.stdout and text.stdout.count("unreadable") == len(DAMAGE)
    assert "client_pid" in text.stdout


def test_a_fractional_pid_is_not_a_run_in_progress_for_the_exporter(panel_home: Path) -> None:
    damaged_run(panel_home, "float-pid", summary_with(client_pid=1.5))
    assert PanelStateReader(RunHistory()).read().run is None


def test_damaged_lines_of_the_event_log_are_skipped_and_counted(panel_home: Path) -> None:
    folder = good_run(panel_home)
    with (folder / "events.jsonl").open("ab") as handle:
        handle.write(b'[1, 2]\n\xff\xfe\n{"type": "placement", "data": {}}\n{"at": "x", "type": "log"}\n')
        handle.write(b'{"type": "log", "da')  # the last line cut short by a crash: no damage
    recorded = RunHistory().events(GOOD_ID)
    warning = recorded[0]
    assert warning.kind == "warning" and warning.text.startswith("4 damaged part(s)")
    assert [e.text for e in recorded if isinstance(e, events.Log)][1:] == ["hello"]


def test_the_history_folder_being_a_file_is_exit_2_with_what_to_do(panel_home: Path) -> None:
    panel_home.mkdir()
    (panel_home / "runs").write_text("not a folder")
    done = cli("runs")
    assert done.returncode == 2 and "is a file, not a folder" in done.stderr and "TF_DEVICE_PANEL_HOME" in done.stderr


# -- property tests: arbitrary JSON and bytes --------------------------------------------------------------
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=12)
summary_fields = st.fixed_dictionaries({}, optional={
    name: json_values for name in ("run_id", "job", "status", "started", "client_pid", "error", "params",
                                    "duration_s", "output", "config", "returncode")})


def read_everything(root: Path) -> list[RunSummary]:
    """Every reader of the history, as `runs`, `runs --json`, the exporter and the window use it."""
    store = RunHistory(root)
    runs = store.summaries()
    json.dumps([run.to_json() for run in runs], default=str)
    for run in runs:
        run_line(run)
        store.get(run.run_id)
        store.events(run.run_id)
    PanelStateReader(store).read()
    return runs


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(json_values, summary_fields), st.binary(max_size=300))
def test_any_json_summary_and_any_event_bytes_are_read_without_error(summary: Any, event_bytes: bytes) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        good_run(root)
        folder = damaged_run(root, "fuzzed", json.dumps(summary).encode())
        (folder / "events.jsonl").write_bytes(event_bytes)
        (folder / "output.txt").write_bytes(event_bytes)
        runs = read_everything(root)
        assert len(runs) == 2 and [run.status for run in runs if run.run_id == GOOD_ID] == ["ok"]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=400), st.binary(max_size=400))
def test_any_bytes_in_a_record_are_read_without_error(summary: bytes, event_bytes: bytes) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        good_run(root)
        folder = damaged_run(root, "bytes", summary)
        (folder / "events.jsonl").write_bytes(event_bytes)
        assert len(read_everything(root)) == 2


# -- writing: one guarded path ----------------------------------------------------------------------------
def failing_writes(monkeypatch: pytest.MonkeyPatch, after: int) -> None:
    """The recorder's write fails as on a full disk after `after` writes."""
    real = history._write
    count = [0]

    def write(handle: Any, data: Any) -> None:
        count[0] += 1
        if count[0] > after:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real(handle, data)

    monkeypatch.setattr(history, "_write", write)


def test_a_failed_write_marks_the_record_incomplete_and_stops_recording(panel_home: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    failing_writes(monkeypatch, after=2)
    recorder = RunHistory().new_run("fit", {}, {}, None)
    for number in range(5):
        recorder.append(events.Log(stream="stdout", kind="output", text=f"line {number}"))
    assert recorder.problem is not None and "No space left on device" in recorder.problem
    recorder.finish(status="ok", returncode=0)
    (summary,) = RunHistory().summaries()
    assert summary.status == "ok" and "No space left on device" in summary.incomplete


def test_on_a_full_disk_the_final_summary_goes_over_the_reserved_space(panel_home: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    failing_writes(monkeypatch, after=0)
    recorder = RunHistory().new_run("fit", {}, {}, None)
    recorder.append(events.Log(stream="stdout", kind="output", text="x"))

    def full(*args: Any, **kwargs: Any) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(history, "_write_json_atomic", full)
    recorder.finish(status="error", returncode=3, placement_counts=[["MatMul", "/CPU:0", 1]] * 5000)
    (summary,) = RunHistory().summaries()
    assert summary.status == "error" and summary.returncode == 3 and summary.incomplete is not None


def test_a_history_that_cannot_be_created_leaves_the_run_going(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "file").write_text("")
    monkeypatch.setenv("TF_DEVICE_PANEL_HOME", str(tmp_path / "file" / "home"))
    recorder = RunHistory().new_run("fit", {}, {}, None)
    recorder.append(events.Log(stream="stdout", kind="output", text="x"))
    recorder.finish(status="ok")
    assert recorder.problem is not None and "Not a directory" in recorder.problem


def test_a_run_whose_record_fails_mid_run_ends_with_its_own_status(tmp_path: Path, panel_home: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    failing_writes(monkeypatch, after=20)
    script = tmp_path / "flood.py"
    script.write_text("import sys\nfor i in range(40000):\n    print('line', i)\nsys.exit(3)\n")
    outcome = run_job_once(DeviceConfig(), "script", {"path": str(script)}, history=RunHistory())
    assert outcome.returncode == 3 and outcome.record_problem is not None
    (summary,) = RunHistory().summaries()
    assert summary.status != "running" and "No space left on device" in summary.incomplete


needs_tmpfs = pytest.mark.skipif(shutil.which("unshare") is None or subprocess.run(
    ["unshare", "--user", "--map-root-user", "--mount", "true"], capture_output=True).returncode != 0,
    reason="needs `unshare` to mount a small tmpfs in a private mount namespace")


@needs_tmpfs
def test_a_full_disk_ends_the_cli_with_the_scripts_status_and_one_line(tmp_path: Path) -> None:
    script = tmp_path / "flood.py"
    script.write_text("import sys\nfor i in range(40000):\n    print('line %06d' % i, 'x' * 60)\nsys.exit(3)\n")
    home = tmp_path / "home"
    home.mkdir()
    # A 1 MB tmpfs (the output is 2.8 MB) mounted over the home in a mount namespace of this test's own.
    inner = textwrap.dedent(f"""
        mount -t tmpfs -o size=1m tmpfs {home} || exit 99
        TF_DEVICE_PANEL_HOME={home} {sys.executable} -m tf_device_panel run script -p path={script} > /dev/null
        echo "exit=$?" >&2
        TF_DEVICE_PANEL_HOME={home} {sys.executable} -m tf_device_panel runs --json
    """)
    done = subprocess.run(["unshare", "--user", "--map-root-user", "--mount", "sh", "-c", inner], cwd=ROOT,
                          capture_output=True, text=True, timeout=180)
    assert "Traceback" not in done.stderr, done.stderr
    assert "exit=3" in done.stderr, done.stderr
    warnings = [line for line in done.stderr.splitlines() if line.startswith("warning: this run's record")]
    assert len(warnings) == 1 and "No space left on device" in warnings[0]
    (summary,) = json.loads(done.stdout)
    assert summary["status"] == "error" and summary["returncode"] == 3
    assert "No space left on device" in summary["incomplete"]


def test_the_windows_history_lists_a_damaged_run_as_unreadable_and_opens_it(panel_home: Path, qtbot: Any) -> None:
    from tf_device_panel.gui.docks.history_panel import HistoryPanel, RunDialog

    good_run(panel_home)
    damaged = damaged_run(panel_home, "pid-text", summary_with(client_pid="abc"))
    panel = HistoryPanel(RunHistory())
    qtbot.addWidget(panel)
    panel.refresh()
    assert panel.wait_until_loaded()
    statuses = {panel.table.item(row, 0).data(256): panel.table.item(row, 2).text() for row in range(2)}
    assert statuses == {GOOD_ID: "ok", damaged.name: "unreadable"}
    dialog = RunDialog(RunHistory(), damaged.name)
    qtbot.addWidget(dialog)
    assert not dialog.run_again_button.isEnabled()
    (panel_home / "runs").rename(panel_home / "moved")
    (panel_home / "runs").write_text("")
    panel.refresh()
    assert panel.wait_until_loaded()
    assert panel.table.rowCount() == 0 and "is a file, not a folder" in panel.details.text()
