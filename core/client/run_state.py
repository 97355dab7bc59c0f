"""One run as the panel knows it, Qt-free: fed once per event, read by every view of the run.

The window feeds its `RunState` each batch of events once (`apply_all`) and hands what changed to the log's
placement table, the device map, the memory graphs' markers and the job's console; none of them counts for
itself, so they cannot disagree on what a run placed or when a run starts afresh. A panel used on its own (a
past run's log, a test) keeps a state of its own and feeds it the same way.

What a run is: each run is a fresh process whose events carry its job id. `starts_new_run` is the one rule
for where a run's state begins; see its comment.
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import NamedTuple

from tf_device_panel.core.client import wording
from tf_device_panel.core.devices.telemetry import Marker  # a moment the memory graphs mark
from tf_device_panel.core.protocol import events, output_lines
from tf_device_panel.core.protocol.output_lines import canonical_device
from tf_device_panel.core.protocol.streams import OUTPUT_STREAMS

MAX_PLACEMENT_ROWS = 100_000  # distinct (op, op type, device): a graph's unique node names must not grow it forever
MAX_MARKERS = 10_000          # markers on the memory graphs, across runs (the graphs keep hours of samples)
MAX_OUTPUT_LINES = 5000       # the job's own lines, as the window's console keeps them (the record keeps all)
CONSOLE_KINDS = frozenset({output_lines.OUTPUT, output_lines.WARNING, output_lines.ERROR})


class PlacementKey(NamedTuple):
    """One row of the placement table: an op, its type, the short name of the device it was placed on."""

    op: str
    op_type: str
    device: str


def console_line(event: events.Event) -> tuple[str, bool] | None:
    """(text, partial) when `event` is a line of the job's own output, else None (TensorFlow's placement and
    start-up lines stay in the log, and so do TensorFlow's C++ log lines: `W0000 … dataset.cc…`, absl's
    "WARNING: All log messages before absl::InitializeLog()…")."""
    match event:
        case events.Log(stream=stream, kind=kind, text=text, partial=partial, source=source) if (
                stream in OUTPUT_STREAMS and kind in CONSOLE_KINDS and source != output_lines.TENSORFLOW):
            if source is None and output_lines.is_tensorflow_log(text):
                return None  # a record from before lines were marked: by its shape (a script's lines never)
            return text, partial
    return None


@dataclass
class RunChanges:
    """What one batch changed: `fresh` when a new run began in it (what came before in the batch is then
    gone from the state); the rest counts only what came after the last new start."""

    fresh: bool = False
    placements: Counter[PlacementKey] = field(default_factory=Counter)  # each key's added count
    fallbacks: list[events.Fallback] = field(default_factory=list)
    markers: list[Marker] = field(default_factory=list)                  # of every run in the batch
    output: list[tuple[str, bool]] = field(default_factory=list)        # (text, partial) of this run's job
    device_changes: bool = False   # op counts, fallbacks or TensorFlow's memory: what the device map draws
    # Of the whole batch, whichever run they came from (a run's report, progress and end are news as they come):
    warmed: bool = False                                               # a process said it is warm
    readies: list[events.Ready] = field(default_factory=list)
    progress: events.Progress | None = None                           # the latest
    losses: list[tuple[int, float]] = field(default_factory=list)      # (step, loss) of the "loss" metric
    tf_memory: list[events.TfMemory] = field(default_factory=list)
    startup_errors: list[events.StartupError] = field(default_factory=list)
    exits: list[events.RuntimeExited] = field(default_factory=list)
    finished: list[events.JobFinished] = field(default_factory=list)

    @property
    def moves_a_process(self) -> bool:
        """The batch held news of a process's own state: warm, ready, rejected at start-up, or exited."""
        return bool(self.warmed or self.readies or self.startup_errors or self.exits)


