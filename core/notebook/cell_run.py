"""`%%tf_run` without IPython: run a cell's code and gather what TensorFlow did with it.

What is gathered, and from where:
- placements: TensorFlow's placement log (fds 1 and 2, read by `capture.OutputSieve`, parsed by the panel's
  parser, `core.protocol.output_lines`), when the log was on as TensorFlow initialized (`%tf_config` turns it on,
  as a profile does by default). TensorFlow ignores turning it on later, so each eager op's device is also read
  from an op callback: without the log the report counts those, and says that a tf.function's ops then show as
  its one call;
- soft-placement fallbacks: each `tf.device(...)` the cell enters naming a device this runtime lacks, while soft
  placement is on (the ops then run elsewhere, silently);
- the allocator's peak on each device that keeps figures (every GPU; the CPU under cpu_memory_limit_mib, where
  all logical CPUs share one allocator), reset as the cell starts when TensorFlow is already running;
- the wall time; an out-of-memory error explained by `core.oom` from the allocator's dump and the error's text.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from tf_device_panel.core.config.steps import CPU_BFC_ENV, CPU_LIMIT_ENV
from tf_device_panel.core.notebook.capture import Captured, OutputSieve
from tf_device_panel.core.notebook.configure import tensorflow_initialized
from tf_device_panel.core.oom import OomReport, explain, is_oom_message
from tf_device_panel.core.protocol.output_lines import (
    PlacedOp,
    parse_line,
    short_device_name,
)
from tf_device_panel.core.runproc.tf_facts import soft_placement_target


@dataclass(frozen=True)
class CellFallback:
    """A `tf.device(...)` the cell entered naming a device this runtime lacks: where its ops ran instead."""

    requested: str        # as the cell wrote it
    actual: str           # short name, /CPU:0
    line: int | None      # the cell's line


@dataclass
class CellReport:
    """What one `%%tf_run` cell did on the devices."""

    wall_s: float = 0.0
    placements: list[PlacedOp] = field(default_factory=list)
    from_log: bool = False                        # placements read from TensorFlow's log (else op callbacks)
    fallbacks: list[CellFallback] = field(default_factory=list)
    peaks: dict[str, int] = field(default_factory=dict)       # device (/GPU:0, /CPU:0) -> peak bytes
    limits: dict[str, int] = field(default_factory=dict)      # device -> the allocator's limit, where known
    devices: list[str] = field(default_factory=list)          # the logical devices, when TensorFlow runs
    shared_cpu_allocator: bool = False                        # /CPU:0's figures stand for every logical CPU
    oom: OomReport | None = None
    oom_caught_by_cell: bool = False              # the cell handled the error itself; the dump told of it
    error: BaseException | None = None            # an error that was not an OOM (raised again after the report)
    notes: list[str] = field(default_factory=list)

    def counts(self) -> dict[str, Counter[str]]:
        """Op types per device (short name), in the order devices were first used."""
        per_device: dict[str, Counter[str]] = {}
        for placed in self.placements:
            per_device.setdefault(placed.short_device, Counter())[placed.op_type] += 1
        return per_device


def _op_callback(placements: list[PlacedOp]) -> Callable[..., None]:
    def record(op_type: str | bytes, inputs: Any, attrs: Any, outputs: Any, op_name: Any = None,
               graph: Any = None) -> None:
        if graph is not None:
            return  # a function being traced: its ops are placed later, when it runs
        if isinstance(op_type, bytes):  # eager ops name their type in bytes, a function's call in text
            op_type = op_type.decode("utf-8", errors="replace")
        for output in outputs or ():
            device = getattr(output, "device", "")
            if device:
                placements.append(PlacedOp(op=op_type, op_type=op_type, device=device,
                                           short_device=short_device_name(device), mode="eager", kernel=op_type))
                return

    return record


@contextlib.contextmanager
def eager_placements() -> Iterator[list[PlacedOp]]:
    """Each eager op's device while the block runs, from an op callback (works whenever TensorFlow started)."""
    from tensorflow.python.framework import op_callbacks

    placements: list[PlacedOp] = []
    callback = _op_callback(placements)
    op_callbacks.add_op_callback(callback)
    try:
        yield placements
    finally:
        op_callbacks.remove_op_callback(callback)


def _moved_to(spec: Any, devices: list[str]) -> str | None:
    target = soft_placement_target(spec, devices)
    return None if target is None else short_device_name(target)


