"""A job whose work is runs of the panel's own command line (fit-batch): carried out in the panel's process, on
a thread of its own, never in a run process.

Its work starts and reads processes (core.panel_runs) and needs no TensorFlow of its own: run inside a run
process it held an initialized TensorFlow for nothing (and, on a GPU, the memory its own runs needed) and had a
run process start the command line. Here it is a `ClientJob`, which the run manager drives like a run process
(`ProcessHandle`): warm at once, one job, the same events a run process sends (JobStarted, Progress, the job's
lines as Log, Result or Error, JobFinished, RuntimeExited), so its record, the window and `run --json` read it
as any run. Cancel sets a flag its work checks between runs and while it waits on one (that run is stopped);
nothing it starts outlives it (each run dies with the thread that started it, and is stopped on the way out).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from tf_device_panel.core.catalogue import get_job, load_entry
from tf_device_panel.core.catalogue.jobs import JobError
from tf_device_panel.core.catalogue.params import ParamError
from tf_device_panel.core.client.machine import run_devices
from tf_device_panel.core.client.runtime import PROCESS_TRANSITIONS, Lifecycle, RuntimeState, RuntimeUnavailable
from tf_device_panel.core.config import DeviceConfig
from tf_device_panel.core.processes import wait_for_exit
from tf_device_panel.core.protocol import events
from tf_device_panel.core.protocol.events import Event

LAST_LINES = 40

log = logging.getLogger(__name__)


class ClientJobCancelled(BaseException):
    """Raised inside a client job when it was asked to stop (a BaseException, as KeyboardInterrupt is)."""


class ClientJobContext:
    """What a client job's work sees: its configuration, progress, its lines, and whether to stop."""

    def __init__(self, job_id: str, device_config: DeviceConfig, emit: Callable[[Event], None]):
        self.job_id = job_id
        self.device_config = device_config
        self.cancel_requested = threading.Event()
        self._emit = emit

    def emit(self, event: Event) -> None:
        self._emit(event.replace(job_id=self.job_id))

    def progress(self, done: float, total: float, message: str = "", *, force: bool = False) -> None:
        """One report per step (a client job's steps are runs, seconds apart: nothing to throttle)."""
        self.emit(events.Progress(done=done, total=total, message=message))

    def say(self, text: str) -> None:
        """A line of the job's output, as a run process's `print` would be read."""
        self.emit(events.Log(stream="stdout", kind="output", text=text))

    def check_cancelled(self) -> None:
        if self.cancel_requested.is_set():
            raise ClientJobCancelled("cancelled by the user")


