"""What this machine gives a run, known before TensorFlow starts: NVML's GPUs numbered as TensorFlow will number
them, and the devices a run under a configuration has (for a job's parameters' check, which the command line, the
window, a client job and the run process all make)."""

from __future__ import annotations

import os

from tf_device_panel.core.catalogue import RunDevices
from tf_device_panel.core.catalogue.params import profile_devices
from tf_device_panel.core.config import DeviceConfig, GpuInfo
from tf_device_panel.core.devices.gpus import tf_gpu_inventory
from tf_device_panel.core.devices.nvml import shared as shared_nvml


def nvml_gpu_inventory() -> list[GpuInfo] | None:
    """TensorFlow's GPUs as NVML sees them, for validation (TF's indices under CUDA_VISIBLE_DEVICES, CUDA's
    totals); None when unknown (no driver)."""
    nvml = shared_nvml()
    if not nvml.init():
        return None
    return tf_gpu_inventory(nvml.gpus(), os.environ.get("CUDA_VISIBLE_DEVICES"))


def no_gpu_reason() -> str:
    """Why this machine's GPUs cannot be checked, in NVML's words."""
    return f"NVML sees no GPU on this machine ({shared_nvml().message or 'no NVIDIA driver'})"


def run_devices(config: DeviceConfig) -> RunDevices:
    """The devices a run with `config` has on this machine, known before it starts."""
    gpus = nvml_gpu_inventory()
    return profile_devices(config, gpus, no_gpu_reason() if gpus is None else "")
