"""Test-only: the module an exporter subprocess imports through TF_DEVICE_PANEL_TEST_NVML to run host-only, as on
a machine without an NVIDIA driver, even where the test machine has one (see core/lab/exporter.py)."""

from __future__ import annotations

import pynvml


def install() -> None:
    def missing() -> None:
        raise pynvml.NVMLError_LibraryNotFound()

    pynvml.nvmlInit = missing
