"""Job catalogue: names, descriptions and declared parameters.

This module is imported by the CLI and the window, so it must not import TensorFlow; each job's
code lives in a sibling module that imports TensorFlow inside its function, in the runtime process.
"""

from __future__ import annotations

import importlib
import inspect
import math
import os
import re
import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tf_device_panel.core.text import clip, quote

INT, FLOAT, BOOL, CHOICE, DEVICE, DEVICES, PATH, ARGS, INTS, MULTI = (
    "int", "float", "bool", "choice", "device", "devices", "path", "args", "ints", "multi")

# What TensorFlow's DeviceSpec parses: '/GPU:1', 'gpu:1', '/device:GPU:1', '/job:x/replica:0/task:0/device:GPU:1'.
# The short form knows only CPU, GPU and TPU ('/FOO:0' is "Unknown attribute 'foo'"); indices are 32-bit.
_DEVICE_SPEC = re.compile(r"^(?:/job:[A-Za-z0-9_-]+(?:/replica:[0-9]+)?(?:/task:[0-9]+)?)?"
                          r"(?:/?(?P<short>cpu|gpu|tpu)|/device:(?P<full>cpu|gpu|tpu|xla_cpu|xla_gpu)):(?P<index>[0-9]+)$",
                          re.IGNORECASE | re.ASCII)
LIST_KINDS = (DEVICES, INTS, MULTI)  # comma-separated lists: each bounded by its Param's max_items
MAX_LIST_ITEMS = 64                 # default bound of a list (64 logical devices: the most cpu_devices gives)
MAX_BENCHMARK_SIZES = 16            # each size runs on every device and dtype: 16 keep a benchmark to minutes
MAX_DEVICE_INDEX = 2**31 - 1
MAX_NUMBER_CHARS = 30


def device_spec_problem(text: str) -> str | None:
    """Why `text` is not a device TensorFlow can parse, or None if it is."""
    match = _DEVICE_SPEC.match(text.strip())
    if not match:
        return (f"{quote(text)} is not a TensorFlow device name; use e.g. /GPU:0, /CPU:1, /device:GPU:1 or "
                "/job:localhost/replica:0/task:0/device:GPU:1 (device types: CPU, GPU, TPU)")
    if int(match.group("index")[:MAX_NUMBER_CHARS]) > MAX_DEVICE_INDEX:
        return f"{quote(text)}: device index {quote(match.group('index'))} is too large (TensorFlow's are 32-bit)"
    return None


def device_key(text: str) -> tuple[str, str, int]:
    """What names one device, however it is written: 'cpu:0', '/CPU:0', '/device:CPU:0' and
    '/job:localhost/replica:0/task:0/device:CPU:0' are the same device of the local runtime."""
    match = _DEVICE_SPEC.match(text.strip())
    if not match:
        return (text.strip(), "", -1)
    where = text.strip()[:match.start("short") if match.group("short") else match.start("full") - len("/device")]
    where = where.lower().rstrip("/")
    local = "/job:localhost/replica:0/task:0"
    return ("" if where in ("", "/job:localhost", "/job:localhost/replica:0", local) else where,
            (match.group("short") or match.group("full")).upper(), int(match.group("index")[:MAX_NUMBER_CHARS]))


class _NotANumber(ValueError):
    """A number written so that Python would misread or refuse it; the message says how to write it."""


_PLAIN_INT = re.compile(r"[+-]?[0-9]+", re.ASCII)
_PLAIN_FLOAT = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?", re.ASCII)


