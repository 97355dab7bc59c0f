"""The observable session: the one owner of the window's state, written by the run manager and by the window,
watched by event class through its hub. No Qt, no TensorFlow: the manager drives fake processes
(fake_runtime.py), NVML is faked (fake_nvml.py)."""

from __future__ import annotations

import threading
import urllib.request

import pytest
from fake_nvml import GIB, FakeGpus
from fake_runtime import FakeProcess, fake_factory
from helpers import wait_until
from prometheus_client.parser import text_string_to_metric_families
from tf_device_panel.core.client.run_manager import (
    FOLLOW_THE_SPARE,
    WAITING_JOB,
    RunManager,
    SpareCondition,
    Submission,
)
from tf_device_panel.core.client.run_record import JobRun
from tf_device_panel.core.client.runtime import RuntimeState
from tf_device_panel.core.client.session import (
    CHANGE_OF_FIELD,
    AppliedChanged,
    Change,
    DraftChanged,
    InventoryChanged,
    JobEnded,
    ManagerStateChanged,
    PendingChanged,
    ReadyChanged,
    RunPidChanged,
    RunStateChanged,
    Session,
)
from tf_device_panel.core.config import DeviceConfig
from tf_device_panel.core.devices.nvml import Nvml
from tf_device_panel.core.devices.telemetry import Sample, Sampler
from tf_device_panel.core.hub import HandlerFailed, Message
from tf_device_panel.core.lab.exporter import Exporter
from tf_device_panel.core.protocol import events


def window_manager() -> tuple[RunManager, list[FakeProcess], list[Change]]:
    """A window's manager (a spare pool of one, a describe run) and every change its session told, in order."""
    made: list[FakeProcess] = []
    manager = RunManager(spares=1, process_factory=fake_factory(made))
    told: list[Change] = []
    manager.session.subscribe(told, Change, told.append)
    return manager, made, told


def kinds(told: list[Change]) -> list[tuple[str, object]]:
    return [(change.field_name, change.value) for change in told]


# -- the model itself ------------------------------------------------------------------------------


def test_each_field_has_its_own_change_event_and_is_watched_by_its_class_or_every_change() -> None:
    session = Session()
    by_class: list[DraftChanged] = []
    everything: list[Change] = []
    stop = session.subscribe(by_class, DraftChanged, by_class.append)
    session.subscribe(everything, Change, everything.append)
    first = DeviceConfig(memory_growth=True)
    session.set_draft(first)
    session.set_draft(DeviceConfig(memory_growth=True))  # an equal draft is no news
    stop()
    stop()  # twice is harmless
    session.set("selected_job", "fit")
    assert by_class == [DraftChanged(first)]
    assert kinds(everything) == [("draft", first), ("selected_job", "fit")]
    # one class per field, named after it
    assert all(cls.field_name == name and hasattr(session, name) for name, cls in CHANGE_OF_FIELD.items())
    with pytest.raises(KeyError):
        session.set("no such field", None)
    with pytest.raises(KeyError):
        session.set("run_state", None)  # the run state moves only by `fold`


def test_the_draft_the_applied_configuration_and_staleness() -> None:
    session = Session()
    applied: list[AppliedChanged] = []
    session.subscribe(applied, AppliedChanged, applied.append)
    first = DeviceConfig(memory_growth=True)
    session.set_draft(first)
    assert not session.is_stale  # nothing applied yet: nothing to be stale against
    session.set("applied", first)
    assert session.applied == session.draft == first and not session.is_stale
    edited = DeviceConfig(memory_growth=True, cpu_devices=3)
    session.set_draft(edited)
    assert session.is_stale
    session.set("applied", edited)
    assert not session.is_stale and [c.value for c in applied] == [first, edited]
    again = DeviceConfig(memory_growth=True, cpu_devices=3)
    session.set("applied", again)  # applied again, equal: still news (the runtime restarts with it)
    session.set("applied", again)  # the very same object: none
    assert [c.value for c in applied] == [first, edited, again] and applied[-1].value is again


