"""The `tf.config` steps of each configuration setting, each with its words, its code and its action.

A setting declares its step builder where it is declared (`DeviceConfig` in core.config: `plan=`, `stage=`);
`core.config.plan` orders and applies them. A step's `code` is the Python a user pastes; its `apply(tf)` does the
same calls on the `tensorflow` module it is given and returns what it did, in words. A step with `before_import`
acts on the environment TensorFlow reads when it initializes its GPUs. Nothing here imports TensorFlow.
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from typing import TYPE_CHECKING, Any

from tf_device_panel.core.devices import gpu_facts
from tf_device_panel.core.devices.gpu_facts import GpuInfo

if TYPE_CHECKING:  # the settings name their builders, so the builders cannot import the settings at run time
    from tf_device_panel.core.config import DeviceConfig

ALLOCATOR_ENV = "TF_GPU_ALLOCATOR"
CPU_BFC_ENV = "TF_CPU_ALLOCATOR_USE_BFC"         # the CPU's allocator becomes the GPUs' BFC allocator...
CPU_LIMIT_ENV = "TF_CPU_BFC_MEM_LIMIT_IN_MB"     # ... with this limit (TensorFlow's default: 64 GB)
DEVICE_ORDER_ENV = "CUDA_DEVICE_ORDER"


class Stage(IntEnum):
    """Where a setting's steps go in TensorFlow's required order (settings of one stage: in declaration order)."""

    ENVIRONMENT = 0   # environment variables, before TensorFlow is imported
    CHECK = 1         # refusals (a GPU index the machine lacks) before anything is configured
    DEVICES = 2       # visible devices: before growth and logical devices
    MEMORY = 3        # memory growth, splits and limits of the visible GPUs
    LOGICAL = 4       # other logical devices (the CPU's)
    PLACEMENT = 5     # placement settings; log placement especially must come before the first op


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



def device_order_steps(config: DeviceConfig, gpus: Sequence[GpuInfo] | None) -> list[Step]:
    """Not a setting: every plan starts so, for TensorFlow's GPU indices to be NVML's."""
    def order(tf: Any) -> Applied:
        os.environ[DEVICE_ORDER_ENV] = "PCI_BUS_ID"
        return Applied(f"{DEVICE_ORDER_ENV}=PCI_BUS_ID")

    return [Step(f"{DEVICE_ORDER_ENV}=PCI_BUS_ID: TensorFlow's GPU indices follow PCI order, as NVML's do",
                 f"os.environ[{DEVICE_ORDER_ENV!r}] = 'PCI_BUS_ID'", order, before_import=True)]


def allocator_steps(config: DeviceConfig, gpus: Sequence[GpuInfo] | None) -> list[Step]:
    if config.gpu_allocator == "default":
        def default_allocator(tf: Any) -> Applied:
            inherited = os.environ.pop(ALLOCATOR_ENV, None)
            return Applied(f"{ALLOCATOR_ENV} unset (it was {inherited!r}; the profile says default)"
                           if inherited is not None else f"{ALLOCATOR_ENV} not set (the default allocator)")

        # A value inherited from the shell would otherwise win over the profile's "default".
        return [Step(f"unset {ALLOCATOR_ENV}: TensorFlow's default (BFC) allocator",
                     f"os.environ.pop({ALLOCATOR_ENV!r}, None)  # the default allocator, whatever the shell set",
                     default_allocator, before_import=True)]
    allocator = config.gpu_allocator

    def set_allocator(tf: Any) -> Applied:
        os.environ[ALLOCATOR_ENV] = allocator
        return Applied(f"{ALLOCATOR_ENV}={allocator}")

    return [Step(f"{ALLOCATOR_ENV}={allocator}", f"os.environ[{ALLOCATOR_ENV!r}] = {allocator!r}",
                 set_allocator, before_import=True)]


def cpu_memory_steps(config: DeviceConfig, gpus: Sequence[GpuInfo] | None) -> list[Step]:
    """cpu_memory_limit_mib: the CPU's allocator becomes BFC (the GPUs' own allocator, with current/peak figures
    and a dump when it runs out) capped at N MiB. TensorFlow reads both variables when it makes the allocator,
    at initialization: set before the import, as the snippet does, or at least before the first op."""
    limit = config.cpu_memory_limit_mib
    if not limit:
        return []

    def cap(tf: Any) -> Applied:
        os.environ[CPU_BFC_ENV] = "true"
        os.environ[CPU_LIMIT_ENV] = str(limit)
        return Applied(f"{CPU_BFC_ENV}=true, {CPU_LIMIT_ENV}={limit}")

    code = (f"# cpu_memory_limit_mib {limit}: the CPU allocates through TensorFlow's BFC allocator (the GPUs'), "
            f"capped at {limit} MiB;\n"
            "# tf.config.experimental.get_memory_info('CPU:0') then reports current/peak.\n"
            f"os.environ[{CPU_BFC_ENV!r}] = 'true'\n"
            f"os.environ[{CPU_LIMIT_ENV!r}] = {str(limit)!r}")
    return [Step(f"{CPU_BFC_ENV}=true, {CPU_LIMIT_ENV}={limit}: the CPU's allocator is BFC, capped at {limit} MiB",
                 code, cap, before_import=True)]


def _physical_gpus(tf: Any) -> list[Any]:
    return list(tf.config.list_physical_devices("GPU"))


def missing_gpus_message(missing: Sequence[int], seen: int) -> str:
    return f"GPU {', '.join(map(str, missing))} requested, but TensorFlow sees {seen} physical GPU(s)"


def gpu_index_steps(config: DeviceConfig, gpus: Sequence[GpuInfo] | None) -> list[Step]:
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


def visible_steps(config: DeviceConfig, gpus: Sequence[GpuInfo] | None) -> list[Step]:
    if config.visible_gpus is None:
        return []
    chosen = list(config.visible_gpus)

    def set_visible(tf: Any) -> Applied:
        gpus = _physical_gpus(tf)
        tf.config.set_visible_devices([gpus[i] for i in chosen], "GPU")
        return Applied(f"set_visible_devices(GPU {chosen})")

    code = f'tf.config.set_visible_devices([gpus[i] for i in {_tuple_text(chosen)}], "GPU")'
    return [Step(f"set_visible_devices(GPU {chosen})", code, set_visible)]


def growth_steps(config: DeviceConfig, gpus: Sequence[GpuInfo] | None) -> list[Step]:
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
        total = gpu_facts.gpu_total_mib(index)  # looked up at each call: tests replace it
    except (OSError, RuntimeError, AttributeError) as exc:
        raise StepError(f"read GPU:{index}'s total memory to check its split", exc) from exc
    if sum(limits) > total:
        raise ValueError(f"the limits sum to {sum(limits)} MiB but GPU {index} has {total} MiB as CUDA counts it "
                         "(what TensorFlow can use); lower them")


def virtual_steps(config: DeviceConfig, gpus: Sequence[GpuInfo] | None) -> list[Step]:
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
                          helpers=(inspect.getsource(gpu_facts.gpu_total_mib),)))
    return steps


def fraction_steps(config: DeviceConfig, gpus: Sequence[GpuInfo] | None) -> list[Step]:
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
                total = known_totals.get(index) or gpu_facts.gpu_total_mib(index)
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
    return [Step(description, code, limit_each, helpers=(inspect.getsource(gpu_facts.gpu_total_mib),))]


def cpu_steps(config: DeviceConfig, gpus: Sequence[GpuInfo] | None) -> list[Step]:
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


def soft_placement_steps(config: DeviceConfig, gpus: Sequence[GpuInfo] | None) -> list[Step]:
    soft = config.soft_placement

    def set_soft(tf: Any) -> Applied:
        tf.config.set_soft_device_placement(soft)
        return Applied(f"set_soft_device_placement({soft})")

    return [Step(f"set_soft_device_placement({soft})", f"tf.config.set_soft_device_placement({soft})", set_soft)]


def log_placement_steps(config: DeviceConfig, gpus: Sequence[GpuInfo] | None) -> list[Step]:
    if not config.log_placement:
        return []

    def log_placement(tf: Any) -> Applied:
        tf.debugging.set_log_device_placement(True)
        return Applied("set_log_device_placement(True)")

    # After initialization this call silently does nothing, so it must come before.
    return [Step("set_log_device_placement(True)", "tf.debugging.set_log_device_placement(True)", log_placement)]


def _tuple_text(values: Sequence[int]) -> str:
    return "(" + ", ".join(map(str, values)) + ("," if len(values) == 1 else "") + ")"


StepBuilder = Callable[["DeviceConfig", "Sequence[GpuInfo] | None"], list[Step]]
