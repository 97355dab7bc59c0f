"""One run of a work (core.catalogue.fit_work) at one batch, by the panel's own command line under a profile, and
what it did: whether it held, the allocator's peak its record gives, and its process's own peak memory.

fit-batch runs every batch it tries this way (core.client.fit_batch), and so does `share` for each seat
(core.client.share): `tf-device-panel run JOB --config PROFILE --json`, as a user would start it, its record in
a history of its own.

The process's own peak is the largest resident set of the run's processes (the kernel's figure for the process
tree, read when it is reaped: nothing is missed between samples) and, on a GPU, the most NVML said those
processes held on the GPU, sampled while it ran.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from tf_device_panel.core.catalogue.fit_work import Work
from tf_device_panel.core.catalogue.jobs import JobError
from tf_device_panel.core.config import DeviceConfig
from tf_device_panel.core.processes import start_module
from tf_device_panel.core.results import FitProbe
from tf_device_panel.core.units import KIB, MIB

# The module that runs the panel's command line (`--panel`), dying with its parent: named as the launcher names it.
PROBE_MODULE = "tf_device_panel.core.panel_runs.command"
POLL_S = 0.2


def capped_profile(base: DeviceConfig, device: str, budget_mib: int) -> DeviceConfig:
    """The user's configuration with its device capped at the budget: the CPU's BFC allocator, or the one GPU
    `device` names (its physical index) made one logical GPU of the budget's size."""
    if device.upper().startswith("/GPU:"):
        index = int(device.split(":")[-1])
        return base.with_changes(visible_gpus=(index,), virtual_gpus={index: (budget_mib,)}, memory_growth=False,
                                 memory_fraction=None, log_placement=False)
    return base.with_changes(cpu_memory_limit_mib=budget_mib, log_placement=False)


def run_device(device: str) -> str:
    """The device a run uses inside its own process: a GPU run's profile leaves it one GPU, its /GPU:0."""
    return "/GPU:0" if device.upper().startswith("/GPU:") else "/CPU:0"


@dataclass
class PanelRun:
    """A started run: its process, its folder, and what was measured while it ran."""

    process: subprocess.Popen[bytes]
    folder: Path
    batch: int
    started: float = field(default_factory=time.monotonic)
    gpu_peak_bytes: int | None = None
    rss_peak_bytes: int | None = None
    seconds: float | None = None
    stopped: bool = False           # killed before its end (a time limit, a cancel)


def start_run(work: Work, batch: int, profile: Path, folder: Path, device: str = "/CPU:0") -> PanelRun:
    """`tf-device-panel run ... --config PROFILE --json` for the work at this batch, dying with its parent, its
    record under FOLDER/home; its outcome and stderr go to FOLDER."""
    with open(folder / "outcome.json", "wb") as stdout, open(folder / "stderr.txt", "wb") as stderr:
        (job, *params) = work.run_args(batch, run_device(device))
        process = start_module(PROBE_MODULE, "--panel", "run", job, "--config", str(profile), "--json", *params,
                               env={"TF_DEVICE_PANEL_HOME": str(folder / "home")}, stdout=stdout, stderr=stderr,
                               die_with_parent=True)
    return PanelRun(process, folder, batch)


def poll_run(run: PanelRun, nvml_sampler: GpuSampler | None = None) -> bool:
    """Whether the run has ended (then it is reaped, its peak resident set read); samples the GPU while not."""
    if run.seconds is not None:
        return True
    pid, status, usage = os.wait4(run.process.pid, os.WNOHANG)
    if pid == 0:
        if nvml_sampler is not None:
            used = nvml_sampler.used_bytes(run.process.pid)
            if used is not None:
                run.gpu_peak_bytes = max(run.gpu_peak_bytes or 0, used)
        return False
    run.seconds = time.monotonic() - run.started
    run.process.returncode = os.waitstatus_to_exitcode(status)
    run.rss_peak_bytes = usage.ru_maxrss * KIB if usage.ru_maxrss else None  # Linux counts it in KiB
    _kill_rest(run)
    return True


def stop_run(run: PanelRun) -> None:
    """Kill the run's whole process group and reap it; a run stopped so is marked `stopped`."""
    if run.seconds is None:
        run.stopped = True
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(run.process.pid, signal.SIGKILL)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(run.process.pid, 0)
        run.process.returncode = -signal.SIGKILL
        run.seconds = time.monotonic() - run.started
    _kill_rest(run)


def _kill_rest(run: PanelRun) -> None:
    """Whatever of the run's group outlived it (its runtime's spare) goes with it."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(run.process.pid, signal.SIGKILL)


def wait_runs(runs: list[PanelRun], timeout_s: float, stop: threading.Event | None = None,
              on_gpu: bool = False) -> bool:
    """Wait for every run's end; False (and those still running killed) when `stop` is set or they took over
    timeout_s."""
    sampler = GpuSampler() if on_gpu else None
    started = time.monotonic()
    try:
        while not all([poll_run(run, sampler) for run in runs]):
            if (stop is not None and stop.is_set()) or time.monotonic() - started > timeout_s:
                for run in runs:
                    stop_run(run)
                return False
            if stop is not None:
                stop.wait(POLL_S)
            else:
                time.sleep(POLL_S)
        return True
    except BaseException:
        for run in runs:
            stop_run(run)
        raise


class GpuSampler:
    """NVML's memory per process, summed over a run's process tree (its runtime is a grandchild)."""

    def __init__(self) -> None:
        from tf_device_panel.core.devices.nvml import shared

        self.nvml = shared()
        self.count = len(self.nvml.gpus()) if self.nvml.init() else 0

    def used_bytes(self, root: int) -> int | None:
        if not self.count:
            return None
        import psutil

        try:
            tree = {root, *(child.pid for child in psutil.Process(root).children(recursive=True))}
        except psutil.Error:
            return None
        used = [process.used_mib for index in range(self.count) for process in self.nvml.processes(index) or ()
                if process.pid in tree and process.used_mib is not None]
        return sum(used) * MIB if used else None


def read_run(run: PanelRun) -> FitProbe:
    """What a finished run did: whether it held, its allocator peak (the largest over its devices of the peaks
    its outcome gives: `run --json` prints the ones its record keeps), its process's peaks, its error and, for an
    OOM, the figures."""
    folder, batch = run.folder, run.batch
    try:
        outcome = json.loads((folder / "outcome.json").read_text())
    except (OSError, ValueError):
        tail = (folder / "stderr.txt").read_text(errors="replace").strip().splitlines()[-3:]
        raise JobError(f"the run at batch {batch} printed no outcome (exit {run.process.returncode}): "
                       + " / ".join(tail)) from None
    allocator_mib = (outcome.get("peaks") or {}).get("allocator_mib") or {}
    peaks = {device: int(mib * MIB) for device, mib in allocator_mib.items()}
    peak = max(peaks.values()) if peaks else None
    fits = outcome.get("status") == "ok"
    row: FitProbe = {"batch": batch, "fits": fits, "peak_bytes": peak, "seconds": run.seconds or 0.0,
                     "error": None if fits else (outcome.get("error") or {}).get("message"),
                     "peaks": peaks, "rss_peak_bytes": run.rss_peak_bytes, "gpu_process_peak_bytes": run.gpu_peak_bytes}
    if fits and peak is None:
        raise JobError(f"the run at batch {batch} held but its record has no allocator figures (was the device "
                       "capped?)")
    oom = outcome.get("oom")
    if oom:
        row["oom"] = {key: oom.get(key) for key in ("request_bytes", "limit_bytes", "in_use_bytes",
                                                    "largest_free_bytes", "verdict")}
    return row

