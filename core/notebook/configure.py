"""`%tf_config` without IPython: its words read as a profile, the profile's plan applied in this process.

The kernel is the one process where TensorFlow runs beside the user's own code, so the configuration must reach
it before TensorFlow initializes, exactly as a run process gets it: the same schema (`core.config`: the same
keys, rules and messages as a profile file, the window and the command line), the same plan
(`core.config.plan.plan` + `apply_plan`, the steps `runtime_main.apply_config` takes). After initialization
TensorFlow refuses such calls with "... cannot be modified after being initialized"; this says what was
initialized and how to go on instead.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from tf_device_panel.core.config import (
    DeviceConfig,
    GpuInfo,
    Kind,
    ProfileError,
    config_fields,
    load_profile,
    parse_config,
)
from tf_device_panel.core.config.plan import StepError, apply_plan, plan
from tf_device_panel.core.config.steps import ALLOCATOR_ENV, CPU_BFC_ENV, CPU_LIMIT_ENV, DEVICE_ORDER_ENV
from tf_device_panel.core.devices.gpus import tf_gpu_inventory
from tf_device_panel.core.devices.nvml import shared as shared_nvml
from tf_device_panel.core.protocol.output_lines import short_device_name
from tf_device_panel.core.text import quote

# The environment variables a plan may set: put back as they were before a second %tf_config, so each
# %tf_config applies its own profile whole and nothing of the one before.
PLAN_ENVIRONMENT = (ALLOCATOR_ENV, CPU_BFC_ENV, CPU_LIMIT_ENV, DEVICE_ORDER_ENV)
_REFUSED_AFTER_INIT = "cannot be modified after being initialized"


class ConfigUsageError(ValueError):
    """`%tf_config`'s input or its refusal, as the one message the user sees (no traceback)."""


def tensorflow_initialized() -> bool:
    """Whether TensorFlow's runtime has started in this process (the first op, listing logical devices...):
    from then on its devices cannot be configured. False while it is not even imported; never imports it."""
    if "tensorflow" not in sys.modules:
        return False
    from tensorflow.python.eager import context

    runtime = context.context_safe()
    return runtime is not None and runtime._context_handle is not None


def logical_device_names(tf: Any) -> list[str]:
    """The logical devices, short ('/CPU:0'); only call once TensorFlow is initialized (listing initializes)."""
    return [short_device_name(device.name) for device in tf.config.list_logical_devices()]


def refusal(tf: Any) -> str:
    """The one sentence `%tf_config` answers once TensorFlow is initialized."""
    devices = ", ".join(logical_device_names(tf)) or "no device"
    return (f"TensorFlow is already initialized in this kernel (its runtime started with {devices}), so its "
            "devices can no longer be configured: restart the kernel, then run this %tf_config cell first, "
            "before anything that uses TensorFlow.")


# -- reading the magic's words ---------------------------------------------------------------------------------

def _value(declared: Any, text: str) -> Any:
    """A `key=value` value as the profile would hold it: JSON first (2, true, [0, 1], {"0": [2048, 2048]},
    null), then the command line's spellings of the setting's kind (yes/on/off for a toggle, "0,1" or "1" for GPU
    indices); anything else stays text, for the schema to refuse with its own message."""
    indices = declared is not None and declared.kind is Kind.GPU_INDICES
    try:
        value = json.loads(text)
    except ValueError:
        pass  # not JSON: read below as the command line spells the setting's kind
    else:
        return [value] if indices and isinstance(value, int) and not isinstance(value, bool) else value
    if declared is not None and declared.kind is Kind.TOGGLE:
        try:
            return Kind.TOGGLE.read_text(text)
        except ValueError:
            return text
    if indices and text.replace(",", "").replace(" ", "").isdigit():
        return [int(part) for part in text.split(",") if part.strip()]
    return text


def profile_json(words: Sequence[str]) -> tuple[dict[str, object], str | None]:
    """The profile a `%tf_config` line describes: an optional profile file first, then `key=value` settings
    that override it. Returns (the JSON object, the file's path or None); raises ConfigUsageError."""
    declared = {f.key: f for f in config_fields(DeviceConfig)}
    data: dict[str, object] = {}
    path = None
    given: set[str] = set()
    for position, word in enumerate(words):
        key, equals, text = word.partition("=")
        if not equals:
            if position != 0:
                raise ConfigUsageError(f"{quote(word)}: expected key=value (a profile file can only come first), "
                                       f"e.g. cpu_devices=2; known keys are: {', '.join(declared)}")
            path = word
            try:
                data = dict(load_profile(path).to_json())
            except ProfileError as exc:
                raise ConfigUsageError(str(exc)) from None
            continue
        key = key.strip()
        if key in given:
            raise ConfigUsageError(f"{key} is given twice; keep the one you mean")
        given.add(key)
        data[key] = _value(declared.get(key), text.strip())
    data.setdefault("version", DeviceConfig().version)
    return data, path