class ClientJob:
    """One client job, handled as the run manager handles a run process (core.client.process_handle)."""

    forked = False

    def __init__(self, config: DeviceConfig, *, on_event: Callable[[Event], None]):
        self.config = config
        self._on_event = on_event
        self.lifecycle = Lifecycle("client job", PROCESS_TRANSITIONS)
        self._state_changed = threading.Condition()
        self._commands: queue.SimpleQueue[tuple[str, str, dict[str, object], int | None] | None] = \
            queue.SimpleQueue()
        self._context: ClientJobContext | None = None
        self._killed_reason: str | None = None
        self._lines: list[str] = []
        self._thread: threading.Thread | None = None
        self.warm: events.Warm | None = None
        self.exited: events.RuntimeExited | None = None
        self.running_job: str | None = None

    # -- what the run manager reads ----------------------------------------------------------------
    @property
    def state(self) -> RuntimeState:
        return self.lifecycle.state

    @property
    def startup_error(self) -> events.StartupError | None:
        return None  # no TensorFlow to import, no configuration to apply: nothing can fail before the job

    @property
    def pid(self) -> int | None:
        return None  # no process of its own: the runs it starts are the processes (and end with it)

    def recent_lines(self) -> list[str]:
        return list(self._lines[-LAST_LINES:])

    def tf_lines(self) -> list[str]:
        return []

    def failure_message(self) -> str:
        if self.exited is not None:
            return f"the job {self.exited.description}"
        return "the job is not ready"

    @staticmethod
    def new_job_id() -> str:
        return f"client-{time.time_ns()}"

    # -- what the run manager asks -----------------------------------------------------------------
    def start(self) -> None:
        self._fire("start")
        self._fire("warm")
        self._thread = threading.Thread(target=self._serve, name="client-job", daemon=True)
        self._thread.start()

    def submit(self, job: str, params: Mapping[str, Any] | None = None, *, after_pid: int | None = None,
               job_id: str | None = None) -> str:
        """`after_pid`: the last run's process, whose outcome is in but which may still be exiting; the work begins
        once it has exited, as a run process's does (its runs may need the GPU that process still holds)."""
        with self._state_changed:
            if self.state != RuntimeState.READY:
                raise RuntimeUnavailable(f"the job is {self.state}; it takes a job only when ready")
            job_id = job_id or self.new_job_id()
            self.running_job = job_id
            self._context = ClientJobContext(job_id, self.config, self._tell)
            self.lifecycle.fire("submit")
            self._state_changed.notify_all()
        self._commands.put((job, job_id, dict(params or {}), after_pid))
        return job_id

    def describe(self) -> None:
        raise RuntimeUnavailable("a client job describes no devices")

    def cancel(self, grace: float = 5.0) -> None:
        """Its work stops at its next check: between runs, or while it waits on one (that run is killed, within
        a fifth of a second). There is no process to signal, so `grace` has nothing to enforce."""
        if self._context is not None:
            self._context.cancel_requested.set()

    def kill(self, reason: str | None = None) -> None:
        """As `cancel`, and said as a kill; one not yet given its job never takes one."""
        with self._state_changed:
            if reason and self._killed_reason is None:
                self._killed_reason = reason
            if self._context is not None:
                self._context.cancel_requested.set()
            elif self.state == RuntimeState.READY:
                self._leave()

    def stop(self, timeout: float = 5.0) -> None:
        with self._state_changed:
            if self.state == RuntimeState.BUSY:
                if self._killed_reason is None:
                    self._killed_reason = "stopped while the job was running"
                if self._context is not None:
                    self._context.cancel_requested.set()
            elif self.state == RuntimeState.READY:
                self._leave()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)

    def _leave(self) -> None:
        """(Holding `_state_changed`.) No job will come: the thread ends; a later submit is refused."""
        self.lifecycle.fire("stop")
        self._state_changed.notify_all()
        self._commands.put(None)

    # -- the job's thread --------------------------------------------------------------------------
    def _serve(self) -> None:
        status = ""  # no job
        try:
            self.warm = events.Warm()
            self._tell(self.warm)
            command = self._commands.get()
            if command is not None:
                status = self._run(*command)
        finally:  # whatever happened, the job's end and the "process's" exit are told
            self.running_job = None
            killed = self._killed_reason
            if status == "cancelled" and killed is not None:
                description = f"was stopped: {killed}"
            else:
                description = {"ok": "ended", "cancelled": "was cancelled", "": "ended without a job"}.get(
                    status, "ended with an error")
            returncode = 0 if status in ("ok", "") else 1
            self.exited = events.RuntimeExited(returncode=returncode, description=description,
                                               expected=killed is None or status == "ok",
                                               last_lines=tuple(self.recent_lines()[-12:]))
            self._fire("exit")
            self._tell(self.exited)

    def _run(self, job: str, job_id: str, params: dict[str, object], after_pid: int | None) -> str:
        """The job, its outcome told (Error or Result, then JobFinished) whatever ends it; its status."""
        context = self._context
        assert context is not None
        started = time.monotonic()
        context.emit(events.JobStarted(job=job, params=params))
        status, result, error = "error", None, None
        try:
            if after_pid is not None:
                waiting = f"waiting for the previous run's process (pid {after_pid}) to exit"
                wait_for_exit(after_pid, lambda: context.say(waiting), context.check_cancelled)
            spec = get_job(job)
            resolved = spec.resolve(params)
            if spec.names_devices(resolved):  # the check the command line and the window made, made again here
                spec.check_devices(resolved, run_devices(self.config))
            result = load_entry(spec.entry)(context, **resolved)
            status = "ok"
        except ClientJobCancelled:
            status = "cancelled"
            message = "cancelled by the user" if self._killed_reason is None else f"stopped: {self._killed_reason}"
            error = events.Error(error_type="Cancelled", message=message)
        except (JobError, ParamError) as exc:
            error = events.Error(error_type=type(exc).__name__, message=str(exc))
        except BaseException as exc:  # a bug of the panel's: said as the job's error, never a thread's traceback
            log.exception("client job %s failed", job)
            error = events.Error(error_type=type(exc).__name__, message=str(exc).strip() or type(exc).__name__)
        finally:
            if error is not None:
                context.emit(error)
            if result is not None:
                context.emit(events.Result(result=result))
            context.emit(events.JobFinished(job=job, status=status, duration_s=time.monotonic() - started,
                                            returncode=0 if status == "ok" else 1))
        return status

    def _tell(self, event: Event) -> None:
        if isinstance(event, events.Log):
            self._lines.append(event.text)
            del self._lines[:-LAST_LINES]
        try:
            self._on_event(event)
        except Exception:  # a listener's bug must not end the job's thread before its last events
            log.exception("client job: the event listener failed on a %s event", event.type)

    def _fire(self, trigger: str) -> None:
        with self._state_changed:
            self.lifecycle.fire(trigger)
            self._state_changed.notify_all()
