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

Each seat's processes also take memory beyond their allocator's cap: on the host, TensorFlow's runtime (resident
memory the CPU's allocator does not hold), and on a GPU what the process holds beyond its logical GPU's limit
(its CUDA context). Before verifying, one run of the work alone measures both for that work (`measure_work`:
its resident peak less its allocator's on the CPU, NVML's figure for the process on a GPU less its limit), and
the seats are planned with them: a GPU's reserve per seat, the host memory the seats need side by side. Where
nothing runs (the profiles only written) or the run did not hold, the report says so and what it assumed.

Verifying starts the N seats side by side, each running the panel's own `run fit` under its seat's profile (the
run `fit-batch` verifies with: core.panel_runs.runs.start_run), and reads each one's allocator
peak from its record. A seat holds when its run finished and its peak stayed within its limit.
"""

from __future__ import annotations

import math
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypedDict

from tf_device_panel.core.catalogue import JobError
from tf_device_panel.core.catalogue.fit_work import Work
from tf_device_panel.core.catalogue.share_params import MAX_SEATS, VERIFY_BATCH
from tf_device_panel.core.config import DeviceConfig, GpuInfo, save_profile
from tf_device_panel.core.panel_runs.runs import (
    PanelRun,
    read_run,
    run_device,
    start_run,
    stop_run,
    wait_runs,
)
from tf_device_panel.core.text import tf_error_text
from tf_device_panel.core.units import MIB, mib_text

CONTEXT_RESERVE_MIB = 520    # per process on a GPU: its CUDA context (H100: 521–522 MiB measured)
HEADROOM_MIB = 16            # per seat on a GPU, above the context: what the measurements exceed 520 by, and more
DRIVER_RESERVE_MIB = 480     # NVML's total less CUDA's on the H100 (81,559 - 81,079), where only NVML's is known
MIN_SEAT_MIB = 32            # a seat smaller than this cannot hold TensorFlow's own first allocations
VERIFY_MODEL = "cnn"
VERIFY_TIMEOUT_S = 900.0
# A seat's cap is at least this times the work's peak alone: runs side by side peak higher and fragment (the
# cnn's peaks at one batch spread by a third from run to run).
PEAK_ROOM = 1.5
# Host memory a seat's processes take beside its CPU allocator, assumed where the work's own run did not measure
# it: measured here, a seat's `run fit` (cnn, batch 32) under a 64 MiB CPU cap peaked at 662 MiB resident with
# 22 MiB in its allocator, and at batch 420 under 256 MiB at 843 MiB with 207 MiB in it: about 640 MiB of
# TensorFlow's runtime. A GPU seat also maps CUDA's libraries: all its resident memory is beside its allocator.
SEAT_HOST_MIB = {"/CPU": 640, "/GPU": 2048}


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


class OverheadJson(TypedDict):
    measured: bool                    # by a run of the work alone; False: assumed (`said` says why)
    host_mib: int                     # a seat's processes' host memory beside its allocator
    gpu_mib: int | None               # on a GPU: what a seat's process holds beyond its limit
    said: str


class _ReportBase(SharePlanJson):
    out: str
    seats: list[SeatRow]


class SeatsTried(TypedDict):
    seats: int
    seat_limit_mib: int
    held: bool                        # every seat's run held, side by side
    statuses: list[str]


class MostJson(TypedDict):
    seats: int
    bound: str                        # what bounded the first guess, in words
    above: str                        # why one seat more is not the answer, in words
    tried: list[SeatsTried]           # each count of seats verified side by side, in order
    work_peak_mib: float              # the work's allocator peak alone with the whole device
    process_mib: int | None           # its processes' own peak then (resident on the CPU, NVML's on a GPU)


class ShareReport(_ReportBase, total=False):
    """What `share --json` prints: the plan, where the profiles went, the work and batch the seats run, warnings
    said before writing, each seat and (--verify, --max) whether all held; with --max how the number was found."""

    work: str
    batch: int
    warnings: list[str]
    verified: bool
    most: MostJson
    overhead: OverheadJson            # what each seat takes beyond its allocator, measured or assumed


class ShareError(ValueError):
    """Bad input: what was wrong and what to do (the command line exits 2). `field` names the input at fault
    (seats, out, config, batch, work): the command line says it as its option, the window as its field; the
    message itself names no command-line option."""

    def __init__(self, message: str, field: str = "seats"):
        super().__init__(message)
        self.field = field


def seats_text(count: int) -> str:
    """"1 seat", "3 seats"."""
    return f"{count} seat{'' if count == 1 else 's'}"


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


def plan_seats(base: DeviceConfig, seats: int, gpus: list[GpuInfo] | None, *, no_gpu_reason: str = "",
               reserved_mib: int | None = None) -> SharePlan:
    """Split the device `base` uses into `seats` seats. `gpus`: the machine's GPUs (NVML, CUDA's totals), None or
    empty when it has none. `reserved_mib`: on a GPU, what each seat keeps beyond its limit, measured for the work
    (SeatOverhead.gpu_reserve_mib); else the CUDA context measured on an H100 and headroom. ShareError for a count
    that is not a positive number or is too many for the memory, and for a CPU-only split whose base has no CPU
    cap."""
    if seats < 1:
        raise ShareError(f"{seats} is not a number of seats; use 1 or more (e.g. 3)")
    if seats > MAX_SEATS:
        raise ShareError(f"{seats} is more than {MAX_SEATS} seats on one device; use {MAX_SEATS} or fewer")
    visible = base.visible_gpus
    candidates = [g for g in gpus or () if visible is None or g.index in visible]
    if candidates:
        gpu = min(candidates, key=lambda g: g.index)
        if gpu.total_mib is None:
            raise ShareError(f"GPU {gpu.index}'s total memory is unknown (NVML did not report it); "
                             "check the driver (the doctor's report says what NVML answers)", "config")
        total = gpu.total_mib
        reserved = CONTEXT_RESERVE_MIB + HEADROOM_MIB if reserved_mib is None else reserved_mib
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
            raise ShareError(f"{why}, and the base configuration has no CPU memory cap to split: set its "
                             f"cpu_memory_limit_mib (e.g. {seats * 1024} for {seats_text(seats)} of 1 GiB)", "config")
        total, reserved = base.cpu_memory_limit_mib, 0
        source = f"the CPU cap of the base profile: cpu_memory_limit_mib {total}"
        seat_mib = total // seats
        what = f"the CPU cap of {total} MiB"
        configs = tuple(base.with_changes(cpu_memory_limit_mib=seat_mib) for _ in range(seats)) \
            if seat_mib >= MIN_SEAT_MIB else ()
        device = "/CPU:0"
    if not configs:
        most = min(MAX_SEATS, max(0, total // (MIN_SEAT_MIB + reserved)))
        if most == 0:
            raise ShareError(f"{what} cannot hold even one seat: a seat needs {MIN_SEAT_MIB} MiB"
                             + (f" beside its {reserved} MiB" if reserved else "")
                             + (f"; raise cpu_memory_limit_mib to at least {MIN_SEAT_MIB}" if not reserved else ""),
                             "seats" if reserved else "config")
        raise ShareError(f"{seats_text(seats)} are too many: {what} split {seats} ways leaves {max(seat_mib, 0)} "
                         f"MiB a seat, under the {MIN_SEAT_MIB} MiB a seat needs; use at most {seats_text(most)}")
    return SharePlan(device, source, total, reserved, seat_mib, configs)


def seat_path(out: Path, index: int) -> Path:
    return out / f"seat-{index}.json"


def shown_path(path: Path) -> str:
    """A path as printed, whole: each character a terminal would act on (a newline, an escape) written as Python
    writes it in a string (\\n, \\x1b)."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in str(path))


