"""Issue 43 item 3: a zygote that dies or stops takes no run with it. SIGKILL of the zygote leaves the running job
and the idle spare going (the job ends with its own status); the dead zygote is reaped at once (no zombie) and
restarted, after a backoff when it keeps dying, and the state says so; a SIGSTOPped zygote never holds up a run's
start (it starts by hand at once) nor ends the run forked from it. Real zygotes, real TensorFlow processes."""

from __future__ import annotations

import contextlib
import os
import select
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import psutil
import pytest
from helpers import collect_job, events_until, of_type, output_line, output_lines, process_gone, wait_until
from tf_device_panel.core.client import zygote
from tf_device_panel.core.client.history import RunHistory
from tf_device_panel.core.client.run_manager import RunManager, Submission
from tf_device_panel.core.client.runtime import READY, RuntimeProcess
from tf_device_panel.core.client.session import ProblemNotice
from tf_device_panel.core.config import DeviceConfig
from tf_device_panel.core.protocol import events


def the_zygote() -> zygote.Zygote:
    ready = [z for z in zygote._zygotes if z.error is None and z.ready()]
    assert ready, "no zygote is ready"
    return ready[-1]


def others(one: zygote.Zygote, *also: zygote.Zygote) -> list[zygote.Zygote]:
    """The zygotes for `one`'s environment but `one` (and `also`)."""
    gone = {one.process_id, *(z.process_id for z in also)}
    return [z for z in zygote._zygotes if z.key == one.key and z.process_id not in gone]


def reaped(pid: int) -> bool:
    """Gone from the process table: not even a zombie."""
    return not os.path.exists(f"/proc/{pid}")


@pytest.fixture
def ready_zygote() -> Iterator[zygote.Zygote]:
    first = RuntimeProcess(DeviceConfig())
    first.start()
    first.stop()
    assert zygote.wait_until_ready(180), "the zygote did not import TensorFlow"
    one = the_zygote()
    yield one
    with contextlib.suppress(ProcessLookupError):
        os.kill(one.process_id, signal.SIGCONT)
    with zygote._zygotes_lock:
        zygote._streaks.clear()  # the next test's deaths count from none


def waiting_script(tmp_path: Path, status: int) -> tuple[Path, Path]:
    flag = tmp_path / "go-on"
    path = tmp_path / f"waits_{status}.py"
    path.write_text(f"import os, sys, time\nprint('waiting', flush=True)\nwhile not os.path.exists({str(flag)!r}):\n"
                    f"    time.sleep(0.05)\nprint('done', flush=True)\nsys.exit({status})\n")
    return path, flag


def test_a_running_job_and_the_idle_spare_survive_the_zygotes_sigkill(ready_zygote: zygote.Zygote,
                                                                      tmp_path: Path) -> None:
    path, flag = waiting_script(tmp_path, 5)
    running = RuntimeProcess(DeviceConfig())
    spare = RuntimeProcess(DeviceConfig())
    try:
        running.start()
        running.wait_ready()
        spare.start()
        spare.wait_ready()
        assert running.forked and spare.forked
        job_id = running.submit("script", {"path": str(path)})
        events_until(running, output_line("waiting"), timeout=60)
        os.kill(ready_zygote.process_id, signal.SIGKILL)
        wait_until(lambda: reaped(ready_zygote.process_id), 30, "the dead zygote was not reaped (a zombie)")
        flag.write_text("")
        seen = collect_job(running, job_id)
        (finished,) = of_type(seen, events.JOB_FINISHED)
        assert finished.status == "error" and finished.returncode == 5, finished  # the script's own end
        assert running.exited is not None and running.exited.returncode == 5 and running.exited.signal is None
        assert "done" in [e.text for e in seen if isinstance(e, events.Log)]
        # The spare forked before the death is still warm and takes a job.
        assert spare.state == READY
        spare_job = spare.submit("script", {"path": str(waiting_script(tmp_path, 0)[0])})
        (spare_finished,) = of_type(collect_job(spare, spare_job), events.JOB_FINISHED)
        assert spare_finished.status == "ok"
    finally:
        running.stop()
        spare.stop()
    # Restarted at once (it had lived long enough), and the next run forks from the new one.
    wait_until(lambda: any(z.ready() for z in others(ready_zygote)), 180, "the zygote was not restarted")
    after = RuntimeProcess(DeviceConfig())
    after.start()
    try:
        after.wait_ready()
        assert after.forked
    finally:
        after.stop()


