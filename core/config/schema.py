"""The configuration's schema: each setting declared once, with everything every side needs to know about it.

A setting is a field of `DeviceConfig` declared with `setting(...)`: its JSON key (the field's name), its kind
(which fixes its type, how JSON spells it and what a form edits it with), its range or choices, its label, unit
and help text for the window, and the `tf.config` steps it takes (`plan`, at its `stage`). From that one
declaration come: reading a profile (`decode`), the value's own rules (`check`, one validator whatever the source:
JSON, the window's widgets, the command line), writing a profile (`to_json`), the window's form and the plan.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any

from tf_device_panel.core.config.steps import Stage, StepBuilder
from tf_device_panel.core.text import quote


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a configuration: which field, what was wrong, what to do."""

    field: str
    message: str
    hint: str = ""

    def __str__(self) -> str:
        text = f"{self.field}: {self.message}"
        return f"{text} — {self.hint}" if self.hint else text


class ConfigError(ValueError):
    def __init__(self, problems: Sequence[Problem]):
        self.problems = list(problems)
        super().__init__("\n".join(str(p) for p in self.problems) or "invalid configuration")


class Kind(Enum):
    """What a setting or a job parameter holds; it fixes the Python type, the JSON spelling, how the command line
    writes it and the form's widget. Settings and job parameters share it: one kind, one set of rules."""

    VERSION = "version"            # the profile format's version (an integer); never edited
    TOGGLE = "toggle"              # true or false: a check box
    COUNT = "count"                # a whole number in [minimum, maximum]: a spin box
    NUMBER = "number"              # a real number in [minimum, maximum]: a spin box with decimals
    FRACTION = "fraction"          # a share in (0, 1], or None (unset): a spin box whose 0 reads "off"
    CHOICE = "choice"              # one of `choices`: a combo box
    GPU_INDICES = "gpu_indices"    # TensorFlow's physical GPU indices, or None (all): each GPU's own check box
    GPU_SPLITS = "gpu_splits"      # GPU index -> memory limits in MiB of its logical GPUs: each GPU's own rows
    DEVICE = "device"              # one TensorFlow device name (/GPU:0), or empty: an editable combo box
    DEVICES = "devices"            # comma-separated device names: an editable combo box
    COUNTS = "counts"              # comma-separated whole numbers above 0 ("256,512"): a line edit
    CHOICES = "choices"            # comma-separated some of `choices`: a line edit
    PATH = "path"                  # a file to read: a line edit with Browse…
    ARGS = "args"                  # command-line arguments in shell quoting: a line edit

    @property
    def is_list(self) -> bool:
        """Written as one comma-separated string: its items are bounded in number."""
        return self in (Kind.DEVICES, Kind.COUNTS, Kind.CHOICES)

    @property
    def is_number(self) -> bool:
        """Edited in a spin box with a range (a FRACTION's range is fixed, so it is not one of these)."""
        return self in (Kind.COUNT, Kind.NUMBER)

    def holds(self, value: Any) -> bool:
        """Whether `value` has this kind's Python type (its range is the declaration's to check)."""
        match self:
            case Kind.VERSION | Kind.COUNT:
                return _is_int(value)
            case Kind.TOGGLE:
                return isinstance(value, bool)
            case Kind.NUMBER:
                return isinstance(value, (int, float)) and not isinstance(value, bool)
            case Kind.FRACTION:
                return value is None or (isinstance(value, (int, float)) and not isinstance(value, bool))
            case Kind.GPU_INDICES:
                return value is None or (isinstance(value, Sequence) and all(_is_int(v) and v >= 0 for v in value))
            case Kind.GPU_SPLITS:
                return isinstance(value, Mapping) and all(
                    _is_int(k) and k >= 0 and isinstance(v, Sequence) and all(_is_int(m) for m in v)
                    for k, v in value.items())
        return isinstance(value, str)

    def read_text(self, text: str) -> Any:
        """A value of this kind as the command line writes it (`-p epochs=8`); raises ValueError saying what was
        expected. Text kinds are the text itself."""
        text = text.strip()
        match self:
            case Kind.COUNT:
                try:
                    return int(_ascii_number(text, "a whole number"))
                except _NotANumber:
                    raise
                except ValueError:
                    raise ValueError(f"expected a whole number, got {quote(text)}") from None
            case Kind.NUMBER | Kind.FRACTION:
                try:
                    return float(_ascii_number(text, "a number"))
                except _NotANumber:
                    raise
                except ValueError:
                    raise ValueError(f"expected a number, got {quote(text)}") from None
            case Kind.TOGGLE:
                lowered = text.lower()
                if lowered in ("1", "true", "yes", "on"):
                    return True
                if lowered in ("0", "false", "no", "off"):
                    return False
                raise ValueError(f"expected true or false, got {quote(text)}")
        return text


