"""A form generated from a job's declared parameters: one editor per parameter, typed values back."""

from __future__ import annotations

from typing import Any

from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDoubleSpinBox,
    QFileDialog,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QSpinBox,
    QWidget,
)
from tf_device_panel.core import jobs
from tf_device_panel.core.jobs import JobSpec, Param


def _int_bound(value: float | None, fallback: int) -> int:
    return int(value) if value is not None else fallback


class ParamForm(QWidget):
    """A form generated from a job's declared parameters."""

    def __init__(self, spec: JobSpec, devices: list[str], parent: QWidget | None = None):
        super().__init__(parent)
        self.spec = spec
        self.getters: dict[str, Any] = {}
        self.widgets: dict[str, QWidget] = {}
        layout = QFormLayout(self)
        for param in spec.params:
            widget, getter = self._make(param, devices)
            widget.setToolTip(param.help)
            widget.setAccessibleName(param.name)
            label = QLabel(param.name.replace("_", " ").capitalize() + ":")
            label.setToolTip(param.help)
            label.setBuddy(widget)
            layout.addRow(label, widget)
            self.getters[param.name] = getter
            self.widgets[param.name] = widget
        if not spec.params:
            layout.addRow(QLabel("This job has no parameters."))

    def _make(self, param: Param, devices: list[str]) -> tuple[QWidget, Any]:
        kind = param.type
        if kind == jobs.INT:
            spin = QSpinBox()
            spin.setRange(_int_bound(param.minimum, -(2**31)), min(_int_bound(param.maximum, 2**31 - 1), 2**31 - 1))
            spin.setValue(int(param.default))
            return spin, spin.value
        if kind == jobs.FLOAT:
            dspin = QDoubleSpinBox()
            dspin.setDecimals(4)
            dspin.setRange(param.minimum if param.minimum is not None else -1e12,
                           param.maximum if param.maximum is not None else 1e12)
            dspin.setValue(float(param.default))
            return dspin, dspin.value
        if kind == jobs.BOOL:
            box = QCheckBox()
            box.setChecked(bool(param.default))
            return box, box.isChecked
        if kind == jobs.CHOICE:
            combo = QComboBox()
            combo.addItems(list(param.choices))
            combo.setCurrentText(str(param.default))
            return combo, combo.currentText
        if kind in (jobs.DEVICE, jobs.DEVICES):
            combo = QComboBox()
            combo.setEditable(True)
            options = [str(param.default)] if param.default == "" else []
            options += devices
            if kind == jobs.DEVICES and len(devices) > 1:
                options.append(",".join(devices))
            if kind == jobs.DEVICE:
                options.append("/GPU:2")  # the seeds' example of a device that may not exist
            seen: list[str] = []
            for option in options:
                if option not in seen:
                    seen.append(option)
            combo.addItems(seen)
            combo.setCurrentText(str(param.default))
            line = combo.lineEdit()
            if line is not None:
                line.setPlaceholderText("default (see the tooltip)")
            return combo, combo.currentText
        if kind == jobs.PATH:
            holder = QWidget()
            row = QHBoxLayout(holder)
            row.setContentsMargins(0, 0, 0, 0)
            edit = QLineEdit(str(param.default))
            browse = QPushButton("Browse…")
            browse.clicked.connect(lambda: self._browse(edit))
            row.addWidget(edit, 1)
            row.addWidget(browse)
            return holder, edit.text
        edit = QLineEdit(str(param.default))
        return edit, edit.text

    def _browse(self, edit: QLineEdit) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Choose a Python file", edit.text(), "Python files (*.py)")
        if path:
            edit.setText(path)

    def values(self) -> dict[str, Any]:
        return {name: getter() for name, getter in self.getters.items()}

    def set_value(self, name: str, value: Any) -> None:
        widget = self.widgets[name]
        if isinstance(widget, QComboBox):
            widget.setCurrentText(str(value))
        elif isinstance(widget, QSpinBox | QDoubleSpinBox):
            widget.setValue(value)
        elif isinstance(widget, QCheckBox):
            widget.setChecked(bool(value))
        elif isinstance(widget, QLineEdit):
            widget.setText(str(value))
        else:
            edit = widget.findChild(QLineEdit)
            if edit is not None:
                edit.setText(str(value))
