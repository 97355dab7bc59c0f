"""How the doctor's probe process (core.runproc.doctor_probe) marks the line that carries its report, read by the
doctor (core.client.doctor) among TensorFlow's own output, and the report's parts both sides read."""

from __future__ import annotations

from typing import TypedDict

PROBE_PREFIX = "\x1eTFDP-PROBE "


class ProbePlacement(TypedDict):
    """Where the probe's matmul pinned to a GPU's logical device ran (one per logical GPU)."""

    requested: str
    actual: str
    value: float
