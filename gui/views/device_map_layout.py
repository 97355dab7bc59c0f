"""The device map's geometry: pure arithmetic, no Qt, so it is tested on its own (the widget only paints it).

Each physical device is a box; the logical devices TensorFlow made of it are segments inside. A GPU's
segments are as wide as their share of its memory while that leaves every segment room for its text (its
short name, limit, op count and allocated memory); otherwise the scale gives way: each segment gets the
width its text needs and the memory no logical GPU was given becomes a compressed, labelled gap ("73.6 GiB
not given to TensorFlow"). A 2 + 4 GiB split of an 80 GiB GPU would otherwise be two slivers a few pixels
wide. Segments that cannot share one row wrap onto more. Above the segments, each GPU has a bar of what this
run's process holds there (NVML), against the GPU's memory: nearly full without memory growth, a sliver with
it, a quarter with a 0.25 memory fraction, nothing on a hidden GPU.

A soft-placement fallback is an arrow from the device an op asked for (a dashed "missing" segment when it
does not exist) to the device it ran on.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tf_device_panel.core.protocol import events
from tf_device_panel.core.units import short_mib_text

BOX_MIN_WIDTH = 340.0   # px; below twice this the boxes stack in one column
BOX_GAP = 12.0
TITLE_HEIGHT = 20.0
LINE_HEIGHT = 16.0      # a text line, when the caller has no font metrics to say
TEXT_PAD = 4.0          # px between a segment's edge and its text
BORDER = 1.0            # px a segment's outline takes on each side
BREAK_MARK = 12.0       # px at a compressed gap's left for its break mark
MAX_BOX_HEIGHT = 190.0  # a map with room to spare grows its boxes up to this, not into one giant box
PADDING = 6.0
ARROW_LANE = 14.0       # px below the boxes for each fallback arrow's horizontal run
MISSING_TITLE = "Asked for, but not on this machine"
SEGMENT_LINES = 4       # the most lines a segment writes: name, limit, ops, allocated memory

Measure = Callable[[str, bool], float]  # a text's width in px (bold or not)


def approximate_width(text: str, bold: bool = False) -> float:
    """A text's width without a font at hand (Qt-free callers, tests): generous, like a 9-10 pt sans font."""
    return len(text) * (7.5 if bold else 7.0)


def share_text(part: float, whole: float) -> str:
    """`part` as a percentage of `whole`: one decimal below 10 % so a small share never reads 0 %."""
    percent = 100 * part / whole if whole else 0.0
    return f"{percent:.1f} %" if percent < 10 else f"{percent:.0f} %"


# --- fitting labelled pieces into a width: shared by the device map and the configuration panel's split bar

@dataclass(frozen=True)
class Piece:
    value: float       # what it stands for (MiB); the scale is value / scale of the width
    min_width: float   # px its text needs


@dataclass(frozen=True)
class Placed:
    row: int
    x: float           # from the row's left edge
    width: float


@dataclass(frozen=True)
class Fit:
    placed: list[Placed]   # one per piece, in order
    rows: int
    to_scale: bool         # every piece as wide as its share of `scale`


def _fill_row(pieces: Sequence[Piece], width: float) -> list[float]:
    """Widths for pieces sharing one row: each max(its minimum, s × its value), s chosen so they fill it.
    Large pieces keep their proportions to each other; small ones get the room their text needs."""
    minimums = [min(p.min_width, width) for p in pieces]
    values = [max(p.value, 0.0) for p in pieces]
    spare = width - sum(minimums)
    if spare <= 0:
        return minimums
    if sum(values) <= 0:
        return [m + spare / len(pieces) for m in minimums]

    def total(scale: float) -> float:
        return sum(max(m, scale * v) for m, v in zip(minimums, values, strict=True))

    low, high = 0.0, width / min(v for v in values if v > 0)  # at `high` every valued piece alone fills the row
    for _ in range(60):
        middle = (low + high) / 2
        low, high = (middle, high) if total(middle) <= width else (low, middle)
    widths = [max(m, low * v) for m, v in zip(minimums, values, strict=True)]
    widths[-1] += width - sum(widths)  # what the search left over, a fraction of a pixel
    return widths


