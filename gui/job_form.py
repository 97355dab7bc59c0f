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
    QVBoxLayout,
    QWidget,
)
from tf_device_panel.core import jobs
from tf_device_panel.core.jobs import JobSpec, Param

INT_LIMIT = 2**31 - 1


def range_text(param: Param) -> str:
    low, high = param.minimum, param.maximum
    unit = f" {param.unit}" if param.unit and param.type in (jobs.INT, jobs.FLOAT) else ""
    if low is not None and high is not None:
        return f"between {low:g} and {high:g}{unit}"
    return f"at least {low:g}{unit}" if low is not None else f"at most {high:g}{unit}"


class ParamForm(QWidget):
    """A form generated from a job's declared parameters: its declared labels and units, its real defaults,
    only the rows that matter for the chosen variant, and a value out of range refused with the range named.

    Number fields accept any number as typed (a spin box limited to the range would silently turn 100000 into
    10); the range is checked here instead, next to the field."""

    def __init__(self, spec: JobSpec, devices: list[str], parent: QWidget | None = None):
        super().__init__(parent)
        self.spec = spec
        self.getters: dict[str, Any] = {}
        self.widgets: dict[str, QWidget] = {}
        self.problem_labels: dict[str, QLabel] = {}
        self.form_layout = QFormLayout(self)
        self.form_layout.setRowWrapPolicy(QFormLayout.RowWrapPolicy.WrapLongRows)
        for param in spec.params:
            widget, getter = self._make(param, devices)
            widget.setToolTip(param.help)
            widget.setAccessibleName(param.name)
            label = QLabel(param.label + ":")
            label.setToolTip(param.help)
            label.setBuddy(widget)
            problem = QLabel()
            problem.setObjectName("problem")
            problem.setWordWrap(True)
            problem.hide()
            holder = QWidget()
            column = QVBoxLayout(holder)
            column.setContentsMargins(0, 0, 0, 0)
            column.setSpacing(2)
            column.addWidget(widget)
            column.addWidget(problem)
            self.form_layout.addRow(label, holder)
            self.getters[param.name] = getter
            self.widgets[param.name] = widget
            self.problem_labels[param.name] = problem
            if isinstance(widget, QSpinBox | QDoubleSpinBox):
                widget.valueChanged.connect(self._check_ranges)
        for param in spec.params:
            if param.shown_when is not None:
                chooser = self.widgets.get(param.shown_when[0])
                if isinstance(chooser, QComboBox):
                    chooser.currentTextChanged.connect(self._show_relevant_rows)
        self._show_relevant_rows()
        if not spec.params:
            self.form_layout.addRow(QLabel("This job has no parameters."))

    def is_relevant(self, name: str) -> bool:
        param = next(p for p in self.spec.params if p.name == name)
        if param.shown_when is None:
            return True
        other, value = param.shown_when
        return str(self.getters[other]()) == value

    def _show_relevant_rows(self) -> None:
        for param in self.spec.params:
            holder = self.problem_labels[param.name].parentWidget()  # the row's field: editor and problem
            if holder is not None:
                self.form_layout.setRowVisible(holder, self.is_relevant(param.name))

    def range_problem(self, name: str) -> str:
        param = next(p for p in self.spec.params if p.name == name)
        if param.type not in (jobs.INT, jobs.FLOAT):
            return ""
        value = self.getters[name]()
        low, high = param.minimum, param.maximum
        if (low is not None and value < low) or (high is not None and value > high):
            return f"{value:g} is out of range: use a value {range_text(param)}"
        return ""

    def _check_ranges(self) -> None:
        for param in self.spec.params:
            self._check_range(param.name)

    def _check_range(self, name: str) -> None:
        problem = self.range_problem(name)
        self.problem_labels[name].setText(problem)
        self.problem_labels[name].setVisible(bool(problem))

    def problems(self) -> list[tuple[str, str]]:
        """(label, message) for each relevant field whose value is refused, shown next to it as well."""
        found = []
        for param in self.spec.params:
            self._check_range(param.name)
            problem = self.range_problem(param.name)
            if problem and self.is_relevant(param.name):
                found.append((param.label, problem))
        return found

    def _make(self, param: Param, devices: list[str]) -> tuple[QWidget, Any]:
        kind = param.type
        if kind == jobs.INT:
            spin = QSpinBox()
            spin.setRange(-INT_LIMIT if param.minimum is None or param.minimum < 0 else 0, INT_LIMIT)
            spin.setValue(int(param.default))
            if param.unit:
                spin.setSuffix(f" {param.unit}")
            return spin, spin.value
        if kind == jobs.FLOAT:
            dspin = QDoubleSpinBox()
            dspin.setDecimals(6)
            dspin.setRange(-1e12 if param.minimum is None or param.minimum < 0 else 0.0, 1e12)
            dspin.setValue(float(param.default))
            if param.unit:
                dspin.setSuffix(f" {param.unit}")
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
            if line is not None and param.empty_means:
                line.setPlaceholderText(f"empty: {param.empty_means}")
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
        if param.empty_means:
            edit.setPlaceholderText(f"empty: {param.empty_means}")
        if param.unit:
            edit.setToolTip(f"{param.help} ({param.unit})")
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
