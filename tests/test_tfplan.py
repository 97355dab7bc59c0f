"""One plan for a configuration (core.config.plan): the run and the pasted snippet make the same tf.config calls,
refuse the same profiles, and describe the devices they made."""

from __future__ import annotations

import ctypes
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any, NamedTuple

import pytest
from tf_device_panel.core.config import DeviceConfig, Kind
from tf_device_panel.core.config import plan as tfplan
from tf_device_panel.core.config.schema import setting
from tf_device_panel.core.runproc import runtime_main


class Device(NamedTuple):
    name: str
    device_type: str


class FakeTf:
    """The tf.config calls a plan makes, recorded, on a machine with `gpus` physical GPUs (TF's behaviour
    for each call as TF 2.21 documents it; the real one is exercised by test_snippet and test_runtime)."""

    def __init__(self, gpus: int = 2) -> None:
        self.calls: list[tuple[Any, ...]] = []
        self.physical = [Device(f"/physical_device:GPU:{i}", "GPU") for i in range(gpus)]
        self.visible = list(self.physical)
        self.logical_configs: dict[str, list[Any]] = {}
        calls = self.calls
        self.config = SimpleNamespace(
            list_physical_devices=lambda kind=None: (self.physical if kind == "GPU"
                                                     else [Device("/physical_device:CPU:0", "CPU")]),
            get_visible_devices=lambda kind=None: list(self.visible),
            set_visible_devices=self._set_visible,
            experimental=SimpleNamespace(set_memory_growth=lambda gpu, on: calls.append(("growth", gpu.name, on))),
            LogicalDeviceConfiguration=lambda memory_limit=None: ("limit", memory_limit),
            set_logical_device_configuration=self._set_logical,
            set_soft_device_placement=lambda on: calls.append(("soft", on)),
            list_logical_devices=self._logical,
        )
        self.debugging = SimpleNamespace(set_log_device_placement=lambda on: calls.append(("log", on)))

    def _set_visible(self, devices: list[Device], kind: str) -> None:
        self.visible = list(devices)
        self.calls.append(("visible", tuple(d.name for d in devices)))

    def _set_logical(self, device: Device, configs: list[Any]) -> None:
        self.logical_configs[device.name] = list(configs)
        self.calls.append(("logical", device.name, tuple(configs)))

    def _logical(self) -> list[Device]:
        devices = [Device("/device:CPU:0", "CPU")]
        count = sum(len(self.logical_configs.get(gpu.name, [None])) for gpu in self.visible)
        return devices + [Device(f"/device:GPU:{i}", "GPU") for i in range(count)]


class FakeDriver:
    """libcuda's three calls gpu_total_mib makes; `totals` by CUDA index, a missing index fails (status 100)."""

    def __init__(self, totals: dict[int, int]) -> None:
        self.totals = totals

    def cuInit(self, flags: int) -> int:
        return 0

    def cuDeviceGet(self, device: Any, index: int) -> int:
        device._obj.value = index
        return 0 if index in self.totals else 100

    def cuDeviceTotalMem_v2(self, total: Any, device: Any) -> int:
        if device.value not in self.totals:
            return 100
        total._obj.value = self.totals[device.value] * 2**20
        return 0


@pytest.fixture
def driver(monkeypatch: pytest.MonkeyPatch) -> Callable[[dict[int, int]], None]:
    def install(totals: dict[int, int]) -> None:
        monkeypatch.setattr(ctypes, "CDLL", lambda name: FakeDriver(totals))
    return install


def run_snippet(config: DeviceConfig, tf: FakeTf, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "tensorflow", tf)
    exec(compile(tfplan.to_python(tfplan.plan(config)), "<snippet>", "exec"), {})