def check_out_dir(out_text: str, force: bool) -> Path:
    """The folder the profiles go to; ShareError for an empty name, a file, or a folder with files in it."""
    if not out_text.strip():
        raise ShareError("no folder named; name a new or empty folder for the seats' profiles", "out")
    out = Path(out_text).expanduser()
    if out.exists() and not out.is_dir():
        raise ShareError(f"{shown_path(out)} is a file, not a folder; name a new or empty folder", "out")
    if out.is_dir() and not force and any(out.iterdir()):
        raise ShareError(f"{shown_path(out)} exists and is not empty; name a new or empty folder, or choose to "
                         "write into it (replacing its seat-N.json files)", "out")
    return out


def machine_warnings(plan: SharePlan, overhead: SeatOverhead, host_total_mib: int | None = None) -> list[str]:
    """What a person must hear before the profiles are written: a CPU split that, with each seat's processes
    beside its cap, is larger than this machine's memory."""
    if not plan.device.startswith("/CPU"):
        return []
    if host_total_mib is None:
        import psutil

        host_total_mib = psutil.virtual_memory().total // MIB
    seats = len(plan.configs)
    need = seats * overhead.host_per_seat_mib(plan)
    if need <= host_total_mib:
        return []
    return [f"{seats_text(seats)} of {plan.seat_mib:,} MiB, with about {overhead.host_mib:,} MiB beside each for its "
            f"TensorFlow process ({need:,} MiB in all), are more than this machine's {host_total_mib:,} MiB of "
            "memory: the seats cannot all reach their caps here (profiles for a larger machine are fine)"]


