"""The one way to subscribe (core/hub.py): a handler gets the messages of its class and subclasses that pass its
filter, in subscription order, until it is unsubscribed; a handler that raises is reported and keeps no message
from the others; subscribing from any thread while another publishes loses and repeats nothing."""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass

import pytest
from helpers import wait_until
from tf_device_panel.core.hub import HandlerFailed, Hub, Message


@dataclass(frozen=True)
class Said(Message):
    text: str


@dataclass(frozen=True)
class Shouted(Said):
    """A subclass: a subscriber to `Said` hears it too."""


@dataclass(frozen=True)
class Counted(Message):
    number: int


def test_a_handler_gets_its_class_and_subclasses_that_pass_its_filter_in_subscription_order() -> None:
    hub = Hub()
    heard: list[tuple[str, str]] = []
    first, second, loud = object(), object(), object()
    hub.subscribe(first, Said, lambda said: heard.append(("first", said.text)))
    hub.subscribe(loud, Shouted, lambda said: heard.append(("loud", said.text)))
    hub.subscribe(second, Said, lambda said: heard.append(("second", said.text)),
                  filter=lambda said: said.text.startswith("to second"))
    hub.publish(Said("hello"))
    hub.publish(Shouted("HEY"))
    hub.publish(Said("to second: hi"))
    hub.publish(Counted(1))  # no one's class
    assert heard == [("first", "hello"), ("first", "HEY"), ("loud", "HEY"), ("first", "to second: hi"),
                     ("second", "to second: hi")]
    assert hub.is_subscribed(second, Said) and not hub.is_subscribed(second, Shouted)
    with pytest.raises(TypeError):
        hub.subscribe(first, int, print)  # type: ignore[type-var]  # a hub carries Messages only


def test_unsubscribing_one_subscription_one_class_or_everything() -> None:
    hub = Hub()
    heard: list[str] = []
    panel, other = object(), object()
    stop = hub.subscribe(panel, Said, lambda said: heard.append(f"panel {said.text}"))
    hub.subscribe(panel, Counted, lambda counted: heard.append(f"panel {counted.number}"))
    hub.subscribe(other, Said, lambda said: heard.append(f"other {said.text}"))
    hub.publish(Said("a"))
    stop()
    stop()  # twice is harmless
    hub.publish(Said("b"))
    hub.publish(Counted(1))
    hub.unsubscribe(other, Said)
    hub.publish(Said("c"))
    hub.subscribe(other, Counted, lambda counted: heard.append(f"other {counted.number}"))
    hub.unsubscribe_all(panel)
    hub.publish(Counted(2))
    assert heard == ["panel a", "other a", "other b", "panel 1", "other 2"]
    assert not hub.is_subscribed(panel, Counted) and hub.is_subscribed(other, Counted)


def test_a_handler_unsubscribed_during_a_publish_hears_nothing_more_of_it_and_one_added_waits_for_the_next() -> None:
    hub = Hub()
    heard: list[str] = []
    late = object()

    def first(said: Said) -> None:
        heard.append(f"first {said.text}")
        hub.unsubscribe_all(late)  # the window closed a panel while this message was on its way
        hub.subscribe(heard, Said, lambda again: heard.append(f"added {again.text}"))

    hub.subscribe(first, Said, first)
    hub.subscribe(late, Said, lambda said: heard.append(f"late {said.text}"))
    hub.publish(Said("a"))
    assert heard == ["first a"]
    hub.unsubscribe_all(first)
    hub.publish(Said("b"))
    assert heard == ["first a", "added b"]


def test_a_raising_handler_is_reported_and_the_others_are_still_served(caplog: pytest.LogCaptureFixture) -> None:
    hub = Hub()
    heard: list[str] = []
    reported: list[HandlerFailed] = []
    broken = object()

    def breaks(said: Said) -> None:
        if said.text == "odd":
            raise ValueError("an odd one")
        raise RuntimeError(f"cannot draw {said.text}")

    hub.subscribe(broken, Said, breaks)
    hub.subscribe(heard, Said, lambda said: heard.append(said.text))
    hub.subscribe(reported, HandlerFailed, reported.append)
    with caplog.at_level(logging.ERROR, logger="tf_device_panel"):
        hub.publish(Said("a"))
    assert heard == ["a"]
    (failed,) = reported
    assert failed.subscriber is broken and failed.handler is breaks and failed.message == Said("a")
    assert "breaks failed on Said (RuntimeError: cannot draw a)" in failed.text
    (record,) = [r for r in caplog.records if r.name == "tf_device_panel.core.hub"]
    assert record.levelno == logging.ERROR and record.exc_info is not None and "cannot draw a" in record.getMessage()
    # The same bug again, even on another message of its class with another text (a handler called per sample),
    # is reported once; another kind of error in it is another bug, reported.
    hub.publish(Said("a"))
    hub.publish(Said("b"))
    hub.publish(Said("odd"))
    assert heard == ["a", "a", "b", "odd"] and [f.message for f in reported] == [Said("a"), Said("odd")]


