"""Test-only: the module an exporter subprocess imports through TF_DEVICE_PANEL_TEST_NVML (core/exporter.py).

It installs tests/fake_nvml.py's two fake GPUs into pynvml before the exporter starts NVML, so a test can run the
real `tf-device-panel exporter` command, in its own process, against known values."""

from __future__ import annotations

from fake_nvml import FakeGpus, process


class _Patcher:
    """The part of pytest's monkeypatch that FakeGpus.install uses; the process ends with the patch."""

    def setattr(self, target: object, name: str, value: object) -> None:
        setattr(target, name, value)


def install() -> None:
    gpus = FakeGpus(2)
    gpus.processes[0] = [process(4242, 512)]
    gpus.install(_Patcher())  # type: ignore[arg-type]
