"""Each past run's memory: the allocator's peak per device, from the tf_memory events the run sent (sampled while
the run went: at the start, every 0.5 s and at the end), its process's peak resident memory, and two runs' peaks
side by side.

A run keeps its peaks in run.json at its end (`RunSummary.peaks`); for a record written before that, they are
read from its events.jsonl: only its tf_memory and job_finished lines are decoded (a substring test first), but an
hour-long run's file holds 7,200 of them, so this read happens off the GUI thread."""

from __future__ import annotations

import json
from dataclasses import dataclass

from tf_device_panel.core.client.history import MAX_EVENTS_FILE_BYTES, RunHistory, open_regular
from tf_device_panel.core.client.records import RunPeaks, RunSummary
from tf_device_panel.core.protocol import events

MAX_LINE_BYTES = 64 * 1024   # a tf_memory line is a few hundred bytes; longer lines are skipped unread


def run_peaks(history: RunHistory, run_id: str) -> dict[str, float]:
    """Device → the largest allocator peak (MiB) the run's record gives for it; {} when it recorded none (a run
    before TensorFlow's allocator reported: the CPU without cpu_memory_limit_mib) or its record is unreadable."""
    return events_peaks(history, run_id).allocator_mib


def summary_peaks(history: RunHistory, summary: RunSummary) -> RunPeaks:
    """The run's peaks: as its run.json kept them at its end, else (a run recorded before run.json kept them, or
    one still running) read from its events.jsonl, which takes a second for an hour-long run: never on a GUI
    thread."""
    if summary.peaks is not None:
        return summary.peaks
    return events_peaks(history, summary.run_id)


def events_peaks(history: RunHistory, run_id: str) -> RunPeaks:
    """The peaks a run's events.jsonl records (its tf_memory and job_finished lines, through `RunPeaks.take`)."""
    peaks = RunPeaks()
    if not run_id or "/" in run_id or "\0" in run_id or run_id.startswith("."):
        return peaks
    try:
        with open_regular(history.root / run_id / "events.jsonl") as handle:
            skipping = False  # inside a line too long to be a tf_memory event
            while handle.tell() <= MAX_EVENTS_FILE_BYTES:
                line = handle.readline(MAX_LINE_BYTES)
                if not line:
                    break
                if skipping or (len(line) == MAX_LINE_BYTES and not line.endswith(b"\n")):
                    skipping = not line.endswith(b"\n")
                    continue
                if b'"tf_memory"' not in line and b'"job_finished"' not in line:
                    continue
                try:
                    peaks.take(events.from_json(json.loads(line)))
                except (ValueError, RecursionError, events.EventError):
                    continue  # damaged: the record's other readers say so
    except OSError:
        return RunPeaks()
    return peaks


def peaks_text(peaks: dict[str, float]) -> str:
    return ", ".join(f"{device} {mib:,.1f} MiB" for device, mib in sorted(peaks.items())) or "not recorded"


def rss_text(peaks: RunPeaks) -> str:
    return f"{peaks.rss_mib:,.1f} MiB" if peaks.rss_mib is not None else "not recorded"


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
