"""The job catalogue: each job's name, title, description and declared parameters, and where its code lives.

Both sides import it: the window and the command line to show, fill in and check a job's parameters before any
process starts, the run process to check them again and find the job's code (`core.runproc.jobs`, named here as
"module:function" text). It imports no TensorFlow and nothing of the run process, the panel's client, the command
line or the lab.
"""

from __future__ import annotations

import ast
import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypedDict

import tf_device_panel.core
from tf_device_panel.core.catalogue.fit_work import BUILT_IN_MODELS, KERAS_SUFFIX, fit_batch_problems
from tf_device_panel.core.catalogue.params import (
    BESIDE,
    RUN,
    Param,
    ParamError,
    ParamJson,
    ParamValue,
    RunDevices,
    device_problems,
    names_devices,
)
from tf_device_panel.core.config import Kind
from tf_device_panel.core.text import clip, quote

MAX_BENCHMARK_SIZES = 16            # each size runs on every device and dtype: 16 keep a benchmark to minutes


class JobError(Exception):
    """A job could not run as asked; the message is shown to the user as is."""


def load_entry(entry: str) -> Callable[..., Any]:
    """The function a "module:function" entry names, imported by name (in the run process, which runs it)."""
    module, _, attr = entry.partition(":")
    return getattr(importlib.import_module(module), attr)


def entry_source(entry: str) -> str:
    """The source of the function a "module:function" entry names, read from its file: the window and the command
    line show a job's code without importing the run process's modules."""
    module, _, name = entry.partition(":")
    inside_core = module.removeprefix(f"{tf_device_panel.core.__name__}.").replace(".", "/")
    source = (Path(tf_device_panel.core.__path__[0]) / f"{inside_core}.py").read_text(encoding="utf-8")
    (found,) = [node for node in ast.parse(source).body
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name == name]
    first = min([found.lineno, *(decorator.lineno for decorator in found.decorator_list)])
    return "".join(source.splitlines(keepends=True)[first - 1:found.end_lineno])


class JobJson(TypedDict):
    """A job as `jobs --json` prints it."""

    name: str
    title: str
    description: str
    params: list[ParamJson]


@dataclass(frozen=True)
class JobSpec:
    name: str
    title: str
    description: str
    entry: str                      # "module:function", run inside the runtime process
    params: tuple[Param, ...] = ()
    task_entries: tuple[tuple[str, str], ...] = ()  # ("who runs", "module:function") in cluster processes
    # The rules between the parameters, checked once each is right on its own: (parameter, problem) pairs.
    rules: Callable[[Mapping[str, ParamValue]], list[tuple[str, str]]] | None = None
    # Its work is runs of the panel's own command line (fit-batch): it runs in the panel's process
    # (core.client.client_job), never in a run process, and holds no TensorFlow and no GPU memory of its own.
    in_client: bool = False

    def defaults(self) -> dict[str, ParamValue]:
        return {p.name: p.default for p in self.params}

    def code(self) -> str:
        """The source a person reads to learn what the job does: the runtime's part, then each process's."""
        where = "the panel's own process (its runs are processes of their own)" if self.in_client else \
            "the TensorFlow runtime process"
        parts = [f"# {self.title}: runs in {where} as {self.entry}\n" + entry_source(self.entry)]
        parts += [f"# {who} {entry}\n" + entry_source(entry) for who, entry in self.task_entries]
        return "\n\n".join(parts)

    def resolve(self, values: Mapping[str, object] | None = None, *,
                texts: Mapping[str, str] | None = None) -> dict[str, ParamValue]:
        """Defaults overlaid with `values` (checked whatever their type: they may come from JSON) and
        command-line `texts`; every problem at once."""
        known = {p.name: p for p in self.params}
        resolved = self.defaults()
        problems: list[tuple[str, str]] = []
        merged: list[tuple[str, object, bool]] = [(k, v, False) for k, v in (values or {}).items()]
        merged += [(k, v, True) for k, v in (texts or {}).items()]
        for name, raw, is_text in merged:
            param = known.get(name)
            if param is None:
                choices = ", ".join(known) or "none"
                problems.append((quote(name), f"unknown parameter for job {self.name!r} (parameters: {choices})"))
                continue
            try:
                resolved[name] = param.check(param.from_text(str(raw)) if is_text else raw)
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
        if not problems and self.rules is not None:
            problems = self.rules(resolved)
        if problems:
            raise ParamError(self.name, problems)
        return resolved

    def names_devices(self, values: Mapping[str, ParamValue]) -> bool:
        """Whether `check_devices` has anything to check: a device the run or the runs beside it use."""
        return names_devices(self.params, values)

    def check_devices(self, values: Mapping[str, ParamValue], devices: RunDevices) -> None:
        """The devices the parameters name must be where the job uses them (ParamError naming each): checked by
        the window and the command line before a run's process starts (against the profile and NVML's GPUs), and
        by the run process again, once TensorFlow has initialized, against the devices it lists, before the job."""
        problems = device_problems(self.params, values, devices)
        if problems:
            raise ParamError(self.name, problems)

    def to_json(self) -> JobJson:
        return {"name": self.name, "title": self.title, "description": self.description,
                "params": [p.to_json() for p in self.params]}


