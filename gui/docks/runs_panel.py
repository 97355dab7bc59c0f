"""Jobs: pick one, fill its declared parameters, run it in the background, see its result."""

from __future__ import annotations

import html
import json
import re
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import QEvent, QObject, QSettings, QSize, Qt, QTimer, Signal
from PySide6.QtGui import (
    QFont,
    QFontMetrics,
    QKeySequence,
    QPainter,
    QPalette,
    QResizeEvent,
    QShortcut,
    QShowEvent,
)
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
from tf_device_panel.core.catalogue import JOBS, ParamError, ParamValues
from tf_device_panel.core.client.run_record import JobOutcome
from tf_device_panel.core.client.session import (
    AppliedChanged,
    InventoryChanged,
    JobEnded,
    JobHandedOver,
    JobQueued,
    RunStateChanged,
    Session,
    WaitingRefused,
)
from tf_device_panel.core.config import DeviceConfig
from tf_device_panel.gui.views.console_view import ConsoleView
from tf_device_panel.gui.views.job_state import JobState
from tf_device_panel.gui.views.result_view import ResultView
from tf_device_panel.gui.widgets.common import ElidedLabel, code_dialog
from tf_device_panel.gui.widgets.job_form import ParamForm

if TYPE_CHECKING:
    from tf_device_panel.gui.shell.controller import RuntimeController

# A script's batch-size argument ("--batch-size 512", "--batch=64", "-b 32"): its number becomes {batch}.
BATCH_ARGUMENT = re.compile(r"((?:^|\s)(?:--?batch(?:[-_]?size)?|-b|--bs)(?:=|\s+))\d+", re.IGNORECASE)
CONSOLE_LINES = 8        # lines of the job's output in sight where the result's least leaves them (1280×720)
CONSOLE_LEAST_LINES = 2  # and never fewer (a table stacked above its plot at 1024×768 needs the rest)
FORMS_KEY = "forms"  # settings group: each job form's values, as the last window left them
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
        needed = widget.sizeHint().height() + 2 * self.frameWidth() if widget is not None else 0
        # A form that fits is shown whole with no scroll bar: a passing one took 14 px off the form's width
        # and cut its second column.
        policy = (Qt.ScrollBarPolicy.ScrollBarAlwaysOff if needed <= FORM_MAX_HEIGHT
                  else Qt.ScrollBarPolicy.ScrollBarAsNeeded)
        if self.verticalScrollBarPolicy() != policy:
            self.setVerticalScrollBarPolicy(policy)
        return min(needed, FORM_MAX_HEIGHT)

    def sizeHint(self) -> QSize:
        return QSize(super().sizeHint().width(), self._height())

    def minimumSizeHint(self) -> QSize:
        # As wide as the widest form in one column: a dock opened beside the Runs panel takes its width from
        # what can spare it, never from the fields (cut at the edge, they would hide their spin arrows).
        widget = self.widget()
        forms = widget.findChildren(ParamForm) if widget is not None else []
        least = max((form.least_width() for form in forms), default=super().minimumSizeHint().width())
        return QSize(least + 2 * self.frameWidth(), self._height())

    def resizeEvent(self, event: QResizeEvent) -> None:
        super().resizeEvent(event)
        room = self.width() - 2 * self.frameWidth()  # the event is the viewport's (a scroll bar's width less)
        widget = self.widget()
        for form in widget.findChildren(ParamForm) if widget is not None else []:
            form.set_room(room)

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        if watched is self.widget() and event.type() == QEvent.Type.LayoutRequest:
            self.updateGeometry()  # the form changed its height: the panel's layout asks again
        return super().eventFilter(watched, event)


