"""Each past run's memory: the allocator's peak per device, from the tf_memory events its record holds (sampled
while the run went: at the start, every 0.5 s and at the end), and two runs' peaks side by side.

Only the tf_memory lines of a record's events.jsonl are decoded (a substring test first): the history lists
hundreds of runs, and a run's record holds every placement it logged."""

from __future__ import annotations

import json
from dataclasses import dataclass

from tf_device_panel.core.client.history import MAX_EVENTS_FILE_BYTES, RunHistory, open_regular
from tf_device_panel.core.protocol import events

MAX_LINE_BYTES = 64 * 1024   # a tf_memory line is a few hundred bytes; longer lines are skipped unread


def run_peaks(history: RunHistory, run_id: str) -> dict[str, float]:
    """Device → the largest allocator peak (MiB) the run's record gives for it; {} when it recorded none (a run
    before TensorFlow's allocator reported: the CPU without cpu_memory_limit_mib) or its record is unreadable."""
    if not run_id or "/" in run_id or "\0" in run_id or run_id.startswith("."):
        return {}
    peaks: dict[str, float] = {}
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
                if b'"tf_memory"' not in line:
                    continue
                try:
                    event = events.from_json(json.loads(line))
                except (ValueError, RecursionError, events.EventError):
                    continue  # damaged: the record's other readers say so
                if isinstance(event, events.TfMemory):
                    peaks[event.device] = max(peaks.get(event.device, 0.0), float(event.peak_mib))
    except OSError:
        return {}
    return peaks


def peaks_text(peaks: dict[str, float]) -> str:
    return ", ".join(f"{device} {mib:,.1f} MiB" for device, mib in sorted(peaks.items())) or "not recorded"


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
