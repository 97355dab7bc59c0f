"""TensorFlow device configuration: the model, its validation, JSON profiles, and export as code.

Each setting is declared once, as a field of `DeviceConfig` (`setting(...)`, core.config.schema): its JSON key,
kind, range, label, unit, help and `tf.config` steps. Reading a profile, validating (one validator, `problems()`,
whatever the source: a profile, the window's form, the command line), writing a profile, the window's form and
the plan (core.config.plan) all follow from that declaration.

A configuration is applied by the runtime process before TensorFlow initializes (see
`core.runproc.runtime_main`). Nothing here imports TensorFlow.
"""

from __future__ import annotations

import json
import math
import os
import stat
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from tf_device_panel.core.config import steps
from tf_device_panel.core.config.schema import (
    SHORT_LIST_ITEMS,
    ConfigError,
    Field,
    Kind,
    Problem,
    config_fields,
    setting,
    short_list,
    split_field,
    type_name,
)
from tf_device_panel.core.config.steps import Stage
from tf_device_panel.core.devices.gpu_facts import GpuInfo
from tf_device_panel.core.text import DuplicateKey, clip, object_without_duplicates, quote

__all__ = ["ALLOCATORS", "LARGEST_GPU_MIB", "MAX_CPU_DEVICES", "MAX_PROFILE_BYTES", "SUPPORTED_VERSION",
           "ConfigError", "DeviceConfig", "Field", "GpuInfo", "Kind", "Problem", "ProfileError", "ProfileJson",
           "SettingJson", "config_fields", "load_profile", "named_gpus", "parse_config", "save_profile",
           "split_field", "to_python_snippet", "unchecked_gpus_warning", "validate"]

SUPPORTED_VERSION = 1
MAX_PROFILE_BYTES = 1024 * 1024  # a real profile is a few hundred bytes
MAX_NUMBER_CHARS = 30            # longer numbers in a profile are typos or attacks, never settings
MAX_CPU_DEVICES = 64
ALLOCATORS = ("default", "cuda_malloc_async")
MAX_CPU_LIMIT_MIB = 64 * 1024 * 1024  # 64 TiB: above any machine's RAM; a larger number is a typo
LARGEST_GPU_MIB = 1024 * 1024  # 1 TiB: above any GPU made (the B200 has 180 GiB), for checks with no GPU known
_FROM_ENVIRONMENT = "\0from the environment"

# A setting's value as a profile writes it: a flag, a count, a number or a fraction (null: unset), a choice, GPU
# indices (null: all), or GPU splits (index as text -> each logical GPU's MiB).
SettingJson = bool | int | float | str | list[int] | dict[str, list[int]] | None
ProfileJson = dict[str, SettingJson]        # a configuration as a profile's JSON object


