"""What tests share: waiting for a condition with a deadline, reading a runtime's events, and finding what
a test left running. Tests import this module; conftest.py only holds fixtures."""

from __future__ import annotations

import contextlib
import csv
import io
import os
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import psutil
import pytest
from tf_device_panel.core.client import zygote
from tf_device_panel.core.client.runtime import RuntimeProcess
from tf_device_panel.core.hub import Message
from tf_device_panel.core.protocol import events
from tf_device_panel.core.protocol.events import Event

ROOT = Path(__file__).resolve().parent.parent
T = TypeVar("T")
M = TypeVar("M", bound=Message)


def wait_until(condition: Callable[[], T], timeout: float, message: str | Callable[[], str] = "",
               interval: float = 0.05) -> T:
    """Poll `condition` until it returns something truthy, and return that; fail after `timeout` seconds.

    The one way a test outside Qt's event loop waits (inside it, qtbot.waitUntil / waitSignal): the deadline
    is generous because it only matters when the condition never comes, so a loaded machine costs time, not a
    failure."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() >= deadline:
            text = message() if callable(message) else message
            raise AssertionError(f"not so after {timeout:g} s: {text or getattr(condition, '__name__', condition)}")
        time.sleep(interval)


@contextlib.contextmanager
def wait_for_message(qtbot: Any, controller: Any, message_class: type[M], timeout_ms: int) -> Iterator[list[M]]:
    """qtbot.waitSignal for the window's messages: the messages of `message_class` its controller hands the GUI
    thread while the block runs, in the list this yields; after the block, waits until one has come."""
    heard: list[M] = []
    subscription = controller.subscribe(heard, message_class, heard.append)
    try:
        yield heard
        qtbot.waitUntil(lambda: bool(heard), timeout=timeout_ms)
    finally:
        subscription()


def events_until(runtime: RuntimeProcess, predicate: Callable[[Event], bool], timeout: float = 120.0) -> list[Event]:
    """Events from a queue-mode runtime up to and including the first one matching `predicate`."""
    deadline = time.monotonic() + timeout
    seen: list[Event] = []
    while time.monotonic() < deadline:
        event = runtime.next_event(min(0.5, max(deadline - time.monotonic(), 0.0)))
        if event is None:
            continue
        seen.append(event)
        if predicate(event):
            return seen
    raise AssertionError(f"no matching event in {timeout:g} s; got {[e.type for e in seen][-30:]}")


def collect_job(runtime: RuntimeProcess, job_id: str, timeout: float = 120.0) -> list[Event]:
    """Events from a queue-mode runtime until `job_id` finishes, then until its process is gone (the job's
    outcome arrives when the process has closed its pipes, a moment before the kernel has torn it down)."""
    try:
        seen = events_until(runtime, lambda e: isinstance(e, events.JobFinished) and e.job_id == job_id, timeout)
    except AssertionError as exc:
        raise AssertionError(f"job {job_id} did not finish: {exc}") from None
    assert runtime.wait_exited(timeout), f"job {job_id} finished but its process did not exit within {timeout} s"
    return seen


def of_type(seen: list[Event], kind: str) -> list[Event]:
    return [e for e in seen if isinstance(e, events.KINDS[kind])]


def output_line(text: str) -> Callable[[Event], bool]:
    """Matches the log event of a line the job printed (plain output may come as a block of lines)."""
    return lambda e: isinstance(e, events.Log) and not e.partial and text in e.text.split("\n")


def output_lines(seen: list[Event]) -> list[str]:
    """Every finished line the job printed, blocks of plain output split into their lines."""
    return [line for e in seen if isinstance(e, events.Log) and e.kind == "output" and not e.partial
            for line in e.text.split("\n")]


def progress_at_least(done: float) -> Callable[[Event], bool]:
    """Matches a progress report of at least `done` steps: the job is past its set-up and really working."""
    return lambda e: isinstance(e, events.Progress) and e.done >= done


def children_alive() -> list[psutil.Process]:
    """This process's descendants that still run (zombies, already dead, do not count), but for its zygotes,
    which live as long as it does by design (the runs forked from them count)."""
    alive = []
    zygotes = zygote.process_ids()
    for child in psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.NoSuchProcess):  # it ended while we looked
            if child.status() != psutil.STATUS_ZOMBIE and child.pid not in zygotes:
                alive.append(child)
    return alive


def process_gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def read_csv(path: str | os.PathLike[str]) -> dict[str, list[tuple[float, float | None]]]:
    """A history the memory panel exported (`History.to_csv`), read back: series name -> [(time, value)]."""
    found: dict[str, list[tuple[float, float | None]]] = {}
    with Path(path).open(newline="", encoding="utf-8") as handle:
        for row in csv.DictReader(handle):
            if row["series"].startswith("marker:"):
                continue
            found.setdefault(row["series"], []).append((float(row["time"]), float(row["value"]) if row["value"]
                                                        else None))
    return found


def job_ended(runs: Any, outcome: Any) -> None:
    """A job's end as the session tells the runs panel: published on its session when the panel is wired (the
    panel's bookkeeping, then the job's own result view), else both called as the subscriptions would."""
    from tf_device_panel.core.client.session import JobEnded

    if runs._link is not None:
        runs.session.publish(JobEnded(outcome))
        return
    runs.job_finished(outcome)
    runs.results.get(outcome.job, runs.result).show_outcome(outcome)


class _KeptBytes(io.BytesIO):
    """A byte buffer that keeps what was written when a text wrapper around it is closed or collected."""

    def close(self) -> None:
        """Left open: the command line's text wrapper closes its buffer when collected, before it is read."""


@contextlib.contextmanager
def caught_streams() -> Iterator[tuple[io.BytesIO, io.BytesIO]]:
    """sys.stdout and sys.stderr as byte buffers (what the command line writes through their `.buffer` too)."""
    out, err = _KeptBytes(), _KeptBytes()
    streams = (io.TextIOWrapper(out, encoding="utf-8", errors="surrogateescape", write_through=True),
               io.TextIOWrapper(err, encoding="utf-8", errors="surrogateescape", write_through=True))
    with contextlib.redirect_stdout(streams[0]), contextlib.redirect_stderr(streams[1]):
        yield out, err


def run_cli_bytes(argv: list[str], cwd: Path, monkeypatch: Any = None) -> tuple[int, bytes, bytes]:
    """`tf-device-panel ARGV` in this process, in `cwd`: its exit status and the bytes it wrote to stdout and
    stderr. Its run process forks from the test worker's zygote instead of importing TensorFlow cold (a command
    line started as a process of its own costs a TensorFlow import, ~4.5 s of a core). The folder is the test's
    `monkeypatch`'s to restore, or put back on return."""
    from tf_device_panel.core import cli

    with contextlib.ExitStack() as stack:
        patch = monkeypatch or stack.enter_context(pytest.MonkeyPatch.context())
        patch.chdir(cwd)
        with caught_streams() as (out, err):
            status = cli.main(argv)
    return status, out.getvalue(), err.getvalue()


def run_cli(argv: list[str], cwd: Path, monkeypatch: Any = None) -> subprocess.CompletedProcess[str]:
    """`run_cli_bytes`, its output as text."""
    status, out, err = run_cli_bytes(argv, cwd, monkeypatch)
    return subprocess.CompletedProcess(argv, status, out.decode("utf-8", "replace"), err.decode("utf-8", "replace"))
