"""The result kinds jobs produce, declared once, and one neutral description of each for every front end.

A job returns a plain JSON-able dict (it crosses the events pipe and is kept in the run history); the
TypedDicts below declare each kind's keys. Keys that old run records may lack are optional, so every
recorded result still opens.

`present(result)` turns a result into a `Presentation`: a title, summary lines, warnings, tables
(columns with alignment and format, rows of raw values) and plots (named x/y series). The command
line prints it as text (core.cli.output) and the window draws it (gui.result_view); neither knows any
kind. A new kind needs one presenter (`@presenter("kind")`), or none at all when the job returns
its pieces directly as a `view` result (`Presentation.to_result`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypedDict

from tf_device_panel.core.protocol.output_lines import short_device_name
from tf_device_panel.core.units import MIB, bytes_text, mib_text

# -- the result kinds ----------------------------------------------------------------------------------

Scalar = str | int | float | bool | None
Align = Literal["left", "right"]
# How a column's values become text: text as is, g (shortest float), number (4 significant digits below 1,
# one decimal from 1 up), mib (whole MiB), loss (6 decimals).
Format = Literal["text", "g", "number", "mib", "loss"]
Row = dict[str, Scalar]               # one row of a table result: column key -> figure or text


class _MatrixBase(TypedDict):
    kind: Literal["matrix"]
    matrix: list[list[float]]
    device: str


class MatrixResult(_MatrixBase, total=False):
    """matmul and replicate: the product, where it ran, and for replicate each replica's device."""

    requested_device: str | None
    fallback: bool
    device_type: str
    replicas: dict[str, str]          # device asked for -> device the MatMul ran on
    products: list[list[list[float]]]
    # the TF1 session job
    example: str
    session_config: dict[str, bool]   # the ConfigProto's placement switches
    device_mapping: dict[str, str]    # the session's "Device mapping:" block: device -> its description
    gpu_options: Mapping[str, object]  # what the session's ConfigProto carries: allow_growth, …
    nodes: dict[str, str]             # graph node -> device it ran on


class _TrainingBase(TypedDict):
    kind: Literal["training"]
    devices: list[str]
    replicas_in_sync: int
    global_batch_size: int
    batch_per_replica: int
    loss: list[float]                 # per epoch (fit) or per step (custom loop)


class TrainingResult(_TrainingBase, total=False):
    """fit and custom-loop under MirroredStrategy."""

    model: str
    parameters: int
    loop: Literal["custom"]
    steps_per_epoch: int
    steps: int
    input: str                        # "dataset" or "numpy" (fit)
    learning_rate: float
    learning_rate_rule: str           # where the learning rate came from
    strategy: str
    cross_device_ops: str | None      # what was used (None: the default strategy)
    requested_cross_device_ops: str
    note: str | None                  # why the requested cross-device ops were replaced
    evaluate: dict[str, float]        # model.evaluate after fit
    notes: list[str]


class MemoryRow(TypedDict):
    step: int
    label: str
    allocated_mib: int
    current_mib: float | None         # TF's allocator, GPUs only
    peak_mib: float | None
    rss_mib: float | None             # the process's resident memory, CPUs only


class _MemoryBase(TypedDict):
    kind: Literal["memory"]
    short_device: str
    step_mib: int
    rows: list[MemoryRow]


class MemoryResult(_MemoryBase, total=False):
    device: str
    baseline: dict[str, float | None]
    final: MemoryRow
    released: bool
    notes: list[str]


class PlotSpec(TypedDict):
    x: str                            # column keys
    y: str
    series: list[str]                 # rows with equal values in these columns form one series


class Peaks(TypedDict, total=False):
    """benchmark: GFLOP/s no figure may pass, per dtype (CPU) and per GPU and math mode, and how each was found."""

    cpu_gflops: dict[str, float | None]  # None: no peak known for that dtype
    basis: str
    gpu_gflops: dict[str, dict[str, float | None]]
    gpu_basis: dict[str, str]


class _TableBase(TypedDict):
    kind: Literal["table"]
    rows: list[Row]                   # a row may carry "unsupported": why its figures are missing


