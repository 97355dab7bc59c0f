"""Run history: each run's configuration, event stream, output and result, written as it happens.

Layout of <home>/runs/<run_id>/:
- run.json: the summary, rewritten atomically;
- output.txt: the run's stdout and stderr lines as raw text, one per line (flushed at least every
  FLUSH_S and before every other event);
- events.jsonl: every other event, one JSON object per line, each with `at`, the byte offset into the
  output at which it came; and `{"output_stream": "stderr", "at": N}` where the output switches stream
  (`script-stdout` and `script-stderr` name a user's script's own lines, never classified by their shape).
Past the per-run cap (RECORD_CAP_ENV MB, default 100), the output's head is kept in output.txt and its tail
in the last few output.tail.N segments; the summary's `output` says how many lines were dropped between.
Log and placement events are rebuilt from the lines when a run is read. Records written before this
layout (every line an event in events.jsonl) still load.

Writing never stops a run: every write goes through `RunRecorder._guarded`; the first that fails (a full
disk, a read-only or vanished folder) ends the recording, and the summary says `incomplete` with the reason.
run.json is created padded with RESERVED_BYTES of spaces, so the final summary can still be written in place
over them when the disk is full.

Reading is total: a damaged run.json (not JSON, not UTF-8, wrong types) lists that run as `unreadable` with
the reason; damaged lines of events.jsonl are skipped and counted in a warning in the run's log. Files are
opened only through `open_regular` (never blocking: a FIFO, device or folder in their place is named, not
read) and read up to a cap. A run.json never written (a full disk as the run started) lists as `incomplete`.

Folders are created 0700 and files 0600 (records hold what scripts print); an older, open history is left
as it is and said so once (a marker file, LOOSE_NOTICE, in the runs folder).
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import json
import logging
import os
import re
import secrets
import stat
import time
from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, BinaryIO

import platformdirs
import psutil
from tf_device_panel.core.client.records import (
    OUTCOME_FIELDS,
    Cancel,
    JsonObject,
    OutputRecord,
    RunError,
    RunPeaks,
    RunSummary,
    SummaryError,
    TailSegment,
    is_number,
    is_whole,
    json_type,
)
from tf_device_panel.core.oom import OomReport
from tf_device_panel.core.protocol.events import Event, EventError, Log, Placement
from tf_device_panel.core.protocol.events import from_json as event_from_json
from tf_device_panel.core.protocol.streams import OUTPUT_STREAMS, SCRIPT_STREAMS, LineBuffer, StreamDemux, split_lines
from tf_device_panel.core.text import clip, object_without_duplicates

log = logging.getLogger(__name__)

HOME_ENV = "TF_DEVICE_PANEL_HOME"
RECORD_CAP_ENV = "TF_DEVICE_PANEL_RECORD_CAP_MB"
DEFAULT_CAP_MB = 100
TAIL_SEGMENTS = 4          # the tail is kept in this many segments of a quarter of half the cap each
FLUSH_S = 0.2
RESERVED_BYTES = 16384     # spaces after run.json's first version: room for the final summary on a full disk
MAX_SUMMARY_BYTES = 64 * 1024 * 1024  # a run.json larger than this is not a summary this panel wrote
UNREADABLE = "unreadable"
INCOMPLETE = "incomplete"  # a run whose summary was never written (a full disk as it started)


MAX_EVENT_LINE_BYTES = 16 * 1024 * 1024   # one events.jsonl line longer than this is damage, skipped
MAX_OUTPUT_FILE_BYTES = 1024 * 1024 * 1024  # an output file is read up to this (the recorder writes far less)
MAX_EVENTS_FILE_BYTES = 1024 * 1024 * 1024  # events.jsonl likewise (a million placements take about 40 MB)


class NotARegularFile(OSError):
    """A record's file is a FIFO, a device, a socket or a folder: never opened for reading (a FIFO's open
    would wait forever for a writer)."""


_SPECIAL_KINDS = ((stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
                  (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a folder"))


def open_regular(path: Path) -> BinaryIO:
    """`path` opened for reading if it is a regular file (a link to one is fine). The open never blocks
    (O_NONBLOCK: a FIFO with no writer would hold it forever); anything else raises NotARegularFile naming
    what stands there. The one way the history's files are opened for reading."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            kind = next((name for test, name in _SPECIAL_KINDS if test(mode)), "not a regular file")
            raise NotARegularFile(errno.EINVAL, f"{path.name} is {kind}, not a regular file")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_regular(path: Path, cap: int) -> tuple[bytes, bool]:
    """At most `cap` bytes of a regular file (`open_regular`), and whether there was more."""
    with open_regular(path) as handle:
        data = handle.read(cap + 1)
    return data[:cap], len(data) > cap


