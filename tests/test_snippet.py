"""The exported snippet, pasted at the top of a script, gives the logical devices the panel would."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from tf_device_panel.core.config import DeviceConfig, to_python_snippet

PROBE = """
import json
print("DEVICES=" + json.dumps({
    "logical": [d.name for d in tf.config.list_logical_devices()],
    "soft": tf.config.get_soft_device_placement(),
    "allocator": os.environ.get("TF_GPU_ALLOCATOR"),
}))
"""


def paste_and_run(config: DeviceConfig, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    code = to_python_snippet(config) + PROBE
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=180,
                          env={**os.environ, **(env or {})})


def run_snippet(config: DeviceConfig, env: dict[str, str] | None = None) -> dict:
    done = paste_and_run(config, env)
    assert done.returncode == 0, done.stderr[-2000:]
    line = next(line for line in done.stdout.splitlines() if line.startswith("DEVICES="))
    import json

    return dict(json.loads(line.removeprefix("DEVICES=")))


def test_snippet_splits_the_cpu_and_sets_soft_placement() -> None:
    config = DeviceConfig(cpu_devices=3, soft_placement=False, visible_gpus=(), log_placement=True)
    result = run_snippet(config, env={"TF_GPU_ALLOCATOR": "cuda_malloc_async"})
    assert result["logical"] == ["/device:CPU:0", "/device:CPU:1", "/device:CPU:2"]
    assert result["soft"] is False
    assert result["allocator"] is None  # the profile says default: an inherited value is removed, as in a run


def test_the_snippet_refuses_a_gpu_this_machine_lacks_as_a_run_does() -> None:
    from tf_device_panel.core.devices.nvml import Nvml

    if Nvml().init():
        pytest.skip("this machine has an NVIDIA driver: GPU 7 may exist")
    done = paste_and_run(DeviceConfig(visible_gpus=(7,)))
    assert done.returncode == 1 and "IndexError: GPU 7 requested, but TensorFlow sees 0 physical GPU(s)" in done.stderr


def test_default_snippet_is_short_and_runs() -> None:
    snippet = to_python_snippet(DeviceConfig(log_placement=False))
    assert "try:" not in snippet and "set_logical_device_configuration" not in snippet
    assert run_snippet(DeviceConfig(log_placement=False))["logical"] == ["/device:CPU:0"]


def test_snippet_has_every_gpu_call_in_tensorflows_order() -> None:
    snippet = to_python_snippet(DeviceConfig(visible_gpus=(0, 1), virtual_gpus={1: (1024, 2048)},
                                             gpu_allocator="cuda_malloc_async"))
    order = ["TF_GPU_ALLOCATOR", "import tensorflow", "missing = ", "set_visible_devices", "memory_limit=1024",
             "memory_limit=2048", "set_soft_device_placement", "set_log_device_placement"]
    positions = [snippet.index(marker) for marker in order]
    assert positions == sorted(positions)
    compile(snippet, "<snippet>", "exec")
    growth = to_python_snippet(DeviceConfig(memory_growth=True))
    assert "set_memory_growth(gpu, True)" in growth


def test_the_snippet_lists_the_gpus_only_where_a_step_uses_them() -> None:
    # 'Copy as Python' assigned `gpus = …` in every snippet and used it in none of the simple ones.
    for config in (DeviceConfig(), DeviceConfig(memory_growth=True), DeviceConfig(cpu_devices=2)):
        assert "gpus = " not in to_python_snippet(config)
    split = to_python_snippet(DeviceConfig(visible_gpus=(0,), virtual_gpus={0: (1024, 1024)}))
    assert split.index('gpus = tf.config.list_physical_devices("GPU")') < split.index("gpus[0]")
