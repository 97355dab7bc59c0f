"""Client side of the runtime process: start it, send jobs, receive its events in order.

One reader thread watches three pipes of the child with raw `os.read`: the events pipe, and the
child's stdout and stderr, where TensorFlow's C++ code prints (placement lines among them). What it
reads goes to a `core.streams.StreamDemux`, which makes `log` and `placement` events of output lines
and holds a job's closing events back until the job's fence marker has come through both output
streams, so every line a job printed precedes its result.
"""

from __future__ import annotations

import atexit
import contextlib
import itertools
import json
import logging
import os
import selectors
import signal
import subprocess
import sys
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any

from tf_device_panel.core import events
from tf_device_panel.core.config import DeviceConfig
from tf_device_panel.core.diagnostics import RepeatedFailureLog
from tf_device_panel.core.events import Event
from tf_device_panel.core.gpus import created_gpu
from tf_device_panel.core.processes import start_module
from tf_device_panel.core.streams import EVENTS, STDERR, STDOUT, StreamDemux

NOT_STARTED, STARTING, READY, BUSY, STOPPING, EXITED = (
    "not started", "starting", "ready", "busy", "stopping", "exited")
LAST_LINES = 40

log = logging.getLogger(__name__)

_live: weakref.WeakSet[RuntimeProcess] = weakref.WeakSet()


@atexit.register
def _kill_all_runtimes() -> None:
    for runtime in list(_live):
        runtime.kill()


class RuntimeUnavailable(RuntimeError):
    """The runtime cannot take this request now (not ready, busy, or exited)."""


def describe_exit(returncode: int | None, killed_because: str | None = None) -> str:
    """How a runtime ended, in words; `killed_because` is the reason when the client killed it on purpose."""
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


