from __future__ import annotations

import json
from pathlib import Path

from tf_device_panel.core.client.history import RunHistory
from tf_device_panel.core.client.run_manager import run_job_once
from tf_device_panel.core.client.run_record import JobRun
from tf_device_panel.core.config import DeviceConfig
from tf_device_panel.core.protocol import events


def test_a_run_is_recorded_as_it_happens(panel_home: Path) -> None:
    outcome = run_job_once(DeviceConfig(cpu_devices=2), "replicate", {}, history=RunHistory())
    assert outcome.status == "ok" and outcome.result["matrix"] == [[44, 56], [98, 128]]
    history = RunHistory()
    assert history.root == panel_home / "runs"
    (summary,) = history.summaries()
    assert summary.run_id == outcome.run_id and summary.status == "ok"
    assert summary.config["cpu_devices"] == 2
    assert summary.devices["logical"][1]["short_name"] == "/CPU:1"
    recorded = history.events(outcome.run_id)
    kinds = [e.type for e in recorded]
    assert kinds.index(events.WARM) < kinds.index(events.READY) < kinds.index(events.JOB_STARTED)
    assert kinds[-1] == events.JOB_FINISHED and summary.returncode == 0
    assert {e.short_device for e in recorded if isinstance(e, events.Placement)} == {"/CPU:0", "/CPU:1"}


def test_crash_mid_run_keeps_what_was_written(panel_home: Path) -> None:
    history = RunHistory()
    run = JobRun("fit", {}, DeviceConfig(), None, history)
    run.attach("job-1")
    run.feed(events.JobStarted(job="fit", job_id="job-1"))
    run.feed(events.Log(stream="stdout", kind="output", text="epoch 1", job_id="job-1"))
    run.feed(events.Progress(done=1, total=2, message="", job_id="job-1"))  # output flushed
    assert run.recorder is not None
    folder = run.recorder.folder
    with (folder / "events.jsonl").open("a") as handle:  # a line cut short by a crash
        handle.write('{"type": "log", "da')
    summary = json.loads((folder / "run.json").read_text())
    summary["client_pid"] = 2**22 + 12345  # a client that no longer exists
    (folder / "run.json").write_text(json.dumps(summary))
    assert [e.type for e in history.events(run.recorder.run_id)] == [events.JOB_STARTED, events.LOG, events.PROGRESS]
    assert history.summaries()[0].status == "interrupted"


def test_rejected_configuration_is_an_error_outcome() -> None:
    outcome = run_job_once(DeviceConfig(visible_gpus=(3,)), "matmul", {}, history=RunHistory())
    assert outcome.status == "error" and outcome.error is not None
    assert outcome.error.type == "ConfigRejected" and "GPU 3" in outcome.error.message
    assert RunHistory().summaries()[0].status == "error"


def test_unreadable_run_summary_is_listed_not_fatal(panel_home: Path) -> None:
    folder = panel_home / "runs" / "20260101-000000-matmul-abcdef"
    folder.mkdir(parents=True)
    (folder / "run.json").write_text("{oops")
    assert RunHistory().summaries()[0].status == "unreadable"
