"""One form's editor from one declaration: a setting of the configuration, a parameter of a job, or an option of
a command the window offers as a dialog (`share`).

All declare the same things (a `Kind`, a label, help, a default, choices, a range, a unit), so one builder makes
the editor for any: the kind picks the widget, the declaration fills it in. What differs between the forms is said
in `Declared` (`setting_declared`, `param_declared`, `option_declared`): a setting's spin box is held to its range,
a job's takes any number and the job form names the range beside it instead (a spin box limited to the range would
silently turn 100000 into 10); a command's option is held to its range, like a setting.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from PySide6.QtCore import SignalInstance
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDoubleSpinBox,
    QFileDialog,
    QHBoxLayout,
    QLineEdit,
    QPushButton,
    QRadioButton,
    QSpinBox,
    QWidget,
)
from tf_device_panel.core.catalogue import Param
from tf_device_panel.core.catalogue.share_params import CommandOption
from tf_device_panel.core.config import Field, Kind
from tf_device_panel.gui.widgets.common import guard_wheel

INT_LIMIT = 2**31 - 1   # a QSpinBox's own limit
NUMBER_LIMIT = 1e12
MISSING_DEVICE_EXAMPLE = "/GPU:2"  # the seeds' example of a device that may not exist: it shows soft placement


@dataclass(frozen=True)
class Declared:
    """What a form needs of one declared value, whichever side declared it."""

    name: str
    kind: Kind
    label: str
    help: str = ""
    default: Any = None
    choices: tuple[str, ...] = ()
    unit: str = ""
    spin_range: tuple[float, float] = (0, 0)  # the spin box's own limits (COUNT, NUMBER, FRACTION)
    decimals: int = 2
    step: float = 1
    zero_text: str = ""               # what a spin box says at 0 when 0 means "off" or "unset"
    empty_means: str = ""             # what an empty text does, shown while it is empty
    placeholder: str = ""             # what an empty text field says instead ("empty: " and `empty_means`)
    options: tuple[str, ...] = ()     # a device's suggestions, in its combo box
    label_on_box: bool = False        # a check box carrying its own label (else a label stands beside it)
    off_label: str = ""               # a TOGGLE shown as two radio buttons: `label` for on, this for off
    file_filter: str = "Python files (*.py)"  # a PATH's Browse… shows these files
    pick_folder: bool = False         # a PATH naming a folder: Browse… picks a folder

    @property
    def empty_text(self) -> str:
        """What the field says while it is empty."""
        return self.placeholder or (f"empty: {self.empty_means}" if self.empty_means else "")


def setting_declared(setting: Field) -> Declared:
    """A configuration setting as its form shows it: spin boxes held to the setting's (or its form's) range."""
    spin_range: tuple[float, float] = (0, 0)
    zero_text = setting.form_zero_text
    if setting.kind is Kind.COUNT:
        spin_range = setting.form_range or (setting.minimum or 0, setting.maximum or 0)
    elif setting.kind is Kind.FRACTION:
        spin_range = (setting.minimum or 0.0, setting.maximum or 1.0)
        zero_text = "off"  # 0 is not a fraction TensorFlow can use: it means unset
    return Declared(setting.key, setting.kind, setting.label, setting.help, setting.default, setting.choices,
                    setting.unit, spin_range, setting.form_decimals, setting.form_step, zero_text,
                    label_on_box=True)


def param_declared(param: Param, devices: Sequence[str]) -> Declared:
    """A job parameter as the job form shows it: number boxes take any number (the form checks the range beside
    them), a device's combo box suggests this runtime's devices."""
    spin_range: tuple[float, float] = (0, 0)
    below_zero = param.minimum is None or param.minimum < 0
    if param.kind is Kind.COUNT:
        spin_range = (-INT_LIMIT if below_zero else 0, INT_LIMIT)
    elif param.kind is Kind.NUMBER:
        spin_range = (-NUMBER_LIMIT if below_zero else 0.0, NUMBER_LIMIT)
    options: list[str] = []
    if param.kind in (Kind.DEVICE, Kind.DEVICES):
        options = [str(param.default)] if param.default == "" else []
        options += devices
        if param.kind is Kind.DEVICES and len(devices) > 1:
            options.append(",".join(devices))
        if param.kind is Kind.DEVICE:
            options.append(MISSING_DEVICE_EXAMPLE)
    file_filter = f"{param.file_type[1]} (*{param.file_type[0]})" if param.file_type else "Python files (*.py)"
    return Declared(param.name, param.kind, param.label, param.help, param.default, param.choices, param.unit,
                    spin_range, decimals=6, empty_means=param.empty_means, options=tuple(dict.fromkeys(options)),
                    file_filter=file_filter)


def option_declared(option: CommandOption) -> Declared:
    """A command's option as its dialog shows it: a spin box held to the option's range, a switch's label on its
    box (or its radio buttons), the field's own placeholder; no tooltip, since the help is the command line's (it
    names the command's options, which the window never shows)."""
    param = option.param
    spin_range = (param.minimum or 0, param.maximum or 0) if param.kind.is_number else (0, 0)
    file_filter = f"{param.file_type[1]} (*{param.file_type[0]})" if param.file_type else "Python files (*.py)"
    return Declared(param.name, param.kind, param.label, "", param.default, param.choices, param.unit, spin_range,
                    placeholder=option.placeholder, label_on_box=True, off_label=option.off_label,
                    file_filter=file_filter, pick_folder=option.folder)


class Editor:
    """One built editor: its widget, its value read and shown, and the signal it says an edit with."""

    def __init__(self, widget: QWidget, read: Callable[[], Any], show: Callable[[Any], None],
                 edited: SignalInstance):
        self.widget = widget
        self.read = read
        self.show = show
        self.edited = edited


def build_editor(declared: Declared) -> Editor:
    """The editor the declaration's kind calls for, filled in from the declaration; its tooltip is the help."""
    editor = _editor_for(declared)
    if declared.unit and isinstance(editor.widget, (QSpinBox, QDoubleSpinBox)):
        editor.widget.setSuffix(f" {declared.unit}")
    editor.widget.setToolTip(declared.help)
    guard_wheel(editor.widget)  # a wheel scrolling the form past it never changes it
    return editor


def _editor_for(declared: Declared) -> Editor:
    low, high = declared.spin_range
    match declared.kind:
        case Kind.TOGGLE if declared.off_label:
            holder = QWidget()
            row = QHBoxLayout(holder)
            row.setContentsMargins(0, 0, 0, 0)
            on, off = QRadioButton(declared.label), QRadioButton(declared.off_label)
            (on if declared.default else off).setChecked(True)
            row.addWidget(on)
            row.addWidget(off)
            return Editor(holder, on.isChecked, lambda value: (on if value else off).setChecked(True), on.toggled)
        case Kind.TOGGLE:
            box = QCheckBox(declared.label) if declared.label_on_box else QCheckBox()
            box.setChecked(bool(declared.default))
            return Editor(box, box.isChecked, lambda value: box.setChecked(bool(value)), box.toggled)
        case Kind.COUNT:
            spin = QSpinBox()
            spin.setRange(int(low), int(high))
            if declared.zero_text:
                spin.setSpecialValueText(declared.zero_text)
            spin.setValue(int(declared.default or 0))
            return Editor(spin, spin.value, spin.setValue, spin.valueChanged)
        case Kind.NUMBER | Kind.FRACTION:
            number = QDoubleSpinBox()
            if declared.kind is Kind.NUMBER:
                number.setDecimals(declared.decimals)
                number.setRange(low, high)
            else:
                number.setRange(low, high)
                number.setSingleStep(declared.step)
                number.setDecimals(declared.decimals)
            if declared.zero_text:
                number.setSpecialValueText(declared.zero_text)
            number.setValue(float(declared.default or 0.0))
            return Editor(number, number.value, lambda value: number.setValue(value or 0.0), number.valueChanged)
        case Kind.CHOICE:
            combo = QComboBox()
            combo.addItems(list(declared.choices))
            if declared.default is not None:
                combo.setCurrentText(str(declared.default))
            return Editor(combo, combo.currentText, lambda value: combo.setCurrentText(str(value)),
                          combo.currentIndexChanged)
        case Kind.DEVICE | Kind.DEVICES:
            devices = QComboBox()
            devices.setEditable(True)
            devices.addItems(list(declared.options))
            devices.setCurrentText(str(declared.default))
            line = devices.lineEdit()
            if line is not None and declared.empty_text:
                line.setPlaceholderText(declared.empty_text)
            return Editor(devices, devices.currentText, lambda value: devices.setCurrentText(str(value)),
                          devices.currentTextChanged)
        case Kind.PATH:
            holder = QWidget()
            row = QHBoxLayout(holder)
            row.setContentsMargins(0, 0, 0, 0)
            browse = QPushButton("Browse…")
            if declared.choices:  # a built-in's name from the list, or a file of the declared type
                combo = QComboBox()
                combo.setEditable(True)
                combo.addItems(list(declared.choices))
                combo.setCurrentText(str(declared.default))
                path = combo.lineEdit() or QLineEdit()
                browse.clicked.connect(lambda: _browse(holder, path, declared))
                row.addWidget(combo, 1)
                row.addWidget(browse)
                return Editor(holder, combo.currentText, lambda value: combo.setCurrentText(str(value)),
                              combo.currentTextChanged)
            path = QLineEdit(str(declared.default))
            path.setPlaceholderText(declared.empty_text)
            browse.clicked.connect(lambda: _browse(holder, path, declared))
            row.addWidget(path, 1)
            row.addWidget(browse)
            return Editor(holder, path.text, lambda value: path.setText(str(value)), path.textChanged)
        case Kind.COUNTS | Kind.CHOICES | Kind.ARGS:
            text = QLineEdit(str(declared.default))
            text.setPlaceholderText(declared.empty_text)
            return Editor(text, text.text, lambda value: text.setText(str(value)), text.textChanged)
    raise ValueError(f"{declared.name}: a {declared.kind.value} has no form editor; give it no label")


def _browse(parent: QWidget, edit: QLineEdit, declared: Declared) -> None:
    if declared.pick_folder:
        path = QFileDialog.getExistingDirectory(parent, "Choose a folder", edit.text())
    else:
        path, _ = QFileDialog.getOpenFileName(parent, "Choose a file", edit.text(), declared.file_filter)
    if path:
        edit.setText(path)