@dataclass(frozen=True)
class DeviceConfig:
    """A device configuration. Each field is a setting, declared once here; the order is the profile's, the
    form's, and (within a stage) the plan's. A value of the wrong type is refused at construction (ConfigError
    naming the field); the rules a draft may break while it is edited are `problems()`."""

    version: int = setting(SUPPORTED_VERSION, kind=Kind.VERSION, describe=lambda version: "")
    visible_gpus: tuple[int, ...] | None = setting(
        None, kind=Kind.GPU_INDICES, example="e.g. [0, 1]",
        describe=lambda visible: "all GPUs" if visible is None else (
            "GPU " + short_list(visible).replace(", ", ",") if visible else "no GPU"),
        plan=steps.visible_steps, stage=Stage.DEVICES)
    memory_growth: bool = setting(
        False, kind=Kind.TOGGLE, label="Memory growth (all visible GPUs)",
        help="Allocate GPU memory as needed instead of nearly all of it at start.\n"
             "Grown memory is not given back. Cannot be combined with logical GPUs.",
        describe=lambda on: "memory growth" if on else "", plan=steps.growth_steps, stage=Stage.MEMORY)
    # TF2's counterpart of TF1's gpu_options.per_process_gpu_memory_fraction: each visible GPU becomes one
    # logical GPU limited to this share of its total memory. None: not set (and not written to the profile).
    memory_fraction: float | None = setting(
        None, kind=Kind.FRACTION, label="Memory fraction per GPU", minimum=0, maximum=1,
        help="TF1's per_process_gpu_memory_fraction: each visible GPU becomes one logical GPU limited to this\n"
             "share of its total memory. Cannot be combined with memory growth or logical GPU splits.",
        example="e.g. 0.4 for 40% of each GPU", form_step=0.05, form_decimals=2,
        describe=lambda share: "" if share is None else f"memory fraction {share:g} per GPU",
        plan=steps.fraction_steps, stage=Stage.MEMORY)
    virtual_gpus: Mapping[int, tuple[int, ...]] = setting(
        default_factory=dict, kind=Kind.GPU_SPLITS, unit="MiB", example='e.g. {"0": [2048, 2048]}',
        help="Memory limit of this logical GPU (required by TensorFlow for virtual GPUs)",
        describe=lambda splits: short_list([f"GPU {index} split {'+'.join(map(str, limits[:SHORT_LIST_ITEMS]))}"
                                            f"{'+…' if len(limits) > SHORT_LIST_ITEMS else ''} MiB"
                                            for index, limits in sorted(splits.items())]),
        plan=steps.virtual_steps, stage=Stage.MEMORY)
    cpu_devices: int = setting(
        1, kind=Kind.COUNT, label="Logical CPU devices", minimum=1, maximum=MAX_CPU_DEVICES,
        help="Split the CPU into N logical devices: /CPU:0 … /CPU:N-1", low_hint="use 1 for the unsplit CPU",
        high_hint="2–8 are enough to demonstrate distribution",
        # Any number as typed: validation refuses one out of range and names the limit (a spin box capped at
        # MAX_CPU_DEVICES would silently turn 100000 into 10).
        form_range=(0, 999_999), describe=lambda count: f"{count} logical CPUs" if count > 1 else "",
        plan=steps.cpu_steps, stage=Stage.LOGICAL)
    soft_placement: bool = setting(
        True, kind=Kind.TOGGLE, label="Soft placement",
        help="Run ops on an available device when the requested one does not exist",
        describe=lambda on: "" if on else "soft placement off",
        plan=steps.soft_placement_steps, stage=Stage.PLACEMENT)
    log_placement: bool = setting(
        True, kind=Kind.TOGGLE, label="Log device placement",
        help="tf.debugging.set_log_device_placement(True), before TensorFlow initializes",
        describe=lambda on: "placement log" if on else "",
        plan=steps.log_placement_steps, stage=Stage.PLACEMENT)
    gpu_allocator: str = setting(
        "default", kind=Kind.CHOICE, label="GPU allocator", choices=ALLOCATORS, noun="allocator",
        help="TF_GPU_ALLOCATOR; cuda_malloc_async can reduce fragmentation",
        describe=lambda allocator: "" if allocator == "default" else allocator,
        plan=steps.allocator_steps, stage=Stage.ENVIRONMENT)
    # The CPU's allocator as the GPUs' (BFC) with a cap: a real limit for CPU runs, and what lets every memory
    # feature (allocator figures, an OOM explained) run on a machine without a GPU. 0: TensorFlow's own allocator.
    cpu_memory_limit_mib: int = setting(
        0, kind=Kind.COUNT, label="CPU memory cap", unit="MiB", minimum=0, maximum=MAX_CPU_LIMIT_MIB,
        help="TF_CPU_ALLOCATOR_USE_BFC=true and TF_CPU_BFC_MEM_LIMIT_IN_MB=N: the CPU allocates through TensorFlow's\n"
             "BFC allocator (the GPUs'), capped at N MiB, and reports current/peak memory. 0: no cap.",
        low_hint="use 0 for no cap, or a cap in MiB such as 2048",
        high_hint="the cap is in MiB (2048 is 2 GiB)", form_zero_text="no cap", omit_default=True,
        form_range=(0, 2_000_000_000),
        describe=lambda limit: f"CPU memory cap {limit} MiB" if limit else "",
        plan=steps.cpu_memory_steps, stage=Stage.ENVIRONMENT)

    def __post_init__(self) -> None:
        wrong = [p for f in config_fields(type(self)) if (p := f.type_problem(getattr(self, f.key))) is not None]
        if wrong:
            raise ConfigError(wrong)

    def to_json(self) -> ProfileJson:
        data: ProfileJson = {}
        for setting_field in config_fields(type(self)):
            value = getattr(self, setting_field.key)
            if (setting_field.optional and value is None) or (setting_field.omit_default
                                                               and value == setting_field.default):
                continue  # written only when set: older profiles round-trip unchanged
            data[setting_field.key] = setting_field.to_json(value)
        return data

    @classmethod
    def from_json(cls, data: Any) -> DeviceConfig:
        """Build a configuration, raising `ConfigError` listing every problem found."""
        config, problems = parse_config(data, cls)
        if problems or config is None:
            raise ConfigError(problems)
        return config

    def with_changes(self, **changes: Any) -> DeviceConfig:
        return replace(self, **changes)

    def problems(self, gpus: Sequence[GpuInfo] | None = None,
                 cuda_visible_devices: str | None = _FROM_ENVIRONMENT) -> list[Problem]:
        """Every rule this configuration breaks: each setting's own, then those between settings, then, when
        the machine's GPUs are known, theirs. The one validator, whatever the configuration's source."""
        found = [p for f in config_fields(type(self)) for p in f.check(getattr(self, f.key))]
        return found + _combination_problems(self) + (
            [] if gpus is None else _machine_problems(self, gpus, cuda_visible_devices))

    def checked(self, gpus: Sequence[GpuInfo] | None = None) -> DeviceConfig:
        """This configuration, if it breaks no rule; else ConfigError naming every problem."""
        problems = self.problems(gpus)
        if problems:
            raise ConfigError(problems)
        return self

    def environment(self) -> dict[str, str]:
        """Environment variables the runtime must have before TensorFlow is imported."""
        env = {
            # TF's physical GPU indices then follow PCI order, as NVML's and nvidia-smi's do.
            "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
        }
        if self.gpu_allocator == "cuda_malloc_async":
            env["TF_GPU_ALLOCATOR"] = "cuda_malloc_async"
        if self.cpu_memory_limit_mib:
            env[steps.CPU_BFC_ENV] = "true"
            env[steps.CPU_LIMIT_ENV] = str(self.cpu_memory_limit_mib)
        return env

    def summary(self, gpus_present: bool | None = None) -> str:
        """The profile in a few words, each setting's as it declares (`Field.describe`); `gpus_present=False`
        (TensorFlow sees none) says so instead of "all GPUs"."""
        parts = []
        for declared in config_fields(type(self)):
            value = getattr(self, declared.key)
            if declared.kind is Kind.GPU_INDICES and value is None and gpus_present is False:
                parts.append("no GPU on this machine")
            elif text := declared.summary_text(value):
                parts.append(text)
        return ", ".join(parts)


