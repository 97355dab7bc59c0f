"""Job parameters on the command line (issue 32, item 8): a repeated name is refused, the devices a list
parameter names are checked against the profile's before any process starts, and lists are bounded."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import ROOT
from tf_device_panel.core.catalogue import ParamError, get_job
from tf_device_panel.core.client.history import RunHistory

MAX_BENCHMARK_SIZES = 16  # the stated limit (jobs.MAX_BENCHMARK_SIZES)


def cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([sys.executable, "-m", "tf_device_panel", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout, env=os.environ.copy())
    assert "Traceback" not in done.stderr, done.stderr
    return done


def test_a_parameter_given_twice_is_refused_naming_it(panel_home: Path) -> None:
    done = cli("run", "fit", "-p", "epochs=1", "-p", "epochs=2")
    assert done.returncode == 2
    assert done.stderr.strip() == "error: --param 'epochs' is given twice ('1' and '2'); give each parameter once"
    assert not (panel_home / "runs").exists()  # nothing started, nothing recorded


@pytest.mark.parametrize(("devices", "named"), [("/GPU:99", "'/GPU:99' is"),
                                               ("/CPU:0,/CPU:2,cpu:5", "'/CPU:2', 'cpu:5' are")])
def test_devices_not_in_the_profile_are_exit_2_at_once(tmp_path: Path, panel_home: Path, devices: str,
                                                       named: str) -> None:
    profile = tmp_path / "two.json"
    profile.write_text(json.dumps({"version": 1, "cpu_devices": 2}))
    started = time.monotonic()
    done = cli("run", "fit", "--config", str(profile), "-p", f"devices={devices}")
    elapsed = time.monotonic() - started
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith(f"error: job 'fit': devices: {named} not among this run's devices: the profile "
                                  "gives /CPU:0 … /CPU:1 and no GPU"), done.stderr
    assert not (panel_home / "runs").exists(), RunHistory().summaries()  # no TensorFlow process was started
    assert elapsed < 30  # TensorFlow's start alone takes seconds; this answer needs none of it


def test_other_machines_devices_and_a_single_pinned_device_are_left_to_tensorflow() -> None:
    from tf_device_panel.core.cli import check_devices
    from tf_device_panel.core.config import DeviceConfig

    fit = get_job("fit")
    check_devices(fit, fit.resolve(texts={"devices": "/job:worker/replica:0/task:1/device:CPU:7"}), DeviceConfig())
    matmul = get_job("matmul")  # soft placement on a missing device is what this parameter shows
    check_devices(matmul, matmul.resolve(texts={"device": "/GPU:99"}), DeviceConfig())
    with pytest.raises(ParamError):
        check_devices(fit, fit.resolve(texts={"devices": "/job:localhost/replica:0/task:0/device:CPU:1"}),
                      DeviceConfig())


def test_list_parameters_are_bounded_with_a_stated_limit() -> None:
    from tf_device_panel.core.catalogue import MAX_BENCHMARK_SIZES as stated

    assert stated == MAX_BENCHMARK_SIZES
    spec = get_job("benchmark")
    assert f"at most {MAX_BENCHMARK_SIZES}" in next(p.help for p in spec.params if p.name == "sizes")
    spec.resolve(texts={"sizes": ",".join(["8"] * MAX_BENCHMARK_SIZES)})
    with pytest.raises(ParamError) as caught:
        spec.resolve(texts={"sizes": ",".join(["8"] * 10_000)})
    assert caught.value.problems == [("sizes", f"10000 items given, at most {MAX_BENCHMARK_SIZES} allowed (a bound "
                                                "that keeps one run to minutes); give fewer")]
    with pytest.raises(ParamError, match="dtypes: 5 items given, at most 4"):
        spec.resolve(texts={"dtypes": "float32," * 5})
    with pytest.raises(ParamError, match="devices: 65 items given, at most 64"):
        get_job("fit").resolve(texts={"devices": ",".join(f"/CPU:{i}" for i in range(65))})
    assert json.dumps([p.to_json() for p in spec.params])  # the limit travels with the parameter


def test_a_benchmark_of_10000_sizes_is_refused_before_it_starts(panel_home: Path) -> None:
    done = cli("run", "benchmark", "-p", "sizes=" + ",".join(["8"] * 10_000))
    assert done.returncode == 2 and "sizes: 10000 items given, at most 16 allowed" in done.stderr
    assert not (panel_home / "runs").exists()


@pytest.mark.parametrize(("profile", "accepted", "refused"), [
    ({}, "/GPU:0,/GPU:1", "/GPU:2"),                                   # two GPUs, one logical GPU each
    ({"visible_gpus": [1]}, "/GPU:0", "/GPU:1"),                       # TensorFlow renumbers the visible ones
    ({"virtual_gpus": {"0": [1024, 1024, 1024]}}, "/GPU:3", "/GPU:4"),  # 3 logical on GPU 0, 1 on GPU 1
    ({"memory_fraction": 0.5, "cpu_devices": 3}, "/CPU:2,/GPU:1", "/CPU:3"),
])
def test_the_profiles_logical_gpus_are_counted_as_tensorflow_will_make_them(
        monkeypatch: pytest.MonkeyPatch, profile: dict[str, object], accepted: str, refused: str) -> None:
    from tf_device_panel.core import cli
    from tf_device_panel.core.client import machine
    from tf_device_panel.core.config import DeviceConfig, GpuInfo

    monkeypatch.setattr(machine, "nvml_gpu_inventory", lambda: [GpuInfo(0, "A", 81_079), GpuInfo(1, "B", 81_079)])
    config = DeviceConfig.from_json({"version": 1, **profile})
    fit = get_job("fit")
    cli.check_devices(fit, fit.resolve(texts={"devices": accepted}), config)
    with pytest.raises(ParamError, match=f"'{refused}' is not among this run's devices"):
        cli.check_devices(fit, fit.resolve(texts={"devices": refused}), config)
