"""The device map's geometry: pure arithmetic, no Qt, so it is tested on its own (the widget only paints it).

Each physical device is a box; the logical devices TensorFlow made of it are segments inside, as wide as their
share of its memory (GPUs) or equal (CPUs). A soft-placement fallback is an arrow from the device an op asked
for (a dashed "missing" segment when it does not exist) to the device it ran on.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

BOX_MIN_WIDTH = 340.0   # px; below twice this the boxes stack in one column
BOX_GAP = 12.0
TITLE_HEIGHT = 20.0
SEGMENT_HEIGHT = 58.0      # the least; a map with room to spare grows its boxes up to MAX_SEGMENT_HEIGHT
MAX_SEGMENT_HEIGHT = 150.0
PADDING = 6.0
ARROW_LANE = 14.0          # px below the boxes for each fallback arrow's horizontal run
MISSING_TITLE = "Asked for, but not on this machine"


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

    @property
    def title(self) -> str:
        parts = [f"{self.kind} {self.index}" + (f": {self.name}" if self.name else "")]
        if self.total_mib:
            parts.append(f"{self.total_mib / 1024:.0f} GiB")
        if not self.visible:
            parts.append("hidden from TensorFlow")
        elif self.memory_growth:
            parts.append("memory growth on")
        return " — ".join(parts)


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
    lines: list[str]                # what to write inside, most important first
    missing: bool = False


@dataclass
class Box:
    title: str
    rect: Rect
    hidden: bool = False
    growth: bool = False
    missing: bool = False
    segments: list[Segment] = field(default_factory=list)
    unassigned: Rect | None = None  # memory no logical GPU was given


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


def _mib(value: float) -> str:
    return f"{value / 1024:.1f} GiB" if value >= 1024 else f"{value:.0f} MiB"


def _segment_lines(device: LogicalDevice, physical: PhysicalDevice, ops: Mapping[str, int],
                   memory: Mapping[str, float]) -> list[str]:
    lines = [device.name]
    if physical.kind == "GPU":
        if device.memory_limit_mib:
            lines.append(f"limit {_mib(device.memory_limit_mib)}")
        else:
            lines.append("grows as needed" if physical.memory_growth else "takes all memory")
    if device.name in ops:
        lines.append(f"{ops[device.name]} ops")
    if device.name in memory:
        lines.append(f"{_mib(memory[device.name])} in use")
    return lines


def layout_device_map(devices: Sequence[PhysicalDevice], width: float, *, ops: Mapping[str, int] | None = None,
                      memory: Mapping[str, float] | None = None, fallbacks: Sequence[tuple[str, str]] = (),
                      height: float | None = None) -> DeviceMap:
    """Boxes, segments and arrows for `devices` drawn `width` px wide, filling `height` px when given.

    `ops`: placements per short device name; `memory`: MiB in use per logical device (TensorFlow's allocator)
    or per physical box title key "CPU" / "GPU <index>"; `fallbacks`: (asked for, ran on) short names."""
    ops, memory = ops or {}, memory or {}
    known = {logical.name for device in devices for logical in device.logical}
    missing = [asked for asked, _ in fallbacks if asked not in known]
    missing = list(dict.fromkeys(missing))
    columns = max(1, min(len(devices) + bool(missing), int((width + BOX_GAP) // (BOX_MIN_WIDTH + BOX_GAP))))
    box_width = (width - BOX_GAP * (columns - 1)) / columns
    rows = -(-(len(devices) + bool(missing)) // columns)
    segment_height = SEGMENT_HEIGHT
    if height is not None and rows:
        height -= ARROW_LANE * len(dict.fromkeys(fallbacks))  # the arrows' lanes below the boxes
        room = (height - BOX_GAP * (rows - 1)) / rows - TITLE_HEIGHT - 2 * PADDING
        segment_height = min(max(room, SEGMENT_HEIGHT), MAX_SEGMENT_HEIGHT)
    box_height = TITLE_HEIGHT + segment_height + 2 * PADDING
    boxes: list[Box] = []

    def place(number: int) -> Rect:
        row, column = divmod(number, columns)
        return Rect(column * (box_width + BOX_GAP), row * (box_height + BOX_GAP), box_width, box_height)

    for number, device in enumerate(devices):
        rect = place(number)
        box = Box(device.title, rect, hidden=not device.visible, growth=device.memory_growth)
        inner = Rect(rect.x + PADDING, rect.y + PADDING + TITLE_HEIGHT, rect.width - 2 * PADDING, segment_height)
        logical = device.logical if device.visible else ()
        limits = [d.memory_limit_mib or 0.0 for d in logical]
        if device.kind == "GPU" and logical and all(limits):
            scale = max(device.total_mib or 0.0, sum(limits))
            shares = [limit / scale for limit in limits]
        else:  # CPUs, or a GPU whose one logical device takes it whole: equal parts
            shares = [1.0 / len(logical)] * len(logical) if logical else []
        x = inner.x
        for share, logical_device in zip(shares, logical, strict=True):
            segment_rect = Rect(x, inner.y, inner.width * share, inner.height)
            box.segments.append(Segment(logical_device.name, logical_device.full_name, segment_rect,
                                        _segment_lines(logical_device, device, ops, memory)))
            x += segment_rect.width
        if logical and x < inner.x + inner.width - 0.5:
            box.unassigned = Rect(x, inner.y, inner.x + inner.width - x, inner.height)
        key = "CPU" if device.kind == "CPU" else f"GPU {device.index}"
        if key in memory:
            box.title += f" — {_mib(memory[key])} in use"
        boxes.append(box)
    if missing:
        rect = place(len(devices))
        box = Box(MISSING_TITLE, rect, missing=True)
        inner_width = rect.width - 2 * PADDING
        for number, asked in enumerate(missing):
            segment_rect = Rect(rect.x + PADDING + number * inner_width / len(missing), rect.y + PADDING + TITLE_HEIGHT,
                                inner_width / len(missing), segment_height)
            ran_on = ", ".join(dict.fromkeys(actual for wanted, actual in fallbacks if wanted == asked))
            box.segments.append(Segment(asked, asked, segment_rect,
                                        [asked, "does not exist", f"soft placement ran it on {ran_on}"],
                                        missing=True))
        boxes.append(box)
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


def devices_from_ready(info: Mapping[str, Any], config: Mapping[str, Any] | None,
                       gpu_totals: Mapping[int, float | None] | None = None) -> list[PhysicalDevice]:
    """The physical devices of a runtime's ready report, each with the logical devices TensorFlow made of it.

    `config` is the applied profile's JSON (visible GPUs, memory growth, virtual splits), by default the one
    the report carries; `gpu_totals` each physical GPU's memory in MiB from NVML, by TensorFlow's index."""
    config = config or info.get("config") or {}
    gpu_totals = gpu_totals or {}
    logical = list(info.get("logical", []))
    created = {c["logical"]: c for c in info.get("gpu_devices", [])}
    visible_gpus = [d["index"] for d in info.get("physical", [])
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
            limit = device.get("memory_limit_mib") or (made or {}).get("memory_mb")
            gpus_of.setdefault(physical, []).append(LogicalDevice(device["short_name"], device["name"], limit))
        elif device["device_type"] == "CPU":
            cpus.append(LogicalDevice(device["short_name"], device["name"]))
    result: list[PhysicalDevice] = []
    for device in info.get("physical", []):
        if device["device_type"] == "CPU":
            result.append(PhysicalDevice("CPU", device["index"], "host", logical=tuple(cpus)))
        elif device["device_type"] == "GPU":
            index = device["index"]
            result.append(PhysicalDevice("GPU", index, device.get("device_name") or "", gpu_totals.get(index),
                                         visible=device.get("visible", True),
                                         memory_growth=bool(config.get("memory_growth")),
                                         logical=tuple(gpus_of.get(index, []))))
    return result