def test_applying_writes_the_applied_configuration_once() -> None:
    manager, _, told = window_manager()
    config = DeviceConfig(cpu_devices=2)
    manager.apply(config)
    assert [c.value for c in told if isinstance(c, AppliedChanged)] == [config] and manager.session.applied is config


# -- the run manager writes it -----------------------------------------------------------------------


def test_the_manager_keeps_its_state_spare_configuration_and_devices_in_the_session() -> None:
    manager, made, told = window_manager()
    session = manager.session
    config = DeviceConfig(cpu_devices=2)
    manager.apply(config)
    describer, spare = made
    assert session.applied is config and session.spare is spare and session.manager_state == RuntimeState.STARTING
    assert kinds(told) == [("applied", config), ("manager_state", RuntimeState.STARTING), ("spare", spare)]
    told.clear()
    spare.warm_up()
    assert told == []  # warm, but the devices are not listed yet: nothing the session holds moved
    describer.warm_up()
    describer.ready()
    assert session.ready is not None and session.ready.logical[0]["short_name"] == "/CPU:0"
    assert [type(c) for c in told] == [ReadyChanged, ManagerStateChanged]
    assert session.manager_state == manager.state == RuntimeState.READY
    told.clear()
    assert manager.run("matmul", {}) == Submission.STARTED
    next_spare = made[-1]
    assert kinds(told) == [("manager_state", RuntimeState.BUSY), ("spare", next_spare)]


def test_a_waiting_job_is_the_sessions_until_the_spare_takes_it() -> None:
    manager, made, told = window_manager()
    manager.apply(DeviceConfig())
    assert manager.run("fit", {"epochs": 2}) == Submission.WAITING
    pending = manager.session.pending
    assert pending is not None and pending.job == "fit" and PendingChanged(pending) in told
    made[0].warm_up()
    made[0].ready()
    made[1].warm_up()
    assert manager.session.pending is None and PendingChanged(None) in told
    assert made[1].job is not None and made[1].job[0] == "fit"


def test_changes_made_on_a_reader_thread_are_told_there_after_the_managers_lock_is_released() -> None:
    """A subscriber may ask the manager again (the window's controller reads its status) without a deadlock,
    and hears the change on the thread that made it."""
    manager, made, _ = window_manager()
    manager.apply(DeviceConfig())
    heard: list[tuple[str, str, str]] = []

    def asks_again(change: ManagerStateChanged) -> None:
        acquired = manager._lock.acquire(blocking=False)  # free here, or held by this very thread: a deadlock
        assert acquired
        manager._lock.release()
        heard.append((str(change.value), threading.current_thread().name, manager.status_text()))

    manager.session.subscribe(heard, ManagerStateChanged, asks_again)
    made[0].warm_up()
    made[0].ready()
    reader = threading.Thread(target=made[1].warm_up, name="runtime-reader-2")
    reader.start()
    reader.join()
    assert heard == [("ready", "runtime-reader-2", "spare ready (TF 2.21.0, 1 logical device)")]


def test_the_spare_and_the_waiting_job_follow_the_settle_tables() -> None:
    """`_settle` reads its two decisions from tables: a failed spare refuses the job waiting for it."""
    assert FOLLOW_THE_SPARE[(RuntimeState.STARTING, SpareCondition.USABLE)] == "spare ready"
    assert (RuntimeState.READY, SpareCondition.NONE) not in FOLLOW_THE_SPARE  # a used spare's absence is no news
    assert WAITING_JOB == {RuntimeState.READY: "hand over", RuntimeState.EXITED: "refuse",
                           RuntimeState.NOT_STARTED: "refuse"}
    manager, made, told = window_manager()
    manager.apply(DeviceConfig())
    manager.run("matmul", {})
    made[1].fail_startup()
    assert manager.session.manager_state == RuntimeState.EXITED and manager.session.pending is None
    assert kinds(told)[-2:] == [("manager_state", RuntimeState.EXITED), ("pending", None)]


