"""What TensorFlow says of its build and its physical devices, read without initializing the runtime.

One reading for the run process (its `warm` and `ready` events) and the doctor's probe, so the two never
describe the same machine differently.
"""

from __future__ import annotations

from typing import Any

from tf_device_panel.core.protocol.events import BuildInfo, PhysicalDevice

# tf.sysconfig.get_build_info()'s plain values: versions, flags, lists of compute capabilities.


def build_info(tf: Any) -> BuildInfo:
    """tf.sysconfig's build facts that are plain values (CUDA and cuDNN versions, is_cuda_build, …)."""
    try:
        return {k: v for k, v in tf.sysconfig.get_build_info().items() if isinstance(v, (str, bool, list, int))}
    except Exception as exc:  # a nicety: a TensorFlow without it still runs
        return {"error": str(exc)}


def physical_devices(tf: Any) -> list[PhysicalDevice]:
    """Every physical device: its name, type, index among its type, whether it is visible, and a GPU's model
    and compute capability (or why they could not be read)."""
    devices = []
    counters: dict[str, int] = {}
    # Listing the physical devices is GPU discovery (where a broken driver crashes or hangs): it comes first, so
    # the doctor's probe reports the stage it died in.
    physical = tf.config.list_physical_devices()
    visible = {d.name for d in tf.config.get_visible_devices()}
    for device in physical:
        index = counters.get(device.device_type, 0)
        counters[device.device_type] = index + 1
        entry: PhysicalDevice = {"name": device.name, "device_type": device.device_type, "index": index,
                                 "visible": device.name in visible}
        if device.device_type == "GPU":
            entry["device_name"], entry["compute_capability"] = "", None
            try:
                details = tf.config.experimental.get_device_details(device)
            except Exception as exc:  # details are a nicety; a failure must not stop the runtime
                entry["details_error"] = str(exc)
            else:
                capability = details.get("compute_capability")
                entry["device_name"] = details.get("device_name", "")
                entry["compute_capability"] = ".".join(map(str, capability)) if capability else None
        devices.append(entry)
    return devices


def soft_placement_target(spec: Any, devices: list[str]) -> str | None:
    """Where soft placement runs the ops pinned to `spec` (a DeviceSpec) when this runtime has no such device: the
    first device of the same type, else the first device (as measured); None when the device exists or the spec
    names no local device type."""
    from tensorflow.python.framework import device_spec

    if not spec.device_type or spec.job not in (None, "localhost"):
        return None
    kind = spec.device_type.upper()
    present = [device_spec.DeviceSpecV2.from_string(d) for d in devices]
    same_kind = [d for d in present if (d.device_type or "").upper() == kind]
    if any(spec.device_index is None or d.device_index == spec.device_index for d in same_kind):
        return None
    return str((same_kind or present)[0].to_string())