class HistoryError(Exception):
    """The history folder itself cannot be used (a file where the folder should be, no permission):
    the message says what to do."""


def home() -> Path:
    override = os.environ.get(HOME_ENV)
    if not override:
        return platformdirs.user_data_path("tf-device-panel")
    try:
        return Path(override).expanduser()
    except RuntimeError:  # "~nouser/…": no such user, so no home to expand
        raise HistoryError(f"{HOME_ENV}={override!r}: {override.split('/')[0]!r} names no user of this machine; "
                           "set it to an existing folder") from None


PRIVATE_FOLDER, PRIVATE_FILE = 0o700, 0o600  # records hold scripts' output: only their owner reads them
LOOSE_NOTICE = ".loose-permissions-noted"     # in the runs folder: the notice below was given once


def _private_opener(path: str, flags: int) -> int:
    """open()'s opener for the history's files: created 0600 (existing ones keep their mode)."""
    return os.open(path, flags, PRIVATE_FILE)


def _open_private(path: Path, mode: str, **kwargs: Any) -> Any:
    """`path` opened to append (`mode` "a" or "ab"), created 0600."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, PRIVATE_FILE)
    try:
        return os.fdopen(fd, mode, **kwargs)
    except BaseException:
        os.close(fd)
        raise


def _make_run_folder(folder: Path) -> None:
    make_private_folders(folder.parent)
    folder.mkdir(mode=PRIVATE_FOLDER)  # exists already: an error (two runs never share a folder)


def make_private_folders(folder: Path) -> None:
    """`folder` and each missing folder above it, created 0700; existing ones are left as they are."""
    missing = []
    for path in (folder, *folder.parents):
        if path.is_dir():
            break
        missing.append(path)
    for path in reversed(missing):
        with contextlib.suppress(FileExistsError):  # made meanwhile by another run
            path.mkdir(mode=PRIVATE_FOLDER)


def _write_json_atomic(path: Path, data: Any, reserve: int = 0) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        text = json.dumps(data, indent=2, default=str) + "\n"
        with open(tmp, "w", encoding="utf-8", opener=_private_opener) as handle:
            handle.write(text + " " * reserve)
        os.replace(tmp, path)
    except OSError:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


def _write_json_in_place(path: Path, data: Any) -> None:
    """Overwrite `path` within its present size (its reserved spaces), allocating nothing: the last resort
    on a full disk. Raises OSError when the summary does not fit or the file cannot be written."""
    text = json.dumps(data, separators=(",", ":"), default=str).encode()
    with path.open("r+b") as handle:
        size = os.fstat(handle.fileno()).st_size
        if len(text) + 1 > size:
            raise OSError(errno.ENOSPC, "the final summary does not fit the space reserved for it")
        handle.write(text + b"\n" + b" " * (size - len(text) - 1))


_WHAT_TO_DO = {
    errno.ENOSPC: "free some space there",
    errno.EDQUOT: "free some space there",
    errno.EROFS: f"set {HOME_ENV} to a writable folder",
    errno.EACCES: f"check its permissions, or set {HOME_ENV} to a writable folder",
    errno.EPERM: f"check its permissions, or set {HOME_ENV} to a writable folder",
    errno.ENOTDIR: f"a file stands where a folder should be; move it, or set {HOME_ENV} to another folder",
    errno.EEXIST: f"a file stands where a folder should be; move it, or set {HOME_ENV} to another folder",
}


def problem_text(exc: OSError, what: Path | str) -> str:
    """One line for a failed write: what could not be written, why, and what to do."""
    reason = exc.strerror or str(exc)
    todo = _WHAT_TO_DO.get(exc.errno or 0)
    return f"could not write {what}: {reason}" + (f" ({todo})" if todo else "")


def record_cap_bytes() -> int:
    """The per-run output cap from RECORD_CAP_ENV (MB); a bad value is named, never silently replaced."""
    text = os.environ.get(RECORD_CAP_ENV, "").strip()
    if not text:
        return DEFAULT_CAP_MB * 1024 * 1024
    try:
        megabytes = float(text)
    except ValueError:
        raise ValueError(f"{RECORD_CAP_ENV}={text!r}: expected a number of megabytes, e.g. 100") from None
    if megabytes <= 0:
        raise ValueError(f"{RECORD_CAP_ENV}={text!r}: expected more than 0 megabytes")
    return int(megabytes * 1024 * 1024)


def is_output_line(event: Event) -> bool:
    """A line the run printed on its stdout/stderr: stored as raw text, not as an event."""
    match event:
        case Log(stream=stream, task=None) | Placement(stream=stream, task=None):
            return stream in OUTPUT_STREAMS
    return False


def _write(handle: Any, data: Any) -> None:
    """The one place the recorder's files are written (tests inject faults here)."""
    handle.write(data)