class TableResult(_TableBase, total=False):
    """benchmark: any table of rows, with an optional plot of one column against another."""

    columns: list[str]                # keys of each row, in order (without it: the first row's keys)
    title: str
    column_titles: dict[str, str]     # key -> heading; a key without one is its own heading
    repeats: int
    tf32: bool                        # benchmark: TensorFloat-32 on for float32 matmuls (GPUs of 8.0 and later)
    plot: PlotSpec
    peak: Peaks                       # the CPU's and GPUs' physical peaks, the bounds no figure may pass
    best: list[Row]                   # the best figure per size
    flags: list[str]                  # figures above the peak or far above NumPy's
    notes: list[str]


class Timing(TypedDict):
    connect_s: float
    train_s: float


class DeviceConfigNote(TypedDict):
    config: Mapping[str, object]      # DeviceConfig.to_json of the tasks' configuration
    note: str


class _ClusterBase(TypedDict):
    kind: Literal["cluster"]
    strategy: str
    addresses: dict[str, list[str]]   # task type -> HOST:PORT of each task
    workers: int


class ClusterResult(_ClusterBase, total=False):
    """multi-worker and parameter-server."""

    isolation: str
    replicas_in_sync: int
    global_batch_size: int
    losses: dict[str, list[float]]    # multi-worker: per worker
    loss: list[float]
    losses_agree: bool
    variables: dict[str, str]         # parameter-server: variable -> device it lives on
    values: dict[str, float]
    steps: int
    steps_per_s: float
    timings: dict[str, Timing]
    device_config: DeviceConfigNote
    task_devices: dict[str, list[str]]
    wall_s: float


class ScriptResult(TypedDict):
    kind: Literal["script"]
    path: str
    argv: list[str]
    exit_code: int


class ViewColumn(TypedDict, total=False):
    title: str
    align: Align
    format: Format


class _ViewTableBase(TypedDict):
    columns: list[ViewColumn]
    rows: list[list[Scalar]]


class ViewTable(_ViewTableBase, total=False):
    matrix: bool


class ViewSeries(TypedDict):
    name: str
    x: list[float]
    y: list[float]


class _ViewPlotBase(TypedDict):
    series: list[ViewSeries]


class ViewPlot(_ViewPlotBase, total=False):
    x_label: str
    y_label: str


class ViewResult(TypedDict, total=False):
    """A result made only of neutral pieces (`Presentation.to_result`): shown as is, no presenter needed."""

    kind: Literal["view"]
    title: str
    lines: list[str]
    warnings: list[str]
    tables: list[ViewTable]
    plots: list[ViewPlot]


# -- the neutral presentation ---------------------------------------------------------------------------

MISSING = "—"


@dataclass(frozen=True)
class Column:
    title: str
    align: Align = "left"
    format: Format = "text"


def format_cell(value: Any, fmt: Format) -> str:
    """A value as both front ends show it; None is a figure that is missing."""
    if value is None:
        return MISSING
    if isinstance(value, bool) or not isinstance(value, int | float):
        return str(value)
    if fmt == "g":
        return f"{value:g}"
    if fmt == "mib":
        return f"{value:.0f}"
    if fmt == "loss":
        return f"{value:.6f}"
    if fmt == "number" and isinstance(value, float):
        return f"{value:.4g}" if abs(value) < 1 else f"{value:.1f}"
    return str(value)


@dataclass(frozen=True)
class Table:
    columns: tuple[Column, ...]
    rows: tuple[tuple[Any, ...], ...]
    matrix: bool = False              # a bare grid of numbers: no headings, printed in brackets

    def texts(self) -> list[list[str]]:
        return [[format_cell(value, column.format) for value, column in zip(row, self.columns, strict=True)]
                for row in self.rows]


@dataclass(frozen=True)
class Series:
    name: str
    x: tuple[float, ...]
    y: tuple[float, ...]
    # The rows of the presentation's first table this series draws, where the table holds them (the benchmark):
    # the window then marks each row with its curve's swatch, and the table is the plot's legend.
    rows: tuple[int, ...] = ()


@dataclass(frozen=True)
class Plot:
    x_label: str
    y_label: str
    series: tuple[Series, ...]


