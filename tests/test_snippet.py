"""The exported snippet, pasted at the top of a script, gives the logical devices the panel would."""

from __future__ import annotations

import subprocess
import sys

from tf_device_panel.core.config import DeviceConfig, to_python_snippet

PROBE = """
import json
print("DEVICES=" + json.dumps({
    "logical": [d.name for d in tf.config.list_logical_devices()],
    "soft": tf.config.get_soft_device_placement(),
}))
"""


def run_snippet(config: DeviceConfig) -> dict:
    code = to_python_snippet(config) + PROBE
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-2000:]
    line = next(line for line in done.stdout.splitlines() if line.startswith("DEVICES="))
    import json

    return dict(json.loads(line.removeprefix("DEVICES=")))


def test_snippet_splits_the_cpu_and_sets_soft_placement() -> None:
    config = DeviceConfig(cpu_devices=3, soft_placement=False, visible_gpus=(0,), log_placement=True)
    result = run_snippet(config)
    assert result["logical"] == ["/device:CPU:0", "/device:CPU:1", "/device:CPU:2"]
    assert result["soft"] is False


def test_default_snippet_is_short_and_runs() -> None:
    snippet = to_python_snippet(DeviceConfig(log_placement=False))
    assert "try:" not in snippet and "set_logical_device_configuration" not in snippet
    assert run_snippet(DeviceConfig(log_placement=False))["logical"] == ["/device:CPU:0"]


def test_snippet_has_every_gpu_call_in_tensorflows_order() -> None:
    snippet = to_python_snippet(DeviceConfig(visible_gpus=(0, 1), virtual_gpus={1: (1024, 2048)},
                                             gpu_allocator="cuda_malloc_async"))
    order = ["TF_GPU_ALLOCATOR", "import tensorflow", "set_visible_devices", "memory_limit=1024",
             "memory_limit=2048", "except RuntimeError", "set_soft_device_placement", "set_log_device_placement"]
    positions = [snippet.index(marker) for marker in order]
    assert positions == sorted(positions)
    compile(snippet, "<snippet>", "exec")
    growth = to_python_snippet(DeviceConfig(memory_growth=True))
    assert "set_memory_growth(gpu, True)" in growth
