"""Fixtures only; what tests share as functions is in helpers.py (tests import that, never this file).

Every test is checked for what it leaves behind (napari's pattern): a child process still running fails any
test; a Qt test (one that uses qtbot or qapp) also fails when it leaves a QTimer active, a QThread or a
Python thread running, or a top-level widget open. A leak found is cleaned up, so the next test starts
clean and only the test that leaked fails.
"""

from __future__ import annotations

import contextlib
import gc
import os
import signal
import threading
import traceback
import weakref
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from helpers import children_alive, wait_until
from tf_device_panel.core.client import zygote
from tf_device_panel.core.client.runtime import RuntimeProcess
from tf_device_panel.core.config import DeviceConfig

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")  # before pytest-qt's qapp makes the QApplication
# A suite started in the background of a shell without job control (`cmd &` in a script, nohup) inherits SIGINT
# ignored, and so would every process it starts: a command line then cannot be stopped by Ctrl+C while it
# imports, and a bare script reports SIGINT ignored where the panel's run process restores Python's handler.
# The tests compare with a person's terminal, where Ctrl+C is Python's KeyboardInterrupt: their children inherit
# SIGINT at its default (set before the zygotes start, which their run processes fork from).
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)
# Every test worker runs many run processes, as the window does: they fork from a zygote (one per worker and
# environment), which imported TensorFlow once, instead of importing it each.
zygote.start_zygotes()

def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """`-n auto`: one worker more than cores. A test spends part of its time waiting on its child processes
    (pipes, polls, a process's exit), so one extra worker keeps the cores busy (on 2 cores: 182 s, not 197)."""
    return (len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1) + 1


LEAK_WAIT_S = 10.0  # what a test started may take to end by itself after the test (a cancel's grace timer)


@pytest.fixture(autouse=True)
def panel_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "panel-home"
    monkeypatch.setenv("TF_DEVICE_PANEL_HOME", str(home))
    return home


# -- what a test leaves running ----------------------------------------------------------------------


def _started_here() -> str:
    """Where a timer or thread was started: the innermost frame outside this file."""
    for frame in reversed(traceback.extract_stack()[:-2]):
        if frame.filename != __file__:
            return f"{frame.filename}:{frame.lineno} ({frame.name})"
    return "?"


@pytest.fixture(autouse=True)
def no_child_process_left() -> Iterator[None]:
    """Fails a test that leaves a process it started running: runtimes, cluster tasks, CLI children."""
    before = {p.pid for p in children_alive()}
    yield

    def left() -> list[psutil.Process]:
        return [p for p in children_alive() if p.pid not in before]

    with contextlib.suppress(AssertionError):
        wait_until(lambda: not left(), timeout=LEAK_WAIT_S, interval=0.1)
    leaked = left()
    if leaked:
        described = []
        for process in leaked:
            with contextlib.suppress(psutil.Error):
                described.append(f"{process.pid}: {' '.join(process.cmdline()[:6])}")
                process.kill()
        pytest.fail(f"child processes left running: {described}", pytrace=False)


