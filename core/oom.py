"""An out-of-memory error explained, from TensorFlow's own words: its BFC allocator's dump (stderr) and the
ResourceExhaustedError's message. Qt-free, TensorFlow-free, stdlib only: the panel's side of a run, the command
line and the window all read what `explain` returns, a plain JSON-able dict (a run record keeps it as `oom`).

The dump is BFCAllocator's, the same on a GPU and on the CPU under TF_CPU_ALLOCATOR_USE_BFC=true:

    W… bfc_allocator.cc:502] Allocator (GPU_0_bfc) ran out of memory trying to allocate 4.00MiB (rounded to
        4194304)requested by op AddV2
    I… bfc_allocator.cc:1056] Bin (256):  Total Chunks: 1, Chunks in use: 1. 256B allocated for chunks. …
    I… bfc_allocator.cc:1085] Next region of size 33554432
    I… bfc_allocator.cc:1105] InUse at 7f7358ffe040 of size 4194304 [by op Fill action_count 13 step 0 ]next 10
    I… bfc_allocator.cc:1105] Free  at 7f737231e140 of size 2096896 next 18446744073709551615
    I… bfc_allocator.cc:1119] Total size in pool: 62.00MiB memory_limit_: 64.00MiB available size: 2.00MiB …
    Limit:                        64.00MiB
    InUse:                        60.00MiB

Free memory is what the pool's free chunks hold plus what the allocator may still take (`available size`, the
limit less the pool). Its stats line `LargestFreeBlock` is not kept up to date (0B beside a 2 MiB free chunk in
the recorded dump), so the largest free block is measured from the chunks.
"""

from __future__ import annotations

import contextlib
import datetime
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any, TypedDict

from tf_device_panel.core.units import GIB, KIB, MIB, bytes_text

MAX_BAR_SEGMENTS = 400     # the bar the window draws: runs of chunks of one state, at most this many
MAX_TOP_CHUNKS = 8         # the largest live allocations reported
MAX_DUMP_LINES = 200_000   # what a collector keeps of one dump (a real one has a line per chunk)
RUN_MARGIN = 1.1           # a cap named from a run's known allocations: the allocator rounds and keeps regions

_UNITS = {"B": 1, "KiB": KIB, "MiB": MIB, "GiB": GIB, "TiB": 1024 * GIB}
_SIZE = r"([0-9.]+)\s*(B|KiB|MiB|GiB|TiB)"

RAN_OUT = re.compile(r"Allocator \((?P<allocator>[^)]*)\) ran out of memory trying to allocate " + _SIZE
                     + r"(?: \(rounded to (?P<rounded>\d+)\))?\s*(?:requested by op (?P<op>\S+))?")
_REGION = re.compile(r"Next region of size (\d+)")
_POOL = re.compile(r"Total size in pool: " + _SIZE + r" memory_limit_: " + _SIZE + r" available size: " + _SIZE)
_STAT = re.compile(r"^\s*(Limit|InUse|MaxInUse|NumAllocs|MaxAllocSize|LargestFreeBlock):\s+(\S+)\s*$")
_IN_USE_SUM = re.compile(r"Sum Total of in-use chunks: " + _SIZE)
_BY_SIZE = re.compile(r"(\d+) Chunks of size (\d+) totalling")
_ERROR = re.compile(r"OOM when allocating tensor with shape\s*\[(?P<shape>[^\]]*)\] and type (?P<dtype>\w+) on "
                    r"(?P<device>\S+?)(?: by allocator (?P<allocator>\S+))?(?=\s|$|\n)")
_OP_IN_MESSAGE = re.compile(r"\[Op:(\w+)\]|node (\S+?)[}\s]|requested by op (\S+)")
_DTYPE_BYTES = {"float": 4, "double": 8, "half": 2, "bfloat16": 2, "int8": 1, "uint8": 1, "int16": 2,
                "int32": 4, "int64": 8, "bool": 1, "complex64": 8, "complex128": 16}


def is_oom_message(message: str | None) -> bool:
    return bool(message) and ("OOM when allocating" in str(message) or "RESOURCE_EXHAUSTED" in str(message)
                              or "ResourceExhausted" in str(message))