CONFIGS = [
    DeviceConfig(),
    DeviceConfig(visible_gpus=(1,), memory_growth=True, cpu_devices=3, soft_placement=False),
    DeviceConfig(virtual_gpus={0: (2048, 4096)}, gpu_allocator="cuda_malloc_async", log_placement=False),
    DeviceConfig(visible_gpus=(0, 1), virtual_gpus={1: (1024, 1024, 1024)}),
    DeviceConfig(memory_fraction=0.25),
    DeviceConfig(visible_gpus=(1,), memory_fraction=0.5),
    DeviceConfig(visible_gpus=()),
]


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: c.summary())
def test_the_snippet_makes_the_same_calls_as_the_run(config: DeviceConfig, driver: Any,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    driver({0: 81079, 1: 40960})  # the H100's total as CUDA reports it (NVML says 81559)
    monkeypatch.delenv("TF_GPU_ALLOCATOR", raising=False)
    pasted, run = FakeTf(), FakeTf()
    run_snippet(config, pasted, monkeypatch)
    pasted_env = os.environ.get("TF_GPU_ALLOCATOR")
    monkeypatch.delenv("TF_GPU_ALLOCATOR", raising=False)
    runtime_main.apply_config(run, config)
    assert pasted.calls == run.calls and pasted.calls
    assert pasted_env == os.environ.get("TF_GPU_ALLOCATOR")


def test_a_fraction_on_the_h100_gives_the_limit_measured_there(driver: Any) -> None:
    driver({0: 81079})
    tf = FakeTf(gpus=1)
    steps = runtime_main.apply_config(tf, DeviceConfig(memory_fraction=0.25))
    # measured on the H100: `devices` under memory_fraction 0.25 showed "limit 20269 MiB"
    assert ("logical", "/physical_device:GPU:0", (("limit", 20269),)) in tf.calls
    assert "set_logical_device_configuration(GPU:0, [20269] MiB = 0.25 × 81079 MiB)" in steps


def test_a_split_between_cudas_total_and_nvmls_is_refused_before_tensorflow_fails(
        driver: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    driver({0: 81079})  # the H100: CUDA 81,079 MiB, NVML 81,559 (recorded in tests/fixtures/h100)
    config = DeviceConfig(virtual_gpus={0: (40000, 41300)})  # 81,300: passed NVML's total, failed in TF
    with pytest.raises(tfplan.StepError,
                       match="limits sum to 81300 MiB but GPU 0 has 81079 MiB as CUDA counts it"):
        runtime_main.apply_config(FakeTf(gpus=1), config)
    pasted = FakeTf(gpus=1)
    with pytest.raises(ValueError, match="limits sum to 81300 MiB but GPU 0 has 81079 MiB as CUDA counts it"):
        run_snippet(config, pasted, monkeypatch)
    assert not [call for call in pasted.calls if call[0] == "logical"]
    runtime_main.apply_config(FakeTf(gpus=1), DeviceConfig(virtual_gpus={0: (40000, 41079)}))  # fits exactly


def test_the_snippet_refuses_a_gpu_the_machine_lacks_as_the_run_does(monkeypatch: pytest.MonkeyPatch) -> None:
    config = DeviceConfig(visible_gpus=(0, 3), virtual_gpus={3: (1024,)})
    with pytest.raises(tfplan.StepError) as refused:
        runtime_main.apply_config(FakeTf(gpus=2), config)
    pasted = FakeTf(gpus=2)
    with pytest.raises(IndexError) as pasted_refused:  # it used to drop GPU 3 and split nothing
        run_snippet(config, pasted, monkeypatch)
    assert str(pasted_refused.value) == str(refused.value.cause) == \
        "GPU 3 requested, but TensorFlow sees 2 physical GPU(s)"
    assert refused.value.step == "check GPU indices"
    assert pasted.calls == []  # nothing configured before the refusal


def test_a_driver_error_on_a_later_gpu_stops_the_snippet(driver: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    driver({0: 81079})  # GPU 1's memory cannot be read
    pasted = FakeTf(gpus=2)
    with pytest.raises(RuntimeError, match="CUDA driver error 100 while reading GPU 1's memory"):
        run_snippet(DeviceConfig(memory_fraction=0.5), pasted, monkeypatch)  # it used to print it and go on
    with pytest.raises(tfplan.StepError, match="GPU:1's total memory"):
        runtime_main.apply_config(FakeTf(gpus=2), DeviceConfig(memory_fraction=0.5))


def test_the_logical_devices_carry_their_limits_when_one_gpu_is_split_and_another_is_not(driver: Any) -> None:
    driver({0: 81079, 1: 81079})
    tf = FakeTf(gpus=2)
    config = DeviceConfig(virtual_gpus={0: (2048, 4096)})
    runtime_main.apply_config(tf, config)
    gpus = [d for d in runtime_main.describe_logical(tf, config) if d["device_type"] == "GPU"]
    assert [(d["short_name"], d.get("memory_limit_mib")) for d in gpus] == [
        ("/GPU:0", 2048), ("/GPU:1", 4096), ("/GPU:2", None)]  # it used to give none of them a limit


def test_a_hidden_gpu_shifts_the_limits_to_the_visible_ones(driver: Any) -> None:
    driver({0: 81079, 1: 40960})
    tf = FakeTf(gpus=2)
    config = DeviceConfig(visible_gpus=(1,), memory_fraction=0.5)
    runtime_main.apply_config(tf, config)
    gpus = [d for d in runtime_main.describe_logical(tf, config) if d["device_type"] == "GPU"]
    assert [(d["short_name"], d.get("memory_limit_mib")) for d in gpus] == [("/GPU:0", 20480)]


def test_an_inherited_async_allocator_is_removed_when_the_profile_says_default(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TF_GPU_ALLOCATOR", "cuda_malloc_async")
    steps = runtime_main.apply_config(FakeTf(), DeviceConfig())
    assert "TF_GPU_ALLOCATOR" not in os.environ
    assert "TF_GPU_ALLOCATOR unset (it was 'cuda_malloc_async'; the profile says default)" in steps
    assert "\nos.environ.pop('TF_GPU_ALLOCATOR', None)  #" in tfplan.to_python(tfplan.plan(DeviceConfig()))
    monkeypatch.setenv("TF_GPU_ALLOCATOR", "cuda_malloc_async")
    runtime_main.apply_config(FakeTf(), DeviceConfig(gpu_allocator="cuda_malloc_async"))
    assert os.environ["TF_GPU_ALLOCATOR"] == "cuda_malloc_async"


def test_every_step_has_words_and_code_that_compiles() -> None:
    config = DeviceConfig(visible_gpus=(0,), memory_growth=True, cpu_devices=2, gpu_allocator="cuda_malloc_async")
    for step in tfplan.plan(config):
        assert step.description and step.code
        compile(step.code, step.description, "exec")
    known = tfplan.plan(DeviceConfig(memory_fraction=0.25), [tfplan.GpuInfo(0, "H100", 81079)])
    assert "GPU:0 20269 MiB = 0.25 × 81079 MiB" in known[-3].description


def test_a_new_step_declared_once_reaches_the_run_and_the_snippet(monkeypatch: pytest.MonkeyPatch) -> None:
    """What a new configuration field takes: one field, declared with its step builder and its stage."""
    def determinism_steps(config: DeviceConfig, gpus: Any) -> list[tfplan.Step]:
        def apply(tf: Any) -> tfplan.Applied:
            tf.config.experimental.enable_op_determinism()
            return tfplan.Applied("enable_op_determinism()")
        return [tfplan.Step("enable_op_determinism()", "tf.config.experimental.enable_op_determinism()", apply)]

    @dataclass(frozen=True)
    class Deterministic(DeviceConfig):
        deterministic: bool = setting(True, kind=Kind.TOGGLE, plan=determinism_steps, stage=tfplan.Stage.LOGICAL)

    run, pasted = FakeTf(), FakeTf()
    for tf in (run, pasted):
        tf.config.experimental.enable_op_determinism = lambda tf=tf: tf.calls.append(("deterministic",))
    steps = runtime_main.apply_config(run, Deterministic())
    run_snippet(Deterministic(), pasted, monkeypatch)
    assert steps[-3] == "enable_op_determinism()" and run.calls == pasted.calls
    assert run.calls[-3:] == [("deterministic",), ("soft", True), ("log", True)]
