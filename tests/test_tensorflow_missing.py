"""Without TensorFlow in the run's Python, `devices` and `run` say so and how to install it (measured on the H100
host before TensorFlow was there: "TensorFlow rejected the configuration at import tensorflow:
ModuleNotFoundError")."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import ROOT


@pytest.fixture
def no_tensorflow(tmp_path: Path) -> dict[str, str]:
    """An environment whose `import tensorflow` fails as it does where TensorFlow is not installed."""
    package = tmp_path / "tensorflow"
    package.mkdir()
    (package / "__init__.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'tensorflow'\", name='tensorflow')\n")
    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")]))}


@pytest.mark.parametrize("command", [["devices"], ["run", "matmul"]])
def test_devices_and_run_say_tensorflow_is_not_installed_and_how_to_install_it(
        no_tensorflow: dict[str, str], command: list[str]) -> None:
    done = subprocess.run([sys.executable, "-m", "tf_device_panel", *command], cwd=ROOT, env=no_tensorflow,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    from tf_device_panel.core.devices.cudalibs import install_commands

    expected = (f"error: TensorFlow is not installed in this Python ({sys.executable}); install it with: "
                f"{install_commands(sys.executable)}")  # the CUDA build first only where there is an NVIDIA GPU
    assert expected in done.stderr
    assert "rejected the configuration" not in done.stdout + done.stderr and "Traceback" not in done.stderr


def write_pci(root: Path, functions: list[tuple[str, str]]) -> None:
    for number, (vendor, pci_class) in enumerate(functions):
        (root / f"0000:0{number}:00.0").mkdir(parents=True)
        (root / f"0000:0{number}:00.0" / "vendor").write_text(vendor + "\n")
        (root / f"0000:0{number}:00.0" / "class").write_text(pci_class + "\n")


def test_the_install_hint_puts_the_cuda_build_first_only_where_there_is_an_nvidia_gpu(tmp_path: Path) -> None:
    from tf_device_panel.core.devices.cudalibs import install_commands

    write_pci(tmp_path / "none", [("0x1af4", "0x020000"), ("0x10de", "0x040300")])  # virtio, a GPU's audio only
    write_pci(tmp_path / "h100", [("0x8086", "0x060000"), ("0x10de", "0x030200")])
    assert install_commands("py", pci_root=tmp_path / "none") == (
        "py -m pip install 'tensorflow==2.21.0' (no NVIDIA GPU on this machine; where there is one: "
        "py -m pip install 'tensorflow[and-cuda]==2.21.0')")
    assert install_commands("py", pci_root=tmp_path / "h100").startswith(
        "py -m pip install 'tensorflow[and-cuda]==2.21.0' (this machine has an NVIDIA GPU)")
    unreadable = install_commands("py", pci_root=tmp_path / "absent")
    assert unreadable.index("'tensorflow==2.21.0'") < unreadable.index("[and-cuda]")


def test_a_broken_tensorflow_is_still_reported_as_what_it_is() -> None:
    from tf_device_panel.core.client.wording import startup_error
    from tf_device_panel.core.protocol.events import StartupError
    from tf_device_panel.core.runproc.runtime_main import import_failure

    assert import_failure(ModuleNotFoundError("No module named 'ml_dtypes'", name="ml_dtypes")) == {}
    error = StartupError(stage="import tensorflow", error_type="ModuleNotFoundError",
                         message="No module named 'ml_dtypes'")
    assert startup_error(error) == ("TensorFlow rejected the configuration at import tensorflow: "
                                    "ModuleNotFoundError: No module named 'ml_dtypes'")