def _bytes(number: str, unit: str) -> int:
    return round(float(number) * _UNITS[unit])


def size_bytes(text: str) -> int:
    """A size as the allocator prints it ("64.00MiB", "0B") in bytes; 0 when it is none."""
    figure = re.fullmatch(_SIZE, text.strip())
    return _bytes(*figure.groups()) if figure else 0


# What a dump prints after its chunks: its totals, kept however long the dump (the chunks past the limit are not).
_SUMMARY_MARKS = ("Total size in pool", "Sum Total of in-use", "OOM when allocating")
_SUMMARY_STATS = ("Limit:", "InUse:", "MaxInUse:", "NumAllocs:", "MaxAllocSize:", "LargestFreeBlock:")


def is_allocator_line(line: str) -> bool:
    """Whether a line opens a BFC allocator's dump as TensorFlow's C++ logging writes it: its log prefix naming
    bfc_allocator.cc before the message (a script's print of the words alone is not)."""
    at = line.find("ran out of memory trying to allocate")
    return at > 0 and "bfc_allocator.cc:" in line[:at] and "] " in line[:at]


# The time in TensorFlow's log prefix: absl's before its InitializeLog ("W0000 00:00:1795659719.714748 …",
# seconds since the epoch), after it ("W1127 15:05:54.123456 …", this year) and older TensorFlow's
# ("2026-11-27 15:05:54.123456: W …").
_ABSL_EPOCH = re.compile(r"[IWEF]0000 00:00:(\d+\.\d+)\s")
_ABSL_DATE = re.compile(r"[IWEF](\d\d)(\d\d) (\d\d):(\d\d):(\d\d(?:\.\d+)?)\s")
_ISO_DATE = re.compile(r"(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)?): [IWEF] ")


def logged_at(line: str) -> float | None:
    """When TensorFlow's log line says it was written (seconds since the epoch, local time as the log writes it);
    None where its prefix names no time this reads."""
    with contextlib.suppress(ValueError):
        if match := _ABSL_EPOCH.match(line):
            return float(match.group(1))
        if match := _ABSL_DATE.match(line):
            month, day, hour, minute, second = match.groups()
            whole, _, fraction = second.partition(".")
            when = datetime.datetime.now().replace(month=int(month), day=int(day), hour=int(hour),
                                                   minute=int(minute), second=int(whole), microsecond=0)
            return when.timestamp() + float("0." + (fraction or "0"))
        if match := _ISO_DATE.match(line):
            return datetime.datetime.fromisoformat(match.group(1)).timestamp()
    return None


def is_dump_total(line: str) -> bool:
    """Whether a dump's line is one of its totals (Limit:, InUse:, the pool's size, the sum in use)."""
    return line.lstrip().startswith(_SUMMARY_STATS) or any(mark in line for mark in _SUMMARY_MARKS)


class DumpCollector:
    """Keeps the lines of allocator dumps from a run's stderr as they come (one line or a block at a time),
    nothing else: a run prints thousands of other lines, and a dump only once it ran out of memory.

    Feed it TensorFlow's stderr only, or a script's stderr (where TensorFlow's C++ log goes in a script's run)
    with `written_since`, the run's start: there only a line in TensorFlow's log format, from its BFC allocator,
    written since then (a script's copy of an older log is not this run's) opens a dump. A script's stdout,
    never: its text is the script's, whatever it says. A dump longer than `max_lines` keeps its first lines and,
    after them, only its totals; `cut` counts the lines left out."""

    def __init__(self, max_lines: int = MAX_DUMP_LINES):
        self.max_lines = max_lines
        self.lines: list[str] = []
        self.cut = 0          # lines of the last dump not kept (its chunks past `max_lines`)
        self.dumps = 0        # dumps begun so far
        self.open = False     # within a dump: it has not reached its "OOM when allocating" line yet

    def feed(self, text: str, written_since: float | None = None) -> None:
        for line in text.split("\n"):
            if ("ran out of memory trying to allocate" in line and is_allocator_line(line)
                    and (written_since is None or (logged_at(line) or written_since) >= written_since)):
                self.lines = [line]  # the last dump is the one that ended the run
                self.cut = 0
                self.dumps += 1
                self.open = True
            elif self.open:
                if len(self.lines) < self.max_lines or is_dump_total(line):  # past the limit, its totals only
                    self.lines.append(line)
                else:
                    self.cut += 1
                if "OOM when allocating" in line:
                    self.open = False