@contextlib.contextmanager
def watch_fallbacks(cell_file: str) -> Iterator[list[CellFallback]]:
    """Each `tf.device(...)` the cell (code compiled as `cell_file`) enters eagerly that soft placement will move,
    while the block runs; once per line and device."""
    from tensorflow.python.eager import context

    found: list[CellFallback] = []
    seen: set[tuple[int | None, str]] = set()
    scope_class = context._EagerDeviceContext
    original = scope_class.__enter__

    def check(scope: Any) -> None:
        runtime = scope._ctx
        devices, requested = runtime._context_devices, scope._device_name
        if not devices or not isinstance(requested, str) or not scope._stack or not runtime.soft_device_placement:
            return
        actual = _moved_to(scope._stack[-1][2], devices)
        if actual is None:
            return
        frame: Any = sys._getframe(2)
        while frame is not None and frame.f_code.co_filename != cell_file:
            frame = frame.f_back
        line = frame.f_lineno if frame is not None else None
        if (line, requested) not in seen:
            seen.add((line, requested))
            found.append(CellFallback(requested, actual, line))

    def __enter__(self: Any) -> Any:
        entered = original(self)
        with contextlib.suppress(Exception):  # a report must never break the cell's own code
            check(self)
        return entered

    scope_class.__enter__ = __enter__
    try:
        yield found
    finally:
        scope_class.__enter__ = original


def _allocator_names(tf: Any) -> list[str]:
    """The devices whose allocator keeps figures: each logical GPU, and /CPU:0 when the CPU allocates through
    BFC (cpu_memory_limit_mib; it stands for every logical CPU: they share one allocator). Only call once
    TensorFlow is initialized."""
    logical = [short_device_name(d.name) for d in tf.config.list_logical_devices()]
    cpu_bfc = os.environ.get(CPU_BFC_ENV, "").lower() == "true" and "/CPU:0" in logical
    return [name for name in logical if name.startswith("/GPU:")] + (["/CPU:0"] if cpu_bfc else [])


def reset_peaks(tf: Any) -> None:
    if not tensorflow_initialized():
        return  # nothing to reset (and reading would start TensorFlow before the cell's own configuration)
    for name in _allocator_names(tf):
        with contextlib.suppress(ValueError):  # a device whose allocator keeps no figures (the plain CPU's)
            tf.config.experimental.reset_memory_stats(name.lstrip("/"))


def read_peaks(tf: Any, report: CellReport) -> None:
    if not tensorflow_initialized():
        return
    report.devices = [short_device_name(d.name) for d in tf.config.list_logical_devices()]
    for name in _allocator_names(tf):
        try:
            report.peaks[name] = int(tf.config.experimental.get_memory_info(name.lstrip("/"))["peak"])
        except ValueError:
            continue
    report.shared_cpu_allocator = "/CPU:0" in report.peaks and sum(d.startswith("/CPU:") for d in report.devices) > 1
    limit = _cpu_cap_bytes()
    if limit and "/CPU:0" in report.peaks:
        report.limits["/CPU:0"] = limit


def _cpu_cap_bytes() -> int | None:
    if os.environ.get(CPU_BFC_ENV, "").lower() != "true":
        return None
    text = os.environ.get(CPU_LIMIT_ENV, "")
    return int(text) * 1024 * 1024 if text.isdigit() else None


def is_out_of_memory(tf: Any, exc: BaseException) -> bool:
    return isinstance(exc, tf.errors.ResourceExhaustedError) or is_oom_message(str(exc))


def run_cell(run: Callable[[], Any], cell_file: str, sieve: OutputSieve) -> tuple[CellReport, Any]:
    """Run the cell (`run()`, its code compiled as `cell_file`) and gather its report; returns (report, the value
    of its last expression). An out-of-memory error is explained in the report, not raised; any other error is
    kept in `report.error` for the caller to raise after showing the report. KeyboardInterrupt and other
    BaseExceptions pass through."""
    __tracebackhide__ = True  # IPython leaves this frame out of the cell's traceback
    import tensorflow as tf

    report = CellReport()
    value = None
    reset_peaks(tf)
    captured: Captured
    with sieve.capture() as captured, eager_placements() as eager, watch_fallbacks(cell_file) as fallbacks:
        start = time.perf_counter()
        try:
            value = run()
        except Exception as exc:
            report.error = exc
        finally:
            report.wall_s = time.perf_counter() - start
    report.fallbacks = list(fallbacks)
    logged = [placed for stream, line in captured.lines if (placed := parse_line(line, stream)[1]) is not None]
    report.from_log = bool(logged)
    report.placements = logged or list(eager)
    if not logged and eager:
        report.notes.append("TensorFlow's placement log was off when it initialized (turning it on later does "
                            "nothing), so each eager op is shown by its device and a tf.function by its one call; "
                            "run %tf_config first in a fresh kernel to see every op.")
    error = report.error
    if error is not None and is_out_of_memory(tf, error):
        report.oom = explain(captured.dump.lines, str(error))
        report.error = None
    elif captured.dump.lines:  # the cell caught an OOM itself: the allocator's dump still tells of it
        report.oom = explain(captured.dump.lines, None)
        report.oom_caught_by_cell = report.oom is not None
    read_peaks(tf, report)
    return report, value