MAX_NUMBER_CHARS = 30  # a number longer than this is a mistake (and Python refuses ints of thousands of digits)


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


@dataclass(frozen=True)
class Field:
    """One setting as declared on `DeviceConfig` (`key` and `default` come from the dataclass field)."""

    kind: Kind
    label: str = ""                   # the form's label; empty: not in the general form (GPU settings are per GPU)
    help: str = ""                    # the form's tooltip
    unit: str = ""                    # the form's suffix, e.g. "MiB"
    minimum: float | None = None      # the value's own range (COUNT, FRACTION)
    maximum: float | None = None
    choices: tuple[str, ...] = ()     # CHOICE
    noun: str = ""                    # what one value is called in a message, e.g. "allocator"
    example: str = ""                 # how a right value looks, said with a wrong one
    low_hint: str = ""                # what to do with a value under the minimum
    high_hint: str = ""               # ... over the maximum
    form_range: tuple[float, float] | None = None  # the widget's own range, when wider than the value's
    form_step: float = 1
    form_decimals: int = 2
    form_zero_text: str = ""          # what the form's spin box says at 0, when 0 means "off"
    omit_default: bool = False        # a profile carries the key only when it is not the default
    describe: Callable[[Any], str] | None = None  # the value in a few words for a summary ("" says nothing)
    plan: StepBuilder | None = None   # the steps this setting takes (core.config.steps)
    stage: Stage = Stage.PLACEMENT    # where they go in TensorFlow's order
    key: str = ""
    default: Any = None

    @property
    def optional(self) -> bool:
        """None is a value ("not set"), and a profile carries the key only when it is set."""
        return self.kind is Kind.FRACTION

    # -- reading JSON: the type rules of each kind (its range rules are `check`'s, for every source) -----------
    def decode(self, data: Mapping[str, Any], problems: list[Problem]) -> Any:
        """This setting's value from a profile's JSON object; a wrong type is a problem and gives the default."""
        raw = data.get(self.key, self.default)
        match self.kind:
            case Kind.VERSION:
                if self.key not in data:
                    problems.append(Problem(self.key, "missing", f'add "{self.key}": {self.default}'))
                elif not _is_int(raw) or raw != self.default:
                    problems.append(Problem(self.key, f"unsupported version {quote(raw)}",
                                            f"this release reads version {self.default}"))
                return self.default
            case Kind.TOGGLE:
                if isinstance(raw, bool):
                    return raw
                problems.append(Problem(self.key, f"expected true or false, got {type_name(raw)} {quote(raw)}"))
            case Kind.COUNT:
                if _is_int(raw):
                    return raw
                problems.append(Problem(self.key, f"expected an integer, got {type_name(raw)} {quote(raw)}"))
            case Kind.FRACTION:
                if raw is None or (isinstance(raw, (int, float)) and not isinstance(raw, bool)
                                   and math.isfinite(raw)):
                    return None if raw is None else float(raw)
                problems.append(Problem(self.key, f"expected a number between {self.minimum:g} and "
                                        f"{self.maximum:g}, got {type_name(raw)} {quote(raw)}", self.example))
            case Kind.CHOICE:
                if isinstance(raw, str):
                    return raw  # one of the choices or not: `check` says, for every source alike
                problems.append(self._not_a_choice(raw))
            case Kind.GPU_INDICES:
                return self._decode_indices(raw, problems)
            case Kind.GPU_SPLITS:
                return self._decode_splits(raw, problems)
        return self.default

    def _decode_indices(self, raw: Any, problems: list[Problem]) -> tuple[int, ...] | None:
        if raw is None:
            return None
        if not isinstance(raw, list):
            problems.append(Problem(self.key, f"expected a list of GPU indices or null, got {type_name(raw)} "
                                    f"{quote(raw)}", self.example))
            return None
        bad = [v for v in raw if not _is_int(v) or v < 0]
        if bad:
            problems.append(Problem(self.key, f"GPU indices must be integers ≥ 0, got {quote(bad)}",
                                    "use the indices shown by `tf-device-panel devices`"))
            return None
        seen: set[int] = set()
        dupes: set[int] = set()
        for value in raw:  # one pass: a profile may list 100,000 indices (list.count for each would be quadratic)
            (dupes if value in seen else seen).add(value)
        if dupes:
            problems.append(Problem(self.key, f"GPU {short_list(sorted(dupes))} listed more than once",
                                    "list each GPU once"))
        return tuple(sorted(seen))

    def _decode_splits(self, raw: Any, problems: list[Problem]) -> dict[int, tuple[int, ...]]:
        if raw is None:
            return {}
        if not isinstance(raw, dict):
            problems.append(Problem(self.key, f"expected an object mapping GPU index to MiB limits, got "
                                    f"{type_name(raw)}", self.example))
            return {}
        splits: dict[int, tuple[int, ...]] = {}
        for key, limits in raw.items():
            where = f"{self.key}[{quote(key)}]"
            try:
                index = int(key)
                if index < 0 or str(index) != str(key).strip():
                    raise ValueError
            except ValueError:
                problems.append(Problem(where, f"{quote(key)} is not a GPU index",
                                        'keys are indices as strings, e.g. "0"'))
                continue
            if not isinstance(limits, list) or not limits:
                problems.append(Problem(where,
                                        f"expected a non-empty list of memory limits in MiB, got {quote(limits)}",
                                        "give one limit per logical GPU, e.g. [2048, 2048]"))
                continue
            if not all(_is_int(v) for v in limits):
                problems.append(Problem(where, f"every logical GPU needs a positive memory limit in MiB, got "
                                        f"{quote([v for v in limits if not _is_int(v)])}", SPLIT_LIMIT_HINT))
                continue
            splits[index] = tuple(limits)  # a limit of 0 or less is `check`'s to refuse, as from the window
        return splits

    # -- the value's own rules, whatever its source ----------------------------------------------------------
    def type_problem(self, value: Any) -> Problem | None:
        """What makes `value` no value of this setting at all (a `DeviceConfig` refuses to be built with it)."""
        if self.kind.holds(value):
            return None
        return Problem(self.key, f"expected {_EXPECTED[self.kind]}, got {type_name(value)} {quote(value)}",
                       self.example)

    def check(self, value: Any) -> list[Problem]:
        """The value's own range rules: what the value may be, wherever it came from."""
        match self.kind:
            case Kind.COUNT if self.minimum is not None and self.maximum is not None:
                if not self.minimum <= value <= self.maximum:
                    low, high = _whole(self.minimum), _whole(self.maximum)
                    hint = self.low_hint if value < self.minimum else f"use at most {high}; {self.high_hint}"
                    return [Problem(self.key, f"{quote(value)} is not between {low} and {high}", hint)]
            case Kind.FRACTION if value is not None:
                if not math.isfinite(value) or not 0 < value <= 1:
                    return [Problem(self.key, f"{quote(value)} is not above 0 and at most 1",
                                    f"{self.example}; null to leave the memory alone")]
            case Kind.CHOICE if value not in self.choices:
                return [self._not_a_choice(value)]
            case Kind.GPU_SPLITS:
                return [Problem(split_field(index), f"every logical GPU needs a positive memory limit in MiB, got "
                                f"{quote([v for v in limits if v <= 0])}", SPLIT_LIMIT_HINT)
                        for index, limits in sorted(value.items()) if not limits or any(v <= 0 for v in limits)]
        return []

    def _not_a_choice(self, value: Any) -> Problem:
        return Problem(self.key, f"unknown {self.noun or 'value'} {quote(value)}",
                       f"use one of: {', '.join(self.choices)}")

    def summary_text(self, value: Any) -> str:
        """The value in a summary's words: as declared, else the label (and value) when not the default."""
        if self.describe is not None:
            return self.describe(value)
        if value == self.default:
            return ""
        name = (self.label or self.key.replace("_", " ")).lower()
        if self.kind is Kind.TOGGLE:
            return name if value else f"{name} off"
        return f"{name} {value}"

    # -- writing JSON ------------------------------------------------------------------------------------------
    def to_json(self, value: Any) -> Any:
        match self.kind:
            case Kind.GPU_INDICES:
                return None if value is None else list(value)
            case Kind.GPU_SPLITS:
                return {str(k): list(v) for k, v in sorted(value.items())}
        return value