def write_profiles(plan: SharePlan, out: Path, force: bool = False) -> list[Path]:
    check_out_dir(str(out), force)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for index, config in enumerate(plan.configs, start=1):
        save_profile(config, seat_path(out, index))
        paths.append(seat_path(out, index))
    return paths


def check_host_memory(plan: SharePlan, overhead: SeatOverhead, work_peak_mib: float | None = None,
                      available_mib: int | None = None) -> None:
    """ShareError when starting every seat at once would take more host memory than is available: each seat's
    processes beside its allocator (`overhead`), and on the CPU its allocator's memory (the work's peak alone,
    where measured, within the seat's cap)."""
    if available_mib is None:
        import psutil

        available_mib = psutil.virtual_memory().available // MIB
    each = overhead.host_per_seat_mib(plan, work_peak_mib)
    seats = len(plan.configs)
    if seats * each > available_mib:
        how = "measured" if overhead.measured else "assumed"
        raise ShareError(f"{seats_text(seats)} side by side need about {seats * each:,} MiB of this machine's "
                         f"memory (about {each:,} MiB for each seat's TensorFlow process, {how}) and "
                         f"{available_mib:,} MiB is available; verify at most "
                         f"{seats_text(max(1, available_mib // each))} here (write the profiles without verifying, "
                         "and verify a smaller split), or free memory")


@dataclass(frozen=True)
class SeatOverhead:
    """What each seat's processes take beyond its allocator: host memory beside it (`host_mib`: resident memory
    less the allocator's peak on the CPU; all of it on a GPU, whose allocator is on the GPU) and, on a GPU, what
    the process holds on it beyond its limit (`gpu_mib`: its CUDA context). Measured by one run of the work
    alone, or assumed; `said` says which and how, in words."""

    host_mib: int
    gpu_mib: int | None
    measured: bool
    said: str

    def host_per_seat_mib(self, plan: SharePlan, work_peak_mib: float | None = None) -> int:
        """A seat's host memory: beside its allocator, and on the CPU what its allocator holds (the work's peak
        alone where measured, at most the seat's cap)."""
        if not plan.device.startswith("/CPU"):
            return self.host_mib
        held = plan.seat_mib if work_peak_mib is None else min(plan.seat_mib, math.ceil(work_peak_mib))
        return self.host_mib + held

    @property
    def gpu_reserve_mib(self) -> int | None:
        """On a GPU, what each seat keeps beyond its limit when measured: the work's own, with HEADROOM_MIB."""
        return self.gpu_mib + HEADROOM_MIB if self.measured and self.gpu_mib is not None else None

    def to_json(self) -> OverheadJson:
        return {"measured": self.measured, "host_mib": self.host_mib, "gpu_mib": self.gpu_mib, "said": self.said}