def fit_pieces(pieces: Sequence[Piece], scale: float, width: float) -> Fit:
    """Lay `pieces` along `width` px: in proportion to `scale` when every piece then gets its minimum width;
    otherwise each gets at least its minimum (the large ones share what is left, in proportion), on as
    many rows as the minimums need."""
    if not pieces:
        return Fit([], 0, True)
    if scale > 0:
        widths = [width * p.value / scale for p in pieces]
        if all(w >= p.min_width - 0.5 for w, p in zip(widths, pieces, strict=True)) and sum(widths) <= width + 0.5:
            placed, x = [], 0.0
            for w in widths:
                placed.append(Placed(0, x, w))
                x += w
            return Fit(placed, 1, True)
    rows: list[list[int]] = [[]]
    used = 0.0
    for number, piece in enumerate(pieces):
        if rows[-1] and used + piece.min_width > width + 0.5:
            rows.append([])
            used = 0.0
        rows[-1].append(number)
        used += piece.min_width
    result: list[Placed | None] = [None] * len(pieces)
    for row, members in enumerate(rows):
        x = 0.0
        for number, w in zip(members, _fill_row([pieces[n] for n in members], width), strict=True):
            result[number] = Placed(row, x, w)
            x += w
    return Fit([p for p in result if p is not None], len(rows), False)


# --- the map

@dataclass(frozen=True)
class LogicalDevice:
    name: str                       # /GPU:0
    full_name: str                  # /job:localhost/replica:0/task:0/device:GPU:0
    memory_limit_mib: float | None = None


@dataclass(frozen=True)
class PhysicalDevice:
    kind: str                       # GPU or CPU
    index: int
    name: str                       # "NVIDIA L4", or "" when unknown
    total_mib: float | None = None
    visible: bool = True
    memory_growth: bool = False
    logical: tuple[LogicalDevice, ...] = ()
    memory_fraction: float | None = None

    @property
    def mode(self) -> str:
        """How TensorFlow was told to use this GPU, in a few words (empty for CPUs)."""
        if self.kind != "GPU":
            return ""
        if not self.visible:
            return "hidden from TensorFlow"
        if self.memory_growth:
            return "memory growth on"
        if self.memory_fraction is not None:
            return f"memory fraction {self.memory_fraction:g}"
        if len(self.logical) > 1:
            return f"split into {len(self.logical)} logical GPUs"
        return "no memory growth: reserves nearly all"

    def titles(self) -> list[str]:
        """The box's title, longest first: the map uses the first that fits."""
        size = short_mib_text(self.total_mib) if self.total_mib else ""
        head = f"{self.kind} {self.index}"
        named = head + (f": {self.name}" if self.name else "")
        full = " — ".join(part for part in (named, size, self.mode) if part)
        return list(dict.fromkeys([full, " — ".join(p for p in (head, size, self.mode) if p),
                                   " — ".join(p for p in (head, self.mode) if p), head]))

    @property
    def title(self) -> str:
        return self.titles()[0]


@dataclass(frozen=True)
class GpuUse:
    """NVML's reading of one physical GPU for the map: what this run's process holds there, what all do."""

    run_mib: float | None = None    # None: no reading (yet, or the driver does not report it)
    others_mib: float = 0.0         # every other process's, from the same per-process list
    run_ended: bool = False         # the run's process has exited: run_mib is its last reading


@dataclass
class Rect:
    x: float
    y: float
    width: float
    height: float

    @property
    def centre(self) -> tuple[float, float]:
        return self.x + self.width / 2, self.y + self.height / 2


@dataclass
class Segment:
    device: str                     # /GPU:1, or the missing device asked for
    full_name: str
    rect: Rect
    lines: list[str]                # what to write inside, most important (and bold) first
    missing: bool = False


@dataclass
class Gap:
    """Memory no logical GPU was given (or a hidden GPU's whole body), with its label."""

    rect: Rect
    lines: list[str]
    compressed: bool = False        # narrower than its share: the box is not to scale


