"""The run lifecycle without Qt and without TensorFlow: a RunManager driving fake processes, in milliseconds.

A `FakeProcess` (fake_runtime.py) does what a `RuntimeProcess` does to its state and events, but only when the
test says so (`warm_up`, `finish_job`, `exit`): every step of a run, and every order of them, is the test's.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import Any

import pytest
from fake_runtime import FakeProcess, fake_factory
from helpers import wait_until
from tf_device_panel.core.catalogue.jobs import JobError
from tf_device_panel.core.client.history import RunHistory
from tf_device_panel.core.client.run_manager import (
    TRANSITIONS,
    RunManager,
    Submission,
    Trigger,
    run_job_once,
)
from tf_device_panel.core.client.run_record import JobOutcome
from tf_device_panel.core.client.runtime import PROCESS_TRANSITIONS, IllegalTransition, Lifecycle, RuntimeState
from tf_device_panel.core.client.session import (
    JobHandedOver,
    JobQueued,
    ManagerStateChanged,
    ProblemNotice,
    WaitingRefused,
)
from tf_device_panel.core.config import DeviceConfig
from tf_device_panel.core.protocol import events
from tf_device_panel.core.protocol.events import Event


class Recorder:
    """Everything a manager tells, in order: the events it hands to its sink and the news it publishes on its
    session."""

    def __init__(self, manager: RunManager):
        self.manager = manager
        self.events: list[Event] = []
        self.states: list[RuntimeState] = []
        self.queued: list[str] = []
        self.started: list[str] = []
        self.refused: list[tuple[str, str]] = []
        self.problems: list[str] = []
        manager.event_sink = self.events.append
        session = manager.session
        session.subscribe(self, ManagerStateChanged, lambda change: self.states.append(change.value))
        session.subscribe(self, JobQueued, lambda queued: self.queued.append(queued.job))
        session.subscribe(self, JobHandedOver, lambda handed_over: self.started.append(handed_over.job))
        session.subscribe(self, WaitingRefused, lambda refused: self.refused.append((refused.job, refused.why)))
        session.subscribe(self, ProblemNotice, lambda notice: self.problems.append(notice.text))

    @property
    def finished(self) -> list[JobOutcome]:
        """How the last run ended, once its record did (the window hears of it when the session folds the batch
        that held the end: test_session.py)."""
        run = self.manager.job_run
        return [run.outcome] if run is not None and run.finished else []


def make_manager(spares: int = 1, history: RunHistory | None = None) -> tuple[RunManager, list[FakeProcess], Recorder]:
    made: list[FakeProcess] = []

    def factory(config: DeviceConfig, on_event: Callable[[Event], None]) -> FakeProcess:
        made.append(FakeProcess(config, on_event))
        return made[-1]

    manager = RunManager(history, spares=spares, process_factory=factory)
    return manager, made, Recorder(manager)


def ready_window_manager(config: DeviceConfig | None = None) -> tuple[RunManager, list[FakeProcess], Recorder]:
    """A window's manager with its spare warm and the devices listed: READY."""
    manager, made, told = make_manager()
    manager.apply(config or DeviceConfig(cpu_devices=2))
    describer, spare = made
    describer.warm_up()
    describer.ready()
    describer.exit(returncode=0, description="exited with code 0", expected=True)
    spare.warm_up()
    assert manager.state == RuntimeState.READY
    return manager, made, told


# -- the transition table ----------------------------------------------------------------------------


def test_an_illegal_transition_is_refused_loudly() -> None:
    lifecycle = Lifecycle("run manager", TRANSITIONS)
    with pytest.raises(IllegalTransition, match="no transition from 'not started' on 'run'"):
        lifecycle.fire(Trigger.RUN)
    assert lifecycle.state == RuntimeState.NOT_STARTED  # refused: the state is what it was
    for state, trigger in [(RuntimeState.BUSY, Trigger.RUN), (RuntimeState.STARTING, Trigger.RUN),
                           (RuntimeState.EXITED, Trigger.JOB_ENDED), (RuntimeState.STOPPING, Trigger.SHUTDOWN),
                           (RuntimeState.READY, Trigger.STOPPED)]:
        lifecycle.state = state
        with pytest.raises(IllegalTransition):
            lifecycle.fire(trigger)
        assert lifecycle.state == state


