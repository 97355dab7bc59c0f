"""gui.worker: background work whose results reach the GUI thread as signals, stopped and joined in one place
(the conftest's leak checks fail a test whose worker thread outlives it)."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

pytest.importorskip("PySide6")
from PySide6.QtCore import QObject
from PySide6.QtWidgets import QApplication
from tf_device_panel.gui.widgets.worker import create_worker, to_gui_thread


def test_a_functions_value_arrives_on_the_gui_thread_then_finished(qtbot) -> None:
    owner = QObject()
    ran_on: list[str] = []
    got: list[tuple[str, object]] = []

    def work(a: int, b: int = 0) -> int:
        ran_on.append(threading.current_thread().name)
        return a + b

    worker = create_worker(work, 2, b=3, name="adding", parent=owner,
                           returned=lambda v: got.append((threading.current_thread().name, v)),
                           finished=lambda: got.append((threading.current_thread().name, "finished")))
    qtbot.waitUntil(lambda: len(got) == 2, timeout=5000)
    main = threading.main_thread().name
    assert ran_on == ["adding"] and got == [(main, 5), (main, "finished")]
    assert worker.wait(5) and not worker.running


def test_an_exception_arrives_as_errored_never_on_stderr(qtbot, capfd: pytest.CaptureFixture[str]) -> None:
    owner = QObject()
    errors: list[BaseException] = []
    returned: list[object] = []

    def broken() -> None:
        raise OSError("no such machine")

    worker = create_worker(broken, parent=owner, errored=errors.append, returned=returned.append)
    qtbot.waitUntil(lambda: bool(errors), timeout=5000)
    worker.wait(5)
    assert isinstance(errors[0], OSError) and str(errors[0]) == "no such machine" and returned == []
    assert "Traceback" not in capfd.readouterr().err


def test_a_loop_is_stopped_at_once_and_nothing_arrives_after_stop(qtbot) -> None:
    owner = QObject()
    seen: list[int] = []
    finished: list[bool] = []

    def every_hour(stopping: threading.Event) -> Iterator[int]:
        count = 0
        while not stopping.is_set():
            count += 1
            yield count
            stopping.wait(3600)  # an hour between rounds: only stop() can end this wait in a test's time

    worker = create_worker(every_hour, parent=owner, yielded=seen.append, finished=lambda: finished.append(True),
                           pass_stopping=True, name="hourly")
    qtbot.waitUntil(lambda: seen == [1], timeout=5000)
    worker.stop(timeout=5)
    assert not worker.running
    QApplication.processEvents()  # whatever the thread posted before it ended is not delivered
    assert seen == [1] and finished == []


def test_a_value_from_another_thread_reaches_the_callback_on_the_gui_thread(qtbot) -> None:
    owner = QObject()
    got: list[tuple[str, object]] = []
    call = to_gui_thread(lambda v: got.append((threading.current_thread().name, v)), owner)
    thread = threading.Thread(target=call, args=("a sample",), name="sampler-like")
    thread.start()
    thread.join(5)
    qtbot.waitUntil(lambda: bool(got), timeout=5000)
    assert got == [(threading.main_thread().name, "a sample")]