_CROSS_DEVICE_OPS = Param(
    "cross_device_ops", Kind.CHOICE, "auto", "How MirroredStrategy combines the replicas' gradients. auto: "
    "NcclAllReduce when every replica is on its own physical GPU and NCCL loads, else "
    "HierarchicalCopyAllReduce (the result says which, and why). NcclAllReduce where it cannot run (CPUs, "
    "logical GPUs split from one GPU, no NCCL) falls back the same way, said. With one device and no devices "
    "named, the default strategy runs instead.",
    choices=("auto", "NcclAllReduce", "HierarchicalCopyAllReduce", "ReductionToOneDevice"),
    label="Cross-device ops")
_LR_RULE = Param(
    "lr_rule", Kind.CHOICE, "fixed", "fixed: the job's usual learning rate; by-global-batch: the seeds' "
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
            (Param("device", Kind.DEVICE, "", "Device to pin the op to with tf.device (e.g. /GPU:0, /CPU:1). "
                   "Empty: let TensorFlow choose. A device that does not exist shows soft placement.",
                   label="Device", empty_means="TensorFlow chooses"),),
        ),
        JobSpec(
            "replicate", "Manual replication",
            "The same matmul on every logical device of one type, then tf.add_n on one device — "
            "replication by hand, as in the seeds.",
            "tf_device_panel.core.runproc.jobs.basic:replicate",
            (Param("device_type", Kind.CHOICE, "auto", "Which logical devices to replicate on; auto: GPUs if any, "
                   "else CPUs.", choices=("auto", "GPU", "CPU"), label="Replicate on"),
             Param("reduce_device", Kind.DEVICE, "/CPU:0", "Device that runs tf.add_n over the products.",
                   label="Sum (add_n) on")),
        ),
        JobSpec(
            "session", "TF1 graph and Session",
            "The seeds' TensorFlow 1 examples: a graph run in tf.compat.v1.Session with "
            "ConfigProto(log_device_placement=True, allow_soft_placement=...). TensorFlow prints the "
            "Device mapping block and a 'name: device' line per node; a node pinned to a missing device "
            "fails (soft placement off) or moves (on).",
            "tf_device_panel.core.runproc.jobs.tf1:session",
            (Param("example", Kind.CHOICE, "placement", "placement: a @ b, placed by TensorFlow; pin-cpu: the "
                   "constants under tf.device('/cpu:0'); two-devices: a @ b on each device, summed by add_n "
                   "on /cpu:0 (→ [[44,56],[98,128]] on two devices); missing-device: everything on /gpu:2.",
                   choices=("placement", "pin-cpu", "two-devices", "missing-device"), label="Example"),
             Param("soft_placement", Kind.TOGGLE, False, "ConfigProto allow_soft_placement (TF1's default: off).",
                   label="Soft placement"),
             Param("devices", Kind.DEVICES, "", "For two-devices: the devices to multiply on. Empty: all GPUs, "
                   "or all CPUs if there is no GPU.", label="Multiply on", empty_means="all GPUs, else all CPUs",
                   shown_when=("example", "two-devices"))),
        ),
        JobSpec(
            "fit", "Keras fit",
            "Keras model.fit under tf.distribute.MirroredStrategy over the chosen logical devices, with "
            "the seeds' one-unit Dense model or their small CNN; the global batch grows with the number of "
            "replicas.",
            "tf_device_panel.core.runproc.jobs.training:fit",
            (Param("epochs", Kind.COUNT, 2, "Training epochs.", minimum=1, maximum=10_000, label="Epochs"),
             Param("batch_per_replica", Kind.COUNT, 5, "Batch size on each replica; global batch = this × replicas.",
                   minimum=1, maximum=1_000_000, label="Batch per replica", unit="samples"),
             Param("samples", Kind.COUNT, 100, "Number of training samples.", minimum=1, maximum=100_000_000,
                   label="Training samples"),
             Param("devices", Kind.DEVICES, "", "Comma-separated logical devices to mirror over "
                   "(e.g. /CPU:0,/CPU:1). Empty: all GPUs, or all CPUs if there is no GPU.",
                   label="Mirror over", empty_means="all GPUs, else all CPUs"),
             Param("model", Kind.CHOICE, "dense", "dense: the seeds' one-unit Dense model; cnn: the seeds' small CNN "
                   "(Conv2D/MaxPooling, dropout, sigmoid) on synthetic images, to put visible load on the devices.",
                   choices=("dense", "cnn"), label="Model"),
             Param("image_size", Kind.COUNT, 32, "Image side in pixels for the cnn model (the seed used 150).",
                   minimum=8, maximum=512, label="Image size", unit="px", shown_when=("model", "cnn")),
             _CROSS_DEVICE_OPS,
             Param("data", Kind.CHOICE, "dataset", "dataset: a tf.data.Dataset batched by the global batch; numpy: "
                   "NumPy arrays with batch_size = the global batch, which Keras splits across the replicas.",
                   choices=("dataset", "numpy"), label="Input"),
             _LR_RULE,
             Param("evaluate", Kind.TOGGLE, True, "Run model.evaluate on the dataset after fit.",
                   label="Evaluate after fit")),
        ),
        JobSpec(
            "custom-loop", "Custom training loop",
            "The seeds' custom loop: a distributed dataset, per-example loss averaged over the global batch "
            "with tf.nn.compute_average_loss, strategy.run and strategy.reduce(SUM) inside a tf.function.",
            "tf_device_panel.core.runproc.jobs.training:custom_loop",
            (Param("steps", Kind.COUNT, 20, "Training steps.", minimum=1, maximum=1_000_000, label="Steps"),
             Param("batch_per_replica", Kind.COUNT, 5, "Batch size on each replica; global batch = this × replicas.",
                   minimum=1, maximum=1_000_000, label="Batch per replica", unit="samples"),
             Param("learning_rate", Kind.NUMBER, 0.1, "SGD learning rate (with lr_rule=fixed).", minimum=1e-6,
                   maximum=10.0, label="Learning rate"),
             Param("devices", Kind.DEVICES, "", "Comma-separated logical devices to mirror over. Empty: all GPUs, "
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
            (Param("device", Kind.DEVICE, "", "Device to allocate on. Empty: the first GPU, else the CPU.",
                   label="Device", empty_means="the first GPU, else the CPU", devices_of=RUN),
             Param("step_mib", Kind.COUNT, 64, "MiB allocated per step.", minimum=1, maximum=65_536,
                   label="Allocated per step", unit="MiB"),
             Param("steps", Kind.COUNT, 8, "Number of allocation steps.", minimum=1, maximum=1000, label="Steps"),
             Param("release", Kind.TOGGLE, True, "Free everything at the end and report once more.",
                   label="Release at the end")),
        ),
        JobSpec(
            "fit-batch", "Batch that fits",
            "The largest batch that fits a memory budget, verified: for the fit job's model, your script (its "
            "arguments carry {batch}) or your saved Keras model. Every run is a fresh process capped at the budget "
            "(the CPU's BFC allocator, or a logical GPU of that size) run as you would run it; a few small runs "
            "predict, then the search closes in on the boundary (the largest batch that held, the smallest that "
            "ran out) and the answer held in every one of its repeats.",
            "tf_device_panel.core.client.fit_batch:fit_batch",
            (Param("model", Kind.PATH, "cnn", "What to size: dense or cnn (the fit job's own models), or a saved "
                   "Keras model (.keras) trained a few steps on synthetic inputs of its input shapes with its own "
                   "loss and optimizer. With a script, leave it a built-in model (it is then unused): a saved model "
                   "and a script together are refused.", choices=BUILT_IN_MODELS,
                   label="Model", file_type=(KERAS_SUFFIX, "saved Keras model")),
             Param("script", Kind.PATH, "", "Your own training script instead, run as `run script` runs it, once "
                   "per batch tried.", label="Script", empty_means="the model above"),
             Param("args", Kind.ARGS, "", "The script's arguments, with {batch} where its batch size goes (e.g. "
                   "--batch-size {batch}).", label="Script arguments", empty_means="none"),
             Param("budget_mib", Kind.COUNT, 256, "The memory budget in MiB each run gets (its allocator's limit).",
                   minimum=16, maximum=1_048_576, label="Budget", unit="MiB"),
             Param("image_size", Kind.COUNT, 32, "Image side in pixels for the cnn model.", minimum=8, maximum=512,
                   label="Image size", unit="px", shown_when=("model", "cnn")),
             Param("device", Kind.DEVICE, "", "The device the budget is on: /CPU:0 (capped through the CPU's BFC "
                   "allocator) or /GPU:N (a logical GPU of the budget's size). Empty: /CPU:0.",
                   label="Device", empty_means="/CPU:0", devices_of=BESIDE)),
            rules=fit_batch_problems, in_client=True,
        ),
        JobSpec(
            "benchmark", "Matmul benchmark",
            "Matrix-multiply throughput (GFLOP/s) on each logical device over sizes and dtypes, with warm-up "
            "and synchronisation, and NumPy's matmul on the same CPU as a reference row.",
            "tf_device_panel.core.runproc.jobs.benchmark:benchmark",
            (Param("sizes", Kind.COUNTS, "256,512,1024", f"Comma-separated matrix sizes (n for n×n), at most "
                   f"{MAX_BENCHMARK_SIZES}.", maximum=16_384, label="Matrix sizes", unit="n (n×n)",
                   max_items=MAX_BENCHMARK_SIZES),
             Param("dtypes", Kind.CHOICES, "float32,float16,bfloat16", "Comma-separated dtypes; a device that lacks "
                   "one shows it as unsupported.", choices=("float32", "float16", "bfloat16", "float64"),
                   label="Data types"),
             Param("repeats", Kind.COUNT, 5, "Matmuls timed per measurement.", minimum=1, maximum=10_000,
                   label="Repeats", unit="matmuls"),
             Param("devices", Kind.DEVICES, "", "Comma-separated logical devices. Empty: every logical device.",
                   label="Devices", empty_means="every logical device"),
             Param("tf32", Kind.TOGGLE, True, "TensorFloat-32 for float32 matmuls on GPUs of compute capability 8.0 "
                   "and later (tf.config.experimental.enable_tensor_float_32_execution): on, TensorFlow's default, "
                   "runs them on tensor cores with 10-bit mantissa products, and the rows read float32 (TF32); "
                   "off measures float32 proper.", label="TensorFloat-32")),
        ),
        JobSpec(
            "multi-worker", "Multi-worker cluster",
            "N worker processes on 127.0.0.1, each with its own TF_CONFIG, run a custom training loop under "
            "MultiWorkerMirroredStrategy; their losses must agree. (Keras 3's fit fails under this strategy.)",
            "tf_device_panel.core.runproc.jobs.cluster_jobs:multi_worker",
            (Param("workers", Kind.COUNT, 2, "Worker processes.", minimum=1, maximum=16, label="Workers"),
             Param("steps", Kind.COUNT, 10, "Training steps.", minimum=1, maximum=100_000, label="Steps"),
             Param("batch_per_replica", Kind.COUNT, 5, "Batch per replica.", minimum=1, maximum=1_000_000,
                   label="Batch per replica", unit="samples"),
             Param("learning_rate", Kind.NUMBER, 0.1, "SGD learning rate.", minimum=1e-6, maximum=10.0,
                   label="Learning rate"),
             Param("log_placement", Kind.TOGGLE, True, "Log the workers' op placement.", label="Log placement"),
             Param("timeout_s", Kind.COUNT, 180, "Give up (and stop every worker) after this many seconds.",
                   minimum=10, maximum=86_400, label="Time limit", unit="s")),
            (("Each worker process, with its own TF_CONFIG, runs",
              "tf_device_panel.core.runproc.cluster_task:mwms_worker"),),
        ),
        JobSpec(
            "parameter-server", "Parameter-server cluster",
            "A coordinator, one parameter server and N workers as local processes; a custom loop scheduled "
            "through ClusterCoordinator. Shows where the variables live (/job:ps/...).",
            "tf_device_panel.core.runproc.jobs.cluster_jobs:parameter_server",
            (Param("workers", Kind.COUNT, 2, "Worker processes.", minimum=1, maximum=16, label="Workers"),
             Param("steps", Kind.COUNT, 20, "Training steps scheduled on the workers.", minimum=1, maximum=100_000,
                   label="Steps"),
             Param("batch_per_replica", Kind.COUNT, 5, "Batch per worker step.", minimum=1, maximum=1_000_000,
                   label="Batch per replica", unit="samples"),
             Param("learning_rate", Kind.NUMBER, 0.1, "SGD learning rate.", minimum=1e-6, maximum=10.0,
                   label="Learning rate"),
             Param("log_placement", Kind.TOGGLE, False, "Log op placement in every task (many lines).",
                   label="Log placement"),
             Param("timeout_s", Kind.COUNT, 180, "Give up (and stop every process) after this many seconds.",
                   minimum=10, maximum=86_400, label="Time limit", unit="s")),
            (("The parameter server and each worker process run", "tf_device_panel.core.runproc.cluster_task:server"),
             ("The coordinator process runs", "tf_device_panel.core.runproc.cluster_task:ps_coordinator")),
        ),
        JobSpec(
            "script", "Your script",
            "Run your own Python file inside the configured runtime and stream its output, to watch your "
            "training under this device configuration.",
            "tf_device_panel.core.runproc.jobs.script:script",
            (Param("path", Kind.PATH, "", "The Python file to run (as __main__).", label="Script"),
             Param("args", Kind.ARGS, "", "Command-line arguments for the script (shell quoting).", label="Arguments",
                   empty_means="none")),
        ),
    )
}


def get_job(name: str) -> JobSpec:
    try:
        return JOBS[name]
    except KeyError:
        raise ParamError(clip(name, 60), [("job", f"unknown job {quote(name)}; jobs: {', '.join(JOBS)}")]) from None
