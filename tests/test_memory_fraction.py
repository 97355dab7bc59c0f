"""memory_fraction: TF2's counterpart of per_process_gpu_memory_fraction, in profiles, snippets and the window."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from tf_device_panel.core.config import DeviceConfig, parse_config, to_python_snippet, validate
from tf_device_panel.core.config.plan import StepError


def problems_for(data: dict) -> list[str]:
    _, problems = parse_config({"version": 1, **data})
    return [str(p) for p in problems]


def test_a_fraction_round_trips_through_a_profile() -> None:
    config, problems = parse_config({"version": 1, "memory_fraction": 0.4})
    assert problems == [] and config is not None and config.memory_fraction == 0.4
    assert config.to_json()["memory_fraction"] == 0.4 and "memory fraction 0.4 per GPU" in config.summary()
    assert DeviceConfig.from_json(config.to_json()) == config
    assert DeviceConfig.from_json({"version": 1, "memory_fraction": 1}).memory_fraction == 1.0


@pytest.mark.parametrize(("value", "expected"), [
    (0, "is not above 0 and at most 1"), (1.5, "is not above 0 and at most 1"), (-0.2, "not above 0"),
    ("0.4", "expected a number between 0 and 1, got a string"), (True, "got a boolean"),
])
def test_fractions_outside_0_to_1_are_refused(value: object, expected: str) -> None:
    (problem,) = problems_for({"memory_fraction": value})
    assert problem.startswith("memory_fraction: ") and expected in problem


def test_a_fraction_cannot_be_combined_with_growth_or_virtual_gpus() -> None:
    assert any("cannot be combined with memory growth" in p
               for p in problems_for({"memory_fraction": 0.4, "memory_growth": True}))
    assert any("cannot be combined with virtual GPUs" in p
               for p in problems_for({"memory_fraction": 0.4, "virtual_gpus": {"0": [1024]}}))
    assert validate(DeviceConfig(memory_fraction=0.4)) == []


def test_the_snippet_limits_each_visible_gpu_to_its_share() -> None:
    snippet = to_python_snippet(DeviceConfig(memory_fraction=0.4))
    assert "def gpu_total_mib(index" in snippet and "cuDeviceTotalMem_v2" in snippet
    assert "limit = int(gpu_total_mib(index) * 0.4)" in snippet
    assert "LogicalDeviceConfiguration(memory_limit=limit)" in snippet
    compile(snippet, "snippet", "exec")  # it must be valid Python to paste


def test_the_snippet_shows_the_environment_variable_way_to_memory_growth() -> None:
    snippet = to_python_snippet(DeviceConfig(memory_growth=True))
    growth = snippet.index("set_memory_growth(gpu, True)")
    env = snippet.index("TF_FORCE_GPU_ALLOW_GROWTH")
    assert env < growth and "os.environ['TF_FORCE_GPU_ALLOW_GROWTH'] = 'true'" in snippet


def test_the_configuration_panel_edits_the_fraction(qtbot) -> None:
    from tf_device_panel.gui.docks.config_panel import ConfigPanel

    panel = ConfigPanel()
    qtbot.addWidget(panel)
    panel.set_config(DeviceConfig(memory_fraction=0.333))
    assert panel.config().memory_fraction == 0.333  # the loaded value, not the box's rounded 0.33
    panel.inputs["memory_fraction"].setValue(0.5)
    assert panel.config().memory_fraction == 0.5 and panel.apply_button.isEnabled()
    panel.inputs["memory_growth"].setChecked(True)
    label = panel.field_problems["memory_fraction"]
    assert not label.isHidden() and "cannot be combined with memory growth" in label.text()
    assert not panel.apply_button.isEnabled()
    panel.inputs["memory_growth"].setChecked(False)
    panel.inputs["memory_fraction"].setValue(0.0)  # shown as "off"
    assert panel.config().memory_fraction is None and panel.apply_button.isEnabled()


class FakeConfigApi:
    """tf.config's setters, recording the calls, on a machine with two physical GPUs."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []
        self.visible = ["GPU:0", "GPU:1"]
        self.experimental = SimpleNamespace(set_memory_growth=lambda gpu, on: self.calls.append(("growth", gpu)))

    def list_physical_devices(self, kind: str) -> list[str]:
        return ["GPU:0", "GPU:1"] if kind == "GPU" else ["CPU:0"]

    def set_visible_devices(self, devices: list[str], kind: str) -> None:
        self.visible = list(devices)
        self.calls.append(("visible", tuple(devices)))

    def get_visible_devices(self, kind: str) -> list[str]:
        return self.visible

    @staticmethod
    def LogicalDeviceConfiguration(memory_limit: int | None = None) -> int | None:
        return memory_limit

    def set_logical_device_configuration(self, device: str, limits: list) -> None:
        self.calls.append(("logical", device, tuple(limits)))

    def set_soft_device_placement(self, on: bool) -> None:
        self.calls.append(("soft", on))


