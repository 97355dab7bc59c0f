"""Jobs: pick one, fill its declared parameters, run it in the background, see its result."""

from __future__ import annotations

import time
from typing import Any

import pyqtgraph as pg
from PySide6.QtCore import QSize, Qt, QTimer, Signal
from PySide6.QtGui import QFont, QFontMetrics, QKeySequence, QPainter, QPalette, QShortcut
from PySide6.QtWidgets import (
    QApplication,
    QCheckBox,
    QComboBox,
    QDialog,
    QDoubleSpinBox,
    QFileDialog,
    QFormLayout,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QPlainTextEdit,
    QProgressBar,
    QPushButton,
    QScrollArea,
    QSizePolicy,
    QSpinBox,
    QSplitter,
    QStackedWidget,
    QStyle,
    QStyledItemDelegate,
    QStyleOptionViewItem,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)
from tf_device_panel.core import jobs
from tf_device_panel.core.cluster import task_devices_text
from tf_device_panel.core.jobs import JOBS, JobSpec, Param, ParamError
from tf_device_panel.core.placement import short_device_name
from tf_device_panel.core.session import JobOutcome
from tf_device_panel.gui.colors import device_color, themed_plot


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


class ResultView(QStackedWidget):
    """Shows a result for its kind: a matrix as a table, training as a loss plot, errors plainly."""

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.message = QLabel("Run a job to see its result here.")
        self.message.setWordWrap(True)
        self.message.setAlignment(Qt.AlignmentFlag.AlignTop | Qt.AlignmentFlag.AlignLeft)
        self.message.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.matrix = QTableWidget()
        self.matrix_caption = QLabel()
        self.matrix_caption.setWordWrap(True)
        matrix_page = _captioned(self.matrix_caption, self.matrix)
        self.plot = themed_plot()
        self.plot.setLabel("bottom", "epoch")
        self.plot.setLabel("left", "loss")
        self.plot.showGrid(x=True, y=True, alpha=0.3)
        self.plot.setMinimumHeight(120)
        self.loss_curve = self.plot.plot(pen=pg.mkPen("#e4572e", width=2), symbol="o", symbolSize=6)
        self.training_caption = QLabel()
        self.training_caption.setWordWrap(True)
        training_page = _captioned(self.training_caption, self.plot)
        self.rows_caption = QLabel()
        self.rows_caption.setWordWrap(True)
        self.rows_table = QTableWidget()
        self.rows_table.setEditTriggers(QTableWidget.EditTrigger.NoEditTriggers)
        self.rows_plot = themed_plot()
        self.rows_plot.showGrid(x=True, y=True, alpha=0.3)
        self.rows_plot.addLegend(offset=(10, 10))
        self.rows_plot.setMinimumHeight(120)
        rows_split = QSplitter()
        rows_split.addWidget(self.rows_table)
        rows_split.addWidget(self.rows_plot)
        rows_split.setStretchFactor(0, 3)
        rows_split.setStretchFactor(1, 2)
        rows_page = _captioned(self.rows_caption, rows_split)
        for page in (self.message, matrix_page, training_page, rows_page):
            self.addWidget(page)
        self.live_losses: list[float] = []

    def show_message(self, html: str) -> None:
        self.message.setText(html)
        self.setCurrentIndex(0)

    def show_outcome(self, outcome: JobOutcome) -> None:
        if outcome.status != "ok" or not isinstance(outcome.result, dict):
            error = outcome.error or {}
            title = {"cancelled": "Cancelled", "crashed": "The runtime died"}.get(outcome.status, "Failed")
            self.show_message(f"<b>{title}</b> — {_escape(error.get('type', ''))}<br>"
                              f"<pre style='white-space: pre-wrap'>{_escape(error.get('message', ''))}</pre>")
            return
        result = outcome.result
        if "matrix" in result:
            self._show_matrix(result)
        elif result.get("kind") == "training":
            self._show_training(result)
        elif result.get("kind") == "script":
            self.show_message(f"<b>{_escape(' '.join(result['argv']))}</b> finished (exit code 0).")
        elif result.get("kind") == "table":
            self._show_benchmark(result)
        elif result.get("kind") == "memory":
            self._show_memory(result)
        elif result.get("kind") == "cluster":
            self._show_cluster(result)
        else:
            self.show_message(f"<pre>{_escape(str(result))}</pre>")

    def _show_matrix(self, result: dict[str, Any]) -> None:
        rows = result["matrix"]
        self.matrix.clear()
        self.matrix.setRowCount(len(rows))
        self.matrix.setColumnCount(len(rows[0]) if rows else 0)
        for r, row in enumerate(rows):
            for c, value in enumerate(row):
                item = QTableWidgetItem(f"{value:g}")
                item.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
                item.setFlags(item.flags() & ~Qt.ItemFlag.ItemIsEditable)
                self.matrix.setItem(r, c, item)
        self.matrix.resizeColumnsToContents()
        device = str(result.get("device", ""))
        color = device_color(device).name()
        caption = f"Result on <b style='color:{color}'>{_escape(device)}</b>"
        if result.get("fallback"):
            caption += (f" — <b>soft-placement fallback</b>: asked for {_escape(str(result.get('requested_device')))}")
        replicas = result.get("replicas") or {}
        if replicas:
            caption += "<br>Replicas: " + ", ".join(
                f"<span style='color:{device_color(actual).name()}'>{_escape(short_device_name(actual))}</span>"
                for actual in replicas.values())
        self.matrix_caption.setText(caption)
        self.setCurrentIndex(1)

    def _show_training(self, result: dict[str, Any]) -> None:
        model = (f" — {result['model']} model, {result['parameters']:,} parameters" if "parameters" in result else "")
        self.training_caption.setText(
            f"{result['replicas_in_sync']} replicas in sync over {_escape(', '.join(result['devices']))}; "
            f"global batch {result['global_batch_size']} ({result['batch_per_replica']} per replica){model}"
            + (f"<br>{_escape(result['strategy'])}, cross-device ops {_escape(str(result.get('cross_device_ops')))}, "
               f"learning rate {result['learning_rate']:g} ({_escape(result['learning_rate_rule'])})"
               if result.get("strategy") else "")
            + ("<br>evaluate: " + ", ".join(f"{_escape(k)} {v:.5f}" for k, v in result["evaluate"].items())
               if result.get("evaluate") else "")
            + "".join(f"<br><small>{_escape(n)}</small>" for n in result.get("notes", [])))
        self.plot.setLabel("bottom", "step" if result.get("loop") == "custom" else "epoch")
        self._plot_losses(result["loss"])
        self.setCurrentIndex(2)

    def _fill_rows(self, caption: str, columns: list[str], rows: list[list[Any]]) -> None:
        self.rows_caption.setText(caption)
        self.rows_table.clear()
        self.rows_table.setColumnCount(len(columns))
        self.rows_table.setHorizontalHeaderLabels(columns)
        self.rows_table.setRowCount(len(rows))
        for r, row in enumerate(rows):
            for c, value in enumerate(row):
                text = "—" if value is None else (f"{value:.4g}" if isinstance(value, float) else str(value))
                item = QTableWidgetItem(text)
                if isinstance(value, (int, float)):
                    item.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
                if isinstance(value, str) and value.startswith("/"):
                    item.setForeground(device_color(value))
                self.rows_table.setItem(r, c, item)
        self.rows_table.resizeColumnsToContents()
        self.rows_plot.clear()
        self.setCurrentIndex(3)

    def _plot_series(self, series: dict[str, tuple[list[float], list[float]]], x_label: str, y_label: str) -> None:
        self.rows_plot.setLabel("bottom", x_label)
        self.rows_plot.setLabel("left", y_label)
        for number, (name, (xs, ys)) in enumerate(series.items()):
            device = name.split()[0]
            color = device_color(device) if device.startswith("/") else pg.intColor(number, hues=9)
            style = [Qt.PenStyle.SolidLine, Qt.PenStyle.DashLine, Qt.PenStyle.DotLine][number % 3]
            self.rows_plot.plot(xs, ys, name=name, pen=pg.mkPen(color, width=2, style=style), symbol="o",
                                symbolSize=5, symbolBrush=color)

    def _show_benchmark(self, result: dict[str, Any]) -> None:
        rows = result["rows"]
        notes = "".join(f"<br><small>{_escape(n)}</small>" for n in result.get("notes", []))
        self._fill_rows(f"<b>{_escape(result.get('title', ''))}</b> — {result.get('repeats')} matmuls per figure; "
                        f"unsupported: the device has no kernel for that dtype{notes}",
                        ["Device", "dtype", "Size", "GFLOP/s", "Seconds", "× NumPy", "Check"],
                        [[r["device"], r["dtype"], r["size"], r.get("gflops"), r.get("seconds"), r.get("vs_numpy"),
                          r.get("check")] for r in rows])
        series: dict[str, tuple[list[float], list[float]]] = {}
        for row in rows:
            if row.get("gflops") is not None:
                xs, ys = series.setdefault(f"{row['device']} {row['dtype']}", ([], []))
                xs.append(row["size"])
                ys.append(row["gflops"])
        self._plot_series(series, "matrix size n", "GFLOP/s")

    def _show_memory(self, result: dict[str, Any]) -> None:
        rows = result["rows"]
        gpu = rows and rows[0].get("current_mib") is not None
        notes = "<br>".join(_escape(n) for n in result.get("notes", []))
        self._fill_rows(f"Memory on <b>{_escape(result['short_device'])}</b>, {result['step_mib']} MiB per step"
                        f"<br><small>{notes}</small>",
                        ["Step", "What", "Held (MiB)", "TF current (MiB)", "TF peak (MiB)", "Process RSS (MiB)"],
                        [[r["step"], r["label"], r["allocated_mib"], r.get("current_mib"), r.get("peak_mib"),
                          r.get("rss_mib")] for r in rows])
        steps = [float(r["step"]) for r in rows]
        series = {"held by the job": (steps, [float(r["allocated_mib"]) for r in rows])}
        if gpu:
            series["TF current"] = (steps, [float(r["current_mib"]) for r in rows])
            series["TF peak"] = (steps, [float(r["peak_mib"]) for r in rows])
        else:
            series["process RSS"] = (steps, [float(r["rss_mib"]) for r in rows])
        self._plot_series(series, "step", "MiB")

    def _show_cluster(self, result: dict[str, Any]) -> None:
        addresses = "; ".join(f"{k}: {', '.join(v)}" for k, v in result["addresses"].items())
        caption = f"<b>{_escape(result['strategy'])}</b>, {result['workers']} workers — {_escape(addresses)}"
        if result.get("isolation"):
            caption += f"<br><small>Isolation: {_escape(result['isolation'])}</small>"
        if result.get("device_config"):
            caption += f"<br><small>Devices: {_escape(result['device_config']['note'])}</small>"
        if "losses_agree" in result:
            agree = "agree" if result["losses_agree"] else "<b style='color:#d33'>DISAGREE</b>"
            caption += f"<br>Per-worker losses {agree} (each worker reduces over all replicas)."
        if "steps_per_s" in result:
            caption += f"<br>{result['steps']} steps at {result['steps_per_s']:.1f} steps/s."
        rows: list[list[Any]] = []
        for name, where in (result.get("variables") or {}).items():
            rows.append([f"variable {name}", where, result.get("values", {}).get(name)])
        for name, timing in result.get("timings", {}).items():
            rows.append([name, f"connected in {timing['connect_s']:.2f} s", round(timing["train_s"], 3)])
        for name, devices in task_devices_text(result).items():
            rows.append([f"{name} devices", devices, ""])
        self._fill_rows(caption, ["Task / variable", "Where / timing", "Value / train s"], rows)
        per_worker = result.get("losses") or {"coordinator": result.get("loss", [])}
        self._plot_series({name: ([float(i) for i in range(1, len(v) + 1)], [float(x) for x in v])
                           for name, v in per_worker.items()}, "step", "loss")

    def add_live_loss(self, step: int, value: float) -> None:
        self.live_losses.append(value)
        self.training_caption.setText(f"Training… epoch {step}: loss {value:.5f}")
        self._plot_losses(self.live_losses)
        self.setCurrentIndex(2)

    def _plot_losses(self, losses: list[float]) -> None:
        self.loss_curve.setData(list(range(1, len(losses) + 1)), losses)


