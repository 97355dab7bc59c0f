"""What a job sees: progress reports that are rate-limited but never lose the last word. (Cancelling is
Ctrl+C in the run's own process now: tests/test_runtime.py and tests/test_script_fidelity.py.)"""

from __future__ import annotations

import threading

from helpers import wait_until
from tf_device_panel.core.protocol import events
from tf_device_panel.core.runproc.jobs.context import PROGRESS_INTERVAL_S, JobContext


def test_a_report_too_soon_is_held_and_sent_when_its_turn_comes() -> None:
    sent: list[events.Event] = []
    ctx = JobContext("job", sent.append)
    ctx.progress(0, 2, "starting the cluster")
    ctx.progress(1, 2, "training")  # at once: held, not dropped
    ctx.progress(1, 2, "training, really")  # replaces the held one
    assert [e.message for e in sent] == ["starting the cluster"]
    wait_until(lambda: len(sent) == 2, timeout=10, message="the held report was never sent")
    assert [e.message for e in sent] == ["starting the cluster", "training, really"]
    ctx.progress(2, 2, "done")  # the last step always goes out at once
    assert sent[-1].message == "done"


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
    assert [e.message for e in sent] == ["step 0"]


def test_tensorflows_error_loses_the_python_stack_it_repeats_and_keeps_its_node_and_message() -> None:
    from tf_device_panel.core.text import tf_error_text

    # as TensorFlow 2.21 words a failed tf.function (a gather past the end)
    said = ('Graph execution error:\n\nDetected at node GatherV2 defined at (most recent call last):\n  File '
            '"<string>", line 7, in <module>\n\n  File "<string>", line 5, in f\n\nindices[0] = 5 is not in [0, 3)\n'
            '\t [[{{node GatherV2}}]] [Op:__inference_f_8]')
    assert tf_error_text(said) == "at node GatherV2: indices[0] = 5 is not in [0, 3)"
    assert tf_error_text("plain\nerror") == "plain error"
    assert tf_error_text(None) == ""
    assert len(tf_error_text("x" * 1000, limit=50)) == 50