def test_the_runtime_limits_each_visible_gpu_to_its_share_of_total_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    from tf_device_panel.core.devices import gpu_facts
    from tf_device_panel.core.runproc import runtime_main

    totals = {0: 81079, 1: 40960}
    monkeypatch.setattr(gpu_facts, "gpu_total_mib", lambda index: totals[index])
    api = FakeConfigApi()
    tf = SimpleNamespace(config=api, debugging=SimpleNamespace(set_log_device_placement=lambda on: None))
    steps = runtime_main.apply_config(tf, DeviceConfig(visible_gpus=(1,), memory_fraction=0.4, log_placement=False))
    assert ("logical", "GPU:1", (int(40960 * 0.4),)) in api.calls
    assert not any(call[:2] == ("logical", "GPU:0") for call in api.calls)  # hidden GPUs are left alone
    assert api.calls.index(("visible", ("GPU:1",))) < api.calls.index(("logical", "GPU:1", (16384,)))
    assert "set_logical_device_configuration(GPU:1, [16384] MiB = 0.4 × 40960 MiB)" in steps
    assert runtime_main.applied_plan.gpu_limits == {1: (16384,)}


def test_a_gpu_whose_memory_cannot_be_read_stops_the_runtime_with_the_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    from tf_device_panel.core.devices import gpu_facts
    from tf_device_panel.core.runproc import runtime_main

    def no_driver(index: int) -> int:
        raise OSError("libcuda.so.1: cannot open shared object file")

    monkeypatch.setattr(gpu_facts, "gpu_total_mib", no_driver)
    tf = SimpleNamespace(config=FakeConfigApi(), debugging=SimpleNamespace(set_log_device_placement=lambda on: None))
    with pytest.raises(StepError, match=r"GPU:0's total memory for memory_fraction.*libcuda"):
        runtime_main.apply_config(tf, DeviceConfig(memory_fraction=0.5))


@pytest.mark.gpu
def test_the_cuda_driver_reports_each_gpus_total_memory_as_nvml_does() -> None:
    from tf_device_panel.core.devices.gpu_facts import gpu_total_mib
    from tf_device_panel.core.devices.nvml import Nvml

    nvml = Nvml()
    if not nvml.init() or not nvml.gpus():
        pytest.skip(f"needs a real NVIDIA GPU and driver ({nvml.message or 'no GPU'})")
    for gpu in nvml.gpus():
        total = gpu_total_mib(gpu.index)  # no CUDA_VISIBLE_DEVICES here, so CUDA's order is NVML's (PCI)
        print(f"GPU {gpu.index}: CUDA {total} MiB, NVML {gpu.memory_total_mib} MiB")
        # NVML counts memory the driver reserves for itself (an H100: 81559 MiB against CUDA's 81079)
        assert 0.95 * gpu.memory_total_mib <= total <= gpu.memory_total_mib


def test_a_fraction_that_leaves_a_gpu_under_1_mib_is_refused() -> None:
    from tf_device_panel.core.config import ConfigError, DeviceConfig, GpuInfo, validate

    with pytest.raises(ConfigError) as caught:  # no GPU needed: under 1 MiB even of a 1 TiB GPU
        DeviceConfig.from_json({"version": 1, "memory_fraction": 1e-9})
    (problem,) = caught.value.problems
    assert problem.field == "memory_fraction" and "limits each GPU to under 1 MiB" in problem.message
    h100 = [GpuInfo(0, "NVIDIA H100 80GB HBM3", 81079, total_source="CUDA")]
    (problem,) = validate(DeviceConfig(memory_fraction=1e-5), h100)  # 0.81 MiB of the H100
    assert str(problem).startswith("memory_fraction: 1e-05 × GPU 0's 81079 MiB is under 1 MiB — use at least 1.2e-05")
    assert validate(DeviceConfig(memory_fraction=2e-5), h100) == []  # 1.6 MiB: tiny, but a limit
    assert validate(DeviceConfig(memory_fraction=1e-5, visible_gpus=()), h100) == []  # no visible GPU to limit
