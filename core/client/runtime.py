"""Client side of a run process: start it warm, hand it one job (or a describe request), receive its events.

A `RuntimeProcess` is one process, used once. `start()` launches `core.runproc.supervisor`, which starts
`core.runproc.runtime_main` below it: TensorFlow imported and configured, not initialized (state READY once its
`warm` event has come: a warm spare). `submit` hands it a job; the process initializes TensorFlow, runs
the job on its main thread and exits with the job's status. `describe` asks only for the devices.

One reader thread watches five pipes with raw `os.read`: the events pipe, the process's stdout and stderr,
where TensorFlow's C++ code prints (placement lines among them), and a user's script's own fds 1 and 2
(`core.protocol.streams.SCRIPT_STDOUT`, `SCRIPT_STDERR`: copied byte for byte, never taken for TensorFlow's).
What it reads goes to a
`core.protocol.streams.StreamDemux`, which makes `log` and `placement` events of output lines. Whatever the process
printed before an event is read before that event is delivered, and the job's closing events are delivered
only once every pipe has reached end of file: the process has flushed everything, run its atexit handlers,
said the status it exits with (`exiting`) and closed them (the state turns EXITED a moment later, when the
kernel has torn the process down and the supervisor has ended its leftovers). The reader calls
`on_event` synchronously: a consumer that falls behind makes the process's writes wait, as a terminal does.

Cancel is what Ctrl+C does in a terminal: SIGINT (KeyboardInterrupt in the job's main thread), then
SIGTERM, then, after the grace period, the supervisor ends the process and everything it started.
"""

from __future__ import annotations

import array
import atexit
import contextlib
import fcntl
import itertools
import json
import logging
import os
import selectors
import signal
import subprocess
import sys
import termios
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Mapping
from enum import Enum
from typing import Any

from tf_device_panel.core.client import wording, zygote
from tf_device_panel.core.config import DeviceConfig
from tf_device_panel.core.devices.gpus import created_gpu
from tf_device_panel.core.logsetup import RepeatedFailureLog
from tf_device_panel.core.processes import child_environment, start_module
from tf_device_panel.core.protocol import events, output_lines
from tf_device_panel.core.protocol.environment import PANEL_ENVIRONMENT, USER_ENVIRONMENT_ENV
from tf_device_panel.core.protocol.events import Event
from tf_device_panel.core.protocol.streams import EVENTS, SCRIPT_STDERR, SCRIPT_STDOUT, STDERR, STDOUT, StreamDemux


class RuntimeState(str, Enum):
    """Where a run process, or the run manager, is in its life (the value is how the window says it)."""

    NOT_STARTED = "not started"
    STARTING = "starting"   # TensorFlow being imported and configured (a spare warming)
    READY = "ready"         # warm: takes one job (or one describe request)
    BUSY = "busy"           # running its job
    STOPPING = "stopping"   # asked to leave
    EXITED = "exited"

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)


NOT_STARTED, STARTING, READY, BUSY, STOPPING, EXITED = RuntimeState


class IllegalTransition(RuntimeError):
    """A lifecycle was asked to move where its transition table does not go: a bug, said loudly."""


class Lifecycle:
    """A state and the only moves it may make: `fire(trigger)` follows `transitions[(state, trigger)]`.

    Not thread-safe by itself: its owner holds its own lock around `fire`."""

    def __init__(self, name: str, transitions: Mapping[tuple[RuntimeState, str], RuntimeState],
                 state: RuntimeState = RuntimeState.NOT_STARTED):
        self.name = name
        self.transitions = transitions
        self.state = state

    def fire(self, trigger: str) -> RuntimeState:
        try:
            self.state = self.transitions[(self.state, trigger)]
        except KeyError:
            raise IllegalTransition(f"{self.name}: no transition from '{self.state}' on '{trigger}'") from None
        return self.state


# One run process's life: started, warm, one job (or one describe request), gone.
PROCESS_TRANSITIONS: dict[tuple[RuntimeState, str], RuntimeState] = {
    (NOT_STARTED, "start"): STARTING,
    (STARTING, "warm"): READY,
    (READY, "submit"): BUSY,
    (READY, "describe"): BUSY,
    (READY, "stop"): STOPPING,       # a spare leaves quietly once its command pipe closes
    (BUSY, "stop"): STOPPING,        # a describe run asked to leave (a running job is killed instead)
    (STOPPING, "stop"): STOPPING,
    **{(state, "exit"): EXITED for state in (STARTING, READY, BUSY, STOPPING)},
}

