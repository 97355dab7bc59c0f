"""The runtime's three output streams turned into one ordered stream of events; no file descriptors here.

The runtime writes JSON events to its events pipe while TensorFlow's C++ code and the job print to
stdout and stderr. `StreamDemux` takes the raw bytes as they are read, cuts them into lines, makes
`log` and `placement` events of output lines, and holds a job's closing events back until the job's
fence marker has come through both output streams (or a stream closed, or FENCE_WAIT_S passed), so
every line a job printed is delivered before its result.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from tf_device_panel.core import events, placement
from tf_device_panel.core.events import Event

FENCE_PREFIX = "\x1eTFDP-FENCE:"
FENCE_WAIT_S = 2.0
EVENTS, STDOUT, STDERR = "events", "stdout", "stderr"
OUTPUT_STREAMS = frozenset({STDOUT, STDERR})


def fence_tag(event: Event) -> str | None:
    """The fence an event must wait for: the job's for closing events, ready/startup at start-up."""
    if event.type in events.JOB_CLOSING and event.job_id:
        return event.job_id
    return {events.READY: "ready", events.STARTUP_ERROR: "startup"}.get(event.type)


class StreamDemux:
    """Feed it bytes per stream; it calls `deliver` with each event, in order, as soon as it may.

    `job_id()` names the job an output line belongs to, asked when the line is delivered (a job's
    closing events, delivered just before, may have ended it). `on_line` sees every output line first.
    """

    def __init__(self, deliver: Callable[[Event], None], *, job_id: Callable[[], str | None] = lambda: None,
                 on_line: Callable[[str], None] = lambda line: None, fence_wait_s: float = FENCE_WAIT_S,
                 clock: Callable[[], float] = time.monotonic):
        self._deliver = deliver
        self._job_id = job_id
        self._on_line = on_line
        self._fence_wait_s = fence_wait_s
        self._clock = clock
        self._partial = {EVENTS: b"", STDOUT: b"", STDERR: b""}
        self._fences_seen: dict[str, set[str]] = {}
        self._held: list[tuple[float, str | None, Event]] = []  # (since, fence tag, event), in arrival order
        self._closed: set[str] = set()
        self._stderr_kind = ""  # the kind of the C++ message whose unprefixed continuation lines may follow

    def feed(self, stream: str, chunk: bytes) -> None:
        *lines, self._partial[stream] = (self._partial[stream] + chunk).split(b"\n")
        if stream == STDERR:
            self._stderr_kind = ""  # a C++ message and its continuation come in one write
        for raw in lines:
            self._line(stream, raw)

    def close(self, stream: str) -> None:
        """End of `stream`: its last unterminated line counts, and its fences no longer need to come."""
        rest, self._partial[stream] = self._partial[stream], b""
        if rest:
            self._line(stream, rest)
        self._closed.add(stream)

    @property
    def holding(self) -> bool:
        return bool(self._held)

    def release(self, force: bool = False) -> None:
        """Deliver held events in order, stopping at the first whose fence has not come through."""
        now = self._clock()
        while self._held:
            since, tag, event = self._held[0]
            fenced = tag is None or (self._fences_seen.get(tag, set()) | self._closed) >= OUTPUT_STREAMS
            if not (force or fenced or now - since > self._fence_wait_s):
                return
            self._held.pop(0)
            self._deliver(event)

    def _line(self, stream: str, raw: bytes) -> None:
        if stream == EVENTS:
            if raw.strip():
                self._event_line(raw)
        else:
            self._output_line(raw.decode("utf-8", errors="replace").rstrip("\r"), stream)

    def _event_line(self, raw: bytes) -> None:
        try:
            event = Event.decode(raw)
        except (ValueError, KeyError) as exc:
            event = Event(events.LOG, {"stream": EVENTS, "kind": placement.ERROR,
                                       "text": f"unreadable event ({exc}): {raw[:200]!r}"})
        tag = fence_tag(event)
        if tag is None and not self._held:
            self._deliver(event)
            return
        self._held.append((self._clock(), tag, event))
        self.release()

    def _output_line(self, line: str, stream: str) -> None:
        if line.startswith(FENCE_PREFIX):
            self._fences_seen.setdefault(line[len(FENCE_PREFIX):], set()).add(stream)
            self.release()
            return
        self._on_line(line)
        kind, placed = placement.parse_line(line, stream)
        if stream == STDERR:
            # TF's multi-line C++ messages continue on unprefixed lines.
            if kind == placement.OUTPUT and self._stderr_kind in placement.CONTINUED_KINDS:
                kind = self._stderr_kind
            elif placement.starts_tf_message(line):
                self._stderr_kind = kind
            else:
                self._stderr_kind = kind if kind != placement.OUTPUT else ""
        if placed is not None:
            self._deliver(Event(events.PLACEMENT, {**placed.to_json(), "stream": stream, "line": line},
                                job_id=self._job_id()))
        else:
            self._deliver(Event(events.LOG, {"stream": stream, "kind": kind, "text": line}, job_id=self._job_id()))
