"""Device configuration editor: applied before TensorFlow initializes, by starting a fresh runtime."""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDoubleSpinBox,
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
from tf_device_panel.core.config import ALLOCATORS, DeviceConfig, GpuInfo, Problem, validate
from tf_device_panel.gui.memory_bar import MemoryBar


class GpuEditor(QGroupBox):
    changed = Signal()

    def __init__(self, gpu: GpuInfo, parent: QWidget | None = None):
        title = f"GPU {gpu.index}: {gpu.name or 'unknown'}" + (f" — {gpu.total_mib} MiB" if gpu.total_mib else "")
        super().__init__(title, parent)
        self.gpu = gpu
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
        spin.setSuffix(" MiB")
        spin.setValue(mib)
        spin.setToolTip("Memory limit of this logical GPU (required by TensorFlow for virtual GPUs)")
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
    """Edits a draft `DeviceConfig`; `applyRequested` carries it once it has no problems."""

    changed = Signal()
    applyRequested = Signal(object)

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.gpus: list[GpuInfo] = []
        self.gpu_editors: list[GpuEditor] = []
        self.applied: DeviceConfig | None = None
        self.problems: list[Problem] = []
        self._loading = False
        # Parts of a loaded profile for GPUs this machine does not have: kept so saving loses nothing.
        self._hidden_gpus_config: dict[int, tuple[int, ...]] = {}
        self._unknown_visible: tuple[int, ...] = ()
        self._visible_is_all = True
        self._loaded_fraction: float | None = None

        self.gpu_box = QVBoxLayout()
        self.no_gpu_label = QLabel("TensorFlow sees no GPU on this machine.")
        self.no_gpu_label.setWordWrap(True)
        # TensorFlow's reason can be one long path: the label wraps to the dock, never widens it.
        self.no_gpu_label.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.gpu_box.addWidget(self.no_gpu_label)

        self.memory_growth = QCheckBox("Memory growth (all visible GPUs)")
        self.memory_growth.setToolTip("Allocate GPU memory as needed instead of nearly all of it at start.\n"
                                      "Grown memory is not given back. Cannot be combined with logical GPUs.")
        self.memory_fraction = QDoubleSpinBox()
        self.memory_fraction.setRange(0.0, 1.0)
        self.memory_fraction.setSingleStep(0.05)
        self.memory_fraction.setDecimals(2)
        self.memory_fraction.setSpecialValueText("off")  # 0 is not a fraction TensorFlow can use: it means unset
        self.memory_fraction.setToolTip(
            "TF1's per_process_gpu_memory_fraction: each visible GPU becomes one logical GPU limited to this\n"
            "share of its total memory. Cannot be combined with memory growth or logical GPU splits.")
        self.cpu_devices = QSpinBox()
        # Any number as typed: validation refuses one out of range and names the limit (a spin box capped
        # at MAX_CPU_DEVICES would silently turn 100000 into 10).
        self.cpu_devices.setRange(0, 999_999)
        self.cpu_devices.setToolTip("Split the CPU into N logical devices: /CPU:0 … /CPU:N-1")
        self.soft_placement = QCheckBox("Soft placement")
        self.soft_placement.setToolTip("Run ops on an available device when the requested one does not exist")
        self.log_placement = QCheckBox("Log device placement")
        self.log_placement.setToolTip("tf.debugging.set_log_device_placement(True), before TensorFlow initializes")
        self.allocator = QComboBox()
        self.allocator.addItems(list(ALLOCATORS))
        self.allocator.setToolTip("TF_GPU_ALLOCATOR; cuda_malloc_async can reduce fragmentation")
        self.field_problems = {key: _problem_label()
                               for key in ("memory_growth", "memory_fraction", "cpu_devices", "visible_gpus")}

        general = QFormLayout()
        # A narrow dock puts a field under its label rather than past the dock's edge (the panel then scrolled
        # sideways, and stayed shifted once Tab had moved the focus there).
        general.setRowWrapPolicy(QFormLayout.RowWrapPolicy.WrapLongRows)
        general.addRow(self.memory_growth)
        general.addRow(self.field_problems["memory_growth"])
        general.addRow("Memory fraction per GPU:", self.memory_fraction)
        general.addRow(self.field_problems["memory_fraction"])
        general.addRow("Logical CPU devices:", self.cpu_devices)
        general.addRow(self.field_problems["cpu_devices"])
        general.addRow(self.soft_placement)
        general.addRow(self.log_placement)
        general.addRow("GPU allocator:", self.allocator)

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
        layout.addWidget(self.field_problems["visible_gpus"])
        layout.addWidget(general_group)
        layout.addWidget(self.stale_label)
        buttons = QHBoxLayout()
        buttons.addWidget(self.apply_button)
        buttons.addWidget(self.snippet_button)
        layout.addLayout(buttons)
        layout.addStretch(1)

        for signal in (self.memory_growth.toggled, self.soft_placement.toggled, self.log_placement.toggled,
                       self.cpu_devices.valueChanged, self.allocator.currentIndexChanged,
                       self.memory_fraction.valueChanged):
            signal.connect(self._on_edit)
        self.set_config(DeviceConfig())

    # -- model <-> widgets -----------------------------------------------------------------------
    def set_gpus(self, gpus: list[GpuInfo], reason: str = "") -> None:
        """The machine's physical GPUs (from the runtime's report and NVML); keeps the draft."""
        draft = self.config()
        for editor in self.gpu_editors:
            editor.setParent(None)
            editor.deleteLater()
        self.gpus = gpus
        self.gpu_editors = []
        for gpu in gpus:
            editor = GpuEditor(gpu)
            editor.changed.connect(self._on_edit)
            self.gpu_box.addWidget(editor)
            self.gpu_editors.append(editor)
        text = "TensorFlow sees no GPU on this machine." + (f"\n{reason}" if reason else "")
        self.no_gpu_label.setText(text)
        self.no_gpu_label.setVisible(not gpus)
        self.set_config(draft)

    def set_config(self, config: DeviceConfig) -> None:
        self._loading = True
        try:
            self.memory_growth.setChecked(config.memory_growth)
            self.memory_fraction.setValue(config.memory_fraction or 0.0)
            self._loaded_fraction = config.memory_fraction
            self.cpu_devices.setValue(config.cpu_devices)
            self.soft_placement.setChecked(config.soft_placement)
            self.log_placement.setChecked(config.log_placement)
            self.allocator.setCurrentText(config.gpu_allocator)
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
        return DeviceConfig(visible_gpus=visible, memory_growth=self.memory_growth.isChecked(),
                            virtual_gpus=virtual, cpu_devices=self.cpu_devices.value(),
                            soft_placement=self.soft_placement.isChecked(),
                            log_placement=self.log_placement.isChecked(), gpu_allocator=self.allocator.currentText(),
                            memory_fraction=self._fraction())

    def _fraction(self) -> float | None:
        """The spin box's fraction; a loaded profile's own value while the box shows it rounded, so that
        loading 0.333 and saving again neither changes the file nor marks the runtime stale."""
        value = self.memory_fraction.value()
        loaded = self._loaded_fraction
        if loaded is not None and round(loaded, self.memory_fraction.decimals()) == value:
            return loaded
        return value or None

    def _on_edit(self, *_: Any) -> None:
        if self._loading:
            return
        if self.gpu_editors and not all(e.visible.isChecked() for e in self.gpu_editors):
            self._visible_is_all = False
        config = self.config()
        self.problems = validate(config, self.gpus if self.gpus or self.applied is not None else None)
        self.problems += self._zero_limit_problems()
        self._show_problems()
        first_logical = 0
        for editor in self.gpu_editors:
            editor.bar.set_values(editor.limits(), editor.gpu.total_mib, first_logical)
            if editor.visible.isChecked():
                first_logical += max(len(editor.limits()), 1)
        self._update_stale()
        self.changed.emit()

    def _zero_limit_problems(self) -> list[Problem]:
        return [Problem(f"virtual_gpus['{e.gpu.index}']", "every logical GPU needs a memory limit above 0 MiB",
                        "set a limit or remove that logical GPU")
                for e in self.gpu_editors if any(v <= 0 for v in e.limits())]

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
            messages = by_field.pop(f"virtual_gpus['{editor.gpu.index}']", [])
            editor.problem_label.setText("\n".join(messages))
            editor.problem_label.setVisible(bool(messages))
        leftover = [f"{field}: {m}" for field, ms in by_field.items() for m in ms]
        if leftover:
            label = self.field_problems["visible_gpus"]
            label.setText("\n".join(filter(None, [label.text(), *leftover])))
            label.setVisible(True)
        self.apply_button.setEnabled(not self.problems)
        self.apply_button.setToolTip("Fix the problems shown in red first" if self.problems
                                     else "Start a fresh TensorFlow runtime with this configuration")

    # -- stale state -----------------------------------------------------------------------------
    @property
    def is_stale(self) -> bool:
        return self.applied is not None and self.config() != self.applied

    def mark_applied(self, config: DeviceConfig) -> None:
        self.applied = config
        self._update_stale()

    def _update_stale(self) -> None:
        if self.is_stale:
            self.stale_label.setText("⟳ Changed since the runtime started: press Apply to restart it with "
                                     "this configuration.")
        else:
            self.stale_label.setText("")

    def _request_apply(self) -> None:
        if not self.problems:
            self.applyRequested.emit(self.config())