@dataclass(frozen=True)
class Presentation:
    title: str
    lines: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()    # what a person must not miss (a fallback, disagreeing workers)
    tables: tuple[Table, ...] = ()
    plots: tuple[Plot, ...] = ()      # drawn by the window; their figures are also in a table or line

    def to_result(self) -> ViewResult:
        """This presentation as a job's result (JSON), for a job that needs no presenter of its own."""
        return {
            "kind": "view", "title": self.title, "lines": list(self.lines), "warnings": list(self.warnings),
            "tables": [{"columns": [{"title": c.title, "align": c.align, "format": c.format} for c in t.columns],
                        "rows": [list(row) for row in t.rows], "matrix": t.matrix} for t in self.tables],
            "plots": [{"x_label": p.x_label, "y_label": p.y_label,
                       "series": [{"name": s.name, "x": list(s.x), "y": list(s.y)} for s in p.series]}
                      for p in self.plots],
        }


Presenter = Callable[[Any], Presentation]
PRESENTERS: dict[str, Presenter] = {}


def presenter(kind: str) -> Callable[[Presenter], Presenter]:
    """Register the presenter of one result kind."""

    def register(function: Presenter) -> Presenter:
        PRESENTERS[kind] = function
        return function

    return register


def result_kind(result: Mapping[str, Any]) -> str | None:
    # A result with a matrix is a matrix result whatever else it says: records from before results carried a
    # kind have only the matrix.
    return "matrix" if "matrix" in result else result.get("kind")


def present(result: Any) -> Presentation | None:
    """The presentation of any result; None for a job that returned nothing."""
    if result is None:
        return None
    if not isinstance(result, Mapping):
        return Presentation(repr(result))
    kind = result_kind(result) or ""
    raw = tuple(json.dumps(result, indent=2, default=str).splitlines())
    function = PRESENTERS.get(kind)
    if function is None:  # a kind this version does not know (e.g. from a newer run record): its raw JSON
        return Presentation("", raw)
    try:
        return function(result)
    except (KeyError, TypeError, ValueError, IndexError) as exc:
        # A record some other version wrote: it still opens, as what it holds.
        return Presentation(f"a {kind} result this version cannot lay out ({type(exc).__name__}: {exc})", raw)


def _figure(value: Scalar) -> float:
    """A figure a result must have (a missing one: TypeError, and the result shows as its raw JSON)."""
    if value is None:
        raise TypeError("a figure is missing")
    return float(value)


def _series(name: str, ys: Sequence[float], xs: Sequence[float] | None = None, rows: Sequence[int] = ()) -> Series:
    return Series(name, tuple(float(x) for x in (xs if xs is not None else range(1, len(ys) + 1))),
                  tuple(float(y) for y in ys), tuple(rows))


@presenter("matrix")
def _matrix(result: MatrixResult) -> Presentation:
    rows = result["matrix"]
    width = len(rows[0]) if rows else 0
    warnings: tuple[str, ...] = ()
    if result.get("fallback"):
        warnings = (f"soft-placement fallback: asked for {result.get('requested_device')}",)
    lines = tuple(f"replica MatMul on {device} → ran on {short_device_name(actual)}"
                  for device, actual in (result.get("replicas") or {}).items())
    if "session_config" in result:
        switches = ", ".join(f"{k}={v}" for k, v in result["session_config"].items())
        lines += (f"TF1 session example {result.get('example')!r}: ConfigProto({switches})",
                  *(f"node {name} ran on {short_device_name(device)}" for name, device in
                    (result.get("nodes") or {}).items()))
    table = Table(tuple(Column("", "right", "g") for _ in range(width)), tuple(tuple(row) for row in rows),
                  matrix=True)
    return Presentation(f"matrix on {result.get('device')}", lines, warnings, (table,))


@presenter("training")
def _training(result: TrainingResult) -> Presentation:
    unit = "step" if result.get("loop") == "custom" else "epoch"
    model = f" ({result['model']} model, {result['parameters']:,} parameters)" if "parameters" in result else ""
    loss = result["loss"]
    lines = [f"global batch {result['global_batch_size']} ({result['batch_per_replica']} per replica)"]
    if result.get("strategy"):
        lines.append(f"{result['strategy']}, cross-device ops {result.get('cross_device_ops') or 'none'}, "
                     f"learning rate {result['learning_rate']:g} ({result['learning_rate_rule']})"
                     + (f", input {result['input']}" if result.get("input") else ""))
    if result.get("evaluate"):
        lines.append("evaluate: " + ", ".join(f"{k} {v:.6f}" for k, v in result["evaluate"].items()))
    lines += [f"note: {note}" for note in result.get("notes", [])]
    return Presentation(
        f"{result['replicas_in_sync']} replicas in sync over {', '.join(result['devices'])}{model}",
        tuple(lines),
        tables=(Table((Column(unit, "right"), Column("loss", "right", "loss")),
                      tuple((number, value) for number, value in enumerate(loss, 1))),),
        plots=(Plot(unit, "loss", (_series("loss", loss),)),))