def _captioned(caption: QLabel, body: QWidget) -> QWidget:
    page = QWidget()
    layout = QVBoxLayout(page)
    layout.setContentsMargins(0, 0, 0, 0)
    layout.addWidget(caption)
    layout.addWidget(body, 1)
    return page


def _escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


class JobItemDelegate(QStyledItemDelegate):
    """A job in the list: its title in bold, its description on one elided line below."""

    def paint(self, painter: QPainter, option: QStyleOptionViewItem, index: Any) -> None:
        self.initStyleOption(option, index)
        title, description = option.text, str(index.data(Qt.ItemDataRole.ToolTipRole) or "")
        option.text = ""
        style = option.widget.style() if option.widget is not None else QApplication.style()
        style.drawControl(QStyle.ControlElement.CE_ItemViewItem, option, painter, option.widget)
        selected = bool(option.state & QStyle.StateFlag.State_Selected)
        role = QPalette.ColorRole.HighlightedText if selected else QPalette.ColorRole.Text
        rect = option.rect.adjusted(6, 3, -6, -3)
        bold = QFont(option.font)
        bold.setBold(True)
        line = QFontMetrics(option.font).height()
        painter.save()
        painter.setPen(option.palette.color(role))
        painter.setFont(bold)
        painter.drawText(rect.adjusted(0, 0, 0, -line), Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignTop, title)
        painter.setFont(option.font)
        if not selected:
            painter.setPen(option.palette.color(QPalette.ColorRole.PlaceholderText))
        elided = QFontMetrics(option.font).elidedText(description, Qt.TextElideMode.ElideRight, rect.width())
        painter.drawText(rect.adjusted(0, line + 2, 0, 0), Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignTop,
                         elided)
        painter.restore()

    def sizeHint(self, option: QStyleOptionViewItem, index: Any) -> QSize:
        line = QFontMetrics(option.font).height()
        return QSize(200, 2 * line + 10)


