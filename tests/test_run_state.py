"""The run state, fed pure events: no Qt, no TensorFlow, no processes."""

from __future__ import annotations

from tf_device_panel.core.client.run_state import Marker, PlacementKey, RunState
from tf_device_panel.core.protocol import events


def placed(short: str, op: str = "MatMul", job_id: str = "j") -> events.Placement:
    return events.Placement(op=op, op_type=op, kernel=op, short_device=short, mode="eager", job_id=job_id,
                            device=f"/job:localhost/replica:0/task:0/device:{short[1:]}")


def ready(job_id: str | None = "j", at: float = 1.0) -> events.Ready:
    return events.Ready(job_id=job_id, time=at, logical=({"name": "x", "short_name": "/CPU:0", "device_type": "CPU"},))


def test_ready_job_placements_and_end_in_one_batch_keep_their_counts() -> None:
    """The batch that forced the window to split its batches around `ready`: a quick run's report, its job's
    start, its placements and its end arrive together. Fed once, in order, the counts survive to be shown."""
    state = RunState()
    changes = state.apply_all([ready("j"), events.JobStarted(job="matmul", job_id="j"),
                               *[placed("/CPU:0")] * 3, *[placed("/CPU:1")] * 2,
                               events.JobFinished(job="matmul", status="ok", job_id="j")])
    assert changes.fresh and state.ops_per_device == {"/CPU:0": 3, "/CPU:1": 2}
    assert state.placements == {PlacementKey("MatMul", "MatMul", "/CPU:0"): 3,
                                PlacementKey("MatMul", "MatMul", "/CPU:1"): 2}
    assert changes.placements == state.placements and state.job == "matmul"
    # the next run, even in the same batch as the end of this one, starts afresh and counts anew
    changes = state.apply_all([events.RuntimeExited(description="exited with code 0", expected=True, job_id="j"),
                               ready("k"), events.JobStarted(job="m", job_id="k"), placed("/CPU:0", job_id="k")])
    assert changes.fresh and state.job_id == "k" and state.runs == 2
    assert state.ops_per_device == {"/CPU:0": 1} and dict(changes.placements) == {
        PlacementKey("MatMul", "MatMul", "/CPU:0"): 1}
    # the markers of both runs are kept: the graphs draw the first run's exit too
    assert [m.kind for m in changes.markers] == ["runtime-exit", "runtime-start", "job-start"]
    assert changes.markers[0].label == "runtime exited with code 0"


def test_a_scripts_ready_comes_after_its_start_and_output_and_leaves_them() -> None:
    state = RunState()
    state.apply_all([events.JobStarted(job="script", job_id="s"),
                     events.Log(stream="stdout", text="before TensorFlow", job_id="s"),
                     placed("/CPU:0", job_id="s")])  # a stderr line read before the events pipe's ready
    changes = state.apply_all([ready("s"), placed("/CPU:0", job_id="s")])
    assert not changes.fresh and state.runs == 1
    assert list(state.output) == ["before TensorFlow"] and state.ops_per_device == {"/CPU:0": 2}


def test_a_ready_without_a_job_starts_afresh_and_lines_without_a_job_are_not_the_jobs() -> None:
    state = RunState()
    state.apply_all([ready("j"), placed("/CPU:0")])
    changes = state.apply_all([ready(None), events.Log(stream="stderr", kind="output", text="spare's line")])
    assert changes.fresh and state.ops_per_device == {} and list(state.output) == []