class ProfileError(ValueError):
    """A profile file that cannot be read, parsed or written; `problems` says why."""

    def __init__(self, path: Path | str, problems: Sequence[Problem], config: DeviceConfig | None = None):
        self.path = Path(path)
        self.problems = list(problems)
        self.config = config  # what could be read of it despite the problems (for warnings), if anything
        lines = "\n".join(f"  {p}" for p in self.problems)
        super().__init__(f"{self.path}:\n{lines}")


def _field_name(key: Any) -> str:
    """A key as a field name: as written when short and printable, else quoted and shortened."""
    text = str(key)
    return text if len(text) <= 40 and text.isprintable() else quote(key)


def parse_config(data: Any,
                 config_type: type[DeviceConfig] = DeviceConfig) -> tuple[DeviceConfig | None, list[Problem]]:
    """Parse a profile's JSON value. Returns the configuration (None if unusable) and every problem."""
    if not isinstance(data, dict):
        return None, [Problem("(profile)", f"expected a JSON object, got {type_name(data)}",
                              f'start from {{"version": {SUPPORTED_VERSION}}}')]
    fields = config_fields(config_type)
    known = [f.key for f in fields]
    problems = [Problem(_field_name(key), "unknown key", f"remove it; known keys are: {', '.join(known)}")
                for key in data if key not in known]
    config = config_type(**{f.key: f.decode(data, problems) for f in fields})
    return config, problems + config.problems()


