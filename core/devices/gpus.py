"""Matching TensorFlow's GPUs to NVML's by PCI bus id (never by index: CUDA and NVML may order them differently)."""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from tf_device_panel.core.config import GpuInfo

log = logging.getLogger(__name__)
MIG_PREFIX = "MIG-"

# TF's line when it creates a logical GPU, e.g.
# Created device /job:localhost/replica:0/task:0/device:GPU:1 with 1024 MB memory:  -> device: 0, name: NVIDIA L4,
# pci bus id: 0000:01:00.0, compute capability: 8.9
_CREATED = re.compile(r"Created device \S*device:GPU:(\d+) with (\d+) MB memory:\s*-> device: (\d+), name: (.*?), "
                      r"pci bus id: ([0-9a-fA-F:.]+)")


def created_gpu(line: str) -> dict[str, Any] | None:
    """The logical GPU a 'Created device' line describes, or None."""
    match = _CREATED.search(line)
    if not match:
        return None
    return {"logical": f"/GPU:{match.group(1)}", "memory_mb": int(match.group(2)), "physical": int(match.group(3)),
            "name": match.group(4), "pci_bus_id": match.group(5).lower()}


def created_gpus(lines: Iterable[str]) -> list[dict[str, Any]]:
    return [gpu for gpu in map(created_gpu, lines) if gpu is not None]


def same_bus(a: str | None, b: str | None) -> bool:
    """NVML says 00000000:01:00.0, TF says 0000:01:00.0: compare the domain's value and bus:device.function."""
    if not a or not b:
        return False
    pa, pb = a.lower().split(":"), b.lower().split(":")
    try:
        return len(pa) == len(pb) == 3 and int(pa[0], 16) == int(pb[0], 16) and pa[1:] == pb[1:]
    except ValueError:
        return False


def nvml_index_for(pci_bus_id: str | None, nvml_gpus: Iterable[Any]) -> int | None:
    """The NVML index of the GPU at `pci_bus_id` (objects or dicts with index and pci_bus_id)."""
    for gpu in nvml_gpus:
        bus = gpu.get("pci_bus_id") if isinstance(gpu, dict) else getattr(gpu, "pci_bus_id", None)
        if same_bus(bus, pci_bus_id):
            return int(gpu["index"] if isinstance(gpu, dict) else gpu.index)
    return None


def nvml_gpu_for_physical(index: int, created: Iterable[Mapping[str, Any]], nvml_gpus: list[dict[str, Any]]
                          ) -> dict[str, Any]:
    """NVML's record for TensorFlow's physical GPU `index`: by the bus id TF logged when it created the
    device; by index only when TF logged nothing for it (the runtime sets CUDA_DEVICE_ORDER=PCI_BUS_ID)."""
    bus = next((c["pci_bus_id"] for c in created if c["physical"] == index), None)
    if bus is not None:
        found = nvml_index_for(bus, nvml_gpus)
        return next((g for g in nvml_gpus if g["index"] == found), {})
    return next((g for g in nvml_gpus if g["index"] == index), {})


_GPU_HINT_WORDS = ("cuda", "gpu", "cuinit", "dlopen", "driver")


def tf_gpu_lines(lines: Iterable[str]) -> list[str]:
    """The runtime's output lines about GPUs and CUDA (TF's own reasons when it has no GPU)."""
    return [line for line in lines if any(word in line.lower() for word in _GPU_HINT_WORDS)]


def tf_gpu_messages(lines: Iterable[str]) -> list[str]:
    """The same lines without TF's C++ log prefix, each once (TF says some twice), for people to read."""
    return list(dict.fromkeys(line.split("] ", 1)[-1] for line in tf_gpu_lines(lines)))


def _field(gpu: Any, name: str) -> Any:
    """A field of an NVML GPU given as a snapshot object or as its JSON dict."""
    return gpu.get(name) if isinstance(gpu, dict) else getattr(gpu, name, None)


def is_mig_entry(entry: str) -> bool:
    """A MIG instance in CUDA_VISIBLE_DEVICES: `MIG-<UUID>` (drivers from R470) or `MIG-GPU-<UUID>/<GI>/<CI>`
    (R450/R460), as CUDA's documentation gives them. CUDA uses it; NVML's GPU list (physical GPUs) lacks it."""
    return entry.strip().upper().startswith(MIG_PREFIX)


def uuid_matches(prefix: str, nvml_gpus: Iterable[Any]) -> list[int]:
    """NVML's indices of the GPUs whose UUID starts with `prefix` (as CUDA allows), compared case-insensitively."""
    return [int(_field(g, "index")) for g in nvml_gpus
            if str(_field(g, "uuid") or "").lower().startswith(prefix.strip().lower())]


