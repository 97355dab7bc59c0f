"""The runtime process with real TensorFlow on CPU: logical CPUs stand in for several devices."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from helpers import collect_job, events_until, of_type, output_line, process_gone, progress_at_least, wait_until
from tf_device_panel.core import events
from tf_device_panel.core.config import DeviceConfig
from tf_device_panel.core.runtime import EXITED, READY, RuntimeProcess, RuntimeUnavailable


def placed_devices(seen: list, op_type: str) -> set[str]:
    return {e.data["short_device"] for e in of_type(seen, events.PLACEMENT) if e.data["op_type"] == op_type}


def test_ready_reports_physical_and_logical_devices(start_runtime) -> None:
    runtime = start_runtime(DeviceConfig(cpu_devices=2))
    info = runtime.wait_ready()
    assert [d["short_name"] for d in info["logical"]] == ["/CPU:0", "/CPU:1"]
    assert info["logical"][1]["name"] == "/job:localhost/replica:0/task:0/device:CPU:1"
    assert [d["device_type"] for d in info["physical"]] == ["CPU"]
    assert info["tf_version"].startswith("2.")
    assert "set_log_device_placement(True)" in info["applied"]
    assert runtime.state == READY and info["pid"] == runtime.pid


def test_matmul_result_and_placements(three_cpus: RuntimeProcess) -> None:
    seen = collect_job(three_cpus, three_cpus.submit("matmul", {"device": "/CPU:2"}))
    (result,) = of_type(seen, events.RESULT)
    assert result.data["result"]["matrix"] == [[22, 28], [49, 64]]
    assert result.data["result"]["device"].endswith("device:CPU:2")
    assert placed_devices(seen, "MatMul") == {"/CPU:2"}
    assert of_type(seen, events.FALLBACK) == []
    # every line the job printed arrives before its result
    assert max(seen.index(e) for e in of_type(seen, events.PLACEMENT)) < seen.index(result)
    assert [e.type for e in seen][-1] == events.JOB_FINISHED


def test_replicate_over_three_logical_cpus(three_cpus: RuntimeProcess) -> None:
    seen = collect_job(three_cpus, three_cpus.submit("replicate", {}))
    result = of_type(seen, events.RESULT)[0].data["result"]
    assert result["matrix"] == [[66, 84], [147, 192]]
    assert sorted(result["replicas"]) == ["/device:CPU:0", "/device:CPU:1", "/device:CPU:2"]
    assert placed_devices(seen, "MatMul") == {"/CPU:0", "/CPU:1", "/CPU:2"}
    assert placed_devices(seen, "AddN") == {"/CPU:0"}


def test_soft_placement_on_reports_a_fallback(three_cpus: RuntimeProcess) -> None:
    seen = collect_job(three_cpus, three_cpus.submit("matmul", {"device": "/GPU:2"}))
    (fallback,) = of_type(seen, events.FALLBACK)
    assert fallback.data["requested_short"] == "/GPU:2" and fallback.data["actual_short"] == "/CPU:0"
    assert of_type(seen, events.RESULT)[0].data["result"]["fallback"] is True


def test_soft_placement_off_gives_tensorflows_error(start_runtime) -> None:
    runtime = start_runtime(DeviceConfig(soft_placement=False))
    runtime.wait_ready()
    seen = collect_job(runtime, runtime.submit("matmul", {"device": "/GPU:2"}))
    (error,) = of_type(seen, events.ERROR)
    assert error.data["type"] == "InvalidArgumentError"
    assert "Could not satisfy device specification" in error.data["message"]
    assert of_type(seen, events.JOB_FINISHED)[0].data["status"] == "error"
    # the runtime survives a job's error
    seen = collect_job(runtime, runtime.submit("matmul", {}))
    assert of_type(seen, events.JOB_FINISHED)[0].data["status"] == "ok"


def test_unknown_device_and_bad_params_are_clear_errors(three_cpus: RuntimeProcess) -> None:
    seen = collect_job(three_cpus, three_cpus.submit("fit", {"devices": "/CPU:0,/CPU:7"}))
    (error,) = of_type(seen, events.ERROR)
    assert "/CPU:7 not in this runtime" in error.data["message"]
    seen = collect_job(three_cpus, three_cpus.submit("fit", {"epochs": 0}))
    assert "epochs" in of_type(seen, events.ERROR)[0].data["message"]


def test_fit_under_mirrored_strategy(three_cpus: RuntimeProcess) -> None:
    params = {"epochs": 2, "batch_per_replica": 4, "samples": 48, "devices": "/CPU:0,/CPU:1"}
    seen = collect_job(three_cpus, three_cpus.submit("fit", params))
    result = of_type(seen, events.RESULT)[0].data["result"]
    assert result["replicas_in_sync"] == 2 and result["global_batch_size"] == 8
    assert len(result["loss"]) == 2 and result["loss"][1] < result["loss"][0]
    assert {e.data["step"] for e in of_type(seen, events.METRIC)} == {1, 2}
    assert placed_devices(seen, "MatMul") >= {"/CPU:0", "/CPU:1"}


def test_gpu_request_for_missing_gpu_is_rejected_with_tensorflows_count(start_runtime) -> None:
    runtime = start_runtime(DeviceConfig(visible_gpus=(0,)))
    with pytest.raises(RuntimeUnavailable, match="GPU 0 requested, but TensorFlow sees 0 physical GPU"):
        runtime.wait_ready()
    assert runtime.startup_error is not None and runtime.startup_error["stage"] == "check GPU indices"
    assert runtime.wait_exited(10)



def test_cancel_stops_a_long_fit(start_runtime) -> None:
    runtime = start_runtime(DeviceConfig(cpu_devices=2))
    runtime.wait_ready()
    job_id = runtime.submit("fit", {"epochs": 10_000, "samples": 2000})
    seen = events_until(runtime, progress_at_least(4), timeout=60)  # training, not still building the model
    runtime.cancel(grace=20)
    seen += collect_job(runtime, job_id, timeout=30)
    assert of_type(seen, events.JOB_FINISHED)[0].data["status"] == "cancelled"
    assert runtime.state == READY  # cancelled cleanly: no kill needed, the runtime lives on


def _script(tmp_path: Path, body: str) -> str:
    path = tmp_path / "user_script.py"
    path.write_text(textwrap.dedent(body))
    return str(path)


def test_script_output_is_streamed_and_its_failure_reported(start_runtime, tmp_path: Path) -> None:
    runtime = start_runtime(DeviceConfig(cpu_devices=2))
    runtime.wait_ready()
    path = _script(tmp_path, """
        import sys
        import tensorflow as tf
        print("args", sys.argv[1:])
        print("logical", len(tf.config.list_logical_devices("CPU")))
        print("to stderr", file=sys.stderr)
        sys.exit(3 if "--fail" in sys.argv else 0)
    """)
    seen = collect_job(runtime, runtime.submit("script", {"path": path, "args": "--lr 0.1 'two words'"}))
    output = [e.data["text"] for e in of_type(seen, events.LOG) if e.data["kind"] == "output"]
    assert "args ['--lr', '0.1', 'two words']" in output and "logical 2" in output and "to stderr" in output
    assert of_type(seen, events.JOB_FINISHED)[0].data["status"] == "ok"
    seen = collect_job(runtime, runtime.submit("script", {"path": path, "args": "--fail"}))
    assert "exited with status 3" in of_type(seen, events.ERROR)[0].data["message"]


def test_cancel_interrupts_a_script_that_never_checks(start_runtime, tmp_path: Path) -> None:
    runtime = start_runtime()
    runtime.wait_ready()
    path = _script(tmp_path, """
        print("looping", flush=True)
        while True:
            try:
                sum(range(1000))
            except Exception:  # a script's catch-all must not swallow the cancel
                swallowed = True
    """)
    job_id = runtime.submit("script", {"path": path})
    events_until(runtime, output_line("looping"), timeout=60)  # the script's own code runs: nothing checks the flag
    runtime.cancel(grace=15)
    seen = collect_job(runtime, job_id, timeout=30)
    assert of_type(seen, events.JOB_FINISHED)[0].data["status"] == "cancelled"
    assert runtime.state == READY


def test_job_that_ignores_cancel_gets_its_runtime_killed(start_runtime, tmp_path: Path) -> None:
    runtime = start_runtime()
    runtime.wait_ready()
    path = _script(tmp_path, """
        import time
        print("sleeping", flush=True)
        time.sleep(600)   # blocked in C: neither the flag nor an async exception reaches it
    """)
    job_id = runtime.submit("script", {"path": path})
    events_until(runtime, output_line("sleeping"), timeout=60)
    runtime.cancel(grace=2)
    seen = collect_job(runtime, job_id, timeout=30)
    assert of_type(seen, events.JOB_FINISHED)[0].data["status"] == "cancelled"
    assert "did not stop within 2 s" in of_type(seen, events.ERROR)[0].data["message"]
    assert runtime.wait_exited(10) and runtime.state == EXITED


def test_runtime_killed_mid_job_is_reported_with_its_last_lines(start_runtime, tmp_path: Path) -> None:
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
    error = of_type(seen, events.ERROR)[0].data
    assert "killed by SIGKILL" in error["message"] and "step 2" in error["last_lines"]
    assert of_type(seen, events.JOB_FINISHED)[0].data["status"] == "crashed"
    exited = runtime.next_event(5)
    assert exited is not None and exited.type == events.RUNTIME_EXITED
    assert exited.data["signal"] == "SIGKILL" and not exited.data["expected"]
    assert [e.data["text"] for e in of_type(seen, events.LOG) if e.data["kind"] == "output"][:3] == [
        "step 0", "step 1", "step 2"]


def test_runtime_crash_inside_tensorflow_is_reported(start_runtime, tmp_path: Path) -> None:
    runtime = start_runtime()
    runtime.wait_ready()
    path = _script(tmp_path, """
        import os, sys
        print("about to abort", file=sys.stderr, flush=True)
        os.abort()
    """)
    seen = collect_job(runtime, runtime.submit("script", {"path": path}))
    assert "SIGABRT" in of_type(seen, events.ERROR)[0].data["message"]


@pytest.mark.parametrize("how", ["SIGKILL", "exit"])
def test_no_orphan_runtime_when_the_client_goes_away(tmp_path: Path, how: str) -> None:
    client = textwrap.dedent(f"""
        import os, sys, signal, time
        from tf_device_panel.core.config import DeviceConfig
        from tf_device_panel.core.runtime import RuntimeProcess
        runtime = RuntimeProcess(DeviceConfig())
        runtime.start()
        runtime.wait_ready()
        print(runtime.pid, flush=True)
        if {how!r} == "SIGKILL":
            os.kill(os.getpid(), signal.SIGKILL)
        sys.exit(0)
    """)
    done = subprocess.run([sys.executable, "-c", client], capture_output=True, text=True, timeout=120)
    runtime_pid = int(done.stdout.split()[0])
    wait_until(lambda: process_gone(runtime_pid), timeout=15, message=f"runtime {runtime_pid} outlived its client")


def test_submit_when_not_ready_is_refused(start_runtime) -> None:
    runtime = start_runtime()
    with pytest.raises(RuntimeUnavailable, match="starting"):
        runtime.submit("matmul")
    runtime.wait_ready()
    runtime.stop()
    assert runtime.wait_exited(10)
    with pytest.raises(RuntimeUnavailable, match="exited"):
        runtime.submit("matmul")


def test_a_job_sent_while_another_runs_still_gets_its_closing_events(start_runtime) -> None:
    runtime = start_runtime(DeviceConfig())
    runtime.wait_ready()
    first = runtime.submit("fit", {"epochs": 10_000})
    # The client refuses a second job itself; only its private command channel can show what the runtime does.
    runtime._send({"cmd": "run", "job_id": "second", "job": "matmul", "params": {}})
    seen = events_until(runtime, lambda e: e.job_id == "second" and e.type == events.JOB_FINISHED, timeout=60)
    closing = [e for e in seen if e.job_id == "second"]
    assert [e.type for e in closing] == [events.ERROR, events.JOB_FINISHED]
    assert closing[0].data["type"] == "Busy"
    runtime.cancel()
    collect_job(runtime, first)


def test_a_runtime_killed_on_purpose_stops_its_job_and_says_why(start_runtime, tmp_path: Path) -> None:
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
    message = of_type(seen, events.ERROR)[0].data["message"]
    assert message == "the runtime was killed while the job was running: the window was closed during a run"
    assert "out of memory" not in message  # the guess is for kills nobody here asked for
    assert of_type(seen, events.JOB_FINISHED)[0].data["status"] == "cancelled"
