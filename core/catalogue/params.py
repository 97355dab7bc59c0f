"""A job's parameters as declared: their kinds (the settings' `Kind`), ranges, labels and help, and their rules.

Device names, paths and lists of items are checked here, before any process starts, so a typo costs nothing.
"""

from __future__ import annotations

import errno
import math
import os
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypedDict

from tf_device_panel.core.config import DeviceConfig, GpuInfo, Kind
from tf_device_panel.core.config.schema import MAX_NUMBER_CHARS
from tf_device_panel.core.text import quote

# What TensorFlow's DeviceSpec parses: '/GPU:1', 'gpu:1', '/device:GPU:1', '/job:x/replica:0/task:0/device:GPU:1'.
# The short form knows only CPU, GPU and TPU ('/FOO:0' is "Unknown attribute 'foo'"); indices are 32-bit.
_DEVICE_SPEC = re.compile(r"^(?:/job:[A-Za-z0-9_-]+(?:/replica:[0-9]+)?(?:/task:[0-9]+)?)?"
                          r"(?:/?(?P<short>cpu|gpu|tpu)|/device:(?P<full>cpu|gpu|tpu|xla_cpu|xla_gpu)):(?P<index>[0-9]+)$",
                          re.IGNORECASE | re.ASCII)
MAX_LIST_ITEMS = 64                 # default bound of a list (64 logical devices: the most cpu_devices gives)
MAX_DEVICE_INDEX = 2**31 - 1

# A job parameter's value, as each kind in JSON_TYPE holds it: TOGGLE a bool, COUNT an int, NUMBER a float (or an
# int, as JSON writes 1.0), every other kind its text (lists are comma-separated text).
ParamValue = bool | int | float | str
ParamValues = Mapping[str, ParamValue]    # a job's parameter values by name

# How `jobs` and `jobs --json` have always spelled each kind a job parameter can have (readers key on them).
JSON_TYPE = {Kind.COUNT: "int", Kind.NUMBER: "float", Kind.TOGGLE: "bool", Kind.CHOICE: "choice",
             Kind.DEVICE: "device", Kind.DEVICES: "devices", Kind.PATH: "path", Kind.ARGS: "args",
             Kind.COUNTS: "ints", Kind.CHOICES: "multi"}


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


def _bound(bound: float) -> str:
    """A range's end as a person writes it: 1,048,576 (never 1.04858e+06), 0.1."""
    return f"{int(bound):,}" if float(bound).is_integer() else f"{bound:g}"


def split_devices(text: str) -> list[str]:
    """The items of a comma-separated list (devices, sizes, dtypes); a semicolon separates them too."""
    return [item.strip() for item in text.replace(";", ",").split(",") if item.strip()]


def path_problem(text: str) -> str | None:
    """Why `text` is not a readable file, or None; checked before TensorFlow starts, so a typo costs nothing."""
    try:
        file = Path(text.strip()).expanduser()
    except RuntimeError:  # "~nouser/x.py": no such user, so no home to expand
        user = text.strip().split("/")[0]
        return f"{quote(text)}: {quote(user)} names no user of this machine, so it has no home folder; check the path"
    try:
        os.stat(file)
    except OSError as exc:  # Python's own words for what it cannot open (a symlink loop: "[Errno 40] Too many …")
        if exc.errno != errno.ENOENT:
            return f"{quote(text)}: can't open file: [Errno {exc.errno}] {exc.strerror or exc}"
    try:
        if not file.exists():
            return f"{quote(text)} does not exist (looked in {quote(str(Path.cwd()))}); check the path"
        if file.is_dir():
            return None  # what `python FOLDER` runs: its `__main__` (core.catalogue.script_checks)
        if not file.is_file():
            return f"{quote(text)} is not a file"
    except OSError as exc:  # a name too long for the file system, a permission denied on a folder
        return f"{quote(text)} cannot be checked: {exc.strerror or exc}"
    if not os.access(file, os.R_OK):
        return f"{quote(text)} cannot be read (permissions)"
    return None