def cuda_visible_devices(visible: str | None, nvml_gpus: Sequence[Any]) -> list[int | str]:
    """Each CUDA device, in CUDA's (and so TensorFlow's physical) order, as CUDA reads `CUDA_VISIBLE_DEVICES` in
    the run process (where CUDA_DEVICE_ORDER=PCI_BUS_ID, NVML's order too): NVML's index of the GPU, or, for a
    MIG instance, its entry as written (NVML lists physical GPUs only, so its memory cannot be read here).

    Unset: every GPU, in NVML's order. Set: each entry an index into that order, a GPU UUID (or its unique
    prefix, "GPU-8315", any case) or a MIG instance; at the first entry CUDA cannot use (unknown, repeated,
    garbage) it ignores that entry and every later one. "" or "-1": no GPU. `nvml_gpus`: snapshots or dicts.
    """
    ordered = [int(_field(g, "index")) for g in nvml_gpus]
    if visible is None:
        return list(ordered)
    chosen: list[int | str] = []
    for entry in (e.strip() for e in visible.split(",")):
        device: int | str | None = None
        if entry.isdigit() and int(entry) < len(ordered):
            device = ordered[int(entry)]
        elif entry.upper().startswith("GPU-"):
            matches = uuid_matches(entry, nvml_gpus)
            device = matches[0] if len(matches) == 1 else None
        elif is_mig_entry(entry):
            device = entry
        repeated = device in chosen or (isinstance(device, str)
                                        and device.lower() in [str(c).lower() for c in chosen])
        if device is None or repeated:
            break
        chosen.append(device)
    return chosen


def cuda_visible_nvml_indices(visible: str | None, nvml_gpus: Sequence[Any]) -> list[int | None]:
    """NVML's index of each CUDA device (`cuda_visible_devices`), None for a MIG instance."""
    return [device if isinstance(device, int) else None for device in cuda_visible_devices(visible, nvml_gpus)]


def mig_warning(visible: str | None) -> str | None:
    """What cannot be checked when CUDA_VISIBLE_DEVICES names MIG instances, or None."""
    mig = [e.strip() for e in (visible or "").split(",") if is_mig_entry(e)]
    if not mig:
        return None
    return (f"CUDA_VISIBLE_DEVICES names MIG instance(s) {', '.join(mig)}: CUDA uses them, but NVML lists only "
            "physical GPUs, so their GPU indices and memory totals are not checked here (TensorFlow checks them "
            "when it starts)")


def gpu_info(tf_index: int, nvml_gpu: Any, name: str = "") -> GpuInfo:
    """What validation needs of TensorFlow's physical GPU `tf_index`, from its NVML record (a snapshot or its
    dict): CUDA's total where NVML tells what the driver keeps (memory v2), else NVML's total, said so."""
    total, reserved = _field(nvml_gpu, "memory_total_mib"), _field(nvml_gpu, "memory_reserved_mib")
    cuda_total = None if total is None or reserved is None else int(total) - int(reserved)
    index = _field(nvml_gpu, "index")
    return GpuInfo(tf_index, name or _field(nvml_gpu, "name") or "", cuda_total if cuda_total is not None else total,
                   nvml_index=None if index is None else int(index),
                   total_source="CUDA" if cuda_total is not None else "NVML" if total is not None else "")


def tf_gpu_inventory(nvml_gpus: Sequence[Any], visible: str | None) -> list[GpuInfo]:
    """TensorFlow's physical GPUs as validation must see them: TF's indices (after CUDA_VISIBLE_DEVICES, matched
    to NVML by UUID and PCI order) with CUDA's totals (`gpu_info`). A MIG instance keeps its index but has no
    known total, so its splits are not checked against one (a warning says so). `nvml_gpus`: snapshots or dicts."""
    by_index = {int(_field(g, "index")): g for g in nvml_gpus}
    inventory = []
    for tf_index, device in enumerate(cuda_visible_devices(visible, nvml_gpus)):
        if isinstance(device, int):
            inventory.append(gpu_info(tf_index, by_index[device]))
        else:
            inventory.append(GpuInfo(tf_index, f"MIG instance {device}"))
    warning = mig_warning(visible)
    if warning is not None and warning not in _warned:
        _warned.add(warning)
        log.warning("%s", warning)
    return inventory


_warned: set[str] = set()  # each MIG warning once per process: validation runs on every profile change
