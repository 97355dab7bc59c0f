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
