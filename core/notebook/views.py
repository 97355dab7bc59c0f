"""What the magics show: each view is an object IPython displays, as HTML in Jupyter and Colab (tables and an
inline SVG picture; no JavaScript) and as plain text in a terminal IPython (`__repr__`, IPython's text/plain).
Nothing here imports TensorFlow or IPython."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from html import escape
from typing import Any

from tf_device_panel.core.devices.nvml import GpuSnapshot
from tf_device_panel.core.notebook.cell_run import CellReport
from tf_device_panel.core.oom import OomReport, oom_text
from tf_device_panel.core.protocol.events import BuildInfo, PhysicalDevice
from tf_device_panel.core.protocol.output_lines import canonical_device
from tf_device_panel.core.units import bytes_text

MAX_OP_TYPES = 6       # op types named per device (the most frequent), the rest counted
SVG_WIDTH = 600
_COLORS = {"in_use": "#d1495b", "free": "#66a182", "unallocated": "#d9d9d9", "mixed": "#edae49"}
_STYLE = ("<style>.tfdp{font-family:system-ui,sans-serif;font-size:13px}.tfdp table{border-collapse:collapse;"
          "margin:4px 0}.tfdp th,.tfdp td{border:1px solid #ccc;padding:2px 8px;text-align:left}"
          ".tfdp th{background:#f3f3f3}.tfdp .warn{color:#a33}.tfdp .note{color:#555}</style>")


def _table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    head = "".join(f"<th>{escape(str(h))}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{escape(str(cell))}</td>" for cell in row) + "</tr>" for row in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def _text_table(headers: Sequence[str], rows: Sequence[Sequence[Any]], indent: str = "  ") -> list[str]:
    cells = [[str(h) for h in headers], *[[str(c) for c in row] for row in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    return [indent + "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells]


# -- %tf_config ----------------------------------------------------------------------------------------------

@dataclass
class ConfigView:
    summary: str
    steps: list[str]
    notes: list[str] = field(default_factory=list)

    def _repr_html_(self) -> str:
        steps = "".join(f"<li><code>{escape(step)}</code></li>" for step in self.steps)
        notes = "".join(f"<p class='note'>{escape(note)}</p>" for note in self.notes)
        return (f"{_STYLE}<div class='tfdp'><b>TensorFlow configured</b> ({escape(self.summary)}), before it "
                f"initializes:<ol>{steps}</ol>{notes}</div>")

    def __repr__(self) -> str:
        lines = [f"TensorFlow configured ({self.summary}), before it initializes:"]
        lines += [f"  {number}. {step}" for number, step in enumerate(self.steps, 1)]
        return "\n".join(lines + self.notes)


# -- %tf_devices -----------------------------------------------------------------------------------------------

@dataclass
class DevicesView:
    tf_version: str
    python: str
    build: BuildInfo                          # tf.sysconfig's plain build facts, or {"error": why not}
    physical: list[PhysicalDevice]
    logical: list[str] | None                 # None: TensorFlow not initialized (listing would initialize it)
    configuration: str                        # what %tf_config applied, in words
    nvml_message: str                         # why NVML sees nothing, or ""
    nvml_driver: str | None = None
    nvml_cuda: str | None = None
    nvml_gpus: list[GpuSnapshot] = field(default_factory=list)

    def build_text(self) -> str:
        build = self.build
        if "error" in build:
            return f"build info unavailable: {build['error']}"
        if build.get("is_cuda_build"):
            capabilities = build.get("cuda_compute_capabilities")
            listed = ", ".join(map(str, capabilities)) if isinstance(capabilities, list) else ""
            return (f"CUDA {build.get('cuda_version')}, cuDNN {build.get('cudnn_version')}, compute capabilities "
                    f"{listed or 'unknown'}")
        return "no CUDA (a CPU-only build)"

    def physical_rows(self) -> list[list[str]]:
        rows = []
        for device in self.physical:
            extra = ""
            if device.get("device_type") == "GPU":
                extra = (f"{device.get('device_name') or ''} compute {device.get('compute_capability') or '?'}"
                         + (f" ({device['details_error']})" if device.get("details_error") else ""))
            rows.append([device["name"], device["device_type"], "yes" if device.get("visible") else
                         "no (hidden by visible_gpus)", extra.strip()])
        return rows

    def logical_text(self) -> str:
        if self.logical is None:
            return ("not created yet: TensorFlow is not initialized (listing them would initialize it, after which "
                    "%tf_config can no longer configure it)")
        return ", ".join(self.logical) or "none"

    def nvml_rows(self) -> list[list[str]]:
        rows = []
        for gpu in self.nvml_gpus:
            memory = (f"{gpu.memory_used_mib}/{gpu.memory_total_mib} MiB used" if gpu.memory_total_mib else "N/A")
            rows.append([str(gpu.index), gpu.name or "N/A", gpu.pci_bus_id or "", memory,
                         gpu.compute_capability or "", gpu.error or ""])
        return rows

    def _nvml_title(self) -> str:
        if self.nvml_message:
            return f"NVML: {self.nvml_message}"
        return f"NVML: driver {self.nvml_driver} (CUDA {self.nvml_cuda}), {len(self.nvml_gpus)} GPU(s)"

    def _repr_html_(self) -> str:
        parts = [_STYLE, "<div class='tfdp'>",
                 f"<b>TensorFlow {escape(self.tf_version)}</b> ({escape(self.build_text())}), Python "
                 f"{escape(self.python)}<br>Configuration: {escape(self.configuration)}",
                 "<h4>Physical devices</h4>",
                 _table(["device", "type", "visible", "details"], self.physical_rows()),
                 f"<h4>Logical devices</h4><p>{escape(self.logical_text())}</p>",
                 f"<h4>{escape(self._nvml_title())}</h4>"]
        if self.nvml_gpus:
            parts.append(_table(["NVML index", "name", "PCI bus", "memory", "compute", "error"], self.nvml_rows()))
        if not any(d.get("device_type") == "GPU" for d in self.physical):
            parts.append("<p class='note'>TensorFlow sees no GPU.</p>")
        return "".join(parts) + "</div>"

    def __repr__(self) -> str:
        lines = [f"TensorFlow {self.tf_version} ({self.build_text()}), Python {self.python}",
                 f"Configuration: {self.configuration}", "", "Physical devices:"]
        lines += _text_table(["device", "type", "visible", "details"], self.physical_rows())
        lines += ["", f"Logical devices: {self.logical_text()}", "", self._nvml_title()]
        if self.nvml_gpus:
            lines += _text_table(["NVML index", "name", "PCI bus", "memory", "compute", "error"], self.nvml_rows())
        if not any(d.get("device_type") == "GPU" for d in self.physical):
            lines.append("TensorFlow sees no GPU.")
        return "\n".join(lines)


# -- %%tf_run ----------------------------------------------------------------------------------------------------

def _op_summary(counts: Any) -> str:
    common = counts.most_common()
    named = ", ".join(f"{op} ×{n}" for op, n in common[:MAX_OP_TYPES])
    rest = sum(n for _, n in common[MAX_OP_TYPES:])
    return named + (f", {rest} more" if rest else "")


def _device_order(names: Sequence[str]) -> list[str]:
    def key(name: str) -> tuple[int, str, int]:
        kind, _, index = name.lstrip("/").rpartition(":")
        return (0 if kind == "GPU" else 1, kind, int(index) if index.isdigit() else 0)

    return sorted(dict.fromkeys(names), key=key)


@dataclass
class CellRunView:
    report: CellReport

    # the figures each device gets, in rows: device, ops, op types, peak
    def rows(self) -> list[list[str]]:
        counts = self.report.counts()
        names = _device_order([*self.report.devices, *counts, *self.report.peaks])
        rows = []
        for name in names:
            placed = counts.get(name)
            peak = self.report.peaks.get(name)
            limit = self.report.limits.get(name)
            memory = "" if peak is None else bytes_text(peak) + (f" of {bytes_text(limit)}" if limit else "")
            if peak is not None and name == "/CPU:0" and self.report.shared_cpu_allocator:
                memory += " (all logical CPUs)"
            rows.append([name, str(sum(placed.values())) if placed else "0", _op_summary(placed) if placed else "",
                         memory])
        return rows

    def fallback_lines(self) -> list[str]:
        return [f"soft-placement fallback: {'line ' + str(f.line) + ': ' if f.line else ''}tf.device({f.requested!r}) "
                f"names no device here ({canonical_device(f.requested)}); its ops ran on {f.actual}"
                for f in self.report.fallbacks]

    def headline(self) -> str:
        report = self.report
        ops = len(report.placements)
        where = ("from TensorFlow's placement log" if report.from_log else "eager ops") if ops else "no op ran"
        text = f"%%tf_run: {report.wall_s:.3f} s wall, {ops} op placement(s) ({where})"
        if report.oom is not None and not report.oom_caught_by_cell:
            text += " — ran out of memory"
        return text

    def _repr_html_(self) -> str:
        report = self.report
        parts = [_STYLE, "<div class='tfdp'>", f"<b>{escape(self.headline())}</b>"]
        if report.oom is not None:
            parts.append(oom_html(report.oom, report.oom_caught_by_cell))
        parts += [f"<p class='warn'>⚠ {escape(line)}</p>" for line in self.fallback_lines()]
        rows = self.rows()
        if rows:
            parts.append(device_map_svg(rows, report))
            parts.append(_table(["device", "ops", "op types", "allocator peak"], rows))
        parts += [f"<p class='note'>{escape(note)}</p>" for note in report.notes]
        return "".join(parts) + "</div>"

    def __repr__(self) -> str:
        report = self.report
        lines = [self.headline()]
        if report.oom is not None:
            lines += oom_lines(report.oom, report.oom_caught_by_cell)
        lines += [f"⚠ {line}" for line in self.fallback_lines()]
        rows = self.rows()
        if rows:
            lines += _text_table(["device", "ops", "op types", "allocator peak"], rows)
        return "\n".join(lines + report.notes)


def oom_lines(oom: OomReport, caught: bool) -> list[str]:
    first = ("the cell caught an out-of-memory error; the allocator said:" if caught else
             "out of memory — the kernel is still running; the allocator's dump, explained:")
    return [first, *oom_text(oom)]


def oom_html(oom: OomReport, caught: bool) -> str:
    text = oom_text(oom)
    figures = [("requested", oom.get("request_bytes")), ("limit", oom.get("limit_bytes")),
               ("in use", oom.get("in_use_bytes")), ("free in all", oom.get("free_bytes")),
               ("largest free block", oom.get("largest_free_bytes"))]
    rows = [[name, bytes_text(value)] for name, value in figures if value is not None]
    tips = "".join(f"<li>{escape(tip)}</li>" for tip in oom.get("advice", []))
    first = oom_lines(oom, caught)[0]
    return (f"<div style='border-left:4px solid {_COLORS['in_use']};padding-left:8px;margin:6px 0'>"
            f"<p class='warn'><b>{escape(first)}</b><br>{escape(text[0])}</p>"
            f"<p>{escape(oom.get('explanation', ''))}</p>{_table(['figure', 'size'], rows) if rows else ''}"
            f"{memory_bar_svg(oom)}{f'<p>Try:</p><ul>{tips}</ul>' if tips else ''}</div>")


def memory_bar_svg(oom: OomReport) -> str:
    """The device's memory at the failure, in address order: what was in use, free, not yet taken."""
    bar = oom.get("bar") or []
    total = sum(int(segment[1]) for segment in bar)
    if not total:
        return ""
    x, shapes = 0.0, []
    for segment in bar:
        width = int(segment[1]) / total * SVG_WIDTH
        state = str(segment[0])
        shapes.append(f"<rect x='{x:.2f}' y='0' width='{max(width, 0.5):.2f}' height='18' "
                      f"fill='{_COLORS.get(state, '#999')}'><title>{escape(state)} "
                      f"{escape(bytes_text(int(segment[1])))}</title></rect>")
        x += width
    shown = {str(segment[0]) for segment in bar}
    labels = [(label, state) for label, state in (("in use", "in_use"), ("free", "free"),
                                                   ("not yet taken", "unallocated"), ("small, mixed", "mixed"))
              if state in shown]
    legend = "".join(f"<rect x='{i * 120}' y='24' width='10' height='10' fill='{_COLORS[state]}'/>"
                     f"<text x='{i * 120 + 14}' y='33' font-size='11'>{label}</text>"
                     for i, (label, state) in enumerate(labels))
    return (f"<svg xmlns='http://www.w3.org/2000/svg' width='{SVG_WIDTH}' height='38' role='img' "
            f"aria-label='allocator memory map'>{''.join(shapes)}{legend}</svg>")