def _ascii_number(text: str, what: str) -> str:
    """`text` if written in plain ASCII digits and not absurdly long: Python's int() reads '٣' as 3, '1_000' as
    1000 and ' 1 ' as 1, and refuses 5000 digits."""
    if not text.isascii():
        raise _NotANumber(f"expected {what} in plain digits 0-9, got {quote(text)}")
    if len(text) > MAX_NUMBER_CHARS:
        raise _NotANumber(f"expected {what}, got {len(text)} characters ({quote(text)})")
    plain = _PLAIN_INT if what == "a whole number" else _PLAIN_FLOAT
    if "_" in text or (plain.fullmatch(text) is None and text.lower().lstrip("+-") not in ("inf", "nan", "infinity")):
        example = "1000" if what == "a whole number" else "0.5 or 1e-3"
        raise _NotANumber(f"expected {what} in plain digits 0-9 (e.g. {example}), got {quote(text)}")
    return text


class ParamError(ValueError):
    """One or more bad job parameters; `problems` lists (parameter, message) pairs."""

    def __init__(self, job: str, problems: list[tuple[str, str]]):
        self.job = job
        self.problems = problems
        super().__init__("; ".join(f"{name}: {msg}" for name, msg in problems))


@dataclass(frozen=True)
class Param:
    name: str
    type: str
    default: Any
    help: str
    choices: tuple[str, ...] = ()
    minimum: float | None = None
    maximum: float | None = None
    label: str = ""                            # what a form calls it; every job in JOBS declares one
    unit: str = ""                             # shown after the value: "MiB", "s"
    empty_means: str = ""                      # what an empty value does ("all GPUs, else all CPUs")
    shown_when: tuple[str, str] | None = None  # (parameter, value): it only matters then (image size: cnn)
    max_items: int = MAX_LIST_ITEMS            # a list's (DEVICES, INTS, MULTI) most items, said when passed

    @property
    def item_limit(self) -> int:
        """The most items a list parameter takes (a MULTI: no more than its choices)."""
        return min(self.max_items, len(self.choices)) if self.type == MULTI else self.max_items

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "type": self.type, "default": self.default, "help": self.help,
                "choices": list(self.choices), "minimum": self.minimum, "maximum": self.maximum,
                "label": self.label, "unit": self.unit, "empty_means": self.empty_means,
                "shown_when": list(self.shown_when) if self.shown_when else None,
                "max_items": self.item_limit if self.type in LIST_KINDS else None}

    def from_text(self, text: str) -> Any:
        """Convert a command-line value; raises ValueError with a message naming what was expected."""
        text = text.strip()
        if self.type == INT:
            try:
                return int(_ascii_number(text, "a whole number"))
            except _NotANumber:
                raise
            except ValueError:
                raise ValueError(f"expected a whole number, got {quote(text)}") from None
        if self.type == FLOAT:
            try:
                return float(_ascii_number(text, "a number"))
            except _NotANumber:
                raise
            except ValueError:
                raise ValueError(f"expected a number, got {quote(text)}") from None
        if self.type == BOOL:
            lowered = text.lower()
            if lowered in ("1", "true", "yes", "on"):
                return True
            if lowered in ("0", "false", "no", "off"):
                return False
            raise ValueError(f"expected true or false, got {quote(text)}")
        return text

    def check(self, value: Any) -> Any:
        """Validate a typed value (from a form, JSON or `from_text`); returns it normalised."""
        kind = self.type
        if kind == INT:
            if isinstance(value, bool) or not isinstance(value, int):
                raise ValueError(f"expected a whole number, got {quote(value)}")
        elif kind == FLOAT:
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ValueError(f"expected a number, got {quote(value)}")
            try:
                value = float(value)
            except OverflowError:
                raise ValueError(f"{quote(value)} is too large") from None
            if not math.isfinite(value):
                raise ValueError(f"expected a finite number, got {value}")
        elif kind == BOOL:
            if not isinstance(value, bool):
                raise ValueError(f"expected true or false, got {quote(value)}")
        elif not isinstance(value, str):
            raise ValueError(f"expected text, got {quote(value)}")
        if kind in (INT, FLOAT):
            if self.minimum is not None and value < self.minimum:
                raise ValueError(f"{quote(value)} is below the minimum {self.minimum:g}")
            if self.maximum is not None and value > self.maximum:
                raise ValueError(f"{quote(value)} is above the maximum {self.maximum:g}")
        if kind in LIST_KINDS and len(items := split_devices(value)) > self.item_limit:
            raise ValueError(f"{len(items)} items given, at most {self.item_limit} allowed "
                             f"(a bound that keeps one run to minutes); give fewer")
        if kind == CHOICE and value not in self.choices:
            raise ValueError(f"{quote(value)} is not one of: {', '.join(self.choices)}")
        if kind == DEVICE and value.strip():
            problem = device_spec_problem(value)
            if problem:
                raise ValueError(problem)
        if kind == DEVICES:
            seen: dict[tuple[str, str, int], str] = {}
            for item in split_devices(value):
                problem = device_spec_problem(item)
                if problem:
                    raise ValueError(f"{problem}; list devices like /CPU:0,/CPU:1")
                key = device_key(item)
                if key in seen:
                    same = "" if seen[key] == item else f" (as {quote(seen[key])})"
                    raise ValueError(f"{quote(item)} is listed twice{same}; list each device once, e.g. /CPU:0,/CPU:1")
                seen[key] = item
        if kind == INTS:
            items = split_devices(value)
            if not items:
                raise ValueError("give at least one number, e.g. 256,512")
            for item in items:
                if not (item.isascii() and item.isdigit()) or len(item) > MAX_NUMBER_CHARS or int(item) <= 0:
                    raise ValueError(f"{quote(item)} is not a whole number above 0 in digits 0-9; "
                                     "write e.g. 256,512,1024")
                if self.maximum is not None and int(item) > self.maximum:
                    raise ValueError(f"{item} is above the maximum {self.maximum:g}")
        if kind == MULTI:
            items = split_devices(value)
            unknown = [quote(item) for item in items if item not in self.choices]
            if unknown or not items:
                raise ValueError(f"{', '.join(unknown) or 'nothing'} chosen; use some of: {', '.join(self.choices)}")
        if kind == PATH:
            if self.default == "" and not value.strip():
                raise ValueError("a file is required")
            if value.strip():
                problem = path_problem(value)
                if problem:
                    raise ValueError(problem)
        if kind == ARGS:
            try:
                shlex.split(value)
            except ValueError as exc:
                raise ValueError(f"cannot split arguments: {exc}") from None
        return value