class RunsPanel(QWidget):
    runRequested = Signal(str, dict)
    stopRequested = Signal()

    def __init__(self, parent: QWidget | None = None, *, session: Session | None = None):
        """`session`: the one the runs use (its applied configuration and devices); the window's comes with
        `wire`, a panel used on its own may be given one here."""
        super().__init__(parent)
        self.devices: list[str] = []
        self.forms: dict[str, ParamForm] = {}
        self.session = session
        self.job_list = QListWidget()
        for spec in JOBS.values():
            item = QListWidgetItem(spec.title)
            item.setData(Qt.ItemDataRole.UserRole, spec.name)
            item.setToolTip(spec.description)
            self.job_list.addItem(item)
        self.fit_job_list()
        # Each job's description is elided to the list's width: never a sideways scroll bar.
        self.job_list.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.job_list.setItemDelegate(JobItemDelegate(self.job_list))
        self.job_list.setAccessibleName("Jobs")
        self.job_list.setObjectName("jobs")
        self.description = ElidedLabel()
        self.description.setObjectName("job-description")
        self.code_button = QPushButton("Show code…")
        self.code_button.setToolTip("The code this job runs inside the TensorFlow runtime")
        self.code_button.clicked.connect(self.show_code)
        # While the selected job's result is shown its form folds to the one line above (the values it ran
        # with); this opens it again to edit them.
        self.fold_button = QPushButton("Edit parameters ▾")
        self.fold_button.setObjectName("form-fold")
        self.fold_button.setToolTip("Show the job's parameters (folded while its result is shown)")
        self.fold_button.clicked.connect(self._toggle_form)
        self.fold_button.hide()
        self._opened_forms: set[str] = set()  # jobs whose form the person opened over their result
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
        self.progress.setMinimumWidth(self.progress.fontMetrics().horizontalAdvance("100%") + 40)  # never "4|5%"
        self.elapsed = QLabel("")
        # A script that ran out of memory: fit-batch, prefilled with that script, finds the batch that fits.
        self.find_batch_button = QPushButton("Find the batch that fits")
        self.find_batch_button.setToolTip("Open Batch that fits with this script and its arguments, {batch} where "
                                          "its batch size goes")
        self.find_batch_button.clicked.connect(self.find_batch_for_script)
        self.find_batch_button.hide()
        self._script_out_of_memory: tuple[str, str] | None = None  # (path, arguments) of the script's last OOM
        self.status = ElidedLabel("Not run yet")  # how the selected job's run went; its error is in the result
        # One result view per job: selecting a job shows its own last result, never another job's.
        self.results: dict[str, ResultView] = {name: ResultView() for name in JOBS}
        self.result_stack = QStackedWidget()
        for view in self.results.values():
            self.result_stack.addWidget(view)
            view.shown.connect(self._result_shown)
        self.states: dict[str, JobState] = {name: JobState() for name in JOBS}
        # The run (job id) whose lines each job's console holds. A job that waited for the spare is said to have
        # started by the thread that handed it over, while its output comes through the event pump: on a busy
        # machine its first lines can arrive first, and its start must not wipe them.
        self._lines_from_run: dict[str, str] = {}
        self._link: RuntimeController | None = None  # set by `wire`
        self.running_job: str | None = None
        self.waiting_job: str | None = None   # pressed Run while the runtime warmed; starts when it is ready
        self._runtime_ready = self._warming = False
        self._not_ready_reason = ""
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
        # One line (the whole description on hover and in the job list's tooltip): its rows go to the result.
        heading = QHBoxLayout()
        heading.addWidget(self.description, 1)
        heading.addWidget(self.fold_button)
        heading.addWidget(self.code_button)
        form_layout.addLayout(heading)
        self.form_scroll = FormScroll()  # a long form scrolls instead of being squeezed
        self.form_scroll.setWidget(self.form_stack)
        form_layout.addWidget(self.form_scroll, 1)
        form_layout.addWidget(self.form_error)
        # Run, Stop, how the selected job's run goes, its progress and clock: one row.
        controls = QHBoxLayout()
        controls.addWidget(self.run_button)
        controls.addWidget(self.stop_button)
        controls.addWidget(self.status, 3)
        controls.addWidget(self.find_batch_button)
        controls.addWidget(self.progress, 2)
        controls.addWidget(self.elapsed)
        right = QWidget()
        right_layout = QVBoxLayout(right)
        right_layout.setContentsMargins(0, 0, 0, 0)
        right_layout.setSpacing(4)
        right_layout.addWidget(form_group)
        right_layout.addLayout(controls)
        # The result above the job's own output: the centre of the window is what the person is looking at.
        self.console = ConsoleView()
        self.output_split = QSplitter(Qt.Orientation.Vertical)
        self.output_split.setChildrenCollapsible(False)
        self.output_split.addWidget(self.result_stack)
        self.output_split.addWidget(self.console)
        self.output_split.setStretchFactor(0, 1)
        self.output_split.setStretchFactor(1, 0)  # the result takes what the window gains or loses
        self._console_sized = False
        right_layout.addWidget(self.output_split, 1)
        splitter = QSplitter()
        splitter.addWidget(self.job_list)
        splitter.addWidget(right)
        splitter.setStretchFactor(0, 0)  # the list keeps its titles' width; the form and result take the rest
        splitter.setStretchFactor(1, 1)
        self.main_split = splitter
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.addWidget(splitter)

        self.job_list.currentRowChanged.connect(self._show_form)
        self.run_button.clicked.connect(self.request_run)
        self.stop_button.clicked.connect(self.stopRequested)
        run_shortcut = QShortcut(QKeySequence("Ctrl+R"), self)
        run_shortcut.setContext(Qt.ShortcutContext.WindowShortcut)
        run_shortcut.activated.connect(self.request_run)
        stop_shortcut = QShortcut(QKeySequence(Qt.Key.Key_Escape), self)
        stop_shortcut.setContext(Qt.ShortcutContext.WindowShortcut)
        stop_shortcut.activated.connect(self._request_stop)
        self.set_devices([])
        self.job_list.setCurrentRow(0)

    def fit_job_list(self) -> None:
        """Every job's title whole ("Parameter-server cluster" was cut to "…cluste" beside a dock), in the font
        the list has now (the window's zoom changes it)."""
        self.job_list.ensurePolished()
        bold = QFont(self.job_list.font())
        bold.setBold(True)
        widest = max(QFontMetrics(bold).horizontalAdvance(spec.title) for spec in JOBS.values())
        self.job_list.setMinimumWidth(max(180, widest + 24 + self.job_list.verticalScrollBar().sizeHint().width()))
        if hasattr(self, "main_split") and self._console_sized:
            total = sum(self.main_split.sizes())
            self.main_split.setSizes([self.job_list.minimumWidth(), total - self.job_list.minimumWidth()])

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
            form.show_configuration(self.configuration)
            for name, value in old_values.get(spec.name, {}).items():
                form.set_value(name, value)
            self.forms[spec.name] = form
            form.set_room(self.form_scroll.width() - 2 * self.form_scroll.frameWidth())
            form.hide()
            self.form_column.addWidget(form)
        self._show_form(self.job_list.currentRow())

    def save_forms(self, settings: QSettings) -> None:
        """Every job form's values, for the next window (the fit-batch budget went back to 256 after a restart)."""
        for name, form in self.forms.items():
            settings.setValue(f"{FORMS_KEY}/{name}", json.dumps(form.values()))

    def restore_forms(self, settings: QSettings) -> None:
        """The values each job form had when the last window closed; a value the job no longer takes is skipped."""
        for name, form in self.forms.items():
            try:
                saved = json.loads(str(settings.value(f"{FORMS_KEY}/{name}", "{}")))
            except ValueError:
                continue
            for param, value in saved.items() if isinstance(saved, dict) else ():
                if param in form.widgets:
                    form.set_value(param, value)

    def two_column_width(self) -> int:
        """The panel's width at which every form stands in two columns (its least width has them in one)."""
        one = self.form_scroll.minimumSizeHint().width()
        two = max(form.two_column_width() for form in self.forms.values())
        return self.minimumSizeHint().width() + max(two - one, 0)

    @property
    def configuration(self) -> DeviceConfig:
        """The configuration the runs use (the session's applied one)."""
        applied = self.session.applied if self.session is not None else None
        return applied or DeviceConfig()

    def show_configuration(self) -> None:
        """Forms with a switch of their own say that it overrides the configuration's."""
        for form in self.forms.values():
            form.show_configuration(self.configuration)

    def resizeEvent(self, event: QResizeEvent) -> None:
        super().resizeEvent(event)
        if self._console_sized and event.size().height() != event.oldSize().height():
            # A dock grew or shrank beside (the Memory graphs raised): the result keeps its least, the console
            # gives or takes the rest; else the result's page scrolled beside its caption's scroll bar.
            QTimer.singleShot(0, self, self.fit_output)

    def showEvent(self, event: QShowEvent) -> None:
        super().showEvent(event)
        if not self._console_sized:  # the console a few lines high, the result the rest (later: as dragged)
            self._console_sized = True
            total_width = sum(self.main_split.sizes())
            self.main_split.setSizes([self.job_list.minimumWidth(), total_width - self.job_list.minimumWidth()])
            total = sum(self.output_split.sizes())
            console = min(self.console.sizeHint().height(), total // 3)
            self.output_split.setSizes([total - console, console])
            QTimer.singleShot(0, self, self.fit_output)
        # The style's real sizes (fonts, combo boxes) are known once shown: give the form its room again.
        self._show_form(self.job_list.currentRow())

    def _show_form(self, row: int) -> None:
        if row >= 0:
            spec = JOBS[self.current_job]
            for name, form in self.forms.items():
                form.setVisible(name == spec.name)
            self.form_scroll.updateGeometry()  # room for the whole form (FormScroll)
            self.result_stack.setCurrentWidget(self.results[spec.name])
            self.console.show_state(self.states[spec.name])
            self._render_state()
        self.form_error.hide()
        self.fold_form()

    def form_folded(self) -> bool:
        """Whether the selected job's form is folded to one line: its result is shown, and the person has not
        opened the form since."""
        job = self.current_job
        return self.results[job].currentIndex() == 1 and job not in self._opened_forms

    def fold_form(self) -> None:
        """Fold or open the selected job's form as its result asks (see form_folded), and give the result the
        height it needs, the console the rest."""
        spec = JOBS[self.current_job]
        folded = self.form_folded() and self.form_error.isHidden()
        self.form_scroll.setVisible(not folded)
        has_result = self.results[spec.name].currentIndex() == 1
        self.fold_button.setVisible(has_result)
        self.fold_button.setText("Edit parameters ▾" if folded else "Fold parameters ▴")
        if folded and spec.name in self.forms:
            summary = self.forms[spec.name].summary()
            self.description.setText(f"{spec.title}: {summary}")
            self.description.setToolTip(f"{spec.title} ran with: {summary}\n\n{spec.description}")
        else:
            self.description.setText(f"{spec.title} — {spec.description}")
        QTimer.singleShot(0, self, self.fit_output)  # once the form's fold has been laid out

    def _result_shown(self) -> None:
        if self.sender() is self.results.get(self.current_job) and hasattr(self, "form_scroll"):
            self.fold_form()

    def _toggle_form(self) -> None:
        job = self.current_job
        if self.form_folded():
            self._opened_forms.add(job)
        else:
            self._opened_forms.discard(job)
        self.fold_form()

    def fit_output(self) -> None:
        """The result above the console: the result its least (each plot its least height in sight, the caption's
        first lines), the console up to CONSOLE_LINES lines, the plots whatever is left; a result without plots
        as tall as it needs, the console the rest. The console never has fewer than CONSOLE_LEAST_LINES."""
        total = sum(self.output_split.sizes())
        if total <= 0 or not self._console_sized:
            return
        view = self.results[self.current_job]
        console_least = self.console.height_for_lines(CONSOLE_LEAST_LINES)
        if view.plots:
            console = max(console_least, min(self.console.height_for_lines(CONSOLE_LINES),
                                             total - view.least_height()))
        else:
            console = max(total - view.wanted_height(), console_least)
        console = min(console, total - 1)
        self.output_split.setSizes([total - console, console])
        QTimer.singleShot(0, self, lambda: self._unscroll_result(console_least))

    def _unscroll_result(self, console_least: int, attempt: int = 0) -> None:
        """A result that still scrolls down by a few px (its caption wrapped once laid out) takes them from the
        console, down to the console's least."""
        view = self.results[self.current_job]
        hidden = view.presentation_page.verticalScrollBar().maximum() if view.currentIndex() == 1 else 0
        result, console = self.output_split.sizes()
        spare = console - console_least
        if hidden > 0 and spare > 0 and attempt < 3:
            moved = min(hidden, spare)
            self.output_split.setSizes([result + moved, console - moved])
            QTimer.singleShot(0, self, lambda: self._unscroll_result(console_least, attempt + 1))

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

    def load_params(self, job: str, params: ParamValues) -> None:
        """Select `job` with these values in its form (History's Run again); unknown names are skipped."""
        self.select_job(job)
        form = self.forms.get(job)
        if form is None:
            return
        for name, value in params.items():
            if name in form.widgets:
                form.set_value(name, value)

    def request_run(self) -> None:
        """Run the selected job with its form's values, as a press of Run does: the form checks them first,
        and nothing happens while Run is disabled."""
        if not self.run_button.isEnabled():
            return
        spec = JOBS[self.current_job]
        refused = self.form().problems()
        if refused:
            self.form_error.setText("\n".join(f"{label}: {message}" for label, message in refused))
            self.form_error.show()
            self.fold_form()  # the fields named are in sight
            return
        try:
            params = spec.resolve(self.form().values())
            devices = self.session.run_devices() if self.session is not None else None
            if devices is not None:  # the devices named must be where the job uses them: refused now, not in TF
                spec.check_devices(params, devices)
        except ParamError as exc:  # named by the form's labels ("Script", not the parameter's name "path")
            labels = {param.name: param.label or param.name for param in spec.params}
            self.form_error.setText("\n".join(f"{labels.get(name, name)}: {message}"
                                              for name, message in exc.problems))
            self.form_error.show()
            self.fold_form()
            return
        self.form_error.hide()
        self.runRequested.emit(spec.name, params)

    def _request_stop(self) -> None:
        if self.stop_button.isEnabled():
            self.stop_button.click()

    # -- wired to the session and the run manager ----------------------------------------------------
    def wire(self, link: RuntimeController) -> None:
        self._link = link
        self.session = link.session
        self.runRequested.connect(link.run)
        self.stopRequested.connect(self._stop)
        link.subscribe(self, JobQueued, lambda queued: self.job_queued(queued.job))
        link.subscribe(self, JobHandedOver, lambda handed_over: self.job_started(handed_over.job))
        link.subscribe(self, WaitingRefused, lambda refused: self.cancel_queued(refused.why))
        link.subscribe(self, JobEnded, lambda ended: self.job_finished(ended.outcome))
        for job, view in self.results.items():  # after the panel's own, which settles the form's fold first
            view.follow(link, job)
        link.subscribe(self, AppliedChanged, lambda _change: self.show_configuration())
        link.subscribe(self, InventoryChanged, lambda change: self.set_devices(
            [d["short_name"] for d in change.ready.logical] if change.ready is not None else []))
        link.subscribe(self, RunStateChanged, self._run_news)
        self.job_list.currentRowChanged.connect(lambda _row: link.session.set("selected_job", self.current_job))
        link.session.set("selected_job", self.current_job)

    def _stop(self) -> None:
        if self._link is None:  # connected by `wire`, which sets it
            return
        manager = self._link.manager
        if manager.cancel_waiting():
            self.cancel_queued()
        elif manager.cancel():
            self.show_stopping(manager.cancel_grace_s)

    def _run_news(self, change: RunStateChanged) -> None:
        news = change.changes
        if news.progress is not None:
            self.show_progress(news.progress.done, news.progress.total, news.progress.message)
        for step, loss in news.losses:
            self.add_live_loss(step, loss)
        # The running job's own lines to its console (a spare's start-up lines have no job id: never there).
        run = self._link.manager.job_run if self._link is not None else None
        if news.output and run is not None and run.job_id is not None and run.job_id == change.value.job_id:
            self._lines_from_run[run.outcome.job] = run.job_id
            self.add_output(run.outcome.job, news.output)

    # -- run state -------------------------------------------------------------------------------
    # Each job keeps its own JobState; the status line, progress bar and clock show the selected job's.
    @property
    def state(self) -> JobState:
        """The selected job's state."""
        return self.states[self.current_job]

    def set_can_run(self, runtime_ready: bool, reason: str = "", *, warming: bool = False) -> None:
        """Whether the runtime can take a job now. Run stays pressable while it warms (`warming`): the job then
        waits for it. With no runtime at all (not started, exited) Run is off and `reason` says why."""
        self._runtime_ready = runtime_ready
        self._warming = warming
        self._not_ready_reason = reason
        self._update_buttons()

    def _update_buttons(self) -> None:
        busy = self.running_job is not None or self.waiting_job is not None
        self.run_button.setEnabled(not busy and (self._runtime_ready or self._warming))
        if self.waiting_job is not None:
            self.run_button.setText("Starts when ready…")
            self.run_button.setToolTip(f"{self.waiting_job} starts as soon as the runtime is ready "
                                       "(Stop or Esc: do not start it)")
        elif self._runtime_ready or busy or not self._warming:
            self.run_button.setText("Run")
            if busy:
                self.run_button.setToolTip(f"{self.running_job} is running; one job at a time")
            else:
                self.run_button.setToolTip("Run the job in the background (Ctrl+R)" if self._runtime_ready
                                           else self._not_ready_reason)
        else:
            self.run_button.setText("Run when ready")
            self.run_button.setToolTip(f"{self._not_ready_reason or 'The runtime is not ready'}: the job starts "
                                       "as soon as it is (Ctrl+R)")
        self.stop_button.setEnabled(busy and not self._stopping)
        running = self.running_job or self.waiting_job
        self.stop_button.setToolTip(f"Cancel {running} (Esc)" if running else "Cancel the running job (Esc)")

    def job_queued(self, job: str) -> None:
        """Run was pressed while the runtime warms: the job waits for it."""
        self.waiting_job = job
        self.states[job].queue()
        self._update_buttons()
        self._render_state()

    def cancel_queued(self, reason: str = "Stop was pressed while it waited for the runtime") -> str | None:
        """A job waiting for the runtime will not start (Stop, or the runtime failed). Returns that job."""
        job, self.waiting_job = self.waiting_job, None
        if job is not None:
            state = self.states[job]
            state.waiting = False
            state.status = f"Not started: {reason}"
        self._update_buttons()
        self._render_state()
        return job

    def job_started(self, job: str) -> None:
        self._stopping = False
        if self.waiting_job == job:
            self.waiting_job = None
        self.running_job = job if job in self.results else None
        if job in self.states:
            run = self._link.manager.job_run if self._link is not None else None
            lines_came_first = (run is not None and run.job_id is not None
                                and self._lines_from_run.get(job) == run.job_id)
            self.states[job].start(job, keep_output=lines_came_first)
        self._timer.start()
        self.result.live_losses = []
        self.result.show_message(f"<b>{html.escape(job)}</b>'s result appears here when it ends; "
                                 "its own output is below.")
        self._opened_forms.discard(job)  # its result, when it comes, folds the form again
        if job == self.current_job:
            self.console.show_state(self.states[job])
        self._update_buttons()
        self._render_state()

    def add_output(self, job: str, lines: list[tuple[str, bool]]) -> None:
        """The running job's own output: (text, partial) in order; shown at once if it is the selected job."""
        state = self.states.get(job)
        if state is None:
            return
        added = [text for text, partial in lines if state.add_output(text, partial)]
        if job == self.current_job:
            self.console.append(added)

    def add_live_loss(self, step: int, value: float) -> None:
        """A running fit's loss at `step`, drawn on its result while it runs."""
        self.result.add_live_loss(step, value)  # its first point shows the live curve: the form folds

    def redraw_results(self) -> None:
        """Every job's result drawn again (the zoom or presentation mode changed its fonts and lines)."""
        for view in self.results.values():
            view.redraw()

    def show_progress(self, done: float, total: float, message: str) -> None:
        if self.running_job is None:
            return
        self.states[self.running_job].report(done, total, message)
        self._render_state()

    def show_stopping(self, grace_s: float) -> None:
        self._stopping = True
        if self.running_job is not None:
            self.states[self.running_job].stop_requested(grace_s)
        self._update_buttons()
        self._render_state()

    def job_finished(self, outcome: JobOutcome) -> None:
        self._stopping = False
        state = self.states.get(outcome.job)
        if state is not None:
            state.finish(outcome)
        self._opened_forms.discard(outcome.job)
        if outcome.job not in self.results:  # each job's own view shows its outcome itself (`ResultView.follow`)
            self.result.show_outcome(outcome)
        if outcome.job == "script":
            ran_out = outcome.oom is not None and outcome.status != "ok"
            self._script_out_of_memory = (str(outcome.params.get("path", "")), str(outcome.params.get("args", ""))) \
                if ran_out else None
        self.running_job = None
        if not any(s.running for s in self.states.values()):
            self._timer.stop()
        self._update_buttons()
        self._render_state()

    def shut_down(self) -> None:
        """The window is closing: a job stopped by closing may never report its end, so its clock stops here."""
        self._timer.stop()

    def _render_state(self) -> None:
        """The selected job's status, progress and clock."""
        state = self.state
        if state.progress is None:
            self.progress.setRange(0, 0)  # busy until the first progress report
        else:
            self.progress.setRange(0, 1000)
            self.progress.setValue(int(1000 * state.progress))
        self.status.setText(state.status or "Not run yet")
        self.find_batch_button.setVisible(self.current_job == "script" and self._script_out_of_memory is not None)
        self._tick()

    def find_batch_for_script(self) -> None:
        """Batch that fits, prefilled with the script that ran out of memory: its batch-size argument, where one
        is recognisable, becomes {batch}; otherwise the arguments are left for the person to mark."""
        if self._script_out_of_memory is None:
            return
        path, args = self._script_out_of_memory
        marked = BATCH_ARGUMENT.sub(lambda match: match.group(1) + "{batch}", args, count=1)
        self.select_job("fit-batch")
        form = self.forms["fit-batch"]
        form.set_value("script", path)
        form.set_value("args", marked)

    def _tick(self) -> None:
        elapsed = self.state.elapsed()
        self.elapsed.setText("" if elapsed is None else f"{elapsed:6.1f} s")
