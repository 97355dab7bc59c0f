"""One form builder for the configuration's settings and the jobs' parameters: the kind picks the editor, the
declaration fills it in, and each form's own policy (held to the range, or any number with the range named beside
it) is said in its `Declared`."""

from __future__ import annotations

from typing import Any

import pytest
from PySide6.QtWidgets import QCheckBox, QComboBox, QDoubleSpinBox, QLineEdit, QSpinBox
from tf_device_panel.core.catalogue import JOBS, Param
from tf_device_panel.core.config import DeviceConfig, Kind, config_fields
from tf_device_panel.gui.widgets.form_builder import (
    INT_LIMIT,
    build_editor,
    param_declared,
    setting_declared,
)


def setting(key: str) -> Any:
    return next(f for f in config_fields(DeviceConfig) if f.key == key)


def param(job: str, name: str) -> Param:
    return next(p for p in JOBS[job].params if p.name == name)


def test_a_setting_and_a_parameter_of_one_kind_get_one_editor(qtbot: Any) -> None:
    cap = build_editor(setting_declared(setting("cpu_memory_limit_mib")))
    budget = build_editor(param_declared(param("fit-batch", "budget_mib"), []))
    for editor, declared_help in ((cap, setting("cpu_memory_limit_mib").help),
                                  (budget, param("fit-batch", "budget_mib").help)):
        qtbot.addWidget(editor.widget)
        assert isinstance(editor.widget, QSpinBox) and editor.widget.suffix() == " MiB"
        assert editor.widget.toolTip() == declared_help
    # the setting's spin box is held to its form's range and says what 0 means; the job's takes any number
    declared = setting("cpu_memory_limit_mib")
    assert (cap.widget.minimum(), cap.widget.maximum()) == declared.form_range != (declared.minimum, declared.maximum)
    assert cap.widget.specialValueText() == setting("cpu_memory_limit_mib").form_zero_text != ""
    assert (budget.widget.minimum(), budget.widget.maximum()) == (0, INT_LIMIT)
    assert budget.read() == 256  # the declared default
    with qtbot.waitSignal(budget.edited):
        budget.show(100_000)
    assert budget.read() == 100_000  # beyond the declared maximum: the job form names the range instead


def test_toggles_choices_and_fractions_follow_their_declarations(qtbot: Any) -> None:
    growth = build_editor(setting_declared(setting("memory_growth")))
    assert isinstance(growth.widget, QCheckBox) and growth.widget.text() == setting("memory_growth").label
    soft = build_editor(param_declared(param("session", "soft_placement"), []))
    assert isinstance(soft.widget, QCheckBox) and soft.widget.text() == ""  # its label stands beside it
    allocator = build_editor(setting_declared(setting("gpu_allocator")))
    assert isinstance(allocator.widget, QComboBox)
    assert [allocator.widget.itemText(i) for i in range(allocator.widget.count())] == list(
        setting("gpu_allocator").choices)
    fraction = build_editor(setting_declared(setting("memory_fraction")))
    assert isinstance(fraction.widget, QDoubleSpinBox) and fraction.widget.specialValueText() == "off"
    fraction.show(None)
    assert fraction.read() == 0.0
    for editor in (growth, soft, allocator, fraction):
        qtbot.addWidget(editor.widget)


def test_devices_suggest_the_runtimes_and_text_kinds_say_what_empty_means(qtbot: Any) -> None:
    devices = build_editor(param_declared(param("fit", "devices"), ["/CPU:0", "/CPU:1"]))
    qtbot.addWidget(devices.widget)
    assert isinstance(devices.widget, QComboBox) and devices.widget.isEditable()
    assert [devices.widget.itemText(i) for i in range(devices.widget.count())] == ["", "/CPU:0", "/CPU:1",
                                                                                   "/CPU:0,/CPU:1"]
    line = devices.widget.lineEdit()
    assert line is not None and line.placeholderText() == "empty: all GPUs, else all CPUs"
    sizes = build_editor(param_declared(param("benchmark", "sizes"), []))
    qtbot.addWidget(sizes.widget)
    assert isinstance(sizes.widget, QLineEdit) and sizes.read() == "256,512,1024"


def test_a_kind_without_an_editor_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="virtual_gpus: a gpu_splits has no form editor"):
        build_editor(setting_declared(setting("virtual_gpus")))
    assert Kind.GPU_SPLITS is setting("virtual_gpus").kind


def test_fit_batchs_model_takes_a_built_in_name_or_a_keras_file_through_a_file_picker(qtbot: Any, monkeypatch,
                                                                                    tmp_path) -> None:
    from PySide6.QtWidgets import QFileDialog, QPushButton

    editor = build_editor(param_declared(param("fit-batch", "model"), []))
    qtbot.addWidget(editor.widget)
    (combo,) = editor.widget.findChildren(QComboBox)
    assert combo.isEditable() and [combo.itemText(i) for i in range(combo.count())] == ["dense", "cnn"]
    assert editor.read() == "cnn"
    asked: list[str] = []
    saved = str(tmp_path / "net.keras")
    monkeypatch.setattr(QFileDialog, "getOpenFileName",
                        lambda parent, title, start, file_filter: (asked.append(file_filter), (saved, ""))[1])
    (browse,) = editor.widget.findChildren(QPushButton)
    browse.click()
    assert asked == ["saved Keras model (*.keras)"] and editor.read() == saved
    script = build_editor(param_declared(param("fit-batch", "script"), []))
    qtbot.addWidget(script.widget)
    (line,) = script.widget.findChildren(QLineEdit)
    assert line.placeholderText() == "empty: the model above" and script.read() == ""