def test_each_manager_keeps_its_own_device_descriptions() -> None:
    """The describe cache is the manager's: a second manager lists the same configuration's devices itself."""
    first, made, _ = window_manager()
    config = DeviceConfig(cpu_devices=2)
    first.apply(config)
    made[0].warm_up()
    made[0].ready()
    assert first.descriptions.get(config) is not None
    second, made_again, _ = window_manager()
    second.apply(config)
    assert second.descriptions.get(config) is None and len(made_again) == 2  # a describe run and a spare
    first.apply(config)  # the first remembers: only a spare this time
    assert len(made) == 3


# -- folding the run's events --------------------------------------------------------------------------


def test_a_batch_is_folded_once_and_the_run_pid_follows_the_ready_report_and_the_exit() -> None:
    session = Session()
    folded: list[RunStateChanged] = []
    pids: list[int | None] = []
    session.subscribe(folded, RunStateChanged, folded.append)
    session.subscribe(pids, RunPidChanged, lambda change: pids.append(change.value))
    changes = session.fold([events.Ready(pid=41, job_id="j"), events.JobStarted(job="fit", job_id="j"),
                            events.Progress(done=1, total=4, job_id="j"), events.Progress(done=2, total=4, job_id="j"),
                            events.Metric(name="loss", step=1, value=0.5, job_id="j"),
                            events.Metric(name="accuracy", step=1, value=0.9, job_id="j")])
    assert session.run_pid == 41 and pids == [41]
    assert changes.progress is not None and changes.progress.done == 2 and changes.losses == [(1, 0.5)]
    assert [e.pid for e in changes.readies] == [41] and session.run_state.job == "fit"
    assert len(folded) == 1 and folded[0].changes is changes and folded[0].value is session.run_state
    changes = session.fold([events.JobFinished(job="fit", status="ok", job_id="j"),
                            events.RuntimeExited(returncode=0, expected=True, description="exited")])
    assert session.run_pid is None and pids == [41, None]
    assert len(changes.finished) == 1 and len(changes.exits) == 1 and changes.readies == []


def test_a_jobs_end_is_told_after_the_batch_that_held_it_and_only_the_runs_own() -> None:
    """`fold` tells JobEnded once the batch holding the run's end is folded: whoever draws the run's events has
    drawn them all when it hears of it (the window's runs panel shows the outcome under the job's last lines)."""
    session = Session()
    told: list[Message] = []
    session.subscribe(told, RunStateChanged, told.append)
    session.subscribe(told, JobEnded, told.append)
    run = JobRun("fit", {}, DeviceConfig(), None)
    run.attach("j")
    other = events.JobFinished(job="matmul", status="ok", job_id="another")
    session.fold([events.JobStarted(job="fit", job_id="j"), other], run=run)  # another job's end: not this run's
    session.fold([events.JobStarted(job="fit", job_id="j")])  # no run known: no end to tell
    assert [type(m) for m in told] == [RunStateChanged, RunStateChanged]
    told.clear()
    ended = events.JobFinished(job="fit", status="ok", job_id="j")
    run.feed(ended)
    session.fold([events.Log(stream="stdout", kind="stdout", text="done", job_id="j"), ended], run=run)
    assert [type(m) for m in told] == [RunStateChanged, JobEnded]
    assert isinstance(told[1], JobEnded) and told[1].outcome is run.outcome and run.outcome.status == "ok"


