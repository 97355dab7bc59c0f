"""Run processes with real TensorFlow on CPU: a warm spare, one job per process, cancel as Ctrl+C, no leftovers.
Logical CPUs stand in for several devices."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from helpers import (
    collect_job,
    events_until,
    of_type,
    output_line,
    output_lines,
    process_gone,
    progress_at_least,
    wait_until,
)
from tf_device_panel.core.client.runtime import (
    EXITED,
    READY,
    ConfigurationRejected,
    DeviceDescriptions,
    RuntimeProcess,
    RuntimeUnavailable,
    describe_devices,
)
from tf_device_panel.core.config import DeviceConfig
from tf_device_panel.core.protocol import events


def placed_devices(seen: list, op_type: str) -> set[str]:
    return {e.short_device for e in of_type(seen, events.PLACEMENT) if e.op_type == op_type}


def _script(tmp_path: Path, body: str, name: str = "user_script.py") -> str:
    path = tmp_path / name
    path.write_text(textwrap.dedent(body))
    return str(path)


def test_a_spare_is_configured_but_not_initialized_and_leaves_quietly(start_runtime) -> None:
    runtime = start_runtime(DeviceConfig(cpu_devices=2))
    warm = runtime.wait_ready()
    assert runtime.state == READY and warm.pid == runtime.pid != runtime.supervisor_pid
    assert "set_log_device_placement(True)" in warm.applied and warm.tf_version.startswith("2.")
    assert [d["device_type"] for d in warm.physical] == ["CPU"]
    assert "logical" not in warm.payload()  # listing logical devices would have initialized TensorFlow
    runtime.stop()
    assert runtime.wait_exited(10)
    assert runtime.exited is not None and runtime.exited.returncode == 0 and runtime.exited.expected


def test_a_describe_run_lists_the_logical_devices_and_is_cached() -> None:
    config = DeviceConfig(cpu_devices=2)
    descriptions = DeviceDescriptions()
    info, _ = describe_devices(config, descriptions=descriptions)
    assert [d["short_name"] for d in info.logical] == ["/CPU:0", "/CPU:1"]
    assert info.logical[1]["name"] == "/job:localhost/replica:0/task:0/device:CPU:1"
    assert describe_devices(config, descriptions=descriptions)[0] is info  # the same answer: no second run
    assert DeviceDescriptions().get(config) is None  # a cache of its owner's, not the process's


def test_matmul_result_placements_then_exit(three_cpus: RuntimeProcess) -> None:
    job_id = three_cpus.submit("matmul", {"device": "/CPU:2"})
    seen = collect_job(three_cpus, job_id)
    (result,) = of_type(seen, events.RESULT)
    assert result.result["matrix"] == [[22, 28], [49, 64]]
    assert result.result["device"].endswith("device:CPU:2")
    assert placed_devices(seen, "MatMul") == {"/CPU:2"}
    (ready,) = of_type(seen, events.READY)  # the run's own initialization, before the job
    assert ready.job_id == job_id and len(ready.logical) == 3
    # every line the job printed arrives before its result
    assert max(seen.index(e) for e in of_type(seen, events.PLACEMENT)) < seen.index(result)
    finished = seen[-1]
    assert isinstance(finished, events.JobFinished) and finished.returncode == 0
    assert three_cpus.state == EXITED  # one process, one job
    with pytest.raises(RuntimeUnavailable, match="exited"):
        three_cpus.submit("matmul")


def test_a_job_outcome_comes_before_the_teardown_and_the_next_run_waits_for_it(start_runtime) -> None:
    first = start_runtime()
    first.wait_ready()
    job_id = first.submit("matmul")
    finished = collect_job(first, job_id)[-1]
    # The outcome carries the status the process left with, and the process is gone (collect_job waited).
    assert finished.returncode == 0 and first.exited is not None and first.exited.returncode == 0

    # A next run named after a process still alive initializes TensorFlow only once that one has exited.
    previous = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    try:
        second = start_runtime()
        second.wait_ready()
        job_id = second.submit("matmul", after_pid=previous.pid)
        seen = events_until(second, output_line(f"waiting for the previous run's process (pid {previous.pid}) to exit"),
                            timeout=60)
        assert not of_type(seen, events.READY)  # without the wait, TensorFlow would have initialized by now
    finally:
        assert previous.stdin is not None
        previous.stdin.close()
        previous.wait()
    seen += collect_job(second, job_id)
    assert of_type(seen, events.READY) and seen[-1].status == "ok"


def test_soft_placement(start_runtime) -> None:
    on, off = start_runtime(DeviceConfig()), start_runtime(DeviceConfig(soft_placement=False))
    on.wait_ready()
    off.wait_ready()
    seen = collect_job(on, on.submit("matmul", {"device": "/GPU:2"}))
    (fallback,) = of_type(seen, events.FALLBACK)
    assert fallback.requested_short == "/GPU:2" and fallback.actual_short == "/CPU:0"
    seen = collect_job(off, off.submit("matmul", {"device": "/GPU:2"}))
    (error,) = of_type(seen, events.ERROR)
    assert error.error_type == "InvalidArgumentError"
    assert "Could not satisfy device specification" in error.message
    finished = of_type(seen, events.JOB_FINISHED)[0]
    assert (finished.status, finished.returncode) == ("error", 1)


def test_gpu_request_for_missing_gpu_is_rejected_with_tensorflows_count(start_runtime) -> None:
    runtime = start_runtime(DeviceConfig(visible_gpus=(0,)))
    with pytest.raises(RuntimeUnavailable, match="GPU 0 requested, but TensorFlow sees 0 physical GPU"):
        runtime.wait_ready()
    assert runtime.startup_error is not None and runtime.startup_error.stage == "check GPU indices"
    # the CLI knows a rejected configuration by its type, never by its message's words
    assert isinstance(runtime.unavailable(), ConfigurationRejected)
    assert runtime.wait_exited(10)


def test_cancel_is_ctrl_c_for_a_long_fit(start_runtime) -> None:
    runtime = start_runtime(DeviceConfig(cpu_devices=2))
    runtime.wait_ready()
    job_id = runtime.submit("fit", {"epochs": 10_000, "samples": 2000})
    seen = events_until(runtime, progress_at_least(4), timeout=60)  # training, not still building the model
    runtime.cancel(grace=20)
    seen += collect_job(runtime, job_id, timeout=30)
    finished = of_type(seen, events.JOB_FINISHED)[0]
    assert finished.status == "cancelled" and finished.returncode == 1
    assert runtime.exited is not None and not runtime.exited.killed_for_cancel
    # Nothing of the panel's own (issue 33: a Ctrl+C in a finalizer printed "Exception ignored … runtime_main.py").
    printed = "\n".join(e.text for e in seen if isinstance(e, events.Log))
    assert "Exception ignored" not in printed and "runtime_main" not in printed


def test_a_script_that_ignores_ctrl_c_and_sigterm_is_killed_after_the_grace(start_runtime, tmp_path: Path) -> None:
    runtime = start_runtime()
    runtime.wait_ready()
    path = _script(tmp_path, """
        import signal, time
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        print("stubborn", flush=True)
        time.sleep(600)
    """)
    job_id = runtime.submit("script", {"path": path})
    events_until(runtime, output_line("stubborn"), timeout=60)
    runtime.cancel(grace=2)
    seen = collect_job(runtime, job_id, timeout=30)
    assert of_type(seen, events.JOB_FINISHED)[0].status == "cancelled"
    assert "did not stop within 2 s" in of_type(seen, events.ERROR)[0].message
    assert runtime.exited is not None and runtime.exited.killed_for_cancel


def test_run_process_killed_mid_job_is_reported_with_its_last_lines(start_runtime, tmp_path: Path) -> None:
    runtime = start_runtime()
    runtime.wait_ready()
    path = _script(tmp_path, """
        import time
        for i in range(3):
            print("step", i, flush=True)
        time.sleep(600)
    """)
    job_id = runtime.submit("script", {"path": path})
    seen = events_until(runtime, output_line("step 2"), timeout=60)
    os.kill(runtime.pid, signal.SIGKILL)
    seen += collect_job(runtime, job_id)
    error = of_type(seen, events.ERROR)[0]
    assert "killed by SIGKILL" in error.message and "step 2" in error.last_lines
    assert of_type(seen, events.JOB_FINISHED)[0].status == "crashed"
    exited = runtime.next_event(5)
    assert isinstance(exited, events.RuntimeExited)
    assert exited.signal == "SIGKILL" and not exited.expected


def test_a_crash_inside_the_run_is_reported(start_runtime, tmp_path: Path) -> None:
    runtime = start_runtime()
    runtime.wait_ready()
    path = _script(tmp_path, """
        import os, sys
        print("about to abort", file=sys.stderr, flush=True)
        os.abort()
    """)
    seen = collect_job(runtime, runtime.submit("script", {"path": path}))
    assert "SIGABRT" in of_type(seen, events.ERROR)[0].message


def test_a_process_killed_on_purpose_stops_its_job_and_says_why(start_runtime, tmp_path: Path) -> None:
    runtime = start_runtime()
    runtime.wait_ready()
    path = _script(tmp_path, """
        import time
        print("sleeping", flush=True)
        time.sleep(600)
    """)
    job_id = runtime.submit("script", {"path": path})
    events_until(runtime, output_line("sleeping"), timeout=60)
    runtime.kill(reason="the window was closed during a run")
    seen = collect_job(runtime, job_id, timeout=30)
    message = of_type(seen, events.ERROR)[0].message
    assert message == "the runtime was killed while the job was running: the window was closed during a run"
    assert of_type(seen, events.JOB_FINISHED)[0].status == "cancelled"


@pytest.mark.parametrize("how", ["SIGKILL", "exit"])
def test_no_orphan_process_when_the_client_goes_away(tmp_path: Path, how: str) -> None:
    client = textwrap.dedent(f"""
        import os, sys, signal, time
        from tf_device_panel.core.config import DeviceConfig
        from tf_device_panel.core.client.runtime import RuntimeProcess
        runtime = RuntimeProcess(DeviceConfig())
        runtime.start()
        runtime.wait_ready()
        print(runtime.pid, runtime.supervisor_pid, flush=True)
        if {how!r} == "SIGKILL":
            os.kill(os.getpid(), signal.SIGKILL)
        sys.exit(0)
    """)
    done = subprocess.run([sys.executable, "-c", client], capture_output=True, text=True, timeout=120)
    for pid in map(int, done.stdout.split()[:2]):
        wait_until(lambda pid=pid: process_gone(pid), timeout=15, message=f"{pid} outlived its client")


def test_submit_before_warm_or_twice_is_refused(start_runtime) -> None:
    runtime = start_runtime()
    with pytest.raises(RuntimeUnavailable, match="starting"):
        runtime.submit("matmul")
    runtime.wait_ready()
    runtime.submit("matmul")
    with pytest.raises(RuntimeUnavailable, match="busy"):
        runtime.submit("matmul")
    assert runtime.wait_exited(60)


def test_carriage_return_progress_arrives_at_once_and_a_last_line_without_newline(start_runtime,
                                                                                  tmp_path: Path) -> None:
    runtime = start_runtime()
    runtime.wait_ready()
    gate = tmp_path / "go-on"
    path = _script(tmp_path, f"""
        import os, sys, time
        for step in range(3):
            sys.stdout.write(f"\\rstep {{step}} at {{time.time():.3f}}")
            sys.stdout.flush()
        while not os.path.exists({str(gate)!r}):
            time.sleep(0.01)
        sys.stdout.write("\\rall done\\nlast words")
    """)
    job_id = runtime.submit("script", {"path": path})
    seen = events_until(runtime, lambda e: isinstance(e, events.Log) and e.partial
                        and e.text.startswith("step 2"), timeout=60)
    arrived = time.time()
    written = float(seen[-1].text.split(" at ")[1])
    assert arrived - written < 0.2, f"a \\r update took {arrived - written:.3f} s to arrive"
    gate.touch()
    seen = collect_job(runtime, job_id)
    lines = output_lines(seen)
    assert lines[-2:] == ["all done", "last words"]
