"""A form generated from a job's declared parameters: one editor per parameter, typed values back."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from PySide6.QtCore import QSize, Qt
from PySide6.QtGui import QResizeEvent
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDoubleSpinBox,
    QGridLayout,
    QLabel,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)
from tf_device_panel.core.catalogue import JobSpec, Param, ParamValue
from tf_device_panel.gui.widgets.form_builder import Editor, build_editor, param_declared

TWO_COLUMNS_WIDTH = 560  # px from which a form of more than TWO_COLUMNS_ROWS rows sets its fields in two columns
TWO_COLUMNS_ROWS = 3
# Job parameters that a Configuration setting also governs: (the setting, its label there)
CONFIG_OVERRIDES = {"soft_placement": ("soft_placement", "Soft placement"),
                    "log_placement": ("log_placement", "Log device placement")}
COLUMN_GAP = 18          # px between the two columns


def range_text(param: Param) -> str:
    low, high = param.minimum, param.maximum
    unit = f" {param.unit}" if param.unit and param.kind.is_number else ""
    if low is not None and high is not None:
        return f"between {low:g} and {high:g}{unit}"
    return f"at least {low:g}{unit}" if low is not None else f"at most {high:g}{unit}"


class ParamForm(QWidget):
    """A form generated from a job's declared parameters: its declared labels and units, its real defaults,
    only the rows that matter for the chosen variant, and a value out of range refused with the range named.

    Number fields accept any number as typed (a spin box limited to the range would silently turn 100000 into
    10); the range is checked here instead, next to the field. Given the width, the rows stand in two columns
    (a training job's ten rows are five lines high, all in sight at 1280×720); otherwise in one."""

    def __init__(self, spec: JobSpec, devices: list[str], parent: QWidget | None = None):
        super().__init__(parent)
        self.spec = spec
        self.editors: dict[str, Editor] = {}  # each parameter's editor, built from its declaration
        self.getters: dict[str, Callable[[], ParamValue]] = {}
        self.widgets: dict[str, QWidget] = {}
        self.labels: dict[str, QLabel] = {}
        self.fields: dict[str, QWidget] = {}  # the row's field: the editor above its problem
        self.problem_labels: dict[str, QLabel] = {}
        self._params = {param.name: param for param in spec.params}
        self.columns = 0  # set by _arrange
        # The width its scroll area has, a vertical scroll bar's included: deciding the columns on the viewport's
        # width alone, a passing scroll bar (one column is taller) kept the form in one column for good.
        self.room = 0
        self.grid = QGridLayout(self)
        self.grid.setContentsMargins(0, 0, 0, 0)
        self.grid.setHorizontalSpacing(8)
        self.grid.setVerticalSpacing(4)
        for param in spec.params:
            editor = build_editor(param_declared(param, devices))
            widget, getter = editor.widget, editor.read
            widget.setAccessibleName(param.name)
            label = QLabel(param.label + ":", self)
            label.setToolTip(param.help)
            label.setBuddy(widget)
            problem = QLabel()
            problem.setObjectName("problem")
            problem.setWordWrap(True)
            problem.hide()
            holder = QWidget(self)
            column = QVBoxLayout(holder)
            column.setContentsMargins(0, 0, 0, 0)
            column.setSpacing(2)
            column.addWidget(widget)
            column.addWidget(problem)
            self.labels[param.name] = label
            self.fields[param.name] = holder
            self.getters[param.name] = getter
            self.editors[param.name] = editor
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
            self.grid.addWidget(QLabel("This job has no parameters."), 0, 0)

    def is_relevant(self, name: str) -> bool:
        param = next(p for p in self.spec.params if p.name == name)
        if param.shown_when is None:
            return True
        other, value = param.shown_when
        return str(self.getters[other]()) == value

    def shown_rows(self) -> list[str]:
        return [param.name for param in self.spec.params if self.is_relevant(param.name)]

    def _show_relevant_rows(self) -> None:
        self._arrange(self._columns_for(self.width()), force=True)

    def set_room(self, width: int) -> None:
        """The width the form's scroll area offers (see `room`); the columns follow."""
        if width != self.room:
            self.room = width
            self._arrange(self._columns_for(self.width()))

    def _columns_for(self, width: int) -> int:
        width = max(width, self.room)
        shown = self.shown_rows()
        if len(shown) <= TWO_COLUMNS_ROWS:
            return 1
        return 2 if width >= max(TWO_COLUMNS_WIDTH, self._width_for(shown, 2)) else 1

    def _width_for(self, shown: list[str], columns: int) -> int:
        """The least width that shows `shown` in `columns` columns, no label or field squeezed."""
        per_column = max(math.ceil(len(shown) / columns), 1)
        spacing = self.grid.horizontalSpacing()
        total = 0
        for start in range(0, len(shown), per_column):
            names = shown[start:start + per_column]
            total += (max(self.labels[n].minimumSizeHint().width() for n in names) + spacing
                      + max(self.fields[n].minimumSizeHint().width() for n in names))
        return total + (columns - 1) * (COLUMN_GAP + 2 * spacing)

    def show_configuration(self, config: Any) -> None:
        """Beside a job's own soft-placement or placement-logging switch, what the Configuration says: the
        switch is this job's and overrides it (one place says which wins)."""
        for name, (attribute, label) in CONFIG_OVERRIDES.items():
            box = self.widgets.get(name)
            if not isinstance(box, QCheckBox):
                continue
            state = "on" if getattr(config, attribute, False) else "off"
            box.setText(f"this job only (Configuration: {state})")
            box.setToolTip(f"{self._params[name].help}\nThis job's own switch: it overrides the Configuration's "
                           f"“{label}”, which is {state}, for this job's sessions and tasks.")

    def two_column_width(self) -> int:
        """The width this form needs for two columns of its rows (one, for a short form)."""
        names = list(self.labels)
        if len(names) <= TWO_COLUMNS_ROWS:
            return self.least_width()
        return max(TWO_COLUMNS_WIDTH, self._width_for(names, 2))

    def least_width(self) -> int:
        """The narrowest this form can be with every label and field whole: one column, every row shown."""
        names = list(self.labels)
        return self._width_for(names, 1) if names else super().minimumSizeHint().width()

    def minimumSizeHint(self) -> QSize:
        # As narrow as one column: a narrower form takes one column (resizeEvent), so two never make the
        # window's centre, and with it the docks beside it, keep more width than one would.
        hint = super().minimumSizeHint()
        shown = self.shown_rows()
        if self.columns < 2 or not shown:
            return hint
        return QSize(min(hint.width(), self._width_for(shown, 1)), hint.height())

    def _arrange(self, columns: int, force: bool = False) -> None:
        """The shown rows down the first column, then the second; rows of another variant hidden."""
        if columns == self.columns and not force:
            return
        self.columns = columns
        shown = self.shown_rows()
        for name in self.labels:
            self.grid.removeWidget(self.labels[name])
            self.grid.removeWidget(self.fields[name])
        per_column = max(math.ceil(len(shown) / columns), 1)
        for name in self.labels:
            visible = name in shown
            if visible:  # in the grid before it is shown: a label without a parent would be a window of its own
                column, row = divmod(shown.index(name), per_column)
                self.grid.addWidget(self.labels[name], row, 3 * column, Qt.AlignmentFlag.AlignVCenter)
                self.grid.addWidget(self.fields[name], row, 3 * column + 1)
            self.labels[name].setVisible(visible)
            self.fields[name].setVisible(visible)
        for column in range(2):  # fields share the width; labels and the gap between the columns keep theirs
            used = column < columns
            self.grid.setColumnStretch(3 * column + 1, 1 if used else 0)
        self.grid.setColumnMinimumWidth(2, COLUMN_GAP if columns == 2 else 0)
        self.updateGeometry()

    def resizeEvent(self, event: QResizeEvent) -> None:
        super().resizeEvent(event)
        # The height follows from the width alone (two columns or one), so this cannot go back and forth.
        self._arrange(self._columns_for(event.size().width()))

    def range_problem(self, name: str) -> str:
        param = next(p for p in self.spec.params if p.name == name)
        if not param.kind.is_number:
            return ""
        value = self.getters[name]()
        if not isinstance(value, int | float):  # a number's editor gives a number; the kind said so
            return ""
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

    def values(self) -> dict[str, ParamValue]:
        return {name: getter() for name, getter in self.getters.items()}

    def summary(self) -> str:
        """The shown rows on one line, as the form's labels say them: "Epochs 8 · Model dense · Devices all"."""
        parts = []
        for name in self.shown_rows():
            value = self.getters[name]()
            param = self._params[name]
            if isinstance(value, bool):
                text = "on" if value else "off"
            elif value == "" and param.empty_means:
                text = param.empty_means
            else:
                text = str(value)
            parts.append(f"{param.label or name} {text}")
        return " · ".join(parts) if parts else "no parameters"

    def set_value(self, name: str, value: Any) -> None:
        self.editors[name].show(value)
