"""Each past run's memory: the allocator's peak per device, from the tf_memory events the run sent (sampled while
the run went: at the start, every 0.5 s and at the end), its process's peak resident memory, and two runs' peaks
side by side.

A run keeps its peaks in run.json at its end (`RunSummary.peaks`); for a record written before that, they are
read from its events.jsonl: only its tf_memory and job_finished lines are decoded (a substring test first), but an
hour-long run's file holds 7,200 of them, so this read happens off the GUI thread."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from tf_device_panel.core.client.history import MAX_EVENTS_FILE_BYTES, RunHistory, open_regular
from tf_device_panel.core.client.records import RunPeaks, RunSummary
from tf_device_panel.core.protocol import events
from tf_device_panel.core.units import mib_text

MAX_LINE_BYTES = 64 * 1024   # a tf_memory line is a few hundred bytes; longer lines are skipped unread


def summary_peaks(history: RunHistory, summary: RunSummary) -> RunPeaks:
    """The run's peaks: as its run.json kept them at its end, else (a run recorded before run.json kept them, or
    one still running) read from its events.jsonl, which takes a second for an hour-long run: never on a GUI
    thread."""
    if summary.peaks is not None:
        return summary.peaks
    return events_peaks(history, summary.run_id)


# A tf_memory line exactly as the recorder writes it (json.dumps of the event, then its offset): its device and peak
# are read by this pattern alone; any other line naming tf_memory or job_finished is decoded as JSON.
_RECORDED_TF_MEMORY = re.compile(
    rb'^\{"type": "tf_memory", "job_id": (?:null|"[^"\\\n]*"), "time": [-+0-9.eE]+, "data": \{"device": '
    rb'"([^"\\\n]*)", "current_mib": [-+0-9.eE]+, "peak_mib": ([0-9.eE+]+)\}, "at": [0-9]+\}$', re.MULTILINE)
_NAMED = re.compile(rb'^.*"(?:tf_memory|job_finished)".*$', re.MULTILINE)
CHUNK_BYTES = 4 * 1024 * 1024


def events_peaks(history: RunHistory, run_id: str) -> RunPeaks:
    """The peaks a run's events.jsonl records (its tf_memory and job_finished lines, through `RunPeaks.take`).
    An hour-long run's 7,200 tf_memory lines are read in a few milliseconds: whole chunks, by a pattern."""
    peaks = RunPeaks()
    if not run_id or "/" in run_id or "\0" in run_id or run_id.startswith("."):
        return peaks
    try:
        with open_regular(history.root / run_id / "events.jsonl") as handle:
            rest = b""
            while handle.tell() <= MAX_EVENTS_FILE_BYTES:
                chunk = handle.read(CHUNK_BYTES)
                if not chunk:
                    _take_lines(rest, peaks)
                    break
                data = rest + chunk
                cut = data.rfind(b"\n") + 1
                if cut == 0 and len(data) > MAX_LINE_BYTES:
                    rest = b""  # inside a line too long to be a tf_memory event: skipped
                    continue
                _take_lines(data[:cut], peaks)
                rest = data[cut:]
    except OSError:
        return RunPeaks()
    return peaks


def _take_lines(data: bytes, peaks: RunPeaks) -> None:
    """The peaks in whole lines of events.jsonl."""
    allocator = peaks.allocator_mib
    recorded = _RECORDED_TF_MEMORY.findall(data)
    for device, peak in recorded:
        try:
            mib = float(peak)
        except ValueError:
            continue
        name = device.decode("utf-8", "replace")
        if mib > allocator.get(name, -1.0):
            allocator[name] = mib
    if data.count(b'"tf_memory"') + data.count(b'"job_finished"') == len(recorded):
        return  # every line that names them was read above
    for match in _NAMED.finditer(data):
        line = match.group()
        if len(line) > MAX_LINE_BYTES or _RECORDED_TF_MEMORY.fullmatch(line):
            continue
        try:
            peaks.take(events.from_json(json.loads(line)))
        except (ValueError, RecursionError, events.EventError):
            continue  # damaged: the record's other readers say so


def peaks_text(peaks: dict[str, float]) -> str:
    return ", ".join(f"{device} {mib_text(mib)}" for device, mib in sorted(peaks.items())) or "not recorded"


def rss_text(peaks: RunPeaks) -> str:
    return mib_text(peaks.rss_mib) if peaks.rss_mib is not None else "not recorded"


@dataclass(frozen=True)
class PeakChange:
    """One device's allocator peak in two runs (None where a run has none) and the change."""

    device: str
    first_mib: float | None
    second_mib: float | None
    change_mib: float | None


def compare_peaks(first: dict[str, float], second: dict[str, float]) -> list[PeakChange]:
    """One row per device either run used."""
    rows = []
    for device in sorted(set(first) | set(second)):
        a, b = first.get(device), second.get(device)
        rows.append(PeakChange(device, a, b, None if a is None or b is None else b - a))
    return rows
