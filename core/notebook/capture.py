"""TensorFlow's own output in the kernel, read at the file-descriptor level and sorted line by line.

TensorFlow's C++ code writes its placement log and its allocator's out-of-memory dump to fd 2 (and echoes each
placement, unprefixed, on fd 1), below Python's `sys.stdout`/`sys.stderr`: `contextlib.redirect_stderr` never
sees them. `OutputSieve` puts a pipe on fds 1 and 2 and reads them on a thread of its own:

- while a `%%tf_run` cell runs (`capture()`), every line is kept for the cell's report; placement lines and the
  allocator's dump go no further (the report shows them sorted and explained), every other line goes on to
  where fds 1 and 2 went before (the notebook's output, or the terminal) as it comes;
- between such cells (when `%tf_config` turned the placement log on), placement lines are dropped and the rest
  goes on: the log belongs under the `%%tf_run` cells, not under every cell that touches a tensor.

In a Jupyter kernel TensorFlow writes one more copy of each eager op's line, "Executing op MatMul in device
/job:…", unprefixed, through Python's `sys.stdout` (the kernel's stream, not fd 1): while installed the sieve
also stands in front of `sys.stdout` and sorts those lines the same way.

Putting the fds back (`uninstall`) closes the pipes' last writers, so the threads read to the end and stop.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, TextIO

from tf_device_panel.core.oom import DumpCollector
from tf_device_panel.core.protocol.output_lines import PLACEMENT, parse_line

STREAMS = {1: "stdout", 2: "stderr"}
SYNC_TIMEOUT_S = 5.0
CLOSE_WAIT_S = 1.0
_RAN_OUT = "ran out of memory trying to allocate"
_NOT_A_FAILURE = "not a failure"  # BFC's warning when a caller retries with less: no dump follows
_OOM = "OOM when allocating"
_MARK = b"\0tf-device-panel sync "
_EAGER_ECHO = "Executing op "
# The prefix TensorFlow's C++ log gives an eager op's line: the echo on sys.stdout, prefixed so, is the line the
# panel's parser reads on a run's stderr.
_EAGER_PREFIX = "I0000 00:00:00.000000 0 execute.cc:0] "

try:
    _libc: ctypes.CDLL | None = ctypes.CDLL(None)
except OSError:  # no C library to flush (not Linux or macOS): C stdio's buffers then reach the pipe later
    _libc = None


@dataclass
class Captured:
    """What TensorFlow wrote during one cell: every line by stream, and the allocator's last dump."""

    lines: list[tuple[str, str]] = field(default_factory=list)     # (stream, line)
    dump: DumpCollector = field(default_factory=DumpCollector)


class _Tap:
    """One fd with a pipe in its place, read on a thread; `forward` writes to where the fd pointed before."""

    def __init__(self, fd: int, on_line: Callable[[str, bytes, Callable[[bytes], None]], None]):
        self.fd, self.stream, self.on_line = fd, STREAMS[fd], on_line
        self.saved = os.dup(fd)
        read_end, write_end = os.pipe()
        self.read_end = read_end
        os.dup2(write_end, fd)
        os.close(write_end)
        self._pending = b""
        self._marks: dict[bytes, threading.Event] = {}
        self._marks_lock = threading.Lock()
        self.thread = threading.Thread(target=self._read, name=f"tf-device-panel-{self.stream}", daemon=True)
        self.thread.start()

    def forward(self, data: bytes) -> None:
        view = memoryview(data)
        with contextlib.suppress(OSError):  # where the output went is gone (a closed terminal): nothing to do
            while view:
                view = view[os.write(self.saved, view):]

    def _read(self) -> None:
        while True:
            try:
                chunk = os.read(self.read_end, 65536)
            except OSError:
                chunk = b""
            if not chunk:  # every writer is gone (the fd was put back): the thread's fds are its to close
                if self._pending:
                    self.on_line(self.stream, self._pending, self.forward)
                os.close(self.read_end)
                os.close(self.saved)
                return
            self._pending += chunk
            *complete, self._pending = self._pending.split(b"\n")
            for line in complete:
                self._line(line + b"\n")

    def _line(self, line: bytes) -> None:
        at = line.find(_MARK)
        if at >= 0:
            if at > 0:  # an unfinished line of TensorFlow's before the mark: it ends with the cell
                self.on_line(self.stream, line[:at] + b"\n", self.forward)
            with self._marks_lock:
                mark = self._marks.pop(line[at:], None)
            if mark is not None:
                mark.set()
            return
        self.on_line(self.stream, line, self.forward)

    def sync(self, token: bytes) -> threading.Event:
        """Write a mark through the pipe: once the thread reads it, it has read all that came before."""
        line = _MARK + token + b"\n"
        mark = threading.Event()
        with self._marks_lock:
            self._marks[line] = mark
        os.write(self.fd, line)
        return mark

    def close(self) -> None:
        """Put the fd back. The pipe's last writer closes with it, so the thread reads to the end and stops,
        unless a process started meanwhile inherited the pipe (a server the cell left running): the thread
        then goes on passing that process's output to where it belongs until it exits."""
        os.dup2(self.saved, self.fd)
        self.thread.join(CLOSE_WAIT_S)


