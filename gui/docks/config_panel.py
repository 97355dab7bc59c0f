"""Device configuration editor: applied before TensorFlow initializes, by starting a fresh runtime."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QCheckBox,
    QFormLayout,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QSizePolicy,
    QSpinBox,
    QToolButton,
    QVBoxLayout,
    QWidget,
)
from tf_device_panel.core.client.session import AppliedChanged, DraftChanged, InventoryChanged, Session
from tf_device_panel.core.config import (
    DeviceConfig,
    Field,
    GpuInfo,
    Kind,
    Problem,
    config_fields,
    split_field,
    to_python_snippet,
)
from tf_device_panel.core.devices.gpus import tf_gpu_messages
from tf_device_panel.gui.docks import LEFT, DockSpec
from tf_device_panel.gui.views.memory_bar import MemoryBar
from tf_device_panel.gui.widgets.common import DownScrollArea, code_dialog, guard_wheel
from tf_device_panel.gui.widgets.form_builder import Editor, build_editor, setting_declared

if TYPE_CHECKING:
    from PySide6.QtWidgets import QDialog
    from tf_device_panel.gui.shell.controller import RuntimeController


class GpuEditor(QGroupBox):
    changed = Signal()

    def __init__(self, gpu: GpuInfo, splits: Field, parent: QWidget | None = None):
        title = f"GPU {gpu.index}: {gpu.name or 'unknown'}" + (f" — {gpu.total_mib} MiB" if gpu.total_mib else "")
        super().__init__(title, parent)
        self.gpu = gpu
        self.splits = splits  # the setting each logical GPU's limit belongs to: its unit and help
        self.visible = QCheckBox("Visible to TensorFlow")
        self.visible.setChecked(True)
        self.visible.toggled.connect(self.changed)
        self.split_rows = QVBoxLayout()
        self.spins: list[QSpinBox] = []
        add = QPushButton("Add logical GPU")
        add.setToolTip("Split this GPU: each logical GPU gets its own memory limit")
        add.clicked.connect(lambda: self.add_split(1024))
        self.bar = MemoryBar()
        self.problem_label = _problem_label()
        layout = QVBoxLayout(self)
        layout.addWidget(self.visible)
        layout.addLayout(self.split_rows)
        layout.addWidget(add, alignment=Qt.AlignmentFlag.AlignLeft)
        layout.addWidget(self.bar)
        layout.addWidget(self.problem_label)

    def add_split(self, mib: int) -> None:
        spin = QSpinBox()
        spin.setRange(0, 1 << 22)
        spin.setSuffix(f" {self.splits.unit}")
        spin.setValue(mib)
        spin.setToolTip(self.splits.help)
        guard_wheel(spin)
        remove = QToolButton()
        remove.setText("✕")
        remove.setToolTip("Remove this logical GPU")
        row = QWidget()
        row_layout = QHBoxLayout(row)
        row_layout.setContentsMargins(0, 0, 0, 0)
        row_layout.addWidget(QLabel(f"Logical GPU {len(self.spins)}"))
        row_layout.addWidget(spin, 1)
        row_layout.addWidget(remove)
        self.split_rows.addWidget(row)
        self.spins.append(spin)
        spin.valueChanged.connect(self.changed)
        remove.clicked.connect(lambda: self._remove(row, spin))
        self.changed.emit()

    def _remove(self, row: QWidget, spin: QSpinBox) -> None:
        self.spins.remove(spin)
        row.setParent(None)
        row.deleteLater()
        self.changed.emit()

    def limits(self) -> list[int]:
        return [spin.value() for spin in self.spins]

    def set_limits(self, limits: list[int]) -> None:
        while self.spins:
            spin = self.spins[-1]
            row = spin.parentWidget()
            self.spins.pop()
            if row is not None:
                row.setParent(None)
                row.deleteLater()
        for limit in limits:
            self.add_split(limit)


def _problem_label() -> QLabel:
    label = QLabel()
    label.setWordWrap(True)
    label.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
    label.setObjectName("problem")
    label.hide()
    return label


class ConfigPanel(QWidget):
    """Edits a draft `DeviceConfig`; `applyRequested` carries it once it has no problems.

    Wired (`wire`), the form is bound both ways to the session's draft: an edit sets it, and a draft set
    elsewhere (`DraftChanged`) shows in the widgets; the form keeps no draft of its own, only what no widget
    shows (a loaded profile's GPUs this machine lacks, a fraction's unrounded value).

    The form is built from the configuration's schema (`config_fields`): one row per setting with a label, its
    widget from the setting's kind, range, unit and help; each GPU's visibility and split are edited per GPU.
    `inputs` and `field_problems` are keyed by the settings' own names.
    """

    DOCK = DockSpec("config", "Configuration", LEFT, "Configuration (before TF initializes)", tab_with="devices",
                    raised=True)
    applyRequested = Signal(object)

    def __init__(self, parent: QWidget | None = None, config_type: type[DeviceConfig] = DeviceConfig):
        super().__init__(parent)
        self.config_type = config_type
        self.settings = {setting.key: setting for setting in config_fields(config_type)}
        self.gpus: list[GpuInfo] = []
        self.gpu_editors: list[GpuEditor] = []
        self.session: Session | None = None  # the window's, from `wire`
        self.problems: list[Problem] = []
        self._loading = False
        # Parts of a loaded profile for GPUs this machine does not have: kept so saving loses nothing.
        self._hidden_gpus_config: dict[int, tuple[int, ...]] = {}
        self._unknown_visible: tuple[int, ...] = ()
        self._visible_is_all = True
        self._loaded_fractions: dict[str, float | None] = {}
        (self._visible_key,) = (s.key for s in self.settings.values() if s.kind is Kind.GPU_INDICES)
        (self._splits,) = (s for s in self.settings.values() if s.kind is Kind.GPU_SPLITS)

        self.gpu_box = QVBoxLayout()
        self.no_gpu_label = QLabel("TensorFlow sees no GPU on this machine.")
        self.no_gpu_label.setWordWrap(True)
        # TensorFlow's reason can be one long path: the label wraps to the dock, never widens it.
        self.no_gpu_label.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.gpu_box.addWidget(self.no_gpu_label)

        general = QFormLayout()
        # A narrow dock puts a field under its label rather than past the dock's edge (the panel then scrolled
        # sideways, and stayed shifted once Tab had moved the focus there).
        general.setRowWrapPolicy(QFormLayout.RowWrapPolicy.WrapLongRows)
        self.inputs: dict[str, QWidget] = {}
        self.editors: dict[str, Editor] = {}
        self.field_problems: dict[str, QLabel] = {}
        for setting in self.settings.values():
            if not setting.label:
                continue
            editor = self.editors[setting.key] = build_editor(setting_declared(setting))
            widget = self.inputs[setting.key] = editor.widget
            if isinstance(widget, QCheckBox):
                general.addRow(widget)
            else:
                general.addRow(f"{setting.label}:", widget)
            general.addRow(self.field_problems.setdefault(setting.key, _problem_label()))
            editor.edited.connect(self._on_edit)
        self.field_problems[self._visible_key] = _problem_label()  # also every problem no other label shows

        self.stale_label = QLabel()
        self.stale_label.setObjectName("stale")
        self.stale_label.setWordWrap(True)
        self.apply_button = QPushButton("Apply (restart runtime)")
        self.apply_button.setObjectName("primary")
        self.apply_button.setToolTip("Start a fresh TensorFlow runtime with this configuration")
        self.apply_button.clicked.connect(self._request_apply)
        self.snippet_button = QPushButton("Copy as Python…")

        gpus_group = QGroupBox("GPUs")
        gpus_group.setLayout(self.gpu_box)
        general_group = QGroupBox("All devices")
        general_group.setLayout(general)
        layout = QVBoxLayout(self)
        layout.addWidget(gpus_group)
        layout.addWidget(self.field_problems[self._visible_key])
        layout.addWidget(general_group)
        layout.addWidget(self.stale_label)
        buttons = QHBoxLayout()
        buttons.addWidget(self.apply_button)
        buttons.addWidget(self.snippet_button)
        layout.addLayout(buttons)
        layout.addStretch(1)
        self.set_config(config_type())

    # -- model <-> widgets -----------------------------------------------------------------------
    def set_gpus(self, gpus: list[GpuInfo], reason: str = "") -> None:
        """The machine's physical GPUs (from the runtime's report and NVML); the draft stays as it is."""
        draft = self.config()
        for editor in self.gpu_editors:
            editor.setParent(None)
            editor.deleteLater()
        self.gpus = gpus
        self.gpu_editors = []
        for gpu in gpus:
            editor = GpuEditor(gpu, self._splits)
            editor.changed.connect(self._on_edit)
            self.gpu_box.addWidget(editor)
            self.gpu_editors.append(editor)
        text = "TensorFlow sees no GPU on this machine." + (f"\n{reason}" if reason else "")
        self.no_gpu_label.setText(text)
        self.no_gpu_label.setVisible(not gpus)
        self.set_config(draft)

    def set_config(self, config: DeviceConfig) -> None:
        """The widgets show `config`; then the draft is what they hold (as an edit of them all at once would)."""
        self._loading = True
        try:
            for key in self.editors:
                self._show_value(key, getattr(config, key))
            for editor in self.gpu_editors:
                index = editor.gpu.index
                editor.visible.setChecked(config.visible_gpus is None or index in config.visible_gpus)
                editor.set_limits(list(config.virtual_gpus.get(index, ())))
            self._hidden_gpus_config = {i: v for i, v in config.virtual_gpus.items()
                                        if i not in {g.index for g in self.gpus}}
            self._unknown_visible = tuple(i for i in (config.visible_gpus or ())
                                          if i not in {g.index for g in self.gpus})
            self._visible_is_all = config.visible_gpus is None
        finally:
            self._loading = False
        self._on_edit()

    def _show_value(self, key: str, value: Any) -> None:
        self.editors[key].show(value)
        if self.settings[key].kind is Kind.FRACTION:
            self._loaded_fractions[key] = value

    def _read_value(self, key: str) -> Any:
        value = self.editors[key].read()
        return self._fraction(key, value) if self.settings[key].kind is Kind.FRACTION else value

    def config(self) -> DeviceConfig:
        editors = self.gpu_editors
        visible: tuple[int, ...] | None
        if self._visible_is_all and all(e.visible.isChecked() for e in editors):
            visible = None
        else:
            visible = tuple(sorted({e.gpu.index for e in editors if e.visible.isChecked()}
                                   | set(self._unknown_visible)))
        virtual = {e.gpu.index: tuple(e.limits()) for e in editors if e.limits()}
        virtual.update(self._hidden_gpus_config)
        values: dict[str, Any] = {key: self._read_value(key) for key in self.editors}
        values.update({self._visible_key: visible, self._splits.key: virtual})
        return self.config_type(**values)  # every setting but the version has a widget (or the GPUs' parts)

    def _fraction(self, key: str, value: float) -> float | None:
        """The spin box's fraction; a loaded profile's own value while the box shows it rounded, so that
        loading 0.333 and saving again neither changes the file nor marks the runtime stale."""
        loaded = self._loaded_fractions.get(key)
        if loaded is not None and round(loaded, self.settings[key].form_decimals) == value:
            return loaded
        return value or None

    def _on_edit(self, *_: Any) -> None:
        if self._loading:
            return
        if self.gpu_editors and not all(e.visible.isChecked() for e in self.gpu_editors):
            self._visible_is_all = False
        config = self.config()
        self.problems = config.problems(self.gpus if self.gpus or self.applied is not None else None)
        self._show_problems()
        first_logical = 0
        for editor in self.gpu_editors:
            editor.bar.set_values(editor.limits(), editor.gpu.total_mib, first_logical)
            if editor.visible.isChecked():
                first_logical += max(len(editor.limits()), 1)
        if self.session is not None:  # the window hears of the edit from the session (DraftChanged), as does
            self.session.set_draft(config)  # the form, which shows it already: no echo
        self._update_stale()

    def _show_problems(self) -> None:
        by_field: dict[str, list[str]] = {}
        for problem in self.problems:
            by_field.setdefault(problem.field, []).append(f"{problem.message}" + (
                f" — {problem.hint}" if problem.hint else ""))
        for key, label in self.field_problems.items():
            messages = by_field.pop(key, [])
            label.setText("\n".join(messages))
            label.setVisible(bool(messages))
        for editor in self.gpu_editors:
            messages = by_field.pop(split_field(editor.gpu.index), [])
            editor.problem_label.setText("\n".join(messages))
            editor.problem_label.setVisible(bool(messages))
        leftover = [f"{field}: {m}" for field, ms in by_field.items() for m in ms]
        if leftover:
            label = self.field_problems[self._visible_key]
            label.setText("\n".join(filter(None, [label.text(), *leftover])))
            label.setVisible(True)
        self.apply_button.setEnabled(not self.problems)
        self.apply_button.setToolTip("Fix the problems shown in red first" if self.problems
                                     else "Start a fresh TensorFlow runtime with this configuration")

    # -- stale state -----------------------------------------------------------------------------
    @property
    def applied(self) -> DeviceConfig | None:
        return self.session.applied if self.session is not None else None

    def _update_stale(self) -> None:
        if self.session is not None and self.session.is_stale:
            self.stale_label.setText("⟳ Changed since the runtime started: press Apply to restart it with "
                                     "this configuration.")
        else:
            self.stale_label.setText("")

    def _request_apply(self) -> None:
        if not self.problems:
            self.applyRequested.emit(self.config())

    def show_snippet(self) -> QDialog:
        dialog = code_dialog(self.window(), "Configuration as Python",
                             "Paste this at the very top of your training script, before anything imports "
                             "TensorFlow's devices:", to_python_snippet(self.config()), object_name="snippet-dialog")
        dialog.show()
        return dialog

    # -- the dock, wired to the session --------------------------------------------------------------
    def dock_body(self) -> QWidget:
        """The fields in a scroll area that scrolls down, never sideways (what cannot shrink, a GPU's split rows,
        widens the dock instead), with Apply and Copy as Python pinned below them, in sight however far the
        fields scroll."""
        self.scroll_area = DownScrollArea(self)
        body = QWidget()
        column = QVBoxLayout(body)
        column.setContentsMargins(0, 0, 0, 4)
        column.addWidget(self.scroll_area, 1)
        own = self.layout()
        for pinned in (self.stale_label, self.apply_button, self.snippet_button):
            if own is not None:
                own.removeWidget(pinned)
        buttons = QHBoxLayout()
        buttons.setContentsMargins(8, 0, 8, 0)
        buttons.addWidget(self.apply_button)
        buttons.addWidget(self.snippet_button)
        column.addWidget(self.stale_label)
        column.addLayout(buttons)
        return body

    def wire(self, link: RuntimeController) -> None:
        self.session = link.session
        self.snippet_button.clicked.connect(self.show_snippet)
        link.subscribe(self, DraftChanged, self._draft_set)
        link.subscribe(self, AppliedChanged, lambda _change: self._update_stale())
        link.subscribe(self, InventoryChanged, self._inventory)
        self.session.set_draft(self.config())  # what the form was given before it was wired

    def _draft_set(self, change: DraftChanged) -> None:
        """The session's draft was set: shown, unless the form made it (an edit) and shows it already."""
        if change.value != self.config():
            self.set_config(change.value)

    def _inventory(self, change: InventoryChanged) -> None:
        reasons = tf_gpu_messages(list(change.tf_lines))[-2:]
        self.set_gpus(change.value.gpu_infos(), "TensorFlow said: " + " / ".join(reasons) if reasons else "")