def validate(config: DeviceConfig, gpus: Sequence[GpuInfo] | None = None,
             cuda_visible_devices: str | None = _FROM_ENVIRONMENT) -> list[Problem]:
    """`config.problems(...)`: every rule it breaks, with the machine's GPUs' when known (TensorFlow's indices,
    as `gpus.tf_gpu_inventory` gives them). `cuda_visible_devices`: the value the runs will inherit (by default
    this process's), named when a GPU index does not exist, since it renumbers TensorFlow's GPUs."""
    return config.problems(gpus, cuda_visible_devices)


def _combination_problems(config: DeviceConfig) -> list[Problem]:
    """The rules between settings (each setting's own are its `Field.check`)."""
    problems: list[Problem] = []
    if config.memory_growth and config.virtual_gpus:
        problems.append(Problem(
            "memory_growth", "memory growth cannot be combined with virtual GPUs",
            "TensorFlow rejects or silently ignores growth on split GPUs: turn memory_growth off "
            "or remove virtual_gpus"))
    if config.memory_fraction is not None and config.memory_growth:
        problems.append(Problem(
            "memory_fraction", "a memory fraction cannot be combined with memory growth",
            "the fraction makes a logical GPU with a fixed limit, on which TensorFlow ignores growth: "
            "turn memory_growth off or remove memory_fraction"))
    if config.memory_fraction is not None and config.virtual_gpus:
        problems.append(Problem(
            "memory_fraction", "a memory fraction cannot be combined with virtual GPUs",
            "both set the logical GPUs' memory limits: remove virtual_gpus, or memory_fraction"))
    if config.visible_gpus is not None:
        visible = set(config.visible_gpus)  # a set: both lists may be long
        for index in sorted(config.virtual_gpus):
            if index not in visible:
                problems.append(Problem(split_field(index), f"GPU {index} is not visible",
                                        f"add {index} to visible_gpus or remove its split"))
    fraction = config.memory_fraction
    if fraction is not None and fraction > 0 and int(LARGEST_GPU_MIB * fraction) < 1:
        # TensorFlow turns a 0 MiB memory_limit into no logical GPU at all, or an allocator that fails at once.
        problems.append(Problem("memory_fraction", f"{fraction:g} limits each GPU to under 1 MiB, even one of "
                                f"{LARGEST_GPU_MIB // 1024} GiB", "use a share such as 0.25 (a quarter of each GPU)"))
    return problems


