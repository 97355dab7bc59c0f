"""The window's session without Qt (glue's `State` and hub, napari's EventedModel): one observable owner of what
the window shows and the run manager decides, and the one hub its news goes through.

The session holds, once each:

- the configuration being edited (`draft`) and the one last applied (`applied`);
- the run manager's state (`manager_state`), its spare process (`spare`), the job waiting for that spare
  (`pending`);
- the pid of the run's process (`run_pid`: the process the memory graphs and the device map follow);
- the applied configuration's devices (`ready`: TensorFlow's typed Ready report) and the `inventory` made of them
  with NVML's GPUs;
- the current run as every panel draws it (`run_state`, fed each batch of events once by `fold`);
- the job selected in the job list (`selected_job`).

The session is a `Hub` (core.hub): each field has its own change event, one small frozen dataclass per field,
and the run manager's news are messages too (a job queued, handed over, ended; a waiting job refused; a problem
for the user). A subscriber picks a class (`subscribe(self, DraftChanged, handler)`), or every change
(`Change`). Messages are told on the thread that made them: the run manager's under its own rules (after its
lock is released), the window's on the GUI thread. The window's controller moves them onto the GUI thread before
any widget sees them.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

from tf_device_panel.core.catalogue import ParamValues, RunDevices, profile_devices
from tf_device_panel.core.client.process_handle import ProcessHandle
from tf_device_panel.core.client.run_record import JobOutcome, JobRun
from tf_device_panel.core.client.run_state import RunChanges, RunState
from tf_device_panel.core.client.runtime import RuntimeState
from tf_device_panel.core.config import DeviceConfig
from tf_device_panel.core.devices.inventory import DeviceInventory
from tf_device_panel.core.devices.nvml import GpuSnapshot
from tf_device_panel.core.devices.telemetry import Sampler
from tf_device_panel.core.hub import HandlerFailed, Hub, Message
from tf_device_panel.core.protocol import events


@dataclass(eq=False)  # each request is its own, however alike two are
class PendingRun:
    """A job asked for before a process was warm. With no spare pool the run owns its process from the start,
    and so its record (`run`) starts then too; with a pool, its record starts when the spare takes it."""

    job: str
    params: ParamValues
    run: JobRun | None = None
    cancelled: bool = False


# -- one change event per field ----------------------------------------------------------------------------
@dataclass(frozen=True)
class Change(Message):
    """A field of the session took a new value (`value`); subclasses name the field."""

    field_name: ClassVar[str] = ""


@dataclass(frozen=True)
class DraftChanged(Change):
    field_name: ClassVar[str] = "draft"
    value: DeviceConfig


@dataclass(frozen=True)
class AppliedChanged(Change):
    field_name: ClassVar[str] = "applied"
    value: DeviceConfig | None


@dataclass(frozen=True)
class ManagerStateChanged(Change):
    field_name: ClassVar[str] = "manager_state"
    value: RuntimeState


@dataclass(frozen=True)
class SpareChanged(Change):
    field_name: ClassVar[str] = "spare"
    value: ProcessHandle | None


@dataclass(frozen=True)
class PendingChanged(Change):
    field_name: ClassVar[str] = "pending"
    value: PendingRun | None


@dataclass(frozen=True)
class RunPidChanged(Change):
    field_name: ClassVar[str] = "run_pid"
    value: int | None


@dataclass(frozen=True)
class ReadyChanged(Change):
    field_name: ClassVar[str] = "ready"
    value: events.Ready | None


@dataclass(frozen=True)
class InventoryChanged(Change):
    """TensorFlow's devices matched to NVML's, made of a run's `ready` report (with TensorFlow's own lines: its
    reasons when it sees no GPU)."""

    field_name: ClassVar[str] = "inventory"
    value: DeviceInventory
    ready: events.Ready | None = None
    tf_lines: tuple[str, ...] = ()


@dataclass(frozen=True)
class SelectedJobChanged(Change):
    field_name: ClassVar[str] = "selected_job"
    value: str | None


@dataclass(frozen=True)
class RunStateChanged(Change):
    """A batch of events was folded into the run state: `changes` says what it changed, `batch` is the batch
    (a view that writes each event out, the raw log, reads it; none matches it for state)."""

    field_name: ClassVar[str] = "run_state"
    value: RunState
    changes: RunChanges = field(default_factory=RunChanges)
    batch: tuple[events.Event, ...] = ()


CHANGE_OF_FIELD: dict[str, type[Change]] = {cls.field_name: cls for cls in (
    DraftChanged, AppliedChanged, ManagerStateChanged, SpareChanged, PendingChanged, RunPidChanged, ReadyChanged,
    InventoryChanged, SelectedJobChanged, RunStateChanged)}

# Fields whose equal value is no news. The others are news whenever set to another object: applying a
# configuration equal to the applied one still restarts the runtime, and the panels start afresh with it.
SAME_WHEN_EQUAL = frozenset({"draft", "manager_state", "run_pid", "selected_job"})

# -- the run's news: the manager's (told after its lock is released, on its thread) and a job's end (`fold`) --
@dataclass(frozen=True)
class JobQueued(Message):
    """A job asked for while the spare warms: it waits for it."""

    job: str


@dataclass(frozen=True)
class JobHandedOver(Message):
    """A job handed to a warm process (at once, or once it had waited for it)."""

    job: str


@dataclass(frozen=True)
class WaitingRefused(Message):
    """The spare a job waited for failed: the job is not started, for `why`."""

    job: str
    why: str


@dataclass(frozen=True)
class ProblemNotice(Message):
    """Something the person must hear of (the window shows a notice)."""

    text: str


@dataclass(frozen=True)
class JobEnded(Message):
    """A job's end, told by `fold` after the batch that held its last events: whoever draws the run's events has
    drawn them all when it hears of it."""

    outcome: JobOutcome


class Session(Hub):
    """The single owner of the window's state, and the hub of its news; see the module's doc."""

    def __init__(self, sampler: Sampler | None = None) -> None:
        """`sampler`: the process's one telemetry sampler (the window's graphs, its device map and an exporter all
        subscribe to it), told the run's pid as it changes; none in a session without telemetry (the CLI, a
        test)."""
        super().__init__()
        self.sampler: Sampler | None = None
        self.nvml_gpus: list[GpuSnapshot] = []   # NVML's GPUs, read once when the sampler starts
        self.draft = DeviceConfig()
        self.applied: DeviceConfig | None = None
        self.manager_state = RuntimeState.NOT_STARTED
        self.spare: ProcessHandle | None = None
        self.pending: PendingRun | None = None
        self.run_pid: int | None = None
        self.ready: events.Ready | None = None
        self.inventory = DeviceInventory()
        self.run_state = RunState()
        self.selected_job: str | None = None
        if sampler is not None:
            self.attach_sampler(sampler)

    # -- telemetry -------------------------------------------------------------------------------
    def attach_sampler(self, sampler: Sampler) -> None:
        """The session's sampler (one only): it samples for the run's pid, as the session has it."""
        if self.sampler is not None:
            raise ValueError("the session has its sampler already")
        self.sampler = sampler
        sampler.set_runtime_pid(self.run_pid)
        self.subscribe(sampler, RunPidChanged, lambda change: sampler.set_runtime_pid(change.value))
        # A sample's handler that failed is the window's news too (it hears the session only).
        sampler.hub.subscribe(self, HandlerFailed, self.publish)

    def start_telemetry(self) -> None:
        """Start sampling; NVML's GPUs (name, bus id, memory) are read once here, for the inventory too."""
        if self.sampler is not None:
            self.sampler.start()
            self.nvml_gpus = list(self.sampler.gpus)

    def stop_telemetry(self) -> None:
        if self.sampler is not None:
            self.sampler.stop()

    def run_devices(self) -> RunDevices | None:
        """The devices a run under the applied configuration has, known before it starts (for the job's
        parameters' check, the one the command line and the run process make); None before anything is applied."""
        if self.applied is None:
            return None
        devices = profile_devices(self.applied, self.inventory.gpu_infos())
        return replace(devices, whose="the applied configuration gives", settings="the configuration")

    # -- changing --------------------------------------------------------------------------------
    def update(self, name: str, value: Any) -> Change | None:
        """Set field `name` without telling anyone; its change event when the value differs (told later with
        `publish`: the run manager sets fields under its lock and tells once it is released)."""
        kind = CHANGE_OF_FIELD[name]
        if kind is RunStateChanged:
            raise KeyError("the run state changes only by `fold`")
        old = getattr(self, name)
        setattr(self, name, value)  # even when equal: its owner may ask `is` of it (the manager does)
        if old is value or (name in SAME_WHEN_EQUAL and type(old) is type(value) and old == value):
            return None
        return kind(value)  # type: ignore[call-arg]  # every field's event takes its new value

    def set(self, name: str, value: Any) -> Change | None:
        """Set field `name` and tell its subscribers at once (on this thread)."""
        change = self.update(name, value)
        if change is not None:
            self.publish(change)
        return change

    def fold(self, batch: Iterable[events.Event], tf_lines: Callable[[], list[str]] = list,
             run: JobRun | None = None) -> RunChanges:
        """A batch of the run's events, fed to the run state once, in order: every panel draws what it made of
        them. The run's pid moves with it (a ready report's pid; none once the process exited), and each ready
        report makes the inventory afresh (`tf_lines`: TensorFlow's lines of the process that reported). When the
        batch holds the end of `run`'s job (the run in progress, as the manager records it), `JobEnded` is told
        after it."""
        batch = tuple(batch)
        changes = self.run_state.apply_all(batch)
        for ready in changes.readies:
            self.take_ready(ready, tf_lines())
        self.publish(RunStateChanged(self.run_state, changes, batch))
        self.set("run_pid", self.run_state.pid)
        if run is not None and any(finished.job_id == run.job_id for finished in changes.finished):
            self.publish(JobEnded(run.outcome))
        return changes

    def take_ready(self, ready: events.Ready, tf_lines: list[str] | None = None) -> DeviceInventory:
        """A run's TensorFlow is ready: match its GPUs to NVML's, once, and tell every subscriber."""
        self.inventory = DeviceInventory.from_ready(ready, self.nvml_gpus, os.environ.get("CUDA_VISIBLE_DEVICES"))
        self.publish(InventoryChanged(self.inventory, ready, tuple(tf_lines or ())))
        return self.inventory

    # -- derived ---------------------------------------------------------------------------------
    @property
    def is_stale(self) -> bool:
        """The runtime runs another configuration than the one being edited (the one answer to "stale": the
        Configuration panel and the status bar both ask it)."""
        return self.applied is not None and self.draft != self.applied

    def set_draft(self, config: DeviceConfig) -> None:
        self.set("draft", config)