class LiveAllocation(TypedDict):
    """Chunks in use of one size (and op, where the dump names it): the largest of them lead."""

    bytes: int
    count: int
    op: str | None


class FindBatch(TypedDict, total=False):
    """How to find the batch that fits, where the panel cannot name it: the fit-batch job's parameters for this
    run's work (a user's script and its arguments, or the fit job's model) under this run's limit."""

    script: str
    args: str
    model: str
    image_size: int
    budget_mib: int
    device: str


class OomReport(TypedDict, total=False):
    """An out-of-memory error explained: the request, the allocator's figures, the bar the window draws, the
    verdict and what to try. Every figure is optional: a message alone (no dump) gives few of them."""

    allocator: str
    request_bytes: int
    op: str
    shape: list[int]
    dtype: str
    device: str
    short_device: str
    pool_bytes: int
    limit_bytes: int
    unallocated_bytes: int
    in_use_bytes: int
    peak_bytes: int
    free_in_pool_bytes: int
    largest_free_chunk_bytes: int
    free_bytes: int
    largest_free_bytes: int
    chunks: int
    regions: int
    largest_live: list[LiveAllocation]
    dump_cut_lines: int               # the dump's lines not read (past MAX_DUMP_LINES): figures are its totals
    find_batch: FindBatch             # fit-batch's parameters that find the batch that fits this run's work
    bar: list[list[str | int]]        # [state, bytes] (and free bytes, for a "mixed" run) in address order
    on_gpu: bool
    verdict: str                      # shortage, fragmentation or unknown
    explanation: str
    advice: list[str]


