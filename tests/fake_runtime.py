"""A run process whose every step the test takes by hand: the RunManager's tests, and the window's, use it
where a real TensorFlow process would only make them slow (what the real one does is tests/test_runtime.py's)."""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Mapping
from typing import Any

from tf_device_panel.core.client.runtime import RuntimeState, RuntimeUnavailable
from tf_device_panel.core.config import DeviceConfig
from tf_device_panel.core.protocol import events
from tf_device_panel.core.protocol.events import Event

PHYSICAL = ({"name": "/physical_device:CPU:0", "device_type": "CPU", "index": 0},)
LOGICAL = ({"name": "/job:localhost/replica:0/task:0/device:CPU:0", "short_name": "/CPU:0", "device_type": "CPU"},)


class FakeProcess:
    """A run process whose every step the test takes by hand."""

    _pids = itertools.count(1000)

    def __init__(self, config: DeviceConfig, on_event: Callable[[Event], None]):
        self.config = config
        self.on_event = on_event
        self.state = RuntimeState.NOT_STARTED
        self.pid: int | None = None
        self.warm: events.Warm | None = None
        self.startup_error: events.StartupError | None = None
        self.exited: events.RuntimeExited | None = None
        self.job: tuple[str, dict[str, Any], str] | None = None
        self.after_pid: int | None = None
        self.described = False
        self.cancelled_with: float | None = None
        self.killed: str | None = None
        self.stopped = False
        self.refuse_submit = False
        self.started_on: str | None = None  # the thread that started it

    # -- what the manager calls
    def start(self) -> None:
        self.started_on = threading.current_thread().name
        self.state = RuntimeState.STARTING
        self.pid = next(self._pids)

    def new_job_id(self) -> str:
        return f"job-{self.pid}"

    def submit(self, job: str, params: Mapping[str, Any] | None = None, *, after_pid: int | None = None,
               job_id: str | None = None) -> str:
        if self.refuse_submit or self.state != RuntimeState.READY:
            raise RuntimeUnavailable(f"the runtime is {self.state}; it can take a job only when ready")
        self.state = RuntimeState.BUSY
        self.job = (job, dict(params or {}), job_id or self.new_job_id())
        self.after_pid = after_pid
        return self.job[2]

    def describe(self) -> None:
        self.state = RuntimeState.BUSY
        self.described = True

    def cancel(self, grace: float = 5.0) -> None:
        self.cancelled_with = grace

    def kill(self, reason: str | None = None) -> None:
        self.killed = reason
        if self.state != RuntimeState.EXITED:
            if self.job is not None:
                self.finish_job("cancelled", error=("RuntimeExited", f"the runtime was killed: {reason}"), exit=False)
            self.exit(returncode=-1, description=f"was killed: {reason}", expected=False,
                      killed_for_cancel=bool(reason and "did not stop" in reason))

    def stop(self, timeout: float = 5.0) -> None:
        self.stopped = True
        if self.state not in (RuntimeState.EXITED, RuntimeState.BUSY):
            self.exit(returncode=0, description="exited with code 0", expected=True)

    def recent_lines(self) -> list[str]:
        return ["a last line"]

    def tf_lines(self) -> list[str]:
        return []

    def failure_message(self) -> str:
        if self.startup_error is not None:
            return f"TensorFlow rejected the configuration at {self.startup_error.stage}: {self.startup_error.message}"
        return f"the runtime {self.exited.description if self.exited else 'is not ready'}"

    # -- what the test does
    def warm_up(self) -> None:
        self.state = RuntimeState.READY
        self.warm = events.Warm(pid=self.pid, tf_version="2.21.0", physical=PHYSICAL)
        self.on_event(self.warm)

    def ready(self, job_id: str | None = None) -> None:
        self.on_event(events.Ready(pid=self.pid, tf_version="2.21.0", physical=PHYSICAL, logical=LOGICAL,
                                   job_id=job_id))

    def fail_startup(self, message: str = "GPU 3 is not visible") -> None:
        self.startup_error = events.StartupError(stage="set_visible_devices", error_type="ValueError",
                                                 message=message)
        self.on_event(self.startup_error)
        self.exit(returncode=1, description="exited with code 1", expected=False)

    def finish_job(self, status: str = "ok", error: tuple[str, str] | None = None, exit: bool = True) -> None:
        assert self.job is not None
        job, _, job_id = self.job
        self.on_event(events.JobStarted(job=job, job_id=job_id))
        if error is not None:
            self.on_event(events.Error(error_type=error[0], message=error[1], job_id=job_id))
        else:
            self.on_event(events.Result(result={"kind": "text", "text": "done"}, job_id=job_id))
        self.on_event(events.JobFinished(job=job, status=status, duration_s=0.5, returncode=0, job_id=job_id))
        if exit:
            self.exit(returncode=0, description="exited with code 0", expected=True)

    def exit(self, returncode: int, description: str, expected: bool, killed_for_cancel: bool = False) -> None:
        self.state = RuntimeState.EXITED
        self.exited = events.RuntimeExited(returncode=returncode, description=description, expected=expected,
                                           killed_for_cancel=killed_for_cancel)
        self.on_event(self.exited)


def fake_factory(made: list[FakeProcess]) -> Callable[[DeviceConfig, Callable[[Event], None]], FakeProcess]:
    """A process factory for a RunManager: each process it makes is appended to `made`."""

    def factory(config: DeviceConfig, on_event: Callable[[Event], None]) -> FakeProcess:
        made.append(FakeProcess(config, on_event))
        return made[-1]

    return factory
