"""One plan for a device configuration: the `tf.config` steps, each with its words, its code and its action.

The run process (`core.runproc.runtime_main.apply_config`), the cluster tasks, the `snippet` command and the window's
"Copy as Python" all take their steps from `plan()`, so what a pasted snippet does is what a run does: the
same checks (a GPU index that does not exist is refused, never dropped), the same order, the same errors
(a driver that cannot tell a GPU's memory stops both; nothing is swallowed).

A step's `code` is the Python a user pastes; its `apply(tf)` does the same calls on the `tensorflow` module it
is given and returns what it did, in words. A step with `before_import` acts on the environment TensorFlow
reads when it initializes its GPUs. Nothing here imports TensorFlow.

To add a configuration field: add it to `DeviceConfig` (core.config) and, if it changes what TensorFlow is
told, one `_…_steps` function below, listed in STEP_BUILDERS at its place in TensorFlow's order: the run,
the snippet, "Copy as Python" and the cluster tasks all follow from that one entry.
"""

from __future__ import annotations

import inspect
import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from tf_device_panel.core.config import DeviceConfig, GpuInfo
from tf_device_panel.core.devices.gpu_facts import gpu_total_mib

ALLOCATOR_ENV = "TF_GPU_ALLOCATOR"
DEVICE_ORDER_ENV = "CUDA_DEVICE_ORDER"


@dataclass(frozen=True)
class Applied:
    """What one step did: its words, and the memory limits (MiB) it gave each physical GPU's logical GPUs."""

    text: str
    gpu_limits: dict[int, tuple[int, ...]] = field(default_factory=dict)


@dataclass(frozen=True)
class Step:
    description: str                      # what the step does, in words
    code: str                             # the same as Python (uses `tf`, `os`, `gpus`), for the snippet
    apply: Callable[[Any], Applied]       # does it on the `tensorflow` module given
    before_import: bool = False           # environment: set before TensorFlow is imported
    helpers: tuple[str, ...] = ()         # definitions the code needs (written once, after the import)


class StepError(Exception):
    """A step that failed: which one, and the exception TensorFlow (or the driver) raised."""

    def __init__(self, step: str, cause: BaseException):
        self.step = step
        self.cause = cause
        super().__init__(f"{step}: {type(cause).__name__}: {cause}")


def plan(config: DeviceConfig, gpus: Sequence[GpuInfo] | None = None) -> list[Step]:
    """The steps that configure TensorFlow as `config` says, in the order TensorFlow requires.

    `gpus`: TensorFlow's physical GPUs (its indices, CUDA's totals) when known; the steps then name their
    figures (a fraction's limit in MiB). Without them the steps are the same, and find out when applied.
    """
    return [step for build in STEP_BUILDERS for step in build(config, gpus)]


# -- the steps, one kind of setting each ------------------------------------------------------------------

def _environment_steps(config: DeviceConfig) -> list[Step]:
    def order(tf: Any) -> Applied:
        os.environ[DEVICE_ORDER_ENV] = "PCI_BUS_ID"
        return Applied(f"{DEVICE_ORDER_ENV}=PCI_BUS_ID")

    steps = [Step(f"{DEVICE_ORDER_ENV}=PCI_BUS_ID: TensorFlow's GPU indices follow PCI order, as NVML's do",
                  f"os.environ[{DEVICE_ORDER_ENV!r}] = 'PCI_BUS_ID'", order, before_import=True)]
    if config.gpu_allocator == "default":
        def default_allocator(tf: Any) -> Applied:
            inherited = os.environ.pop(ALLOCATOR_ENV, None)
            return Applied(f"{ALLOCATOR_ENV} unset (it was {inherited!r}; the profile says default)"
                           if inherited is not None else f"{ALLOCATOR_ENV} not set (the default allocator)")

        # A value inherited from the shell would otherwise win over the profile's "default".
        steps.append(Step(f"unset {ALLOCATOR_ENV}: TensorFlow's default (BFC) allocator",
                          f"os.environ.pop({ALLOCATOR_ENV!r}, None)  # the default allocator, whatever the shell set",
                          default_allocator, before_import=True))
    else:
        allocator = config.gpu_allocator

        def set_allocator(tf: Any) -> Applied:
            os.environ[ALLOCATOR_ENV] = allocator
            return Applied(f"{ALLOCATOR_ENV}={allocator}")

        steps.append(Step(f"{ALLOCATOR_ENV}={allocator}", f"os.environ[{ALLOCATOR_ENV!r}] = {allocator!r}",
                          set_allocator, before_import=True))
    return steps