class RunsPanel(QWidget):
    runRequested = Signal(str, dict)
    stopRequested = Signal()

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.devices: list[str] = []
        self.forms: dict[str, ParamForm] = {}
        self.job_list = QListWidget()
        for spec in JOBS.values():
            item = QListWidgetItem(spec.title)
            item.setData(Qt.ItemDataRole.UserRole, spec.name)
            item.setToolTip(spec.description)
            self.job_list.addItem(item)
        self.job_list.setMinimumWidth(200)
        self.job_list.setItemDelegate(JobItemDelegate(self.job_list))
        self.job_list.setAccessibleName("Jobs")
        self.job_list.setObjectName("jobs")
        self.description = QLabel()
        self.description.setWordWrap(True)
        self.description.setTextFormat(Qt.TextFormat.RichText)
        self.code_button = QPushButton("Show code…")
        self.code_button.setToolTip("The code this job runs inside the TensorFlow runtime")
        self.code_button.clicked.connect(self.show_code)
        self.code_dialogs: list[QDialog] = []
        self.form_stack = QStackedWidget()
        self.form_error = QLabel()
        self.form_error.setObjectName("problem")
        self.form_error.setWordWrap(True)
        self.form_error.hide()
        self.run_button = QPushButton("Run")
        self.run_button.setObjectName("primary")
        self.run_button.setToolTip("Run the job in the background (Ctrl+R)")
        self.stop_button = QPushButton("Stop")
        self.stop_button.setToolTip("Cancel the running job (Esc)")
        self.stop_button.setEnabled(False)
        self.progress = QProgressBar()
        self.progress.setRange(0, 1000)
        self.progress.setValue(0)
        self.elapsed = QLabel("")
        self.status = QLabel("Idle")
        self.result = ResultView()
        self._started_at: float | None = None
        self._stopping = False
        self._timer = QTimer(self)
        self._timer.setInterval(100)
        self._timer.timeout.connect(self._tick)

        form_group = QGroupBox("Parameters")
        form_layout = QVBoxLayout(form_group)
        about = QHBoxLayout()
        about.addWidget(self.description, 1)
        about.addWidget(self.code_button, 0, Qt.AlignmentFlag.AlignTop)
        form_layout.addLayout(about)
        self.form_scroll = QScrollArea()  # a long form scrolls instead of being squeezed
        self.form_scroll.setWidgetResizable(True)
        self.form_scroll.setFrameShape(QScrollArea.Shape.NoFrame)
        self.form_scroll.setWidget(self.form_stack)
        form_layout.addWidget(self.form_scroll, 1)
        form_layout.addWidget(self.form_error)
        controls = QHBoxLayout()
        controls.addWidget(self.run_button)
        controls.addWidget(self.stop_button)
        controls.addWidget(self.progress, 1)
        controls.addWidget(self.elapsed)
        right = QWidget()
        right_layout = QVBoxLayout(right)
        right_layout.setContentsMargins(0, 0, 0, 0)
        right_layout.addWidget(form_group)
        right_layout.addLayout(controls)
        right_layout.addWidget(self.status)
        right_layout.addWidget(self.result, 1)
        splitter = QSplitter()
        splitter.addWidget(self.job_list)
        splitter.addWidget(right)
        splitter.setStretchFactor(1, 3)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.addWidget(splitter)

        self.job_list.currentRowChanged.connect(self._show_form)
        self.run_button.clicked.connect(self._request_run)
        self.stop_button.clicked.connect(self.stopRequested)
        run_shortcut = QShortcut(QKeySequence("Ctrl+R"), self)
        run_shortcut.setContext(Qt.ShortcutContext.WindowShortcut)
        run_shortcut.activated.connect(self._request_run)
        stop_shortcut = QShortcut(QKeySequence(Qt.Key.Key_Escape), self)
        stop_shortcut.setContext(Qt.ShortcutContext.WindowShortcut)
        stop_shortcut.activated.connect(self._request_stop)
        self.set_devices([])
        self.job_list.setCurrentRow(0)

    @property
    def current_job(self) -> str:
        item = self.job_list.currentItem()
        return str(item.data(Qt.ItemDataRole.UserRole)) if item else next(iter(JOBS))

    def select_job(self, name: str) -> None:
        for row in range(self.job_list.count()):
            if self.job_list.item(row).data(Qt.ItemDataRole.UserRole) == name:
                self.job_list.setCurrentRow(row)
                return

    def form(self) -> ParamForm:
        return self.forms[self.current_job]

    def set_devices(self, devices: list[str]) -> None:
        """Rebuild the forms so device pickers list the running runtime's logical devices."""
        old_values = {name: form.values() for name, form in self.forms.items()}
        self.devices = devices
        while self.form_stack.count():
            widget = self.form_stack.widget(0)
            if widget is not None:
                self.form_stack.removeWidget(widget)
                widget.deleteLater()
        self.forms = {}
        for spec in JOBS.values():
            form = ParamForm(spec, devices)
            for name, value in old_values.get(spec.name, {}).items():
                form.set_value(name, value)
            self.forms[spec.name] = form
            self.form_stack.addWidget(form)
        self._show_form(self.job_list.currentRow())

    def _show_form(self, row: int) -> None:
        if row >= 0:
            spec = JOBS[self.current_job]
            self.form_stack.setCurrentWidget(self.forms[spec.name])
            for name, form in self.forms.items():  # the stack then sizes to the shown form, not the largest
                policy = QSizePolicy.Policy.Preferred if name == spec.name else QSizePolicy.Policy.Ignored
                form.setSizePolicy(policy, policy)
            self.form_stack.adjustSize()
            # Room for the whole form up to 6 rows or so; longer ones scroll.
            self.form_scroll.setMinimumHeight(min(self.forms[spec.name].sizeHint().height() + 6, 200))
            self.description.setText(f"<b>{_escape(spec.title)}</b> — {_escape(spec.description)}")
        self.form_error.hide()

    def show_code(self) -> QDialog:
        """A read-only view of the job's source, for teaching (the same text as `jobs --code`)."""
        spec = JOBS[self.current_job]
        dialog = QDialog(self)
        dialog.setWindowTitle(f"Code of {spec.name}")
        dialog.setObjectName("code-dialog")
        view = QPlainTextEdit(spec.code())
        view.setReadOnly(True)
        view.setLineWrapMode(QPlainTextEdit.LineWrapMode.NoWrap)
        mono = QFont("monospace")
        mono.setStyleHint(QFont.StyleHint.Monospace)
        view.setFont(mono)
        view.setMinimumSize(720, 480)
        layout = QVBoxLayout(dialog)
        layout.addWidget(QLabel(f"<b>{_escape(spec.title)}</b>: runs in the TensorFlow runtime process as "
                                f"<code>{_escape(spec.entry)}</code>"))
        layout.addWidget(view)
        dialog.finished.connect(lambda _: self.code_dialogs.remove(dialog))
        self.code_dialogs.append(dialog)
        dialog.show()
        return dialog

    def _request_run(self) -> None:
        if not self.run_button.isEnabled():
            return
        spec = JOBS[self.current_job]
        try:
            params = spec.resolve(self.form().values())
        except ParamError as exc:
            self.form_error.setText("\n".join(f"{name}: {message}" for name, message in exc.problems))
            self.form_error.show()
            return
        self.form_error.hide()
        self.runRequested.emit(spec.name, params)

    def _request_stop(self) -> None:
        if self.stop_button.isEnabled():
            self.stopRequested.emit()

    # -- run state -------------------------------------------------------------------------------
    def set_can_run(self, can_run: bool, reason: str = "") -> None:
        self.run_button.setEnabled(can_run)
        self.run_button.setToolTip("Run the job in the background (Ctrl+R)" if can_run else reason)

    def job_started(self, job: str) -> None:
        self._stopping = False
        self._started_at = time.monotonic()
        self._timer.start()
        self.progress.setRange(0, 0)  # busy until the first progress report
        self.status.setText(f"Running {job}…")
        self.stop_button.setEnabled(True)
        self.run_button.setEnabled(False)
        self.result.live_losses = []
        self.result.show_message(f"Running <b>{job}</b>…")

    def show_progress(self, done: float, total: float, message: str) -> None:
        if total > 0:
            self.progress.setRange(0, 1000)
            self.progress.setValue(int(1000 * min(done / total, 1.0)))
        if message and not self._stopping:
            self.status.setText(message)

    def show_stopping(self, grace_s: float) -> None:
        self._stopping = True
        self.stop_button.setEnabled(False)
        self.status.setText(f"Stopping… (a job that has not stopped in {grace_s:g} s has its runtime restarted)")

    def job_finished(self, outcome: JobOutcome) -> None:
        self._stopping = False
        self._timer.stop()
        self._tick()
        self.stop_button.setEnabled(False)
        self.progress.setRange(0, 1000)
        self.progress.setValue(1000 if outcome.status == "ok" else self.progress.value())
        duration = f" in {outcome.duration_s:.2f} s" if outcome.duration_s else ""
        words = {"ok": "Finished", "error": "Failed", "cancelled": "Cancelled", "crashed": "Runtime died"}
        self.status.setText(f"{words.get(outcome.status, outcome.status)}{duration}"
                            + (f" — {outcome.error['message'][:200]}" if outcome.error else ""))
        self.result.show_outcome(outcome)

    def _tick(self) -> None:
        if self._started_at is not None:
            self.elapsed.setText(f"{time.monotonic() - self._started_at:6.1f} s")
