"""What a job sees: progress reports that are rate-limited but never lose the last word, and cancelling
code that never checks (JobCancelled lands inside `interruptible` and nowhere else)."""

from __future__ import annotations

import random
import sys
import threading
import time

from helpers import wait_until
from tf_device_panel.core import events
from tf_device_panel.core.jobs.context import PROGRESS_INTERVAL_S, JobCancelled, JobContext


def spin(seconds: float) -> None:
    """Busy Python code: an asynchronous exception can land at any point in it."""
    end = time.perf_counter() + seconds
    steps = 0
    while time.perf_counter() < end:
        steps += 1


def context() -> JobContext:
    return JobContext("job", lambda event: None)


def test_a_report_too_soon_is_held_and_sent_when_its_turn_comes() -> None:
    sent: list[events.Event] = []
    ctx = JobContext("job", sent.append)
    ctx.progress(0, 2, "starting the cluster")
    ctx.progress(1, 2, "training")  # at once: held, not dropped
    ctx.progress(1, 2, "training, really")  # replaces the held one
    assert [e.data["message"] for e in sent] == ["starting the cluster"]
    wait_until(lambda: len(sent) == 2, timeout=10, message="the held report was never sent")
    assert [e.data["message"] for e in sent] == ["starting the cluster", "training, really"]
    ctx.progress(2, 2, "done")  # the last step always goes out at once
    assert sent[-1].data["message"] == "done"


def test_a_held_report_never_follows_the_jobs_end() -> None:
    sent: list[events.Event] = []
    threads_before = set(threading.enumerate())
    ctx = JobContext("job", sent.append)
    ctx.progress(0, 10, "step 0")
    ctx.progress(1, 10, "step 1")  # held, on a timer of PROGRESS_INTERVAL_S
    ctx.finish()
    # Once the timer's thread has ended, nothing can send any more: if finish() did not cancel the held
    # report, it has been sent by then and the assertion below sees it.
    wait_until(lambda: not set(threading.enumerate()) - threads_before, timeout=10,
               message=f"the held report's timer ({PROGRESS_INTERVAL_S} s) never ended")
    assert [e.data["message"] for e in sent] == ["step 0"]


def test_interrupt_lands_inside_the_window() -> None:
    ctx, outcome = context(), []
    inside = threading.Event()

    def job() -> None:
        try:
            with ctx.interruptible():
                inside.set()
                spin(60)  # far longer than the test waits: only the interrupt ends it
        except JobCancelled:
            outcome.append("cancelled")

    thread = threading.Thread(target=job, daemon=True)
    thread.start()
    assert inside.wait(5)
    assert ctx.interrupt()
    thread.join(5)
    assert outcome == ["cancelled"]
    assert not ctx.interrupt()  # once per job


def test_interrupt_outside_the_window_does_nothing() -> None:
    ctx = context()
    assert not ctx.interrupt()  # no window open yet
    with ctx.interruptible():
        spin(0.001)
    assert not ctx.interrupt()
    spin(0.05)  # nothing was scheduled for this thread


def test_the_runtimes_reporting_after_the_window_is_never_hit() -> None:
    """The race that killed a job's thread after it had stopped: the interrupt fires as the window closes."""
    switch_interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-4)  # both threads really interleave, not in 5 ms turns
    try:
        run_the_race(random.Random(7))
    finally:
        sys.setswitchinterval(switch_interval)


def run_the_race(rng: random.Random) -> None:
    for _ in range(200):
        ctx, outcome, reported = context(), [], []

        def job(ctx: JobContext = ctx, outcome: list = outcome, reported: list = reported) -> None:
            try:
                with ctx.interruptible():
                    spin(rng.uniform(0, 0.002))
            except JobCancelled:
                outcome.append("cancelled")
            else:
                outcome.append("finished")
            spin(0.003)  # stands for the runtime's fence and closing events
            reported.append(True)

        thread = threading.Thread(target=job, daemon=True)
        thread.start()
        time.sleep(rng.uniform(0, 0.003))  # sleeping lets the job's thread run meanwhile
        ctx.interrupt()
        thread.join(5)
        # Whichever way the race went, the job's thread reported: an interrupt that landed after the
        # window would have killed it before `reported`. (That both ways are handled is shown without a
        # race by test_interrupt_lands_inside_the_window and test_interrupt_outside_the_window_does_nothing.)
        assert len(outcome) == 1 and outcome[0] in ("cancelled", "finished") and reported == [True]
