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

from tf_device_panel.core.catalogue import JobSpec
from tf_device_panel.core.client import wording
from tf_device_panel.core.client.process_handle import ProcessHandle
from tf_device_panel.core.client.records import RunError, RunSummary
from tf_device_panel.core.client.run_manager import ProcessFactory, runtime_process
from tf_device_panel.core.client.run_record import JobOutcome
from tf_device_panel.core.client.run_state import RunState
from tf_device_panel.core.client.runtime import RuntimeProcess
from tf_device_panel.core.config import DeviceConfig
from tf_device_panel.core.oom import oom_text
from tf_device_panel.core.protocol import events
from tf_device_panel.core.protocol.events import Event
from tf_device_panel.core.results import Presentation, Table, present

ERROR_WIDTH = 60


def _is_terminal(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def same_file(first: TextIO, second: TextIO) -> bool:
    """Whether two streams write to one file, pipe or terminal (`2>&1`, a terminal for both)."""
    try:
        return os.path.samestat(os.fstat(first.fileno()), os.fstat(second.fileno()))
    except (OSError, ValueError, AttributeError):
        return False


def script_process_factory(stdout: TextIO, stderr: TextIO, script: bool) -> ProcessFactory:
    """How the CLI's run process is made: for a script printed to one file or terminal for both streams,
    with one pipe as the script's fds 1 and 2, so its stdout and stderr keep the order it wrote them in, as a
    bare run's in that file do."""
    if not (script and same_file(stdout, stderr)):
        return runtime_process

    def together(config: DeviceConfig, on_event: Callable[[Event], None]) -> ProcessHandle:
        return RuntimeProcess(config, on_event=on_event, script_streams_together=True)

    return together


def write_bytes(stream: TextIO, data: bytes) -> None:
    """`data` onto `stream` as they are (through its byte buffer, after what its text layer holds)."""
    stream.flush()
    buffer = getattr(stream, "buffer", None)
    if buffer is None:
        stream.write(data.decode("utf-8", errors="surrogateescape"))
    else:
        buffer.write(data)
        buffer.flush()


class RunPrinter:
    """Streams a run to the terminal: progress, placements, fallbacks, the job's own output.

    Called on the thread that reads the run's pipes, so a slow terminal slows the run's writes. A line a
    progress bar redraws with `\r` is redrawn in place on a terminal (elsewhere only its final state is
    printed). When the reader of our output goes away (`run … | head`), printing stops and
    `on_broken_pipe` is called once.

    With `job_output` (a user's script: its stdout and its stderr), the job's output is written byte for byte as
    it wrote it (no decoding, `\r` and line ends kept, no line end added), its stdout to the first, its stderr
    to the second, so `> out.txt` and `2>/dev/null` work as on a bare run;
    TensorFlow's C++ log lines (`I0000 …`) and its placement echo, which the run keeps off the script's fds,
    show only with `verbose`, since the panel prints what they say (`placed …`). The panel's own lines go to `stream`.
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
        self.open_piece: TextIO | None = None   # the job's stream whose last bytes ended without a line end
        self.terminal = _is_terminal(stream)
        self.writing = stream  # the stream being written to, the one that broke if a write fails
        self.run_state = RunState()  # the run as the window's views have it: the end's placement summary reads it

    def __call__(self, event: Event) -> None:
        self.run_state.apply(event)  # counted even once nothing can be printed
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
        self._end_open_piece(self.out)
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

    def _end_open_piece(self, target: TextIO) -> None:
        """The panel's own line comes after a script's last piece without a line end on the same stream (its
        stderr): that piece gets one first, on the panel's stream only (the script's stdout is never touched)."""
        if self.open_piece is target and not self.broken:
            self.open_piece = None
            with contextlib.suppress(OSError, ValueError):
                target.write("\n")
                target.flush()

    def _line(self, text: str) -> None:
        self._end_open_piece(self.out)
        if self.live_line:
            self.out.write("\r\x1b[K")
            self.live_line = False
        self._leave_live_output(self.out)
        self.out.write(text + "\n")
        if self.job_output is not None:
            self.out.flush()  # the panel's lines and the job's keep their order on a terminal

    def _job_output(self, log: events.Log) -> None:
        target = self.job_output[0 if log.stream == "stdout" else 1]  # type: ignore[index]
        self.writing = target
        if log.partial:
            if _is_terminal(target):
                if self.live_output is not None and self.live_output is not target:
                    self._leave_live_output(target)
                target.write(f"\r{log.text}\x1b[K")
                target.flush()
                self.live_output = target
            return
        # TensorFlow's C++ output (its log, its echo of placements on C's stdout) is on the panel's pipes, apart
        # from the script's: shown only with --verbose. Other C-level output there goes where it was printed.
        if not (log.kind == "output" or self.verbose):
            return
        self._leave_live_output(target)
        if log.source == "script" and log.raw is not None:
            write_bytes(target, log.raw)  # the script's bytes exactly as it wrote them
            self.open_piece = target if log.raw and not log.raw.endswith(b"\n") else None
            return
        target.write(log.text + "\n")
        target.flush()

    def _print(self, event: Event) -> None:
        match event:
            case events.Log(stream="stdout" | "stderr") if self.job_output is not None:
                self._job_output(event)
            case events.Log(partial=True, kind=kind, text=text):
                if self.terminal and kind == "output":
                    self.out.write(f"\r\x1b[K  | {text}")
                    self.out.flush()
                    self.live_line = True
            case events.Log(kind=kind, text=text):
                if kind == "output" or (self.verbose and kind != "placement"):
                    self._line("  | " + text.replace("\n", "\n  | "))
            case events.Ready():
                self._line(wording.ready(event))
            case events.Progress(message=message) if message and message != self.last_message:
                self.last_message = message
                self._line(f"… {message}")
            case events.Placement():
                self._line(f"  {wording.placement(event)}")
            case events.Fallback():
                self._line(f"  ⚠ {wording.fallback(event)}")
            case events.StartupError():
                self._line(wording.startup_error(event))
            case events.RuntimeExited(expected=expected, last_lines=last_lines):
                if not expected:
                    self._line(wording.runtime_exited(event))
                    # A script's own output is all there already (its streams are its own): nothing repeated.
                    for line in last_lines[-10:] if self.job_output is None else []:
                        self._line(f"  last output | {line}")
                self.out.flush()


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


def placement_summary(outcome: JobOutcome, state: RunState | None = None) -> list[str]:
    """How many ops went to each device: from the run state the printer fed, else from the outcome."""
    per_device: Counter[str] = Counter()
    if state is not None:
        per_device.update(state.ops_per_device)
    else:
        for (_, device), count in outcome.placement_counts.items():
            per_device[device] += count
    if not per_device:
        return []
    summary = ", ".join(f"{device}: {count}" for device, count in sorted(per_device.items()))
    return [f"placements: {sum(per_device.values())} ({summary})"]


def run_text(outcome: JobOutcome, state: RunState | None = None) -> list[str]:
    """What stdout gets at the end of a run (the error goes to stderr: `error_text`); `state`: the printer's."""
    duration = f" in {outcome.duration_s:.2f} s" if outcome.duration_s is not None else ""
    return [*format_result(outcome), *placement_summary(outcome, state),
            *(oom_text(outcome.oom, command_line=True) if outcome.oom else ()),
            *([f"note: {outcome.oom_earlier}"] if outcome.oom_earlier else ()),
            f"status: {outcome.status}{duration} — run {outcome.run_id}"]


