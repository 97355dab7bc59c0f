"""The `tf-device-panel` command as a user runs it: real processes, exit codes, no tracebacks."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import psutil
import pytest
from helpers import ROOT, wait_until
from tf_device_panel.core.client.history import RunHistory
from tf_device_panel.core.protocol import events


def cli(*args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([sys.executable, "-m", "tf_device_panel", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout, env=os.environ.copy())
    assert "Traceback" not in done.stderr, done.stderr
    return done


@pytest.fixture
def two_cpus(tmp_path: Path) -> str:
    path = tmp_path / "two.json"
    path.write_text('{"version": 1, "cpu_devices": 2}')
    return str(path)


def test_run_replicate_json(two_cpus: str) -> None:
    done = cli("run", "replicate", "--config", two_cpus, "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert set(report) >= {"job", "status", "result", "placements", "error", "config", "devices",
                           "duration_s", "run_id"}
    assert report["status"] == "ok" and report["error"] is None
    assert report["result"]["matrix"] == [[44, 56], [98, 128]]
    assert {p["short_device"] for p in report["placements"] if p["op_type"] == "MatMul"} == {"/CPU:0", "/CPU:1"}


def test_run_streams_placements_in_text_mode() -> None:
    done = cli("run", "matmul", "--param", "device=/GPU:2")
    assert done.returncode == 0
    assert "soft-placement fallback: MatMul asked for /GPU:2, ran on /CPU:0" in done.stdout
    assert "[22 28]" in done.stdout.replace("  ", " ")


def test_failed_job_exits_1_with_tensorflows_error(tmp_path: Path) -> None:
    profile = tmp_path / "hard.json"
    profile.write_text('{"version": 1, "soft_placement": false}')
    done = cli("run", "matmul", "--config", str(profile), "--param", "device=/GPU:2", "--json")
    assert done.returncode == 1
    report = json.loads(done.stdout)
    assert report["status"] == "error" and report["error"]["type"] == "InvalidArgumentError"


@pytest.mark.parametrize("args, message", [
    (("run", "nope"), "unknown job 'nope'"),
    (("run", "fit", "--param", "epochs=many"), "epochs: expected a whole number"),
    (("run", "fit", "--param", "epochs"), "expected NAME=VALUE"),
    (("run", "matmul", "--param", "colour=red"), "unknown parameter"),
    (("run", "matmul", "--config", "/no/such/profile.json"), "no such file"),
    (("frobnicate",), "invalid choice"),
])
def test_bad_usage_exits_2_with_one_clear_message(args: tuple[str, ...], message: str) -> None:
    done = cli(*args)
    assert done.returncode == 2 and message in done.stderr


def test_validate_lists_every_problem(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"version": 1, "memory_growth": true, "virtual_gpus": {"0": [0]}, "cpu_devices": 0}')
    done = cli("validate", str(bad))
    assert done.returncode == 2
    assert "virtual_gpus['0']" in done.stdout and "cpu_devices" in done.stdout
    good = tmp_path / "good.json"
    good.write_text('{"version": 1, "cpu_devices": 2}')
    assert cli("validate", str(good)).returncode == 0
    broken = tmp_path / "broken.json"
    broken.write_text("{")
    done = cli("validate", str(broken))
    assert done.returncode == 2 and "not valid JSON" in done.stdout
    assert broken.read_text() == "{"


def test_verbose_shows_the_packages_debug_log_on_stderr(two_cpus: str) -> None:
    quiet = cli("validate", two_cpus)
    assert quiet.returncode == 0 and "DEBUG" not in quiet.stderr
    verbose = cli("--verbose", "validate", two_cpus)
    assert verbose.returncode == 0 and verbose.stdout == quiet.stdout  # stdout stays the command's own output
    assert "tf-device-panel DEBUG tf_device_panel.core.devices.nvml: NVML" in verbose.stderr


def test_devices_json_and_nvml_absent(two_cpus: str) -> None:
    done = cli("devices", "--config", two_cpus, "--json")
    assert done.returncode == 0, done.stderr
    info = json.loads(done.stdout)
    assert [d["short_name"] for d in info["logical"]] == ["/CPU:0", "/CPU:1"]
    assert info["nvml"]["available"] is False and info["nvml"]["message"]
    text = cli("devices").stdout
    assert "TensorFlow sees no GPU" in text and "NVML: no NVIDIA driver found" in text


def test_devices_with_a_configuration_tensorflow_rejects(tmp_path: Path) -> None:
    profile = tmp_path / "gpu.json"
    profile.write_text('{"version": 1, "virtual_gpus": {"0": [1024]}}')
    done = cli("devices", "--config", str(profile))
    assert done.returncode == 2 and "TensorFlow sees 0 physical GPU" in done.stderr


def test_jobs_snippet_and_runs(two_cpus: str) -> None:
    jobs = json.loads(cli("jobs", "--json").stdout)
    assert {job["name"] for job in jobs} >= {"matmul", "replicate", "fit", "script"}
    fit = next(job for job in jobs if job["name"] == "fit")
    assert {p["name"] for p in fit["params"]} == {"epochs", "batch_per_replica", "samples", "devices", "model",
                                                  "image_size", "cross_device_ops", "data", "lr_rule", "evaluate"}
    snippet = cli("snippet", "--config", two_cpus).stdout
    assert "LogicalDeviceConfiguration()] * 2" in snippet
    cli("run", "matmul")
    runs = json.loads(cli("runs", "--json").stdout)
    assert runs[0]["job"] == "matmul" and runs[0]["status"] == "ok"


def test_ctrl_c_cancels_the_job_cleanly(tmp_path: Path) -> None:
    process = subprocess.Popen([sys.executable, "-m", "tf_device_panel", "run", "fit", "--param", "epochs=10000",
                                "--json"], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    def training() -> bool:
        # The run history records the job's events as they come (TF_DEVICE_PANEL_HOME is this test's own).
        runs = RunHistory().summaries(limit=1)
        try:
            recorded = RunHistory().events(runs[0].run_id) if runs else []
        except OSError:  # its events file is created just after its summary
            return False
        return any(isinstance(e, events.Progress) and e.done >= 1 for e in recorded)

    try:
        runtime = wait_until(lambda: next(iter(psutil.Process(process.pid).children()), None), timeout=60,
                             message="the command started no runtime")
        wait_until(training, timeout=120, message="the job never started training")
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 130, err  # 128 + SIGINT, as shells report Ctrl+C (issue 32)
    assert json.loads(out)["status"] == "cancelled"
    assert "Traceback" not in err
    assert not runtime.is_running() or runtime.status() == psutil.STATUS_ZOMBIE


def test_jobs_code_and_cluster_config() -> None:
    done = cli("jobs", "--code", "custom-loop")
    assert done.returncode == 0 and "compute_average_loss" in done.stdout and "strategy.reduce" in done.stdout
    done = cli("jobs", "--code", "multi-worker")  # what each worker process runs, not only the orchestration
    assert done.returncode == 0 and "tf.distribute.MultiWorkerMirroredStrategy()" in done.stdout
    done = cli("cluster-config", "--worker", "10.0.0.1:2222", "--worker", "10.0.0.2:2222", "--json")
    tasks = json.loads(done.stdout)
    assert [t["tf_config"]["task"]["index"] for t in tasks] == [0, 1]
    done = cli("cluster-config", "--worker", "10.0.0.1:2222", "--ps", "10.0.0.3:2222")
    assert done.returncode == 2 and "--chief" in done.stderr
    done = cli("cluster-config", "--worker", "nohost")
    assert done.returncode == 2 and "HOST:PORT" in done.stderr


def test_cluster_config_with_a_profile_gives_each_task_its_device_configuration(two_cpus: str, tmp_path: Path) -> None:
    done = cli("cluster-config", "--worker", "10.0.0.1:2222", "--worker", "10.0.0.2:2222", "--config", two_cpus)
    assert done.returncode == 0, done.stderr
    commands = [line for line in done.stdout.splitlines() if "tf_device_panel.core.runproc.cluster_task" in line]
    assert len(commands) == 2 and all(line.endswith(f"--profile {two_cpus}") for line in commands)
    assert f"device configuration in {two_cpus}" in done.stdout
    bad = tmp_path / "bad.json"
    bad.write_text('{"version": 1, "cpu_devices": 0}')
    done = cli("cluster-config", "--worker", "10.0.0.1:2222", "--config", str(bad))
    assert done.returncode == 2 and "cpu_devices" in done.stderr and not done.stdout


def test_a_cluster_task_names_a_bad_device_configuration(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"version": 1, "cpu_devices": "two"}')
    env = {**os.environ, "TF_CONFIG": json.dumps({"cluster": {"worker": ["127.0.0.1:1"]},
                                                  "task": {"type": "worker", "index": 0}})}
    for args, expected in ((["--profile", str(bad)], "cpu_devices"),
                           (["--device-config", "{not json"], "--device-config is not JSON")):
        done = subprocess.run([sys.executable, "-m", "tf_device_panel.core.runproc.cluster_task", "server", *args],
                              cwd=ROOT,
                              env=env,
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 2 and "Traceback" not in done.stderr
        assert expected in done.stderr, done.stderr
