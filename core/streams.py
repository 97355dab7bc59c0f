"""A run process's three output streams turned into one ordered stream of events; no file descriptors here.

The run process writes JSON events to its events pipe while TensorFlow's C++ code and the job print to
stdout and stderr. `StreamDemux` takes the raw bytes as they are read, cuts them into lines and makes
`log` and `placement` events of output lines. A fragment ended by `\\r` (a progress bar redrawing its line)
is delivered at once as a `partial` log event, the live state of the current line; the finished line
replaces it. The job's closing events (result, error, finished) are not delivered here: they are kept in
`closing` for the client, which hands them on once the process has exited and both output pipes have
reached end of file, so every byte the job printed comes before its result. There are no markers in the
streams.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from tf_device_panel.core import events, placement
from tf_device_panel.core.events import Event

EVENTS, STDOUT, STDERR = "events", "stdout", "stderr"
SCRIPT = "script"  # the user's script's own sys.stdout and sys.stderr, in frames (see `frame`)
OUTPUT_STREAMS = frozenset({STDOUT, STDERR})

# The script's channel: its sys.stdout and sys.stderr share one pipe, so the order of their writes is kept
# exactly; each write goes out as frames: a tag (which stream), the payload's length (4 bytes, big-endian),
# the payload. A frame is at most PIPE_BUF bytes and written with one write, so it never tears.
SCRIPT_STDOUT_TAG, SCRIPT_STDERR_TAG = b"o", b"e"
FRAME_HEADER = 5
MAX_FRAME_PAYLOAD = 4096 - FRAME_HEADER
_SCRIPT_STREAMS = {SCRIPT_STDOUT_TAG[0]: "script-stdout", SCRIPT_STDERR_TAG[0]: "script-stderr"}
SCRIPT_STREAMS = frozenset(_SCRIPT_STREAMS.values())  # how a run record names the script's own streams


def frame(tag: bytes, payload: bytes) -> bytes:
    return tag + len(payload).to_bytes(4, "big") + payload
KEPT_LINES = 40  # `on_line` sees at most this many lines of a block of plain output (the client keeps the last)

# Anything in a block of lines that `placement.parse_line` could take for more than plain output. A block
# without it is delivered as one log event: a flood of prints costs one event per read, not one per line.
_MAYBE_SPECIAL = re.compile(
    rb"^(?:[IWEF]\d{4} |INFO:|WARNING|ERROR:|Traceback)|\): /job:|(?:Error|Exception|Warning): ", re.M)


def split_lines(event: Event) -> list[Event]:
    """A log event of several lines (a block of plain output) as one event per line, for line-wise views."""
    text = event.data.get("text", "")
    if event.type != events.LOG or "\n" not in text:
        return [event]
    return [Event(event.type, {**event.data, "text": line}, job_id=event.job_id, time=event.time)
            for line in text.split("\n")]


def visible_text(raw: bytes) -> bytes:
    """What a terminal would show of a line redrawn with `\\r`: its last non-empty drawing."""
    if b"\r" not in raw:
        return raw
    drawings = [part for part in raw.split(b"\r") if part]
    return drawings[-1] if drawings else b""


class StreamDemux:
    """Feed it bytes per stream; it calls `deliver` with each event, in order, as soon as it may.

    `job_id()` names the job an output line belongs to. `on_line` sees every finished output line first.
    """

    def __init__(self, deliver: Callable[[Event], None], *, job_id: Callable[[], str | None] = lambda: None,
                 on_line: Callable[[str], None] = lambda line: None):
        self._deliver = deliver
        self._job_id = job_id
        self._on_line = on_line
        self._partial = {EVENTS: b"", STDOUT: b"", STDERR: b"", SCRIPT: b"",
                         **dict.fromkeys(_SCRIPT_STREAMS.values(), b"")}
        # the partial line last delivered, per output stream
        self._live = {STDOUT: b"", STDERR: b"", **dict.fromkeys(_SCRIPT_STREAMS.values(), b"")}
        self.closed: set[str] = set()
        self.closing: list[Event] = []
        self._stderr_kind = ""  # the kind of the C++ message whose unprefixed continuation lines may follow

    def feed(self, stream: str, chunk: bytes) -> None:
        if stream == SCRIPT:
            self._feed_script(chunk)
            return
        if stream in SCRIPT_STREAMS:  # a run record's copy of the script's lines, already out of their frames
            self._script_lines(stream, chunk)
            return
        *lines, rest = (self._partial[stream] + chunk).split(b"\n")
        self._partial[stream] = rest
        if stream == EVENTS:
            for raw in lines:
                if raw.strip():
                    self._event_line(raw)
            return
        if stream == STDERR:
            self._stderr_kind = ""  # a C++ message and its continuation come in one write
        block = b"\n".join(lines) if len(lines) > 1 else b""
        if block and b"\r" not in block and _MAYBE_SPECIAL.search(block) is None:
            self._output_block(block, lines, stream)
        else:
            for raw in lines:
                self._output_line(visible_text(raw), stream)
        self._live_line(stream, rest)

    def close(self, stream: str) -> None:
        """End of `stream`: its last line without a newline counts."""
        rest, self._partial[stream] = self._partial[stream], b""
        if stream == SCRIPT:
            for key in SCRIPT_STREAMS:
                self._script_lines(key, b"", at_end=True)
        elif stream in SCRIPT_STREAMS:
            self._script_lines(stream, rest, at_end=True)
        elif rest:
            if stream == EVENTS:
                self._event_line(rest)
            else:
                self._output_line(visible_text(rest), stream)
        self.closed.add(stream)

    def _live_line(self, stream: str, rest: bytes) -> None:
        if b"\r" not in rest:
            return
        shown = visible_text(rest)
        if shown and shown != self._live[stream]:
            self._live[stream] = shown
            text = shown.decode("utf-8", errors="replace")
            self._deliver(Event(events.LOG, {"stream": stream, "kind": placement.OUTPUT, "text": text,
                                             "partial": True}, job_id=self._job_id()))

    def _event_line(self, raw: bytes) -> None:
        try:
            event = Event.decode(raw)
        except (ValueError, KeyError) as exc:
            event = Event(events.LOG, {"stream": EVENTS, "kind": placement.ERROR,
                                       "text": f"unreadable event ({exc}): {raw[:200]!r}"})
        if event.type in events.JOB_CLOSING and event.job_id:
            self.closing.append(event)
        else:
            self._deliver(event)

    def _output_block(self, block: bytes, lines: list[bytes], stream: str) -> None:
        self._live[stream] = b""
        text = block.decode("utf-8", errors="replace")
        for line in lines[-KEPT_LINES:]:
            self._on_line(line.decode("utf-8", errors="replace"))
        self._deliver(Event(events.LOG, {"stream": stream, "kind": placement.OUTPUT, "text": text},
                            job_id=self._job_id()))

    def _output_line(self, raw: bytes, stream: str) -> None:
        self._live[stream] = b""
        line = raw.decode("utf-8", errors="replace")
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

    # -- the script's own output: always the script's, never classified by its shape ---------------------
    def _feed_script(self, chunk: bytes) -> None:
        """Cut the script's channel into its frames; consecutive frames of one stream are handled together."""
        data = self._partial[SCRIPT] + chunk if self._partial[SCRIPT] else chunk
        position, end_of_data = 0, len(data)
        runs: list[tuple[str, list[bytes]]] = []
        while end_of_data - position >= FRAME_HEADER:
            end = position + FRAME_HEADER + int.from_bytes(data[position + 1:position + FRAME_HEADER], "big")
            if end > end_of_data:
                break
            key = _SCRIPT_STREAMS.get(data[position], "script-stdout")
            payload = data[position + FRAME_HEADER:end]
            if runs and runs[-1][0] == key:
                runs[-1][1].append(payload)
            else:
                runs.append((key, [payload]))
            position = end
        self._partial[SCRIPT] = data[position:]
        for key, payloads in runs:
            self._script_lines(key, b"".join(payloads))

    def _script_lines(self, key: str, data: bytes, at_end: bool = False) -> None:
        stream = STDOUT if key == "script-stdout" else STDERR
        *lines, rest = (self._partial[key] + data).split(b"\n")
        if at_end and rest:
            lines, rest = [*lines, rest], b""
        self._partial[key] = rest
        if lines:
            if any(b"\r" in line for line in lines):
                lines = [visible_text(line) for line in lines]
            self._live[key] = b""
            for line in lines[-KEPT_LINES:]:
                self._on_line(line.decode("utf-8", errors="replace"))
            text = b"\n".join(lines).decode("utf-8", errors="replace")
            self._deliver(Event(events.LOG, {"stream": stream, "kind": placement.OUTPUT, "text": text,
                                             "source": "script"}, job_id=self._job_id()))
        if b"\r" in rest:
            shown = visible_text(rest)
            if shown and shown != self._live[key]:
                self._live[key] = shown
                self._deliver(Event(events.LOG, {"stream": stream, "kind": placement.OUTPUT, "partial": True,
                                                 "source": "script",
                                                 "text": shown.decode("utf-8", errors="replace")},
                                    job_id=self._job_id()))
