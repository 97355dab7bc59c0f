from __future__ import annotations

import pytest
from tf_device_panel.core.protocol import events
from tf_device_panel.core.protocol.output_lines import (
    ERROR,
    OUTPUT,
    PLACEMENT,
    TF_INFO,
    WARNING,
    PlacedOp,
    canonical_device,
    parse_line,
    short_device_name,
)

EAGER = ("I0000 00:00:1795270979.856597    5908 execute.cc:1775] Executing op _MklMatMul in device "
         "/job:localhost/replica:0/task:0/device:CPU:1")
GRAPH = ("I0000 00:00:1795270979.856254    5908 placer.cc:162] replica_1/mul: (Mul): "
         "/job:localhost/replica:0/task:0/device:GPU:1")


def test_eager_line() -> None:
    kind, placed = parse_line(EAGER, "stderr")
    assert kind == PLACEMENT and placed is not None
    assert (placed.op, placed.op_type, placed.kernel, placed.mode) == ("_MklMatMul", "MatMul", "_MklMatMul", "eager")
    assert placed.short_device == "/CPU:1"


def test_graph_line_keeps_node_name() -> None:
    _kind, placed = parse_line(GRAPH, "stderr")
    assert placed is not None
    assert (placed.op, placed.op_type, placed.device) == (
        "replica_1/mul", "Mul", "/job:localhost/replica:0/task:0/device:GPU:1")


def test_one_placement_record_from_the_log_line_to_the_wire_and_the_run_record() -> None:
    """The parsed line, its event and what a run's outcome keeps are one class: the event's JSON line (the events
    pipe, events.jsonl) and the outcome's placement (`run --json`) keep their keys, in their order."""
    _kind, placed = parse_line(EAGER, "stderr")
    assert placed is not None
    event = events.Placement.of(placed, stream="stderr", line=EAGER, job_id="j")
    assert isinstance(event, PlacedOp) and events.decode(event.encode()) == event
    assert event.replace(time=1.5).encode() == (
        '{"type":"placement","job_id":"j","time":1.5,"data":{"op":"_MklMatMul","op_type":"MatMul",'
        '"device":"/job:localhost/replica:0/task:0/device:CPU:1","short_device":"/CPU:1","mode":"eager",'
        '"kernel":"_MklMatMul","stream":"stderr","line":"' + EAGER + '"}}\n').encode()
    assert list(event.record_json().items()) == [
        ("op", "_MklMatMul"), ("op_type", "MatMul"), ("device", "/job:localhost/replica:0/task:0/device:CPU:1"),
        ("short_device", "/CPU:1"), ("mode", "eager")]


def test_stdout_echo_is_raw_placement_but_not_counted() -> None:
    assert parse_line("MatMul: (MatMul): /job:localhost/replica:0/task:0/device:CPU:0", "stdout") == (PLACEMENT, None)


@pytest.mark.parametrize("line, kind", [
    ("I0000 00:00:1795272079.760489    2103 cudart_stub.cc:31] Could not find cuda drivers on your machine", TF_INFO),
    ("W0000 00:00:1.5    2103 gpu_device.cc:2344] Cannot dlopen some GPU libraries.", WARNING),
    ("E0000 00:00:1795272081.433524    2103 cuda_platform.cc:52] failed call to cuInit: UNKNOWN ERROR (303)", ERROR),
    ("INFO:tensorflow:Using MirroredStrategy with devices ('/job:localhost/replica:0/task:0/device:CPU:0',)", TF_INFO),
    ("WARNING:tensorflow:Some warning", WARNING),
    ("Traceback (most recent call last):", ERROR),
    ("epoch 1/2: loss 0.1", OUTPUT),
])
def test_classification(line: str, kind: str) -> None:
    assert parse_line(line, "stderr" if line[0] in "IWE" else "stdout")[0] == kind


@pytest.mark.parametrize("spec, short", [
    ("/GPU:2", "/GPU:2"), ("gpu:2", "/GPU:2"), ("/device:GPU:2", "/GPU:2"), ("/cpu:0", "/CPU:0"),
    ("/job:localhost/replica:0/task:0/device:CPU:1", "/CPU:1"),
])
def test_device_names(spec: str, short: str) -> None:
    assert canonical_device(spec) == short


def test_cluster_devices_keep_their_task() -> None:
    # this process's own devices lose the job/replica/task prefix; other tasks' devices keep their task
    assert short_device_name("/job:worker/replica:0/task:1/device:CPU:0") == "/job:worker/task:1/CPU:0"
    assert short_device_name("/job:ps/replica:0/task:0/device:CPU:0") == "/job:ps/task:0/CPU:0"
    assert short_device_name("/job:localhost/replica:0/task:0/device:GPU:1") == "/GPU:1"
