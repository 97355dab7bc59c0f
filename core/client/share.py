"""One device shared by a class: its memory split into N seats, one profile per seat, and the proof they hold.

On a GPU the split is of CUDA's total (what TensorFlow can use), less what each seat's process holds beyond
TensorFlow's allocator: its CUDA context, measured on an H100 (tests/fixtures/h100/gpu.json) at 522 MiB for a
process under memory growth after its first op, and at 521 MiB above the limit of a process under
memory_fraction 0.25 — about 520 MiB, CONTEXT_RESERVE_MIB, plus HEADROOM_MIB per seat. The headroom is needed:
a logical GPU's process takes its whole memory_limit at its first op (recorded: a 2048+4096 split held
2,570 MiB = 522 + 2,048), so every seat holds limit + context at once, and with 520 alone three seats of an
H100 would ask for 5 MiB more than CUDA's total. Each seat's profile makes that one GPU visible as one logical
GPU whose memory_limit is the seat's share: TensorFlow's allocator in that process never takes more. On the CPU
(no GPU, or a base profile that hides the GPUs) the split is of the base profile's CPU cap
(`cpu_memory_limit_mib`), each seat capped at its share.

Verifying starts the N seats side by side, each running the panel's own `run fit` under its seat's profile (the
run `fit-batch` verifies with: core.catalogue.fit_runs.start_panel_fit), and reads each one's allocator
peak from its record. A seat holds when its run finished and its peak stayed within its limit.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TypedDict

from tf_device_panel.core.catalogue import JobError
from tf_device_panel.core.catalogue.fit_runs import (
    PanelRun,
    read_run,
    run_device,
    start_run,
    stop_run,
    wait_runs,
)
from tf_device_panel.core.catalogue.fit_work import Work
from tf_device_panel.core.config import DeviceConfig, GpuInfo, save_profile

MIB = 1024 * 1024
CONTEXT_RESERVE_MIB = 520    # per process on a GPU: its CUDA context (H100: 521–522 MiB measured)
HEADROOM_MIB = 16            # per seat on a GPU, above the context: what the measurements exceed 520 by, and more
DRIVER_RESERVE_MIB = 480     # NVML's total less CUDA's on the H100 (81,559 - 81,079), where only NVML's is known
MIN_SEAT_MIB = 32            # a seat smaller than this cannot hold TensorFlow's own first allocations
MAX_SEATS = 256
VERIFY_MODEL, VERIFY_BATCH = "cnn", 32
VERIFY_TIMEOUT_S = 900.0
# Host memory one verifying seat takes: measured here, a seat's `run fit` (cnn, batch 32) under a 64 MiB CPU cap
# peaked at 662 MiB resident (its TensorFlow runtime); a GPU seat also maps CUDA's libraries.
SEAT_HOST_MIB = {"/CPU": 700, "/GPU": 2048}


class SharePlanJson(TypedDict):
    device: str
    source: str
    total_mib: int
    reserved_mib_per_seat: int
    seat_limit_mib: int
    seat_limit_bytes: int


class _SeatBase(TypedDict):
    seat: int
    profile: str
    limit_bytes: int


class SeatRow(_SeatBase, total=False):
    """One seat as `share --json` prints it: its profile and limit, and with --verify how its run went."""

    peak_bytes: int | None
    status: str                       # held, over, out of memory, failed
    error: str | None
    seconds: float
    process_peak_bytes: int | None    # its processes' own peak: resident set on the CPU, NVML's on a GPU


class _ReportBase(SharePlanJson):
    out: str
    seats: list[SeatRow]


class ShareReport(_ReportBase, total=False):
    """What `share --json` prints: the plan, where the profiles went, each seat and (--verify) whether all held."""

    verified: bool


class ShareError(ValueError):
    """Bad input: what was wrong and what to do (the command line exits 2)."""


@dataclass(frozen=True)
class SharePlan:
    device: str                  # "/GPU:0" (TensorFlow's physical index) or "/CPU:0"
    source: str                  # where the total came from, in words
    total_mib: int
    reserved_mib: int            # per seat, outside TensorFlow's allocator
    seat_mib: int                # each seat's limit
    configs: tuple[DeviceConfig, ...]

    def to_json(self) -> SharePlanJson:
        return {"device": self.device, "source": self.source, "total_mib": self.total_mib,
                "reserved_mib_per_seat": self.reserved_mib, "seat_limit_mib": self.seat_mib,
                "seat_limit_bytes": self.seat_mib * MIB}


def plan_seats(base: DeviceConfig, seats: int, gpus: list[GpuInfo] | None, *, no_gpu_reason: str = "") -> SharePlan:
    """Split the device `base` uses into `seats` seats. `gpus`: the machine's GPUs (NVML, CUDA's totals), None or
    empty when it has none. ShareError for a count that is not a positive number or is too many for the memory,
    and for a CPU-only split whose base has no CPU cap."""
    if seats < 1:
        raise ShareError(f"--seats: {seats} is not a number of seats; use 1 or more (e.g. --seats 3)")
    if seats > MAX_SEATS:
        raise ShareError(f"--seats: {seats} is more than {MAX_SEATS} seats on one device; use {MAX_SEATS} or fewer")
    visible = base.visible_gpus
    candidates = [g for g in gpus or () if visible is None or g.index in visible]
    if candidates:
        gpu = min(candidates, key=lambda g: g.index)
        if gpu.total_mib is None:
            raise ShareError(f"GPU {gpu.index}'s total memory is unknown (NVML did not report it); "
                             "check the driver with `tf-device-panel doctor`")
        total, reserved = gpu.total_mib, CONTEXT_RESERVE_MIB + HEADROOM_MIB
        source = f"GPU {gpu.index} ({gpu.name or 'unnamed'}): {total} MiB as CUDA counts it"
        if gpu.total_source != "CUDA":  # NVML's total (an older driver): CUDA's is less by the driver's reserve
            total -= DRIVER_RESERVE_MIB
            source = (f"GPU {gpu.index} ({gpu.name or 'unnamed'}): {gpu.total_mib} MiB as NVML counts it, less "
                      f"{DRIVER_RESERVE_MIB} MiB the driver keeps (the H100's), {total} MiB")
        seat_mib = (total - seats * reserved) // seats
        what = f"GPU {gpu.index}'s {total} MiB, less {reserved} MiB per seat for its CUDA context and headroom,"
        configs = tuple(base.with_changes(visible_gpus=(gpu.index,), virtual_gpus={gpu.index: (seat_mib,)},
                                          memory_growth=False, memory_fraction=None)
                        for _ in range(seats)) if seat_mib >= MIN_SEAT_MIB else ()
        device = f"/GPU:{gpu.index}"
    else:
        if not base.cpu_memory_limit_mib:
            why = ("the base profile hides the GPUs (visible_gpus: [])" if visible == () else
                   f"no GPU to split ({no_gpu_reason or 'NVML sees none'})")
            raise ShareError(f"{why}, and the base profile has no CPU cap to split: set cpu_memory_limit_mib in it "
                             f"(e.g. {seats * 1024} for {seats} seat{'s' if seats > 1 else ''} of 1 GiB) and pass it "
                             "with --config")
        total, reserved = base.cpu_memory_limit_mib, 0
        source = f"the CPU cap of the base profile: cpu_memory_limit_mib {total}"
        seat_mib = total // seats
        what = f"the CPU cap of {total} MiB"
        configs = tuple(base.with_changes(cpu_memory_limit_mib=seat_mib) for _ in range(seats)) \
            if seat_mib >= MIN_SEAT_MIB else ()
        device = "/CPU:0"
    if not configs:
        most = max(0, total // (MIN_SEAT_MIB + reserved))
        raise ShareError(f"--seats: {seats} seats are too many: {what} split {seats} ways leaves "
                         f"{max(seat_mib, 0)} MiB a seat, under the {MIN_SEAT_MIB} MiB a seat needs; use at most "
                         f"{most} seats")
    return SharePlan(device, source, total, reserved, seat_mib, configs)


def seat_path(out: Path, index: int) -> Path:
    return out / f"seat-{index}.json"


def check_out_dir(out: Path, force: bool) -> None:
    if out.exists() and not out.is_dir():
        raise ShareError(f"--out: {out} is a file, not a folder; name a new or empty folder")
    if out.is_dir() and not force and any(out.iterdir()):
        raise ShareError(f"--out: {out} exists and is not empty; name a new or empty folder, or pass --force to "
                         "write the seats' profiles into it (replacing seat-N.json files)")


def write_profiles(plan: SharePlan, out: Path, force: bool = False) -> list[Path]:
    check_out_dir(out, force)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for index, config in enumerate(plan.configs, start=1):
        save_profile(config, seat_path(out, index))
        paths.append(seat_path(out, index))
    return paths


def check_host_memory(plan: SharePlan, available_mib: int | None = None) -> None:
    """ShareError when starting every seat at once would take more host memory than is available."""
    if available_mib is None:
        import psutil

        available_mib = psutil.virtual_memory().available // MIB
    each = SEAT_HOST_MIB[plan.device[:4]]
    seats = len(plan.configs)
    if seats * each > available_mib:
        raise ShareError(f"--verify: {seats} seats side by side need about {seats * each:,} MiB of this machine's "
                         f"memory (about {each} MiB for each seat's TensorFlow process) and {available_mib:,} MiB "
                         f"is available; verify at most {max(1, available_mib // each)} seats here (write the "
                         "profiles without --verify, and verify a smaller split), or free memory")


def verify_seats(plan: SharePlan, profiles: list[Path], *, work: Work | None = None, batch: int = VERIFY_BATCH,
                 timeout_s: float = VERIFY_TIMEOUT_S) -> list[SeatRow]:
    """Start every seat's run of the work at once, wait for all, and report each seat's peak against its limit
    and its processes' own peak memory."""
    work = work or Work(VERIFY_MODEL)
    limit = plan.seat_mib * MIB
    device = run_device(plan.device)
    with tempfile.TemporaryDirectory(prefix="tf-share-") as root:
        runs: list[PanelRun] = []
        try:
            for number, profile in enumerate(profiles, start=1):
                folder = Path(root) / f"seat-{number}"
                folder.mkdir()
                runs.append(start_run(work, batch, profile, folder, plan.device))
        except BaseException:
            for run in runs:
                stop_run(run)
            raise
        wait_runs(runs, timeout_s, on_gpu=plan.device.startswith("/GPU"))
        rows: list[SeatRow] = []
        for number, (run, profile) in enumerate(zip(runs, profiles, strict=True), start=1):
            row: SeatRow = {"seat": number, "profile": str(profile), "limit_bytes": limit, "peak_bytes": None}
            if run.stopped:
                row["status"], row["error"] = "failed", f"still running after {timeout_s:.0f} s; stopped"
                rows.append(row)
                continue
            try:
                outcome = read_run(run)
            except JobError as exc:
                row["status"], row["error"], row["seconds"] = "failed", str(exc), run.seconds
                rows.append(row)
                continue
            peak = outcome["peaks"].get(device, outcome["peak_bytes"])
            row["peak_bytes"], row["seconds"] = peak, run.seconds
            row["process_peak_bytes"] = outcome.get("gpu_process_peak_bytes") or outcome.get("rss_peak_bytes")
            if not outcome["fits"]:
                row["status"], row["error"] = "out of memory" if "oom" in outcome else "failed", outcome["error"]
            elif peak is not None and peak > limit:
                row["status"] = "over"
                row["error"] = f"peak {peak / MIB:.1f} MiB is over the seat's {plan.seat_mib} MiB"
            else:
                row["status"], row["error"] = "held", None
            rows.append(row)
    return rows
