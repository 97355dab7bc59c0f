"""Test-only: the module an exporter subprocess imports through TF_DEVICE_PANEL_TEST_NVML (core/lab/exporter.py).

It installs tests/fake_nvml.py's two fake GPUs into pynvml before the exporter starts NVML, so a test can run the
real `tf-device-panel exporter` command, in its own process, against known values."""

from __future__ import annotations

import os

from fake_nvml import GIB, FakeGpus, process

# How many fake GPUs, and each one's used memory in GiB ("3,9.5,14"), for scripts/lab_screenshot.py's lab.
COUNT_ENV, USED_ENV = "TF_DEVICE_PANEL_FAKE_GPUS", "TF_DEVICE_PANEL_FAKE_USED_GIB"


class _Patcher:
    """The part of pytest's monkeypatch that FakeGpus.install uses; the process ends with the patch."""

    def setattr(self, target: object, name: str, value: object) -> None:
        setattr(target, name, value)


def install() -> None:
    gpus = FakeGpus(int(os.environ.get(COUNT_ENV, "2")))
    if os.environ.get(USED_ENV):
        for index, used in enumerate(os.environ[USED_ENV].split(",")[:gpus.count]):
            gpus.used[index] = int(float(used) * GIB)
    gpus.processes[0] = [process(4242, 512)]
    gpus.install(_Patcher())  # type: ignore[arg-type]