def explain(dump_lines: Iterable[str], message: str | None, *, on_gpu: bool | None = None,
            growth: bool | None = None, batch_size: int | None = None, cut_lines: int = 0,
            find_batch: FindBatch | None = None, run_needs_bytes: int | None = None) -> OomReport | None:
    """The OOM as figures and advice, or None when neither the message nor the dump tells of one.

    `message`: the ResourceExhaustedError's text (the request's shape, dtype, device, op). `dump_lines`:
    stderr lines (any others among them are skipped). `growth`: whether the profile turned memory growth on;
    `batch_size`: the run's batch where the panel set it; `find_batch`: fit-batch's parameters for this run's
    work, which finds the batch that fits (the advice names it, never a batch worked out from one step);
    `run_needs_bytes`: what the whole run allocates, where the panel knows it.
    `cut_lines`: the dump's lines its collector left out: then the chunks read are only its first ones, and the
    figures come from the dump's own totals (InUse, Limit, the pool)."""
    oom = OomReport()
    chunks: list[tuple[bool, int, str | None]] = []   # (in use, bytes, op) in address order, region by region
    regions: list[int] = []
    region_starts: set[int] = set()  # the chunks that begin a region: runs never merge across one
    by_size: list[tuple[int, int]] = []
    stats: dict[str, int] = {}
    for line in dump_lines:
        # A chunk's line, most of a dump's: read with plain string operations (a regex per line took a
        # 10,000-line dump past 50 ms).
        at = line.find(" of size ")
        if at > 0:
            used = "InUse at " in line
            if used or "Free  at " in line:
                end = line.find(" ", at + 9)
                size = line[at + 9:end if end > 0 else None]
                if size.isdigit():
                    op = None
                    op_at = line.find(" by op ", end) if end > 0 else -1
                    if op_at > 0:
                        op_end = line.find(" ", op_at + 7)
                        op = line[op_at + 7:op_end if op_end > 0 else None]
                    chunks.append((used, int(size), op))
                    continue
        if "bfc_allocator" not in line and ":" in line and (stat := _STAT.match(line)):
            value = stat.group(2)
            figure = re.fullmatch(_SIZE, value)
            stats[stat.group(1)] = _bytes(*figure.groups()) if figure else int(value) if value.isdigit() else 0
            continue
        if "region of size" in line and (region := _REGION.search(line)) is not None:
            regions.append(int(region.group(1)))
            region_starts.add(len(chunks))
        elif (ran := RAN_OUT.search(line)) is not None:
            oom["allocator"] = ran.group("allocator")
            oom["request_bytes"] = (int(ran.group("rounded")) if ran.group("rounded")
                                    else _bytes(ran.group(3), ran.group(4)))
            if ran.group("op"):
                oom["op"] = ran.group("op")
        elif (pool := _POOL.search(line)) is not None:
            oom["pool_bytes"] = _bytes(pool.group(1), pool.group(2))
            oom.setdefault("limit_bytes", _bytes(pool.group(3), pool.group(4)))
            oom["unallocated_bytes"] = _bytes(pool.group(5), pool.group(6))
        elif (counted := _BY_SIZE.search(line)) is not None:
            by_size.append((int(counted.group(1)), int(counted.group(2))))
        elif (summed := _IN_USE_SUM.search(line)) is not None:
            oom.setdefault("in_use_bytes", _bytes(*summed.groups()))
    error = _ERROR.search(message or "")
    if error is None and not oom and not is_oom_message(message):
        return None
    if error is not None:
        shape = [int(v) for v in re.findall(r"-?\d+", error.group("shape"))]
        oom["shape"] = shape
        oom["dtype"] = error.group("dtype")
        oom["device"] = error.group("device")
        oom["short_device"] = "/" + oom["device"].rsplit("/device:", 1)[-1].lstrip("/")
        oom.setdefault("allocator", error.group("allocator"))
        if "request_bytes" not in oom and error.group("dtype") in _DTYPE_BYTES:
            count = 1
            for dim in shape:
                count *= max(dim, 0)
            oom["request_bytes"] = count * _DTYPE_BYTES[error.group("dtype")]
    if "op" not in oom and message and (named := _OP_IN_MESSAGE.search(message)):
        oom["op"] = next(g for g in named.groups() if g)
    if "Limit" in stats:
        oom["limit_bytes"] = stats["Limit"]
    if "InUse" in stats:
        oom["in_use_bytes"] = stats["InUse"]
    if "MaxInUse" in stats:
        oom["peak_bytes"] = stats["MaxInUse"]
    if chunks:
        free_chunks = [size for used, size, _ in chunks if not used]
        oom["free_in_pool_bytes"] = sum(free_chunks)
        oom["largest_free_chunk_bytes"] = max(free_chunks, default=0)
        oom.setdefault("in_use_bytes", sum(size for used, size, _ in chunks if used))
        oom["chunks"] = len(chunks)
        oom["regions"] = len(regions)
        grouped = Counter((size, made_by) for used, size, made_by in chunks if used)
        live = sorted(grouped.items(), key=lambda item: -item[0][0])
        oom["largest_live"] = [{"bytes": size, "count": count, "op": op} for (size, op), count in live[:MAX_TOP_CHUNKS]]
    elif by_size:
        oom["largest_live"] = [{"bytes": size, "count": count, "op": None}
                               for count, size in sorted(by_size, key=lambda pair: -pair[1])[:MAX_TOP_CHUNKS]]
    if cut_lines:
        _from_totals(oom, chunks, cut_lines)
    elif "free_in_pool_bytes" in oom:
        unallocated = oom.get("unallocated_bytes")
        if unallocated is None and "limit_bytes" in oom and "pool_bytes" in oom:
            unallocated = max(oom["limit_bytes"] - oom["pool_bytes"], 0)
        oom["free_bytes"] = oom["free_in_pool_bytes"] + (unallocated or 0)
        # The allocator can still make a region of what it has not taken yet: a block of its own.
        oom["largest_free_bytes"] = max(oom["largest_free_chunk_bytes"], unallocated or 0)
    elif "limit_bytes" in oom and "in_use_bytes" in oom:
        oom["free_bytes"] = max(oom["limit_bytes"] - oom["in_use_bytes"], 0)
    if not cut_lines:
        oom["bar"] = _bar(chunks, oom.get("unallocated_bytes") or 0, region_starts)
    device = str(oom.get("device") or "")
    if on_gpu is None:
        on_gpu = "GPU" in device.upper() or "gpu" in str(oom.get("allocator") or "").lower().replace("_for_gpu", "")
    oom["on_gpu"] = on_gpu
    oom["verdict"], oom["explanation"] = _verdict(oom)
    if cut_lines:
        oom["explanation"] += (f" (the allocator's dump ran {MAX_DUMP_LINES + cut_lines:,} lines: its first "
                               f"{MAX_DUMP_LINES:,} were read, and the figures are its own totals)")
    if find_batch:
        oom["find_batch"] = find_batch
    oom["advice"] = advice(oom, growth=growth, batch_size=batch_size, find_batch=find_batch,
                           run_needs_bytes=run_needs_bytes)
    return oom


