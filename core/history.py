"""Run history: each run's configuration, event stream, output and result, written as it happens.

Layout of <home>/runs/<run_id>/:
- run.json: the summary, rewritten atomically;
- output.txt: the run's stdout and stderr lines as raw text, one per line (flushed at least every
  FLUSH_S and before every other event);
- events.jsonl: every other event, one JSON object per line, each with `at`, the byte offset into the
  output at which it came; and `{"output_stream": "stderr", "at": N}` where the output switches stream.
Past the per-run cap (RECORD_CAP_ENV MB, default 100), the output's head is kept in output.txt and its tail
in the last few output.tail.N segments; the summary's `output` says how many lines were dropped between.
Log and placement events are rebuilt from the lines when a run is read. Records written before this
layout (every line an event in events.jsonl) still load.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import time
from collections import deque
from pathlib import Path
from typing import Any

import platformdirs
import psutil
from tf_device_panel.core import events
from tf_device_panel.core.events import Event
from tf_device_panel.core.streams import OUTPUT_STREAMS, StreamDemux, split_lines

HOME_ENV = "TF_DEVICE_PANEL_HOME"
RECORD_CAP_ENV = "TF_DEVICE_PANEL_RECORD_CAP_MB"
DEFAULT_CAP_MB = 100
TAIL_SEGMENTS = 4          # the tail is kept in this many segments of a quarter of half the cap each
FLUSH_S = 0.2


def home() -> Path:
    override = os.environ.get(HOME_ENV)
    return Path(override).expanduser() if override else platformdirs.user_data_path("tf-device-panel")


def _write_json_atomic(path: Path, data: Any) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=2, default=str) + "\n", encoding="utf-8")
    os.replace(tmp, path)


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
    return (event.type in (events.LOG, events.PLACEMENT) and event.data.get("stream") in OUTPUT_STREAMS
            and "task" not in event.data)


class RunRecorder:
    def __init__(self, folder: Path, summary: dict[str, Any], cap_bytes: int | None = None):
        self.folder = folder
        self.run_id = folder.name
        self.summary = summary
        self.cap_bytes = record_cap_bytes() if cap_bytes is None else cap_bytes
        folder.mkdir(parents=True, exist_ok=False)
        _write_json_atomic(folder / "run.json", summary)
        self._events = (folder / "events.jsonl").open("a", encoding="utf-8", buffering=1)
        self._output = (folder / "output.txt").open("ab", buffering=1024 * 1024)
        self._offset = 0          # bytes of output so far, dropped ones included
        self._lines = 0
        self._stream = "stdout"
        self._last_flush = time.monotonic()
        self._segment_bytes = max(self.cap_bytes // 2 // TAIL_SEGMENTS, 1)
        self._tail: deque[dict[str, Any]] = deque()  # {"file", "start", "lines", "bytes"} of each kept segment
        self._dropped_lines = 0
        self._segments = 0
        self._closed = False

    def append(self, event: Event) -> None:
        if self._closed or event.data.get("partial"):
            return
        if is_output_line(event):
            self._append_line(event)
            return
        self._flush()
        entry = event.to_json()
        entry["at"] = self._offset
        self._events.write(json.dumps(entry, default=str) + "\n")

    def _append_line(self, event: Event) -> None:
        stream = event.data["stream"]
        if event.data.get("source") == "script":
            stream = f"script-{stream}"  # read back as the script's own, never classified by its shape
        if stream != self._stream:
            self._stream = stream
            self._events.write(json.dumps({"output_stream": stream, "at": self._offset}) + "\n")
        text = event.data.get("line") or event.data.get("text", "")
        data = text.encode("utf-8", "surrogateescape") + b"\n"
        lines = text.count("\n") + 1  # a block of plain output is one event
        head_full = not self._tail and self._offset + len(data) > self.cap_bytes // 2
        if head_full or (self._tail and self._tail[-1]["bytes"] >= self._segment_bytes):
            self._next_segment()
        self._output.write(data)
        self._offset += len(data)
        self._lines += lines
        if self._tail:
            self._tail[-1]["lines"] += lines
            self._tail[-1]["bytes"] += len(data)
        now = time.monotonic()
        if now - self._last_flush > FLUSH_S:
            self._flush(now)

    def _next_segment(self) -> None:
        """Past half the cap: the rest goes to rotating tail segments, the oldest dropped."""
        self._output.close()
        self._segments += 1
        name = f"output.tail.{self._segments}"
        self._tail.append({"file": name, "start": self._offset, "lines": 0, "bytes": 0})
        self._output = (self.folder / name).open("ab", buffering=1024 * 1024)
        while len(self._tail) > TAIL_SEGMENTS:
            oldest = self._tail.popleft()
            self._dropped_lines += oldest["lines"]
            with contextlib.suppress(OSError):
                (self.folder / oldest["file"]).unlink()
        self.summary["output"] = self._output_summary()

    def _output_summary(self) -> dict[str, Any]:
        return {"bytes": self._offset, "lines": self._lines, "dropped_lines": self._dropped_lines,
                "cap_bytes": self.cap_bytes, "tail": list(self._tail)}

    def _flush(self, now: float | None = None) -> None:
        self._output.flush()
        self._last_flush = now or time.monotonic()

    def finish(self, **fields: Any) -> None:
        if self._closed:
            return
        self._closed = True
        self._output.close()
        self.summary.update(fields)
        self.summary["output"] = self._output_summary()
        self.summary["finished"] = time.time()
        _write_json_atomic(self.folder / "run.json", self.summary)
        self._events.close()


class RunHistory:
    def __init__(self, root: Path | None = None, cap_bytes: int | None = None):
        self.root = (root or home()) / "runs"
        self.cap_bytes = cap_bytes

    def new_run(self, job: str, params: dict[str, Any], config: dict[str, Any],
                devices: dict[str, Any] | None) -> RunRecorder:
        stamp = time.strftime("%Y%m%d-%H%M%S")
        run_id = f"{stamp}-{job}-{secrets.token_hex(3)}"
        summary = {"run_id": run_id, "job": job, "params": params, "config": config, "devices": devices,
                   "status": "running", "started": time.time(), "client_pid": os.getpid()}
        return RunRecorder(self.root / run_id, summary, self.cap_bytes)

    def summaries(self, limit: int | None = None) -> list[dict[str, Any]]:
        """At most `limit` summaries (all with None), newest first; a run whose client died mid-run shows as
        'interrupted'."""
        if limit is not None and limit < 0:
            raise ValueError(f"limit must be 0 or more, got {limit}")
        if not self.root.is_dir() or limit == 0:
            return []
        runs = []
        for folder in sorted(self.root.iterdir(), reverse=True):
            if not folder.is_dir():
                continue
            try:
                summary = json.loads((folder / "run.json").read_text(encoding="utf-8"))
            except (OSError, json.JSONDecodeError) as exc:
                summary = {"run_id": folder.name, "status": "unreadable", "error": {"message": str(exc)}}
            if summary.get("status") == "running" and not psutil.pid_exists(int(summary.get("client_pid", 0))):
                summary["status"] = "interrupted"
            runs.append(summary)
            if limit is not None and len(runs) >= limit:
                break
        return runs

    def get(self, run_id: str) -> dict[str, Any]:
        folder = self._folder(run_id)
        return dict(json.loads((folder / "run.json").read_text(encoding="utf-8")))

    def events(self, run_id: str) -> list[Event]:
        """The recorded events, output lines made log and placement events again in their places. A line
        cut short by a crash is skipped, not fatal."""
        folder = self._folder(run_id)
        entries: list[dict[str, Any]] = []
        with (folder / "events.jsonl").open(encoding="utf-8") as handle:
            for line in handle:
                with contextlib.suppress(ValueError):
                    entries.append(json.loads(line))
        if not (folder / "output.txt").exists():
            return [event for event in map(_event_or_none, entries) if event is not None]
        return _merge_output(folder, entries, self.get(run_id).get("output") or {})

    def _folder(self, run_id: str) -> Path:
        folder = self.root / run_id
        if "/" in run_id or run_id.startswith(".") or not folder.is_dir():
            raise KeyError(f"no run {run_id!r} in {self.root}")
        return folder


def _event_or_none(entry: dict[str, Any]) -> Event | None:
    try:
        return Event.from_json(entry)
    except (ValueError, KeyError, TypeError):
        return None


def _output_chunks(folder: Path, output: dict[str, Any]) -> list[tuple[int, bytes]]:
    """(start offset, bytes) of each kept piece of output: the head, then the tail segments."""
    chunks = [(0, (folder / "output.txt").read_bytes())]
    for segment in output.get("tail", []):
        with contextlib.suppress(OSError):
            chunks.append((int(segment["start"]), (folder / segment["file"]).read_bytes()))
    return chunks


def _merge_output(folder: Path, entries: list[dict[str, Any]], output: dict[str, Any]) -> list[Event]:
    merged: list[Event] = []
    time_now = [0.0]

    def deliver(event: Event) -> None:
        for line in split_lines(event):
            line.time = time_now[0]
            merged.append(line)

    demux = StreamDemux(deliver)
    stream = "stdout"
    pending = iter(sorted(enumerate(entries), key=lambda item: (int(item[1].get("at", 0)), item[0])))
    upcoming = next(pending, None)
    dropped_reported = False
    for start, data in _output_chunks(folder, output):
        if start > 0 and not dropped_reported and output.get("dropped_lines"):
            dropped_reported = True
            notice = {"stream": "panel", "kind": "warning",
                      "text": f"… {output['dropped_lines']} lines dropped here: the run printed more than the "
                              f"record's cap of {int(output.get('cap_bytes', 0)) // (1024 * 1024)} MB"}
            merged.append(Event(events.LOG, notice, time=time_now[0]))
        offset = start
        lines = data.split(b"\n")  # not splitlines: a lone "\r" inside a line is no line end
        if lines and not lines[-1]:
            lines.pop()
        for raw in (line + b"\n" for line in lines):
            while upcoming is not None and int(upcoming[1].get("at", 0)) <= offset:
                stream = _take(upcoming[1], merged, time_now) or stream
                upcoming = next(pending, None)
            demux.feed(stream, raw)
            offset += len(raw)
    while upcoming is not None:
        _take(upcoming[1], merged, time_now)
        upcoming = next(pending, None)
    return merged


def _take(entry: dict[str, Any], merged: list[Event], time_now: list[float]) -> str | None:
    """Add a recorded event to `merged`; returns the stream an `output_stream` entry switches to."""
    if "output_stream" in entry:
        return str(entry["output_stream"])
    event = _event_or_none(entry)
    if event is not None:
        time_now[0] = event.time
        merged.append(event)
    return None
