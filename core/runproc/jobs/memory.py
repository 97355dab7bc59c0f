"""Memory behaviour: what memory growth, memory limits and virtual splits do, step by step."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from tf_device_panel.core.catalogue.jobs import JobError
from tf_device_panel.core.protocol.output_lines import short_device_name
from tf_device_panel.core.runproc.jobs.context import JobContext
from tf_device_panel.core.runproc.jobs.devices import resolve_device
from tf_device_panel.core.units import MIB

if TYPE_CHECKING:  # the result kinds are annotations here: the job's run need not import core.results
    from tf_device_panel.core.results import MemoryResult, MemoryRow

HOST_RESERVE = 0.15  # never take the host below this share of free memory


def device_memory(tf: Any, device: str) -> dict[str, float | None]:
    """TF's allocator figures (MiB) for a GPU, and for the CPU when its allocator keeps them (BFC, under
    cpu_memory_limit_mib); otherwise this process's resident memory."""
    import psutil

    short = short_device_name(device)
    if short.startswith("/GPU:"):
        info = tf.config.experimental.get_memory_info(short.lstrip("/"))
        return {"current_mib": info["current"] / MIB, "peak_mib": info["peak"] / MIB, "rss_mib": None}
    if os.environ.get("TF_CPU_ALLOCATOR_USE_BFC", "").lower() in ("true", "1"):
        try:  # logical CPUs share the one CPU allocator
            info = tf.config.experimental.get_memory_info("CPU:0")
        except ValueError:  # "Allocator stats not available": the variable came too late for this process
            pass
        else:
            return {"current_mib": info["current"] / MIB, "peak_mib": info["peak"] / MIB, "rss_mib": None}
    return {"current_mib": None, "peak_mib": None, "rss_mib": psutil.Process(os.getpid()).memory_info().rss / MIB}


def memory(ctx: JobContext, device: str = "", step_mib: int = 64, steps: int = 8,
           release: bool = True) -> MemoryResult:
    import psutil
    import tensorflow as tf

    full = resolve_device(device)
    short = short_device_name(full)
    on_gpu = short.startswith("/GPU:")
    floats_per_step = step_mib * MIB // 4
    held: list[Any] = []
    rows: list[MemoryRow] = []
    baseline = device_memory(tf, full)
    allocator = baseline["current_mib"] is not None  # TF's allocator figures: a GPU's, or the capped CPU's
    print(f"Allocating {steps} × {step_mib} MiB on {short}"
          + (" (TF allocator figures)" if allocator else " (process resident memory)"), flush=True)

    def record(step: int, label: str) -> MemoryRow:
        measured = device_memory(tf, full)
        row: MemoryRow = {"step": step, "label": label, "allocated_mib": len(held) * step_mib,
                          "current_mib": measured["current_mib"], "peak_mib": measured["peak_mib"],
                          "rss_mib": measured["rss_mib"]}
        rows.append(row)
        value = row["current_mib"] if allocator else row["rss_mib"]
        ctx.metric("memory", float(value or 0.0), step=step, device=short,
                   **{k: v for k, v in row.items() if k != "step"})
        figures = (f"TF current {row['current_mib']:.0f} MiB, peak {row['peak_mib']:.0f} MiB"
                   if allocator else f"process RSS {row['rss_mib']:.0f} MiB")
        print(f"step {step} ({label}): {row['allocated_mib']} MiB held — {figures}", flush=True)
        return row

    record(0, "before")
    for step in range(1, steps + 1):
        ctx.check_cancelled()
        if not on_gpu and psutil.virtual_memory().available - step_mib * MIB \
                < HOST_RESERVE * psutil.virtual_memory().total:
            raise JobError(f"stopped before step {step}: another {step_mib} MiB would leave the host with less "
                           f"than {HOST_RESERVE:.0%} of its memory free ({len(held) * step_mib} MiB held so far). "
                           "Nothing was taken past that point.")
        try:
            with tf.device(full):
                tensor = tf.ones([floats_per_step], dtype=tf.float32)
            held.append(tensor)
        except tf.errors.ResourceExhaustedError as exc:
            first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else "ResourceExhaustedError"
            held.clear()
            raise JobError(
                f"out of memory on {short} at step {step}, with {(step - 1) * step_mib} MiB already held: "
                f"{first_line}. The device's memory limit (memory_limit or the GPU's size; cpu_memory_limit_mib "
                "on the CPU) was reached. TensorFlow raised a clean ResourceExhaustedError: a script can catch it "
                "and go on "
                "(this run's process ends with the job).") from None
        ctx.progress(step, steps + 1, f"step {step}/{steps}: {len(held) * step_mib} MiB held on {short}")
        record(step, "allocated")

    if release:
        held.clear()
        record(steps + 1, "released")
    ctx.progress(1, 1, "done", force=True)
    final = rows[-1]
    notes = []
    if on_gpu:
        notes.append("TF's 'current' falls when tensors are freed, but the memory TensorFlow reserved from the GPU "
                     "stays in its pool: with memory growth it is not given back to the driver (nvidia-smi still "
                     "shows it); without growth nearly the whole GPU (or the logical device's limit) was reserved "
                     "at start.")
    else:
        notes.append("On the CPU, freed tensors go back to the allocator; whether the process's resident memory "
                     "drops depends on the C allocator returning pages to the system.")
    return {
        "kind": "memory",
        "device": full,
        "short_device": short,
        "step_mib": step_mib,
        "rows": rows,
        "baseline": baseline,
        "final": final,
        "released": release,
        "notes": notes,
    }