@pytest.fixture(autouse=True)
def no_qt_leftovers(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """For Qt tests: fails a test that leaves a QTimer active, a QThread or Python thread running, a top-level
    widget open, or garbage collection moved to the GUI thread (a window never closed). Autouse, so it is set up
    before the test's other fixtures and checks after they have torn down (a window fixture closes its window
    first)."""
    if not {"qtbot", "qapp"} & set(request.fixturenames):
        yield
        return
    from PySide6.QtCore import QThread, QTimer
    from PySide6.QtWidgets import QApplication
    from tf_device_panel.gui.shell import garbage

    # As the window does (gui/shell/garbage.py): a panel tested alone has threads too, and a cycle holding one of its
    # widgets must not be collected on them. Started before QTimer is tracked, so this timer is not a leak.
    request.getfixturevalue("qapp")  # the timer needs the application
    collection = garbage.GuiThreadCollection()
    collection.start()

    timers: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()
    qthreads: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()
    timer_start, qthread_start = QTimer.start, QThread.start

    def tracked(original: Callable[..., None], registry: weakref.WeakKeyDictionary) -> Callable[..., None]:
        def start(self: Any, *args: Any) -> None:
            registry[self] = _started_here()
            original(self, *args)
        return start

    monkeypatch.setattr(QTimer, "start", tracked(timer_start, timers))
    monkeypatch.setattr(QThread, "start", tracked(qthread_start, qthreads))
    threads_before = set(threading.enumerate())
    yield

    def alive(check: Callable[[Any], bool], registry: weakref.WeakKeyDictionary) -> list[tuple[Any, str]]:
        found = []
        for obj, where in list(registry.items()):
            with contextlib.suppress(RuntimeError):  # its C++ object is gone: nothing left running
                if check(obj):
                    found.append((obj, where))
        return found

    def new_threads() -> list[threading.Thread]:
        return [t for t in threading.enumerate()
                if t not in threads_before and t.is_alive() and not t.name.startswith("Dummy")]

    def all_ended() -> bool:
        QApplication.processEvents()  # a thread may be waiting for the event loop to take its last signal
        return not new_threads() and not alive(QThread.isRunning, qthreads)

    problems = []
    with contextlib.suppress(AssertionError):
        wait_until(all_ended, timeout=LEAK_WAIT_S)
    for thread in new_threads():
        problems.append(f"thread {thread.name!r} still running")
    for qthread, where in alive(QThread.isRunning, qthreads):
        problems.append(f"QThread started at {where} still running")
        with contextlib.suppress(RuntimeError):
            qthread.quit()
            qthread.wait(2000)
    # The test's threads have ended (or are reported above). What its widgets left in cycles is freed now, here
    # on the GUI thread: once automatic collection is back on, a later test's thread would collect it.
    collection.stop()
    gc.collect()
    for timer, where in alive(QTimer.isActive, timers):
        problems.append(f"QTimer started at {where} still active")
        with contextlib.suppress(RuntimeError):
            timer.stop()
    for widget in QApplication.topLevelWidgets():
        if widget.isVisible():
            problems.append(f"top-level widget {type(widget).__name__} {widget.windowTitle()!r} left open")
            widget.close()
    for holder in garbage.holders():
        owner = "an object already deleted"
        with contextlib.suppress(RuntimeError):
            owner = type(holder.parent()).__name__
        problems.append(f"garbage collection still kept on the GUI thread by {owner}: a window created and "
                        "never closed")
        holder.stop()
    if problems:
        pytest.fail("the test left Qt work running:\n  " + "\n  ".join(problems), pytrace=False)


# -- runtimes -----------------------------------------------------------------------------------------


@pytest.fixture
def start_runtime() -> Iterator[Callable[..., RuntimeProcess]]:
    """Start runtimes for a test and make sure every one is gone afterwards."""
    started: list[RuntimeProcess] = []

    def start(config: DeviceConfig | None = None, **kwargs: Any) -> RuntimeProcess:
        runtime = RuntimeProcess(config or DeviceConfig(), **kwargs)
        runtime.start()
        started.append(runtime)
        return runtime

    yield start
    for runtime in started:
        runtime.stop(timeout=5)
        assert runtime.wait_exited(10), "runtime did not exit"


@pytest.fixture
def three_cpus(start_runtime: Callable[..., RuntimeProcess]) -> RuntimeProcess:
    """A warm process with 3 logical CPUs, ready for one job (every run has a fresh process)."""
    runtime = start_runtime(DeviceConfig(cpu_devices=3))
    runtime.wait_ready()
    return runtime


@pytest.fixture
def window_size() -> tuple[int, int] | None:
    """The size `window` is shown at: None, the size the window takes for the screen. A test file whose checks
    need a size of their own (a classroom's projector, a laptop) overrides this fixture."""
    return None


@pytest.fixture
def window(qtbot, tmp_path: Path, window_size: tuple[int, int] | None) -> Iterator[Any]:
    """The real main window without a runtime, shown (at `window_size`); closed after the test, when the checks
    above then fail the test if closing it left a thread, a timer or a process running."""
    from PySide6.QtCore import QSettings  # Qt only for the tests that ask for a window
    from tf_device_panel.core.client.history import RunHistory
    from tf_device_panel.gui.shell.main_window import MainWindow

    settings = QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat)
    win = MainWindow(settings=settings, history=RunHistory(), start_runtime=False)
    qtbot.addWidget(win)
    if window_size is not None:
        win.resize(*window_size)
    win.show()
    qtbot.waitExposed(win)
    yield win
    if not win.closing:
        win.close()