LAST_LINES = 40
READ_SIZE = 65536
COALESCE_BELOW = 4096   # a read of the job's output smaller than this ...
COALESCE_S = 0.001      # ... lets the next lines gather this long before the next read
PIPES_AFTER_EXIT_S = 1.0   # how long output pipes may stay open after the supervisor exited (they should not)

log = logging.getLogger(__name__)

_live: weakref.WeakSet[RuntimeProcess] = weakref.WeakSet()


@atexit.register
def _kill_all_runtimes() -> None:
    for runtime in list(_live):
        runtime.kill()


class RuntimeUnavailable(RuntimeError):
    """The process cannot take this request now (not warm yet, already used, or exited)."""


class TensorFlowMissing(RuntimeUnavailable):
    """The run's Python has no TensorFlow: the message says which Python, and how to install it."""


class ConfigurationRejected(RuntimeUnavailable):
    """TensorFlow refused the configuration when the run process applied it (the message says where and why)."""


def describe_exit(returncode: int | None, killed_because: str | None = None) -> str:
    """How a process ended, in words; `killed_because` is the reason when the client killed it on purpose."""
    if killed_because and returncode is not None and returncode < 0:
        return f"was killed: {killed_because}"
    if returncode is None:
        return "still running"
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        hint = " (killed: out of memory, or stopped by force)" if -returncode == signal.SIGKILL else ""
        return f"killed by {name}{hint}"
    return f"exited with code {returncode}"


def shell_status(returncode: int) -> int:
    """A process's exit status as a shell reports it: 128 + N for death by signal N."""
    return 128 - returncode if returncode < 0 else returncode


def _available(fd: int) -> int:
    """Bytes waiting in a pipe right now."""
    count = array.array("i", [0])
    try:
        fcntl.ioctl(fd, termios.FIONREAD, count, True)
    except OSError:
        return 0
    return count[0]


class RunPipes:
    """The pipes between the panel and one run process: its events, the panel's commands, and a user's script's
    own stdout and stderr (one pipe when the run asks for them together)."""

    def __init__(self, streams_together: bool):
        self.events_r, self.events_w = os.pipe()
        self.commands_r, self.commands_w = os.pipe()
        self.script_out_r, self.script_out_w = os.pipe()  # a script's own fd 1 (core.protocol.streams.SCRIPT_STDOUT)
        self.script_err_r, self.script_err_w = ((self.script_out_r, self.script_out_w) if streams_together
                                                else os.pipe())
        self._closed: set[int] = set()

    @property
    def passed(self) -> tuple[int, ...]:
        """The run's ends, passed to its supervisor under the same numbers."""
        return (self.events_w, self.commands_r, *sorted({self.script_out_w, self.script_err_w}))

    def close_passed(self) -> None:
        """The run's ends, once its supervisor holds them."""
        self._close(set(self.passed))

    def close(self) -> None:
        """Every end: a run that holds the other ends gets end of file on its commands."""
        self._close({*self.passed, self.events_r, self.commands_w, self.script_out_r, self.script_err_r})

    def _close(self, fds: set[int]) -> None:
        for fd in fds - self._closed:
            os.close(fd)
        self._closed |= fds