def _physical_gpus(tf: Any) -> list[Any]:
    return list(tf.config.list_physical_devices("GPU"))


def missing_gpus_message(missing: Sequence[int], seen: int) -> str:
    return f"GPU {', '.join(map(str, missing))} requested, but TensorFlow sees {seen} physical GPU(s)"


def _gpu_index_steps(config: DeviceConfig) -> list[Step]:
    named = sorted(set(config.visible_gpus or ()) | set(config.virtual_gpus))
    if not named:
        return []

    def check(tf: Any) -> Applied:
        seen = len(_physical_gpus(tf))
        missing = [i for i in named if i >= seen]
        if missing:
            raise IndexError(missing_gpus_message(missing, seen))
        return Applied(f"check GPU indices {named}: TensorFlow sees {seen} physical GPU(s)")

    indices = _tuple_text(named)
    code = (f"missing = [i for i in {indices} if i >= len(gpus)]\n"
            "if missing:  # the panel refuses to run such a profile; so does this\n"
            "    raise IndexError(f\"GPU {', '.join(map(str, missing))} requested, but TensorFlow sees "
            "{len(gpus)} physical GPU(s)\")")
    return [Step("check GPU indices", code, check)]


def _visible_steps(config: DeviceConfig) -> list[Step]:
    if config.visible_gpus is None:
        return []
    chosen = list(config.visible_gpus)

    def set_visible(tf: Any) -> Applied:
        gpus = _physical_gpus(tf)
        tf.config.set_visible_devices([gpus[i] for i in chosen], "GPU")
        return Applied(f"set_visible_devices(GPU {chosen})")

    code = f'tf.config.set_visible_devices([gpus[i] for i in {_tuple_text(chosen)}], "GPU")'
    return [Step(f"set_visible_devices(GPU {chosen})", code, set_visible)]


def _growth_steps(config: DeviceConfig) -> list[Step]:
    if not config.memory_growth:
        return []

    def grow(tf: Any) -> Applied:
        names = []
        for gpu in tf.config.get_visible_devices("GPU"):
            tf.config.experimental.set_memory_growth(gpu, True)
            names.append(gpu.name)
        return Applied(f"set_memory_growth(True) on {', '.join(names) or 'no visible GPU'}")

    code = ("# The same can be had without code: TF_FORCE_GPU_ALLOW_GROWTH=true in the environment before\n"
            "# TensorFlow is imported (os.environ['TF_FORCE_GPU_ALLOW_GROWTH'] = 'true'; platform specific).\n"
            'for gpu in tf.config.get_visible_devices("GPU"):\n'
            "    tf.config.experimental.set_memory_growth(gpu, True)")
    return [Step("set_memory_growth(True) on each visible GPU", code, grow)]


def _split_fits(index: int, limits: tuple[int, ...]) -> None:
    """Refuse a split larger than the GPU as CUDA counts it (NVML counts what the driver keeps too: a split
    between the two passed the panel's check and then failed in TensorFlow)."""
    try:
        total = gpu_total_mib(index)
    except (OSError, RuntimeError, AttributeError) as exc:
        raise StepError(f"read GPU:{index}'s total memory to check its split", exc) from exc
    if sum(limits) > total:
        raise ValueError(f"the limits sum to {sum(limits)} MiB but GPU {index} has {total} MiB as CUDA counts it "
                         "(what TensorFlow can use); lower them")


def _virtual_steps(config: DeviceConfig) -> list[Step]:
    steps = []
    for index, limits in sorted(config.virtual_gpus.items()):
        def split(tf: Any, index: int = index, limits: tuple[int, ...] = limits) -> Applied:
            _split_fits(index, limits)
            logical = [tf.config.LogicalDeviceConfiguration(memory_limit=m) for m in limits]
            tf.config.set_logical_device_configuration(_physical_gpus(tf)[index], logical)
            return Applied(f"set_logical_device_configuration(GPU:{index}, {list(limits)} MiB)", {index: limits})

        devices = ", ".join(f"tf.config.LogicalDeviceConfiguration(memory_limit={m})" for m in limits)
        code = (f"if {sum(limits)} > gpu_total_mib({index}):  # the split must fit in what CUDA can give\n"
                f"    raise ValueError(f\"the limits sum to {sum(limits)} MiB but GPU {index} has "
                f"{{gpu_total_mib({index})}} MiB as CUDA counts it (what TensorFlow can use); lower them\")\n"
                f"tf.config.set_logical_device_configuration(gpus[{index}], [{devices}])")
        steps.append(Step(f"set_logical_device_configuration(GPU:{index}, {list(limits)} MiB)", code, split,
                          helpers=(inspect.getsource(gpu_total_mib),)))
    return steps


