"""`share`'s parameters, declared once: the command line's `share` options (core.cli) and the window's Share dialog
(gui.dialogs.share_dialog, through the form builder) are both generated from `SHARE_OPTIONS`, and the dialog starts
the command with `command_args` of its fields' values.

Each option's value is declared as a job's parameter is (`Param`: its kind, the form's default, range, label, and
the command line's help); what only one side needs is said beside it (`CommandOption`). A switch is off on the
command line unless given, and a value left out is the command's to decide (the default batch, no seats without
--max); the form starts from the declared defaults.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from tf_device_panel.core.catalogue.fit_work import KERAS_SUFFIX
from tf_device_panel.core.catalogue.jobs import JOBS
from tf_device_panel.core.catalogue.params import Param, ParamValue
from tf_device_panel.core.config import Kind
from tf_device_panel.core.text import quote

MAX_SEATS = 256
VERIFY_BATCH = 32              # the batch each seat's run trains with, unless given
MAX_BATCH = int(next(p.maximum for p in JOBS["fit"].params if p.name == "batch_per_replica") or 0)  # the fit job's


def read_batch(text: str) -> int:
    """A batch the fit job takes, as the command line writes it; ValueError in the option's own words."""
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"expected a whole number of samples, got {quote(text)}") from None
    if not 1 <= value <= MAX_BATCH:
        raise ValueError(f"{value} is not a batch; use 1 to {MAX_BATCH:,} samples (e.g. {VERIFY_BATCH})")
    return value


@dataclass(frozen=True)
class CommandOption:
    """One option of a command the window also offers as a form: its value as a parameter (`param`), and what only
    the command line (its value's name, its reading, whether it must be given) or the form needs."""

    param: Param
    metavar: str = ""              # the value's name in the usage (--seats N); a switch has none
    # The command line's reading of its text, refusing in its own words (ValueError); None: the text as given.
    read: Callable[[str], object] | None = None
    required: bool = False         # the command line must be given it
    placeholder: str = ""          # what the form's field says while it is empty
    off_label: str = ""            # a switch the form shows as two radio buttons: the one for off (`label`: on)
    folder: bool = False           # a PATH that names a folder: the form's Browse… picks one

    @property
    def name(self) -> str:
        return self.param.name

    @property
    def flag(self) -> str:
        return f"--{self.param.name}"


@dataclass(frozen=True)
class ShareWork:
    """A kind of work the form offers a seat to run: its words, what its file is in a sentence, and the options
    that give it (its file first; none: the built-in cnn)."""

    words: str
    what: str = ""
    options: tuple[str, ...] = ()


FILE_PLACEHOLDER = "the file each seat runs"

# In the command line's order (the form lays its rows out in its own).
SHARE_OPTIONS: tuple[CommandOption, ...] = (
    CommandOption(Param("seats", Kind.COUNT, 3, "how many seats (processes) share the device", minimum=1,
                        maximum=MAX_SEATS, label="Seats"),
                  metavar="N"),
    CommandOption(Param("max", Kind.TOGGLE, True, "find the most seats the device holds for the work, verified side "
                        "by side (instead of --seats)", label="As many as hold the work (found by running them)"),
                  off_label="This many:"),
    CommandOption(Param("config", Kind.PATH, "", "the profile each seat starts from (for the CPU: its "
                        "cpu_memory_limit_mib is what is split)", label="This configuration",
                        empty_means="the default configuration"),
                  metavar="BASE"),
    CommandOption(Param("out", Kind.PATH, "", "a new or empty folder for seat-1.json … seat-N.json",
                        label="Folder"),
                  metavar="DIR", required=True, placeholder="a new or empty folder", folder=True),
    CommandOption(Param("force", Kind.TOGGLE, False, "write into DIR even when it is not empty",
                        label="Write into a folder that is not empty")),
    CommandOption(Param("verify", Kind.TOGGLE, True, "run the work once alone (measuring what each seat takes beyond "
                        "its allocator), then the N seats side by side, and report each one's peak",
                        label="Verify: run the seats side by side and measure each one's peak")),
    CommandOption(Param("script", Kind.PATH, "", "the work each seat runs: your script (run as `run script` runs "
                        "it) …", label="Script", empty_means="the model"),
                  metavar="PATH", placeholder=FILE_PLACEHOLDER),
    CommandOption(Param("args", Kind.ARGS, "", "… with these arguments ({batch} is replaced by --batch)",
                        label="Script arguments", empty_means="none"),
                  metavar="ARGS", placeholder="e.g. --batch-size {batch}  ({batch}: the batch below)"),
    CommandOption(Param("model", Kind.PATH, "", "the work each seat runs: dense, cnn (the default) or a saved Keras "
                        "model (PATH.keras) trained a few steps", label="Keras model", empty_means="cnn",
                        file_type=(KERAS_SUFFIX, "saved Keras model")),
                  metavar="MODEL", placeholder=FILE_PLACEHOLDER),
    CommandOption(Param("batch", Kind.COUNT, VERIFY_BATCH, f"the batch each seat's run trains with (default "
                        f"{VERIFY_BATCH}); with --verify or --max", minimum=1, maximum=MAX_BATCH, label="Batch"),
                  metavar="B", read=read_batch),
)

# What the form offers a seat to run; the command line gives the same by its options alone.
SHARE_WORKS: tuple[ShareWork, ...] = (
    ShareWork("The panel's CNN"),
    ShareWork("Your script", "script", ("script", "args")),
    ShareWork("Your saved Keras model", "saved Keras model", ("model",)),
)


def share_option(name: str) -> CommandOption:
    return next(option for option in SHARE_OPTIONS if option.name == name)


def command_args(values: Mapping[str, ParamValue | None]) -> list[str]:
    """`share`'s arguments for these values, in the options' order: each switch that is on, each other option
    with a value (one left out, None or empty is not given)."""
    args: list[str] = []
    for option in SHARE_OPTIONS:
        value = values.get(option.name)
        if option.param.kind is Kind.TOGGLE:
            args += [option.flag] if value else []
        elif value is not None and value != "":
            # One word, `--flag=value`: a value that starts with a dash (script arguments such as `--fast`) would
            # otherwise be read as an option of its own and refused.
            args.append(f"{option.flag}={value}")
    return args