def _machine_problems(config: DeviceConfig, gpus: Sequence[GpuInfo],
                      cuda_visible_devices: str | None) -> list[Problem]:
    """The rules the machine's GPUs set."""
    if cuda_visible_devices == _FROM_ENVIRONMENT:
        cuda_visible_devices = os.environ.get("CUDA_VISIBLE_DEVICES")
    problems: list[Problem] = []
    fraction = config.memory_fraction
    if fraction is not None and int(LARGEST_GPU_MIB * fraction) >= 1:
        chosen = None if config.visible_gpus is None else set(config.visible_gpus)
        visible = [g for g in gpus if chosen is None or g.index in chosen]
        for limited in visible:
            if limited.total_mib is not None and int(limited.total_mib * fraction) < 1:
                problems.append(Problem("memory_fraction", f"{fraction:g} × GPU {limited.index}'s "
                                        f"{limited.total_mib} MiB is under 1 MiB",
                                        f"use at least {1 / limited.total_mib:.2g} (1 MiB of it); "
                                        "0.25 is a quarter of each GPU"))

    known = {g.index: g for g in gpus}
    available = ", ".join(str(i) for i in sorted(known)) or "none"
    missing_text, missing_hint = "does not exist on this machine", f"available GPU indices: {available}"
    if cuda_visible_devices is not None:
        # TensorFlow numbers only the GPUs CUDA_VISIBLE_DEVICES leaves, from 0: not nvidia-smi's numbers.
        mapping = ", ".join(f"TensorFlow's GPU {g.index} = nvidia-smi's GPU {g.nvml_index}" if g.nvml_index is not None
                            else f"TensorFlow's GPU {g.index} = {g.name or 'a GPU NVML does not list'}"
                            for g in sorted(gpus, key=lambda g: g.index))
        missing_text = (f"does not exist among the GPUs CUDA_VISIBLE_DEVICES={cuda_visible_devices!r} leaves "
                        "TensorFlow (it numbers them from 0)")
        missing_hint = (f"available GPU indices: {available}" + (f" ({mapping})" if mapping else "")
                        + "; use one of those, or change CUDA_VISIBLE_DEVICES (unset it to see every GPU)")
    missing = [index for index in config.visible_gpus or () if index not in known]
    if missing:  # one problem, however many: a profile may list 100,000 indices
        verb = missing_text if len(missing) == 1 else missing_text.replace("does not exist", "do not exist", 1)
        problems.append(Problem("visible_gpus", f"GPU {short_list(missing)} {verb}", missing_hint))
    for index, limits in sorted(config.virtual_gpus.items()):
        where = split_field(index)
        gpu = known.get(index)
        if gpu is None:
            problems.append(Problem(where, f"GPU {index} {missing_text}", missing_hint))
        elif gpu.total_mib is not None and sum(limits) > gpu.total_mib:
            which = {"CUDA": " as CUDA counts it (what TensorFlow can use)",
                     "NVML": " by NVML's count (CUDA's is a few hundred MiB less)"}.get(gpu.total_source, "")
            also = "" if gpu.nvml_index in (None, index) else f", NVML's GPU {gpu.nvml_index}"
            problems.append(Problem(where, f"limits sum to {sum(limits)} MiB but GPU {index} "
                                    f"({gpu.name or 'unnamed'}{also}) has {gpu.total_mib} MiB{which}",
                                    "lower the limits or split into fewer logical GPUs"))
    return problems




class _Malformed(ValueError):
    """A profile file this reader refuses (too large, not a file, a number too long); the message says which."""

    def __init__(self, message: str, hint: str = "fix the file or save a new profile"):
        super().__init__(message)
        self.hint = hint


def _parse_int(text: str) -> int:
    if len(text) > MAX_NUMBER_CHARS:
        raise _Malformed(f"a number with {len(text)} digits ({quote(text)}) is far too large for any setting")
    return int(text)


def _parse_float(text: str) -> float:
    value = float(text)
    if len(text) > MAX_NUMBER_CHARS or not math.isfinite(value):
        raise _Malformed(f"the number {quote(text)} is too long or too large for any setting")
    return value


def _parse_constant(text: str) -> float:
    raise _Malformed(f"{text} is not a number JSON allows; write a plain number")


def parse_profile_text(raw: bytes) -> Any:
    """Decode a profile's bytes (UTF-8, with or without a byte-order mark) and parse its JSON.

    Raises `_Malformed` with a one-line message for anything unreadable, however large or deep.
    """
    try:
        text = raw.decode("utf-8-sig")  # editors on Windows save a BOM; it is not part of the JSON
    except UnicodeDecodeError as exc:
        raise _Malformed(f"cannot be read as UTF-8 text (byte {exc.start} is {raw[exc.start]:#04x})",
                         "save it as UTF-8") from None
    try:
        return json.loads(text, parse_int=_parse_int, parse_float=_parse_float, parse_constant=_parse_constant,
                          object_pairs_hook=object_without_duplicates)
    except DuplicateKey as exc:
        raise _Malformed(f"the key {quote(exc.key)} is given twice in one object; keep the one you mean") from None
    except json.JSONDecodeError as exc:
        raise _Malformed(f"not valid JSON: {exc.msg} at line {exc.lineno}, column {exc.colno}") from None
    except RecursionError:
        raise _Malformed("nested too deeply to be a profile (a profile is at most three levels deep)") from None


