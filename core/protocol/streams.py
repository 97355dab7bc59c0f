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

import json
import re
from collections import deque
from collections.abc import Callable

from tf_device_panel.core.protocol import events, output_lines
from tf_device_panel.core.protocol.events import Event, Log
from tf_device_panel.core.protocol.events import from_json as event_from_json

EVENTS, STDOUT, STDERR = "events", "stdout", "stderr"
# A user's script's own fds 1 and 2 (pipes of their own: TensorFlow's C++ output stays on STDOUT and STDERR).
# Their bytes are kept exactly: each log event of theirs has `raw`, the bytes as written, line ends included
# (the last piece of a stream that ends without a newline has none), and is never classified by its shape.
SCRIPT_STDOUT, SCRIPT_STDERR = "script-stdout", "script-stderr"
SCRIPT_STREAMS = frozenset({SCRIPT_STDOUT, SCRIPT_STDERR})  # how a run record names them too
SCRIPT = "script"  # a Log event's `source` when the script wrote it
OUTPUT_STREAMS = frozenset({STDOUT, STDERR})
LINE_CAP_BYTES = 8 * 1024 * 1024  # an output line longer than this keeps its first and last half of it
LIVE_WINDOW_BYTES = 64 * 1024      # a partial line's live state is drawn from at most its last this many bytes

# The step a run's `warm` event lists when the profile turned TensorFlow's placement log on (core.config.steps).
PANELS_PLACEMENT_STEP = "set_log_device_placement(True)"
# A line of TensorFlow's placement log in its C++ log (absl's prefix as TensorFlow's log has it, `I0000 00:00:`
# and the seconds since the epoch, then the thread and placer.cc or execute.cc): on a script's stderr, only
# this exact shape is taken for TensorFlow's. Its echo on stdout is the run process's to take out
# (core.runproc.jobs.script.give_script_its_fds).
_TF_PLACEMENT_LINE = re.compile(rb"^I0000 00:00:\d+\.\d+ +\d+ (?:placer\.cc:\d+\] |execute\.cc:\d+\] "
                                rb"|direct_session\.cc:\d+\] Device mapping:)")
# The lines that continue a Session's "Device mapping:" (one a device: `/job:…/device:GPU:0 -> device: 0, …`).
_MAPPING_LINE = re.compile(rb"^/job:[\w-]+/replica:\d+/task:\d+/device:\w+:\d+ -> ")

PANEL = "panel"  # a Log event's stream when the panel says the line itself


def scripts_placement_log(job_id: str | None) -> Log:
    """What the run process says when a script turns TensorFlow's placement log on itself: from then on the
    placement lines on its streams stay there, as bare (`StreamDemux`)."""
    return Log(stream=PANEL, kind=output_lines.PLACEMENT, job_id=job_id,
               text="your script turned TensorFlow's placement log on: its lines are on your streams, as bare")


KEPT_LINES = 40  # `on_line` sees at most this many lines of a block of plain output (the client keeps the last)

# Anything in a block of lines that `output_lines.parse_line` could take for more than plain output. A block
# without it is delivered as one log event: a flood of prints costs one event per read, not one per line.
_MAYBE_SPECIAL = re.compile(
    rb"^(?:[IWEF]\d{4} |INFO:|WARNING|ERROR:|Traceback)|\): /job:|(?:Error|Exception|Warning): ", re.M)


def split_lines(event: Event) -> list[Event]:
    """A log event of several lines (a block of plain output) as one event per line, for line-wise views."""
    if not isinstance(event, Log) or "\n" not in event.text:
        return [event]
    lines = event.text.split("\n")
    if event.raw is not None and event.source == SCRIPT:  # each line with its own bytes, its line end included
        raw_lines = [line + b"\n" for line in event.raw.split(b"\n")]
        raw_lines[-1] = raw_lines[-1][:-1]
        if not raw_lines[-1]:
            raw_lines.pop()
        if len(raw_lines) == len(lines):
            return [event.replace(text=line, raw=raw) for line, raw in zip(lines, raw_lines, strict=True)]
    return [event.replace(text=line) for line in lines]


