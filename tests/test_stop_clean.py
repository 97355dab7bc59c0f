"""Stop during a fit prints none of the panel's internals and stops at once (issue 33, item 3).

TensorFlow's ConcreteFunctionGarbageCollector.__del__ runs often during a fit; a Ctrl+C that lands in it was
printed as "Exception ignored in: <function ConcreteFunctionGarbageCollector.__del__…> … runtime_main.py … in
interrupted … KeyboardInterrupt" and then lost, so the fit ran on. Here a real process gets a real SIGINT while
it is inside a `__del__`, with the run process's own handler installed."""

from __future__ import annotations

import subprocess
import sys
import textwrap

CHILD = textwrap.dedent("""
    import os, signal, sys, time
    from tf_device_panel.core.config import DeviceConfig
    from tf_device_panel.core.runproc.runtime_main import Run

    run = Run(lambda event: None, DeviceConfig(), "job-1", "{job}", {{}})
    signal.signal(signal.SIGINT, run.interrupted)

    class Collected:
        def __del__(self):
            os.kill(os.getpid(), signal.SIGINT)  # Stop, while a finalizer runs
            until = time.monotonic() + 0.2
            while time.monotonic() < until:
                pass

    try:
        Collected()  # freed at once: its __del__ runs here
        until = time.monotonic() + 10
        while time.monotonic() < until:
            pass
        print("the job ran on", flush=True)
    except KeyboardInterrupt:
        print("stopped at once" if run.context.cancel_requested.is_set() else "no flag", flush=True)
""")


def run_child(job: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", CHILD.format(job=job)], capture_output=True, text=True, timeout=60)


def test_a_stop_that_lands_in_a_finalizer_stops_the_job_and_prints_nothing() -> None:
    child = run_child("fit")
    assert child.stdout.strip() == "stopped at once", child.stderr
    assert "Exception ignored" not in child.stderr and "runtime_main" not in child.stderr, child.stderr
    assert child.stderr == ""


def test_a_users_script_gets_ctrl_c_as_bare_python_gives_it() -> None:
    """A script's own finalizer interrupted: Python's own message and behaviour, as in a terminal."""
    child = run_child("script")
    assert "Exception ignored" in child.stderr and "KeyboardInterrupt" in child.stderr


def test_ctrl_c_inside_a_context_managers_exit_is_a_cancel_not_an_error() -> None:
    """Ctrl+C landed inside TensorFlow's device scope's `__exit__`, whose own check then raised "Exiting device
    scope without proper scope nesting" from the KeyboardInterrupt: the stopped custom-loop job was reported as an
    error (1 cancel in 12; a stress run). A failure raised from a cancel, once cancel was asked, is the cancel; one
    with no cancel behind it is still the job's error."""
    import signal

    from tf_device_panel.core.config import DeviceConfig
    from tf_device_panel.core.protocol import events
    from tf_device_panel.core.runproc import runtime_main

    def stopped_in_an_exit() -> None:
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt:
            raise RuntimeError("Exiting device scope without proper scope nesting") from None

    def failing() -> None:
        raise RuntimeError("Exiting device scope without proper scope nesting")

    sigint = signal.getsignal(signal.SIGINT)
    finished = []
    try:
        for cancelled, job in ((True, stopped_in_an_exit), (False, stopped_in_an_exit), (True, failing)):
            sent: list[events.Event] = []
            run = runtime_main.Run(sent.append, DeviceConfig(), "job-1", "custom-loop", {})
            if cancelled:
                run.context.cancel_requested.set()
            run.conclude(job)
            (end,) = [event for event in sent if isinstance(event, events.JobFinished)]
            finished.append(end.status)
    finally:
        signal.signal(signal.SIGINT, sigint)  # a run ignores Ctrl+C once its job is over
    # `from None` hides the KeyboardInterrupt from the traceback, not from __context__: still the cancel
    assert finished == ["cancelled", "error", "error"]
