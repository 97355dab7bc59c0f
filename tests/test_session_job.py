"""The seeds' TF1 examples: a graph in a tf.compat.v1.Session, its placement log parsed into placements."""

from __future__ import annotations

import pytest
from job_helpers import placements, run_job
from tf_device_panel.core.catalogue import JOBS
from tf_device_panel.core.config import DeviceConfig
from tf_device_panel.core.protocol import events
from tf_device_panel.core.protocol.output_lines import PLACEMENT, TF_INFO, parse_line, short_device_name

# From the seed guide (TF1 output).
SEED_LOG = """Device mapping:
/job:localhost/replica:0/task:0/gpu:0 -> device: 0, name: Tesla K40c, pci bus id: 0000:05:00.0
b: /job:localhost/replica:0/task:0/cpu:0
a: /job:localhost/replica:0/task:0/cpu:0
MatMul: /job:localhost/replica:0/task:0/gpu:0""".splitlines()


def test_tf1_placement_lines_and_the_device_mapping_block_are_parsed() -> None:
    parsed = [parse_line(line, "stdout") for line in SEED_LOG]
    assert [kind for kind, _ in parsed] == [TF_INFO, TF_INFO, PLACEMENT, PLACEMENT, PLACEMENT]
    nodes = [(p.op, p.op_type, p.short_device) for _, p in parsed[2:] if p is not None]
    assert nodes == [("b", "b", "/CPU:0"), ("a", "a", "/CPU:0"), ("MatMul", "MatMul", "/GPU:0")]
    assert short_device_name("/job:localhost/replica:0/task:0/gpu:3") == "/GPU:3"
    _, const = parse_line("Const_3: /job:localhost/replica:0/task:0/gpu:3", "stderr")
    assert const is not None and const.op_type == "Const"


@pytest.fixture
def two_cpus() -> DeviceConfig:
    # The runtime's own placement log is off: the session's ConfigProto must turn it on by itself.
    return DeviceConfig(cpu_devices=2, log_placement=False)


def graph_placements(seen: list) -> dict[str, str]:
    return {p.op: p.short_device for p in placements(seen) if p.mode == "graph"}


def test_the_seed_graph_runs_and_its_placement_log_is_parsed(two_cpus: DeviceConfig) -> None:
    result, error, seen = run_job(two_cpus, "session", {"example": "placement"})
    assert error is None, error
    assert result["kind"] == "matrix" and result["matrix"] == [[22, 28], [49, 64]]
    assert result["session_config"] == {"log_device_placement": True, "allow_soft_placement": False}
    # no GPU here: the runtime's configuration gave the session's gpu_options nothing to carry
    assert result["gpu_options"] == {"allow_growth": False, "per_process_gpu_memory_fraction": 0.0,
                                     "virtual_device_limits_mib": []}
    assert {"a", "b", "MatMul"} <= set(result["nodes"])
    assert {"a": "/CPU:0", "b": "/CPU:0", "MatMul": "/CPU:0"}.items() <= graph_placements(seen).items()


def test_constants_pinned_to_the_cpu(two_cpus: DeviceConfig) -> None:
    result, error, seen = run_job(two_cpus, "session", {"example": "pin-cpu"})
    assert error is None, error
    assert result["fallback"] is False and not [e for e in seen if isinstance(e, events.Fallback)]
    assert graph_placements(seen)["a"] == "/CPU:0"


def test_two_devices_summed_by_add_n(two_cpus: DeviceConfig) -> None:
    result, error, seen = run_job(two_cpus, "session", {"example": "two-devices"})
    assert error is None, error
    assert result["matrix"] == [[44, 56], [98, 128]]
    assert {short_device_name(d) for d in result["replicas"].values()} == {"/CPU:0", "/CPU:1"}
    placed = graph_placements(seen)
    assert placed["MatMul"] == "/CPU:0" and placed["MatMul_1"] == "/CPU:1" and placed["AddN"] == "/CPU:0"


def test_a_missing_gpu_without_soft_placement_is_a_clear_error(two_cpus: DeviceConfig) -> None:
    result, error, _ = run_job(two_cpus, "session", {"example": "missing-device"})
    assert result is None and error is not None
    assert error.error_type == "InvalidArgumentError"
    assert error.message.startswith("Cannot assign a device for operation")
    assert "/device:GPU:2" in error.message and "soft placement is off" in error.message
    assert "\n" not in error.message


def test_a_missing_gpu_with_soft_placement_falls_back(two_cpus: DeviceConfig) -> None:
    result, error, seen = run_job(two_cpus, "session", {"example": "missing-device", "soft_placement": True})
    assert error is None, error
    assert result["matrix"] == [[22, 28], [49, 64]] and result["fallback"] is True
    fallbacks = {e.op: e.actual_short for e in seen if isinstance(e, events.Fallback)}
    assert fallbacks == {"a": "/CPU:0", "b": "/CPU:0", "MatMul": "/CPU:0"}


def test_the_code_shown_is_the_tf1_program() -> None:
    code = JOBS["session"].code()
    for needle in ("tf.compat.v1", "v1.ConfigProto()", "config.log_device_placement = True",
                   "allow_soft_placement", "Session(", "tf.add_n", "with tf.device"):
        assert needle in code, needle
