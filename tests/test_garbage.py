"""Garbage is collected on the GUI thread while the window lives (gui/shell/garbage.py).

A cycle holding a Qt wrapper, collected on a background thread, deletes its C++ object there: the stress run
deadlocked that way (a run's reader thread deleting a menu's action while the GUI thread deleted another) and a
CI worker crashed in a window test. These tests make the collection that used to happen on a background thread
happen, and check where the cycle ends.
"""

from __future__ import annotations

import gc
import threading
from typing import Any

import pytest

pytest.importorskip("PySide6")
from PySide6.QtCore import QObject
from tf_device_panel.core.protocol import events
from tf_device_panel.gui.shell import garbage


class PlainCycle:
    """A Python object in a reference cycle, to show where Python collects without the window."""

    def __init__(self, freed_on: list[str]):
        self.me = self
        self.freed_on = freed_on

    def __del__(self) -> None:
        self.freed_on.append(threading.current_thread().name)


class Cycle(QObject):
    """A Qt object in a reference cycle (as a widget whose lambda slot names it): only a collection frees it."""

    freed_on: list[str]

    def __init__(self, freed_on: list[str]):
        super().__init__()
        self.me = self
        self.freed_on = freed_on

    def __del__(self) -> None:
        self.freed_on.append(threading.current_thread().name)


def allocate_past_every_threshold(kept: list[Any]) -> None:
    """What a run's reader does all day: allocates containers (each one counts towards a collection). They are
    kept, as a reader's lines are until shown: a collection is due when the allocations outnumber the frees."""
    kept.extend([number] for number in range(gc.get_threshold()[0] * 50))


def drop_a_cycle_then_allocate_on_a_thread(cycle: type, kept: list[Any]) -> list[str]:
    freed_on: list[str] = []
    cycle(freed_on)  # unreachable at once, but for its cycle
    worker = threading.Thread(target=allocate_past_every_threshold, args=(kept,), name="reader")
    worker.start()
    worker.join()
    return freed_on


def test_without_the_window_a_background_thread_collects_what_the_main_thread_dropped() -> None:
    """The hazard itself (with a plain object: a Qt one could deadlock this test): Python collects on the thread
    whose allocation fills a generation."""
    assert gc.isenabled()
    gc.collect()  # the cycle is the youngest garbage when the thread starts allocating
    assert drop_a_cycle_then_allocate_on_a_thread(PlainCycle, []) == ["reader"]


def test_while_the_window_lives_a_cycle_is_collected_on_the_gui_thread(window: Any, qtbot: Any) -> None:
    assert not gc.isenabled()  # the window holds collection (and the test suite does, for every Qt test)
    gc.collect()
    kept: list[Any] = []
    freed_on = drop_a_cycle_then_allocate_on_a_thread(Cycle, kept)
    assert freed_on == []  # the reader allocated far past every threshold and collected nothing
    qtbot.waitUntil(lambda: freed_on != [], timeout=10_000)  # the window's timer collects it
    assert freed_on == [threading.current_thread().name] == ["MainThread"]


def test_the_window_collects_on_the_gui_thread_while_a_thread_floods_it_with_a_runs_events(
        window: Any, qtbot: Any) -> None:
    """The stress run's case: a thread puts a run's events (allocating all the while) as the window shows them,
    and cycles holding Qt objects are dropped on the GUI thread meanwhile; each ends on the GUI thread."""
    freed_on: list[str] = []
    gc.collect()

    def flood() -> None:
        for number in range(20_000):
            window.controller.pump.put(events.Log(stream="stdout", kind="stdout", text=f"line {number}",
                                                  job_id="flood-1"))

    thread = threading.Thread(target=flood, name="reader")
    thread.start()
    cycles = 0
    while thread.is_alive():
        Cycle(freed_on)
        cycles += 1
        qtbot.wait(5)  # the window handles the events that arrived
    thread.join()
    kept = [[number] for number in range(gc.get_threshold()[0] * 2)]  # a collection is due, if none was yet
    qtbot.waitUntil(lambda: len(freed_on) == cycles, timeout=10_000)
    del kept
    assert set(freed_on) == {"MainThread"}


def test_closing_the_window_gives_automatic_collection_back(qtbot: Any, tmp_path: Any) -> None:
    from PySide6.QtCore import QSettings
    from tf_device_panel.core.client.history import RunHistory
    from tf_device_panel.gui.shell.main_window import MainWindow

    before = len(garbage.holders())  # the test suite's own holder
    window = MainWindow(settings=QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat),
                        history=RunHistory(), start_runtime=False)
    qtbot.addWidget(window)
    assert len(garbage.holders()) == before + 1 and not gc.isenabled()
    window.close()
    assert len(garbage.holders()) == before


def test_the_last_holder_turns_automatic_collection_back_on_only_if_it_was_on(qapp: Any) -> None:
    suite = garbage.holders()
    for holder in suite:  # the test suite's own: this test is about the first and the last holder
        holder.stop()
    try:
        assert gc.isenabled()
        first, second = garbage.GuiThreadCollection(), garbage.GuiThreadCollection()
        first.start()
        second.start()
        first.stop()
        assert not gc.isenabled()  # the second still holds
        second.stop()
        assert gc.isenabled()
        gc.disable()  # someone turned it off before (a benchmark, an embedding application)
        first.start()
        first.stop()
        assert not gc.isenabled()
    finally:
        gc.enable()
        for holder in suite:
            holder.start()


def test_collect_due_collects_a_generation_only_once_its_threshold_is_passed(qapp: Any) -> None:
    gc.collect()
    freed_on: list[str] = []
    Cycle(freed_on)
    assert garbage.collect_due() == 0 and freed_on == []  # generation 0 not full yet
    kept = [[number] for number in range(gc.get_threshold()[0] + 10)]
    assert garbage.collect_due() > 0 and freed_on == ["MainThread"]
    del kept