@presenter("script")
def _script(result: ScriptResult) -> Presentation:
    return Presentation(f"{' '.join(result['argv'])} finished (exit code {result.get('exit_code', 0)})")


@presenter("memory")
def _memory(result: MemoryResult) -> Presentation:
    rows = result["rows"]
    on_gpu = bool(rows) and rows[0].get("current_mib") is not None
    figures: list[tuple[str, Literal["current_mib", "peak_mib", "rss_mib"], str]] = (
        [("TF current (MiB)", "current_mib", "TF current"), ("TF peak (MiB)", "peak_mib", "TF peak")] if on_gpu
        else [("Process RSS (MiB)", "rss_mib", "process RSS")])
    columns = (Column("Step", "right"), Column("What"), Column("Held (MiB)", "right"),
               *(Column(title, "right", "mib") for title, _, _ in figures))
    table_rows = tuple((r["step"], r["label"], r["allocated_mib"], *(r.get(key) for _, key, _ in figures))
                       for r in rows)
    steps = [float(r["step"]) for r in rows]
    series = [_series("held by the job", [float(r["allocated_mib"]) for r in rows], steps)]
    series += [_series(name, [float(r.get(key) or 0.0) for r in rows], steps) for _, key, name in figures]
    return Presentation(f"memory on {result['short_device']}, {result['step_mib']} MiB per step",
                        tuple(f"note: {note}" for note in result.get("notes", [])),
                        tables=(Table(columns, table_rows),),
                        plots=(Plot("step", "MiB", tuple(series)),))


class FitProbe(TypedDict, total=False):
    """One fit-batch run: its role (probe, search, repeat), batch, whether it held, its peaks and time."""

    role: str
    batch: int
    fits: bool
    peak_bytes: int | None            # the allocator's peak (its record's tf_memory figures)
    rss_peak_bytes: int | None        # the run's processes' largest resident set (the kernel's, at their end)
    gpu_process_peak_bytes: int | None  # on a GPU: the most NVML said the run's processes held
    predicted_peak_bytes: float
    seconds: float
    error: str | None
    side_by_side: int                 # how many runs at this batch ran at once (this one among them)
    peaks: dict[str, int]             # the allocator's peak per device
    oom: dict[str, Scalar]


class Boundary(TypedDict):
    held: int                         # the answer: held in all its runs, 10% under ran_out (1 for small ones)
    ran_out: int | None               # the smallest batch that ran out (None: none did, up to the largest batch)
    largest_held: int                 # the largest batch whose runs all held (the answer, or above it)


class AnswerPeaks(TypedDict):
    min_bytes: int
    max_bytes: int
    spread: float                     # (max - min) / max


class FitBatchResult(TypedDict, total=False):
    """fit-batch: every run, the boundary it found, and the answer with its repeats."""

    kind: Literal["fit_batch"]
    model: str                        # the work in a few words: cnn, script train.py, model my.keras
    work: dict[str, str]              # model, script, args as given
    device: str
    budget_mib: int
    predicted_max_batch: int | None   # the answer (held in each of its repeats)
    prediction: int                   # what the probes' line predicted
    verified: bool
    boundary: Boundary
    repeats: int
    answer_peaks: AnswerPeaks
    process_peak_bytes: int | None    # the largest resident set of a run at the answer
    gpu_process_peak_bytes: int | None
    failures_near: dict[str, int]     # OOM verdicts (fragmentation, shortage, unknown) up to a quarter above it
    fit: dict[str, float]             # fixed_bytes, bytes_per_sample, margin (the prediction's share of the budget)
    probes: list[FitProbe]            # every run, in order
    runs: int
    run_s: float
    flags: list[str]


