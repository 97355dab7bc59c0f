"""A cluster task killed by a crash signal: the job says where it crashed, from Python's fault handler (which
every cluster task enables), and whether a core dump could be written. Real crashing processes, no TensorFlow."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import threading

import pytest
from tf_device_panel.core.catalogue import JobError
from tf_device_panel.core.runproc.cluster import Task, TaskFailed
from tf_device_panel.core.runproc.jobs.cluster_jobs import _run_cluster, crash_report

NATIVE_THREAD = """
    import ctypes, faulthandler, signal
    faulthandler.enable(all_threads=True)
    libc = ctypes.CDLL(None)
    thread = ctypes.c_ulong()
    libc.pthread_create(ctypes.byref(thread), None, ctypes.c_void_p(8), None)  # a C thread jumps to address 8
    signal.pause()  # the task's main thread waits; the C thread's SIGSEGV ends the process (run's timeout: 60 s)
"""
PYTHON_THREAD = """
    import ctypes, faulthandler
    faulthandler.enable(all_threads=True)
    def read_address_zero():
        ctypes.string_at(0)
    read_address_zero()
"""


def crashed_task(code: str) -> Task:
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=60)
    assert done.returncode == -signal.SIGSEGV, done
    task = Task("chief:0", "ps-coordinator", {})
    task.last_lines.extend(["step 3: loss 0.5", *done.stderr.splitlines()])
    return task


def test_a_crash_in_a_thread_python_does_not_run_is_named_native() -> None:
    report = crash_report(crashed_task(NATIVE_THREAD))
    assert "chief:0 crashed in a thread Python does not run" in report and "not in this panel's code" in report
    assert "Fatal Python error: Segmentation fault" in report and "core" in report


def test_a_crash_in_a_python_thread_names_the_line() -> None:
    report = crash_report(crashed_task(PYTHON_THREAD))
    assert "crashed in a Python thread at File" in report and "read_address_zero" in report


class FakeCluster:
    def __init__(self, task: Task):
        self.task = task

    def wait(self, *args: object, **kwargs: object) -> None:
        raise TaskFailed(self.task, "was killed by SIGSEGV")


class Context:
    cancel_requested = threading.Event()


def test_the_job_error_carries_the_crash_report(monkeypatch: pytest.MonkeyPatch) -> None:
    task = crashed_task(NATIVE_THREAD)
    task.process = subprocess.Popen([sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGSEGV)"])
    task.process.wait()
    with pytest.raises(JobError) as caught:
        _run_cluster(Context(), FakeCluster(task), [task], [], 10, "parameter-server training")
    message = str(caught.value)
    assert message.startswith("parameter-server training failed: chief:0 was killed by SIGSEGV")
    assert "TensorFlow's C++ or gRPC threads" in message