_EXPECTED = {
    Kind.VERSION: "an integer", Kind.COUNT: "an integer", Kind.TOGGLE: "true or false",
    Kind.FRACTION: "a number or None (not set)", Kind.CHOICE: "a string",
    Kind.GPU_INDICES: "GPU indices (integers ≥ 0) or None (all GPUs)",
    Kind.GPU_SPLITS: "GPU indices (integers ≥ 0) mapped to memory limits in MiB (integers)",
    Kind.NUMBER: "a number", **{kind: "a string" for kind in (Kind.DEVICE, Kind.DEVICES, Kind.COUNTS, Kind.CHOICES,
                                                              Kind.PATH, Kind.ARGS)},
}
SPLIT_LIMIT_HINT = "set a limit above 0, or remove that logical GPU (TensorFlow requires a memory limit for each)"


def split_field(index: int | str) -> str:
    """The name problems give one GPU's split, e.g. virtual_gpus['0'] (the window shows them beside that GPU)."""
    return f"virtual_gpus[{str(index)!r}]"


def setting(default: Any = None, *, default_factory: Any = None, **declaration: Any) -> Any:
    """Declare a `DeviceConfig` field as a setting: its default and its `Field` (kind, label, range, plan...)."""
    metadata = {"setting": Field(**declaration)}
    if default_factory is not None:
        return dataclasses.field(default_factory=default_factory, metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def config_fields(config_type: type) -> tuple[Field, ...]:
    """The settings of a configuration class, in declaration order (a subclass's after its base's)."""
    known = _FIELDS.get(config_type)
    if known is not None:
        return known
    found = []
    for item in dataclasses.fields(config_type):
        declared = item.metadata.get("setting")
        if declared is None:
            continue
        default = item.default_factory() if item.default_factory is not dataclasses.MISSING else item.default
        found.append(dataclasses.replace(declared, key=item.name, default=default))
    _FIELDS[config_type] = tuple(found)
    return _FIELDS[config_type]


_FIELDS: dict[type, tuple[Field, ...]] = {}  # each class's settings, read once: every DeviceConfig() checks them


SHORT_LIST_ITEMS = 8  # a long list in a message: its first items and how many in all


def short_list(values: Sequence[Any], limit: int = SHORT_LIST_ITEMS) -> str:
    """Values joined with ", ", the first `limit` of a longer list followed by how many there are in all, so
    that an answer about 100,000 GPUs stays one short line."""
    shown = ", ".join(str(v) for v in values[:limit])
    return shown if len(values) <= limit else f"{shown}, … ({len(values)} in all)"


def _whole(bound: float) -> str:
    """A COUNT's bound as written: 64, 67,108,864 (never 6.71089e+07)."""
    return f"{int(bound):,}" if float(bound).is_integer() else f"{bound:g}"


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def type_name(value: Any) -> str:
    return "null" if value is None else {
        bool: "a boolean", int: "an integer", float: "a number", str: "a string",
        list: "a list", tuple: "a list", dict: "an object",
    }.get(type(value), type(value).__name__)