@presenter("fit_batch")
def _fit_batch(result: FitBatchResult) -> Presentation:
    fit = result["fit"]
    rows = result["probes"]
    answer = result["predicted_max_batch"]
    boundary = result["boundary"]
    title = (f"largest {result['model']} batch that fits {result['budget_mib']} MiB on {result['device']}: "
             f"{answer} (held {result['repeats']} of {result['repeats']} runs)")
    peaks = result["answer_peaks"]
    out = boundary["ran_out"]
    lines = [f"boundary: {boundary['held']} held, " + (f"{out} ran out of memory" if out is not None else
                                                       "nothing ran out")]
    largest = boundary.get("largest_held", answer)
    if out is not None and answer is not None and largest > answer:
        lines.append(f"margin: {out}, the smallest batch that ran out, is {out / answer - 1:.0%} above {answer}; near "
                     f"the limit runs run out by chance ({largest} held in every run it had)")
    lines += [
        f"peaks at {answer}: {peaks['min_bytes'] / MIB:.1f}–{peaks['max_bytes'] / MIB:.1f} MiB of "
        f"{result['budget_mib']} (spread {peaks['spread']:.0%})"]
    if result.get("process_peak_bytes"):
        lines.append(f"the process's own peak at {answer}: {mib_text(_figure(result['process_peak_bytes']) / MIB, 0)} "
                     "resident (TensorFlow's runtime beside the allocator's)")
    if result.get("gpu_process_peak_bytes"):
        lines.append(f"on the GPU, the process held {mib_text(_figure(result['gpu_process_peak_bytes']) / MIB, 0)} "
                     "at most (NVML)")
    near = result.get("failures_near") or {}
    if near:
        kinds = ", ".join(f"{count} {verdict}" for verdict, count in sorted(near.items()))
        lines.append(f"runs out of memory near it: {kinds} (fragmentation: one block asked for with the pool far "
                     "from full; shortage: the pool full)")
    lines.append(f"peak ≈ {mib_text(fit['fixed_bytes'] / MIB)} + {bytes_text(fit['bytes_per_sample'])} × batch over "
                 "the runs that held; "
                 f"first guess {result['prediction']} (its peak predicted at {fit['margin']:.0%} of the budget)")
    lines.append(f"{result['runs']} runs, {result['run_s']:.0f} s")
    # Every run in order (a run's role, probe, search or repeat, is in the JSON). Outcome: held, or how it ran out
    # of memory (fragmentation, shortage): the point near the boundary. RSS: its processes' own peak resident
    # memory, beside the allocator's peak.
    columns = (Column("Batch", "right"), Column("Outcome"), Column("Peak (MiB)", "right", "number"),
               Column("RSS (MiB)", "right", "number"))
    table = Table(columns, tuple(
        (r["batch"], "held" if r["fits"] else str((r.get("oom") or {}).get("verdict") or "out of memory"),
         _figure(r["peak_bytes"]) / MIB if r["fits"] and r.get("peak_bytes") else None,
         _figure(r["rss_peak_bytes"]) / MIB if r.get("rss_peak_bytes") else None) for r in rows))
    held = sorted((r for r in rows if r["fits"] and r.get("peak_bytes")), key=lambda r: r["batch"])
    ran_out = sorted((r for r in rows if not r["fits"]), key=lambda r: r["batch"])
    top = float(max(r["batch"] for r in rows))
    series = [_series("peak of a run that held", [_figure(r["peak_bytes"]) / MIB for r in held],
                      [r["batch"] for r in held]),
              _series("budget", [float(result["budget_mib"])] * 2, [0.0, top])]
    if ran_out:
        series.insert(1, _series("ran out of memory (at the budget)", [float(result["budget_mib"])] * len(ran_out),
                                 [r["batch"] for r in ran_out]))
    return Presentation(title, tuple(lines), tuple(result.get("flags", [])), (table,),
                        (Plot("batch", "peak MiB", tuple(series)),))


