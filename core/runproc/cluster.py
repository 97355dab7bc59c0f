"""Local TensorFlow clusters for the multi-worker and parameter-server demos, and TF_CONFIG for real ones.

Every task is a `python -m tf_device_panel.core.runproc.cluster_task` child in its own process group, addressed on
127.0.0.1.
TensorFlow's gRPC server listens on all interfaces whatever the address, so the tasks run inside
a private network namespace that has only a loopback interface (`core.runproc.netns`) where the system
allows it; `LocalCluster.isolation` says which happened. A task's output lines are read on threads
and handed to a callback, tagged with the task. Waits are bounded everywhere: a task that dies ends
the run with an error naming it.
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
import signal
import socket
import subprocess
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypedDict

from tf_device_panel.core.catalogue.cluster_layout import TASK_MODULE, TaskAddress, TfConfig
from tf_device_panel.core.logsetup import RepeatedFailureLog
from tf_device_panel.core.processes import kill_group, start_module
from tf_device_panel.core.runproc.netns import LoopbackNamespace, NamespaceUnavailable

log = logging.getLogger(__name__)

RESULT_PREFIX = "\x1eTFDP-RESULT "


def free_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """Ports free right now on `host` (held open together, so they are distinct)."""
    sockets = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind((host, 0))
            sockets.append(sock)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for sock in sockets:
            sock.close()


_TASK_OF_DEVICE = re.compile(r"^/job:([^/]+)/replica:\d+/task:(\d+)/")


def devices_by_task(names: Sequence[str]) -> dict[str, list[str]]:
    """Full device names grouped by their task: {'worker:1': ['/job:worker/replica:0/task:1/device:CPU:0']}."""
    grouped: dict[str, list[str]] = {}
    for name in names:
        match = _TASK_OF_DEVICE.match(name)
        if match:
            grouped.setdefault(f"{match.group(1)}:{match.group(2)}", []).append(name)
    return grouped


class TaskDevices(TypedDict):
    applied: list[str]                # the tf.config calls the task's configuration made
    logical: list[str]                # its own logical devices
    cluster: list[str]                # every logical device it sees, the other tasks' too


class TaskResult(TypedDict, total=False):
    """What a task reports (core.runproc.cluster_task.report): one JSON line prefixed with RESULT_PREFIX."""

    workers: int
    losses: list[float]
    connect_s: float
    train_s: float
    devices: TaskDevices
    # mwms-worker
    replicas_in_sync: int
    global_batch_size: int
    task: TaskAddress
    # ps-coordinator
    variables: dict[str, str]         # variable -> the device it lives on
    values: dict[str, float]
    steps: int
    steps_per_s: float


@dataclass
class Task:
    name: str              # "worker:0"
    role: str              # the core.runproc.cluster_task role it runs
    config: TfConfig
    process: subprocess.Popen[bytes] | None = None
    results: list[TaskResult] = field(default_factory=list)
    last_lines: deque[str] = field(default_factory=lambda: deque(maxlen=40))
    readers: list[threading.Thread] = field(default_factory=list)


class TaskFailed(RuntimeError):
    def __init__(self, task: Task, description: str):
        self.task = task
        tail = "\n".join(list(task.last_lines)[-6:])
        super().__init__(f"{task.name} {description}" + (f"; its last output:\n{tail}" if tail else ""))


def describe_returncode(code: int) -> str:
    if code < 0:
        with contextlib.suppress(ValueError):
            return f"was killed by {signal.Signals(-code).name}"
        return f"was killed by signal {-code}"
    return f"exited with code {code}"


class LocalCluster:
    """Start tasks, stream their output, collect their results, and always clean up."""

    def __init__(self, on_line: Callable[[Task, str, str], None], *, env: Mapping[str, str] | None = None,
                 isolate: bool = True):
        self.on_line = on_line
        self._forward_failures = RepeatedFailureLog(log)
        self.tasks: list[Task] = []
        self.env = dict(env or {})
        self.namespace: LoopbackNamespace | None = None
        self.isolation = "none (not requested)"
        if isolate:
            namespace = LoopbackNamespace()
            try:
                namespace.start()
            except NamespaceUnavailable as exc:
                self.isolation = (f"none: tasks listen on all interfaces while the job runs, because a private "
                                  f"network namespace could not be made ({exc})")
            else:
                self.namespace = namespace
                self.isolation = "private network namespace (loopback only)"

    def start(self, name: str, role: str, config: TfConfig, args: Sequence[str] = ()) -> Task:
        task = Task(name, role, config)
        env = {**self.env, "TF_CONFIG": json.dumps(config), "PYTHONUNBUFFERED": "1", "TF_CPP_MIN_LOG_LEVEL": "0"}
        task.process = start_module(
            TASK_MODULE, role, *args, env=env, die_with_parent=True,
            wrap=self.namespace.command if self.namespace else None, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.tasks.append(task)
        for stream, handle in (("stdout", task.process.stdout), ("stderr", task.process.stderr)):
            reader = threading.Thread(target=self._read, args=(task, stream, handle), daemon=True,
                                      name=f"cluster-{name}-{stream}")
            reader.start()
            task.readers.append(reader)
        return task

    def _read(self, task: Task, stream: str, handle: Any) -> None:
        for raw in iter(handle.readline, b""):
            line = raw.decode("utf-8", "replace").rstrip("\r\n")
            if line.startswith(RESULT_PREFIX):
                with contextlib.suppress(ValueError):
                    task.results.append(json.loads(line[len(RESULT_PREFIX):]))  # written by `report`
                continue
            task.last_lines.append(line)
            try:
                self.on_line(task, stream, line)
            except Exception as exc:  # a display problem must not stop the reading, or the task blocks
                self._forward_failures.failed(f"forwarding {task.name}'s {stream}", exc)

    def wait(self, tasks: Sequence[Task], timeout: float, should_stop: Callable[[], bool],
             watch: Sequence[Task] = ()) -> None:
        """Wait until `tasks` exit successfully. Raises TaskFailed if one of them, or of `watch`, dies."""
        deadline = time.monotonic() + timeout
        while True:
            for task in [*tasks, *watch]:
                assert task.process is not None
                code = task.process.poll()
                if code is not None and (code != 0 or task in watch):
                    for reader in task.readers:
                        reader.join(2)
                    raise TaskFailed(task, describe_returncode(code))
            if all(t.process is not None and t.process.poll() == 0 for t in tasks):
                for task in tasks:
                    for reader in task.readers:
                        reader.join(5)
                return
            if should_stop():
                return
            if time.monotonic() > deadline:
                waiting = [t.name for t in tasks if t.process is not None and t.process.poll() is None]
                raise TimeoutError(f"{', '.join(waiting)} did not finish within {timeout:.0f} s")
            time.sleep(0.1)

    def close(self) -> None:
        """Kill every task's whole process group and reap it."""
        for task in self.tasks:
            if task.process is not None:
                kill_group(task.process)
        if self.namespace is not None:
            self.namespace.stop()

    def __enter__(self) -> LocalCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