def test_a_run_process_moves_only_through_its_own_table() -> None:
    """One process, used once: started, warm, one job (or a describe request), gone; never back."""
    lifecycle = Lifecycle("run process", PROCESS_TRANSITIONS)
    for trigger, state in [("start", RuntimeState.STARTING), ("warm", RuntimeState.READY),
                           ("submit", RuntimeState.BUSY), ("exit", RuntimeState.EXITED)]:
        assert lifecycle.fire(trigger) == state
    for trigger in ("start", "warm", "submit", "describe", "stop", "exit"):
        with pytest.raises(IllegalTransition, match="from 'exited'"):
            lifecycle.fire(trigger)
    lifecycle.state = RuntimeState.BUSY
    with pytest.raises(IllegalTransition):
        lifecycle.fire("submit")  # a process takes one job only


def test_every_transition_in_the_table_is_taken_by_some_run() -> None:
    """Each row of the table is reached by the manager's own steps below (none is dead)."""
    taken: set[tuple[RuntimeState, str]] = set()
    fire = Lifecycle.fire

    def noting(self: Lifecycle, trigger: str) -> RuntimeState:
        taken.add((self.state, trigger))
        return fire(self, trigger)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Lifecycle, "fire", noting)
        test_a_run_hands_the_job_to_the_warm_spare_and_warms_the_next()
        test_apply_during_a_run_kills_it_and_the_state_follows_the_new_spare()
        test_a_spare_that_fails_to_start_says_so_and_refuses_the_waiting_job()
        test_a_killed_spare_leaves_the_manager_exited_and_apply_restarts_it()
        test_no_spare_when_the_process_cannot_be_started()
        test_shutdown_stops_everything_and_ends_the_record()
        test_the_cli_run_starts_its_own_process_and_records_from_the_start()
        test_shutdown_from_every_state()
        test_events_of_a_replaced_spare_are_dropped()
        test_apply_when_ready_replaces_the_spare_in_the_background()
    assert taken == set(TRANSITIONS)


# -- the window: a spare pool of one ----------------------------------------------------------------


def test_a_run_hands_the_job_to_the_warm_spare_and_warms_the_next() -> None:
    manager, made, told = make_manager()
    manager.apply(DeviceConfig(cpu_devices=2))
    describer, spare = made
    assert manager.state == RuntimeState.STARTING and told.states == [RuntimeState.STARTING]
    spare.warm_up()
    assert manager.state == RuntimeState.STARTING  # warm, but the devices are not listed yet
    describer.warm_up()
    assert describer.described
    describer.ready()
    assert manager.state == RuntimeState.READY and manager.devices is not None
    assert manager.devices.logical[0]["short_name"] == "/CPU:0"
    describer.exit(returncode=0, description="exited with code 0", expected=True)
    assert manager.run("matmul", {"size": 64}) == Submission.STARTED
    assert spare.job is not None and spare.job[:2] == ("matmul", {"size": 64})
    assert manager.state == RuntimeState.BUSY and manager.running and manager.current is spare
    next_spare = made[-1]
    assert len(made) == 3 and manager.spare is next_spare and next_spare.state == RuntimeState.STARTING
    next_spare.warm_up()  # warm while the job runs: the manager is still busy
    assert manager.state == RuntimeState.BUSY
    spare.finish_job()
    assert manager.state == RuntimeState.READY and not manager.running
    assert [o.status for o in told.finished] == ["ok"] and told.finished[0].result == {"kind": "text", "text": "done"}
    assert told.states == [RuntimeState.STARTING, RuntimeState.READY, RuntimeState.BUSY, RuntimeState.STARTING,
                           RuntimeState.READY][-5:]
    # the next run reuses the warm spare, and waits for the last run's process to be gone
    assert manager.run("matmul", {}) == Submission.STARTED
    assert manager.current is next_spare and next_spare.after_pid is None  # the last one had exited
    assert not any(isinstance(e, events.RuntimeExited) and e.expected for e in told.events[:0])