# Where a device parameter's devices must be, checked before TensorFlow starts (`device_problems`):
ANYWHERE = "anywhere"   # TensorFlow judges: a missing device shows soft placement
RUN = "run"             # among the run's own logical devices
BESIDE = "beside"       # in processes the job starts beside its own: /CPU:0 (each has one logical CPU) or a GPU of
#                         this machine (the job runs in the panel's process: JobSpec.in_client)


@dataclass(frozen=True)
class RunDevices:
    """The devices a run has, as far as its parameters are checked: known before TensorFlow starts from the
    profile and the machine's GPUs (the window, the command line), or read inside the run process."""

    cpus: int                    # logical CPUs of the run
    gpus: int                    # logical GPUs of the run
    machine_gpus: int            # GPUs TensorFlow sees on this machine (CUDA_VISIBLE_DEVICES applied)
    no_gpu_reason: str = ""      # why there is no GPU, when known
    whose: str = "the profile gives"  # "this run has", inside the run
    settings: str = "the profile"     # what the user changes: "the configuration" in the window

    def count(self, device_type: str) -> int | None:
        return {"CPU": self.cpus, "GPU": self.gpus}.get(device_type)

    def words(self) -> str:
        """The run's devices in words: '/CPU:0 … /CPU:1 and no GPU (NVML sees no GPU …)'."""
        parts = [f"/CPU:0 … /CPU:{self.cpus - 1}" if self.cpus > 1 else "/CPU:0"]
        if self.gpus:
            parts.append(f"/GPU:0 … /GPU:{self.gpus - 1}" if self.gpus > 1 else "/GPU:0")
        else:
            parts.append("no GPU" + (f" ({self.no_gpu_reason})" if self.no_gpu_reason else ""))
        return " and ".join(parts)


def profile_devices(config: DeviceConfig, gpus: Sequence[GpuInfo] | None, no_gpu_reason: str = "") -> RunDevices:
    """The devices a run with `config` has on this machine, known before it starts: `gpus` are TensorFlow's
    physical GPUs as NVML sees them (None: unknown, no driver)."""
    from tf_device_panel.core.config.plan import logical_gpu_owners

    known = sorted(gpu.index for gpu in gpus or ())
    visible = known if config.visible_gpus is None else [i for i in config.visible_gpus if i in known]
    run_gpus = len(logical_gpu_owners(config, visible))
    return RunDevices(cpus=config.cpu_devices, gpus=run_gpus, machine_gpus=len(known),
                      no_gpu_reason=no_gpu_reason if gpus is None or not known else "")


def _is_local(key: tuple[str, str, int]) -> bool:
    return key[0] == "" and key[2] >= 0


def names_devices(params: tuple[Param, ...], values: ParamValues) -> bool:
    """Whether any parameter names a device that `device_problems` checks (one the run or the runs beside it use)."""
    return any(param.device_scope in (RUN, BESIDE) and str(values.get(param.name, "")).strip() for param in params)


def device_problems(params: tuple[Param, ...], values: ParamValues,
                    devices: RunDevices) -> list[tuple[str, str]]:
    """(parameter, message) for each device a job's parameters name where it cannot be: the one check the window,
    the command line and the run process share: the first two before a run's process starts, the run process
    again on the devices TensorFlow lists, before the job. Other machines' devices
    (/job:worker) and types other than CPU and GPU are TensorFlow's to judge in a run's own devices."""
    problems: list[tuple[str, str]] = []
    for param in params:
        text = str(values.get(param.name, "")).strip()
        scope = param.device_scope
        if not text or scope not in (RUN, BESIDE):
            continue
        items = split_devices(text) if param.kind is Kind.DEVICES else [text]
        if scope == RUN:
            missing = [item for item in items if _is_local(key := device_key(item))
                       and (count := devices.count(key[1])) is not None and key[2] >= count]
            if missing:
                pick = "list devices from those" if param.kind is Kind.DEVICES else "pick one of those"
                problems.append((param.name, f"{', '.join(quote(m) for m in missing[:8])} "
                                 f"{'is' if len(missing) == 1 else 'are'} not among this run's devices: "
                                 f"{devices.whose} {devices.words()}; {pick} (or leave it empty for the default)"))
            continue
        for item in items:
            problem = _beside_problem(item, devices)
            if problem:
                problems.append((param.name, problem))
                break
    return problems