def machine_gpus() -> list[GpuInfo] | None:
    """TensorFlow's GPUs as NVML sees them (TF's indices under CUDA_VISIBLE_DEVICES, CUDA's totals), to
    validate against as the command line does; None without a driver."""
    nvml = shared_nvml()
    if not nvml.init():
        return None
    return tf_gpu_inventory(nvml.gpus(), os.environ.get("CUDA_VISIBLE_DEVICES"))


def read_config(line: str) -> DeviceConfig:
    """The configuration `%tf_config LINE` asks for, validated as a profile is; raises ConfigUsageError with the
    schema's own messages, one problem a line."""
    try:
        words = shlex.split(line)
    except ValueError as exc:
        raise ConfigUsageError(f"cannot read {quote(line)}: {exc}") from None
    data, path = profile_json(words)
    config, problems = parse_config(data)
    if not problems and config is not None:
        problems = config.problems(machine_gpus())  # the same rules again, and the machine's GPUs' where known
    if problems or config is None:
        settings = " ".join(words[1:] if path else words)
        asked = f"{path} with {settings}" if path and settings else path or settings
        raise ConfigUsageError(f"the configuration ({asked}) was not applied:\n"
                               + "\n".join(f"  {p}" for p in problems))
    return config


# -- applying it -----------------------------------------------------------------------------------------------

@dataclass
class KernelConfiguration:
    """What `%tf_config` did in this kernel: the configuration, its steps in words, and the environment as it
    was before the first one (to start each later one from)."""

    config: DeviceConfig | None = None
    steps: list[str] = field(default_factory=list)
    imported_before: bool = False      # TensorFlow was imported before it: GPU discovery had already run
    gpus_present: bool | None = None   # whether TensorFlow sees a GPU (listing them does not initialize it)
    _environment: dict[str, str | None] | None = None
    _configured: bool = False          # a plan's tf.config steps ran (perhaps not all): the next one resets them

    def apply(self, config: DeviceConfig) -> list[str]:
        """Apply `config`'s plan before TensorFlow initializes (importing TensorFlow if needed); returns the
        steps' words. Raises ConfigUsageError: the refusal after initialization, or the step that failed."""
        imported_before = "tensorflow" in sys.modules
        if tensorflow_initialized():
            import tensorflow as tf

            raise ConfigUsageError(refusal(tf))
        if self._environment is None:
            self._environment = {name: os.environ.get(name) for name in PLAN_ENVIRONMENT}
        else:
            self._restore_environment()
        steps = plan(config)
        # The environment first, as a run process does: TensorFlow reads it as it imports (GPU discovery) and
        # as it makes its allocators (at initialization).
        early = [step for step in steps if step.before_import]
        done = apply_plan(None, early)
        import tensorflow as tf

        if self._configured:
            reset_devices(tf)
        self._configured = True
        try:
            done.steps += apply_plan(tf, [step for step in steps if not step.before_import]).steps
        except StepError as exc:
            if _REFUSED_AFTER_INIT in str(exc.cause):
                raise ConfigUsageError(refusal(tf)) from None
            raise ConfigUsageError(f"the configuration was not applied: {exc.step} failed: {exc.cause}") from None
        self.config, self.steps, self.imported_before = config, list(done.steps), imported_before
        self.gpus_present = bool(tf.config.list_physical_devices("GPU"))
        return self.steps

    def summary(self) -> str:
        """The applied configuration in a few words ("no GPU on this machine, 2 logical CPUs, …")."""
        return "" if self.config is None else self.config.summary(self.gpus_present) or "the defaults"

    def _restore_environment(self) -> None:
        for name, value in (self._environment or {}).items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


# One TensorFlow per process, so one record of its configuration (kept across %reload_ext).
kernel_configuration = KernelConfiguration()


def reset_devices(tf: Any) -> None:
    """Undo an earlier %tf_config's settings (every device visible, no logical split, no memory growth, no
    placement log), so the next one's plan starts from TensorFlow's defaults, as a fresh run process does.
    Only before initialization."""
    from tensorflow.python.eager import context

    physical = tf.config.list_physical_devices()
    tf.config.set_visible_devices(physical)
    # TensorFlow has no call that removes a logical split once set (None is refused): its own map is emptied.
    context.context()._virtual_device_map.clear()
    for gpu in tf.config.list_physical_devices("GPU"):
        tf.config.experimental.set_memory_growth(gpu, False)
    tf.debugging.set_log_device_placement(False)
    tf.config.set_soft_device_placement(True)