@presenter("table")
def _table(result: TableResult) -> Presentation:
    rows = result["rows"]
    keys = result.get("columns") or [k for k in (rows[0] if rows else {}) if k != "unsupported"]
    titles = result.get("column_titles", {})
    numeric = {k for k in keys if any(isinstance(r.get(k), int | float) and not isinstance(r.get(k), bool)
                                      for r in rows)}
    columns = tuple(Column(titles.get(k, k), "right" if k in numeric else "left", "number") for k in keys)
    lines = []
    if result.get("repeats"):
        lines.append(f"{result['repeats']} matmuls per figure")
    if any(r.get("unsupported") is not None for r in rows):
        lines.append(f"{MISSING}: unsupported (the device has no kernel for that dtype)")
    lines += [note for note in result.get("notes", []) if not note.startswith("FLAGGED ")]
    plots: tuple[Plot, ...] = ()
    spec = result.get("plot")
    if spec:
        grouped: dict[str, tuple[list[float], list[float], list[int]]] = {}
        for number, row in enumerate(rows):
            if row.get(spec["y"]) is not None:
                xs, ys, drawn = grouped.setdefault(" ".join(str(row.get(k)) for k in spec["series"]), ([], [], []))
                xs.append(_figure(row[spec["x"]]))
                ys.append(_figure(row[spec["y"]]))
                drawn.append(number)
        plots = (Plot(titles.get(spec["x"], spec["x"]), titles.get(spec["y"], spec["y"]),
                      tuple(_series(name, ys, xs, drawn) for name, (xs, ys, drawn) in grouped.items())),)
    return Presentation(result.get("title", ""), tuple(lines), tuple(result.get("flags", [])),
                        tables=(Table(columns, tuple(tuple(r.get(k) for k in keys) for r in rows)),), plots=plots)


@presenter("cluster")
def _cluster(result: ClusterResult) -> Presentation:
    lines = []
    warnings = []
    if result.get("isolation"):
        lines.append(f"isolation: {result['isolation']}")
    if result.get("device_config"):
        lines.append(f"devices: {result['device_config']['note']}")
    if "losses_agree" in result:
        if result["losses_agree"]:
            lines.append("losses agree across workers (each worker reduces over all replicas)")
        else:
            warnings.append("losses DISAGREE across workers, though each reduces over all replicas")
    if "steps_per_s" in result:
        lines.append(f"{result['steps']} steps, {result['steps_per_s']:.1f} steps/s")
    loss = result.get("loss") or []
    if loss:
        lines.append(f"loss: {loss[0]:.6f} → {loss[-1]:.6f} over {len(loss)} steps")
    rows: list[tuple[Any, ...]] = []
    for name, where in (result.get("variables") or {}).items():
        rows.append((f"variable {name}", where, (result.get("values") or {}).get(name)))
    for name, timing in (result.get("timings") or {}).items():
        rows.append((name, f"connected in {timing['connect_s']:.2f} s", timing["train_s"]))
    for name, devices in task_devices_text(result).items():
        rows.append((f"{name} devices", devices, ""))
    tables: tuple[Table, ...] = ()
    if rows:
        tables = (Table((Column("Task / variable"), Column("Where / timing"),
                         Column("Value / train s", "right", "number")), tuple(rows)),)
    per_worker = result.get("losses") or {"coordinator": loss}
    addresses = "; ".join(f"{k} {', '.join(v)}" for k, v in result["addresses"].items())
    return Presentation(f"{result['strategy']} with {result['workers']} workers on {addresses}", tuple(lines),
                        tuple(warnings), tables,
                        (Plot("step", "loss", tuple(_series(name, v) for name, v in per_worker.items())),))


@presenter("view")
def _view(result: ViewResult) -> Presentation:
    return Presentation(
        result.get("title", ""), tuple(result.get("lines", [])), tuple(result.get("warnings", [])),
        tuple(Table(tuple(Column(str(c.get("title", "")), c.get("align", "left"), c.get("format", "text"))
                          for c in t["columns"]),
                    tuple(tuple(row) for row in t["rows"]), bool(t.get("matrix"))) for t in result.get("tables", [])),
        tuple(Plot(str(p.get("x_label", "")), str(p.get("y_label", "")),
                   tuple(_series(str(s["name"]), s["y"], s["x"]) for s in p["series"]))
              for p in result.get("plots", [])))


def task_devices_text(result: Mapping[str, Any]) -> dict[str, str]:
    """Each task's own logical devices, short ('/CPU:0, /CPU:1'), from a cluster job's result."""
    return {task: ", ".join("/" + name.rsplit("/device:", 1)[-1] for name in names) or "none"
            for task, names in (result.get("task_devices") or {}).items()}