def test_a_job_asked_for_while_the_spare_warms_starts_by_itself() -> None:
    manager, made, told = ready_window_manager()
    spare = made[1]
    manager.run("matmul", {})
    next_spare = made[-1]
    spare.finish_job()
    assert manager.state == RuntimeState.STARTING  # the next spare still warms
    assert manager.run("fit", {"epochs": 2}) == Submission.WAITING
    assert manager.pending is not None and next_spare.job is None and told.queued == ["fit"]
    next_spare.warm_up()
    assert next_spare.job is not None and next_spare.job[:2] == ("fit", {"epochs": 2})
    assert told.started == ["matmul", "fit"] and manager.state == RuntimeState.BUSY and manager.pending is None
    # a second job while one waits is refused with a reason, never queued behind it silently
    manager.cancel()
    assert manager.run("matmul", {}) == Submission.REFUSED
    assert told.problems[-1] == "The runtime is busy; wait until it is ready, or press Apply to start one."


def test_a_spare_is_never_started_on_a_reader_thread() -> None:
    """A process dies with the thread that started it (PR_SET_PDEATHSIG): the next spare, started when a
    reader thread hands a waiting job over, is started on the manager's long-lived starter thread."""
    manager, made, told = make_manager()
    manager.apply(DeviceConfig())
    made[0].warm_up()
    made[0].ready()
    assert made[1].started_on == threading.current_thread().name  # asked here: started here
    manager.run("matmul", {})
    reader = threading.Thread(target=made[1].warm_up, name="runtime-reader-1")
    reader.start()
    reader.join()
    assert told.started == ["matmul"] and made[-1].started_on == "process-starter"
    manager.shutdown(timeout=1.0)
    assert not any(t.name == "process-starter" for t in threading.enumerate())


def test_a_waiting_job_can_be_cancelled_and_then_never_starts() -> None:
    manager, made, told = make_manager()
    manager.apply(DeviceConfig())
    assert manager.run("matmul", {}) == Submission.WAITING
    assert manager.cancel_waiting() and manager.pending is None
    made[0].warm_up()
    made[0].ready()
    made[1].warm_up()
    assert manager.state == RuntimeState.READY and made[1].job is None and told.started == []
    assert not manager.cancel_waiting()


def test_a_spare_that_fails_to_start_says_so_and_refuses_the_waiting_job() -> None:
    manager, made, told = make_manager()
    manager.apply(DeviceConfig(visible_gpus=(3,)))
    assert manager.run("matmul", {}) == Submission.WAITING
    describer, spare = made
    describer.fail_startup()
    spare.fail_startup()
    assert manager.state == RuntimeState.EXITED and manager.pending is None
    assert told.refused == [("matmul", "the runtime is exited")] and told.finished == []
    assert "TensorFlow rejected the configuration" in manager.status_text()
    assert any(isinstance(e, events.StartupError) for e in told.events)
    assert manager.run("matmul", {}) == Submission.REFUSED and "The runtime is exited" in told.problems[-1]


def test_a_killed_spare_leaves_the_manager_exited_and_apply_restarts_it() -> None:
    manager, made, told = ready_window_manager()
    manager.kill_runtime()
    spare = made[1]
    assert spare.killed == "Runtime → Kill runtime was chosen" and manager.state == RuntimeState.EXITED
    exited = [e for e in told.events if isinstance(e, events.RuntimeExited)]
    assert exited and not exited[-1].expected  # the window says the runtime died
    manager.apply(manager.applied or DeviceConfig())
    assert manager.state == RuntimeState.STARTING and manager.devices is not None  # cached: no describe run
    assert len(made) == 3 and made[-1].state == RuntimeState.STARTING
    assert manager.status_text() == "spare warming…"
    made[-1].warm_up()
    assert manager.state == RuntimeState.READY and manager.status_text().startswith("spare ready (TF 2.21.0, 1 logical")