def test_the_console_keeps_the_jobs_own_lines_and_the_live_line() -> None:
    state = RunState()
    changes = state.apply_all([
        events.JobStarted(job="fit", job_id="j"),
        events.Log(stream="stdout", text="epoch 1\nepoch 2", job_id="j"),   # a block of plain output
        events.Log(stream="stderr", kind=events.PLACEMENT, text="Executing op", job_id="j"),  # TF's, not the job's
        events.Log(stream="stdout", text="3/10", partial=True, job_id="j"),
        events.Log(stream="panel", kind="warning", text="the panel's", job_id="j")])
    assert list(state.output) == ["epoch 1", "epoch 2"] and state.live_line == "3/10"
    assert changes.output == [("epoch 1\nepoch 2", False), ("3/10", True)]
    state.apply(events.Log(stream="stdout", text="10/10", job_id="j"))
    assert state.live_line == "" and state.output[-1] == "10/10"


def test_fallbacks_memory_and_the_end() -> None:
    state = RunState()
    fallback = events.Fallback(op="MatMul", requested="/device:GPU:2", requested_short="/GPU:2",
                               actual="/job:localhost/replica:0/task:0/device:CPU:0", actual_short="/CPU:0",
                               job_id="j")
    changes = state.apply_all([ready("j"), fallback, fallback,
                               events.TfMemory(device="/GPU:0", current_mib=1.0, peak_mib=2.0, job_id="j"),
                               events.TfMemory(device="/GPU:0", current_mib=3.0, peak_mib=4.0, job_id="j"),
                               events.Error(error_type="Cancelled", job_id="j", time=5.0),
                               events.JobFinished(job="fit", status="cancelled", job_id="j", time=6.0)])
    assert state.fallback_pairs == [("/GPU:2", "/CPU:0")] and len(state.fallbacks) == 2
    assert changes.fallbacks == [fallback, fallback] and changes.device_changes
    assert state.tf_memory["/GPU:0"].current_mib == 3.0 and state.cancelled
    assert list(state.markers)[-2:] == [Marker(5.0, "error", "Cancelled"), Marker(6.0, "job-end", "fit cancelled")]


def test_placement_rows_are_bounded_and_the_rest_still_counted_per_device() -> None:
    state = RunState(max_placement_rows=2)
    state.apply_all([placed("/CPU:0", op="A"), placed("/CPU:0", op="B"), placed("/CPU:0", op="C"),
                     placed("/CPU:0", op="A")])
    assert list(state.placements) == [PlacementKey("A", "A", "/CPU:0"), PlacementKey("B", "B", "/CPU:0")]
    assert state.placements[PlacementKey("A", "A", "/CPU:0")] == 2
    assert state.ops_per_device == {"/CPU:0": 4}


def test_the_cli_says_the_runs_placements_from_the_state_its_printer_fed() -> None:
    import io

    from tf_device_panel.core.cli.output import RunPrinter, run_text
    from tf_device_panel.core.client.run_record import JobOutcome

    printer = RunPrinter(verbose=False, stream=io.StringIO())
    for event in [ready("j"), events.JobStarted(job="matmul", job_id="j"), *[placed("/CPU:0")] * 3, placed("/CPU:1")]:
        printer(event)
    outcome = JobOutcome("matmul", {}, {}, status="ok", duration_s=0.5, run_id="r")
    assert run_text(outcome, printer.run_state)[-2:] == ["placements: 4 (/CPU:0: 3, /CPU:1: 1)",
                                                         "status: ok in 0.50 s — run r"]


def test_a_describe_runs_late_ready_does_not_wipe_the_job_in_flight() -> None:
    """The describe run's Ready lets the waiting job start, but is told from its own reader thread: under load the
    job's first lines came first, and the Ready (no job id) then wiped them (CI lost a script's first lines)."""
    state = RunState()
    state.apply_all([events.JobStarted(job="script", job_id="s"),
                     events.Log(stream="stdout", text="hello", job_id="s"),
                     events.Ready(job_id=None, pid=4242),
                     events.Log(stream="stdout", text="done", job_id="s")])
    assert list(state.output) == ["hello", "done"] and state.pid != 4242
    state.apply(events.JobFinished(job="script", status="ok", job_id="s"))
    changes = state.apply_all([ready(None)])
    assert changes.fresh and list(state.output) == []