class RuntimeProcess:
    """One run process, configured once, used for one job (or one describe request), then gone.

    `on_event` is called on the reader thread for every event, in order. Without it, events are
    queued and read with `next_event`.
    """

    _ids = itertools.count(1)

    def __init__(self, config: DeviceConfig, *, on_event: Callable[[Event], None] | None = None,
                 python: str | None = None, env: Mapping[str, str] | None = None,
                 script_streams_together: bool = False):
        """`script_streams_together`: a user's script gets one pipe as both its fd 1 and its fd 2 (read as its
        stdout), as a bare run into one file or terminal has them: its writes to either keep their order."""
        self.config = config
        self.script_streams_together = script_streams_together
        self.python = python or sys.executable
        self.extra_env = dict(env or {})
        self.lifecycle = Lifecycle(f"run process of {config.summary()}", PROCESS_TRANSITIONS)
        self.warm: events.Warm | None = None      # TF version, build, physical devices: no initialization
        self.ready: events.Ready | None = None    # after initialization: the logical devices too
        self.startup_error: events.StartupError | None = None
        self.exited: events.RuntimeExited | None = None  # how it ended, once it has
        self.running_job: str | None = None
        self.job_name: str | None = None
        self._last_lines: deque[str] = deque(maxlen=LAST_LINES)  # appended by the reader thread
        self._last_lines_lock = threading.Lock()
        # TensorFlow's own lines: start-up output before any job, and its C++ log (never a job's own prints)
        self._tf_lines: deque[str] = deque(maxlen=LAST_LINES)
        self.tf_gpus: list[events.CreatedGpu] = []  # from TF's "Created device" lines: logical GPU -> bus id
        self._on_event = on_event
        self._listener_failures = RepeatedFailureLog(log)
        self._queue: deque[Event] = deque()
        self._queue_ready = threading.Condition()
        self._state_changed = threading.Condition()
        self._process: subprocess.Popen[bytes] | zygote.ForkedProcess | None = None
        self._commands_fd: int | None = None
        self._reader: threading.Thread | None = None
        self._stop_requested = False
        self._cancel_requested = False
        self._killed_reason: str | None = None
        self._killed_for_cancel = False
        self._write_lock = threading.Lock()
        self._timers: list[threading.Timer] = []
        self._announced_status: int | None = None  # the exit status the run process said it leaves with

    def recent_lines(self) -> list[str]:
        """The process's last output lines (a copy: the reader thread keeps appending)."""
        with self._last_lines_lock:
            return list(self._last_lines)

    def tf_lines(self) -> list[str]:
        """TensorFlow's own last lines: what the process printed while no job ran, and TensorFlow's C++ log
        lines. Where the Devices panel finds TensorFlow's reason for seeing no GPU: a job's own output (a TF1
        session job prints "session ConfigProto: … gpu_options …") is never taken for it."""
        with self._last_lines_lock:
            return list(self._tf_lines)

    # -- lifecycle ---------------------------------------------------------------------------
    @property
    def state(self) -> RuntimeState:
        return self.lifecycle.state

    @property
    def pid(self) -> int | None:
        """The run process (where TensorFlow runs) once it is warm; its supervisor before."""
        if self.warm is not None and self.warm.pid is not None:
            return self.warm.pid
        return self._process.pid if self._process else None

    @property
    def forked(self) -> bool:
        """Forked from the zygote (TensorFlow imported there), not started by hand."""
        return isinstance(self._process, zygote.ForkedProcess)

    @property
    def supervisor_pid(self) -> int | None:
        return self._process.pid if self._process else None

    def start(self) -> None:
        if self._process is not None:
            raise RuntimeUnavailable("this process was already started; create a new one")
        self._fire("start")
        pipes = RunPipes(self.script_streams_together)
        try:
            # Forked from the zygote when one is ready for this environment (TensorFlow imported already);
            # else started by hand, importing TensorFlow itself.
            env, supervisor_args = self._launch(pipes)
            self._process = zygote.spawn(self.python, child_environment(env), supervisor_args, pipes.passed)
            if self._process is None:
                # A zygote that answered too late may have forked a supervisor on these pipes all the same: the
                # one started by hand gets pipes of its own, and the late fork finds its commands pipe at end of
                # file (and its events pipe unread) and ends without running anything.
                pipes.close()
                pipes = RunPipes(self.script_streams_together)
                env, supervisor_args = self._launch(pipes)
                # Its own session: Ctrl+C in a terminal goes to the client, which cancels on purpose.
                self._process = start_module("tf_device_panel.core.runproc.supervisor", *supervisor_args,
                                             python=self.python, env=env, die_with_parent=True,
                                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, pass_fds=pipes.passed)
        except OSError:
            pipes.close()
            self._fire("exit")
            raise
        pipes.close_passed()
        events_r, commands_w, script_out_r, script_err_r = (pipes.events_r, pipes.commands_w, pipes.script_out_r,
                                                            pipes.script_err_r)
        self._commands_fd = commands_w
        # The configuration goes to the run process straight, the first line on its commands pipe (the zygote and
        # the supervisor that fork it never carry it). A process already dead leaves the pipe unread: its exit is
        # what the reader reports.
        with contextlib.suppress(RuntimeUnavailable):
            self._send({"cmd": "configure", "config": self.config.to_json()})
        _live.add(self)
        log.debug("supervisor pid %d started with %s", self._process.pid, self.config.summary())
        assert self._process.stdout is not None and self._process.stderr is not None
        self._reader = threading.Thread(
            target=self._read_loop, name=f"runtime-reader-{self._process.pid}", daemon=True,
            args=(events_r, self._process.stdout.fileno(), self._process.stderr.fileno(), script_out_r, script_err_r))
        self._reader.start()

    def _launch(self, pipes: RunPipes) -> tuple[dict[str, str], list[str]]:
        """The supervisor's environment and arguments for a run on `pipes`."""
        env = {**self.config.environment(),
               "TF_CPP_MIN_LOG_LEVEL": "0",  # placement lines are INFO-level C++ logs
               "TF_DEVICE_PANEL_PASS_FDS": ",".join(str(fd) for fd in pipes.passed),
               # What the panel changed in the environment, so a script sees the user's own (runtime_main).
               USER_ENVIRONMENT_ENV: json.dumps({name: os.environ.get(name) for name in PANEL_ENVIRONMENT}),
               **self.extra_env}
        run_args = ["--events-fd", str(pipes.events_w), "--commands-fd", str(pipes.commands_r),
                    "--script-stdout-fd", str(pipes.script_out_w), "--script-stderr-fd", str(pipes.script_err_w)]
        return env, ["--module", "tf_device_panel.core.runproc.runtime_main", *run_args]

    def wait_ready(self, timeout: float = 120.0) -> events.Warm:
        """Block until warm; raises RuntimeUnavailable with TF's message if the process did not get there."""
        deadline = time.monotonic() + timeout
        with self._state_changed:
            while self.state == STARTING:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise RuntimeUnavailable(f"the runtime did not become ready within {timeout:.0f} s")
                self._state_changed.wait(left)
        if self.warm is None:
            raise self.unavailable()
        return self.warm

    def unavailable(self) -> RuntimeUnavailable:
        """Why this process cannot run anything, as the exception to raise: TensorFlowMissing (no TensorFlow),
        ConfigurationRejected (TensorFlow refused the configuration), else RuntimeUnavailable."""
        if self.startup_error is not None:
            missing = self.startup_error.not_installed
            return (TensorFlowMissing if missing else ConfigurationRejected)(self.failure_message())
        return RuntimeUnavailable(self.failure_message())

    def wait_exited(self, timeout: float | None = None) -> bool:
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._state_changed:
            while self.state != EXITED:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._state_changed.wait(left)
        return True

    def failure_message(self) -> str:
        if self.startup_error is not None:
            return wording.startup_error(self.startup_error)
        if self.exited is not None:
            tail = "\n".join(self.exited.last_lines[-8:])
            return f"the runtime {self.exited.description}" + (f"; last output:\n{tail}" if tail else "")
        return "the runtime is not ready"

    @classmethod
    def new_job_id(cls) -> str:
        return f"{os.getpid()}-{next(cls._ids)}-{int(time.time() * 1000) % 100000}"

    def submit(self, job: str, params: Mapping[str, Any] | None = None, *, after_pid: int | None = None,
               job_id: str | None = None) -> str:
        """Hand the job to this warm process; returns its job id. A process takes one job only.

        `after_pid`: the previous run's process, whose outcome is in but which may still be exiting; this run
        initializes TensorFlow only once that one has exited (two never hold a GPU at once). `job_id`: one made
        beforehand with `new_job_id`, for a caller that must know it before the job's first event can arrive."""
        with self._state_changed:
            if self.state != READY:
                raise RuntimeUnavailable(f"the runtime is {self.state}; it can take a job only when ready")
            job_id = job_id or self.new_job_id()
            self.running_job = job_id
            self.job_name = job
            self.lifecycle.fire("submit")
            self._state_changed.notify_all()
        self._send({"cmd": "run", "job_id": job_id, "job": job, "params": dict(params or {}), "after_pid": after_pid})
        return job_id

    def describe(self) -> None:
        """Ask this warm process to initialize TensorFlow, report the devices (`ready`) and exit."""
        with self._state_changed:
            if self.state != READY:
                raise RuntimeUnavailable(f"the runtime is {self.state}; it can describe only when ready")
            self.lifecycle.fire("describe")
            self._state_changed.notify_all()
        self._send({"cmd": "describe"})

    def cancel(self, grace: float = 5.0) -> None:
        """Ctrl+C for the job: SIGINT now, SIGTERM at half the grace period, everything killed at its end."""
        job_id = self.running_job
        if job_id is None or self._process is None:
            return
        self._cancel_requested = True
        self._signal(signal.SIGINT)

        def terminate() -> None:
            if self.running_job == job_id and self.state == BUSY:
                self._signal(signal.SIGTERM)

        def enforce() -> None:
            if self.running_job == job_id and self.state == BUSY:
                self._killed_for_cancel = True
                self.kill(reason=f"the job did not stop within {grace:g} s of being cancelled")

        for delay, action in ((grace / 2, terminate), (grace, enforce)):
            timer = threading.Timer(delay, action)
            timer.daemon = True
            timer.start()
            self._timers.append(timer)

    def stop(self, timeout: float = 5.0) -> None:
        """End the process: a spare leaves quietly when its command pipe closes; a running job is killed."""
        process = self._process
        if process is None or process.poll() is not None:
            self._join_reader(timeout)
            return
        self._stop_requested = True
        if self.state == BUSY and self.running_job is not None:
            self.kill(reason="stopped while the job was running")
        elif self.state == STARTING:
            self.kill()  # no need to let it finish importing TensorFlow first
        elif self.state != EXITED:
            self._fire("stop")
        self._close_commands()
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill(reason=f"it did not stop within {timeout:g} s of being asked to")
        self._join_reader(timeout)

    def kill(self, reason: str | None = None) -> None:
        """End the process and everything it started, at once (the supervisor does it: SIGHUP)."""
        process = self._process
        if process is None or process.poll() is not None:
            return
        if reason and self._killed_reason is None:
            self._killed_reason = reason
        log.info("killing run process under supervisor %d: %s", process.pid, reason or "asked to")
        self._signal(signal.SIGHUP)

        def by_force() -> None:
            # A supervisor that did not end everything in time: its process group, run process included.
            if process.poll() is None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(process.pid, signal.SIGKILL)

        timer = threading.Timer(3.0, by_force)
        timer.daemon = True
        timer.start()
        self._timers.append(timer)

    def _signal(self, sig: int) -> None:
        process = self._process
        if process is not None and process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                process.send_signal(sig)

    def __enter__(self) -> RuntimeProcess:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- events ------------------------------------------------------------------------------
    def next_event(self, timeout: float | None = None) -> Event | None:
        """The next queued event (only when no `on_event` callback was given), or None on timeout."""
        with self._queue_ready:
            if not self._queue:
                self._queue_ready.wait(timeout)
            return self._queue.popleft() if self._queue else None

    def _deliver(self, event: Event) -> None:
        if isinstance(event, events.Exiting):  # for _finish, not for listeners
            self._announced_status = event.status
            return
        match event:
            case events.Warm():
                self.warm = event
                with self._state_changed:
                    if self.state == STARTING:  # not one already being stopped
                        self.lifecycle.fire("warm")
                    self._state_changed.notify_all()
            case events.Ready():
                event = self.ready = event.replace(gpu_devices=tuple(self.tf_gpus))
            case events.StartupError():
                self.startup_error = event
        if self._on_event is not None:
            try:
                self._on_event(event)
            except Exception as exc:  # a listener's bug must not stop the event stream
                self._listener_failures.failed(f"the event listener, on a {event.type} event", exc)
        else:
            with self._queue_ready:
                self._queue.append(event)
                self._queue_ready.notify_all()

    def _fire(self, trigger: str) -> None:
        with self._state_changed:
            self.lifecycle.fire(trigger)
            self._state_changed.notify_all()

    def _send(self, command: dict[str, Any]) -> None:
        fd = self._commands_fd
        if fd is None:
            raise RuntimeUnavailable("the runtime is not running")
        data = (json.dumps(command) + "\n").encode()
        with self._write_lock:
            try:
                os.write(fd, data)
            except OSError as exc:
                raise RuntimeUnavailable(f"the runtime is not listening ({exc.strerror})") from None

    def _close_commands(self) -> None:
        with self._write_lock:
            fd, self._commands_fd = self._commands_fd, None
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)

    def _join_reader(self, timeout: float) -> None:
        if self._reader is not None and self._reader is not threading.current_thread():
            self._reader.join(timeout)

    # -- the reader thread -------------------------------------------------------------------
    def _read_loop(self, events_fd: int, stdout_fd: int, stderr_fd: int, script_out_fd: int,
                   script_err_fd: int) -> None:
        streams = {events_fd: EVENTS, stdout_fd: STDOUT, stderr_fd: STDERR, script_err_fd: SCRIPT_STDERR,
                   script_out_fd: SCRIPT_STDOUT}  # one pipe for both (streams together): the script's stdout
        demux = StreamDemux(self._deliver, job_id=lambda: self.running_job, on_line=self._remember_line)
        selector = selectors.DefaultSelector()
        for fd in streams:
            selector.register(fd, selectors.EVENT_READ)
        open_fds = set(streams)

        small_output = False  # the last read took a little of the job's output

        def read(fd: int, size: int = READ_SIZE) -> None:
            nonlocal small_output
            try:
                chunk = os.read(fd, size)
            except OSError:
                chunk = b""
            if chunk:
                small_output = fd != events_fd and len(chunk) < COALESCE_BELOW
                demux.feed(streams[fd], chunk)
            else:
                selector.unregister(fd)
                open_fds.discard(fd)
                demux.close(streams[fd])

        exited_at: float | None = None
        try:
            while open_fds:
                if small_output:
                    # A job printing line by line (a terminal's line buffering, PYTHONUNBUFFERED) would wake this
                    # thread for every line, and each wake-up makes its next write dearer: let a few lines
                    # gather. Output reaches the window a millisecond later; events are never held.
                    small_output = False
                    time.sleep(COALESCE_S)
                ready = [int(key.fd) for key, _ in selector.select(timeout=0.1)]
                # Events first, alone, and the output pipes are drained for each; the others are read on the
                # next turn, as they are then (one read now could block on a pipe that draining emptied).
                for fd in [events_fd] if events_fd in ready else ready:
                    if fd not in open_fds:
                        continue
                    if fd == events_fd:
                        # What TensorFlow printed before this event was written is already in the output pipes:
                        # read it first, so every line comes before the events that follow it. (A script's own
                        # pipes need not: the run writes an event only once they have been read.)
                        for output_fd in (stdout_fd, stderr_fd):
                            waiting = _available(output_fd) if output_fd in open_fds else 0
                            while waiting > 0 and output_fd in open_fds:
                                read(output_fd, min(waiting, READ_SIZE))
                                waiting -= READ_SIZE
                    read(fd)
                process = self._process
                if process is not None and process.poll() is not None:
                    # Every descendant is gone with the supervisor, so the pipes close; never wait for ever.
                    exited_at = exited_at or time.monotonic()
                    if time.monotonic() - exited_at > PIPES_AFTER_EXIT_S:
                        break
        finally:
            for fd in list(open_fds):
                selector.unregister(fd)
                demux.close(streams[fd])
            selector.close()
            for fd in {events_fd, script_out_fd, script_err_fd}:
                os.close(fd)
            self._finish(demux.closing)

    def _remember_line(self, line: str) -> None:
        with self._last_lines_lock:
            self._last_lines.append(line)
            if self.running_job is None or output_lines.is_tensorflow_log(line):
                self._tf_lines.append(line)
        if self.ready is None and "Created device" in line:
            created = created_gpu(line)
            if created is not None:
                self.tf_gpus.append(created)

    def _finish(self, closing: list[Event]) -> None:
        """Every pipe is closed: hand on the job's outcome, reap the process, say how it ended (EXITED)."""
        process = self._process
        assert process is not None
        job_id = self.running_job
        finished = any(isinstance(e, events.JobFinished) and e.job_id == job_id for e in closing)
        if job_id is not None and finished and self._announced_status is not None and self._killed_reason is None:
            # The run said its exit status and closed its pipes: its outcome is complete. Hand it on now; the
            # kernel's teardown of TensorFlow's memory is still waited for below before the process counts as
            # gone (the window's next run waits for that, so two runs never hold a GPU at once).
            self._close_job(job_id, closing, self._announced_status)
            job_id = None
        returncode = self._reap(process)
        exited = self._exit_event(returncode, job_finished=finished)
        if job_id is not None:
            if not finished:  # killed, crashed, os._exit: the closing events it never sent
                closing = [e for e in closing if e.job_id == job_id] + self._closing_for(job_id, returncode,
                                                                                          exited.description)
            self._close_job(job_id, closing, returncode)
        self.running_job = None
        _live.discard(self)
        self.exited = exited
        self._fire("exit")
        self._deliver(exited)

    def _reap(self, process: subprocess.Popen[bytes] | zygote.ForkedProcess) -> int:
        """Wait for the supervisor (and so everything under it) to be gone; release what it held. Its status."""
        try:
            returncode = process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, signal.SIGKILL)
            returncode = process.wait()
        for timer in self._timers:
            timer.cancel()
        for handle in (process.stdout, process.stderr):
            with contextlib.suppress(OSError):
                if handle is not None:
                    handle.close()
        self._close_commands()
        return returncode

    def _exit_event(self, returncode: int, *, job_finished: bool) -> events.RuntimeExited:
        """How the process ended; `expected` when nobody need be told it died (its job ended, it was stopped)."""
        expected = self._killed_reason is None and (
            job_finished or (self.running_job is None and (self._stop_requested or returncode == 0)))
        return events.RuntimeExited(
            returncode=returncode, signal=signal.Signals(-returncode).name if returncode < 0 else None,
            description=describe_exit(returncode, self._killed_reason), expected=expected,
            last_lines=tuple(self.recent_lines()), killed_for_cancel=self._killed_for_cancel)

    def _close_job(self, job_id: str, closing: list[Event], returncode: int) -> None:
        for event in closing:
            if event.job_id != job_id:
                continue
            if isinstance(event, events.JobFinished):
                event = event.replace(returncode=returncode)
            self._deliver(event)

    def _closing_for(self, job_id: str, returncode: int, description: str) -> list[Event]:
        """The closing events of a job whose process ended without sending them (killed, crashed, os._exit)."""
        last_lines = tuple(self.recent_lines()[-12:])
        error: events.Error | None
        if self._killed_reason is not None:
            status = "cancelled"
            error = events.Error(error_type="RuntimeExited", last_lines=last_lines, job_id=job_id,
                                 message=f"the runtime was killed while the job was running: {self._killed_reason}")
        elif returncode == 0:
            status, error = "ok", None  # os._exit(0): a bare run would call that success too
        elif self._cancel_requested and -returncode in (signal.SIGINT, signal.SIGTERM):
            status, error = "cancelled", events.Error(error_type="Cancelled", message="cancelled by the user",
                                                      job_id=job_id)
        else:
            status = "crashed"
            error = events.Error(error_type="RuntimeExited", last_lines=last_lines, job_id=job_id,
                                 message=f"the runtime {description} while the job was running")
        finished = events.JobFinished(job=self.job_name or "", status=status, duration_s=None, job_id=job_id)
        return [finished] if error is None else [error, finished]


