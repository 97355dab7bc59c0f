"""The run lifecycle, Qt-free: one owner for the window and the CLI alike.

A `RunManager` keeps the applied configuration's processes and the run in progress:

- the *spare pool*: with `spares=1` (the window) a process for the applied configuration is always warming or
  warm, and the next one starts warming the moment a job is handed over; with `spares=0` (the CLI) the run
  starts its own process and nothing warms ahead.
- a *describe run* (window only) lists the configuration's devices (forms pick from them); the manager is
  READY only once the spare is warm and the devices are known.
- the run record (`JobRun`, written to the run history) of the job handed over;
- the policies the window used to hold: a job asked for while the spare warms waits and starts by itself when
  it is ready, and is refused with a reason when the spare fails; a run whose process had to be killed for a
  cancel leaves a fresh process with the same configuration behind.

Its state moves only through `TRANSITIONS` (an unknown move raises `IllegalTransition`). Processes come from
an injected factory, so its tests drive it with a fake process in milliseconds. Its news (the session's fields,
a job queued, handed over or refused, a problem) is published on its session (core.client.session), and the
run's events are handed to one `event_sink`; both on the thread the news came from (a process's reader thread,
or the caller's), in the order it came there, never with the manager's lock held: an event sink that blocks (a
terminal that takes no output) slows only that process. Each thread tells only its own news: a reader's events
are never told by another thread, so they cannot overtake one another, nor reach a subscriber from two threads
at once.
"""

from __future__ import annotations

import collections
import contextlib
import functools
import queue
import signal
import threading
import time
import weakref
from collections.abc import Callable, Mapping
from enum import Enum
from typing import Any

from tf_device_panel.core.catalogue import JOBS, ParamValues
from tf_device_panel.core.client import zygote
from tf_device_panel.core.client.client_job import ClientJob
from tf_device_panel.core.client.history import RunHistory
from tf_device_panel.core.client.process_handle import ProcessHandle
from tf_device_panel.core.client.run_record import JobOutcome, JobRun
from tf_device_panel.core.client.runtime import (
    DeviceDescriptions,
    Lifecycle,
    RuntimeProcess,
    RuntimeState,
    RuntimeUnavailable,
)
from tf_device_panel.core.client.session import (
    JobHandedOver,
    JobQueued,
    PendingRun,
    ProblemNotice,
    Session,
    WaitingRefused,
)
from tf_device_panel.core.config import DeviceConfig
from tf_device_panel.core.hub import Message, Subscription
from tf_device_panel.core.protocol import events
from tf_device_panel.core.protocol.events import Event

CANCEL_GRACE_S = 5.0
STOP_TIMEOUT_S = 5.0


ProcessFactory = Callable[[DeviceConfig, Callable[[Event], None]], ProcessHandle]


def runs_in_client(job: str) -> bool:
    """The job's work is runs of the command line, done from the panel's process (JobSpec.in_client)."""
    spec = JOBS.get(job)
    return spec is not None and spec.in_client


def runtime_process(config: DeviceConfig, on_event: Callable[[Event], None]) -> ProcessHandle:
    return RuntimeProcess(config, on_event=on_event)