def _from_totals(oom: OomReport, chunks: Sequence[tuple[bool, int, str | None]], cut_lines: int) -> None:
    """The figures of a dump cut short: its own totals (the chunks read are only its first ones). What is free in
    all is the limit less what is in use; the largest free block is known only if a chunk read already holds the
    request (else the chunks not read may hold a larger one)."""
    oom["dump_cut_lines"] = cut_lines
    for partial in ("free_in_pool_bytes", "largest_free_chunk_bytes", "chunks", "regions"):
        oom.pop(partial, None)  # type: ignore[misc]
    if "in_use_bytes" not in oom or "limit_bytes" not in oom:
        return
    limit, in_use = oom["limit_bytes"], oom["in_use_bytes"]
    oom["free_bytes"] = max(limit - in_use, 0)
    pool = oom.get("pool_bytes")
    unallocated = oom.get("unallocated_bytes", max(limit - pool, 0) if pool is not None else 0)
    seen = max([size for used, size, _ in chunks if not used] + [unallocated])
    if seen >= (oom.get("request_bytes") or 0) > 0:
        oom["largest_free_bytes"] = seen
    free_in_pool = max((pool if pool is not None else limit - unallocated) - in_use, 0)
    oom["bar"] = [[state, size] for state, size in (("in_use", in_use), ("free", free_in_pool),
                                                     ("unallocated", unallocated)) if size]


