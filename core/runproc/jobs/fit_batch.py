"""The largest batch that fits a memory budget: probe, fit, predict, verify.

Each probe is the `fit` job's own training (one epoch, then evaluate) at one batch size, in a fresh process capped
at the budget (core.runproc.fit_probe): its allocator peak is recorded. The verifying runs (on the CPU) are the fit
job itself, run by the panel's command line under a profile with cpu_memory_limit_mib = the budget: what a user
who takes the prediction runs. Three probes at growing batches (×4 each)
give peak ≈ fixed + per-sample × batch (least squares); the prediction is the largest batch whose predicted peak
stays under MARGIN of the budget. It is then verified by two runs at the prediction (each must fit with its
peak under HEADROOM of the budget), and one at the
next step up (a quarter more), which must fail or is flagged: the prediction was conservative.
"""

from __future__ import annotations

import contextlib
import json
import math
import subprocess
import tempfile
import time
from pathlib import Path

from tf_device_panel.core.catalogue.fit_runs import PROBE_MODULE, read_panel_fit, start_panel_fit
from tf_device_panel.core.catalogue.jobs import JobError
from tf_device_panel.core.oom import DumpCollector, explain
from tf_device_panel.core.processes import kill_group, start_module
from tf_device_panel.core.protocol.output_lines import short_device_name
from tf_device_panel.core.results import FitBatchResult, FitProbe
from tf_device_panel.core.runproc.jobs.context import JobContext
from tf_device_panel.core.text import exception_line

MIB = 1024 * 1024
FIRST_BATCH = {"cnn": 8, "dense": 256}
PROBE_GROWTH = 4          # each probe's batch is this times the last
PROBES = 3
# The predicted peak stays under this share of the budget: the pool grows by regions and a large tensor needs one
# free block of its size (measured: with the cnn under 256 MiB, batch 512 peaked at 203 MiB, 525 ran out asking
# for one 33 MiB block; 0.9 predicted 525). 0.8 and 0.85 were still too close: a batch whose peak was 80 % of the
# budget in two verifying runs died in a later fit asking for one 61 MiB block with 118 MiB in use (fragmented;
# the allocator's peak does not show the largest single request), 1 run in 5.
MARGIN = 0.65
HEADROOM = 0.75          # a verified peak above this share of the budget is too close: a smaller batch is verified
# On a busy machine the same batch's peak moved by a fifth from run to run (three cuts of a tenth were not always
# enough: 431 → 387 → 348 peaked at 81 %, 76 %, 80 % beside two CPU burners).
VERIFY_TRIES = 5
STEP_UP = 0.25            # the next step up: a quarter more than the prediction
MAX_BATCH = 1_000_000     # the fit job's own limit
PROBE_TIMEOUT_S = 600.0


def fit_line(points: list[tuple[int, int]]) -> tuple[float, float]:
    """(fixed bytes, bytes per sample): least squares through (batch, peak) points."""
    count = len(points)
    mean_x = sum(x for x, _ in points) / count
    mean_y = sum(y for _, y in points) / count
    spread = sum((x - mean_x) ** 2 for x, _ in points)
    slope = sum((x - mean_x) * (y - mean_y) for x, y in points) / spread if spread else 0.0
    return mean_y - slope * mean_x, slope


def predict(fixed: float, per_sample: float, budget_bytes: int) -> int:
    """The largest batch whose predicted peak stays under MARGIN of the budget (MAX_BATCH when the peak does
    not grow with the batch)."""
    if per_sample <= 0:
        return MAX_BATCH
    return max(1, min(MAX_BATCH, math.floor((budget_bytes * MARGIN - fixed) / per_sample)))


def peak_bytes(row: FitProbe) -> int:
    """A run's allocator peak; only a run that fitted has one."""
    peak = row.get("peak_bytes")
    if peak is None:
        raise JobError(f"the {row.get('role', 'run')} at batch {row.get('batch')} reported no allocator peak")
    return peak