def assumed_overhead(device: str, why: str) -> SeatOverhead:
    """The overhead where no run of the work measured it (`why`, in words): SEAT_HOST_MIB on the host, and on
    a GPU the CUDA context measured on an H100."""
    host = SEAT_HOST_MIB[device[:4]]
    if device.startswith("/GPU"):
        return SeatOverhead(host, CONTEXT_RESERVE_MIB, False,
                            f"not measured ({why}); assumed {CONTEXT_RESERVE_MIB} MiB on the GPU for each seat's "
                            f"CUDA context (an H100's) and about {host:,} MiB of this machine's memory for its "
                            "TensorFlow process")
    return SeatOverhead(host, None, False, f"not measured ({why}); assumed about {host:,} MiB of this machine's "
                                           "memory for each seat's TensorFlow process beside its cap")


@dataclass(frozen=True)
class WorkNeeds:
    """What one run of the work took alone with the whole device: the allocator's peak, its processes' own peak
    (resident on the CPU; NVML's on a GPU) and, on a GPU, what its process held beyond the allocator."""

    peak_mib: float
    process_mib: int | None
    host_mib: int | None
    gpu_overhead_mib: int | None
    device: str = "/CPU:0"
    what: str = ""                  # the work and its batch, in words: "cnn (batch 32)"

    def overhead(self) -> SeatOverhead:
        """What one seat of this work takes beyond its allocator, as this run measured it (assumed where the run
        gave no figure: a process whose resident peak the kernel did not report, a GPU NVML did not see)."""
        if self.host_mib is None:
            return assumed_overhead(self.device, f"the run of {self.what} alone reported no resident peak")
        on_gpu = self.device.startswith("/GPU")
        if on_gpu and self.gpu_overhead_mib is None:
            return assumed_overhead(self.device, f"NVML gave no figure for the run of {self.what} alone")
        if on_gpu:
            assert self.gpu_overhead_mib is not None
            return SeatOverhead(self.host_mib, self.gpu_overhead_mib, True,
                                f"measured by one run of {self.what} alone: its process held "
                                f"{self.gpu_overhead_mib:,} MiB on the GPU beyond its limit (NVML) and "
                                f"{self.host_mib:,} MiB of this machine's memory")
        beside = max(0, self.host_mib - math.ceil(self.peak_mib))
        return SeatOverhead(beside, None, True,
                            f"measured by one run of {self.what} alone: {self.host_mib:,} MiB resident at its "
                            f"peak, {self.peak_mib:.0f} MiB of it its allocator's, so {beside:,} MiB for each "
                            "seat's TensorFlow process beside its cap")