def test_the_sampler_follows_the_sessions_run_pid_and_a_ready_report_makes_one_inventory(
        monkeypatch: pytest.MonkeyPatch) -> None:
    FakeGpus(2).install(monkeypatch)
    session = Session(Sampler(interval=0.1, nvml=Nvml()))
    assert session.sampler is not None
    session.start_telemetry()
    try:
        assert [g.pci_bus_id for g in session.nvml_gpus] == ["00000000:01:00.0", "00000000:02:00.0"]
        told: list[InventoryChanged] = []
        session.subscribe(told, InventoryChanged, told.append)
        ready = events.Ready(pid=7, physical=(
            {"name": "/physical_device:GPU:0", "device_type": "GPU", "index": 0},
            {"name": "/physical_device:GPU:1", "device_type": "GPU", "index": 1}), gpu_devices=(
            {"logical": "/GPU:0", "physical": 0, "memory_mb": 1024, "name": "Fake GPU 1",
             "pci_bus_id": "0000:02:00.0"},
            {"logical": "/GPU:1", "physical": 1, "memory_mb": 1024, "name": "Fake GPU 0",
             "pci_bus_id": "0000:01:00.0"}))
        session.fold([ready], tf_lines=lambda: ["TensorFlow's own line"])
        (change,) = told
        assert change.value is session.inventory and change.ready is ready and change.tf_lines == (
            "TensorFlow's own line",)
        assert [(g.tf_index, g.nvml_index) for g in session.inventory.gpus] == [(0, 1), (1, 0)]
        assert session.sampler.runtime_pid == 7
        wait_until(lambda: session.sampler is not None and session.sampler.sample().runtime_pid == 7, timeout=5)
        session.fold([events.RuntimeExited(returncode=0, expected=True, description="exited")])
        assert session.sampler.runtime_pid is None
    finally:
        session.stop_telemetry()


def test_a_failing_sample_handler_is_the_sessions_news_too() -> None:
    """The window hears the session only: a failure on the sampler's hub reaches it through the session."""
    sampler = Sampler(interval=0.1, nvml=Nvml())
    session = Session(sampler)
    failures: list[HandlerFailed] = []
    session.subscribe(failures, HandlerFailed, failures.append)

    def closed_graph(_sample: Sample) -> None:
        raise RuntimeError("the graph was closed")

    sampler.hub.subscribe(closed_graph, Sample, closed_graph)
    sampler.hub.publish(Sample(time=1.0))
    assert [failed.handler for failed in failures] == [closed_graph]


def sampler_threads() -> int:
    return sum(1 for t in threading.enumerate() if t.name == "telemetry-sampler")


def test_the_window_and_an_exporter_share_one_sampler(monkeypatch: pytest.MonkeyPatch) -> None:
    """One sampling thread serves the memory graphs and the exporter: a scrape shows the GPUs the window's
    sampler reads, and stopping the exporter leaves the window's sampler running."""
    FakeGpus(2).install(monkeypatch)
    before = sampler_threads()
    session = Session(Sampler(interval=0.1, nvml=Nvml()))
    sampler = session.sampler
    assert sampler is not None
    session.start_telemetry()
    graphs: list[Sample] = []
    sampler.hub.subscribe(graphs, Sample, graphs.append)
    exporter = Exporter("127.0.0.1", 0, sampler=sampler)
    exporter.start()
    try:
        assert exporter.sampler is sampler and sampler_threads() == before + 1
        with urllib.request.urlopen(exporter.url, timeout=10) as response:
            text = response.read().decode()
        used = {s.labels["gpu"]: s.value for family in text_string_to_metric_families(text)
                for s in family.samples if s.name == "tfdp_gpu_memory_used_bytes"}
        assert used == {"0": 1 * GIB, "1": 2 * GIB}
    finally:
        exporter.stop()
    assert sampler.running
    seen = len(graphs)
    wait_until(lambda: len(graphs) > seen, timeout=10, message="the window's graphs got no sample after the "
                                                               "exporter stopped")
    session.stop_telemetry()
    assert sampler_threads() == before and not sampler.running


def test_a_failing_subscriber_does_not_keep_the_others_from_their_samples(monkeypatch: pytest.MonkeyPatch) -> None:
    FakeGpus(1).install(monkeypatch)
    got: list[Sample] = []

    def broken(_sample: Sample) -> None:
        raise RuntimeError("a closed panel")

    sampler = Sampler(interval=0.1, nvml=Nvml())
    sampler.hub.subscribe(broken, Sample, broken)
    sampler.hub.subscribe(got, Sample, got.append)
    sampler.start()
    sampler.start()  # a second owner's start is no second thread
    try:
        assert sampler_threads() == 1
        wait_until(lambda: len(got) >= 3, timeout=10, message=lambda: f"only {len(got)} samples")
    finally:
        sampler.stop()
    assert not sampler.running
