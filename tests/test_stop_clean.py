"""Stop during a fit prints none of the panel's internals and stops at once (issue 33, item 3).

TensorFlow's ConcreteFunctionGarbageCollector.__del__ runs often during a fit; a Ctrl+C that lands in it was
printed as "Exception ignored in: <function ConcreteFunctionGarbageCollector.__del__…> … runtime_main.py … in
interrupted … KeyboardInterrupt" and then lost, so the fit ran on. Here a real process gets a real SIGINT while
it is inside a `__del__`, with the run process's own handler installed."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from helpers import collect_job, events_until, of_type, progress_at_least
from tf_device_panel.core.client.runtime import RuntimeProcess
from tf_device_panel.core.protocol import events

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


SIGINT_BIT = 1 << (2 - 1)  # SIGINT in /proc's signal masks


def blocks_sigint(status_file: Path) -> bool:
    for line in status_file.read_text().splitlines():
        if line.startswith("SigBlk:"):
            return bool(int(line.split()[1], 16) & SIGINT_BIT)
    raise AssertionError(f"no SigBlk line in {status_file}")


def test_during_a_built_in_job_no_thread_takes_sigint_from_the_kernel_and_ctrl_c_still_stops_it(
        three_cpus: RuntimeProcess) -> None:
    """Ctrl+C delivered by the kernel interrupted whichever thread took it in the middle of a system call (the main
    thread waiting inside TensorFlow's C++ on the custom loop's step, or a thread of TensorFlow's): the process
    died by SIGSEGV in about one cancel in thirty (CI, 2026-11-27). Every thread blocks SIGINT; one of ours waits
    for it and raises KeyboardInterrupt on the main thread."""
    job_id = three_cpus.submit("custom-loop", {"steps": 1_000_000})
    seen = events_until(three_cpus, progress_at_least(1), timeout=90)
    pid = three_cpus.pid
    assert pid is not None
    threads = list(Path(f"/proc/{pid}/task").glob("*/status"))
    assert len(threads) > 3  # TensorFlow's pools, the waiter
    unblocked = []
    for status in threads:
        try:  # a thread that ended since it was listed is left out
            if not blocks_sigint(status):
                unblocked.append((status.parent / "comm").read_text().strip())
        except FileNotFoundError:
            continue
    assert unblocked == ["ctrl-c"]  # the one that waits for it (sigwait unblocks what it waits for)

    three_cpus.cancel(grace=20)
    seen += collect_job(three_cpus, job_id, timeout=60)
    assert of_type(seen, events.JOB_FINISHED)[0].status == "cancelled"
    assert three_cpus.exited is not None and not three_cpus.exited.killed_for_cancel


def test_our_child_processes_take_sigint_again_whatever_their_parent_blocked(tmp_path: Path) -> None:
    """A signal mask passes through fork and exec: a built-in job's cluster tasks and fit-batch's runs, started
    with SIGINT blocked, would never get their Ctrl+C."""
    (tmp_path / "report_mask.py").write_text(
        "print(next(line for line in open('/proc/self/status') if line.startswith('SigBlk:')).split()[1])\n")
    parent = textwrap.dedent(f"""
        import signal, subprocess
        from tf_device_panel.core.processes import start_module
        signal.pthread_sigmask(signal.SIG_BLOCK, {{signal.SIGINT}})
        child = start_module("report_mask", env={{"PYTHONPATH": {str(tmp_path)!r}}}, stdout=subprocess.PIPE)
        print(child.communicate(timeout=60)[0].decode().strip())
    """)
    done = subprocess.run([sys.executable, "-c", parent], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert not int(done.stdout.strip(), 16) & SIGINT_BIT


def test_a_cancel_before_the_job_begins_ends_it_cancelled(three_cpus: RuntimeProcess) -> None:
    """Stop pressed the moment a built-in job is handed over: its SIGINT waits, blocked, while the run process reads
    the command and TensorFlow initializes, and is taken before the job begins. That run ends cancelled, by the
    signal, as a bare process would (a KeyboardInterrupt raised outside the job's own handling crashed it)."""
    job_id = three_cpus.submit("matmul", {})
    three_cpus.cancel(grace=20)
    seen = collect_job(three_cpus, job_id, timeout=60)
    assert of_type(seen, events.JOB_FINISHED)[0].status == "cancelled"
    assert three_cpus.exited is not None and not three_cpus.exited.killed_for_cancel
