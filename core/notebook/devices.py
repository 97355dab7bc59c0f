"""`%tf_devices`' facts: TensorFlow's build and physical devices (read as a run process reads them, without
initializing the runtime), its logical devices once it runs, and NVML's GPUs."""

from __future__ import annotations

import platform

from tf_device_panel.core.devices.nvml import shared as shared_nvml
from tf_device_panel.core.notebook.configure import KernelConfiguration, logical_device_names, tensorflow_initialized
from tf_device_panel.core.notebook.views import DevicesView
from tf_device_panel.core.runproc.tf_facts import build_info, physical_devices


def devices_view(configuration: KernelConfiguration) -> DevicesView:
    import tensorflow as tf

    if configuration.config is not None:
        applied = f"%tf_config: {configuration.summary()}"
    elif tensorflow_initialized():
        applied = "TensorFlow's defaults (no %tf_config ran in this kernel)"
    else:
        applied = "none yet (run %tf_config before anything uses TensorFlow)"
    nvml = shared_nvml()
    available = nvml.init()
    return DevicesView(
        tf_version=tf.__version__, python=platform.python_version(), build=build_info(tf),
        physical=physical_devices(tf),
        logical=logical_device_names(tf) if tensorflow_initialized() else None,
        configuration=applied, nvml_message="" if available else (nvml.message or "no NVIDIA driver"),
        nvml_driver=nvml.driver_version() if available else None,
        nvml_cuda=nvml.cuda_driver_version() if available else None,
        nvml_gpus=nvml.gpus() if available else [])