def _fraction_steps(config: DeviceConfig, gpus: Sequence[GpuInfo] | None) -> list[Step]:
    fraction = config.memory_fraction
    if fraction is None:
        return []
    known_totals = {g.index: g.total_mib for g in gpus or () if g.total_mib is not None}

    def limit_each(tf: Any) -> Applied:
        physical = _physical_gpus(tf)
        visible = tf.config.get_visible_devices("GPU")
        limits: dict[int, tuple[int, ...]] = {}
        texts = []
        for index, gpu in enumerate(physical):
            if gpu not in visible:
                continue
            try:
                total = known_totals.get(index) or gpu_total_mib(index)
            except (OSError, RuntimeError, AttributeError) as exc:
                # Not skipped: a GPU left without its limit would take all its memory.
                raise StepError(f"read GPU:{index}'s total memory for memory_fraction", exc) from exc
            limit = int(total * fraction)
            if limit < 1:  # validation refuses such a fraction; a GPU with a 0 MiB limit would be no GPU at all
                raise StepError(f"limit GPU:{index} to {fraction:g} of its {total} MiB",
                                ValueError(f"{fraction:g} × {total} MiB is under 1 MiB"))
            tf.config.set_logical_device_configuration(
                gpu, [tf.config.LogicalDeviceConfiguration(memory_limit=limit)])
            limits[index] = (limit,)
            texts.append(f"set_logical_device_configuration(GPU:{index}, [{limit}] MiB = {fraction:g} × {total} MiB)")
        return Applied("; ".join(texts) or f"memory_fraction {fraction:g}: no visible GPU", limits)

    # tf.config does not tell a GPU's total memory; the CUDA driver does, in TensorFlow's own order
    # (CUDA_DEVICE_ORDER=PCI_BUS_ID, after CUDA_VISIBLE_DEVICES): the run calls this same function.
    code = (f"# memory_fraction {fraction:g}: TF1's gpu_options.per_process_gpu_memory_fraction. TF2 has no "
            "fraction,\n"
            "# so each visible GPU becomes one logical GPU limited to that share of its total memory (CUDA's\n"
            "# total, which is what TensorFlow can use; NVML's is larger by what the driver keeps).\n"
            "for index, gpu in enumerate(gpus):\n"
            '    if gpu in tf.config.get_visible_devices("GPU"):\n'
            f"        limit = int(gpu_total_mib(index) * {fraction!r})\n"
            "        tf.config.set_logical_device_configuration(\n"
            "            gpu, [tf.config.LogicalDeviceConfiguration(memory_limit=limit)])")
    description = f"memory_fraction {fraction:g}: limit each visible GPU to that share of CUDA's total"
    if known_totals:
        description += " (" + ", ".join(f"GPU:{i} {int(t * fraction)} MiB = {fraction:g} × {t} MiB"
                                        for i, t in sorted(known_totals.items())) + ")"
    return [Step(description, code, limit_each, helpers=(inspect.getsource(gpu_total_mib),))]


def _cpu_steps(config: DeviceConfig) -> list[Step]:
    if config.cpu_devices <= 1:
        return []
    count = config.cpu_devices

    def split(tf: Any) -> Applied:
        cpus = tf.config.list_physical_devices("CPU")
        tf.config.set_logical_device_configuration(cpus[0], [tf.config.LogicalDeviceConfiguration()] * count)
        return Applied(f"set_logical_device_configuration(CPU:0, {count} logical CPUs)")

    code = ('cpus = tf.config.list_physical_devices("CPU")\n'
            "tf.config.set_logical_device_configuration(\n"
            f"    cpus[0], [tf.config.LogicalDeviceConfiguration()] * {count})")
    return [Step(f"set_logical_device_configuration(CPU:0, {count} logical CPUs)", code, split)]