def visible_text(raw: bytes) -> bytes:
    """What a terminal would show of a line redrawn with `\\r`: its last non-empty drawing."""
    if b"\r" not in raw:
        return raw
    drawings = [part for part in raw.split(b"\r") if part]
    return drawings[-1] if drawings else b""


def dropped_marker(dropped: int, cap: int) -> bytes:
    """What stands in a line for the bytes a LineBuffer dropped from its middle."""
    return (f" … [{dropped} bytes of this line not kept: a line longer than {cap} bytes keeps its first and "
            f"last {cap // 2}] … ").encode()


class LineBuffer:
    """The pieces of one line still open: appending costs the piece's length; with a `cap`, past it only the
    first and last cap/2 bytes are kept (`dropped` counts the rest)."""

    def __init__(self, cap: int | None = None):
        self.cap = cap
        self._head = bytearray()
        self._tail: deque[bytes] = deque()
        self._tail_size = 0
        self.dropped = 0
        self.has_cr = False

    @property
    def kept_bytes(self) -> int:
        return len(self._head) + self._tail_size

    def add(self, data: bytes) -> None:
        if not data:
            return
        if b"\r" in data:
            self.has_cr = True
        if self.cap is None:
            self._head += data
            return
        room = self.cap // 2 - len(self._head)
        if room > 0:
            self._head += data[:room]
            data = data[room:]
        if not data:
            return
        self._tail.append(data)
        self._tail_size += len(data)
        excess = self._tail_size - (self.cap - self.cap // 2)
        while excess > 0:
            first = self._tail[0]
            if len(first) <= excess:
                self._tail.popleft()
                cut = len(first)
            else:
                self._tail[0] = first[excess:]
                cut = excess
            self._tail_size -= cut
            self.dropped += cut
            excess -= cut

    def last(self, size: int) -> bytes:
        """The line's last `size` bytes kept (for a live view of a long partial line)."""
        pieces: list[bytes] = []
        wanted = size
        for piece in reversed(self._tail):
            pieces.append(piece[-wanted:])
            wanted -= len(pieces[-1])
            if wanted <= 0:
                break
        if wanted > 0:
            pieces.append(bytes(self._head[-wanted:]))
        return b"".join(reversed(pieces))

    def take(self) -> bytes:
        """The line as kept, and the buffer emptied for the next one."""
        middle = dropped_marker(self.dropped, self.cap or 0) if self.dropped else b""
        line = bytes(self._head) + middle + b"".join(self._tail)
        self._head, self._tail, self._tail_size, self.dropped, self.has_cr = bytearray(), deque(), 0, 0, False
        return line


class StreamDemux:
    """Feed it bytes per stream; it calls `deliver` with each event, in order, as soon as it may.

    `job_id()` names the job an output line belongs to. `on_line` sees every finished output line first.
    """

    def __init__(self, deliver: Callable[[Event], None], *, job_id: Callable[[], str | None] = lambda: None,
                 on_line: Callable[[str], None] = lambda line: None, line_cap: int | None = LINE_CAP_BYTES):
        self._deliver = deliver
        self._job_id = job_id
        self._on_line = on_line
        # Event lines are the panel's own and kept whole; output lines are the job's, kept up to line_cap.
        self._partial = {EVENTS: LineBuffer(), STDOUT: LineBuffer(line_cap), STDERR: LineBuffer(line_cap),
                         **{key: LineBuffer(line_cap) for key in SCRIPT_STREAMS}}
        # the partial line last delivered, per output stream
        self._live = {STDOUT: b"", STDERR: b"", **dict.fromkeys(SCRIPT_STREAMS, b"")}
        self.closed: set[str] = set()
        self.closing: list[Event] = []
        self._stderr_kind = ""  # the kind of the C++ message whose unprefixed continuation lines may follow
        self._stderr_tf = False  # that message was TensorFlow's C++ log (its continuation lines are too)
        # The run's placement log is the profile's (its `warm` event says it applied it): TensorFlow's placement
        # lines are then taken out of a script's own streams (they stay the panel's).
        self._placement_is_the_panels = False
        self._in_mapping = False  # within the lines of a Session's "Device mapping:" on a script's stderr

    def buffered_bytes(self, stream: str) -> int:
        """How much of `stream`'s open line is held (bounded by the line cap for output streams)."""
        return self._partial[stream].kept_bytes

    def feed(self, stream: str, chunk: bytes) -> None:
        if stream in SCRIPT_STREAMS:
            self._script_lines(stream, chunk)
            return
        buffer = self._partial[stream]
        last_end = chunk.rfind(b"\n")
        if last_end < 0:  # no line ends here: only the open line grows
            buffer.add(chunk)
            if stream != EVENTS:
                self._live_line(stream)
            return
        first_end = chunk.find(b"\n")
        buffer.add(chunk[:first_end])
        lines = [buffer.take()]
        if last_end > first_end:
            lines += chunk[first_end + 1:last_end].split(b"\n")
        buffer.add(chunk[last_end + 1:])
        if stream == EVENTS:
            for raw in lines:
                if raw.strip():
                    self._event_line(raw)
            return
        if stream == STDERR:
            self._stderr_kind, self._stderr_tf = "", False  # a C++ message and its continuation come in one write
        block = b"\n".join(lines) if len(lines) > 1 else b""
        if block and b"\r" not in block and _MAYBE_SPECIAL.search(block) is None:
            self._output_block(block, lines, stream)
        else:
            for raw in lines:
                self._output_line(raw, stream)
        self._live_line(stream)

    def close(self, stream: str) -> None:
        """End of `stream`: its last line without a newline counts."""
        if stream in SCRIPT_STREAMS:
            self._script_lines(stream, b"", at_end=True)
            self.closed.add(stream)
            return
        rest = self._partial[stream].take()
        if rest:
            if stream == EVENTS:
                self._event_line(rest)
            else:
                self._output_line(rest, stream)
        self.closed.add(stream)

    def _live_line(self, stream: str) -> None:
        buffer = self._partial[stream]
        if not buffer.has_cr:
            return
        shown = visible_text(buffer.last(LIVE_WINDOW_BYTES))
        if shown and shown != self._live[stream]:
            self._live[stream] = shown
            text = shown.decode("utf-8", errors="replace")
            self._deliver(Log(stream=stream, kind=output_lines.OUTPUT, text=text, partial=True,
                              job_id=self._job_id()))

    def _event_line(self, raw: bytes) -> None:
        try:
            event = event_from_json(json.loads(raw))
        except (ValueError, KeyError) as exc:
            event = Log(stream=EVENTS, kind=output_lines.ERROR, text=f"unreadable event ({exc}): {raw[:200]!r}")
        if isinstance(event, events.Warm):
            self._placement_is_the_panels = PANELS_PLACEMENT_STEP in event.applied
        elif isinstance(event, Log) and event.stream == PANEL and event.kind == output_lines.PLACEMENT:
            self._placement_is_the_panels = False  # the script turned it on too: bare, it sees the lines
        if isinstance(event, events.JOB_CLOSING) and event.job_id:
            self.closing.append(event)
        else:
            self._deliver(event)

    def _output_block(self, block: bytes, lines: list[bytes], stream: str) -> None:
        self._live[stream] = b""
        text = block.decode("utf-8", errors="replace")
        for line in lines[-KEPT_LINES:]:
            self._on_line(line.decode("utf-8", errors="replace"))
        raw = block if "\ufffd" in text else None  # not UTF-8: the record keeps the bytes as printed
        self._deliver(Log(stream=stream, kind=output_lines.OUTPUT, text=text, raw=raw, job_id=self._job_id()))

    def _output_line(self, raw: bytes, stream: str) -> None:
        """One finished line as printed; shown as a terminal would show it (`\r` redraws collapsed, bytes that
        are not UTF-8 replaced), with the printed bytes kept in the event's `raw` when they differ."""
        self._live[stream] = b""
        shown = visible_text(raw)
        line = shown.decode("utf-8", errors="replace")
        exact = raw if shown is not raw or "\ufffd" in line else None
        self._on_line(line)
        kind, placed = output_lines.parse_line(line, stream)
        tensorflow = output_lines.is_tensorflow_log(line)
        if stream == STDERR:
            # TF's multi-line C++ messages continue on unprefixed lines.
            if kind == output_lines.OUTPUT and self._stderr_kind in output_lines.CONTINUED_KINDS:
                kind = self._stderr_kind
                tensorflow = self._stderr_tf
            elif output_lines.starts_tf_message(line):
                self._stderr_kind = kind
            else:
                self._stderr_kind = kind if kind != output_lines.OUTPUT else ""
            self._stderr_tf = tensorflow
        if placed is not None:
            self._deliver(events.Placement.of(placed, stream=stream, line=line, raw=exact, job_id=self._job_id()))
        else:
            self._deliver(Log(stream=stream, kind=kind, text=line, raw=exact, job_id=self._job_id(),
                              source=output_lines.TENSORFLOW if tensorflow else None))

    # -- the script's own output: the script's, but for TensorFlow's placement lines -------------------------
    def _script_lines(self, key: str, data: bytes, at_end: bool = False) -> None:
        """The script's finished lines of one stream, as one log event a batch, its `raw` the bytes exactly as
        written (line ends included; at the end, a last piece without one as it is); bounded like any output
        line. Its `text` is what a terminal shows (`\r` redraws collapsed, bytes that are not UTF-8 replaced).

        TensorFlow's C++ log reaches the script's stderr as in a bare run: its placement lines (`placer.cc` and
        `execute.cc`) are also placement events for the device map, and when the placement log is the profile's,
        not the script's, they are taken out (their echo on stdout never reaches the pipe then)."""
        stream = STDOUT if key == SCRIPT_STDOUT else STDERR
        buffer = self._partial[key]
        lines: list[bytes] = []
        last_end = data.rfind(b"\n")
        if last_end < 0:
            buffer.add(data)
        else:
            first_end = data.find(b"\n")
            buffer.add(data[:first_end])
            lines.append(buffer.take())
            if last_end > first_end:
                lines += data[first_end + 1:last_end].split(b"\n")
            buffer.add(data[last_end + 1:])
        if at_end and buffer.kept_bytes:
            lines.append(buffer.take())  # the stream's last piece, without a line end: as written
            last_piece = lines[-1]
        else:
            last_piece = None
        if lines and stream == STDERR and (b".cc:" in data or b".cc:" in lines[0] or self._in_mapping):
            lines = self._placements(lines)
            if last_piece is not None and (not lines or lines[-1] is not last_piece):
                last_piece = None
        exact = b"".join(line + b"\n" for line in (lines[:-1] if last_piece is not None else lines))
        if last_piece is not None:
            exact += last_piece
        if lines:
            shown = [visible_text(line) for line in lines] if any(b"\r" in line for line in lines) else lines
            self._live[key] = b""
            for line in shown[-KEPT_LINES:]:
                self._on_line(line.decode("utf-8", errors="replace"))
            text = b"\n".join(shown).decode("utf-8", errors="replace")
            self._deliver(Log(stream=stream, kind=output_lines.OUTPUT, text=text, source=SCRIPT, raw=exact,
                              job_id=self._job_id()))
        if buffer.has_cr:
            live = visible_text(buffer.last(LIVE_WINDOW_BYTES))
            if live and live != self._live[key]:
                self._live[key] = live
                self._deliver(Log(stream=stream, kind=output_lines.OUTPUT, partial=True, source=SCRIPT,
                                  text=live.decode("utf-8", errors="replace"), job_id=self._job_id()))

    def _placements(self, lines: list[bytes]) -> list[bytes]:
        """Deliver the placement events of TensorFlow's lines among a script's stderr `lines`; returns the lines
        that stay the script's (all of them, unless the placement log is the profile's)."""
        kept: list[bytes] = []
        for raw in lines:
            if self._in_mapping and _MAPPING_LINE.match(raw):
                if not self._placement_is_the_panels:
                    kept.append(raw)
                continue
            self._in_mapping = False
            if not _TF_PLACEMENT_LINE.match(raw):
                kept.append(raw)
                continue
            if b"Device mapping:" in raw:  # the placement log's account of a Session's devices
                self._in_mapping = True
                if not self._placement_is_the_panels:
                    kept.append(raw)
                continue
            line = raw.decode("utf-8", errors="replace")
            _, placed = output_lines.parse_line(line, STDERR)
            if placed is not None:
                self._deliver(events.Placement.of(placed, stream=STDERR, line=line, job_id=self._job_id()))
            if placed is None or not self._placement_is_the_panels:
                kept.append(raw)
        return kept
