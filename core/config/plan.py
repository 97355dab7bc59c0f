"""One plan for a device configuration: the `tf.config` steps, each with its words, its code and its action.

The run process (`core.runproc.runtime_main.apply_config`), the cluster tasks, the `snippet` command and the window's
"Copy as Python" all take their steps from `plan()`, so what a pasted snippet does is what a run does: the
same checks (a GPU index that does not exist is refused, never dropped), the same order, the same errors
(a driver that cannot tell a GPU's memory stops both; nothing is swallowed).

The steps themselves are declared with the settings (`DeviceConfig`'s fields name their step builder and its
stage; the builders are in `core.config.steps`): a new field that changes what TensorFlow is told is one field
in `DeviceConfig`, and the run, the snippet, "Copy as Python" and the cluster tasks follow from it.
Nothing here imports TensorFlow.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from tf_device_panel.core.config import DeviceConfig, GpuInfo, config_fields
from tf_device_panel.core.config.steps import (
    ALLOCATOR_ENV,
    DEVICE_ORDER_ENV,
    Applied,
    Stage,
    Step,
    StepBuilder,
    StepError,
    device_order_steps,
    gpu_index_steps,
    missing_gpus_message,
)

__all__ = ["ALLOCATOR_ENV", "DEVICE_ORDER_ENV", "STEP_ERRORS", "Applied", "AppliedPlan", "GpuInfo", "Stage", "Step",
           "StepError", "apply_plan", "logical_gpu_owners", "missing_gpus_message", "plan", "step_builders",
           "to_python"]

# Steps that belong to no one setting: every plan's first (TensorFlow's GPU indices in PCI order), and the
# refusal of a GPU index the machine lacks (visible_gpus and virtual_gpus both name GPUs).
COMMON_STEPS: tuple[tuple[Stage, StepBuilder], ...] = (
    (Stage.ENVIRONMENT, device_order_steps),
    (Stage.CHECK, gpu_index_steps),
)


def step_builders(config: DeviceConfig) -> list[StepBuilder]:
    """The builders of a configuration's steps in TensorFlow's required order: by stage; within a stage, the
    common steps first, then the settings in the order `DeviceConfig` declares them."""
    staged = [*COMMON_STEPS, *((f.stage, f.plan) for f in config_fields(type(config)) if f.plan is not None)]
    return [build for _, build in sorted(staged, key=lambda pair: pair[0])]  # sorted() is stable


def plan(config: DeviceConfig, gpus: Sequence[GpuInfo] | None = None) -> list[Step]:
    """The steps that configure TensorFlow as `config` says, in the order TensorFlow requires.

    `gpus`: TensorFlow's physical GPUs (its indices, CUDA's totals) when known; the steps then name their
    figures (a fraction's limit in MiB). Without them the steps are the same, and find out when applied.
    """
    return [step for build in step_builders(config) for step in build(config, gpus)]


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