def fit_batch(ctx: JobContext, model: str = "cnn", budget_mib: int = 256, image_size: int = 32,
              device: str = "") -> FitBatchResult:
    short = short_device_name(device) if device.strip() else "/CPU:0"
    if short.startswith("/GPU:") and not (ctx.device_config.memory_growth or ctx.device_config.virtual_gpus):
        raise JobError(f"fit-batch on {short}: this run's own process holds nearly all of the GPU's memory (no "
                       "memory growth), so the probes beside it would not get the budget; run it with a profile "
                       "that has memory_growth on")
    if not short.startswith(("/CPU:", "/GPU:")):
        raise JobError(f"device: {device!r} is neither a CPU nor a GPU; use /CPU:0 or /GPU:N")
    budget = budget_mib * MIB
    rows: list[FitProbe] = []
    total_steps = PROBES + 3  # the probes, two verifying runs, the step up

    def run(batch: int, role: str) -> FitProbe:
        ctx.check_cancelled()
        ctx.progress(len(rows), max(total_steps, len(rows) + 1), f"{role}: batch {batch} under {budget_mib} MiB")
        if role != "probe" and short.startswith("/CPU:"):
            row = panel_fit(ctx, model, batch, budget_mib, image_size)  # verified as a user runs fit
        else:
            row = probe(ctx, model, batch, budget_mib, image_size, short)
        row["role"] = role
        rows.append(row)
        verdict = f"peak {peak_bytes(row) / MIB:.1f} MiB" if row["fits"] else "out of memory"
        print(f"{role} batch {batch}: {verdict} ({row['seconds']:.1f} s)", flush=True)
        return row

    batch = FIRST_BATCH[model]
    for _ in range(PROBES):
        if not run(min(batch, MAX_BATCH), "probe")["fits"] or batch >= MAX_BATCH:
            break
        batch *= PROBE_GROWTH
    fitted = [(r["batch"], peak_bytes(r)) for r in rows if r["fits"]]
    flags: list[str] = []
    if not fitted:
        raise JobError(f"even a batch of {rows[0]['batch']} does not fit {budget_mib} MiB on {short} "
                       f"({rows[0].get('error') or 'out of memory'}); give it a larger budget_mib")
    if len(fitted) == 1:  # a probe failed at the second size: the line through the origin's fixed cost is unknown
        fixed, per_sample = 0.0, fitted[0][1] / fitted[0][0]
        flags.append("only one probe fitted: the prediction assumes the peak grows in proportion to the batch")
    else:
        fixed, per_sample = fit_line(fitted)
    predicted = predict(fixed, per_sample, budget)
    largest_probe = max(b for b, _ in fitted)
    failed_probes = [r["batch"] for r in rows if not r["fits"]]
    if failed_probes and predicted >= min(failed_probes):
        predicted = max(largest_probe, min(failed_probes) - 1)  # never predict what a probe saw fail
    for attempt in range(VERIFY_TRIES):
        verify = run(predicted, "verify")
        if verify["fits"] and peak_bytes(verify) <= HEADROOM * budget:
            # Once is not enough: the same batch's peak moves by a fifth from run to run (CPU threads, oneDNN's
            # scratch), and a batch that fitted once ran out in the user's next fit. It must fit twice.
            verify = run(predicted, "verify")
            if verify["fits"] and peak_bytes(verify) <= HEADROOM * budget:
                break
        if attempt == VERIFY_TRIES - 1:
            break
        if verify["fits"]:  # it fitted, with too little room: the next run of it may not
            # As far below as its peak was above the headroom, and a tenth more: peaks wander by a fifth.
            share = peak_bytes(verify) / budget
            cut = min(0.9, 0.9 * HEADROOM / share)
            flags.append(f"batch {predicted} fitted, but its peak was {share:.0%} of the budget; "
                         f"tried {1 - cut:.0%} less")
            predicted = max(1, math.floor(predicted * cut))
        else:
            flags.append(f"batch {predicted} did not fit (at large batches the peak grew faster than the probes' "
                         "line, and it varies from run to run); tried a fifth less")
            predicted = max(1, predicted * 4 // 5)
    verified = bool(verify["fits"]) and peak_bytes(verify) <= HEADROOM * budget
    if predicted >= MAX_BATCH:
        flags.append(f"capped at {MAX_BATCH:,}, the fit job's largest batch: the budget holds more")
    up = min(MAX_BATCH, predicted + max(1, round(predicted * STEP_UP)))
    step_up = run(up, "step up") if up > predicted else None
    if step_up is not None and step_up["fits"]:
        flags.append(f"the next step up, batch {up}, fits too (peak {peak_bytes(step_up) / MIB:.1f} MiB): "
                     f"the prediction is conservative")
    probe_s = sum(r["seconds"] for r in rows if r["role"] == "probe")
    verify_s = verify["seconds"]
    for row in rows:
        row["predicted_peak_bytes"] = int(fixed + per_sample * row["batch"])
    ctx.progress(1, 1, "done", force=True)
    return {
        "kind": "fit_batch",
        "model": model,
        "device": short,
        "budget_mib": budget_mib,
        "predicted_max_batch": predicted if verified else None,
        "prediction": predicted,
        "verified": verified,
        "fit": {"fixed_bytes": int(fixed), "bytes_per_sample": per_sample, "margin": MARGIN},
        "probes": rows,
        "step_up": None if step_up is None else {"batch": up, "fits": step_up["fits"]},
        "probe_s": probe_s,
        "verify_s": verify_s,
        "probe_cost_ratio": probe_s / verify_s if verify_s else None,
        "flags": flags,
    }


def _wait(ctx: JobContext, process: subprocess.Popen[bytes], what: str) -> None:
    started = time.monotonic()
    try:
        while True:
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(0.2)
                return
            if ctx.cancel_requested.is_set() or time.monotonic() - started > PROBE_TIMEOUT_S:
                kill_group(process)
                ctx.check_cancelled()
                raise JobError(f"{what} took over {PROBE_TIMEOUT_S:.0f} s; stopped")
    finally:
        kill_group(process)


def panel_fit(ctx: JobContext, model: str, batch: int, budget_mib: int, image_size: int) -> FitProbe:
    """The fit job itself at this batch, run by the panel's command line under a profile capping the CPU at the
    budget (cpu_memory_limit_mib), its record in a history of its own: whether it fitted, and its peak (the
    run's last allocator figures)."""
    with tempfile.TemporaryDirectory(prefix="tf-fit-batch-") as folder:
        profile = Path(folder) / "budget.json"
        profile.write_text(json.dumps({"version": 1, "cpu_memory_limit_mib": budget_mib, "log_placement": False}))
        started = time.monotonic()
        process = start_panel_fit(profile, Path(folder), model, batch, image_size)
        _wait(ctx, process, f"the fit run at batch {batch}")
        row = read_panel_fit(Path(folder), process.returncode, batch, time.monotonic() - started)
        del row["peaks"]  # the result's probe rows keep the largest
    if not row["fits"] and "oom" not in row:
        raise JobError(f"the fit run at batch {batch} failed, not for memory: {row['error']}")
    return row


def probe(ctx: JobContext, model: str, batch: int, budget_mib: int, image_size: int, device: str) -> FitProbe:
    """One probe in a fresh process: its figures, and for one that ran out, its OOM explained."""
    with tempfile.TemporaryDirectory(prefix="tf-fit-batch-") as folder:
        out, err = Path(folder) / "probe.json", Path(folder) / "stderr.txt"
        started = time.monotonic()
        with open(err, "wb") as stderr:
            process = start_module(PROBE_MODULE, "--model", model, "--batch", str(batch), "--budget-mib",
                                   str(budget_mib), "--image-size", str(image_size), "--device", device,
                                   "--out", str(out), stdout=subprocess.DEVNULL, stderr=stderr,
                                   die_with_parent=True)
            _wait(ctx, process, f"the probe at batch {batch}")
        stderr_text = err.read_text(errors="replace")
        try:
            row: FitProbe = json.loads(out.read_text())  # what core.runproc.fit_probe wrote
        except (OSError, ValueError):
            # TensorFlow can die of an OOM instead of raising it (measured: SIGSEGV after "OP_REQUIRES failed at
            # mkl_util.h:848 : RESOURCE_EXHAUSTED"): the batch does not fit all the same.
            said = [line for line in stderr_text.splitlines() if "OOM when allocating" in line]
            if not said:  # its error, not the frames of its traceback
                raise JobError(f"the probe at batch {batch} ended without its figures (exit "
                               f"{process.returncode}): {exception_line(stderr_text)}") from None
            row = {"batch": batch, "fits": False, "peak_bytes": None, "seconds": time.monotonic() - started,
                   "error": said[-1].split("] ", 1)[-1], "crashed": process.returncode}
        if not row["fits"]:
            collector = DumpCollector()
            collector.feed(stderr_text)
            oom = explain(collector.lines, row.get("error"), batch_size=batch)
            if oom is not None:
                row["oom"] = {"request_bytes": oom.get("request_bytes"), "limit_bytes": oom.get("limit_bytes"),
                              "in_use_bytes": oom.get("in_use_bytes"),
                              "largest_free_bytes": oom.get("largest_free_bytes"), "verdict": oom.get("verdict")}
        return row
