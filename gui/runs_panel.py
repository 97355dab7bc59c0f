"""Jobs: pick one, fill its declared parameters, run it in the background, see its result."""

from __future__ import annotations

import html
import time
from typing import Any

from PySide6.QtCore import QEvent, QObject, QSize, Qt, QTimer, Signal
from PySide6.QtGui import QFont, QFontMetrics, QKeySequence, QPainter, QPalette, QShortcut, QShowEvent
from PySide6.QtWidgets import (
    QApplication,
    QDialog,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QListWidget,
    QListWidgetItem,
    QProgressBar,
    QPushButton,
    QScrollArea,
    QSplitter,
    QStackedWidget,
    QStyle,
    QStyledItemDelegate,
    QStyleOptionViewItem,
    QVBoxLayout,
    QWidget,
)
from tf_device_panel.core.jobs import JOBS, ParamError
from tf_device_panel.core.session import JobOutcome
from tf_device_panel.gui.job_form import ParamForm
from tf_device_panel.gui.result_view import ResultView, outcome_summary
from tf_device_panel.gui.widgets import ElidedLabel, code_dialog

FORM_MAX_HEIGHT = 230  # px: a form taller than this scrolls (none of the jobs' forms is, in two columns)


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


class FormScroll(QScrollArea):
    """The job's form, all of it in sight up to FORM_MAX_HEIGHT px (then it scrolls): its height hint follows
    the form's own, which changes with the rows shown and with the columns its width allows."""

    def __init__(self) -> None:
        super().__init__()
        self.setWidgetResizable(True)
        self.setFrameShape(QScrollArea.Shape.NoFrame)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)

    def _height(self) -> int:
        widget = self.widget()
        needed = widget.sizeHint().height() if widget is not None else 0
        return min(needed + 2 * self.frameWidth(), FORM_MAX_HEIGHT)

    def sizeHint(self) -> QSize:
        return QSize(super().sizeHint().width(), self._height())

    def minimumSizeHint(self) -> QSize:
        return QSize(super().minimumSizeHint().width(), self._height())

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        if watched is self.widget() and event.type() == QEvent.Type.LayoutRequest:
            self.updateGeometry()  # the form changed its height: the panel's layout asks again
        return super().eventFilter(watched, event)


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
        self.job_list.setMinimumWidth(180)
        # Each job's description is elided to the list's width: never a sideways scroll bar.
        self.job_list.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
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
        # Every form in one column, only the selected one shown: a column sizes to its shown widgets, while a
        # QStackedWidget's height-for-width is its tallest page's, which made short forms scroll.
        self.form_stack = QWidget()
        self.form_column = QVBoxLayout(self.form_stack)
        self.form_column.setContentsMargins(0, 0, 0, 0)
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
        self.status = ElidedLabel("Idle")  # a 2,000-character error stays one line; hover for all of it
        # One result view per job: selecting a job shows its own last result, never another job's.
        self.results: dict[str, ResultView] = {name: ResultView() for name in JOBS}
        self.result_stack = QStackedWidget()
        for view in self.results.values():
            self.result_stack.addWidget(view)
        self.running_job: str | None = None
        self._started_at: float | None = None
        self._stopping = False
        self._timer = QTimer(self)
        self._timer.setInterval(100)
        self._timer.timeout.connect(self._tick)

        # The job's description heads its form (no group title: a row of the 720 px it shares with the result).
        form_group = QGroupBox()
        form_group.setAccessibleName("Parameters")
        form_layout = QVBoxLayout(form_group)
        form_layout.setContentsMargins(8, 4, 8, 4)
        form_layout.setSpacing(4)
        form_layout.addWidget(self.description)
        self.form_scroll = FormScroll()  # a long form scrolls instead of being squeezed
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
        right_layout.setSpacing(4)
        right_layout.addWidget(form_group)
        right_layout.addLayout(controls)
        # Show code… at the end of the status line: beside Run it would widen the narrowest the centre can be.
        status_row = QHBoxLayout()
        status_row.addWidget(self.status, 1)
        status_row.addWidget(self.code_button)
        right_layout.addLayout(status_row)
        right_layout.addWidget(self.result_stack, 1)
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
    def result(self) -> ResultView:
        """The view results go to: the running job's while one runs, else the selected job's."""
        return self.results[self.running_job or self.current_job]

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
        for old in self.forms.values():
            self.form_column.removeWidget(old)
            old.deleteLater()
        self.forms = {}
        for spec in JOBS.values():
            form = ParamForm(spec, devices)
            for name, value in old_values.get(spec.name, {}).items():
                form.set_value(name, value)
            self.forms[spec.name] = form
            form.hide()
            self.form_column.addWidget(form)
        self._show_form(self.job_list.currentRow())

    def showEvent(self, event: QShowEvent) -> None:
        super().showEvent(event)
        # The style's real sizes (fonts, combo boxes) are known once shown: give the form its room again.
        self._show_form(self.job_list.currentRow())

    def _show_form(self, row: int) -> None:
        if row >= 0:
            spec = JOBS[self.current_job]
            for name, form in self.forms.items():
                form.setVisible(name == spec.name)
            self.form_scroll.updateGeometry()  # room for the whole form (FormScroll)
            self.description.setText(f"<b>{html.escape(spec.title)}</b> — {html.escape(spec.description)}")
            self.result_stack.setCurrentWidget(self.results[spec.name])
        self.form_error.hide()

    def show_code(self) -> QDialog:
        """A read-only view of the job's source, for teaching (the same text as `jobs --code`)."""
        spec = JOBS[self.current_job]
        dialog = code_dialog(self, f"Code of {spec.name}",
                             f"<b>{html.escape(spec.title)}</b>: runs in the TensorFlow runtime process as "
                             f"<code>{html.escape(spec.entry)}</code>", spec.code(), object_name="code-dialog")
        dialog.finished.connect(lambda _: self.code_dialogs.remove(dialog))
        self.code_dialogs.append(dialog)
        dialog.show()
        return dialog

    def load_params(self, job: str, params: dict[str, Any]) -> None:
        """Select `job` with these values in its form (History's Run again); unknown names are skipped."""
        self.select_job(job)
        form = self.forms.get(job)
        if form is None:
            return
        for name, value in params.items():
            if name in form.widgets:
                form.set_value(name, value)

    def _request_run(self) -> None:
        if not self.run_button.isEnabled():
            return
        spec = JOBS[self.current_job]
        refused = self.form().problems()
        if refused:
            self.form_error.setText("\n".join(f"{label}: {message}" for label, message in refused))
            self.form_error.show()
            return
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
        self.running_job = job if job in self.results else None
        self.result.live_losses = []
        self.result.show_message(f"Running <b>{html.escape(job)}</b>…")

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
        word, _, detail = outcome_summary(outcome).partition(": ")
        self.status.setText(f"{word}{duration}" + (f" — {detail}" if detail else ""))
        view = self.results.get(outcome.job, self.result)
        view.show_outcome(outcome)
        self.running_job = None

    def stop_clock(self) -> None:
        self._timer.stop()

    def _tick(self) -> None:
        if self._started_at is not None:
            self.elapsed.setText(f"{time.monotonic() - self._started_at:6.1f} s")