def error_text(error: RunError, verbose: bool, first_line: bool = False) -> list[str]:
    """`first_line`: only the message's first line (a script's traceback, printed by it, has the rest)."""
    message = error.message.split("\n", 1)[0] if first_line else error.message
    lines = [f"error: {wording.error(error.type, message)}"]
    if verbose and error.traceback:
        lines.append(error.traceback)
    return lines


def devices_text(info: events.Ready, config_summary: str, nvml_info: Mapping[str, Any],
                 tf_messages: Sequence[str]) -> list[str]:
    build = info.build
    cuda = "no CUDA"
    if build.get("is_cuda_build"):
        cuda = f"CUDA {build.get('cuda_version')}, cuDNN {build.get('cudnn_version')}"
    lines = [f"TensorFlow {info.tf_version} ({cuda} build), Python {info.python}",
             f"Configuration: {config_summary}", "", "Physical devices:"]
    for device in info.physical:
        extra = ""
        if device["device_type"] == "GPU":
            extra = f"  {device.get('device_name', '')}  compute {device.get('compute_capability') or '?'}"
            extra += "" if device.get("visible") else "  (hidden by visible_gpus)"
        lines.append(f"  {device['name']}{extra}")
    lines += ["", "Logical devices (created by the runtime):"]
    for logical in info.logical:
        limit = f"  limit {logical['memory_limit_mib']} MiB" if "memory_limit_mib" in logical else ""
        lines.append(f"  {logical['short_name']:<8} {logical['name']}{limit}")
    if not any(d["device_type"] == "GPU" for d in info.physical):
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
            if param.choices and param.file_type:  # a built-in's name, or a file of that type
                extra = f" (one of: {', '.join(param.choices)}, or a {param.file_type[0]} file)"
            lines += [f"           --param {param.name}=<{param.type_word}>  default {param.default!r}{extra}",
                      f"               {param.help}"]
        lines.append("")
    return lines


MAX_PROBLEMS_SHOWN = 20  # a profile with 100,000 bad entries is answered in a screenful, not 5 MB


def problems_text(heading: str, problems: Sequence[object], warnings: Sequence[object] = ()) -> list[str]:
    """The problems, one a line: the first MAX_PROBLEMS_SHOWN, then how many more; then every warning (never
    dropped for the problems: a profile with six problems still says "GPU 5 could not be checked")."""
    counted = f"{len(problems)} problem(s)" + (f" and {len(warnings)} warning(s)" if warnings else "")
    lines = [f"{heading}: {counted}", *(f"  - {p}" for p in problems[:MAX_PROBLEMS_SHOWN])]
    if len(problems) > MAX_PROBLEMS_SHOWN:
        lines.append(f"  … and {len(problems) - MAX_PROBLEMS_SHOWN} more like these (fix these first, then "
                     "validate again)")
    lines += [f"  - warning: {w}" for w in warnings]
    return lines


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


def run_line(run: RunSummary) -> str:
    """One run's line in `runs`: id, start, status, duration and why it failed (or who stopped it)."""
    started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(run.started))
    duration = f"{run.duration_s:.2f} s" if run.duration_s is not None else ""
    error = one_line(run.error.message if run.error is not None else "")
    cancel = run.cancel
    if cancel is not None and run.status == "cancelled":  # who stopped it, and how
        error = one_line(f"stopped by {cancel.by or '?'}; {cancel.how}")
    if run.incomplete:
        error = one_line(f"record incomplete: {run.incomplete}") + (f"; {error}" if error else "")
    return f"{run.run_id:<40} {started}  {run.status:<11} {duration:>9}  {error}".rstrip()