@dataclass
class UsageBar:
    """What this run's process holds on the GPU (NVML), against the GPU's memory, and the other processes."""

    rect: Rect
    run_width: float                # px from the left, filled
    others_width: float             # px after that: every other process
    label: str
    run_mib: float | None = None


@dataclass
class Box:
    title: str
    rect: Rect
    hidden: bool = False
    growth: bool = False
    missing: bool = False
    mode: str = ""
    segments: list[Segment] = field(default_factory=list)
    unassigned: Gap | None = None
    usage: UsageBar | None = None
    to_scale: bool = True


@dataclass
class Arrow:
    """From the bottom of the segment asked for, down into a lane below the boxes, along it, and up into the
    segment the op ran on: it never crosses another device's segment."""

    points: list[tuple[float, float]]
    label: str

    @property
    def start(self) -> tuple[float, float]:
        return self.points[0]

    @property
    def end(self) -> tuple[float, float]:
        return self.points[-1]


@dataclass
class DeviceMap:
    boxes: list[Box]
    arrows: list[Arrow]
    height: float

    def segment(self, device: str) -> Segment | None:
        return next((s for box in self.boxes for s in box.segments if s.device == device), None)


def _segment_lines(device: LogicalDevice, physical: PhysicalDevice, ops: Mapping[str, int],
                   memory: Mapping[str, float], ops_by_task: Mapping[str, Mapping[str, int]]) -> list[str]:
    lines = [device.name]
    if physical.kind == "GPU":
        if physical.memory_growth:
            lines.append("grows as needed")
        elif device.memory_limit_mib:
            lines.append(f"limit {short_mib_text(device.memory_limit_mib)}")
        else:
            lines.append("takes all memory")
    if ops:  # a job has placed ops: a device it did not use says 0, so the picture is complete
        tasks = ops_by_task.get(device.name) or {}
        # a cluster's tasks placed them in processes of their own, each with this device: how many each
        by_task = f" ({', '.join(f'{task} {count}' for task, count in sorted(tasks.items()))})" if tasks else ""
        lines.append(f"{ops.get(device.name, 0)} ops{by_task}")
    if device.name in memory:
        lines.append(f"{short_mib_text(memory[device.name])} allocated")
    return lines


def _usage_labels(device: PhysicalDevice, use: GpuUse | None) -> list[str]:
    """The usage bar's label, longest first."""
    total = device.total_mib
    if not device.visible and (use is None or not use.run_mib):
        return ["hidden: this run cannot use it", "hidden"]
    if use is None or use.run_mib is None:
        if use is not None and use.run_ended:
            return ["the run ended before NVML read what it held", "no NVML reading of the run", "no reading"]
        return ["this run's process: no NVML reading yet", "no NVML reading yet", "no reading"]
    held = short_mib_text(use.run_mib)
    verb = "the run held" if use.run_ended else "this run holds"
    share = f" ({share_text(use.run_mib, total)})" if total else ""
    of_total = f" of {short_mib_text(total)}" if total else ""
    other_text = f" · others {short_mib_text(use.others_mib)}" if use.others_mib >= 1 else ""
    return [f"{verb} {held}{of_total}{share}{other_text}" + (" at its end" if use.run_ended else ""),
            f"{verb} {held}{of_total}{share}", f"{verb} {held}{share}", f"{held}{share}"]


def _first_fitting(candidates: Sequence[str], width: float, measure: Measure, bold: bool = False) -> str:
    return next((c for c in candidates if measure(c, bold) <= width), candidates[-1])


def _text_width(lines: Sequence[str], measure: Measure) -> float:
    widest = max((measure(line, number == 0) for number, line in enumerate(lines)), default=0.0)
    return widest + 2 * (TEXT_PAD + BORDER)


@dataclass
class _Content:
    """A box's pieces before the boxes are placed: what decides its height."""

    device: PhysicalDevice | None
    pieces: list[Piece]
    lines: list[list[str]]           # per piece; the gap's last
    gap: bool                        # the last piece is the gap
    fit: Fit
    scale: float