def device_map_svg(rows: Sequence[Sequence[str]], report: CellReport) -> str:
    """The devices as boxes, each with a bar of its ops (scaled to the busiest), and each fallback as an arrow from
    the device asked for (absent) to the one the ops ran on."""
    row_height, label_width, bar_width = 30, 90, 240
    text_x = label_width + bar_width + 10  # the figures in a column of their own, right of the longest bar
    most = max((int(row[1]) for row in rows), default=0) or 1
    shapes = []
    y_of: dict[str, int] = {}
    for index, row in enumerate(rows):
        y = index * row_height
        y_of[row[0]] = y
        ops = int(row[1])
        width = ops / most * bar_width
        shapes.append(f"<rect x='0' y='{y + 2}' width='{label_width - 6}' height='{row_height - 6}' rx='4' "
                      f"fill='#eef3fb' stroke='#4a6fa5'/><text x='8' y='{y + 20}' font-size='12'>"
                      f"{escape(row[0])}</text>")
        shapes.append(f"<rect x='{label_width}' y='{y + 8}' width='{max(width, 1):.1f}' height='12' "
                      f"fill='{'#4a6fa5' if ops else '#ccc'}'/><text x='{text_x}' "
                      f"y='{y + 19}' font-size='11'>{ops} op{'s' if ops != 1 else ''}"
                      f"{escape(' · peak ' + row[3].split(' (')[0]) if row[3] else ''}</text>")
    height = len(rows) * row_height
    for offset, fallback in enumerate(report.fallbacks):
        y = height + offset * row_height
        target = y_of.get(fallback.actual)
        shapes.append(f"<rect x='0' y='{y + 2}' width='{label_width - 6}' height='{row_height - 6}' rx='4' "
                      f"fill='white' stroke='#a33' stroke-dasharray='4 3'/><text x='8' y='{y + 20}' font-size='12' "
                      f"fill='#a33'>{escape(canonical_device(fallback.requested))}</text>"
                      f"<text x='{label_width}' y='{y + 19}' font-size='11' fill='#a33'>not here: soft placement "
                      f"ran its ops on {escape(fallback.actual)}</text>")
        if target is not None:
            shapes.append(f"<path d='M {label_width - 6} {y + row_height // 2} C {label_width + 20} "
                          f"{y + row_height // 2}, {label_width + 20} {target + row_height // 2}, {label_width - 6} "
                          f"{target + row_height // 2 + 4}' fill='none' stroke='#a33' marker-end='url(#tfdp-arrow)'/>")
    height += len(report.fallbacks) * row_height
    arrow = ("<defs><marker id='tfdp-arrow' markerWidth='8' markerHeight='8' refX='6' refY='3' orient='auto'>"
             "<path d='M0,0 L6,3 L0,6 z' fill='#a33'/></marker></defs>")
    return (f"<svg xmlns='http://www.w3.org/2000/svg' width='{SVG_WIDTH}' height='{height}' role='img' "
            f"aria-label='device map: ops per device'>{arrow}{''.join(shapes)}</svg>")