def measure_work(base: DeviceConfig, gpus: list[GpuInfo] | None, work: Work, batch: int,
                 timeout_s: float = VERIFY_TIMEOUT_S, no_gpu_reason: str = "") -> WorkNeeds:
    """One run of the work at this batch under a single seat's profile (the whole device)."""
    plan = plan_seats(base, 1, gpus, no_gpu_reason=no_gpu_reason)
    with tempfile.TemporaryDirectory(prefix="tf-share-measure-") as root:
        profile = Path(root) / "seat.json"
        save_profile(plan.configs[0], profile)
        folder = Path(root) / "run"
        folder.mkdir()
        run = start_run(work, batch, profile, folder, plan.device)
        if not wait_runs([run], timeout_s, on_gpu=plan.device.startswith("/GPU")):
            raise ShareError(f"the work ({work.name}, batch {batch}) ran over {timeout_s:.0f} s alone; stopped",
                             "work")
        try:
            outcome = read_run(run)
        except JobError as exc:
            raise ShareError(f"the work ({work.name}, batch {batch}) did not run: {exc}", "work") from None
    error_text = tf_error_text(outcome["error"]) or "no message"
    if not outcome["fits"] and "oom" not in outcome:
        # Not a question of memory (on an H200, the cnn at batch 16384 failed in its first Relu on the whole GPU):
        # a smaller batch is not the answer to give.
        raise ShareError(f"the work ({work.name}, batch {batch}) failed alone on {plan.device}, not for lack of "
                         f"memory: {error_text}", "work")
    if not outcome["fits"]:
        raise ShareError(f"the work ({work.name}, batch {batch}) does not fit even the whole of {plan.source} "
                         f"alone: {error_text}; give it a smaller batch", "work")
    peak = outcome["peaks"].get(run_device(plan.device), outcome["peak_bytes"]) or 0
    rss = outcome.get("rss_peak_bytes")
    gpu = outcome.get("gpu_process_peak_bytes")
    return WorkNeeds(peak / MIB, (gpu or rss or 0) // MIB or None, (rss or 0) // MIB or None,
                     max(0, gpu // MIB - plan.seat_mib) if gpu else None, plan.device, f"{work.name} (batch {batch})")


def measure_overhead(base: DeviceConfig, gpus: list[GpuInfo] | None, work: Work, batch: int,
                     no_gpu_reason: str = "") -> tuple[SeatOverhead, WorkNeeds | None]:
    """The seats' overhead for this work from one run of it alone, and that run's figures; where the run did not
    hold or did not run, the assumed overhead saying why (the seats' own runs then say what went wrong)."""
    try:
        needs = measure_work(base, gpus, work, batch, no_gpu_reason=no_gpu_reason)
    except ShareError as exc:
        if exc.field != "work":
            raise
        device = plan_seats(base, 1, gpus, no_gpu_reason=no_gpu_reason).device
        return assumed_overhead(device, f"the run that measures it did not hold: {exc}"), None
    return needs.overhead(), needs


def first_guess_of_seats(base: DeviceConfig, gpus: list[GpuInfo] | None, needs: WorkNeeds, available_mib: int,
                         no_gpu_reason: str = "") -> tuple[int, str]:
    """The most seats the device could hold for the work (each seat's cap at least PEAK_ROOM × its peak alone,
    all their processes within this machine's available memory), and what bounds it, in words."""
    overhead = needs.overhead()
    whole = plan_seats(base, 1, gpus, no_gpu_reason=no_gpu_reason, reserved_mib=overhead.gpu_reserve_mib)
    reserved = whole.reserved_mib
    seat_need = max(MIN_SEAT_MIB, math.ceil(needs.peak_mib * PEAK_ROOM))
    by_memory = whole.total_mib // (seat_need + reserved)
    host_each = overhead.host_mib + (math.ceil(needs.peak_mib) if whole.device.startswith("/CPU") else 0)
    by_host = available_mib // host_each
    most = max(0, min(MAX_SEATS, by_memory, by_host))
    if most == by_host and by_host < by_memory:
        why = (f"this machine's {available_mib:,} MiB of available memory, at {host_each:,} MiB for each seat's "
               f"processes ({'measured' if overhead.measured else 'assumed'})")
    else:
        beside = f" and {reserved} MiB beside it" if reserved else ""
        why = (f"{whole.total_mib:,} MiB, at {seat_need} MiB a seat (the work peaked at {mib_text(needs.peak_mib, 0)} "
               f"alone; {PEAK_ROOM:.0%} of that, for runs that peak higher){beside}")
    return most, why


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
                row["status"], row["error"], row["seconds"] = "failed", str(exc), run.seconds or 0.0
                rows.append(row)
                continue
            peak = outcome["peaks"].get(device, outcome["peak_bytes"])
            row["peak_bytes"], row["seconds"] = peak, run.seconds or 0.0
            row["process_peak_bytes"] = outcome.get("gpu_process_peak_bytes") or outcome.get("rss_peak_bytes")
            if not outcome["fits"]:
                row["status"], row["error"] = "out of memory" if "oom" in outcome else "failed", outcome["error"]
            elif peak is not None and peak > limit:
                row["status"] = "over"
                row["error"] = f"peak {mib_text(peak / MIB)} is over the seat's {plan.seat_mib} MiB"
            else:
                row["status"], row["error"] = "held", None
            rows.append(row)
    return rows


@dataclass
class MostSeats:
    """`share --max`: the most seats that held side by side, the tries that found it, and why it stopped there."""

    plan: SharePlan
    rows: list[SeatRow]
    needs: WorkNeeds
    bound: str
    tried: list[SeatsTried]
    above: str                        # why one seat more is not the answer, in words


def find_most_seats(base: DeviceConfig, gpus: list[GpuInfo] | None, work: Work, batch: int, *,
                    available_mib: int | None = None, no_gpu_reason: str = "",
                    said: Callable[[str], None] = lambda text: None) -> MostSeats:
    """The most seats of the device that hold the work side by side: a first guess from one run alone, then
    down one seat at a time until every seat held, or up while they all still hold and each seat keeps at least
    the work's peak alone."""
    if available_mib is None:
        import psutil

        available_mib = psutil.virtual_memory().available // MIB
    said(f"measuring the work alone ({work.name}, batch {batch})…")
    needs = measure_work(base, gpus, work, batch, no_gpu_reason=no_gpu_reason)
    overhead = needs.overhead()
    guess, bound = first_guess_of_seats(base, gpus, needs, available_mib, no_gpu_reason)
    if guess < 1:
        raise ShareError(f"not even one seat: {bound}", "work")
    tried: list[SeatsTried] = []
    best: tuple[SharePlan, list[SeatRow]] | None = None
    above = f"no more than {MAX_SEATS} seats on one device"
    seats = guess
    while 1 <= seats <= MAX_SEATS:
        try:
            plan = plan_seats(base, seats, gpus, no_gpu_reason=no_gpu_reason, reserved_mib=overhead.gpu_reserve_mib)
        except ShareError as exc:
            above = str(exc)  # too many seats for the memory: the last that held stands
            break
        if plan.seat_mib < needs.peak_mib:
            above = (f"{seats_text(seats)} would leave {plan.seat_mib} MiB a seat, under the "
                     f"{mib_text(needs.peak_mib, 0)} the work peaked at alone")
            break
        host_mib = seats * overhead.host_per_seat_mib(plan, needs.peak_mib)
        if host_mib > available_mib:
            above = (f"{seats_text(seats)} would need about {host_mib:,} MiB of this machine's "
                     f"memory, and {available_mib:,} MiB is available")
            break
        said(f"verifying {seats_text(seats)} of {plan.seat_mib} MiB side by side…")
        with tempfile.TemporaryDirectory(prefix="tf-share-max-") as root:
            profiles = [seat_path(Path(root), n) for n in range(1, seats + 1)]
            for config, path in zip(plan.configs, profiles, strict=True):
                save_profile(config, path)
            rows = verify_seats(plan, profiles, work=work, batch=batch)
        held = all(row["status"] == "held" for row in rows)
        tried.append({"seats": seats, "seat_limit_mib": plan.seat_mib, "held": held,
                      "statuses": [row["status"] for row in rows]})
        if held:
            best = (plan, rows)
            if any(not t["held"] for t in tried):
                above = f"{seats_text(seats + 1)} did not all hold side by side"
                break  # came down to it: the one above did not hold
            seats += 1
        elif best is not None:
            above = f"{seats_text(seats)} did not all hold side by side"
            break
        else:
            seats -= 1
    if best is None:
        raise ShareError(f"not even one seat held the work ({work.name}, batch {batch}): "
                         + "; ".join(f"{seats_text(t['seats'])}: {', '.join(t['statuses'])}" for t in tried), "work")
    return MostSeats(best[0], best[1], needs, bound, tried, above)
