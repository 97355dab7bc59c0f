"""The seeds' training variants: cross-device ops, evaluate, NumPy input, the learning-rate table, default strategy."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from job_helpers import run_job
from tf_device_panel.core.catalogue import JOBS, JobError
from tf_device_panel.core.config import DeviceConfig
from tf_device_panel.core.config.plan import logical_gpu_owners
from tf_device_panel.core.runproc.jobs.training import choose_cross_device_ops, learning_rate_for, nccl_unavailable

# Measured on the H100 (shared/gpu-host/recorded/h100-cublas-nccl.log): the 2048+4096 split's two logical GPUs
# are both physical GPU 0, and NcclAllReduce over them failed with "NCCL: invalid usage" (real NCCL 2.27.7).
H100_SPLIT = DeviceConfig(virtual_gpus={0: (2048, 4096)})
SPLIT_NAMES = ["/job:localhost/replica:0/task:0/device:GPU:0", "/job:localhost/replica:0/task:0/device:GPU:1"]


def real_nccl() -> tuple[str | None, str]:
    return "2.27.7", "/tmp/cudalib/libnccl.so.2 (LD_LIBRARY_PATH)"


def stand_in_nccl() -> tuple[str | None, str]:
    return None, "/tmp/cudalib/libnccl.so.2 is not a working NCCL (undefined symbol: ncclGetVersion)"


def test_auto_never_picks_nccl_for_logical_gpus_split_from_one_gpu() -> None:
    recorded = (Path(__file__).parent / "fixtures" / "h100" / "nccl-split-gpu-failure.txt").read_text()
    assert "INTERNAL:  NCCL: invalid usage" in recorded and "SGD/NcclAllReduce" in recorded
    physical_of = {f"/GPU:{i}": owner for i, owner in enumerate(logical_gpu_owners(H100_SPLIT, [0]))}
    assert physical_of == {"/GPU:0": 0, "/GPU:1": 0}
    used, note = choose_cross_device_ops("auto", SPLIT_NAMES, physical_of, real_nccl)
    assert used == "HierarchicalCopyAllReduce"
    assert note == ("cross-device ops auto: HierarchicalCopyAllReduce, since /GPU:0 and /GPU:1 are split from one "
                    "physical GPU (GPU 0), and NCCL runs one rank per GPU (\"NCCL: invalid usage\")")
    used, note = choose_cross_device_ops("NcclAllReduce", SPLIT_NAMES, physical_of, real_nccl)
    assert used == "HierarchicalCopyAllReduce" and note.startswith("NcclAllReduce cannot run here (/GPU:0 and")


def test_auto_picks_nccl_only_on_distinct_gpus_where_nccl_loads() -> None:
    two_gpus = {"/GPU:0": 0, "/GPU:1": 1}
    assert logical_gpu_owners(DeviceConfig(virtual_gpus={1: (1024, 1024)}), [0, 1]) == [0, 1, 1]
    assert logical_gpu_owners(DeviceConfig(visible_gpus=(1,)), [1]) == [1]
    used, note = choose_cross_device_ops("auto", SPLIT_NAMES, two_gpus, real_nccl)
    assert used == "NcclAllReduce" and "NCCL 2.27.7 from /tmp/cudalib/libnccl.so.2" in note
    used, note = choose_cross_device_ops("auto", SPLIT_NAMES, two_gpus, stand_in_nccl)
    assert used == "HierarchicalCopyAllReduce" and "NCCL does not load in this process" in note
    assert choose_cross_device_ops("ReductionToOneDevice", SPLIT_NAMES, two_gpus, stand_in_nccl) == (
        "ReductionToOneDevice", "")


def test_the_forms_default_is_auto_which_runs_anywhere() -> None:
    for job in ("fit", "custom-loop"):
        (param,) = [p for p in JOBS[job].params if p.name == "cross_device_ops"]
        assert param.default == "auto" and "auto" in param.choices


def test_auto_on_cpus_runs_hierarchical_copy_and_says_why(two_cpus: DeviceConfig) -> None:
    result, error, _ = run_job(two_cpus, "custom-loop", {"steps": 3})
    assert error is None, error
    assert result["requested_cross_device_ops"] == "auto" and result["cross_device_ops"] == "HierarchicalCopyAllReduce"
    assert result["notes"] == ["cross-device ops auto: HierarchicalCopyAllReduce, since NCCL all-reduces between "
                               "NVIDIA GPUs only, not over /CPU:0, /CPU:1"]


def test_nccl_needs_gpus_and_the_learning_rate_table_is_the_seeds() -> None:
    assert nccl_unavailable(["/job:localhost/replica:0/task:0/device:GPU:0", "/device:GPU:1"]) is None
    assert "not over /CPU:1" in (nccl_unavailable(["/device:GPU:0", "/device:CPU:1"]) or "")
    assert learning_rate_for("by-global-batch", 10, 0.01) == (0.15, "LEARNING_RATES_BY_BATCH_SIZE[10]")
    assert learning_rate_for("fixed", 10, 0.01) == (0.01, "fixed")
    with pytest.raises(JobError, match=r"global batch is 6.*only knows 5, 10, 20"):
        learning_rate_for("by-global-batch", 6, 0.01)


@pytest.fixture
def two_cpus() -> DeviceConfig:
    return DeviceConfig(cpu_devices=2, log_placement=False)


def test_nccl_on_cpus_says_so_and_uses_hierarchical_copy_then_evaluates(two_cpus: DeviceConfig) -> None:
    result, error, _ = run_job(two_cpus, "fit", {"epochs": 2, "cross_device_ops": "NcclAllReduce"})
    assert error is None, error
    assert result["requested_cross_device_ops"] == "NcclAllReduce"
    assert result["cross_device_ops"] == "HierarchicalCopyAllReduce" and result["replicas_in_sync"] == 2
    assert any("NcclAllReduce cannot run here" in note for note in result["notes"])
    assert math.isfinite(result["evaluate"]["loss"]) and result["evaluate"]["loss"] <= result["loss"][0]


@pytest.mark.parametrize("ops", ["HierarchicalCopyAllReduce", "ReductionToOneDevice"])
def test_numpy_input_with_each_cross_device_op_and_the_lr_table(two_cpus: DeviceConfig, ops: str) -> None:
    params = {"epochs": 3, "data": "numpy", "cross_device_ops": ops, "lr_rule": "by-global-batch",
              "evaluate": False}
    result, error, _ = run_job(two_cpus, "fit", params)
    assert error is None, error
    assert result["cross_device_ops"] == ops and result["notes"] == [] and result["input"] == "numpy"
    assert result["global_batch_size"] == 10 and result["learning_rate"] == 0.15
    assert result["loss"][-1] < result["loss"][0] and "evaluate" not in result


def test_custom_loop_with_cross_device_ops_and_a_global_batch_off_the_table(two_cpus: DeviceConfig) -> None:
    result, error, _ = run_job(two_cpus, "custom-loop", {"steps": 4, "cross_device_ops": "ReductionToOneDevice"})
    assert error is None, error
    assert result["cross_device_ops"] == "ReductionToOneDevice" and result["loss"][-1] < result["loss"][0]
    result, error, _ = run_job(two_cpus, "custom-loop", {"steps": 2, "batch_per_replica": 3,
                                                          "lr_rule": "by-global-batch"})
    assert result is None and error is not None and "global batch is 6" in error.message


def test_one_device_runs_under_the_default_strategy() -> None:
    one_cpu = DeviceConfig(log_placement=False)
    result, error, _ = run_job(one_cpu, "custom-loop", {"steps": 3})
    assert error is None, error
    assert result["strategy"].startswith("default strategy") and result["replicas_in_sync"] == 1
    assert result["cross_device_ops"] is None and result["loss"][-1] < result["loss"][0]
    result, error, _ = run_job(one_cpu, "fit", {"epochs": 1, "devices": "/CPU:0"})  # named: mirrored
    assert error is None, error
    assert result["strategy"] == "MirroredStrategy"


@pytest.mark.parametrize("job", ["fit", "custom-loop"])
@pytest.mark.parametrize("devices", ["cpu:0,/device:CPU:0", "/CPU:1,/job:localhost/replica:0/task:0/device:CPU:1"])
def test_a_device_named_twice_is_refused_before_tensorflow(job: str, devices: str) -> None:
    # TensorFlow's MirroredStrategy asserted "No duplicates allowed in `devices` argument" (exit 1, in the run).
    from tf_device_panel.core.catalogue import ParamError

    with pytest.raises(ParamError) as caught:
        JOBS[job].resolve(texts={"devices": devices})
    ((name, message),) = caught.value.problems
    assert name == "devices" and "is listed twice (as " in message and "list each device once" in message
    assert JOBS[job].resolve(texts={"devices": "/CPU:0,/CPU:1"})["devices"] == "/CPU:0,/CPU:1"


def test_the_command_line_refuses_a_duplicate_device_with_exit_2() -> None:
    import os
    import subprocess
    import sys

    from helpers import ROOT

    done = subprocess.run([sys.executable, "-m", "tf_device_panel", "run", "fit", "-p", "devices=cpu:0,/device:CPU:0"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120, env=os.environ.copy())
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert "'/device:CPU:0' is listed twice (as 'cpu:0')" in done.stdout + done.stderr
    assert "runtime ready" not in done.stdout + done.stderr and "Traceback" not in done.stderr  # TF never started


@pytest.mark.parametrize("params", [{"epochs": 2}, {"epochs": 1, "model": "cnn", "samples": 8, "image_size": 8},
                                    {"epochs": 1, "data": "numpy"}], ids=["dense", "cnn", "numpy"])
def test_the_fit_prints_no_warning_of_its_own_making(two_cpus: DeviceConfig, params: dict[str, object]) -> None:
    """Keras warned "`shuffle=True` was passed, but will be ignored since the data `x` was provided as a
    tf.data.Dataset" (and quoted a line of its own code) on every fit the panel ran."""
    from tf_device_panel.core.protocol import events

    result, error, seen = run_job(two_cpus, "fit", params)
    assert error is None and result is not None, error
    output = [e.text for e in seen if isinstance(e, events.Log) and e.stream in ("stdout", "stderr")
              and e.source != "tensorflow"]
    assert any(text.startswith("epoch 1/") for text in output), output  # the job's own lines are read here
    warned = [text for text in output if "Warning" in text or "warnings.warn" in text]
    assert not warned, warned
