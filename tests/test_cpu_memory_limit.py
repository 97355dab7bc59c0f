"""cpu_memory_limit_mib: the CPU's allocator as the GPUs' (BFC) with a cap, declared once in the schema; its plan,
snippet and checks, and its allocator figures in a real run (the memory job's rows, the live tf_memory events)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from tf_device_panel.core.config import ConfigError, DeviceConfig
from tf_device_panel.core.config.plan import plan, to_python
from tf_device_panel.core.runproc.runtime_main import allocator_devices

ROOT = Path(__file__).resolve().parent.parent


def test_the_plan_sets_both_variables_before_tensorflow_is_imported() -> None:
    config = DeviceConfig.from_json({"version": 1, "cpu_memory_limit_mib": 64})
    (step,) = [s for s in plan(config) if "TF_CPU_BFC_MEM_LIMIT_IN_MB" in s.code]
    assert step.before_import
    snippet = to_python(plan(config))
    before, after = snippet.split("import tensorflow as tf")
    assert "os.environ['TF_CPU_ALLOCATOR_USE_BFC'] = 'true'" in before
    assert "os.environ['TF_CPU_BFC_MEM_LIMIT_IN_MB'] = '64'" in before
    assert "TF_CPU" not in after
    assert config.environment()["TF_CPU_BFC_MEM_LIMIT_IN_MB"] == "64"
    assert "CPU memory cap 64 MiB" in config.summary()
    # Applying the step sets what the snippet says.
    saved = {k: os.environ.get(k) for k in ("TF_CPU_ALLOCATOR_USE_BFC", "TF_CPU_BFC_MEM_LIMIT_IN_MB")}
    try:
        assert "TF_CPU_BFC_MEM_LIMIT_IN_MB=64" in step.apply(None).text
        assert os.environ["TF_CPU_ALLOCATOR_USE_BFC"] == "true"
        assert os.environ["TF_CPU_BFC_MEM_LIMIT_IN_MB"] == "64"
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def test_no_cap_is_no_step_and_no_key() -> None:
    config = DeviceConfig()
    assert config.cpu_memory_limit_mib == 0
    assert "TF_CPU" not in to_python(plan(config))
    assert "cpu_memory_limit_mib" not in config.to_json()  # older profiles round-trip unchanged
    assert "TF_CPU_ALLOCATOR_USE_BFC" not in config.environment()
    capped = DeviceConfig.from_json({"version": 1, "cpu_memory_limit_mib": 2048})
    assert capped.to_json()["cpu_memory_limit_mib"] == 2048


@pytest.mark.parametrize(("value", "said"), [
    (-1, "-1 is not between 0 and 67,108,864 — use 0 for no cap"),
    (10**12, "use at most 67,108,864; the cap is in MiB"),
    ("64", "expected an integer, got a string '64'"),
    (1.5, "expected an integer, got a number 1.5"),
    (True, "expected an integer, got a boolean True"),
])
def test_a_wrong_cap_is_named_with_what_to_do(value: object, said: str) -> None:
    with pytest.raises(ConfigError) as caught:
        DeviceConfig.from_json({"version": 1, "cpu_memory_limit_mib": value})
    (problem,) = caught.value.problems
    assert problem.field == "cpu_memory_limit_mib"
    assert said in str(problem)


def test_the_cpu_reports_its_allocator_only_under_the_cap() -> None:
    logical = [{"short_name": "/CPU:0", "device_type": "CPU"}, {"short_name": "/CPU:1", "device_type": "CPU"}]
    assert allocator_devices(logical, DeviceConfig()) == []
    assert allocator_devices(logical, DeviceConfig(cpu_memory_limit_mib=256)) == ["CPU:0"]


def test_a_capped_run_shows_the_cpu_allocators_figures(tmp_path: Path, panel_home: Path) -> None:
    profile = tmp_path / "cap.json"
    profile.write_text('{"version": 1, "cpu_memory_limit_mib": 256}')
    done = subprocess.run([sys.executable, "-m", "tf_device_panel", "run", "memory", "--config", str(profile),
                           "-p", "step_mib=8", "-p", "steps=3", "--json"], cwd=ROOT, capture_output=True, text=True,
                          timeout=180, env=os.environ.copy())
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    outcome = json.loads(done.stdout)
    rows = outcome["result"]["rows"]
    # TensorFlow's own allocator figures, as a GPU's: 8 MiB more in use at each step.
    assert [round(r["current_mib"]) for r in rows[:4]] == [0, 8, 16, 24]
    assert rows[-1]["label"] == "released" and rows[-1]["current_mib"] < 24
    assert max(r["peak_mib"] for r in rows) >= 24
    assert outcome["oom"] is None
    # The live figures went out as tf_memory events for /CPU:0, as a GPU's do (the graphs and the exporter).
    (events_file,) = panel_home.rglob(f"{outcome['run_id']}/events.jsonl")
    live = [json.loads(line) for line in events_file.read_text().splitlines() if '"tf_memory"' in line]
    assert live, "no tf_memory events"
    assert {event["data"]["device"] for event in live} == {"/CPU:0"}