def _placement_steps(config: DeviceConfig) -> list[Step]:
    soft = config.soft_placement

    def set_soft(tf: Any) -> Applied:
        tf.config.set_soft_device_placement(soft)
        return Applied(f"set_soft_device_placement({soft})")

    steps = [Step(f"set_soft_device_placement({soft})", f"tf.config.set_soft_device_placement({soft})", set_soft)]
    if config.log_placement:
        def log_placement(tf: Any) -> Applied:
            tf.debugging.set_log_device_placement(True)
            return Applied("set_log_device_placement(True)")

        # After initialization this call silently does nothing, so it must come before.
        steps.append(Step("set_log_device_placement(True)", "tf.debugging.set_log_device_placement(True)",
                          log_placement))
    return steps


StepBuilder = Callable[[DeviceConfig, "Sequence[GpuInfo] | None"], list[Step]]

# TensorFlow's required order: environment before import; visible devices before growth and logical devices;
# everything before the first op (log placement especially: after initialization it silently does nothing).
STEP_BUILDERS: list[StepBuilder] = [
    lambda config, gpus: _environment_steps(config),
    lambda config, gpus: _gpu_index_steps(config),
    lambda config, gpus: _visible_steps(config),
    lambda config, gpus: _growth_steps(config),
    lambda config, gpus: _virtual_steps(config),
    _fraction_steps,
    lambda config, gpus: _cpu_steps(config),
    lambda config, gpus: _placement_steps(config),
]


def _tuple_text(values: Sequence[int]) -> str:
    return "(" + ", ".join(map(str, values)) + ("," if len(values) == 1 else "") + ")"


def logical_gpu_owners(config: DeviceConfig, visible_physical: Sequence[int]) -> list[int]:
    """The physical GPU (TensorFlow's index) of each logical GPU, in TensorFlow's order: each visible
    physical GPU's logical GPUs in turn (a split gives several, anything else one)."""
    owners: list[int] = []
    for index in visible_physical:
        owners += [index] * len(config.virtual_gpus.get(index, (0,)))
    return owners


# -- using a plan ------------------------------------------------------------------------------------------

@dataclass
class AppliedPlan:
    """What applying a plan did: each step's words, and each physical GPU's logical memory limits."""

    steps: list[str] = field(default_factory=list)
    gpu_limits: dict[int, tuple[int, ...]] = field(default_factory=dict)

    def logical_gpu_limits(self, visible_physical: Sequence[int]) -> list[int | None]:
        """The limit of each logical GPU, in TensorFlow's order: each visible physical GPU's logical GPUs in
        turn; None for a GPU left whole (no limit). So a split GPU 0 beside a whole GPU 1 reads
        [2048, 4096, None]."""
        limits: list[int | None] = []
        for index in visible_physical:
            limits.extend(self.gpu_limits.get(index, (None,)))
        return limits


# What the steps may raise: TensorFlow's own errors when a setter is refused (after initialization, a bad
# device), an index a profile names but the machine lacks, and the driver's when a total cannot be read.
STEP_ERRORS = (RuntimeError, ValueError, IndexError, TypeError, OSError, AttributeError)


def apply_plan(tf: Any, steps: Sequence[Step]) -> AppliedPlan:
    """Apply the steps in order; raises `StepError` naming the step that failed, with its cause."""
    applied = AppliedPlan()
    for step in steps:
        try:
            done = step.apply(tf)
        except StepError:
            raise
        except STEP_ERRORS as exc:
            raise StepError(step.description, exc) from exc
        applied.steps.append(done.text)
        applied.gpu_limits.update(done.gpu_limits)
    return applied


def to_python(steps: Sequence[Step]) -> str:
    """The steps as a script's first lines: environment, import, then the tf.config calls."""
    lines = [
        "# TensorFlow device configuration (exported by TF Device Panel).",
        "# Paste at the very top of your script: it must run before TensorFlow initializes (before the first op;",
        "# after that TensorFlow refuses these calls with a RuntimeError).",
        "import os",
        "",
    ]
    lines += [step.code for step in steps if step.before_import]
    lines += ["", "import tensorflow as tf", ""]
    helpers = dict.fromkeys(h for step in steps if not step.before_import for h in step.helpers)
    after_import = [step.code for step in steps if not step.before_import]
    if any(re.search(r"\bgpus\b", text) for text in (*helpers, *after_import)):
        lines.append('gpus = tf.config.list_physical_devices("GPU")')  # only where a step names them
    for helper in helpers:
        lines += ["", *helper.rstrip().splitlines(), ""]
    lines += after_import
    return "\n".join(lines) + "\n"
