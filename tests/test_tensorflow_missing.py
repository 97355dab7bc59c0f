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
    expected = (f"error: TensorFlow is not installed in this Python ({sys.executable}); install it with: "
                f"{sys.executable} -m pip install 'tensorflow[and-cuda]==2.21.0' (Linux with an NVIDIA GPU), "
                f"or {sys.executable} -m pip install 'tensorflow==2.21.0'")
    assert expected in done.stderr
    assert "rejected the configuration" not in done.stdout + done.stderr and "Traceback" not in done.stderr


def test_a_broken_tensorflow_is_still_reported_as_what_it_is() -> None:
    from tf_device_panel.core.runtime import startup_error_text
    from tf_device_panel.core.runtime_main import import_failure

    assert import_failure(ModuleNotFoundError("No module named 'ml_dtypes'", name="ml_dtypes")) == {}
    error = {"stage": "import tensorflow", "type": "ModuleNotFoundError", "message": "No module named 'ml_dtypes'"}
    assert startup_error_text(error) == ("TensorFlow rejected the configuration at import tensorflow: "
                                         "ModuleNotFoundError: No module named 'ml_dtypes'")