def test_apply_during_a_run_kills_it_and_the_state_follows_the_new_spare() -> None:
    manager, made, told = ready_window_manager()
    manager.run("fit", {})
    running, old_spare = made[1], made[2]
    manager.apply(DeviceConfig(cpu_devices=3))
    assert running.killed == "replaced by a new configuration" and old_spare.stopped is not None
    assert manager.state == RuntimeState.BUSY or manager.state == RuntimeState.STARTING
    assert told.finished and told.finished[-1].status == "cancelled"  # its outcome still ends the run
    new_spare = made[-1]
    assert new_spare.config.cpu_devices == 3
    made[-2].warm_up()  # the new configuration's describe run
    made[-2].ready()
    new_spare.warm_up()
    assert manager.state == RuntimeState.READY and manager.runtime is new_spare


def test_cancel_that_must_kill_brings_the_same_configuration_back() -> None:
    manager, made, told = ready_window_manager(DeviceConfig(cpu_devices=2))
    manager.cancel_grace_s = 1.0
    manager.run("script", {"path": "stuck.py"})
    running, next_spare = made[1], made[2]
    assert manager.cancel() and running.cancelled_with == 1.0
    next_spare.kill("by the test")  # the spare is gone too: nothing would be left to run with
    running.kill(reason="the job did not stop within 1 s of being cancelled")
    exited = [e for e in told.events if isinstance(e, events.RuntimeExited) and e.killed_for_cancel]
    assert exited and exited[-1].expected  # the job's outcome says it; the runtime did not "die"
    assert told.finished[-1].status == "cancelled"
    restarted = made[-1]
    assert restarted not in (running, next_spare) and restarted.config.cpu_devices == 2
    assert manager.state == RuntimeState.READY or manager.state == RuntimeState.STARTING
    restarted.warm_up()
    assert manager.state == RuntimeState.READY and manager.runtime is restarted


def test_cancel_with_a_warm_spare_starts_nothing_more() -> None:
    manager, made, _ = ready_window_manager()
    manager.run("script", {})
    running, next_spare = made[1], made[2]
    next_spare.warm_up()
    manager.cancel()
    running.kill(reason="the job did not stop within 5 s of being cancelled")
    assert len(made) == 3 and manager.state == RuntimeState.READY and manager.runtime is next_spare
    assert not manager.cancel()  # nothing runs: nothing to cancel


def test_a_job_the_spare_cannot_take_is_refused_with_its_reason() -> None:
    manager, made, told = ready_window_manager()
    made[1].refuse_submit = True
    assert manager.run("matmul", {}) == Submission.REFUSED
    assert told.problems[-1].startswith("the runtime is ready") and manager.state == RuntimeState.READY
    assert manager.job_run is not None and manager.job_run.outcome.status == "error"
    assert manager.run("matmul", {}) == Submission.REFUSED  # the spare still refuses: no half-started run
    assert manager.current is None


def test_no_spare_when_the_process_cannot_be_started() -> None:
    def cannot_start(config: DeviceConfig, on_event: Callable[[Event], None]) -> FakeProcess:
        process = FakeProcess(config, on_event)

        def start() -> None:
            raise OSError(2, "No such file or directory: 'python3.99'")

        process.start = start  # type: ignore[method-assign]
        return process

    manager = RunManager(spares=1, describe=False, process_factory=cannot_start)
    told = Recorder(manager)
    manager.apply(DeviceConfig())
    assert manager.state == RuntimeState.NOT_STARTED and manager.status_text() == "no runtime"
    assert told.problems == ["Could not start a TensorFlow process: [Errno 2] No such file or directory: 'python3.99'"]


def test_shutdown_stops_everything_and_ends_the_record() -> None:
    history = RunHistory()
    manager, made, told = make_manager(history=history)
    manager.apply(DeviceConfig())
    made[0].warm_up()
    made[0].ready()
    made[1].warm_up()
    manager.run("fit", {})
    manager.shutdown(timeout=1.0)
    assert manager.state == RuntimeState.EXITED and manager.spare is None and manager.current is None
    assert made[1].killed == "the window was closed during a run" and made[2].stopped
    assert told.finished[-1].status == "cancelled"
    assert history.summaries()[0].status == "cancelled"  # never left "running"