def _beside_problem(item: str, devices: RunDevices) -> str | None:
    """Why a device for processes started beside the run cannot take them, or None."""
    where, device_type, index = device_key(item)
    if where or device_type not in ("CPU", "GPU"):
        return f"{quote(item)} is not a CPU or GPU of this machine; use /CPU:0 or /GPU:N"
    if device_type == "CPU":
        if index != 0:
            return (f"{quote(item)}: the runs this job starts are processes of their own with one logical CPU, "
                    "/CPU:0 (all logical CPUs share the CPU's one allocator); use /CPU:0")
        return None
    if index >= devices.machine_gpus:
        have = (f"this machine has no GPU{f' ({devices.no_gpu_reason})' if devices.no_gpu_reason else ''}"
                if devices.machine_gpus == 0 else
                f"this machine's GPUs are /GPU:0 … /GPU:{devices.machine_gpus - 1}" if devices.machine_gpus > 1
                else "this machine's one GPU is /GPU:0")
        return f"{quote(item)}: {have}; use {'/CPU:0' if devices.machine_gpus == 0 else 'one of those or /CPU:0'}"
    return None


class ParamError(ValueError):
    """One or more bad job parameters; `problems` lists (parameter, message) pairs."""

    def __init__(self, job: str, problems: list[tuple[str, str]]):
        self.job = job
        self.problems = problems
        super().__init__("; ".join(f"{name}: {msg}" for name, msg in problems))


# What a job parameter's value must be, said when it is not (a setting's own words are core.config.schema's).
_EXPECTED = {Kind.COUNT: "a whole number", Kind.NUMBER: "a number", Kind.TOGGLE: "true or false"}


class ParamJson(TypedDict):
    """A parameter as `jobs --json` prints it."""

    name: str
    type: str
    default: ParamValue
    help: str
    choices: list[str]
    minimum: float | None
    maximum: float | None
    label: str
    unit: str
    empty_means: str
    shown_when: list[str] | None
    max_items: int | None


