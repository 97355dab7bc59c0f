"""One way to tell news without Qt (after glue's hub, glue/core/hub.py): a subscriber asks a `Hub` for the
messages of one class, and of its subclasses, that pass an optional filter; `publish` hands each message to
every subscription that takes it, in the order they were made.

Core code tells the window through a hub without importing it: the session (core.client.session) is one, the
telemetry sampler and the zygotes each own one. Handlers run on the thread that publishes (a reader's, the
sampler's); the window's controller moves what it subscribes onto the GUI thread.

A handler that raises never keeps the message from the others: its failure is logged with its traceback and
published as a `HandlerFailed` message on the same hub (the window shows it). A handler failing on a
`HandlerFailed` is only logged (no news of news), and a handler failing the same way again (per sample, per
batch) is reported once, until another failure comes between.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

log = logging.getLogger(__name__)


class Message:
    """What a hub carries: a subclass per kind of news (a frozen dataclass, typically)."""


M = TypeVar("M", bound=Message)


@dataclass(frozen=True)
class HandlerFailed(Message):
    """`handler`, subscribed by `subscriber`, raised `error` when it was handed `message`."""

    subscriber: object
    handler: Callable[..., Any]
    message: Message
    error: Exception

    @property
    def text(self) -> str:
        name = getattr(self.handler, "__qualname__", repr(self.handler))
        return (f"{name} failed on {type(self.message).__name__} ({type(self.error).__name__}: {self.error}); "
                "the others were told")


class Subscription:
    """One subscription: calling it unsubscribes (safe twice); `active` until then."""

    def __init__(self, hub: Hub, subscriber: object, message_class: type[Message], handler: Callable[[Any], object],
                 filter: Callable[[Any], bool] | None):
        self.hub = hub
        self.subscriber = subscriber
        self.message_class = message_class
        self.handler = handler
        self.filter = filter
        self.active = True

    def __call__(self) -> None:
        self.hub._remove(lambda s: s is self)


class Hub:
    """Subscriptions and their delivery; safe to subscribe and unsubscribe from any thread while another
    publishes. Subscribers are held strongly: one that goes away unsubscribes (`unsubscribe_all`)."""

    def __init__(self) -> None:
        self._subscriptions: list[Subscription] = []
        self._lock = threading.Lock()
        self._reported: set[tuple[str, str, type, type]] = set()  # the bugs told already

    def subscribe(self, subscriber: object, message_class: type[M], handler: Callable[[M], object],
                  filter: Callable[[M], bool] | None = None) -> Subscription:
        """`handler(message)` for each message of `message_class` (or a subclass) for which `filter(message)` is
        true; returns the subscription, whose call unsubscribes it."""
        return self.add(Subscription(self, subscriber, message_class, handler, filter))

    def add(self, subscription: Subscription) -> Subscription:
        """A subscription made beforehand (for a handler that must know its own subscription from the first
        message on: one published on another thread may come before `subscribe` has returned)."""
        if not (isinstance(subscription.message_class, type) and issubclass(subscription.message_class, Message)):
            raise TypeError(f"a hub carries Message subclasses, not {subscription.message_class!r}")
        with self._lock:
            self._subscriptions.append(subscription)
        return subscription

    def unsubscribe(self, subscriber: object, message_class: type[Message]) -> None:
        """End `subscriber`'s subscriptions to `message_class` itself (not those to its subclasses)."""
        self._remove(lambda s: s.subscriber is subscriber and s.message_class is message_class)

    def unsubscribe_all(self, subscriber: object) -> None:
        self._remove(lambda s: s.subscriber is subscriber)

    def is_subscribed(self, subscriber: object, message_class: type[Message]) -> bool:
        with self._lock:
            return any(s.subscriber is subscriber and s.message_class is message_class for s in self._subscriptions)

    def _remove(self, which: Callable[[Subscription], bool]) -> None:
        with self._lock:
            kept = []
            for subscription in self._subscriptions:
                if which(subscription):
                    subscription.active = False  # a publish already under way skips it too
                else:
                    kept.append(subscription)
            self._subscriptions = kept

    def publish(self, message: Message) -> None:
        """Hand `message` to each subscription that takes it, in the order they were made, on this thread."""
        with self._lock:
            subscriptions = list(self._subscriptions)  # a handler may subscribe or unsubscribe meanwhile
        for subscription in subscriptions:
            if not subscription.active or not isinstance(message, subscription.message_class):
                continue
            try:
                if subscription.filter is None or subscription.filter(message):
                    subscription.handler(message)
            except Exception as exc:  # one handler's bug must keep no message from the others
                self.handler_failed(subscription.subscriber, subscription.handler, message, exc)

    def handler_failed(self, subscriber: object, handler: Callable[..., Any], message: Message,
                       error: Exception) -> None:
        """Report a handler's failure: logged, and published as `HandlerFailed` (unless it failed on one). Also
        for a handler called later, elsewhere (the window's, on the GUI thread)."""
        failed = HandlerFailed(subscriber, handler, message, error)
        # Once per bug: a handler that fails on every batch (or two that fail in turn, or with a changing text)
        # would otherwise put a notice in front of the person for each message.
        bug = (getattr(handler, "__module__", ""), getattr(handler, "__qualname__", repr(handler)),
               type(message), type(error))
        with self._lock:
            if bug in self._reported:
                log.debug("%s (again)", failed.text)
                return
            self._reported.add(bug)
        log.error("%s", failed.text, exc_info=error)
        if not isinstance(message, HandlerFailed):
            self.publish(failed)