def test_shutdown_from_every_state() -> None:
    """Closing the window whatever the runtime is doing: every state leads to EXITED, nothing left running."""
    def steps_to(manager: RunManager, made: list[FakeProcess], state: RuntimeState) -> None:
        if state == RuntimeState.NOT_STARTED:
            return
        manager.apply(DeviceConfig())
        if state == RuntimeState.STARTING:
            return
        made[0].warm_up()
        made[0].ready()
        if state == RuntimeState.EXITED:
            made[1].fail_startup()
            return
        made[1].warm_up()

    for state in (RuntimeState.NOT_STARTED, RuntimeState.STARTING, RuntimeState.READY, RuntimeState.EXITED):
        manager, made, told = make_manager()
        steps_to(manager, made, state)
        assert manager.state == state
        manager.shutdown(timeout=1.0)
        assert manager.state == RuntimeState.EXITED and told.states[-2:] == [RuntimeState.STOPPING, RuntimeState.EXITED]
        assert all(p.state == RuntimeState.EXITED for p in made)


def test_apply_when_ready_replaces_the_spare_in_the_background() -> None:
    manager, made, told = ready_window_manager(DeviceConfig(cpu_devices=2))
    old_spare = made[1]
    manager.apply(DeviceConfig(cpu_devices=4))
    assert manager.state == RuntimeState.STARTING and told.states[-1] == RuntimeState.STARTING
    assert manager.applied == DeviceConfig(cpu_devices=4) and manager.devices is None
    manager.shutdown(timeout=1.0)  # joins the thread that stopped the old spare
    assert old_spare.stopped and made[-1].config.cpu_devices == 4


def test_events_of_a_replaced_spare_are_dropped() -> None:
    manager, made, told = make_manager()
    manager.apply(DeviceConfig(cpu_devices=1))
    old_spare = made[1]
    manager.apply(DeviceConfig(cpu_devices=2))
    before = len(told.events)
    old_spare.warm_up()
    assert len(told.events) == before and manager.state == RuntimeState.STARTING


# -- the CLI: no spare pool --------------------------------------------------------------------------


def test_the_cli_run_starts_its_own_process_and_records_from_the_start() -> None:
    history = RunHistory()
    manager, made, told = make_manager(spares=0, history=history)
    manager.apply(DeviceConfig())
    assert made == [] and manager.state == RuntimeState.NOT_STARTED
    assert manager.run("matmul", {}) == Submission.WAITING
    (process,) = made
    process.warm_up()
    assert process.job is not None and manager.state == RuntimeState.BUSY
    process.ready(job_id=process.job[2])
    process.finish_job()
    assert len(made) == 1 and manager.state == RuntimeState.NOT_STARTED  # nothing warms after it
    outcome = told.finished[-1]
    assert outcome.status == "ok" and outcome.devices is not None
    kinds = [e.type for e in history.events(outcome.run_id)]
    assert kinds.index(events.WARM) < kinds.index(events.READY) < kinds.index(events.JOB_STARTED)


def test_the_cli_records_a_rejected_configuration() -> None:
    history = RunHistory()
    manager, made, told = make_manager(spares=0, history=history)
    manager.apply(DeviceConfig(visible_gpus=(3,)))
    manager.run("matmul", {})
    made[0].fail_startup("GPU 3 is not visible")
    outcome = told.finished[-1]
    assert outcome.status == "error" and outcome.error.type == "ConfigRejected"
    assert "GPU 3" in outcome.error.message and history.summaries()[0].status == "error"
    assert isinstance(told.events[-1], events.RuntimeExited)  # the CLI learns its process is gone


def test_the_cli_cancelled_before_the_job_started() -> None:
    manager, made, told = make_manager(spares=0, history=RunHistory())
    manager.apply(DeviceConfig())
    manager.run("matmul", {})
    assert manager.cancel_waiting()
    assert made[0].killed == "cancelled before the job started"
    assert told.finished[-1].status == "cancelled" and "cancelled before the job started" in \
        told.finished[-1].error.message