def path_problem(text: str) -> str | None:
    """Why `text` is not a readable file, or None; checked before TensorFlow starts, so a typo costs nothing."""
    try:
        file = Path(text.strip()).expanduser()
    except RuntimeError:  # "~nouser/x.py": no such user, so no home to expand
        user = text.strip().split("/")[0]
        return f"{quote(text)}: {quote(user)} names no user of this machine, so it has no home folder; check the path"
    try:
        if not file.exists():
            return f"{quote(text)} does not exist (looked in {quote(str(Path.cwd()))}); check the path"
        if not file.is_file():
            return f"{quote(text)} is not a file"
    except OSError as exc:  # a name too long for the file system, a permission denied on a folder
        return f"{quote(text)} cannot be checked: {exc.strerror or exc}"
    if not os.access(file, os.R_OK):
        return f"{quote(text)} cannot be read (permissions)"
    return None


def split_devices(text: str) -> list[str]:
    return [item.strip() for item in text.replace(";", ",").split(",") if item.strip()]


def _load(entry: str) -> Callable[..., Any]:
    module, _, attr = entry.partition(":")
    return getattr(importlib.import_module(module), attr)


@dataclass(frozen=True)
class JobSpec:
    name: str
    title: str
    description: str
    entry: str                      # "module:function", run inside the runtime process
    params: tuple[Param, ...] = ()
    task_entries: tuple[tuple[str, str], ...] = ()  # ("who runs", "module:function") in cluster processes

    def defaults(self) -> dict[str, Any]:
        return {p.name: p.default for p in self.params}

    def function(self) -> Callable[..., Any]:
        return _load(self.entry)

    def code(self) -> str:
        """The source a person reads to learn what the job does: the runtime's part, then each process's."""
        parts = [f"# {self.title}: runs in the TensorFlow runtime process as {self.entry}\n"
                 + inspect.getsource(self.function())]
        parts += [f"# {who} {entry}\n" + inspect.getsource(_load(entry)) for who, entry in self.task_entries]
        return "\n\n".join(parts)

    def resolve(self, values: Mapping[str, Any] | None = None, *,
                texts: Mapping[str, str] | None = None) -> dict[str, Any]:
        """Defaults overlaid with typed `values` and command-line `texts`; every problem at once."""
        known = {p.name: p for p in self.params}
        resolved = self.defaults()
        problems: list[tuple[str, str]] = []
        merged: list[tuple[str, Any, bool]] = [(k, v, False) for k, v in (values or {}).items()]
        merged += [(k, v, True) for k, v in (texts or {}).items()]
        for name, raw, is_text in merged:
            param = known.get(name)
            if param is None:
                choices = ", ".join(known) or "none"
                problems.append((quote(name), f"unknown parameter for job {self.name!r} (parameters: {choices})"))
                continue
            try:
                resolved[name] = param.check(param.from_text(raw) if is_text else raw)
            except ValueError as exc:
                problems.append((name, str(exc)))
        already_reported = {name for name, _ in problems}
        for name, value in resolved.items():
            if name in already_reported:
                continue
            try:  # defaults too: a required path left empty is reported here
                known[name].check(value)
            except ValueError as exc:
                problems.append((name, str(exc)))
        if problems:
            raise ParamError(self.name, problems)
        return resolved

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "title": self.title, "description": self.description,
                "params": [p.to_json() for p in self.params]}