def test_two_handlers_failing_in_turn_are_reported_once_each() -> None:
    """Two handlers with a bug each, on every batch: their failures alternate, and each is told once (not a
    notice in front of the person per batch)."""
    hub = Hub()
    reported: list[HandlerFailed] = []

    def draws(said: Said) -> None:
        raise RuntimeError(f"draw {said.text}")

    def counts(said: Said) -> None:
        raise KeyError(said.text)

    hub.subscribe(draws, Said, draws)
    hub.subscribe(counts, Said, counts)
    hub.subscribe(reported, HandlerFailed, reported.append)
    for batch in range(5):
        hub.publish(Said(f"batch {batch}"))
    assert [(f.handler, f.message) for f in reported] == [(draws, Said("batch 0")), (counts, Said("batch 0"))]


def test_a_handler_failing_on_a_failure_is_logged_and_told_no_further(caplog: pytest.LogCaptureFixture) -> None:
    hub = Hub()
    failures: list[HandlerFailed] = []

    def breaks(message: Message) -> None:
        raise ValueError(f"broken on {type(message).__name__}")

    hub.subscribe(breaks, Said, breaks)
    hub.subscribe(breaks, HandlerFailed, breaks)
    hub.subscribe(failures, HandlerFailed, failures.append)
    with caplog.at_level(logging.ERROR, logger="tf_device_panel"):
        hub.publish(Said("a"))  # would recurse for ever if a failure on a failure were published again
    assert [f.message for f in failures] == [Said("a")]
    logged = [r.getMessage() for r in caplog.records if r.name == "tf_device_panel.core.hub"]
    assert len(logged) == 2 and "broken on Said" in logged[0] and "broken on HandlerFailed" in logged[1]


def test_subscribing_and_unsubscribing_while_another_thread_publishes_loses_and_repeats_nothing() -> None:
    """Each subscriber hears every message published after its subscribe returned, once and in order, and none
    published after its unsubscribe returned, while a publisher thread goes on the whole time."""
    hub = Hub()
    published = [0]  # how many publishes have returned, as the publisher counts them
    done = threading.Event()

    def publish() -> None:
        number = 0
        while not done.is_set():
            hub.publish(Counted(number))
            number += 1
            published[0] = number

    heard: dict[int, list[int]] = {}
    window: dict[int, tuple[int, int, int | None]] = {}  # (published before, after its subscribe, after its stop)
    publisher = threading.Thread(target=publish, name="publisher")
    publisher.start()
    wait_until(lambda: published[0] > 100, timeout=10)
    for subscriber in range(300):
        mine = heard[subscriber] = []
        before = published[0]
        stop = hub.subscribe(subscriber, Counted, lambda counted, mine=mine: mine.append(counted.number))
        after = published[0]
        gone = None
        if subscriber % 3 == 0:
            stop()
            gone = published[0]
        window[subscriber] = (before, after, gone)
    going_on = published[0] + 100
    wait_until(lambda: published[0] > going_on, timeout=10)  # every subscriber still in hears these
    done.set()
    publisher.join(30)
    assert not publisher.is_alive()
    last = published[0] - 1
    for subscriber, numbers in heard.items():
        before, after, gone = window[subscriber]
        assert numbers == list(range(numbers[0], numbers[-1] + 1)) if numbers else True, (
            f"{subscriber} heard a gap or a repeat")
        assert not numbers or numbers[0] >= before, f"{subscriber} heard what was published before it subscribed"
        if gone is None:  # still subscribed: everything from just after its subscribe to the last
            assert numbers and numbers[0] <= after + 1 and numbers[-1] == last, subscriber
        else:  # nothing published after its unsubscribe returned
            assert all(number <= gone for number in numbers), subscriber