# -- run_job_once: the CLI's loop over a manager with no pool ----------------------------------------


class PlayingProcess(FakeProcess):
    """Plays its part by itself, on a thread of its own as a reader thread would: warm once started (unless
    `stays_cold`), the job finished once submitted."""

    stays_cold = False

    def start(self) -> None:
        super().start()
        if not self.stays_cold:
            threading.Thread(target=self.warm_up, name="fake-reader").start()

    def submit(self, job: str, params: Mapping[str, Any] | None = None, *, after_pid: int | None = None,
               job_id: str | None = None) -> str:
        job_id = super().submit(job, params, after_pid=after_pid, job_id=job_id)
        threading.Thread(target=self.finish_job, name="fake-reader").start()
        return job_id


def test_run_job_once_runs_records_and_returns_once_the_process_is_gone() -> None:
    seen: list[Event] = []
    outcome = run_job_once(DeviceConfig(), "matmul", {}, on_event=seen.append, history=RunHistory(),
                           process_factory=PlayingProcess)
    assert outcome.status == "ok" and outcome.result == {"kind": "text", "text": "done"}
    assert isinstance(seen[-1], events.RuntimeExited)
    kinds = [e.type for e in RunHistory().events(outcome.run_id)]
    assert kinds.index(events.WARM) < kinds.index(events.JOB_STARTED) and kinds[-1] == events.JOB_FINISHED


def test_run_job_once_cancelled_before_the_process_is_warm() -> None:
    class Cold(PlayingProcess):
        stays_cold = True

    cancel = threading.Event()
    cancel.set()
    outcome = run_job_once(DeviceConfig(), "matmul", {}, history=RunHistory(), cancel=cancel, process_factory=Cold)
    assert outcome.status == "cancelled" and "cancelled before the job started" in outcome.error.message
    assert RunHistory().summaries()[0].status == "cancelled"


def test_run_job_once_whose_process_cannot_start_says_why_and_returns() -> None:
    class Unstartable(FakeProcess):
        def start(self) -> None:
            raise FileNotFoundError(2, "No such file or directory", "python3.99")

    outcome = run_job_once(DeviceConfig(), "matmul", {}, history=RunHistory(), process_factory=Unstartable)
    assert outcome.status == "crashed"
    assert outcome.error.message.startswith("Could not start a TensorFlow process: [Errno 2]")
    assert RunHistory().summaries()[0].status == "crashed"  # never left "running"


def test_a_window_closed_on_a_killed_run_starts_no_fresh_runtime() -> None:
    """The restart after a cancel had to kill is decided when it is carried out: a shutdown heard of first wins
    (it once started a spare after the window had collected its processes, and nothing stopped it)."""
    manager, made, _ = ready_window_manager()
    manager.run("script", {})
    running, next_spare = made[1], made[2]
    next_spare.kill("by the test")  # nothing warm is left: a restart would be due
    at_shutdown: list[int] = []

    def close_on_the_kill(event: Event) -> None:
        if isinstance(event, events.RuntimeExited) and event.killed_for_cancel:
            manager.shutdown(timeout=1.0)
            at_shutdown.append(len(made))

    manager.event_sink = close_on_the_kill
    manager.cancel()
    running.kill(reason="the job did not stop within 5 s of being cancelled")
    assert at_shutdown and len(made) == at_shutdown[0], "a process was started after the shutdown"
    assert manager.state == RuntimeState.EXITED


