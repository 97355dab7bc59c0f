"""Plain callbacks for state that others watch (glue's callback properties, without Qt): a subscriber gets the
new value, and the function `subscribe` returns takes it off again. Used where core code must tell the window
something without importing it (the telemetry sampler, the app model)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class Listeners(Generic[T]):
    """The callbacks subscribed to one kind of news, called in the order they subscribed. Safe to subscribe and
    unsubscribe from any thread while another notifies (the sampler notifies from its own thread)."""

    def __init__(self) -> None:
        self._callbacks: list[Callable[[T], None]] = []
        self._lock = threading.Lock()

    def subscribe(self, callback: Callable[[T], None]) -> Callable[[], None]:
        """Call `callback` with each new value; returns the function that unsubscribes it (safe to call twice)."""
        with self._lock:
            self._callbacks.append(callback)

        def unsubscribe() -> None:
            with self._lock:
                if callback in self._callbacks:
                    self._callbacks.remove(callback)

        return unsubscribe

    def callbacks(self) -> list[Callable[[T], None]]:
        """A copy: a callback may unsubscribe itself while the others are called."""
        with self._lock:
            return list(self._callbacks)

    def notify(self, value: T) -> None:
        for callback in self.callbacks():
            callback(value)

    def __len__(self) -> int:
        with self._lock:
            return len(self._callbacks)