def _bar(chunks: Sequence[tuple[bool, int, str | None]], unallocated: int,
         region_starts: set[int] | frozenset[int] = frozenset()) -> list[list[str | int]]:
    """The device's memory as the window draws it: runs of in-use and free chunks in address order (free ones
    only within a region), then what the allocator has not taken yet; [state, bytes] each. Past
    MAX_BAR_SEGMENTS runs (a fragmented pool of thousands of chunks, narrower than a pixel each), neighbouring
    small runs are drawn as one ["mixed", bytes, free bytes among them]; every byte stays in the bar, in its
    place."""
    runs: list[list[Any]] = []
    for index, (used, size, _) in enumerate(chunks):
        state = "in_use" if used else "free"
        # Free chunks of two regions are two blocks (BFC never merges across regions): drawn apart, so the
        # largest free block is a segment of its own.
        if runs and runs[-1][0] == state and (used or index not in region_starts):
            runs[-1][1] += size
        else:
            runs.append([state, size])
    if unallocated:
        runs.append(["unallocated", unallocated])
    if len(runs) <= MAX_BAR_SEGMENTS:
        return runs
    # Each segment below holds at least `bucket` bytes (a run that large stands alone), so at most
    # total / bucket = MAX_BAR_SEGMENTS / 2 of each kind: one pass, whatever the dump's length.
    bucket = sum(size for _, size in runs) / (MAX_BAR_SEGMENTS // 2)
    merged: list[list[Any]] = []
    pending_states: set[str] = set()
    held = free_held = 0

    def flush() -> None:
        nonlocal held, free_held
        if held:
            if len(pending_states) == 1:
                merged.append([next(iter(pending_states)), held])
            else:
                merged.append(["mixed", held, free_held])
        pending_states.clear()
        held = free_held = 0

    for run in runs:
        if run[1] >= bucket:
            flush()
            merged.append(run)
        else:
            pending_states.add(run[0])
            held += run[1]
            if run[0] != "in_use":
                free_held += run[1]
            if held >= bucket:
                flush()
    flush()
    return merged


def _verdict(oom: OomReport) -> tuple[str, str]:
    request = oom.get("request_bytes")
    free, largest = oom.get("free_bytes"), oom.get("largest_free_bytes")
    if request is None or free is None:
        return "unknown", "the allocator's figures were not printed (no dump on stderr), so free memory is unknown"
    if free < request:
        block = f"; the largest free block is {bytes_text(largest)}" if largest is not None else ""
        close = request - free < MIB  # "4.00 MiB free, 4.00 MiB requested" would read as no shortage at all
        return "shortage", (f"a real shortage: {bytes_text(request)} requested, "
                            f"{f'{free:,} B' if close else bytes_text(free)} free in all "
                            f"({bytes_text(request - free)} short){block}")
    if largest is None and oom.get("dump_cut_lines"):
        return "unknown", (f"{bytes_text(free)} free in all, enough for the {bytes_text(request)} requested, but the "
                           "largest free block is unknown (the chunks past the dump's cut were not read): "
                           "fragmentation, likely")
    if largest is not None and largest < request:
        return "fragmentation", (f"fragmentation: {bytes_text(free)} free in all, enough for the {bytes_text(request)} "
                                 f"requested, but the largest free block is {bytes_text(largest)}")
    return "unknown", (f"{bytes_text(request)} requested and "
                       f"{bytes_text(largest if largest is not None else free)} free in one "
                       "block: the memory was freed after the failure or another allocator ran out")


def advice(oom: OomReport, *, growth: bool | None = None, batch_size: int | None = None,
           find_batch: FindBatch | None = None, run_needs_bytes: int | None = None) -> list[str]:
    """What to try, from the figures. A number only where the panel knows the quantity and it holds when followed:
    no batch is worked out from one step's shortfall (a batch 0.9 × the limit's share of what the failing step
    needed ran out of memory in turn, by fragmentation, 3 runs of 3); the batch that fits is found by fit-batch,
    which searches and verifies it (`find_batch`). `batch_size`: the batch the panel set, named as this run's;
    `run_needs_bytes`: what the whole run needs where the panel knows it (the memory job's allocations)."""
    tips: list[str] = []
    request, limit = oom.get("request_bytes"), oom.get("limit_bytes")
    in_use, largest = oom.get("in_use_bytes"), oom.get("largest_free_bytes")
    # What this step needed: one more free block of its size than there was (what is free in smaller pieces stays
    # unusable); without the chunks, what is in use plus the request. A floor for the run, never enough alone.
    if limit and request is not None and largest is not None:
        needed = limit + max(request - largest, 0)
    else:
        needed = (in_use or 0) + (request or 0)
    on_gpu = bool(oom.get("on_gpu"))
    short_of_memory = oom.get("verdict") in ("shortage", "fragmentation") or oom.get("dump_cut_lines")
    if short_of_memory and find_batch:
        work = ("this script ({batch} in its arguments where it takes its batch)" if find_batch.get("script")
                else f"the {find_batch.get('model', 'fit')} model" if find_batch.get("model") else "this work")
        budget = f" under {find_batch['budget_mib']} MiB" if find_batch.get("budget_mib") else ""
        this_one = f" (this run's was {batch_size})" if batch_size else ""
        tips.append(f"find the batch that fits: the Batch that fits job (fit-batch) runs {work} at batch after "
                    f"batch{budget} and verifies the largest that held{this_one}")
    elif oom.get("verdict") == "shortage" and batch_size:
        tips.append(f"a smaller batch than this run's {batch_size}, if its memory grows with the batch")
    if oom.get("verdict") == "shortage" and limit and needed > 0:
        if run_needs_bytes and run_needs_bytes > limit:
            whole = ceil_mib(run_needs_bytes * RUN_MARGIN)
            tips.append(f"a larger {'split' if on_gpu else 'cap'}: this run allocates {bytes_text(run_needs_bytes)} in "
                        f"all; " + (f"give this device at least {whole} MiB (virtual_gpus or memory_fraction)"
                                    if on_gpu else f"cpu_memory_limit_mib of at least {whole}"))
        elif on_gpu:
            tips.append(f"a larger split: this step alone needed {bytes_text(needed)} of the {bytes_text(limit)} "
                        "this device has (virtual_gpus or memory_fraction), and later steps may need more; or fewer "
                        "logical GPUs on it")
        else:
            tips.append(f"a larger cap: this step alone needed {bytes_text(needed)} of the {bytes_text(limit)} cap "
                        "(cpu_memory_limit_mib), and later steps may need more")
    if oom.get("verdict") == "fragmentation":
        if on_gpu:
            tips.append("TF_GPU_ALLOCATOR=cuda_malloc_async (gpu_allocator in the profile): CUDA's allocator "
                        "does not fragment this way")
        if (oom.get("regions") or 0) > 1:
            tips.append(f"the pool is {oom['regions']} regions, and chunks never merge across them: "
                        + ("turn memory growth off so the allocator takes one region at start"
                           if on_gpu else "allocate the largest tensors first, or keep fewer small ones alive"))
    if on_gpu and growth:
        tips.append("memory growth is on: growth shares the GPU but never raises its limit; other processes "
                    "may hold the rest (see the GPU's used memory)")
    elif on_gpu and growth is False and oom.get("verdict") == "shortage":
        tips.append("memory growth does not add memory: it only matters when other processes share this GPU")
    return tips


def find_batch_command(find: FindBatch) -> str:
    """The command line that finds the batch that fits: `run fit-batch` with this run's work and limit."""
    import shlex

    parts = ["tf-device-panel", "run", "fit-batch"]
    for name in ("script", "args", "model", "image_size", "budget_mib", "device"):
        value = find.get(name)
        if name == "args" and find.get("script") and "{batch}" not in str(value or ""):
            value = f"{value or ''} … {{batch}} …".strip()  # where the script takes its batch: the user says
        if value not in (None, ""):
            parts += ["-p", shlex.quote(f"{name}={value}")]
    return " ".join(parts)


def ceil_mib(value: float) -> int:
    return -(-int(value) // MIB)


def oom_text(oom: OomReport, *, command_line: bool = False) -> list[str]:
    """The explanation as lines, for the command line and the window's tooltips; `command_line`: the way to find
    the batch that fits is the command that does it."""
    shape = oom.get("shape")
    what = f"tensor of shape {shape} ({oom.get('dtype')})" if shape is not None else "an allocation"
    request = oom.get("request_bytes")
    device = oom.get("short_device") or oom.get("device") or "an unknown device"
    lines = [f"out of memory on {device} ({oom.get('allocator') or 'allocator'}): {what}"
             + (f", {bytes_text(request)}" if request is not None else "")
             + (f", by op {oom['op']}" if oom.get("op") else "")]
    figures = [("limit", oom.get("limit_bytes")), ("in use", oom.get("in_use_bytes")),
               ("free in all", oom.get("free_bytes")), ("largest free block", oom.get("largest_free_bytes"))]
    shown = [f"{name} {bytes_text(value)}" for name, value in figures if value is not None]
    if shown:
        lines.append("  " + ", ".join(shown))
    lines.append(f"  {oom.get('explanation', '')}")
    live = oom.get("largest_live") or []
    if live:
        lines.append("  largest live allocations: " + ", ".join(
            f"{bytes_text(a['bytes'])}" + (f" ×{a['count']}" if a.get("count") else "")
            + (f" by {a['op']}" if a.get("op") else "") for a in live[:5]))
    if oom.get("dump_cut_lines"):
        lines.append(f"  the allocator's dump was cut after {MAX_DUMP_LINES:,} lines ({oom['dump_cut_lines']:,} more "
                     "not read): the figures are the dump's own totals")
    find = oom.get("find_batch")
    for tip in oom.get("advice", []):
        if command_line and find and tip.startswith("find the batch that fits"):
            tip = f"find the batch that fits: {find_batch_command(find)}"
        lines.append(f"  try: {tip}")
    return lines