def test_a_readers_news_is_told_on_its_own_thread_in_its_order() -> None:
    """News gathered on a process's reader thread is told by that thread only: another thread's call to the
    manager (the window's Run, the CLI's Ctrl+C) never tells it, so it can neither overtake the reader's next
    event nor reach a listener from two threads at once."""
    told_on: list[tuple[str, str]] = []
    reader_has_news, go_on = threading.Event(), threading.Event()

    class PausedReader(RunManager):
        def _flush(self) -> None:
            if threading.current_thread().name == "reader" and not reader_has_news.is_set():
                reader_has_news.set()  # its news is gathered and not yet told: another thread acts now
                assert go_on.wait(10)
            super()._flush()

    made: list[FakeProcess] = []
    manager = PausedReader(spares=1, describe=False, process_factory=fake_factory(made))
    manager.event_sink = lambda e: told_on.append((type(e).__name__, threading.current_thread().name))
    manager.session.subscribe(told_on, ProblemNotice,
                              lambda _notice: told_on.append(("problem", threading.current_thread().name)))
    manager.apply(DeviceConfig())
    reader = threading.Thread(target=made[-1].warm_up, name="reader")
    reader.start()
    assert reader_has_news.wait(10)
    manager.run("matmul", {})  # the spare is warm now: handed over on this thread
    manager.run("matmul", {})  # refused: a problem, told here
    go_on.set()
    reader.join(10)
    assert ("Warm", "reader") in told_on and ("problem", "MainThread") in told_on
    assert all(thread == "reader" for kind, thread in told_on if kind == "Warm"), told_on


# -- a client job (JobSpec.in_client: fit-batch) ----------------------------------------------------------------


def counted_lines(ctx: Any, count: int = 3) -> dict[str, object]:
    """A client job's work for these tests: a few lines, then a result; stops when cancelled."""
    for step in range(count):
        ctx.check_cancelled()
        ctx.progress(step, count, f"line {step}")
        ctx.say(f"line {step}")
    if count < 0:
        raise JobError("count: a negative count")
    return {"kind": "text", "text": f"{count} lines"}


def waits_for_its_cancel(ctx: Any) -> None:
    assert ctx.cancel_requested.wait(30), "never cancelled"
    ctx.check_cancelled()


@pytest.fixture
def client_jobs(monkeypatch: pytest.MonkeyPatch) -> None:
    from tf_device_panel.core.catalogue import JOBS, JobSpec, Param
    from tf_device_panel.core.config import Kind

    for name, entry, params in (("count", "test_run_manager:counted_lines",
                                 (Param("count", Kind.COUNT, 3, "lines", minimum=-5, maximum=100),)),
                                ("wait", "test_run_manager:waits_for_its_cancel", ())):
        monkeypatch.setitem(JOBS, name, JobSpec(name, name, name, entry, params, in_client=True))


def wait_for_end(manager: RunManager) -> JobOutcome:
    run = manager.job_run
    assert run is not None
    wait_until(lambda: run.finished and manager.state != RuntimeState.BUSY, timeout=30,
               message=lambda: f"the manager is {manager.state}")
    return run.outcome


def test_a_client_job_runs_beside_the_warm_spare_which_stays_for_the_next_job(client_jobs: None) -> None:
    manager, made, told = ready_window_manager()
    spare = manager.spare
    assert manager.run("count", {"count": 2}) == Submission.STARTED
    outcome = wait_for_end(manager)
    assert outcome.status == "ok" and outcome.result == {"kind": "text", "text": "2 lines"}
    assert [e.text for e in told.events if isinstance(e, events.Log)] == ["line 0", "line 1"]
    assert len(made) == 2 and manager.spare is spare and spare.job is None  # no run process started or used
    assert manager.state == RuntimeState.READY and told.started == ["count"]
    assert manager.run("matmul", {}) == Submission.STARTED and spare.job is not None  # the spare takes the next


def test_a_client_job_is_cancelled_and_its_failure_is_its_outcome(client_jobs: None) -> None:
    manager, _, told = ready_window_manager()
    assert manager.run("wait", {}) == Submission.STARTED
    wait_until(lambda: manager.running, timeout=10)
    assert manager.cancel()
    assert wait_for_end(manager).status == "cancelled"
    assert manager.run("count", {"count": -1}) == Submission.STARTED
    failed = wait_for_end(manager)
    assert failed.status == "error" and failed.error is not None and failed.error.message == "count: a negative count"
    assert manager.run("count", {"count": "many"}) == Submission.STARTED  # its parameters checked as any job's
    refused = wait_for_end(manager)
    assert refused.status == "error" and refused.error is not None and "count" in refused.error.message
    assert not any(isinstance(e, events.RuntimeExited) and not e.expected for e in told.events)