class ProcessStarter:
    """Starts processes on one long-lived thread, for callers on short-lived ones.

    A run process dies with the *thread* that started it (`die_with_parent`: PR_SET_PDEATHSIG follows the
    forking thread). A reader thread ends with its own process, so a spare it started (a waiting job handed
    over, the next spare warmed) would be killed moments later; those starts come here instead."""

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[Callable[[], None] | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None

    def start(self, start: Callable[[], None]) -> None:
        """Runs `start` on the starter's thread and waits for it; its exception is raised here."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="process-starter", daemon=True)
            self._thread.start()
        done = threading.Event()
        failures: list[BaseException] = []

        def job() -> None:
            try:
                start()
            except BaseException as exc:  # handed to the caller, whatever it is
                failures.append(exc)
            finally:
                done.set()

        self._jobs.put(job)
        done.wait()
        if failures:
            raise failures[0]

    def close(self, timeout: float) -> None:
        """Ends the thread (the processes it started are stopped by then)."""
        if self._thread is not None:
            self._jobs.put(None)
            self._thread.join(timeout)
            self._thread = None

    def _loop(self) -> None:
        while (job := self._jobs.get()) is not None:
            job()


class Trigger(str, Enum):
    APPLY = "apply"                # a configuration applied: a fresh spare warms (a running job ends)
    NO_SPARE = "no spare"          # none warms: it could not be started, or the pool is empty (the CLI)
    SPARE_READY = "spare ready"    # the spare is warm and the configuration's devices are known
    SPARE_EXITED = "spare exited"  # the spare ended before it took a job (start-up error, killed)
    RUN = "run"                    # a job handed to the spare
    JOB_ENDED = "job ended"        # the running job's outcome is in
    SHUTDOWN = "shutdown"
    STOPPED = "stopped"

    def __str__(self) -> str:
        return self.value


S = RuntimeState
TRANSITIONS: dict[tuple[RuntimeState, str], RuntimeState] = {
    (S.NOT_STARTED, Trigger.APPLY): S.STARTING,
    (S.STARTING, Trigger.APPLY): S.STARTING,
    (S.READY, Trigger.APPLY): S.STARTING,
    (S.EXITED, Trigger.APPLY): S.STARTING,
    (S.BUSY, Trigger.APPLY): S.BUSY,               # the job is killed; its outcome still ends the run
    (S.STARTING, Trigger.NO_SPARE): S.NOT_STARTED,
    (S.STARTING, Trigger.SPARE_READY): S.READY,
    (S.STARTING, Trigger.SPARE_EXITED): S.EXITED,
    (S.READY, Trigger.SPARE_EXITED): S.EXITED,
    (S.READY, Trigger.RUN): S.BUSY,
    (S.BUSY, Trigger.JOB_ENDED): S.STARTING,       # then settles on the spare's state (`_settle`)
    **{(state, Trigger.SHUTDOWN): S.STOPPING for state in RuntimeState if state is not S.STOPPING},
    (S.STOPPING, Trigger.STOPPED): S.EXITED,
}


class SpareCondition(str, Enum):
    """The spare as `_settle` reads it."""

    NONE = "none"          # no spare: none could be started, or the pool is empty
    WARMING = "warming"    # started, not yet usable
    USABLE = "usable"      # warm as its own event said, and the configuration's devices are known
    GONE = "gone"          # exited, or stopping

    def __str__(self) -> str:
        return self.value


# `_settle`'s two decisions, as tables: how the manager's state follows its spare, and what becomes of a job
# waiting for the spare in each state (a state not listed: it keeps waiting).
FOLLOW_THE_SPARE: dict[tuple[RuntimeState, SpareCondition], Trigger] = {
    (S.STARTING, SpareCondition.NONE): Trigger.NO_SPARE,
    (S.STARTING, SpareCondition.GONE): Trigger.SPARE_EXITED,
    (S.READY, SpareCondition.GONE): Trigger.SPARE_EXITED,
    (S.STARTING, SpareCondition.USABLE): Trigger.SPARE_READY,
}
WAITING_JOB: dict[RuntimeState, str] = {
    S.READY: "hand over",
    S.EXITED: "refuse",
    S.NOT_STARTED: "refuse",
}


class Submission(str, Enum):
    STARTED = "started"    # handed to a warm process
    WAITING = "waiting"    # starts by itself once the process warming for it is ready
    REFUSED = "refused"    # the reason was published (ProblemNotice)

    def __str__(self) -> str:
        return self.value


SPARE, DESCRIBE = "spare", "describe"


STOP_BY_WINDOW = "Stop in the window"  # who cancels when the caller does not say (the window's Stop)


class RunManager:
    """Owns the run lifecycle: the spare pool, the run in progress and its record, the restart policies."""

    def __init__(self, history: RunHistory | None = None, *, spares: int = 1, describe: bool | None = None,
                 process_factory: ProcessFactory = runtime_process,
                 cancel_grace_s: float = CANCEL_GRACE_S, stop_timeout_s: float = STOP_TIMEOUT_S,
                 session: Session | None = None, event_sink: Callable[[Event], None] | None = None):
        """`event_sink`: who takes every event kept, in order (the window's event pump, the CLI's printer)."""
        if spares not in (0, 1):
            raise ValueError(f"spares: a pool of 0 or 1 warm processes, not {spares}")
        self.history = history
        self.spares = spares
        if spares:
            zygote.start_zygotes()  # a pool's next spares fork from it, warm in milliseconds
            # A zygote that died: the window says so (its runs go on). The zygotes' hub lives as long as the
            # process: it holds the manager weakly, and the subscription ends at `shutdown` or with the manager.
            manager = weakref.ref(self)

            def tell(died: zygote.ZygoteDied) -> None:
                alive = manager()
                if alive is not None:
                    alive._zygote_news(died)

            self._zygote_subscription: Subscription | None = zygote.hub.subscribe(manager, zygote.ZygoteDied, tell)
            weakref.finalize(self, self._zygote_subscription)
        else:
            self._zygote_subscription = None
        self.describe_devices = spares > 0 if describe is None else describe
        self.process_factory = process_factory
        # How long a cancelled job may take to stop before its process is killed, and how long a process may
        # take to stop; settable so that tests need not wait out the defaults.
        self.cancel_grace_s = cancel_grace_s
        self.stop_timeout_s = stop_timeout_s
        # The run's events go to one sink, not through the session: a run can make 100,000 placement events,
        # and the window's pump batches them (a message per event, handed to every subscription, would cost).
        self.event_sink = event_sink
        # The state, the spare, the applied configuration, its devices and the waiting job are the session's
        # (the properties below): the manager decides them, the session holds them and tells who watches.
        self.session = session if session is not None else Session()
        self.lifecycle = Lifecycle("run manager", TRANSITIONS, self.session.manager_state)
        self.descriptions = DeviceDescriptions()  # the devices each configuration made, as this manager saw them
        self.current: ProcessHandle | None = None     # the process of the last job handed over
        self.describer: ProcessHandle | None = None
        self.job_run: JobRun | None = None
        self.start_problem: str | None = None  # why the last process could not be started at all
        self._lock = threading.RLock()
        self._outbox = threading.local()  # each thread's news, gathered under the lock, told once it is released
        self._shut_down = False  # no process starts after `shutdown`, whatever was queued before it
        self._retired: list[threading.Thread] = []
        self._generation = 0
        self._warm: weakref.WeakSet[ProcessHandle] = weakref.WeakSet()  # processes whose `warm` event was taken
        self._home = threading.current_thread()  # its processes live as long as it: started here, or
        self._starter = ProcessStarter()          # on the starter's thread when asked from a reader thread

    # -- the session's fields, as the manager writes them -----------------------------------------
    @property
    def state(self) -> RuntimeState:
        return self.session.manager_state

    @property
    def spare(self) -> ProcessHandle | None:
        """Warm (or warming) for the applied configuration."""
        return self.session.spare

    @spare.setter
    def spare(self, process: ProcessHandle | None) -> None:
        self._put("spare", process)

    @property
    def applied(self) -> DeviceConfig | None:
        return self.session.applied

    @applied.setter
    def applied(self, config: DeviceConfig | None) -> None:
        self._put("applied", config)

    @property
    def devices(self) -> events.Ready | None:
        """The applied configuration's devices, once known."""
        return self.session.ready

    @devices.setter
    def devices(self, ready: events.Ready | None) -> None:
        self._put("ready", ready)

    @property
    def pending(self) -> PendingRun | None:
        return self.session.pending

    @pending.setter
    def pending(self, pending: PendingRun | None) -> None:
        self._put("pending", pending)

    def _put(self, name: str, value: Any) -> None:
        """A session field set under the lock; its change is told with the rest of this thread's news."""
        change = self.session.update(name, value)
        if change is not None:
            self._news().append(functools.partial(self.session.publish, change))

    # -- what the window reads -------------------------------------------------------------------

    @property
    def running(self) -> bool:
        """A job is in progress (its process may outlive its outcome by the kernel's teardown, tens of ms)."""
        return (self.current is not None and self.current.state == RuntimeState.BUSY
                and self.job_run is not None and not self.job_run.finished)

    @property
    def runtime(self) -> ProcessHandle | None:
        """The process the window describes: the run in progress, else the spare."""
        return self.current if self.running else self.spare

    @property
    def ready_info(self) -> events.Ready | None:
        """The applied configuration's devices (with the spare's pid once it is warm)."""
        if self.devices is None:
            return None
        warm = self.spare.warm if self.spare is not None else None
        return self.devices.replace(pid=warm.pid) if warm is not None else self.devices

    def status_text(self) -> str:
        """The spare's and the run's state in a few words, for the status bar (and the zygote's, when it died)."""
        text = self._status_text()
        trouble = zygote.state_text() if self.spares else None
        return f"{text}; {trouble}" if trouble else text

    def _zygote_news(self, died: zygote.ZygoteDied) -> None:
        """On the thread that reaped a zygote: the session's subscribers hear it as a problem (the window
        notifies)."""
        self._later(ProblemNotice(died.text))
        self._flush()

    def _status_text(self) -> str:
        if self.running and self.job_run is not None:
            current = self.current
            where = (" (in the panel's process; its runs are processes of their own)" if isinstance(current, ClientJob)
                     else f" (pid {current.pid if current is not None else '?'})")
            return f"running {self.job_run.outcome.job}{where}"
        spare = self.spare
        if spare is None:
            return "no runtime"
        if spare.state == RuntimeState.STARTING:
            return "spare warming…"
        if spare.state == RuntimeState.READY and spare.warm is not None:
            logical = [d["short_name"] for d in (self.devices.logical if self.devices is not None else ())]
            count = f"{len(logical)} logical device{'s' if len(logical) != 1 else ''}"
            devices = f", {count}" if logical else ", devices being listed…"
            return f"spare ready (TF {spare.warm.tf_version}{devices})"
        if spare.state == RuntimeState.EXITED and spare.exited is not None:
            if spare.startup_error is not None:
                return "spare exited: " + spare.failure_message()
            return f"spare exited: {spare.exited.description}"
        return f"spare {spare.state}"

    # -- what the window and the CLI ask ---------------------------------------------------------
    def apply(self, config: DeviceConfig) -> None:
        """A fresh spare (and device list) for `config`; the old processes are stopped in the background, a
        running job is killed. A job waiting for the old spare waits for the new one."""
        with self._lock:
            self._apply(config)
        self._flush()

    def _apply(self, config: DeviceConfig) -> None:
        self._generation += 1
        for old in (self.spare, self.describer):
            if old is not None:
                self._retire(old)
        replaced_run = self.current if self.running else None
        self.spare = self.describer = None
        self.applied = config
        self.devices = None
        self._fire(Trigger.APPLY)
        if self.describe_devices:
            cached = self.descriptions.get(config)
            if cached is not None:
                self.devices = cached[0]
                self._tell_event(cached[0])
            else:
                self.describer = self._start(DESCRIBE)
        if self.spares or (self.pending is not None and self.pending.run is not None):
            self.spare = self._start(SPARE)
        self._settle()
        if replaced_run is not None:
            replaced_run.kill(reason="replaced by a new configuration")

    def run(self, job: str, params: Mapping[str, Any]) -> Submission:
        """Hand the job to the warm spare, or, while one warms, let it wait for it (`JobQueued`)."""
        with self._lock:
            submission = self._run(job, dict(params))
            if submission == Submission.WAITING:
                self._later(JobQueued(job))
        self._flush()
        return submission

    def _run(self, job: str, params: ParamValues) -> Submission:
        refusal = f"The runtime is {self.state}; wait until it is ready, or press Apply to start one."
        if self.pending is not None or self.running:
            return self._refuse(refusal)  # one job at a time: a second is never queued behind the first
        if self.spares == 0 and self.state == RuntimeState.NOT_STARTED and self.applied is not None:
            # No pool: the run starts its own process, and its record starts with it.
            run = JobRun(job, params, self.applied, None, self.history)
            self.pending = PendingRun(job, params, run)
            self.job_run = run
            self._fire(Trigger.APPLY)
            self.spare = self._start(SPARE, in_client=runs_in_client(job))  # no TensorFlow for a client job
            self._settle()
            if self.pending is not None:
                return Submission.WAITING
            return Submission.STARTED if self.running else Submission.REFUSED
        if self.state == RuntimeState.STARTING:
            self.pending = PendingRun(job, params)
            return Submission.WAITING
        if self.state != RuntimeState.READY:
            return self._refuse(refusal)
        return Submission.STARTED if self._hand_over(job, params, None) else Submission.REFUSED

    def cancel_waiting(self, reason: str = "cancelled before the job started", *, by: str = STOP_BY_WINDOW,
                       signum: int | None = None) -> bool:
        """Forget the job waiting for a spare; a run that owns its process (no pool) kills it for `reason`.
        `by` (and `signum`): who asked, for the run's record."""
        with self._lock:
            pending = self.pending
            if pending is None:
                return False
            if pending.run is None:
                self.pending = None
            else:
                pending.cancelled = True
                pending.run.note_cancel(by, f"killed before the job started ({reason})", signum)
                if self.spare is not None:
                    self.spare.kill(reason=reason)
        self._flush()
        return True

    def cancel(self, *, by: str = STOP_BY_WINDOW, signum: int | None = None) -> bool:
        """Ctrl+C for the running job: SIGINT, then SIGTERM, then kill after `cancel_grace_s`. `by` (and
        `signum`): who asked, for the run's record."""
        with self._lock:
            process = self.current if self.running else None
            run = self.job_run
        if process is None:
            return False
        if run is not None and isinstance(process, ClientJob):
            run.note_cancel(by, "cancelled: the job stopped at its next check, its run in progress killed", signum)
        elif run is not None:
            run.note_cancel(by, f"cancelled: SIGINT to the job, SIGTERM after {self.cancel_grace_s / 2:g} s and a "
                                f"kill after {self.cancel_grace_s:g} s if it had not stopped", signum)
        process.cancel(self.cancel_grace_s)
        return True

    def kill_runtime(self, reason: str = "Runtime → Kill runtime was chosen") -> None:
        """The running job's process if there is one, else the spare."""
        with self._lock:
            target = self.current if self.running else self.spare
        if target is not None:
            target.kill(reason=reason)

    def shutdown(self, timeout: float | None = None) -> None:
        """Stop every process, wait for every helper thread: when the window closes, or the CLI leaves. The
        running job's last events still come (its record ends); a spare's and a describe run's no longer."""
        timeout = self.stop_timeout_s if timeout is None else timeout
        with self._lock:
            self._generation += 1
            self._shut_down = True
            self._fire(Trigger.SHUTDOWN)
            processes = [p for p in (self.current, self.spare, self.describer) if p is not None]
        for process in processes:
            if process.state == RuntimeState.BUSY:
                process.kill(reason="the window was closed during a run")
        for process in processes:
            process.stop(timeout)
        for thread in self._retired:
            thread.join(timeout)
        self._starter.close(timeout)
        if self._zygote_subscription is not None:
            self._zygote_subscription()
        with self._lock:
            self.current = self.spare = self.describer = None
            pending, self.pending = self.pending, None
            if pending is not None and pending.run is not None and not pending.run.finished:
                pending.run.fail("Interrupted", "the client stopped before the run ended", status="interrupted")
            self._fire(Trigger.STOPPED)
        self._flush()

    # -- news ------------------------------------------------------------------------------------
    def _news(self) -> collections.deque[Callable[[], None]]:
        """This thread's news not yet told."""
        news = getattr(self._outbox, "news", None)
        if news is None:
            news = self._outbox.news = collections.deque()
        return news

    def _later(self, message: Message) -> None:
        """Published on the session once the lock is released."""
        self._news().append(functools.partial(self.session.publish, message))

    def _flush(self) -> None:
        # One at a time from the front: a subscriber that asks the manager again (and so flushes) tells the rest in
        # their order, not after its own news.
        news = self._news()
        while news:
            news.popleft()()

    def _tell_event(self, event: Event) -> None:
        sink = self.event_sink
        if sink is not None:
            self._news().append(functools.partial(sink, event))

    def _refuse(self, message: str) -> Submission:
        self._later(ProblemNotice(message))
        return Submission.REFUSED

    # -- the state machine -----------------------------------------------------------------------
    def _fire(self, trigger: Trigger) -> None:
        before = self.session.manager_state
        self.lifecycle.state = before  # the table is walked from the session's state: it holds the one copy
        after = self.lifecycle.fire(trigger)
        if after != before:
            self._put("manager_state", after)

    def _spare_usable(self) -> bool:
        """Warm as its own event said (taken here, not only its state: the job's events must follow it)."""
        spare = self.spare
        return (spare is not None and spare in self._warm and spare.state == RuntimeState.READY
                and (self.devices is not None or not self.describe_devices))

    def _spare_condition(self) -> SpareCondition:
        spare = self.spare
        if spare is None:
            return SpareCondition.NONE
        if spare.state in (RuntimeState.EXITED, RuntimeState.STOPPING):
            return SpareCondition.GONE
        return SpareCondition.USABLE if self._spare_usable() else SpareCondition.WARMING

    def _settle(self) -> None:
        """Follow the spare (`FOLLOW_THE_SPARE`: STARTING turns READY once it is usable, EXITED when it ended,
        NOT STARTED when there is none); then the job waiting for it is handed over, or refused
        (`WAITING_JOB`)."""
        trigger = FOLLOW_THE_SPARE.get((self.state, self._spare_condition()))
        if trigger is not None:
            self._fire(trigger)
        pending = self.pending
        decision = WAITING_JOB.get(self.state) if pending is not None else None
        if pending is None or decision is None:
            return
        self.pending = None
        if decision == "hand over":
            if not self._hand_over(pending.job, pending.params, pending.run):
                self._later(WaitingRefused(pending.job, "the runtime could not take it (see the message)"))
        else:
            self._refuse_waiting(pending)

    def _refuse_waiting(self, pending: PendingRun) -> None:
        """The process a job waited for is gone: the job is not started, and says why."""
        reason = f"the runtime is {self.state}"
        run, process = pending.run, self.spare
        if run is not None and not run.finished:
            if process is not None and process.startup_error is not None:
                run.fail("ConfigRejected", process.failure_message())
            else:
                message = process.failure_message() if process is not None else (self.start_problem or reason)
                run.fail("RuntimeExited", message, status="cancelled" if pending.cancelled else "crashed")
        self._later(WaitingRefused(pending.job, reason))

    # -- processes -------------------------------------------------------------------------------
    def _start(self, role: str, *, in_client: bool = False) -> ProcessHandle | None:
        """A run process for `role`; with `in_client`, a client job instead (a job whose work is runs of the
        command line: core.client.client_job)."""
        assert self.applied is not None
        generation = self._generation
        started: list[ProcessHandle] = []  # its events come only after start(), when this holds it

        def on_event(event: Event) -> None:
            self._on_event(generation, role, started[0], event)

        process = ClientJob(self.applied, on_event=on_event) if in_client else self.process_factory(
            self.applied, on_event)
        started.append(process)
        try:
            if threading.current_thread() is self._home:
                process.start()
            else:
                self._starter.start(process.start)
        except OSError as exc:
            self.start_problem = f"Could not start a TensorFlow process: {exc}"
            self._later(ProblemNotice(self.start_problem))
            return None
        return process

    def _retire(self, process: ProcessHandle) -> None:
        thread = threading.Thread(target=process.stop, args=(self.stop_timeout_s,), name="runtime-stop",
                                  daemon=True)
        thread.start()
        self._retired.append(thread)

    def _hand_over(self, job: str, params: ParamValues, run: JobRun | None) -> bool:
        """The spare takes the job (`JobHandedOver`); the next spare starts warming at once. A client job
        (`runs_in_client`) is taken by a `ClientJob` of its own instead, and the spare stays for the next job."""
        spare = self.spare
        assert self.applied is not None and spare is not None
        beside_the_spare = self.spares > 0 and runs_in_client(job)
        if beside_the_spare:
            client = self._start(SPARE, in_client=True)
            assert client is not None  # a thread, not a process: nothing to fail to start
            spare = client
        devices = self.devices.payload() if self.devices is not None else None  # as the run's record keeps them
        run = run or JobRun(job, params, self.applied, devices, self.history)
        self.job_run = run
        previous = self.current
        leaving = previous.pid if previous is not None and previous.state != RuntimeState.EXITED else None
        # The run knows its job id before the job is handed over: its events come on the reader thread and may
        # all be in (a job that fails at once) before submit returns.
        job_id = spare.new_job_id()
        run.attach(job_id)
        self.current = spare
        try:
            spare.submit(job, params, after_pid=leaving, job_id=job_id)
        except RuntimeUnavailable as exc:
            self.current = previous
            run.fail("RuntimeUnavailable", str(exc), status="crashed" if self.spares == 0 else "error")
            self._later(ProblemNotice(str(exc)))
            return False
        self._fire(Trigger.RUN)
        if not beside_the_spare:
            self.spare = self._start(SPARE) if self.spares else None
        self._later(JobHandedOver(job))
        return True

    # -- events (on a process's reader thread) ---------------------------------------------------
    def _on_event(self, generation: int, role: str, process: ProcessHandle, event: Event) -> None:
        with self._lock:
            self._take(generation, role, process, event)
        self._flush()

    def _take(self, generation: int, role: str, process: ProcessHandle, event: Event) -> None:
        """Events of replaced processes are dropped, except a running job's own, which its record and the
        window still need."""
        current = generation == self._generation
        if isinstance(event, events.Warm):
            self._warm.add(process)
        self._record(process, event)
        if isinstance(event, events.Ready):  # a run's or a describe run's: TensorFlow's devices for this config
            self.descriptions.remember(process.config, event, process.tf_lines())
            if current:
                self.devices = event
        if role == DESCRIBE:
            self._take_description(process, event, current)
        elif process is self.current:
            self._take_from_run(process, event)
        elif current and process is self.spare:
            waited_for = self.pending is not None and self.pending.run is not None
            if waited_for or not (isinstance(event, events.RuntimeExited) and event.expected):
                self._tell_event(event)  # a spare's planned exit (replaced, stopped) is news to no one
        self._settle()  # also for a replaced run's end: the state follows the new spare then

    def _record(self, process: ProcessHandle, event: Event) -> None:
        run = self.job_run
        if run is None or run.finished:
            return
        waiting = self.pending is not None and self.pending.run is run and process is self.spare
        if waiting and isinstance(event, events.RuntimeExited):
            return  # its process ended before it took the job: `_refuse_waiting` says why
        its_own = waiting or (process is self.current and (
            event.job_id == run.job_id or isinstance(event, events.RuntimeExited)))
        if its_own and run.feed(event):
            self._job_ended(run)

    def _job_ended(self, run: JobRun) -> None:
        if self.state == RuntimeState.BUSY:
            self._fire(Trigger.JOB_ENDED)

    def _take_description(self, process: ProcessHandle, event: Event, current: bool) -> None:
        if isinstance(event, events.Warm):
            try:
                process.describe()
            except RuntimeUnavailable as exc:
                self._later(ProblemNotice(f"Could not list the devices: {exc}"))
        if not current:
            return
        if isinstance(event, events.RuntimeExited) and self.devices is None and process.startup_error is None:
            # Without the list, runs still work: their own `ready` brings the devices.
            self.devices = process.warm.as_ready() if process.warm is not None else events.Ready()
            self._later(ProblemNotice(f"Could not list the devices: {process.failure_message()}"))
            self._tell_event(self.devices)  # what is known of them, and with it the state it settles into
        elif isinstance(event, events.Ready):
            self._tell_event(event)

    def _take_from_run(self, process: ProcessHandle, event: Event) -> None:
        if not (isinstance(event, events.RuntimeExited) and event.killed_for_cancel):
            self._tell_event(event)
            return
        # Stop had to kill the run's process: the job's outcome says so. Like a notebook kernel, the
        # configuration comes back by itself: the spare is already there, else a fresh one starts (after the
        # kill was told, so a window closing on it starts nothing).
        self._tell_event(event.replace(expected=True))
        if self.spares and self.applied is not None:
            self._news().append(functools.partial(self._restart_after_kill, self.applied))

    def _restart_after_kill(self, config: DeviceConfig) -> None:
        """A fresh spare with `config` if none is warm and nothing changed meanwhile: decided under the lock, so
        a window closed (or a configuration applied) since the kill wins."""
        with self._lock:
            spare = self.spare
            if self._shut_down or config is not self.applied or (
                    spare is not None and spare.state != RuntimeState.EXITED):
                return
            self._apply(config)
        self._flush()


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def run_job_once(config: DeviceConfig, job: str, params: Mapping[str, Any], *,
                 on_event: Callable[[Event], None] | None = None, history: RunHistory | None = None,
                 cancel: threading.Event | None = None, grace_s: float = CANCEL_GRACE_S,
                 ready_timeout_s: float = 180.0, process_factory: ProcessFactory = runtime_process) -> JobOutcome:
    """The CLI's run: a `RunManager` with no spare pool starts a process with `config`, hands it the job once it
    is warm, and waits for the process to exit.

    Events are handled on the reader thread as they are read (printed, recorded), so a slow consumer
    slows the job's writes instead of piling them up. Ctrl+C, SIGTERM and SIGHUP (on the main thread) and
    `cancel` cancel the job; a second one kills it. The run record always ends with a final status.
    """
    gone = threading.Event()  # the run's process has exited (its last event is in)

    def told(event: Event) -> None:
        try:
            if on_event is not None:
                on_event(event)
        finally:
            if isinstance(event, events.RuntimeExited):
                gone.set()  # whatever `on_event` did, the loop below must learn that the run ended

    manager = RunManager(history, spares=0, process_factory=process_factory, cancel_grace_s=grace_s,
                         event_sink=told)
    signals: list[int] = []
    previous = _note_stop_signals(signals)  # before the process starts: a stop from now on is acted on
    started = time.monotonic()
    acted_on = 0
    killed_at: float | None = None
    try:
        manager.apply(config)
        manager.run(job, params)
        run = manager.job_run
        assert run is not None  # with no pool, the run exists from the request
        while not gone.wait(0.05):
            if run.finished and manager.current is None and manager.spare is None:
                break  # its process could not even be started: nothing will exit
            wanted = len(signals) + (1 if cancel is not None and cancel.is_set() else 0)
            if wanted > acted_on:
                acted_on = wanted
                signum = signals[0] if signals else None  # the first to ask is who stopped the run
                by = STOP_BY_SIGNAL.get(signum or 0, STOP_BY_CANCEL)
                if _stop(manager, twice=acted_on >= 2, by=by, signum=signum):
                    killed_at = killed_at or time.monotonic()
            if killed_at is not None and time.monotonic() - killed_at > grace_s:
                break  # the reader is stuck (e.g. on a terminal that takes no output): never hang on it
            if manager.pending is not None and time.monotonic() - started > ready_timeout_s:
                manager.kill_runtime(reason=f"not ready after {ready_timeout_s:.0f} s")
    finally:
        if not gone.is_set():
            manager.kill_runtime(reason="the client is leaving")
        manager.shutdown()
        for stop_signal, handler in previous.items():
            with contextlib.suppress(ValueError, TypeError):
                signal.signal(stop_signal, handler)
        run = manager.job_run
        if run is not None and not run.finished:
            run.fail("Interrupted", "the client stopped before the run ended", status="interrupted")
    assert run is not None
    return run.outcome


def _note_stop_signals(signals: list[int]) -> dict[int, Any]:
    """On the main thread, Ctrl+C, SIGTERM and SIGHUP are only noted in `signals`: the run's loop acts on
    them, so no lock is ever held when one lands. Returns the handlers they replaced."""
    previous: dict[int, Any] = {}
    if threading.current_thread() is threading.main_thread():
        for signum in STOP_SIGNALS:
            previous[signum] = signal.signal(signum, lambda signum, _frame: signals.append(signum))
    return previous


STOP_BY_SIGNAL: dict[int, str] = {
    signal.SIGINT: "Ctrl+C (SIGINT) to the command line", signal.SIGTERM: "SIGTERM to the command line",
    signal.SIGHUP: "SIGHUP to the command line (its terminal or session ended)"}
STOP_BY_CANCEL = "the command line's own cancel (its stdout was closed, e.g. `run … | head`)"


def _stop(manager: RunManager, *, twice: bool, by: str, signum: int | None) -> bool:
    """A stop request: the first cancels the job (Ctrl+C), a second kills it; a job not yet handed over is
    never started (its process is killed). `by`, `signum`: who asked, for the record. True when a process
    was killed."""
    reason = "interrupted twice" if twice else "cancelled before the job started"
    if manager.cancel_waiting(reason, by=by, signum=signum):
        return True
    if twice:
        run = manager.job_run
        if run is not None:
            run.note_cancel(by, "killed: stopped a second time", signum)
        manager.kill_runtime(reason)
        return True
    manager.cancel(by=by, signum=signum)
    return False