def test_a_zygote_that_keeps_dying_is_restarted_after_a_backoff_and_the_state_says_so(
        ready_zygote: zygote.Zygote, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(zygote, "STEADY_S", 3600.0)  # every death here counts as a quick one
    heard: list[str] = []
    zygote.hub.subscribe(heard, zygote.ZygoteDied, lambda died: heard.append(died.text))
    os.kill(ready_zygote.process_id, signal.SIGKILL)
    wait_until(lambda: others(ready_zygote), 30, "the zygote was not restarted at once")
    (restarted,) = others(ready_zygote)
    assert reaped(ready_zygote.process_id)
    assert "was killed by SIGKILL" in heard[0] and "restarted now" in heard[0]
    os.kill(restarted.process_id, signal.SIGKILL)  # dies again while it imports TensorFlow
    wait_until(lambda: len(heard) == 2, 30, "the second death was not told")
    assert "restarted in 2 s (2 deaths in a row)" in heard[1]
    state = zygote.state_text()
    assert state is not None and state.startswith("zygote was killed by SIGKILL; restarting"), state
    wait_until(lambda: reaped(restarted.process_id), 30, "the second zygote was not reaped")
    # While it waits, runs start by hand at once (not forked, not refused).
    by_hand = RuntimeProcess(DeviceConfig())
    by_hand.start()
    by_hand.stop()
    assert not by_hand.forked
    wait_until(lambda: any(z.ready() for z in others(ready_zygote, restarted)), 240,
               "the zygote was not restarted after its backoff")
    assert zygote.state_text() is None
    zygote.hub.unsubscribe_all(heard)


def test_a_stopped_zygote_holds_up_no_run_and_ends_none(ready_zygote: zygote.Zygote, tmp_path: Path) -> None:
    path, flag = waiting_script(tmp_path, 0)
    running = RuntimeProcess(DeviceConfig())
    try:
        running.start()
        running.wait_ready()
        assert running.forked
        job_id = running.submit("script", {"path": str(path)})
        events_until(running, output_line("waiting"), timeout=60)
        os.kill(ready_zygote.process_id, signal.SIGSTOP)
        wait_until(ready_zygote.stopped, 10, "the zygote did not stop")
        # Run pressed now: the next process starts at once, by hand (the old code waited 5 s for the zygote).
        pressed = RuntimeProcess(DeviceConfig())
        began = time.monotonic()
        pressed.start()
        took = time.monotonic() - began
        try:
            assert not pressed.forked
            assert took < zygote.REPLY_TIMEOUT_S, f"starting a run waited {took:.1f} s on a stopped zygote"
            pressed.wait_ready()
            flag.write_text("")
            pressed_job = pressed.submit("script", {"path": str(path)})
            (pressed_finished,) = of_type(collect_job(pressed, pressed_job), events.JOB_FINISHED)
            assert pressed_finished.status == "ok"
        finally:
            pressed.stop()
        # The run forked from the stopped zygote goes on to its own end.
        (finished,) = of_type(collect_job(running, job_id), events.JOB_FINISHED)
        assert finished.status == "ok" and finished.returncode == 0
    finally:
        running.stop()
    # The stopped zygote was replaced: killed, reaped and restarted.
    wait_until(lambda: reaped(ready_zygote.process_id), 30, "the stopped zygote was not replaced and reaped")
    wait_until(lambda: any(z.ready() for z in others(ready_zygote)), 180, "the zygote was not restarted")


def test_run_pressed_after_the_zygote_died_starts_the_job(ready_zygote: zygote.Zygote, tmp_path: Path) -> None:
    """The window's own path (the run manager): the zygote dies during a run; the run ends as its script does, and
    the next Run is taken by the spare at once — never "not listening (Broken pipe)", never "busy"."""
    path, flag = waiting_script(tmp_path, 5)
    quick = tmp_path / "quick.py"
    quick.write_text("print('quick', flush=True)\n")
    problems: list[str] = []
    manager = RunManager(RunHistory(), spares=1, describe=False)
    manager.session.subscribe(problems, ProblemNotice, lambda notice: problems.append(notice.text))
    try:
        manager.apply(DeviceConfig())
        wait_until(lambda: manager.state == READY, 180, lambda: f"the manager is {manager.state}: {problems}")
        assert manager.run("script", {"path": str(path)}) == Submission.STARTED
        running, first = manager.current, manager.job_run
        assert running is not None and running.forked and first is not None
        wait_until(lambda: "waiting" in running.recent_lines(), 60, "the script did not start")
        os.kill(ready_zygote.process_id, signal.SIGKILL)
        wait_until(lambda: any("zygote" in problem for problem in problems), 30, "the zygote's death was not told")
        flag.write_text("")
        wait_until(lambda: first.finished, 60, "the run did not end")
        assert first.outcome.status == "error" and first.outcome.returncode == 5, first.outcome
        wait_until(lambda: manager.state == READY, 60, lambda: f"the manager is {manager.state}")
        assert manager.run("script", {"path": str(quick)}) == Submission.STARTED
        second = manager.job_run
        assert second is not None and second is not first
        wait_until(lambda: second.finished, 60, "the next run did not end")
        assert second.outcome.status == "ok"
    finally:
        manager.shutdown()
    assert not [p for p in problems if "Broken pipe" in p or "busy" in p or "not listening" in p], problems


def test_a_fork_answered_too_late_shares_nothing_with_the_run_started_by_hand(
        ready_zygote: zygote.Zygote, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The zygote forked the run's supervisor but its answer came after REPLY_TIMEOUT_S (a TensorFlow-sized fork on
    a loaded machine): the zygote is replaced and the run starts by hand, on pipes of its own. The late fork ends
    without running anything; the job runs in the one process started by hand, its output arrives, Stop stops it,
    and no process is left."""
    late_forks: list[int] = []
    real_select = select.select

    def answer_too_late(readable: list[Any], writable: list[Any], errors: list[Any],
                        timeout: float | None = None) -> tuple[list[Any], list[Any], list[Any]]:
        if readable == [ready_zygote._sock] and timeout == zygote.REPLY_TIMEOUT_S:
            # The answer is waited for, and the supervisor it forked for the start of its run process (past
            # writing the zygote's import output), then taken as having come too late.
            assert real_select(readable, [], [], 120)[0], "the zygote did not answer the fork"
            # The newest child: on a loaded machine an earlier fork (the warm spare's) may still be ending.
            supervisor = max(psutil.Process(ready_zygote.process_id).children(), key=lambda child: child.create_time())
            wait_until(supervisor.children, 60, "the late supervisor started no run process")
            late_forks.append(supervisor.pid)
            return [], [], []
        return real_select(readable, writable, errors, timeout)

    monkeypatch.setattr(zygote, "select", SimpleNamespace(select=answer_too_late))
    path = tmp_path / "forever.py"
    path.write_text("import os, time\nprint('running in', os.getpid(), flush=True)\nwhile True:\n"
                    "    time.sleep(0.05)\n")
    runtime = RuntimeProcess(DeviceConfig())
    runtime.start()
    monkeypatch.undo()
    try:
        assert late_forks, "the zygote forked no supervisor"
        assert not runtime.forked and ready_zygote.replaced
        runtime.wait_ready()
        # The late fork finds its commands pipe at its end and goes, with the run process it may have forked.
        late = set(late_forks)
        for pid in late_forks:
            with contextlib.suppress(psutil.NoSuchProcess):
                late.update(child.pid for child in psutil.Process(pid).children(recursive=True))
        wait_until(lambda: all(process_gone(pid) for pid in late), 60,
                   lambda: f"the late fork lives on: {[pid for pid in late if not process_gone(pid)]}")
        job_id = runtime.submit("script", {"path": str(path)})
        seen = events_until(runtime, lambda e: isinstance(e, events.Log) and e.text.startswith("running in"), 60)
        by_hand = psutil.Process(runtime.supervisor_pid).children(recursive=True)
        assert output_lines(seen) == [f"running in {runtime.pid}"] and runtime.pid in [p.pid for p in by_hand]
        runtime.cancel()
        (finished,) = of_type(collect_job(runtime, job_id), events.JOB_FINISHED)
        assert finished.status == "cancelled", finished
    finally:
        runtime.stop()
    assert runtime.pid is not None and process_gone(runtime.pid)
    assert all(process_gone(pid) for pid in late)


def test_a_manager_dropped_without_shutdown_is_not_kept_by_the_zygotes_hub() -> None:
    """The zygotes' hub lives as long as the process; a RunManager it held strongly (the issue's review: a manager
    never shut down stayed subscribed, and alive) is now held weakly and leaves no subscription behind."""
    import gc
    import weakref

    from tf_device_panel.core.client.run_manager import RunManager

    manager = RunManager(spares=1)
    subscription = manager._zygote_subscription
    assert subscription is not None and subscription.active
    dropped = weakref.ref(manager)
    del manager
    gc.collect()
    assert dropped() is None, "something still holds the manager"
    assert not subscription.active