def test_the_command_lines_client_job_starts_no_process(client_jobs: None) -> None:
    def no_process(config: DeviceConfig, on_event: Callable[[Event], None]) -> FakeProcess:
        raise AssertionError("a client job started a run process")

    seen: list[Event] = []
    outcome = run_job_once(DeviceConfig(), "count", {"count": 1}, on_event=seen.append, process_factory=no_process)
    assert outcome.status == "ok" and outcome.result == {"kind": "text", "text": "1 lines"}
    assert isinstance(seen[-1], events.RuntimeExited) and seen[-1].expected


def test_a_client_jobs_events_go_on_after_a_listener_fails(client_jobs: None) -> None:
    from tf_device_panel.core.client.client_job import ClientJob

    seen: list[Event] = []

    def failing_on_logs(event: Event) -> None:
        seen.append(event)
        if isinstance(event, events.Log):
            raise RuntimeError("a listener's bug")

    job = ClientJob(DeviceConfig(), on_event=failing_on_logs)
    job.start()
    job.submit("count", {"count": 2})
    wait_until(lambda: job.state == RuntimeState.EXITED, timeout=10, message=lambda: f"the job is {job.state}")
    assert [type(e).__name__ for e in seen][-3:] == ["Result", "JobFinished", "RuntimeExited"]
    assert [e.text for e in seen if isinstance(e, events.Log)] == ["line 0", "line 1"]


def test_a_client_job_killed_before_its_job_never_takes_one_and_says_why(client_jobs: None) -> None:
    from tf_device_panel.core.client.client_job import ClientJob
    from tf_device_panel.core.client.runtime import RuntimeUnavailable

    seen: list[Event] = []
    job = ClientJob(DeviceConfig(), on_event=seen.append)
    job.start()
    job.kill(reason="Ctrl+C before the job was handed over")
    with pytest.raises(RuntimeUnavailable):
        job.submit("count", {})
    job.stop(timeout=10)
    assert job.state == RuntimeState.EXITED
    assert isinstance(seen[-1], events.RuntimeExited) and not seen[-1].expected
    assert not any(isinstance(e, events.JobStarted) for e in seen)


def test_a_client_job_waits_for_the_last_runs_process_to_exit(client_jobs: None) -> None:
    import subprocess
    import sys

    from tf_device_panel.core.client.client_job import ClientJob

    # The last run's process lives until its stdin closes: the test ends it once the job has said it waits.
    last_run = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    assert last_run.stdin is not None
    seen: list[Event] = []
    job = ClientJob(DeviceConfig(), on_event=seen.append)
    job.start()
    job.submit("count", {"count": 1}, after_pid=last_run.pid)
    try:
        wait_until(lambda: any(isinstance(e, events.Log) for e in seen), timeout=30, message="the job said nothing")
        first_line = next(e for e in seen if isinstance(e, events.Log))
        assert first_line.text == f"waiting for the previous run's process (pid {last_run.pid}) to exit"
        assert job.state == RuntimeState.BUSY and not any(isinstance(e, events.Progress) for e in seen)
        last_run.stdin.close()
        wait_until(lambda: job.state == RuntimeState.EXITED, timeout=30, message=lambda: f"the job is {job.state}")
        assert [e.text for e in seen if isinstance(e, events.Log)][1:] == ["line 0"]
    finally:
        last_run.kill()
        last_run.wait()


def test_the_status_of_a_running_client_job_names_no_pid(client_jobs: None) -> None:
    manager, _, _ = ready_window_manager()
    assert manager.run("wait", {}) == Submission.STARTED
    wait_until(lambda: manager.running, timeout=10)
    assert manager._status_text() == "running wait (in the panel's process; its runs are processes of their own)"
    manager.cancel()
    wait_for_end(manager)