_CROSS_DEVICE_OPS = Param(
    "cross_device_ops", CHOICE, "auto", "How MirroredStrategy combines the replicas' gradients. auto: "
    "NcclAllReduce when every replica is on its own physical GPU and NCCL loads, else "
    "HierarchicalCopyAllReduce (the result says which, and why). NcclAllReduce where it cannot run (CPUs, "
    "logical GPUs split from one GPU, no NCCL) falls back the same way, said. With one device and no devices "
    "named, the default strategy runs instead.",
    choices=("auto", "NcclAllReduce", "HierarchicalCopyAllReduce", "ReductionToOneDevice"),
    label="Cross-device ops")
_LR_RULE = Param(
    "lr_rule", CHOICE, "fixed", "fixed: the job's usual learning rate; by-global-batch: the seeds' "
    "LEARNING_RATES_BY_BATCH_SIZE = {5: 0.1, 10: 0.15, 20: 0.175}, looked up by the global batch.",
    choices=("fixed", "by-global-batch"), label="Learning rate rule")

JOBS: dict[str, JobSpec] = {
    spec.name: spec
    for spec in (
        JobSpec(
            "matmul", "Matrix multiply",
            "The seed example [[1,2,3],[4,5,6]] @ [[1,2],[3,4],[5,6]], optionally pinned with tf.device; "
            "shows where it ran and whether soft placement moved it.",
            "tf_device_panel.core.runproc.jobs.basic:matmul",
            (Param("device", DEVICE, "", "Device to pin the op to with tf.device (e.g. /GPU:0, /CPU:1). "
                   "Empty: let TensorFlow choose. A device that does not exist shows soft placement.",
                   label="Device", empty_means="TensorFlow chooses"),),
        ),
        JobSpec(
            "replicate", "Manual replication",
            "The same matmul on every logical device of one type, then tf.add_n on one device — "
            "replication by hand, as in the seeds.",
            "tf_device_panel.core.runproc.jobs.basic:replicate",
            (Param("device_type", CHOICE, "auto", "Which logical devices to replicate on; auto: GPUs if any, "
                   "else CPUs.", choices=("auto", "GPU", "CPU"), label="Replicate on"),
             Param("reduce_device", DEVICE, "/CPU:0", "Device that runs tf.add_n over the products.",
                   label="Sum (add_n) on")),
        ),
        JobSpec(
            "session", "TF1 graph and Session",
            "The seeds' TensorFlow 1 examples: a graph run in tf.compat.v1.Session with "
            "ConfigProto(log_device_placement=True, allow_soft_placement=...). TensorFlow prints the "
            "Device mapping block and a 'name: device' line per node; a node pinned to a missing device "
            "fails (soft placement off) or moves (on).",
            "tf_device_panel.core.runproc.jobs.tf1:session",
            (Param("example", CHOICE, "placement", "placement: a @ b, placed by TensorFlow; pin-cpu: the "
                   "constants under tf.device('/cpu:0'); two-devices: a @ b on each device, summed by add_n "
                   "on /cpu:0 (→ [[44,56],[98,128]] on two devices); missing-device: everything on /gpu:2.",
                   choices=("placement", "pin-cpu", "two-devices", "missing-device"), label="Example"),
             Param("soft_placement", BOOL, False, "ConfigProto allow_soft_placement (TF1's default: off).",
                   label="Soft placement"),
             Param("devices", DEVICES, "", "For two-devices: the devices to multiply on. Empty: all GPUs, "
                   "or all CPUs if there is no GPU.", label="Multiply on", empty_means="all GPUs, else all CPUs",
                   shown_when=("example", "two-devices"))),
        ),
        JobSpec(
            "fit", "Keras fit",
            "Keras model.fit under tf.distribute.MirroredStrategy over the chosen logical devices, with "
            "the seeds' one-unit Dense model or their small CNN; the global batch grows with the number of "
            "replicas.",
            "tf_device_panel.core.runproc.jobs.training:fit",
            (Param("epochs", INT, 2, "Training epochs.", minimum=1, maximum=10_000, label="Epochs"),
             Param("batch_per_replica", INT, 5, "Batch size on each replica; global batch = this × replicas.",
                   minimum=1, maximum=1_000_000, label="Batch per replica", unit="samples"),
             Param("samples", INT, 100, "Number of training samples.", minimum=1, maximum=100_000_000,
                   label="Training samples"),
             Param("devices", DEVICES, "", "Comma-separated logical devices to mirror over "
                   "(e.g. /CPU:0,/CPU:1). Empty: all GPUs, or all CPUs if there is no GPU.",
                   label="Mirror over", empty_means="all GPUs, else all CPUs"),
             Param("model", CHOICE, "dense", "dense: the seeds' one-unit Dense model; cnn: the seeds' small CNN "
                   "(Conv2D/MaxPooling, dropout, sigmoid) on synthetic images, to put visible load on the devices.",
                   choices=("dense", "cnn"), label="Model"),
             Param("image_size", INT, 32, "Image side in pixels for the cnn model (the seed used 150).",
                   minimum=8, maximum=512, label="Image size", unit="px", shown_when=("model", "cnn")),
             _CROSS_DEVICE_OPS,
             Param("data", CHOICE, "dataset", "dataset: a tf.data.Dataset batched by the global batch; numpy: "
                   "NumPy arrays with batch_size = the global batch, which Keras splits across the replicas.",
                   choices=("dataset", "numpy"), label="Input"),
             _LR_RULE,
             Param("evaluate", BOOL, True, "Run model.evaluate on the dataset after fit.", label="Evaluate after fit")),
        ),
        JobSpec(
            "custom-loop", "Custom training loop",
            "The seeds' custom loop: a distributed dataset, per-example loss averaged over the global batch "
            "with tf.nn.compute_average_loss, strategy.run and strategy.reduce(SUM) inside a tf.function.",
            "tf_device_panel.core.runproc.jobs.training:custom_loop",
            (Param("steps", INT, 20, "Training steps.", minimum=1, maximum=1_000_000, label="Steps"),
             Param("batch_per_replica", INT, 5, "Batch size on each replica; global batch = this × replicas.",
                   minimum=1, maximum=1_000_000, label="Batch per replica", unit="samples"),
             Param("learning_rate", FLOAT, 0.1, "SGD learning rate (with lr_rule=fixed).", minimum=1e-6,
                   maximum=10.0, label="Learning rate"),
             Param("devices", DEVICES, "", "Comma-separated logical devices to mirror over. Empty: all GPUs, "
                   "or all CPUs if there is no GPU.", label="Mirror over", empty_means="all GPUs, else all CPUs"),
             _CROSS_DEVICE_OPS,
             _LR_RULE),
        ),
        JobSpec(
            "memory", "Memory behaviour",
            "Allocates tensors step by step on one device and reports TF's allocator figures (GPU) or the "
            "process's memory (CPU): see memory growth, memory limits and virtual splits at work, and the "
            "out-of-memory error past a logical device's limit.",
            "tf_device_panel.core.runproc.jobs.memory:memory",
            (Param("device", DEVICE, "", "Device to allocate on. Empty: the first GPU, else the CPU.",
                   label="Device", empty_means="the first GPU, else the CPU"),
             Param("step_mib", INT, 64, "MiB allocated per step.", minimum=1, maximum=65_536,
                   label="Allocated per step", unit="MiB"),
             Param("steps", INT, 8, "Number of allocation steps.", minimum=1, maximum=1000, label="Steps"),
             Param("release", BOOL, True, "Free everything at the end and report once more.",
                   label="Release at the end")),
        ),
        JobSpec(
            "fit-batch", "Batch that fits",
            "Predicts the largest batch the fit job's training fits in a memory budget: probes in fresh processes "
            "capped at the budget (the CPU's BFC allocator, or a logical GPU of that size) at growing batches, "
            "fits their allocator peaks against the batch, predicts, then verifies at the prediction (it must "
            "fit) and a quarter above it (it must not, or is flagged).",
            "tf_device_panel.core.runproc.jobs.fit_batch:fit_batch",
            (Param("model", CHOICE, "cnn", "The fit job's model: dense (one unit) or cnn (the seeds' small CNN).",
                   choices=("dense", "cnn"), label="Model"),
             Param("budget_mib", INT, 256, "The memory budget in MiB each run gets (its allocator's limit).",
                   minimum=16, maximum=1_048_576, label="Budget", unit="MiB"),
             Param("image_size", INT, 32, "Image side in pixels for the cnn model.", minimum=8, maximum=512,
                   label="Image size", unit="px", shown_when=("model", "cnn")),
             Param("device", DEVICE, "", "The device the budget is on: /CPU:0 (capped through the CPU's BFC "
                   "allocator) or /GPU:N (a logical GPU of the budget's size). Empty: /CPU:0.",
                   label="Device", empty_means="/CPU:0")),
        ),
        JobSpec(
            "benchmark", "Matmul benchmark",
            "Matrix-multiply throughput (GFLOP/s) on each logical device over sizes and dtypes, with warm-up "
            "and synchronisation, and NumPy's matmul on the same CPU as a reference row.",
            "tf_device_panel.core.runproc.jobs.benchmark:benchmark",
            (Param("sizes", INTS, "256,512,1024", f"Comma-separated matrix sizes (n for n×n), at most "
                   f"{MAX_BENCHMARK_SIZES}.", maximum=16_384, label="Matrix sizes", unit="n (n×n)",
                   max_items=MAX_BENCHMARK_SIZES),
             Param("dtypes", MULTI, "float32,float16,bfloat16", "Comma-separated dtypes; a device that lacks "
                   "one shows it as unsupported.", choices=("float32", "float16", "bfloat16", "float64"),
                   label="Data types"),
             Param("repeats", INT, 5, "Matmuls timed per measurement.", minimum=1, maximum=10_000,
                   label="Repeats", unit="matmuls"),
             Param("devices", DEVICES, "", "Comma-separated logical devices. Empty: every logical device.",
                   label="Devices", empty_means="every logical device"),
             Param("tf32", BOOL, True, "TensorFloat-32 for float32 matmuls on GPUs of compute capability 8.0 and "
                   "later (tf.config.experimental.enable_tensor_float_32_execution): on, TensorFlow's default, "
                   "runs them on tensor cores with 10-bit mantissa products, and the rows read float32 (TF32); "
                   "off measures float32 proper.", label="TensorFloat-32")),
        ),
        JobSpec(
            "multi-worker", "Multi-worker cluster",
            "N worker processes on 127.0.0.1, each with its own TF_CONFIG, run a custom training loop under "
            "MultiWorkerMirroredStrategy; their losses must agree. (Keras 3's fit fails under this strategy.)",
            "tf_device_panel.core.runproc.jobs.cluster_jobs:multi_worker",
            (Param("workers", INT, 2, "Worker processes.", minimum=1, maximum=16, label="Workers"),
             Param("steps", INT, 10, "Training steps.", minimum=1, maximum=100_000, label="Steps"),
             Param("batch_per_replica", INT, 5, "Batch per replica.", minimum=1, maximum=1_000_000,
                   label="Batch per replica", unit="samples"),
             Param("learning_rate", FLOAT, 0.1, "SGD learning rate.", minimum=1e-6, maximum=10.0,
                   label="Learning rate"),
             Param("log_placement", BOOL, True, "Log the workers' op placement.", label="Log placement"),
             Param("timeout_s", INT, 180, "Give up (and stop every worker) after this many seconds.",
                   minimum=10, maximum=86_400, label="Time limit", unit="s")),
            (("Each worker process, with its own TF_CONFIG, runs",
              "tf_device_panel.core.runproc.cluster_task:mwms_worker"),),
        ),
        JobSpec(
            "parameter-server", "Parameter-server cluster",
            "A coordinator, one parameter server and N workers as local processes; a custom loop scheduled "
            "through ClusterCoordinator. Shows where the variables live (/job:ps/...).",
            "tf_device_panel.core.runproc.jobs.cluster_jobs:parameter_server",
            (Param("workers", INT, 2, "Worker processes.", minimum=1, maximum=16, label="Workers"),
             Param("steps", INT, 20, "Training steps scheduled on the workers.", minimum=1, maximum=100_000,
                   label="Steps"),
             Param("batch_per_replica", INT, 5, "Batch per worker step.", minimum=1, maximum=1_000_000,
                   label="Batch per replica", unit="samples"),
             Param("learning_rate", FLOAT, 0.1, "SGD learning rate.", minimum=1e-6, maximum=10.0,
                   label="Learning rate"),
             Param("log_placement", BOOL, False, "Log op placement in every task (many lines).",
                   label="Log placement"),
             Param("timeout_s", INT, 180, "Give up (and stop every process) after this many seconds.",
                   minimum=10, maximum=86_400, label="Time limit", unit="s")),
            (("The parameter server and each worker process run", "tf_device_panel.core.runproc.cluster_task:server"),
             ("The coordinator process runs", "tf_device_panel.core.runproc.cluster_task:ps_coordinator")),
        ),
        JobSpec(
            "script", "Your script",
            "Run your own Python file inside the configured runtime and stream its output, to watch your "
            "training under this device configuration.",
            "tf_device_panel.core.runproc.jobs.script:script",
            (Param("path", PATH, "", "The Python file to run (as __main__).", label="Script"),
             Param("args", ARGS, "", "Command-line arguments for the script (shell quoting).", label="Arguments",
                   empty_means="none")),
        ),
    )
}


def get_job(name: str) -> JobSpec:
    try:
        return JOBS[name]
    except KeyError:
        raise ParamError(clip(name, 60), [("job", f"unknown job {quote(name)}; jobs: {', '.join(JOBS)}")]) from None
