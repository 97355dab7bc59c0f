"""One configuration schema: a setting declared once (a field of DeviceConfig, with `setting(...)`) reaches
validation, the window's form, the snippet and the run; one validator whatever the configuration's source."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from test_tfplan import FakeTf, run_snippet
from tf_device_panel.core.config import (
    MAX_CPU_DEVICES,
    ConfigError,
    DeviceConfig,
    Kind,
    config_fields,
    parse_config,
    split_field,
    to_python_snippet,
)
from tf_device_panel.core.config import plan as tfplan
from tf_device_panel.core.config.schema import setting
from tf_device_panel.core.runproc import runtime_main

DETERMINISM = "tf.config.experimental.enable_op_determinism()"


def determinism_steps(config: Any, gpus: Any) -> list[tfplan.Step]:
    if not config.op_determinism:
        return []

    def apply(tf: Any) -> tfplan.Applied:
        tf.config.experimental.enable_op_determinism()
        return tfplan.Applied("enable_op_determinism()")

    return [tfplan.Step("enable_op_determinism(): the same inputs give the same results", DETERMINISM, apply)]


# The one place a new setting is added: here a subclass stands in for the line a developer adds to DeviceConfig.
@dataclasses.dataclass(frozen=True)
class WithDeterminism(DeviceConfig):
    op_determinism: bool = setting(
        False, kind=Kind.TOGGLE, label="Op determinism", help="tf.config.experimental.enable_op_determinism()",
        plan=determinism_steps, stage=tfplan.Stage.PLACEMENT)


def test_a_new_setting_is_validated_whatever_the_source() -> None:
    with pytest.raises(ConfigError) as from_json:
        WithDeterminism.from_json({"version": 1, "op_determinism": "yes"})
    (problem,) = from_json.value.problems
    assert str(problem) == "op_determinism: expected true or false, got a string 'yes'"
    with pytest.raises(ConfigError) as built:  # from code (a form, the command line): refused alike
        WithDeterminism(op_determinism="yes")  # type: ignore[arg-type]
    assert [p.field for p in built.value.problems] == ["op_determinism"]
    # The profile carries it, and reads it back; the plain configuration does not know it.
    config = WithDeterminism.from_json({"version": 1, "op_determinism": True})
    assert config.op_determinism and WithDeterminism.from_json(config.to_json()) == config
    assert [p.field for p in parse_config(config.to_json())[1]] == ["op_determinism"]  # "unknown key"


def test_a_new_setting_appears_in_the_form(qtbot) -> None:
    from PySide6.QtWidgets import QCheckBox
    from tf_device_panel.gui.docks.config_panel import ConfigPanel

    panel = ConfigPanel(config_type=WithDeterminism)
    qtbot.addWidget(panel)
    box = panel.inputs["op_determinism"]
    assert isinstance(box, QCheckBox) and box.text() == "Op determinism" and DETERMINISM in box.toolTip()
    assert box.isChecked() is False and panel.config() == WithDeterminism()
    box.setChecked(True)
    assert panel.config() == WithDeterminism(op_determinism=True) and panel.apply_button.isEnabled()
    panel.set_config(WithDeterminism(op_determinism=False, cpu_devices=3))
    assert not box.isChecked() and panel.inputs["cpu_devices"].value() == 3


def test_a_new_setting_reaches_the_snippet_and_the_run(monkeypatch: pytest.MonkeyPatch) -> None:
    config = WithDeterminism(op_determinism=True)
    snippet = to_python_snippet(config)
    assert DETERMINISM in snippet and DETERMINISM not in to_python_snippet(WithDeterminism())
    compile(snippet, "snippet", "exec")
    run, pasted = FakeTf(), FakeTf()
    for tf in (run, pasted):
        tf.config.experimental.enable_op_determinism = lambda tf=tf: tf.calls.append(("deterministic",))
    steps = runtime_main.apply_config(run, config)
    run_snippet(config, pasted, monkeypatch)
    assert steps[-1] == "enable_op_determinism()" and ("deterministic",) in run.calls
    assert run.calls == pasted.calls  # the pasted snippet and the run make the same calls, in the same order


def test_a_new_setting_is_named_in_the_summary_the_cli_and_the_status_bar_show() -> None:
    assert WithDeterminism(op_determinism=True).summary() == "all GPUs, placement log, op determinism"
    assert WithDeterminism().summary() == DeviceConfig().summary() == "all GPUs, placement log"


def test_the_form_has_a_widget_for_every_labelled_setting_and_nothing_else(qtbot) -> None:
    from tf_device_panel.gui.docks.config_panel import ConfigPanel

    panel = ConfigPanel()
    qtbot.addWidget(panel)
    labelled = [f.key for f in config_fields(DeviceConfig) if f.label]
    assert list(panel.inputs) == labelled  # in the schema's order
    assert set(labelled) == {"memory_growth", "memory_fraction", "cpu_devices", "soft_placement", "log_placement",
                             "gpu_allocator", "cpu_memory_limit_mib"}
    for declared in config_fields(DeviceConfig):
        if declared.label:
            assert panel.inputs[declared.key].toolTip() == declared.help


@pytest.mark.parametrize(("field", "value"), [
    ("cpu_devices", "2"), ("cpu_devices", True), ("memory_growth", 1), ("memory_fraction", "0.4"),
    ("gpu_allocator", None), ("visible_gpus", (0, -1)), ("virtual_gpus", {0: (1024, 1.5)}),
])
def test_a_configuration_of_the_wrong_type_cannot_be_built(field: str, value: object) -> None:
    with pytest.raises(ConfigError) as refused:
        DeviceConfig(**{field: value})
    assert [p.field for p in refused.value.problems] == [field]
    with pytest.raises(ConfigError):
        DeviceConfig().with_changes(**{field: value})


def test_a_profile_and_the_window_get_the_same_words_for_the_same_rule(qtbot) -> None:
    """The three validators (the panel, parse_config, validate) said the same rule in different words."""
    from tf_device_panel.core.config import GpuInfo
    from tf_device_panel.gui.docks.config_panel import ConfigPanel

    panel = ConfigPanel()
    qtbot.addWidget(panel)
    panel.inputs["cpu_devices"].setValue(100000)
    (from_profile,) = parse_config({"version": 1, "cpu_devices": 100000})[1]
    assert panel.field_problems["cpu_devices"].text() == f"{from_profile.message} — {from_profile.hint}"
    assert "between 1 and 64" in from_profile.message and f"at most {MAX_CPU_DEVICES}" in from_profile.hint

    panel.inputs["cpu_devices"].setValue(1)
    panel.set_gpus([GpuInfo(0, "L4", 23034)])
    (editor,) = panel.gpu_editors
    editor.add_split(0)
    (from_profile,) = parse_config({"version": 1, "virtual_gpus": {"0": [0]}})[1]
    assert from_profile.field == split_field(0) == "virtual_gpus['0']"
    assert editor.problem_label.text() == f"{from_profile.message} — {from_profile.hint}"
    assert not panel.apply_button.isEnabled()


def test_the_cuda_driver_probe_lives_with_the_device_facts_not_the_configuration() -> None:
    from pathlib import Path

    from test_layering import ROOT, imported_roots
    from tf_device_panel.core.devices import gpu_facts

    assert {p.name for p in (ROOT / "core" / "config").glob("*.py") if "ctypes" in imported_roots(p)} == set()
    assert "ctypes" in imported_roots(Path(gpu_facts.__file__))
    snippet = to_python_snippet(DeviceConfig(memory_fraction=0.5))  # the snippet still carries the probe whole
    assert "def gpu_total_mib(index: int) -> int:" in snippet and "cuDeviceTotalMem_v2" in snippet
