"""Every event kind compares, hashes and prints exactly as `@dataclass` would make it, though the kinds share the
one `__repr__`, `__eq__` and `__hash__` that `Event` declares (core.protocol.events: generating them for every
kind was most of that module's import in each run process)."""

from __future__ import annotations

import dataclasses

import pytest
from tf_device_panel.core.protocol import events


def reference(kind: type[events.Event]) -> type:
    """A class with the same name and fields, its methods written by `@dataclass` itself."""
    fields = [(item.name, object, dataclasses.field(default=None)) for item in dataclasses.fields(kind)]
    return dataclasses.make_dataclass(kind.__name__, fields, frozen=True, kw_only=True)


def values_of(kind: type[events.Event], seed: int) -> dict[str, object]:
    """A distinct, hashable value for each field."""
    return {item.name: f"{item.name}-{seed}" for item in dataclasses.fields(kind)}


@pytest.mark.parametrize("kind", list(events.KINDS.values()), ids=lambda kind: kind.__name__)
def test_each_kind_prints_compares_and_hashes_as_its_dataclass_would(kind: type[events.Event]) -> None:
    made = reference(kind)
    values = values_of(kind, 1)
    event, twin, expected = kind(**values), kind(**values), made(**values)
    assert repr(event) == repr(expected)
    assert event == twin and hash(event) == hash(twin)
    assert hash(event) == hash(expected)
    for name in values:  # a field that differs makes them unequal, whichever it is
        changed = {**values, name: "something else"}
        assert (event == kind(**changed)) == (expected == made(**changed)) is False
        assert event != kind(**changed)


def test_events_of_different_kinds_are_never_equal() -> None:
    warm = events.Warm(job_id="j", time=1.0)
    assert warm != events.Ready(job_id="j", time=1.0)
    assert warm.as_ready() != warm and warm == events.Warm(job_id="j", time=1.0)
    assert events.Progress(done=1, total=2, time=1.0) != (1, 2)


def test_an_event_decoded_from_its_line_equals_it() -> None:
    sent = events.Log(text="hello", stream="stderr", job_id="job-1", time=2.5, partial=True)
    assert events.decode(sent.encode()) == sent
    assert {sent, events.decode(sent.encode())} == {sent}
