"""Only the job's own lines in its console (issue 33, item 2): TensorFlow's C++ log goes to the Placement log
only, and the Devices panel's "TensorFlow said:" draws on TensorFlow's own lines, never a job's output."""

from __future__ import annotations

import textwrap
from pathlib import Path

from helpers import collect_job
from tf_device_panel.core.client.run_state import RunState, console_line
from tf_device_panel.core.devices.gpus import tf_gpu_messages
from tf_device_panel.core.protocol import events, output_lines
from tf_device_panel.core.protocol.streams import STDERR, STDOUT, StreamDemux

# As TensorFlow 2.21 writes them (the first from a bare Keras run here, the others quoted in the issue), one write
# each (a C++ message and its continuation lines come in one write), then the job's own.
TF_STDERR = (
    b"WARNING: All log messages before absl::InitializeLog() is called are written to STDERR\n",
    b"I0000 00:00:1795663870.069921    7979 cpu_feature_guard.cc:227] This TensorFlow binary is optimized to use "
    b"available CPU instructions in performance-critical operations.\n"
    b"To enable the following instructions: AVX2 AVX512F FMA, in other operations, rebuild TensorFlow.\n",
    b"W0000 00:00:1795663871.544706    7979 dataset.cc:997] Input of GeneratorDatasetOp::Dataset will not be "
    b"optimized because the dataset does not implement the AsCheckpointableDatasetOp interface.\n",
    b"E0000 00:00:1795663871.545337    7979 cuda_executor.cc:1228] failed call to cuInit: INTERNAL: CUDA error\n",
    b"/tmp/job.py:3: UserWarning: the job's own warning\n"
    b"Traceback (most recent call last):\n"
    b"ValueError: the job's own error\n"
)


def test_tensorflows_cpp_log_never_reaches_the_jobs_console() -> None:
    got: list[events.Event] = []
    demux = StreamDemux(got.append, job_id=lambda: "job-1")
    demux.feed(STDOUT, b"epoch 1 done\n")
    for write in TF_STDERR:
        demux.feed(STDERR, write)
    state = RunState()
    changes = state.apply_all(got)
    console = [text for text, _partial in changes.output]
    assert console == ["epoch 1 done", "/tmp/job.py:3: UserWarning: the job's own warning",
                       "Traceback (most recent call last):", "ValueError: the job's own error"]
    assert list(state.output) == console
    # ...yet every line of TensorFlow's is still there for the Placement log, marked as TensorFlow's.
    tf_lines = [e.text for e in got if isinstance(e, events.Log) and e.source == output_lines.TENSORFLOW]
    assert [line[:12] for line in tf_lines] == ["WARNING: All", "I0000 00:00:", "To enable th", "W0000 00:00:",
                                                "E0000 00:00:"]
    assert all(console_line(e) is None for e in got if isinstance(e, events.Log) and e.text in tf_lines)


def test_a_cluster_tasks_cpp_log_is_tensorflows_too() -> None:
    from tf_device_panel.core.runproc.cluster import Task
    from tf_device_panel.core.runproc.jobs.cluster_jobs import _forwarder
    from tf_device_panel.core.runproc.jobs.context import JobContext

    emitted: list[events.Event] = []
    forward = _forwarder(JobContext("j", emitted.append))
    task = Task(name="worker:1", role="worker", config={})
    forward(task, "stderr", "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR")
    forward(task, "stdout", "step 3 loss 0.1")
    assert [console_line(e) for e in emitted] == [None, ("[worker:1] step 3 loss 0.1", False)]


def test_tensorflows_reason_for_no_gpu_is_never_a_jobs_own_line(start_runtime, tmp_path: Path) -> None:
    """The TF1 session job's "session ConfigProto: … gpu_options" line was quoted as TensorFlow's reason."""
    runtime = start_runtime()
    runtime.wait_ready()
    script = tmp_path / "job.py"
    script.write_text(textwrap.dedent("""
        import sys
        print("session ConfigProto: log_device_placement=True gpu_options { allow_growth: true }", flush=True)
        print("no GPU driver here, says the job", file=sys.stderr, flush=True)
    """))
    collect_job(runtime, runtime.submit("script", {"path": str(script)}))
    assert any("session ConfigProto" in line for line in runtime.recent_lines())  # the job's lines were read
    said = tf_gpu_messages(runtime.tf_lines())
    assert not any("ConfigProto" in line or "says the job" in line for line in said), said


def test_a_records_unmarked_cpp_line_stays_out_too_but_a_scripts_own_line_never() -> None:
    """Records written before lines were marked have no source: their C++ lines are known by shape. A user's
    script's bytes are the script's whatever they look like."""
    line = "W0000 00:00:1795663871.544706    7979 dataset.cc:997] Input of GeneratorDatasetOp::Dataset"
    assert console_line(events.Log(stream="stderr", kind="warning", text=line, job_id="j")) is None
    assert console_line(events.Log(stream="stderr", kind="output", text=line, source="script", job_id="j")) == (
        line, False)