class RunState:
    """The current run: its placements with counts, fallbacks, TensorFlow's memory per device and the job's
    output; and the markers of every run (bounded), for the memory graphs."""

    def __init__(self, max_placement_rows: int = MAX_PLACEMENT_ROWS):
        self.max_placement_rows = max_placement_rows
        self.markers: deque[Marker] = deque(maxlen=MAX_MARKERS)
        self.runs = 0  # how many runs began: a view that drew an earlier one knows to start afresh
        # The process the memory graphs and the device map follow: a ready report's, none once it exited.
        self.pid: int | None = None
        self._reset(None)

    def _reset(self, job_id: str | None) -> None:
        self.job_id = job_id
        self.job = ""
        self.placements: dict[PlacementKey, int] = {}       # in the order first placed
        self.ops_per_device: Counter[str] = Counter()       # every placement, by device
        self.fallbacks: list[events.Fallback] = []
        self.fallback_pairs: list[tuple[str, str]] = []      # (requested device, actual), each once
        self.tf_memory: dict[str, events.TfMemory] = {}      # the latest figures per logical GPU
        self.output: deque[str] = deque(maxlen=MAX_OUTPUT_LINES)
        self.live_line = ""
        self.finished: events.JobFinished | None = None

    @property
    def cancelled(self) -> bool:
        """The run's job was cancelled: its process's exit status is the cancel's, not a failure."""
        return self.finished is not None and self.finished.status == "cancelled"

    def starts_new_run(self, event: events.Event) -> bool:
        """THE reset rule: the first event of a job id other than the current run's starts a fresh state, and so
        does a `Ready` without a job id (a runtime listing its devices with no job).

        Why: each run is a fresh process, possibly with another configuration and so other devices, and counts
        must never mix two runs (the window once counted a quick job's placements and then let that run's own
        ready report wipe them). A run's events come over three pipes read side by side, so its `Ready` is not
        reliably its first: a user's script reports `JobStarted` before `Ready` (TensorFlow initializes when the
        script first uses it), and a placement line on stderr may be read before the `Ready` on the events
        pipe. Keyed on the job id, whichever comes first starts the run and the rest of that run add to it. A
        run's lines never come after its end (its closing events wait for its pipes' end of file), so a job
        id seen before is never a late line of an earlier run."""
        match event:
            case events.Ready(job_id=None):
                # A describe run's report can be told after the job it let start has begun to print (each
                # process has its own reader thread): it lists the devices, and must not wipe a started job.
                return not self.job_in_flight
        return event.job_id is not None and event.job_id != self.job_id

    @property
    def job_in_flight(self) -> bool:
        """The run's job said it started and has not finished."""
        return bool(self.job) and self.finished is None

    def apply(self, event: events.Event, changes: RunChanges | None = None) -> None:
        changes = changes if changes is not None else RunChanges()
        if self.starts_new_run(event):
            self.runs += 1
            self._reset(event.job_id)
            changes.fresh = True
            changes.placements.clear()
            changes.fallbacks.clear()
            changes.output.clear()
            changes.device_changes = True
        match event:
            case events.Warm():
                changes.warmed = True
            case events.Ready(pid=pid):
                if event.job_id is not None or not self.job_in_flight:  # not a describe run's, during a job
                    self.pid = pid
                changes.readies.append(event)
                self._mark(changes, event.time, "runtime-start", "runtime started")
            case events.JobStarted(job=job):
                self.job = job
                self._mark(changes, event.time, "job-start", f"{job} started")
            case events.Placement(op=op, op_type=op_type, short_device=device):
                self._place(changes, PlacementKey(op, op_type, device))
            case events.Fallback(requested=requested, requested_short=requested_short, actual_short=actual):
                self.fallbacks.append(event)
                pair = (canonical_device(requested_short or requested), actual)
                if pair not in self.fallback_pairs:
                    self.fallback_pairs.append(pair)
                changes.fallbacks.append(event)
                changes.device_changes = True
            case events.TfMemory(device=device):
                self.tf_memory[device] = event
                changes.tf_memory.append(event)
                changes.device_changes = True
            case events.Progress():
                changes.progress = event
            case events.Metric(name="loss", step=step, value=value):
                changes.losses.append((int(step or 0), float(value)))
            case events.StartupError():
                changes.startup_errors.append(event)
            case events.Log() if event.job_id is not None:  # the job's lines (a spare's start-up lines have none)
                self._output(changes, event)
            case events.JobFinished():
                self.finished = event
                changes.finished.append(event)
                self._mark(changes, event.time, "job-end", wording.job_finished(event))
            case events.Error(error_type=error_type) if event.job_id is not None:
                self._mark(changes, event.time, "error", error_type or "error")
            case events.RuntimeExited():
                self.pid = None
                changes.exits.append(event)
                self._mark(changes, event.time, "runtime-exit", wording.runtime_exited(event))

    def apply_all(self, batch: Iterable[events.Event]) -> RunChanges:
        """Feed a batch, in order; what it changed."""
        changes = RunChanges()
        for event in batch:
            self.apply(event, changes)
        return changes

    def _place(self, changes: RunChanges, key: PlacementKey) -> None:
        self.ops_per_device[key.device] += 1
        changes.device_changes = True
        if key not in self.placements and len(self.placements) >= self.max_placement_rows:
            return  # a key past max_placement_rows: counted per device only
        self.placements[key] = self.placements.get(key, 0) + 1
        changes.placements[key] += 1

    def _output(self, changes: RunChanges, event: events.Log) -> None:
        line = console_line(event)
        if line is None:
            return
        text, partial = line
        if partial:
            self.live_line = text
        else:
            self.live_line = ""
            self.output.extend(text.split("\n"))  # a block of plain output is one event
        changes.output.append(line)

    def _mark(self, changes: RunChanges, at: float, kind: str, label: str) -> None:
        marker = Marker(at, kind, label)
        self.markers.append(marker)
        changes.markers.append(marker)