def _read_limited(path: Path) -> bytes:
    """The file's bytes, if it is a regular file of at most MAX_PROFILE_BYTES; never blocks on a FIFO."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise _Malformed("is a folder, not a profile file", "give the path of a profile's .json file")
        if not stat.S_ISREG(mode):
            kind = "a FIFO" if stat.S_ISFIFO(mode) else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) \
                else "a socket" if stat.S_ISSOCK(mode) else "not a regular file"
            raise _Malformed(f"is {kind}, not a regular file", "save the profile as a .json file and give its path")
        chunks, size = [], 0
        while size <= MAX_PROFILE_BYTES:
            chunk = os.read(fd, MAX_PROFILE_BYTES + 1 - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        if size > MAX_PROFILE_BYTES:
            raise _Malformed(f"larger than {MAX_PROFILE_BYTES // 1024} KiB, so not a profile "
                             "(a profile is a few hundred bytes)")
        return b"".join(chunks)
    finally:
        os.close(fd)


def load_profile(path: str | os.PathLike[str]) -> DeviceConfig:
    """Read a JSON profile. Raises `ProfileError` naming every problem; never modifies the file."""
    if not str(path).strip():  # Path("") would be the current folder
        raise ProfileError('""', [Problem("(file)", "no file name given",
                                              "give the profile's path, e.g. --config gpu0.json")])
    path = Path(path)
    try:
        data = parse_profile_text(_read_limited(path))
    except FileNotFoundError:
        raise ProfileError(path, [Problem("(file)", "no such file", "check the path")]) from None
    except IsADirectoryError:
        raise ProfileError(path, [Problem("(file)", "is a folder, not a profile file")]) from None
    except _Malformed as exc:
        raise ProfileError(path, [Problem("(file)", str(exc), exc.hint)]) from None
    except OSError as exc:
        raise ProfileError(path, [Problem("(file)", f"cannot be read: {clip(exc.strerror or str(exc))}")]) from None
    config, problems = parse_config(data)
    if problems or config is None:
        raise ProfileError(path, problems, config)
    return config


def named_gpus(config: DeviceConfig) -> list[int]:
    """The physical GPU indices a configuration names (visible or split)."""
    return sorted(set(config.visible_gpus or ()) | set(config.virtual_gpus))


def unchecked_gpus_warning(config: DeviceConfig, why: str) -> Problem | None:
    """A warning when the configuration names GPUs that this machine cannot check (no GPU seen): `why` says why."""
    indices = named_gpus(config)
    if not indices:
        return None
    listed = short_list(indices)
    return Problem("visible_gpus" if config.visible_gpus else "virtual_gpus",
                   f"names GPU {listed}, which could not be checked: {why}",
                   "on this machine TensorFlow will refuse this profile; it is meant for a machine with those "
                   "GPUs (check there with `tf-device-panel validate`)")


def save_profile(config: DeviceConfig, path: str | os.PathLike[str]) -> None:
    """Write atomically. Refuses to replace an existing file that is not a valid profile."""
    path = Path(path)
    if path.exists():
        try:
            load_profile(path)
        except ProfileError as exc:
            refusal = Problem("(file)", "exists and is not a valid profile, so it was left untouched",
                              "save under another name, or move that file away first")
            raise ProfileError(path, [refusal, *exc.problems]) from None
    text = json.dumps(config.to_json(), indent=2) + "\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def to_python_snippet(config: DeviceConfig) -> str:
    """The configuration as code to paste at the top of a training script, before anything uses TF: the same
    steps, checks and order a run applies (`core.config.plan`)."""
    from tf_device_panel.core.config.plan import plan, to_python  # tfplan builds on this module

    return to_python(plan(config))
