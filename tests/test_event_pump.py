"""The window's batching and backpressure, in the controller (gui.shell.controller), without a widget."""

from __future__ import annotations

import threading

import pytest
from helpers import wait_until
from tf_device_panel.core.protocol import events
from tf_device_panel.core.protocol.events import Event
from tf_device_panel.gui.shell import controller as event_pump
from tf_device_panel.gui.shell.controller import EventPump


def log(text: str) -> events.Log:
    return events.Log(stream="stderr", kind="tf-info", text=text)


def test_events_come_in_order_in_bounded_batches_and_wait_for_the_consumer(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(event_pump, "MAX_BATCH", 10)
    batches: list[list[Event]] = []
    got_one = threading.Event()
    acknowledge = threading.Event()  # once set, the consumer says it took each batch, as the window does

    def take(batch: list[Event]) -> None:
        batches.append(batch)
        got_one.set()
        if acknowledge.is_set():
            pump.batch_done()

    pump = EventPump(take)
    try:
        for number in range(25):
            pump.put(log(f"line {number}"))
        wait_until(lambda: batches, 5)
        assert len(batches[0]) <= 10
        # the consumer has not said it took the batch: the next waits (up to ACK_WAIT_S)
        got_one.clear()
        assert not got_one.wait(event_pump.ACK_WAIT_S / 4) and len(batches) == 1
        acknowledge.set()
        pump.batch_done()
        wait_until(lambda: sum(len(b) for b in batches) == 25, 10)
        assert [e.text for b in batches for e in b] == [f"line {n}" for n in range(25)]
        assert all(len(b) <= 10 for b in batches)
    finally:
        assert pump.close(1.0) == []


def test_a_flood_skips_the_oldest_log_lines_but_never_other_events(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(event_pump, "MAX_BUFFERED", 100)
    pump = EventPump(lambda batch: None)
    pump.close(1.0)  # nothing drains it: what is buffered stays
    placement = events.Placement(op="MatMul", op_type="MatMul", device="/job:localhost/device:CPU:0",
                                 short_device="/CPU:0")
    pump.put(placement)
    for number in range(150):
        pump.put(log(f"line {number}"))
    rest = pump.close(1.0)
    assert rest[0] == placement  # not a log line: kept
    notices = [e for e in rest if isinstance(e, events.Log) and e.stream == "panel"]
    assert notices and notices[0].kind == "warning" and "log events skipped" in notices[0].text
    assert len(rest) <= 101 and rest[-1].text == "line 149"  # the newest lines are the ones kept


def test_what_the_pump_had_no_time_to_send_comes_back_at_close() -> None:
    pump = EventPump(lambda batch: None)
    pump.close(1.0)
    pump.put(events.JobFinished(job="fit", status="ok", job_id="1"))
    (finished,) = pump.close(1.0)
    assert isinstance(finished, events.JobFinished) and finished.job_id == "1"