@dataclass(frozen=True)
class Param:
    name: str
    kind: Kind
    default: ParamValue
    help: str
    choices: tuple[str, ...] = ()
    minimum: float | None = None
    maximum: float | None = None
    label: str = ""                            # what a form calls it; every job in JOBS declares one
    unit: str = ""                             # shown after the value: "MiB", "s"
    empty_means: str = ""                      # what an empty value does ("all GPUs, else all CPUs")
    shown_when: tuple[str, str] | None = None  # (parameter, value): it only matters then (image size: cnn)
    max_items: int = MAX_LIST_ITEMS            # a list's (DEVICES, COUNTS, CHOICES) most items, said when passed
    devices_of: str = ""                       # DEVICE/DEVICES: where the devices must be (RUN, BESIDE, ANYWHERE)

    @property
    def device_scope(self) -> str:
        """Where the devices this parameter names must exist: a list of devices is the run's own unless declared
        otherwise; a single device is TensorFlow's to judge (soft placement) unless declared."""
        if self.devices_of or self.kind not in (Kind.DEVICE, Kind.DEVICES):
            return self.devices_of
        return RUN if self.kind is Kind.DEVICES else ANYWHERE
    # A PATH's file type, e.g. (".keras", "saved Keras model"): the file must end so, and the form's Browse… shows only
    # those. A PATH with `choices` takes one of them (a built-in's name) or such a file.
    file_type: tuple[str, str] | None = None

    @property
    def item_limit(self) -> int:
        """The most items a list parameter takes (CHOICES: no more than its choices)."""
        return min(self.max_items, len(self.choices)) if self.kind is Kind.CHOICES else self.max_items

    @property
    def type_word(self) -> str:
        """How the command line's `jobs` listing and `jobs --json` name its kind: int, float, bool, devices…"""
        return JSON_TYPE[self.kind]

    def to_json(self) -> ParamJson:
        return {"name": self.name, "type": self.type_word, "default": self.default, "help": self.help,
                "choices": list(self.choices), "minimum": self.minimum, "maximum": self.maximum,
                "label": self.label, "unit": self.unit, "empty_means": self.empty_means,
                "shown_when": list(self.shown_when) if self.shown_when else None,
                "max_items": self.item_limit if self.kind.is_list else None}

    def from_text(self, text: str) -> ParamValue:
        """Convert a command-line value; raises ValueError with a message naming what was expected."""
        value: ParamValue = self.kind.read_text(text)
        return value

    def check(self, value: object) -> ParamValue:
        """Validate a value of any type (from a form, JSON or `from_text`); returns it normalised."""
        kind = self.kind
        if not kind.holds(value) or not isinstance(value, bool | int | float | str):
            raise ValueError(f"expected {_EXPECTED.get(kind, 'text')}, got {quote(value)}")
        if isinstance(value, str):
            self._check_text(value)
            return value
        if kind is Kind.NUMBER:
            try:
                value = float(value)
            except OverflowError:
                raise ValueError(f"{quote(value)} is too large") from None
            if not math.isfinite(value):
                raise ValueError(f"expected a finite number, got {value}")
        if kind.is_number:
            if self.minimum is not None and value < self.minimum:
                raise ValueError(f"{quote(value)} is below the minimum {_bound(self.minimum)}")
            if self.maximum is not None and value > self.maximum:
                raise ValueError(f"{quote(value)} is above the maximum {_bound(self.maximum)}")
        return value

    def _check_text(self, value: str) -> None:
        """The rules of the kinds written as text: a choice, devices, counts, a path, arguments."""
        kind = self.kind
        if kind.is_list and len(items := split_devices(value)) > self.item_limit:
            raise ValueError(f"{len(items)} items given, at most {self.item_limit} allowed "
                             f"(a bound that keeps one run to minutes); give fewer")
        match kind:
            case Kind.CHOICE if value not in self.choices:
                raise ValueError(f"{quote(value)} is not one of: {', '.join(self.choices)}")
            case Kind.DEVICE if value.strip():
                problem = device_spec_problem(value)
                if problem:
                    raise ValueError(problem)
            case Kind.DEVICES:
                self._check_devices(value)
            case Kind.COUNTS:
                self._check_counts(value)
            case Kind.CHOICES:
                items = split_devices(value)
                unknown = [quote(item) for item in items if item not in self.choices]
                if unknown or not items:
                    raise ValueError(f"{', '.join(unknown) or 'nothing'} chosen; use some of: "
                                     f"{', '.join(self.choices)}")
            case Kind.PATH if value in self.choices:
                pass  # a built-in's name (fit-batch's "cnn"): no file to check
            case Kind.PATH:
                if self.default == "" and not self.empty_means and not value.strip():
                    raise ValueError("a file is required")
                if self.file_type and value.strip() and not value.strip().lower().endswith(self.file_type[0]):
                    suffix, what = self.file_type
                    built_in = f"one of {', '.join(self.choices)} or " if self.choices else ""
                    raise ValueError(f"{quote(value)} is not a {what} (its name does not end in {suffix}); give "
                                     f"{built_in}the path of a {suffix} file")
                if value.strip():
                    problem = path_problem(value)
                    if problem:
                        raise ValueError(problem)
            case Kind.ARGS:
                try:
                    shlex.split(value)
                except ValueError as exc:
                    raise ValueError(f"cannot split arguments: {exc}") from None

    @staticmethod
    def _check_devices(value: str) -> None:
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

    def _check_counts(self, value: str) -> None:
        items = split_devices(value)
        if not items:
            raise ValueError("give at least one number, e.g. 256,512")
        for item in items:
            if not (item.isascii() and item.isdigit()) or len(item) > MAX_NUMBER_CHARS or int(item) <= 0:
                raise ValueError(f"{quote(item)} is not a whole number above 0 in digits 0-9; "
                                 "write e.g. 256,512,1024")
            if self.maximum is not None and int(item) > self.maximum:
                raise ValueError(f"{item} is above the maximum {_bound(self.maximum)}")