def _gpu_pieces(device: PhysicalDevice, logical: Sequence[LogicalDevice], lines: list[list[str]],
                measure: Measure) -> tuple[list[Piece], list[list[str]], bool, float]:
    limits = [d.memory_limit_mib or 0.0 for d in logical]
    pieces = [Piece(1.0, _text_width(text, measure)) for text in lines]
    if not logical or not all(limits):  # one logical device taking the GPU whole: equal parts
        return pieces, lines, False, float(len(pieces))
    # A larger limit is never drawn narrower than a smaller one, whatever their texts need.
    pieces = [Piece(limit, max(p.min_width for p, other in zip(pieces, limits, strict=True) if other <= limit))
              for limit in limits]
    total = device.total_mib or 0.0
    rest = total - sum(limits)
    if rest < 1:  # the limits take it all (or more: TensorFlow refuses that), or NVML did not say its size
        return pieces, lines, False, max(total, sum(limits))
    gap_lines = [short_mib_text(rest), "not given to TensorFlow", "(not to scale)"]
    pieces.append(Piece(rest, _text_width(gap_lines, measure) + BREAK_MARK))
    return pieces, [*lines, gap_lines], True, total


def layout_device_map(devices: Sequence[PhysicalDevice], width: float, *, ops: Mapping[str, int] | None = None,
                      memory: Mapping[str, float] | None = None, use: Mapping[int, GpuUse] | None = None,
                      fallbacks: Sequence[tuple[str, str]] = (), height: float | None = None,
                      measure: Measure = approximate_width, line_height: float = LINE_HEIGHT,
                      ops_by_task: Mapping[str, Mapping[str, int]] | None = None) -> DeviceMap:
    """Boxes, segments and arrows for `devices` drawn `width` px wide, filling `height` px when given.

    `ops`: placements per short device name; `memory`: MiB TensorFlow's allocator has allocated per logical
    device, and the runtime's resident memory under "CPU"; `use`: NVML's reading per physical GPU, by
    TensorFlow's index; `fallbacks`: (asked for, ran on) short names; `measure` and `line_height`: the font's
    metrics, so every segment is wide and tall enough for its text; `ops_by_task`: of a device's ops, how many
    each cluster task placed there (see `fold_task_placements`)."""
    ops, memory, use, ops_by_task = ops or {}, memory or {}, use or {}, ops_by_task or {}
    known = {logical.name for device in devices for logical in device.logical}
    missing = list(dict.fromkeys(asked for asked, _ in fallbacks if asked not in known))
    columns = max(1, min(len(devices) + bool(missing), int((width + BOX_GAP) // (BOX_MIN_WIDTH + BOX_GAP))))
    box_width = (width - BOX_GAP * (columns - 1)) / columns
    inner_width = max(box_width - 2 * PADDING, 1.0)  # a window squeezed to nothing still lays out
    usage_height = line_height + 6
    row_height = SEGMENT_LINES * line_height + 2 * (TEXT_PAD + BORDER)

    contents: list[_Content] = []
    for device in devices:
        logical = device.logical if device.visible else ()
        lines = [_segment_lines(d, device, ops, memory, ops_by_task) for d in logical]
        if device.kind == "GPU":
            pieces, lines, gap, scale = _gpu_pieces(device, logical, lines, measure)
        else:  # logical CPUs share the host equally
            pieces, gap, scale = [Piece(1.0, _text_width(text, measure)) for text in lines], False, len(lines)
        contents.append(_Content(device, pieces, lines, gap, fit_pieces(pieces, scale, inner_width), scale))
    if missing:
        lines = [[asked, "does not exist", "soft placement ran it on "
                  + ", ".join(dict.fromkeys(actual for wanted, actual in fallbacks if wanted == asked))]
                 for asked in missing]
        pieces = [Piece(1.0, _text_width(text, measure)) for text in lines]
        contents.append(_Content(None, pieces, lines, False, fit_pieces(pieces, len(pieces), inner_width),
                                 len(pieces)))

    def needed(content: _Content) -> float:
        usage = usage_height if content.device is not None and content.device.kind == "GPU" else 0.0
        return TITLE_HEIGHT + 2 * PADDING + usage + max(content.fit.rows, 1) * row_height

    rows = -(-len(contents) // columns)
    box_height = max((needed(c) for c in contents), default=0.0)
    if height is not None and rows:
        height -= ARROW_LANE * len(dict.fromkeys(fallbacks))  # the arrows' lanes below the boxes
        room = (height - BOX_GAP * (rows - 1)) / rows
        box_height = max(box_height, min(room, MAX_BOX_HEIGHT))

    boxes: list[Box] = []
    for number, content in enumerate(contents):
        row, column = divmod(number, columns)
        rect = Rect(column * (box_width + BOX_GAP), row * (box_height + BOX_GAP), box_width, box_height)
        boxes.append(_box(content, rect, use, memory, measure, usage_height, missing_box=content.device is None))
    bottom = max((b.rect.y + b.rect.height for b in boxes), default=0.0)
    result = DeviceMap(boxes, [], bottom)
    for asked, actual in dict.fromkeys(fallbacks):
        source, target = result.segment(asked), result.segment(actual)
        if source is None or target is None or source is target:
            continue
        lane = bottom + ARROW_LANE * (len(result.arrows) + 1) - ARROW_LANE / 2
        (source_x, _), (target_x, _) = source.rect.centre, target.rect.centre
        result.arrows.append(Arrow([(source_x, source.rect.y + source.rect.height), (source_x, lane),
                                    (target_x, lane), (target_x, target.rect.y + target.rect.height)],
                                   f"soft placement: {asked} → {actual}"))
    result.height = bottom + ARROW_LANE * len(result.arrows)
    return result


def _box(content: _Content, rect: Rect, use: Mapping[int, GpuUse], memory: Mapping[str, float],
         measure: Measure, usage_height: float, *, missing_box: bool) -> Box:
    device = content.device
    title_width = rect.width - 2 * PADDING
    if device is None:
        box = Box(MISSING_TITLE, rect, missing=True)
        logical_names = [lines[0] for lines in content.lines]
    else:
        titles = device.titles()
        if device.kind == "CPU" and "CPU" in memory:
            titles = [f"{t} — {short_mib_text(memory['CPU'])} in use" for t in titles] + titles
        box = Box(_first_fitting(titles, title_width, measure, bold=True), rect, hidden=not device.visible,
                  growth=device.memory_growth, mode=device.mode, to_scale=content.fit.to_scale)
        logical_names = [d.name for d in device.logical] if device.visible else []
    top = rect.y + PADDING + TITLE_HEIGHT
    inner = Rect(rect.x + PADDING, top, max(rect.width - 2 * PADDING, 1.0), rect.y + rect.height - PADDING - top)
    if device is not None and device.kind == "GPU":
        bar = Rect(inner.x, inner.y, inner.width, usage_height - 4)
        reading = use.get(device.index)
        total = device.total_mib or 0.0
        run_width = others_width = 0.0
        if reading is not None and reading.run_mib is not None and total:
            run_width = min(bar.width * reading.run_mib / total, bar.width)
            if reading.run_mib > 0:
                run_width = min(max(run_width, 2.0), bar.width)  # a growth run's few hundred MiB still shows
            others_width = max(min(bar.width * reading.others_mib / total, bar.width - run_width), 0.0)
        label = _first_fitting(_usage_labels(device, reading), bar.width - 2 * TEXT_PAD, measure)
        box.usage = UsageBar(bar, run_width, others_width, label, reading.run_mib if reading else None)
        inner = Rect(inner.x, inner.y + usage_height, inner.width, inner.height - usage_height)
    if device is not None and not device.visible:
        box.unassigned = Gap(inner, ["hidden from TensorFlow", "by its visible GPUs:", "this run cannot use it"])
        return box
    rows = max(content.fit.rows, 1)
    row_height = inner.height / rows
    for number, placed in enumerate(content.fit.placed):
        piece_rect = Rect(inner.x + placed.x, inner.y + placed.row * row_height, placed.width, row_height)
        lines = content.lines[number]
        if content.gap and number == len(content.fit.placed) - 1:
            compressed = not content.fit.to_scale
            box.unassigned = Gap(piece_rect, lines if compressed else lines[:2], compressed)
        elif missing_box:
            box.segments.append(Segment(lines[0], lines[0], piece_rect, lines, missing=True))
        else:
            full_name = device.logical[number].full_name if device is not None else logical_names[number]
            box.segments.append(Segment(logical_names[number], full_name, piece_rect, lines))
    return box


def devices_from_ready(ready: events.Ready, config: Mapping[str, Any] | None,
                       gpu_totals: Mapping[int, float | None] | None = None) -> list[PhysicalDevice]:
    """The physical devices of a runtime's ready report, each with the logical devices TensorFlow made of it.

    `config` is the applied profile's JSON (visible GPUs, memory growth, virtual splits), by default the one
    the report carries; `gpu_totals` each physical GPU's memory in MiB from NVML, by TensorFlow's index."""
    config = config or ready.config or {}
    gpu_totals = gpu_totals or {}
    logical = list(ready.logical)
    created = {c["logical"]: c for c in ready.gpu_devices}
    visible_gpus = [d["index"] for d in ready.physical
                    if d["device_type"] == "GPU" and d.get("visible", True)]
    virtual = {int(k): list(v) for k, v in (config.get("virtual_gpus") or {}).items()}
    # Without the client's creation report, logical GPUs follow the visible physical ones in order, each
    # split into its configured number of parts.
    order = [index for index in visible_gpus for _ in range(max(len(virtual.get(index, [])), 1))]
    gpus_of: dict[int, list[LogicalDevice]] = {}
    cpus: list[LogicalDevice] = []
    gpu_number = 0
    for device in logical:
        if device["device_type"] == "GPU":
            made = created.get(device["short_name"])
            physical = made["physical"] if made else (order[gpu_number] if gpu_number < len(order) else None)
            gpu_number += 1
            if physical is None:
                continue
            limit = device.get("memory_limit_mib") or (made["memory_mb"] if made else None)
            gpus_of.setdefault(physical, []).append(LogicalDevice(device["short_name"], device["name"], limit))
        elif device["device_type"] == "CPU":
            cpus.append(LogicalDevice(device["short_name"], device["name"]))
    result: list[PhysicalDevice] = []
    for found in ready.physical:
        if found["device_type"] == "CPU":
            result.append(PhysicalDevice("CPU", found["index"], "host", logical=tuple(cpus)))
        elif found["device_type"] == "GPU":
            index = found["index"]
            result.append(PhysicalDevice("GPU", index, found.get("device_name") or "", gpu_totals.get(index),
                                         visible=found.get("visible", True),
                                         memory_growth=bool(config.get("memory_growth")),
                                         logical=tuple(gpus_of.get(index, [])),
                                         memory_fraction=config.get("memory_fraction")))
    return result


_TASK_DEVICE = re.compile(r"^/job:(?P<job>[\w-]+)/task:(?P<task>\d+)(?P<device>/(?:CPU|GPU):\d+)$")


def fold_task_placements(ops_per_device: Mapping[str, int]) -> tuple[Counter[str], dict[str, Counter[str]]]:
    """Placements per device as the map draws them: a cluster task's device ('/job:worker/task:1/CPU:0', in a
    process of its own on this machine, with the same device configuration) counted on the local device of that
    name (/CPU:0), and remembered per task ('worker:1'), so the counts add up to the ops the tasks placed."""
    ops: Counter[str] = Counter()
    by_task: dict[str, Counter[str]] = {}
    for device, count in ops_per_device.items():
        match = _TASK_DEVICE.match(device)
        if match is None:
            ops[device] += count
            continue
        local = match.group("device")
        ops[local] += count
        by_task.setdefault(local, Counter())[f"{match.group('job')}:{match.group('task')}"] += count
    return ops, by_task