class OutputSieve:
    """Fds 1 and 2 through pipes: placement lines and allocator dumps kept for `%%tf_run`'s report (or dropped
    between its cells), everything else passed on. See the module's docstring."""

    def __init__(self) -> None:
        self._taps: list[_Tap] = []
        self._lock = threading.Lock()
        self._captured: Captured | None = None
        self._in_dump = False
        self._syncs = 0
        self._swallow_newline = False

    @property
    def installed(self) -> bool:
        return bool(self._taps)

    def install(self) -> None:
        if not self._taps:
            flush_c_stdio()
            self._taps = [_Tap(fd, self._on_line) for fd in STREAMS]
        if not isinstance(sys.stdout, _PythonStdout):
            sys.stdout = _PythonStdout(sys.stdout, self)

    def uninstall(self) -> None:
        flush_c_stdio()
        taps, self._taps = self._taps, []
        for tap in taps:
            tap.close()
        if isinstance(sys.stdout, _PythonStdout) and sys.stdout.sieve is self:
            sys.stdout = sys.stdout.stream

    def sync(self) -> None:
        """Return once the threads have read everything written to fds 1 and 2 so far (C's stdio buffers
        flushed first: TensorFlow's placement echo on stdout is buffered when stdout is a pipe)."""
        flush_c_stdio()
        self._syncs += 1
        token = f"{os.getpid()}-{self._syncs}".encode()
        marks = [tap.sync(token) for tap in self._taps]
        for mark in marks:
            mark.wait(SYNC_TIMEOUT_S)

    @contextlib.contextmanager
    def capture(self) -> Iterator[Captured]:
        """While the block runs, keep every line (see the module's docstring); the lines are complete when it
        ends. Installs the sieve for the block if it is not installed."""
        temporary = not self.installed
        self.install()
        captured = Captured()
        with self._lock:
            self._captured, self._in_dump = captured, False
        try:
            yield captured
        finally:
            try:
                self.sync()
            finally:
                with self._lock:
                    self._captured, self._in_dump = None, False
                if temporary:
                    self.uninstall()

    def _on_line(self, stream: str, raw: bytes, forward: Callable[[bytes], None]) -> None:
        text = raw.decode("utf-8", errors="replace").rstrip("\r\n")
        kind, _ = parse_line(text, stream)
        # The allocator's dump is written to fd 2 only. Lines of fd 1 are read on another thread and may arrive
        # while a dump is being read: they are never part of it, and never held back with it.
        in_dump_stream = stream == "stderr"
        with self._lock:
            captured = self._captured
            if captured is not None:
                captured.lines.append((stream, text))
                if in_dump_stream:
                    captured.dump.feed(text)
                    if _RAN_OUT in text and _NOT_A_FAILURE not in text:
                        self._in_dump = True
            held = captured is not None and in_dump_stream and (self._in_dump or _OOM in text)
            if in_dump_stream and _OOM in text:
                self._in_dump = False
        if not held and kind != PLACEMENT:  # written outside the lock: where it goes may be slow to read
            forward(raw)


    def python_text(self, text: str) -> str:
        """What of `text`, written to Python's sys.stdout, goes on: all but TensorFlow's eager-op echoes (kept
        while capturing). An echo written without its newline (as print() writes it) takes the next newline."""
        if self._swallow_newline:
            self._swallow_newline = False
            if text.startswith("\n"):
                text = text[1:]
        if _EAGER_ECHO not in text:
            return text
        kept = []
        for line in text.splitlines(keepends=True):
            if line.startswith(_EAGER_ECHO) and line.rstrip("\n").count(" ") == 5:  # Executing op X in device Y
                self._swallow_newline = not line.endswith("\n")
                with self._lock:
                    if self._captured is not None:
                        self._captured.lines.append(("stderr", _EAGER_PREFIX + line.rstrip("\r\n")))
            else:
                kept.append(line)
        return "".join(kept)


class _PythonStdout:
    """Python's sys.stdout with TensorFlow's eager-op echoes sorted out (`OutputSieve.python_text`); everything
    else is the stream it stands in front of."""

    def __init__(self, stream: TextIO, sieve: OutputSieve):
        self.stream, self.sieve = stream, sieve

    def write(self, text: str) -> int:
        kept = self.sieve.python_text(text)
        if kept:
            self.stream.write(kept)
        return len(text)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.stream, name)


def flush_c_stdio() -> None:
    if _libc is not None:
        _libc.fflush(None)