def config_key(config: DeviceConfig) -> str:
    return json.dumps(config.to_json(), sort_keys=True)


class DeviceDescriptions:
    """The devices TensorFlow made of each configuration (its `Ready` report and TensorFlow's lines), as far as
    one owner has seen: a run manager keeps its own, so two managers (two tests, a window and a CLI run) never
    read each other's. Safe from any thread: reader threads remember, the window reads."""

    def __init__(self) -> None:
        self._described: dict[str, tuple[events.Ready, list[str]]] = {}
        self._lock = threading.Lock()

    def get(self, config: DeviceConfig) -> tuple[events.Ready, list[str]] | None:
        with self._lock:
            return self._described.get(config_key(config))

    def remember(self, config: DeviceConfig, ready: events.Ready, lines: list[str]) -> None:
        """A run's own `ready` event describes its configuration as well as a describe run would."""
        with self._lock:
            self._described[config_key(config)] = (ready, lines)


def describe_devices(config: DeviceConfig, timeout: float = 180.0, *,
                     descriptions: DeviceDescriptions | None = None) -> tuple[events.Ready, list[str]]:
    """The devices TensorFlow makes of `config` (a short describe run; once per configuration with
    `descriptions`), and the run's last output lines (TensorFlow's reasons when it sees no GPU). Raises
    RuntimeUnavailable."""
    cached = descriptions.get(config) if descriptions is not None else None
    if cached is not None:
        return cached
    runtime = RuntimeProcess(config)
    runtime.start()
    try:
        runtime.wait_ready(timeout)
        runtime.describe()
        if not runtime.wait_exited(timeout):
            raise RuntimeUnavailable(f"the devices were not described within {timeout:.0f} s")
    finally:
        runtime.stop()
    if runtime.ready is None:
        raise runtime.unavailable()
    described = (runtime.ready, runtime.recent_lines())
    if descriptions is not None:
        descriptions.remember(config, *described)
    return described
