"""Everything the command line prints: the streamed run, results, and the listings of each command.

Results are not formatted kind by kind here: core.results describes each kind once, and this module
prints any description (`presentation_text`), as the window draws it.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TextIO

from tf_device_panel.core.client.run_record import JobOutcome
from tf_device_panel.core.client.runtime import startup_error_text
from tf_device_panel.core.protocol import events
from tf_device_panel.core.protocol.events import Event
from tf_device_panel.core.results import Presentation, Table, present
from tf_device_panel.core.runproc.jobs import JobSpec

ERROR_WIDTH = 60


def _is_terminal(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


class RunPrinter:
    """Streams a run to the terminal: progress, placements, fallbacks, the job's own output.

    Called on the thread that reads the run's pipes, so a slow terminal slows the run's writes. A line a
    progress bar redraws with `\r` is redrawn in place on a terminal (elsewhere only its final state is
    printed). When the reader of our output goes away (`run … | head`), printing stops and
    `on_broken_pipe` is called once.

    With `job_output` (a user's script: its stdout and its stderr), the job's output is written as it is, its
    stdout to the first, its stderr to the second, so `> out.txt` and `2>/dev/null` work as on a bare run;
    what the process printed on its fd 1 (C++ code, child processes) goes to stdout too, as it would bare.
    TensorFlow's own log lines on fd 2 (C++ `I0000 …`, `INFO:tensorflow:`) show only with `verbose`, since
    the panel prints what they say (`placed …`). The panel's own lines go to `stream`.
    """

    def __init__(self, verbose: bool, stream: TextIO, *, on_broken_pipe: Callable[[], None] = lambda: None,
                 job_output: tuple[TextIO, TextIO] | None = None):
        self.verbose = verbose
        self.out = stream
        self.last_message = ""
        self.on_broken_pipe = on_broken_pipe
        self.broken = False
        self.live_line = False
        self.job_output = job_output
        self.live_output: TextIO | None = None  # the job's stream whose last line is still being drawn
        self.terminal = _is_terminal(stream)
        self.writing = stream  # the stream being written to, the one that broke if a write fails

    def __call__(self, event: Event) -> None:
        if self.broken:
            return
        self.writing = self.out
        try:
            self._print(event)
        except BrokenPipeError:
            self.broken = True
            # Python would complain again when it flushes that stream at exit: point it at nothing instead.
            with contextlib.suppress(OSError, ValueError):
                devnull = os.open(os.devnull, os.O_WRONLY)
                os.dup2(devnull, self.writing.fileno())
                os.close(devnull)
            self.on_broken_pipe()

    def end_live_line(self) -> None:
        """Finish a line left half-drawn by a progress bar, so what follows starts on a line of its own."""
        if self.live_line and not self.broken:
            self.live_line = False
            with contextlib.suppress(OSError, ValueError):
                self.out.write("\n")
                self.out.flush()
        if self.live_output is not None and not self.broken:
            with contextlib.suppress(OSError, ValueError):
                self.live_output.write("\n")
                self.live_output.flush()
        self.live_output = None

    def _leave_live_output(self, target: TextIO) -> None:
        """Before a whole line goes to `target`: a half-drawn line is wiped (same stream) or ended (another)."""
        live, self.live_output = self.live_output, None
        if live is target:
            target.write("\r\x1b[K")
        elif live is not None:
            live.write("\n")
            live.flush()

    def _line(self, text: str) -> None:
        if self.live_line:
            self.out.write("\r\x1b[K")
            self.live_line = False
        self._leave_live_output(self.out)
        self.out.write(text + "\n")
        if self.job_output is not None:
            self.out.flush()  # the panel's lines and the job's keep their order on a terminal

    def _job_output(self, log: Mapping[str, Any]) -> None:
        target = self.job_output[0 if log["stream"] == "stdout" else 1]  # type: ignore[index]
        self.writing = target
        if log.get("partial"):
            if _is_terminal(target):
                if self.live_output is not None and self.live_output is not target:
                    self._leave_live_output(target)
                target.write(f"\r{log['text']}\x1b[K")
                target.flush()
                self.live_output = target
            return
        ours = log["kind"] == "output" or log["stream"] == "stdout"
        if not (ours or self.verbose):
            return
        self._leave_live_output(target)
        target.write(log["text"] + "\n")
        target.flush()

    def _print(self, event: Event) -> None:
        out = self.out
        if event.type == events.LOG:
            log = event.data
            if self.job_output is not None and log.get("stream") in ("stdout", "stderr"):
                self._job_output(log)
            elif log.get("partial"):
                if self.terminal and log["kind"] == "output":
                    out.write(f"\r\x1b[K  | {log['text']}")
                    out.flush()
                    self.live_line = True
            elif log["kind"] == "output" or (self.verbose and log["kind"] != "placement"):
                self._line("  | " + log["text"].replace("\n", "\n  | "))
        elif event.type == events.READY:
            ready = event.data
            names = ", ".join(d["short_name"] for d in ready["logical"])
            self._line(f"runtime ready: TensorFlow {ready['tf_version']}, logical devices {names} "
                       f"[pid {ready['pid']}]")
        elif event.type == events.PROGRESS:
            progress = event.data
            if progress.get("message") and progress["message"] != self.last_message:
                self.last_message = progress["message"]
                self._line(f"… {progress['message']}")
        elif event.type == events.PLACEMENT:
            placed = event.data
            self._line(f"  placed {placed['op_type']:<16} {placed['op']:<28} → {placed['short_device']}"
                       f"  ({placed['mode']})")
        elif event.type == events.FALLBACK:
            fallback = event.data
            if fallback.get("file"):  # a user's script: tf.device(...) naming a device that does not exist
                self._line(f"  ⚠ soft-placement fallback: {fallback['file']}, line {fallback.get('line')}: "
                           f"tf.device({fallback['requested']!r}) names no device here; its ops run on "
                           f"{fallback['actual_short']}")
            else:
                self._line(f"  ⚠ soft-placement fallback: {fallback['op']} asked for {fallback['requested']}, "
                           f"ran on {fallback['actual_short']}")
        elif event.type == events.STARTUP_ERROR:
            self._line(startup_error_text(event.data))
        elif event.type == events.RUNTIME_EXITED:
            exited = event.data
            if not exited.get("expected"):
                self._line(f"runtime {exited['description']}")
                for line in exited.get("last_lines", [])[-10:]:
                    self._line(f"  last output | {line}")
            out.flush()


def table_text(table: Table) -> list[str]:
    """A table in columns (right-aligned where the column says so), or a matrix in brackets."""
    cells = table.texts()
    if table.matrix:
        width = max((len(text) for row in cells for text in row), default=0)
        return ["[" + " ".join(text.rjust(width) for text in row) + "]" for row in cells]
    widths = [max(len(column.title), *(len(row[i]) for row in cells)) for i, column in enumerate(table.columns)]

    def line(texts: Sequence[str]) -> str:
        return "  ".join(text.rjust(width) if column.align == "right" else text.ljust(width)
                         for text, width, column in zip(texts, widths, table.columns, strict=True)).rstrip()

    return [line([column.title for column in table.columns]), *(line(row) for row in cells)]


def presentation_text(presentation: Presentation) -> list[str]:
    """Title, warnings, tables, then lines. Plots are the window's; their figures are in a table or line."""
    lines = [f"result: {presentation.title}".rstrip()]
    lines += [f"  ⚠ {warning}" for warning in presentation.warnings]
    for table in presentation.tables:
        lines += [f"  {text}" for text in table_text(table)]
    lines += [f"  {line}" for line in presentation.lines]
    return lines


def format_result(outcome: JobOutcome) -> list[str]:
    presentation = present(outcome.result)
    return presentation_text(presentation) if presentation is not None else []


def placement_summary(outcome: JobOutcome) -> list[str]:
    if not outcome.placement_counts:
        return []
    per_device: Counter[str] = Counter()
    for (_, device), count in outcome.placement_counts.items():
        per_device[device] += count
    summary = ", ".join(f"{device}: {count}" for device, count in sorted(per_device.items()))
    return [f"placements: {sum(per_device.values())} ({summary})"]


def run_text(outcome: JobOutcome) -> list[str]:
    """What stdout gets at the end of a run (the error goes to stderr: `error_text`)."""
    duration = f" in {outcome.duration_s:.2f} s" if outcome.duration_s is not None else ""
    return [*format_result(outcome), *placement_summary(outcome),
            f"status: {outcome.status}{duration} — run {outcome.run_id}"]


def error_text(error: Mapping[str, Any], verbose: bool) -> list[str]:
    lines = [f"error: {error['type']}: {error['message']}"]
    if verbose and error.get("traceback"):
        lines.append(str(error["traceback"]))
    return lines


def devices_text(info: Mapping[str, Any], config_summary: str, nvml_info: Mapping[str, Any],
                 tf_messages: Sequence[str]) -> list[str]:
    build = info.get("build", {})
    cuda = "no CUDA"
    if build.get("is_cuda_build"):
        cuda = f"CUDA {build.get('cuda_version')}, cuDNN {build.get('cudnn_version')}"
    lines = [f"TensorFlow {info['tf_version']} ({cuda} build), Python {info['python']}",
             f"Configuration: {config_summary}", "", "Physical devices:"]
    for device in info["physical"]:
        extra = ""
        if device["device_type"] == "GPU":
            extra = f"  {device.get('device_name', '')}  compute {device.get('compute_capability') or '?'}"
            extra += "" if device.get("visible") else "  (hidden by visible_gpus)"
        lines.append(f"  {device['name']}{extra}")
    lines += ["", "Logical devices (created by the runtime):"]
    for logical in info["logical"]:
        limit = f"  limit {logical['memory_limit_mib']} MiB" if "memory_limit_mib" in logical else ""
        lines.append(f"  {logical['short_name']:<8} {logical['name']}{limit}")
    if not any(d["device_type"] == "GPU" for d in info["physical"]):
        lines += ["", "TensorFlow sees no GPU."]
        lines += [f"  TensorFlow said: {message}" for message in tf_messages[-4:]]
    lines.append("")
    if not nvml_info["available"]:
        lines.append(f"NVML: {nvml_info['message'] or 'unavailable'}")
        return lines
    lines.append(f"NVML: driver {nvml_info['driver_version']} (CUDA {nvml_info['cuda_driver_version']})")
    for gpu in nvml_info["gpus"]:
        memory = "memory N/A"
        if gpu["memory_total_mib"]:
            memory = f"{gpu['memory_used_mib']}/{gpu['memory_total_mib']} MiB"
        lines.append(f"  GPU {gpu['index']}: {gpu['name'] or 'N/A'}  {gpu['pci_bus_id'] or ''}  {memory}"
                     + (f"  ({gpu['error']})" if gpu["error"] else ""))
    return lines


def jobs_text(specs: Iterable[JobSpec]) -> list[str]:
    lines = []
    for spec in specs:
        lines += [f"{spec.name:<16} {spec.title}", f"           {spec.description}"]
        for param in spec.params:
            extra = f" (one of: {', '.join(param.choices)})" if param.choices else ""
            lines += [f"           --param {param.name}=<{param.type}>  default {param.default!r}{extra}",
                      f"               {param.help}"]
        lines.append("")
    return lines


def problems_text(heading: str, problems: Sequence[object]) -> list[str]:
    return [f"{heading}: {len(problems)} problem(s)", *(f"  - {problem}" for problem in problems)]


def cluster_config_text(tasks: Sequence[Mapping[str, Any]], parameter_server: bool, profile: str | None) -> list[str]:
    kind = "ParameterServerStrategy" if parameter_server else "MultiWorkerMirroredStrategy"
    lines = [f"# {kind} cluster of {len(tasks)} tasks. On each machine, from a checkout of this project with its",
             "# virtualenv active, start the task for that machine's address (servers first, then the rest):"]
    for task in tasks:
        lines += ["", f"# {task['task']} on {task['address']}", str(task["command"])]
    lines += ["", "# Each task's port must be reachable from every other task (open it in the firewall)."]
    if profile:
        lines.append(f"# Every task applies the device configuration in {profile}: copy it to that path on each "
                     "machine.")
    return lines


def one_line(text: str, width: int = ERROR_WIDTH) -> str:
    """The first line of `text`, cut to `width` characters; "…" says that something was left out."""
    lines = text.strip().splitlines() or [""]
    first, more = lines[0], len(lines) > 1
    if len(first) > width or (more and len(first) > width - 2):
        return first[:width - 1] + "…"
    return first + (" …" if more else "")


def runs_text(runs: Sequence[Mapping[str, Any]]) -> list[str]:
    lines = []
    for run in runs:
        started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(run.get("started", 0)))
        duration = f"{run['duration_s']:.2f} s" if isinstance(run.get("duration_s"), int | float) else ""
        error = one_line(str((run.get("error") or {}).get("message", "")))
        if run.get("incomplete"):
            error = one_line(f"record incomplete: {run['incomplete']}") + (f"; {error}" if error else "")
        lines.append(f"{run['run_id']:<40} {started}  {run.get('status', '?'):<11} {duration:>9}  {error}".rstrip())
    return lines