class RuntimeProcess:
    """A TensorFlow runtime in a child process, configured once, running one job at a time.

    `on_event` is called on the reader thread for every event, in order. Without it, events are
    queued and read with `next_event`.
    """

    _ids = itertools.count(1)

    def __init__(self, config: DeviceConfig, *, on_event: Callable[[Event], None] | None = None,
                 python: str | None = None, env: Mapping[str, str] | None = None):
        self.config = config
        self.python = python or sys.executable
        self.extra_env = dict(env or {})
        self.state = NOT_STARTED
        self.ready_info: dict[str, Any] | None = None
        self.startup_error: dict[str, Any] | None = None
        self.exit_info: dict[str, Any] | None = None
        self.running_job: str | None = None
        self._last_lines: deque[str] = deque(maxlen=LAST_LINES)  # appended by the reader thread
        self._last_lines_lock = threading.Lock()
        self.tf_gpus: list[dict[str, Any]] = []  # from TF's "Created device" lines: logical GPU -> bus id
        self._on_event = on_event
        self._listener_failures = RepeatedFailureLog(log)
        self._queue: deque[Event] = deque()
        self._queue_ready = threading.Condition()
        self._state_changed = threading.Condition()
        self._process: subprocess.Popen[bytes] | None = None
        self._commands_fd: int | None = None
        self._reader: threading.Thread | None = None
        self._stop_requested = False
        self._killed_reason: str | None = None
        self._killed_for_cancel = False
        self._write_lock = threading.Lock()

    def recent_lines(self) -> list[str]:
        """The runtime's last output lines (a copy: the reader thread keeps appending)."""
        with self._last_lines_lock:
            return list(self._last_lines)

    # -- lifecycle ---------------------------------------------------------------------------
    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process else None

    def start(self) -> None:
        if self._process is not None:
            raise RuntimeUnavailable("this runtime was already started; create a new one")
        events_r, events_w = os.pipe()
        commands_r, commands_w = os.pipe()
        env = {**self.config.environment(),
               "PYTHONUNBUFFERED": "1",
               "TF_CPP_MIN_LOG_LEVEL": "0",  # placement lines are INFO-level C++ logs
               **self.extra_env}
        self._set_state(STARTING)
        try:
            # Its own session: Ctrl+C in a terminal goes to the client, which cancels cleanly.
            self._process = start_module(
                "tf_device_panel.core.runtime_main", "--events-fd", str(events_w), "--commands-fd", str(commands_r),
                "--config", json.dumps(self.config.to_json()), python=self.python, env=env,
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, pass_fds=(events_w, commands_r))
        except OSError:
            for fd in (events_r, events_w, commands_r, commands_w):
                os.close(fd)
            self._set_state(EXITED)
            raise
        finally:
            if self._process is not None:
                os.close(events_w)
                os.close(commands_r)
        self._commands_fd = commands_w
        _live.add(self)
        log.debug("runtime pid %d started with %s", self._process.pid, self.config.summary())
        assert self._process.stdout is not None and self._process.stderr is not None
        self._reader = threading.Thread(
            target=self._read_loop, name=f"runtime-reader-{self._process.pid}", daemon=True,
            args=(events_r, self._process.stdout.fileno(), self._process.stderr.fileno()))
        self._reader.start()

    def wait_ready(self, timeout: float = 120.0) -> dict[str, Any]:
        """Block until ready; raises RuntimeUnavailable with TF's message if the runtime did not start."""
        deadline = time.monotonic() + timeout
        with self._state_changed:
            while self.state == STARTING:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise RuntimeUnavailable(f"the runtime did not become ready within {timeout:.0f} s")
                self._state_changed.wait(left)
        if self.ready_info is None:
            raise RuntimeUnavailable(self.failure_message())
        return self.ready_info

    def failure_message(self) -> str:
        if self.startup_error:
            err = self.startup_error
            return (f"TensorFlow rejected the configuration at {err.get('stage')}: "
                    f"{err.get('type')}: {err.get('message')}")
        if self.exit_info:
            tail = "\n".join(self.exit_info.get("last_lines", [])[-8:])
            return f"the runtime {self.exit_info['description']}" + (f"; last output:\n{tail}" if tail else "")
        return "the runtime is not ready"

    def submit(self, job: str, params: Mapping[str, Any] | None = None) -> str:
        with self._state_changed:
            if self.state != READY:
                raise RuntimeUnavailable(f"the runtime is {self.state}; it can run a job only when ready")
            job_id = f"{os.getpid()}-{next(self._ids)}-{int(time.time() * 1000) % 100000}"
            self.running_job = job_id
            self.state = BUSY
            self._state_changed.notify_all()
        self._send({"cmd": "run", "job_id": job_id, "job": job, "params": dict(params or {})})
        return job_id

    def cancel(self, grace: float = 5.0) -> None:
        """Ask the running job to stop; if it has not within `grace` seconds, kill the runtime."""
        job_id = self.running_job
        if job_id is None:
            return
        self._send({"cmd": "cancel", "job_id": job_id})

        def enforce() -> None:
            if self.running_job == job_id and self.state == BUSY:
                self._killed_for_cancel = True
                self.kill(reason=f"the job did not stop within {grace:g} s of being cancelled")

        timer = threading.Timer(grace, enforce)
        timer.daemon = True
        timer.start()

    def stop(self, timeout: float = 5.0) -> None:
        """Stop gracefully (cancelling any job), killing the process if it does not exit in time."""
        process = self._process
        if process is None or process.poll() is not None:
            self._join_reader(timeout)
            return
        self._stop_requested = True
        self._set_state(STOPPING)
        self._send({"cmd": "stop", "grace": max(timeout - 1.0, 0.5)})
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill(reason=f"it did not stop within {timeout:g} s of being asked to")
        self._join_reader(timeout)

    def kill(self, reason: str | None = None) -> None:
        process = self._process
        if process is None or process.poll() is not None:
            return
        if reason:
            self._killed_reason = reason
        log.info("killing runtime pid %d: %s", process.pid, reason or "asked to")
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)  # the whole group: a script's own children too
        with contextlib.suppress(ProcessLookupError):
            process.kill()

    def wait_exited(self, timeout: float | None = None) -> bool:
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._state_changed:
            while self.state != EXITED:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._state_changed.wait(left)
        return True

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
        if event.type == events.READY:
            event.data["gpu_devices"] = list(self.tf_gpus)
            self.ready_info = event.data
            self._set_state(READY)
        elif event.type == events.STARTUP_ERROR:
            self.startup_error = event.data
        elif event.type == events.JOB_FINISHED:
            with self._state_changed:
                if self.running_job == event.job_id:
                    self.running_job = None
                    if self.state == BUSY:
                        self.state = READY
                self._state_changed.notify_all()
        if self._on_event is not None:
            try:
                self._on_event(event)
            except Exception as exc:  # a listener's bug must not stop the event stream
                self._listener_failures.failed(f"the event listener, on a {event.type} event", exc)
        else:
            with self._queue_ready:
                self._queue.append(event)
                self._queue_ready.notify_all()

    def _set_state(self, state: str) -> None:
        with self._state_changed:
            self.state = state
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

    def _join_reader(self, timeout: float) -> None:
        if self._reader is not None and self._reader is not threading.current_thread():
            self._reader.join(timeout)

    # -- the reader thread -------------------------------------------------------------------
    def _read_loop(self, events_fd: int, stdout_fd: int, stderr_fd: int) -> None:
        streams = {events_fd: EVENTS, stdout_fd: STDOUT, stderr_fd: STDERR}
        demux = StreamDemux(self._deliver, job_id=lambda: self.running_job, on_line=self._remember_line)
        selector = selectors.DefaultSelector()
        for fd in streams:
            selector.register(fd, selectors.EVENT_READ)
        open_fds = set(streams)
        exited_at: float | None = None
        try:
            while open_fds:
                for key, _ in selector.select(timeout=0.1):
                    fd = int(key.fd)
                    try:
                        chunk = os.read(fd, 65536)
                    except OSError:
                        chunk = b""
                    if chunk:
                        demux.feed(streams[fd], chunk)
                    else:
                        selector.unregister(fd)
                        open_fds.discard(fd)
                        demux.close(streams[fd])
                demux.release()
                process = self._process
                if process is not None and process.poll() is not None:
                    # A grandchild may hold the output pipes open; do not wait on it for ever.
                    exited_at = exited_at or time.monotonic()
                    if time.monotonic() - exited_at > 1.0:
                        break
        finally:
            demux.release(force=True)
            for fd in list(open_fds):
                selector.unregister(fd)
            selector.close()
            os.close(events_fd)
            self._finish()

    def _remember_line(self, line: str) -> None:
        with self._last_lines_lock:
            self._last_lines.append(line)
        if self.state == STARTING and "Created device" in line:
            created = created_gpu(line)
            if created is not None:
                self.tf_gpus.append(created)

    def _finish(self) -> None:
        process = self._process
        assert process is not None
        try:
            returncode = process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.kill()
            returncode = process.wait()
        for handle in (process.stdout, process.stderr):
            with contextlib.suppress(OSError):
                if handle is not None:
                    handle.close()
        if self._commands_fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._commands_fd)
            self._commands_fd = None
        expected = self._stop_requested and self._killed_reason is None and returncode == 0
        description = describe_exit(returncode, self._killed_reason)
        info: events.RuntimeExitedData = {
            "returncode": returncode, "signal": signal.Signals(-returncode).name if returncode < 0 else None,
            "description": description, "expected": expected, "last_lines": self.recent_lines(),
            "killed_for_cancel": self._killed_for_cancel}
        self.exit_info = dict(info)
        job_id = self.running_job
        if job_id is not None:
            # Killed on purpose (Stop that timed out, window closed, new configuration): the job was
            # stopped, not crashed.
            cancelled = self._killed_for_cancel or self._killed_reason is not None
            message = (f"the runtime was killed while the job was running: {self._killed_reason}"
                       if self._killed_reason else f"the runtime {description} while the job was running")
            error: events.ErrorData = {"type": "RuntimeExited", "message": message,
                                       "last_lines": info["last_lines"][-12:]}
            finished: events.JobFinishedData = {"status": "cancelled" if cancelled else "crashed", "duration_s": None}
            self._deliver(Event(events.ERROR, dict(error), job_id=job_id))
            self._deliver(Event(events.JOB_FINISHED, dict(finished), job_id=job_id))
        self.running_job = None
        _live.discard(self)
        self._set_state(EXITED)
        self._deliver(Event(events.RUNTIME_EXITED, dict(info)))
