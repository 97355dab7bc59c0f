"""Sizes: the one set of byte-unit constants every part of the panel counts in (binary units, as TensorFlow's
allocator, NVML and the kernel report them), and the ways a size becomes text.

Two inputs: bytes (the allocator's messages, a fit's figures, Prometheus' metrics) and MiB (the figures the runtime
sends and the configuration takes). Which text: `bytes_text` where a size can be anything from a few bytes up
(an allocation, bytes per sample); `mib_text` for a memory figure in full; `short_mib_text` where room is short
(the device map's boxes); `gib_figure` for a column of GiB figures that names its unit once."""

KIB = 1024
MIB = 1024 * KIB
GIB = 1024 * MIB


def bytes_text(count: float) -> str:
    """Bytes in a person's words: MiB from 1 MiB up, else KiB, else bytes ("256 B", never "0.00 MiB")."""
    size = abs(count)
    if size >= MIB:
        return f"{count / MIB:.2f} MiB"
    if size >= KIB:
        return f"{count / KIB:.1f} KiB"
    return f"{round(count)} B"


def mib_text(mib: float, places: int = 1, *, signed: bool = False) -> str:
    """A figure in MiB with its thousands grouped ("81,559 MiB", "40.2 MiB"); `signed`: a change, "+1.5 MiB"."""
    return f"{mib:{'+' if signed else ''},.{places}f} MiB"


def short_mib_text(mib: float) -> str:
    """A figure in MiB in few characters: GiB with one decimal from 1 GiB up ("73.6 GiB"), else whole MiB."""
    size = mib * MIB
    return f"{size / GIB:.1f} GiB" if size >= GIB else f"{mib:.0f} MiB"


def gib_figure(count: float | None) -> str:
    """Bytes as GiB with one decimal and no unit, for a line that names it once ("5.0/24.0 GiB"); "?" unknown."""
    return "?" if count is None else f"{count / GIB:.1f}"