class RunRecorder:
    """Writes one run's record as it happens. Never raises: the first failed write (full disk, read-only
    or removed folder, no permission) is kept in `problem`, later writes are skipped, and `finish` marks the
    summary `incomplete` with that reason."""

    def __init__(self, folder: Path, summary: RunSummary, cap_bytes: int | None = None):
        self.folder = folder
        self.run_id = folder.name
        self.summary = summary
        self.cap_bytes = record_cap_bytes() if cap_bytes is None else cap_bytes
        self.problem: str | None = None
        self._events: Any = None
        self._output: Any = None
        self._offset = 0          # bytes of output so far, dropped ones included
        self._lines = 0
        self._stream = "stdout"
        self._last_flush = time.monotonic()
        self._segment_bytes = max(self.cap_bytes // 2 // TAIL_SEGMENTS, 1)
        self._tail: deque[TailSegment] = deque()  # each kept segment of the output past half the cap
        self._dropped_lines = 0
        self._segments = 0
        self._closed = False
        self._summary_written = False
        self._peaks = RunPeaks()  # taken from the events as they come, written into run.json at the end
        self._guarded(folder, lambda: _make_run_folder(folder))
        self._guarded(folder / "run.json",
                      lambda: _write_json_atomic(folder / "run.json", summary.to_json(), reserve=RESERVED_BYTES))
        self._summary_written = self.problem is None
        self._events = self._guarded(folder / "events.jsonl",
                                     lambda: _open_private(folder / "events.jsonl", "a", encoding="utf-8",
                                                           buffering=1))
        self._output = self._guarded(folder / "output.txt",
                                     lambda: _open_private(folder / "output.txt", "ab", buffering=1024 * 1024))

    @property
    def failed(self) -> bool:
        return self.problem is not None

    def _guarded(self, what: Path, action: Any) -> Any:
        """Run one write; on failure remember why (the first failure only), stop recording, return None."""
        if self.problem is not None:
            return None
        try:
            return action()
        except (OSError, ValueError) as exc:  # ValueError: a file closed under us ("I/O on closed file")
            self.problem = problem_text(exc, what) if isinstance(exc, OSError) else f"could not write {what}: {exc}"
            self._close_files()
            return None

    def _close_files(self) -> None:
        for handle in (self._output, self._events):
            if handle is not None:
                with contextlib.suppress(OSError, ValueError):
                    handle.close()
        self._output = self._events = None

    def append(self, event: Event) -> None:
        if not self._closed:
            self._peaks.take(event)
        if self._closed or self.problem is not None or (isinstance(event, Log) and event.partial):
            return
        if isinstance(event, (Log, Placement)) and is_output_line(event):
            self._append_line(event)
            return
        self._flush()
        entry = event.to_json()
        entry["at"] = self._offset
        self._write_event(json.dumps(entry, default=str) + "\n")

    def _write_event(self, line: str) -> None:
        handle = self._events
        self._guarded(self.folder / "events.jsonl", lambda: _write(handle, line))

    def _append_line(self, event: Log | Placement) -> None:
        stream = event.stream
        if isinstance(event, Log) and event.source == "script":
            stream = f"script-{stream}"  # read back as the script's own, never classified by its shape
        if stream != self._stream:
            self._stream = stream
            self._write_event(json.dumps({"output_stream": stream, "at": self._offset}) + "\n")
        text = event.line if isinstance(event, Placement) else event.text
        raw = event.raw  # the bytes as printed, where the text shown differs from them
        if isinstance(event, Log) and event.source == "script" and raw is not None:
            data = raw  # the script's bytes exactly, line ends included (none added after a last piece)
            lines = max(raw.count(b"\n"), 1)
        else:
            data = (raw if raw is not None else text.encode("utf-8", "surrogateescape")) + b"\n"
            lines = text.count("\n") + 1  # a block of plain output is one event
        if len(data) > self._segment_bytes:  # one line larger than a tail segment: its head and tail, as a run's
            clipped = LineBuffer(self._segment_bytes)
            clipped.add(data[:-1])
            data = clipped.take() + b"\n"
            lines = data.count(b"\n")
        head_full = not self._tail and self._offset + len(data) > self.cap_bytes // 2
        if head_full or (self._tail and self._tail[-1].bytes >= self._segment_bytes):
            self._next_segment()
        output = self._output
        name = self._tail[-1].file if self._tail else "output.txt"
        self._guarded(self.folder / name, lambda: _write(output, data))
        self._offset += len(data)
        self._lines += lines
        if self._tail:
            self._tail[-1].lines += lines
            self._tail[-1].bytes += len(data)
        now = time.monotonic()
        if now - self._last_flush > FLUSH_S:
            self._flush(now)

    def _next_segment(self) -> None:
        """Past half the cap: the rest goes to rotating tail segments, the oldest dropped."""
        output = self._output
        self._guarded(self.folder, lambda: output.close())
        self._segments += 1
        name = f"output.tail.{self._segments}"
        self._tail.append(TailSegment(file=name, start=self._offset))
        self._output = self._guarded(self.folder / name, lambda: _open_private(self.folder / name, "ab",
                                                                               buffering=1024 * 1024))
        while len(self._tail) > TAIL_SEGMENTS:
            oldest = self._tail.popleft()
            self._dropped_lines += oldest.lines
            with contextlib.suppress(OSError):
                (self.folder / oldest.file).unlink()
        self.summary.output = self._output_summary()

    def _output_summary(self) -> OutputRecord:
        return OutputRecord(bytes=self._offset, lines=self._lines, dropped_lines=self._dropped_lines,
                            cap_bytes=self.cap_bytes, tail=tuple(replace(segment) for segment in self._tail))

    def _flush(self, now: float | None = None) -> None:
        output = self._output
        if output is not None:
            self._guarded(self.folder / (self._tail[-1].file if self._tail else "output.txt"),
                          lambda: output.flush())
        self._last_flush = now or time.monotonic()

    def finish(self, *, status: str, result: object = None, error: RunError | None = None,
               duration_s: float | None = None, returncode: int | None = None, oom: OomReport | None = None,
               fallbacks: Sequence[JsonObject] = (), placement_counts: Sequence[list[object]] = (),
               cancel: Cancel | None = None) -> None:
        """The run's outcome into its summary, written over run.json: the record's last write."""
        if self._closed:
            return
        self._closed = True
        output = self._output
        if output is not None:
            self._guarded(self.folder / (self._tail[-1].file if self._tail else "output.txt"),
                          lambda: output.close())
        self._output = None
        summary = self.summary
        summary.status, summary.result, summary.error, summary.duration_s = status, result, error, duration_s
        summary.returncode, summary.oom, summary.fallbacks = returncode, oom, list(fallbacks)
        summary.placement_counts, summary.cancel = list(placement_counts), cancel
        summary.peaks = self._peaks  # kept with the run: History and `runs` read them here, not from its events
        summary.show(*OUTCOME_FIELDS)
        summary.output = self._output_summary()
        summary.finished = time.time()
        if self.problem is not None:
            summary.incomplete = self.problem
        self._close_files()
        if not self._summary_written:
            # The first summary could not be written: once more now (space may have been freed), else the
            # folder alone lists the run as `incomplete`.
            with contextlib.suppress(OSError):
                if self.folder.is_dir():
                    _write_json_atomic(self.folder / "run.json", self.summary.to_json())
            return
        path = self.folder / "run.json"
        try:
            _write_json_atomic(path, self.summary.to_json())
            return
        except OSError as exc:
            self.problem = self.problem or problem_text(exc, path)
        self.summary.incomplete = self.problem
        # The disk is full: the summary goes over run.json's reserved spaces, the bulky parts left out first.
        bulky = ("placement_counts", "fallbacks", "devices", "result")
        for drop in range(len(bulky) + 1):
            with contextlib.suppress(OSError):
                _write_json_in_place(path, {k: v for k, v in self.summary.to_json().items() if k not in bulky[:drop]})
                return


class RunHistory:
    def __init__(self, root: Path | None = None, cap_bytes: int | None = None):
        self.root = (root or home()) / "runs"
        self.cap_bytes = cap_bytes

    def new_run(self, job: str, params: JsonObject, config: JsonObject, devices: JsonObject | None) -> RunRecorder:
        stamp = time.strftime("%Y%m%d-%H%M%S")
        run_id = f"{stamp}-{job}-{secrets.token_hex(3)}"
        summary = RunSummary(run_id=run_id, job=job, params=params, config=config, devices=devices, status="running",
                             started=time.time(), client_pid=os.getpid())
        self._note_loose_permissions()
        return RunRecorder(self.root / run_id, summary, self.cap_bytes)

    def _note_loose_permissions(self) -> None:
        """A history made before it was private (0755 folders) is left as it is, and said so once: a warning
        the first time a run is recorded there, then a marker file in the runs folder."""
        root = self.root
        try:  # either folder closed to others keeps the records private
            modes = [(path, stat.S_IMODE(path.stat().st_mode)) for path in (root.parent, root)]
        except OSError:
            return  # not there yet (it will be made private) or not readable (the recorder says why)
        if not all(mode & 0o077 for _, mode in modes) or (root / LOOSE_NOTICE).exists():
            return
        with contextlib.suppress(OSError), _open_private(root / LOOSE_NOTICE, "a", encoding="utf-8") as handle:
            handle.write("tf-device-panel said once that this history can be read by other users.\n")
        log.warning("the run history can be read by other users of this machine (%s), and records hold what "
                    "scripts print; it was left as it is: `chmod -R go= %s` makes it private (said once)",
                    ", ".join(f"{path} {mode:o}" for path, mode in modes), root.parent)

    def summaries(self, limit: int | None = None, offset: int = 0) -> list[RunSummary]:
        """At most `limit` summaries (all with None), newest first, after skipping the `offset` newest; a run whose
        client died mid-run shows as 'interrupted', a run whose run.json is damaged as 'unreadable' with the reason.
        Raises HistoryError only when the history folder itself cannot be listed."""
        return list(self.iter_summaries(limit, offset))

    def iter_summaries(self, limit: int | None = None, offset: int = 0) -> Iterator[RunSummary]:
        """`summaries` one at a time, each read when it is asked for: a caller that lets each go before the next
        (`runs --json`) holds one run's summary at a time, however long the history. The folder is listed now
        (HistoryError is raised here, before any summary)."""
        if limit is not None and limit < 0:
            raise ValueError(f"limit must be 0 or more, got {limit}")
        if offset < 0:
            raise ValueError(f"offset must be 0 or more, got {offset}")
        folders = self._run_folders() if limit != 0 else []
        chosen = itertools.islice(folders, offset, None if limit is None else offset + limit)
        return (self._summary(folder) for folder in chosen)

    def run_ids(self) -> list[str]:
        """Every run's id (its folder's name), newest first: one listing of the folder, no record read."""
        return [folder.name for folder in self._run_folders()]

    def _run_folders(self) -> list[Path]:
        root = self.root
        try:
            names = sorted(os.listdir(root), reverse=True)
        except FileNotFoundError:
            return []
        except NotADirectoryError:
            blocking = next((path for path in (root, *root.parents) if path.exists() and not path.is_dir()), root)
            where = "" if blocking == root else f" ({root} is inside it)"
            raise HistoryError(f"the run history cannot be read: {blocking} is a file, not a folder{where}; move "
                               f"it away, or set {HOME_ENV} to another folder") from None
        except OSError as exc:
            raise HistoryError(f"cannot read the run history {root}: {exc.strerror or exc}; check its "
                               f"permissions, or set {HOME_ENV} to another folder") from None
        folders = []
        for name in names:
            folder = root / name
            if not name.startswith(".") and folder.is_dir():
                folders.append(folder)
        return folders

    def _summary(self, folder: Path) -> RunSummary:
        try:
            summary = read_summary(folder / "run.json")
        except NeverWritten as exc:
            return never_written_summary(folder, str(exc))
        except SummaryError as exc:
            return unreadable_summary(folder, str(exc))
        summary.run_id = folder.name  # the folder is what get() and events() find it by
        if summary.status == "running":
            pid = summary.client_pid
            if pid is None or not psutil.pid_exists(pid):
                summary.status = "interrupted"
        return summary

    def get(self, run_id: str) -> RunSummary:
        """The run's summary, checked like in `summaries` (a damaged one comes back as 'unreadable')."""
        return self._summary(self._folder(run_id))

    def events(self, run_id: str) -> list[Event]:
        """The recorded events, output lines made log and placement events again in their places. A line
        cut short by a crash is skipped, not fatal; other damaged lines are skipped and counted in a warning."""
        folder = self._folder(run_id)
        entries: list[RecordedEntry] = []
        damaged: list[str] = []
        try:
            with open_regular(folder / "events.jsonl") as handle:
                for number, line in enumerate(_lines(handle), 1):
                    if handle.tell() > MAX_EVENTS_FILE_BYTES:
                        damaged.append(f"larger than {MAX_EVENTS_FILE_BYTES >> 20} MB: the rest was not read")
                        break
                    entry, reason = _entry(line) if line is not None else (None, "longer than "
                                                                             f"{MAX_EVENT_LINE_BYTES >> 20} MB")
                    if entry is not None:
                        entries.append(entry)
                    elif reason and (line is None or line.endswith(b"\n")):  # cut short by a crash: no damage
                        damaged.append(f"line {number}: {reason}")
        except OSError as exc:
            damaged.append(f"cannot read it: {exc.strerror or exc}")
        summary = self.get(run_id)
        if (folder / "output.txt").exists() and summary.status != UNREADABLE:
            try:
                merged = _merge_output(folder, entries, summary.output or OutputRecord())
            except OSError as exc:
                damaged.append(f"cannot read the output: {exc.strerror or exc}")
                merged = [entry.event for entry in entries if entry.event is not None]
        else:
            merged = [entry.event for entry in entries if entry.event is not None]
        if damaged:
            text = (f"{len(damaged)} damaged part(s) of this run's record skipped (events.jsonl "
                    f"{clip('; '.join(damaged[:3]), 300)})")
            merged.insert(0, Log(stream="panel", kind="warning", text=text, time=merged[0].time if merged else 0.0))
        return merged

    def _folder(self, run_id: str) -> Path:
        folder = self.root / run_id
        if "/" in run_id or "\0" in run_id or run_id.startswith(".") or not folder.is_dir():
            raise KeyError(f"no run {run_id!r} in {self.root}")
        return folder


class NeverWritten(SummaryError):
    """No run.json, or one with nothing in it: the run's folder was made but its summary could not be written
    (a full disk when the run started). Not damage: the row says `incomplete`."""


def read_summary(path: Path) -> RunSummary:
    """A run.json read and checked field by field; SummaryError says what is wrong."""
    try:
        data, larger = read_regular(path, MAX_SUMMARY_BYTES)
    except FileNotFoundError:
        raise NeverWritten("run.json was never written (was the disk full when the run started?)") from None
    except OSError as exc:
        raise SummaryError(f"run.json: {exc.strerror or exc}") from None
    if not data.strip():
        raise NeverWritten("run.json is empty (was the disk full when the run started?)")
    if larger:
        raise SummaryError(f"run.json is larger than {MAX_SUMMARY_BYTES // (1024 * 1024)} MB")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SummaryError(f"run.json is not UTF-8 text (byte {exc.start})") from None
    try:
        summary = json.loads(text, object_pairs_hook=object_without_duplicates)
    except (ValueError, RecursionError) as exc:
        raise SummaryError(f"run.json is not valid JSON ({clip(str(exc), 120)})") from None
    if not isinstance(summary, dict):
        raise SummaryError(f"run.json holds {json_type(summary)}, not an object")
    return RunSummary.from_json(summary, run_id=path.parent.name)


def unreadable_summary(folder: Path, reason: str) -> RunSummary:
    """The row a damaged run shows: its folder name, when the folder last changed, and why."""
    try:
        started = folder.stat().st_mtime
    except OSError:
        started = 0.0
    return RunSummary(run_id=folder.name, job="", status=UNREADABLE, started=started,
                      error=RunError(type="Unreadable", message=reason),
                      shown=("run_id", "status", "started", "params", "error"))


_RUN_ID = re.compile(r"\d{8}-\d{6}-(?P<job>.+)-[0-9a-f]{6}")


def never_written_summary(folder: Path, reason: str) -> RunSummary:
    """The row of a run whose summary was never written: what its folder's name tells (the job), when the
    folder last changed, and why the record is incomplete."""
    match = _RUN_ID.fullmatch(folder.name)
    row = replace(unreadable_summary(folder, reason), status=INCOMPLETE, error=None, incomplete=reason,
                  job=match.group("job") if match else "?")
    row.show("incomplete", "job")
    return row


@dataclass(frozen=True)
class RecordedEntry:
    """One events.jsonl line decoded: an event, or where the output switches stream; `at`, the byte offset into
    the output at which it came."""

    at: int
    event: Event | None = None
    output_stream: str | None = None


def _entry(line: bytes) -> tuple[RecordedEntry | None, str]:
    """One events.jsonl line as a checked entry, or (None, why not); a blank line is (None, "")."""
    if not line.strip():
        return None, ""
    try:
        entry = json.loads(line.decode("utf-8"))
    except UnicodeDecodeError:
        return None, "not UTF-8"
    except (ValueError, RecursionError):
        return None, "not JSON"
    if not isinstance(entry, dict):
        return None, f"{json_type(entry)}, not an object"
    at = entry.get("at", 0)
    if not (is_whole(at) and at >= 0):
        return None, f"'at' must be a byte offset, got {clip(repr(at), 40)}"
    if "output_stream" in entry:
        stream = entry["output_stream"]
        known = stream in OUTPUT_STREAMS or stream in SCRIPT_STREAMS
        return (RecordedEntry(at, output_stream=stream), "") if known else (None, "unknown output stream")
    if not is_number(entry.get("time", 0.0)):  # from_json takes any number; a record's time is a finite one
        return None, "not an event"
    try:
        return RecordedEntry(at, event=event_from_json({"time": 0.0, **entry})), ""
    except EventError:
        return None, "not an event"


def _lines(handle: BinaryIO) -> Iterator[bytes | None]:
    """The lines of a record's file, each at most MAX_EVENT_LINE_BYTES; None for a longer one (skipped, so
    one endless line cannot fill the memory)."""
    while True:
        line = handle.readline(MAX_EVENT_LINE_BYTES + 1)
        if not line:
            return
        if len(line) <= MAX_EVENT_LINE_BYTES or line.endswith(b"\n"):
            yield line
            continue
        while line and not line.endswith(b"\n"):  # the rest of the long line
            line = handle.readline(MAX_EVENT_LINE_BYTES)
        yield None


def _output_chunks(folder: Path, output: OutputRecord) -> list[tuple[int, bytes]]:
    """(start offset, bytes) of each kept piece of output: the head, then the tail segments. Each is read up
    to MAX_OUTPUT_FILE_BYTES; OSError (NotARegularFile among them) when the head cannot be read."""
    chunks = [(0, read_regular(folder / "output.txt", MAX_OUTPUT_FILE_BYTES)[0])]
    for segment in output.tail:  # names and starts checked by read_summary
        with contextlib.suppress(OSError):
            chunks.append((segment.start, read_regular(folder / segment.file, MAX_OUTPUT_FILE_BYTES)[0]))
    return chunks


def _merge_output(folder: Path, entries: list[RecordedEntry], output: OutputRecord) -> list[Event]:
    merged: list[Event] = []
    time_now = [0.0]

    def deliver(event: Event) -> None:
        for line in split_lines(event):
            merged.append(line.replace(time=time_now[0]))

    demux = StreamDemux(deliver, line_cap=None)  # recorded lines are already within the cap
    stream = "stdout"
    pending = iter(sorted(enumerate(entries), key=lambda item: (item[1].at, item[0])))
    upcoming = next(pending, None)
    dropped_reported = False
    for start, data in _output_chunks(folder, output):
        if start > 0 and not dropped_reported and output.dropped_lines:
            dropped_reported = True
            merged.append(Log(stream="panel", kind="warning", time=time_now[0],
                              text=f"… {output.dropped_lines} lines dropped here: the run printed more than the "
                                   f"record's cap of {output.cap_bytes // (1024 * 1024)} MB"))
        offset = start
        # Line by line with their line ends (not splitlines: a lone "\r" inside a line is no line end), each cut
        # where the output switches stream: a script's last piece may end without one.
        cuts = sorted({entry.at - start for entry in entries
                       if entry.output_stream is not None and start < entry.at < start + len(data)})
        for raw in (piece for part in _cut(data, cuts) for piece in _lines_of(part)):
            while upcoming is not None and upcoming[1].at <= offset:
                stream = _take(upcoming[1], merged, time_now) or stream
                upcoming = next(pending, None)
            if stream in SCRIPT_STREAMS:
                demux.feed(stream, raw)
            else:
                demux.feed(stream, raw if raw.endswith(b"\n") else raw + b"\n")
            offset += len(raw)
    while upcoming is not None:
        _take(upcoming[1], merged, time_now)
        upcoming = next(pending, None)
    for key in sorted(SCRIPT_STREAMS):
        demux.close(key)  # a script's last piece without a line end
    return merged


def _lines_of(data: bytes) -> list[bytes]:
    """`data` cut after each "\n" (a lone "\r" is no line end), line ends kept; the last piece may have none."""
    pieces = [line + b"\n" for line in data.split(b"\n")]
    pieces[-1] = pieces[-1][:-1]
    return [piece for piece in pieces if piece]


def _cut(data: bytes, offsets: list[int]) -> list[bytes]:
    bounds = [0, *offsets, len(data)]
    return [data[a:b] for a, b in itertools.pairwise(bounds)]


def _take(entry: RecordedEntry, merged: list[Event], time_now: list[float]) -> str | None:
    """Add a recorded event to `merged`; returns the stream an `output_stream` entry switches to."""
    if entry.event is not None:
        time_now[0] = entry.event.time
        merged.append(entry.event)
    return entry.output_stream
