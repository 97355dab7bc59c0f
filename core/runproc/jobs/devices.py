"""Resolving the logical devices a job was asked to use (inside the runtime process)."""

from __future__ import annotations

from tf_device_panel.core.catalogue.jobs import JobError
from tf_device_panel.core.protocol.output_lines import canonical_device


def logical_devices() -> dict[str, str]:
    """Short name ('/CPU:1') -> full name, for every logical device of this runtime."""
    import tensorflow as tf

    return {canonical_device(d.name): d.name for d in tf.config.list_logical_devices()}


def resolve_device(requested: str, *, default_type: str | None = None) -> str:
    """The full name of one existing logical device; the first GPU (else CPU) when `requested` is empty."""
    by_short = logical_devices()
    if not requested.strip():
        for kind in ([default_type] if default_type else []) + ["GPU", "CPU"]:
            for short, full in by_short.items():
                if short.startswith(f"/{kind}:"):
                    return full
    short = canonical_device(requested)
    if short not in by_short:
        raise JobError(f"device: {requested} is not a logical device of this runtime; it has "
                       f"{', '.join(sorted(by_short))}. Change the device configuration or pick one of those.")
    return by_short[short]
