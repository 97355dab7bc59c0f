"""Every job's parameters are checked before TensorFlow starts, by one check the window, the command line and the
run process share (issue 43, item 4): `run fit-batch -p device=/CPU:1` exited 1 after 6–8 s with a traceback
fragment (`File ".../training.py", line 30, in pick_devices`), and `-p device=/GPU:0` without a GPU advised
memory growth, whose following gave an IndexError with its `~~~~^^^^` lines."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from helpers import ROOT
from job_helpers import run_job
from tf_device_panel.core import cli
from tf_device_panel.core.catalogue import JOBS, Param, ParamError, RunDevices, get_job, profile_devices
from tf_device_panel.core.catalogue.params import BESIDE, RUN
from tf_device_panel.core.client import machine
from tf_device_panel.core.client.client_job import ClientJob
from tf_device_panel.core.config import DeviceConfig, GpuInfo, Kind
from tf_device_panel.core.protocol import events

TRACEBACK_MARKS = ('File "', "Traceback", "^^^^", "~~~~")


def bad_values(param: Param) -> list[str]:
    """Values each of a parameter's kind must refuse (a single device only where it must exist)."""
    kind = param.kind
    values = {Kind.COUNT: ["-1", "1.5", "abc", ""], Kind.NUMBER: ["abc", "nan", "inf", ""],
              Kind.TOGGLE: ["maybe"], Kind.CHOICE: ["nope", ""], Kind.ARGS: ['a "b'],
              Kind.COUNTS: ["0", "a", ",,"], Kind.CHOICES: ["float8", ","],
              Kind.DEVICE: ["/FOO:0", "/CPU:99999999999"],
              Kind.DEVICES: ["/CPU:0,/CPU:0", "/FOO:1", "/GPU:7", "/CPU:3"],
              # An empty path is refused unless it means something (fit-batch's script: the built-in model).
              Kind.PATH: ["/no/such/file.py", ""] if param.default == "" and not param.empty_means
              else ["/no/such/file.py"]}[kind]
    if param.maximum is not None and kind is Kind.COUNT:
        values.append(str(int(param.maximum) + 1))
    if param.minimum is not None and kind.is_number:
        values.append(str(param.minimum - 1))
    if kind is Kind.DEVICE and param.device_scope in (RUN, BESIDE):
        values += ["/GPU:7", "/CPU:1"]
    return values


SWEEP = [(job, param.name, value) for job, spec in JOBS.items() for param in spec.params
         for value in bad_values(param)]


def test_every_job_declares_where_its_devices_must_be() -> None:
    (fit_batch_device,) = [p for p in get_job("fit-batch").params if p.name == "device"]
    assert fit_batch_device.device_scope == BESIDE  # its runs are processes of their own
    assert {p.device_scope for p in get_job("memory").params if p.kind is Kind.DEVICE} == {RUN}
    assert {p.device_scope for p in get_job("matmul").params} == {"anywhere"}  # soft placement is the point


@pytest.mark.parametrize(("job", "name", "value"), SWEEP, ids=[f"{j}-{n}={v!r}" for j, n, v in SWEEP])
def test_a_bad_value_of_every_parameter_is_refused_by_the_command_line_before_anything_starts(
        job: str, name: str, value: str, panel_home: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    def started(*args: Any, **kwargs: Any) -> None:
        raise AssertionError(f"a run process was started for {job} {name}={value!r}")

    monkeypatch.setattr(cli, "run_job_once", started)  # refused before any process: nothing may start
    monkeypatch.setattr(machine, "nvml_gpu_inventory", lambda: None)  # this machine: no GPU, as CI has
    assert cli.main(["run", job, "-p", f"{name}={value}"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") <= 2, err
    assert name in err or job == "script", err  # the script's own check names the file
    assert not any(mark in err for mark in TRACEBACK_MARKS), err


NO_GPU = RunDevices(cpus=1, gpus=0, machine_gpus=0, no_gpu_reason="NVML sees no GPU")


@pytest.mark.parametrize(("job", "params", "said"), [
    ("fit-batch", {"device": "/CPU:1"}, "device: '/CPU:1': the runs this job starts are processes of their own "
                                        "with one logical CPU, /CPU:0"),
    ("fit-batch", {"device": "/GPU:0"}, "device: '/GPU:0': this machine has no GPU (NVML sees no GPU); use /CPU:0"),
    ("memory", {"device": "/CPU:1"}, "device: '/CPU:1' is not among this run's devices: the profile gives /CPU:0 "
                                     "and no GPU (NVML sees no GPU); pick one of those"),
    ("benchmark", {"devices": "/CPU:0,/GPU:1"}, "devices: '/GPU:1' is not among this run's devices"),
])
def test_the_shared_check_says_where_the_devices_are(job: str, params: dict[str, str], said: str) -> None:
    spec = get_job(job)
    with pytest.raises(ParamError) as refused:
        spec.check_devices(spec.resolve(texts=params), NO_GPU)
    assert "; ".join(f"{n}: {m}" for n, m in refused.value.problems).startswith(said), refused.value.problems


def test_a_gpu_for_runs_beside_is_taken_whatever_the_profiles_memory_settings() -> None:
    # fit-batch runs in the panel's process (in_client) and holds no GPU memory, so a profile without memory
    # growth leaves the runs it starts the whole GPU: on an H200 it was refused for that ("turn memory growth
    # on"), which a user sizing a batch on a default profile could not see a reason for.
    fit_batch = get_job("fit-batch")
    assert fit_batch.in_client and not any(spec.in_client for spec in JOBS.values() if spec is not fit_batch)
    one_gpu = [GpuInfo(0, "H100")]
    for config in (DeviceConfig(), DeviceConfig(memory_growth=True), DeviceConfig(memory_fraction=0.5)):
        devices = profile_devices(config, one_gpu)
        fit_batch.check_devices(fit_batch.resolve(texts={"device": "/GPU:0"}), devices)
        with pytest.raises(ParamError, match="this machine's one GPU is /GPU:0"):
            fit_batch.check_devices(fit_batch.resolve(texts={"device": "/GPU:1"}), devices)
    fit_batch.check_devices(fit_batch.resolve(texts={"device": ""}), profile_devices(DeviceConfig(), one_gpu))


def test_a_client_job_makes_the_same_check_before_its_work_starts() -> None:
    # fit-batch runs in the panel's process (a client job): what reaches it unchecked is refused there, in the
    # command line's words, before any run starts.
    seen: list[events.Event] = []
    job = ClientJob(DeviceConfig(), on_event=seen.append)
    job.start()
    job.submit("fit-batch", {"device": "/CPU:1"})
    job.stop(timeout=30)
    (error,) = [e for e in seen if isinstance(e, events.Error)]
    assert error.error_type == "ParamError", error
    assert error.message.startswith("device: '/CPU:1': the runs this job starts are processes of their own"), error
    assert not [e for e in seen if isinstance(e, events.Progress)]  # the search itself never began
    assert [e.status for e in seen if isinstance(e, events.JobFinished)] == ["error"]


@pytest.mark.parametrize(("job", "params", "said"), [
    ("memory", {"device": "/GPU:0"}, "device: '/GPU:0' is not among this run's devices: this run has /CPU:0 and no "
                                     "GPU"),
])
def test_the_run_process_makes_the_same_check_before_the_job_starts(job: str, params: dict[str, str],
                                                                   said: str) -> None:
    # What the window or another client might hand over unchecked: refused by the run process, in the same words.
    result, error, seen = run_job(DeviceConfig(log_placement=False), job, params)
    assert result is None and error is not None
    assert error.error_type == "ParamError" and error.message.startswith(said), error
    assert not error.traceback and not any(mark in error.message for mark in TRACEBACK_MARKS)
    assert not [e for e in seen if getattr(e, "type", "") == "progress"]  # the job itself never began


def test_the_window_refuses_a_device_the_applied_profile_lacks(qtbot: Any) -> None:
    from tf_device_panel.core.client.session import Session
    from tf_device_panel.gui.docks.runs_panel import RunsPanel

    session = Session()
    session.set("applied", DeviceConfig())
    panel = RunsPanel(session=session)
    qtbot.addWidget(panel)
    panel.set_can_run(True)
    panel.select_job("memory")
    panel.load_params("memory", {"device": "/CPU:1"})
    panel.show()
    requested: list[Any] = []
    panel.runRequested.connect(lambda *args: requested.append(args))
    panel.run_button.click()
    qtbot.waitUntil(panel.form_error.isVisible)
    assert panel.form_error.text().startswith("Device: '/CPU:1' is not among this run's devices: the applied "
                                              "configuration gives /CPU:0 and no GPU"), panel.form_error.text()
    assert requested == []


@pytest.mark.parametrize(("device", "said"), [
    ("/CPU:1", "error: job 'fit-batch': device: '/CPU:1': the runs this job starts are processes of their own"),
    ("/GPU:0", "error: job 'fit-batch': device: '/GPU:0': this machine has no GPU"),
])
def test_fit_batch_on_a_device_it_cannot_use_is_exit_2_in_words(tmp_path: Path, device: str, said: str) -> None:
    env = {**os.environ, "TF_DEVICE_PANEL_HOME": str(tmp_path / "home")}
    done = subprocess.run([sys.executable, "-m", "tf_device_panel", "run", "fit-batch", "-p", f"device={device}"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 2 and done.stderr.startswith(said), done.stderr
    assert not any(mark in done.stderr for mark in TRACEBACK_MARKS), done.stderr
    assert not (tmp_path / "home" / "runs").exists()  # no run started


def test_fit_batch_on_a_gpu_is_allowed_whether_the_profile_hides_the_gpus_or_not(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from fake_nvml import FakeGpus
    from tf_device_panel.core.devices import nvml

    FakeGpus(count=1).install(monkeypatch)
    monkeypatch.setattr(nvml, "_shared", None)
    fit_batch = get_job("fit-batch")
    params = fit_batch.resolve(texts={"device": "/GPU:0"})
    cli.check_devices(fit_batch, params, DeviceConfig(visible_gpus=[]))  # not refused
    cli.check_devices(fit_batch, params, DeviceConfig())  # nor with the GPU whole: its own process hides it


def test_the_command_line_asks_nvml_only_when_a_parameter_names_a_device(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_inventory() -> None:
        raise AssertionError("NVML asked for a run whose parameters name no device to check")

    monkeypatch.setattr(machine, "nvml_gpu_inventory", no_inventory)
    matmul = get_job("matmul")
    cli.check_devices(matmul, matmul.resolve(texts={}), DeviceConfig())
    cli.check_devices(matmul, matmul.resolve(texts={"device": "/GPU:3"}), DeviceConfig())  # anywhere: unchecked
    fit_batch = get_job("fit-batch")
    cli.check_devices(fit_batch, fit_batch.resolve(texts={}), DeviceConfig())
    with pytest.raises(AssertionError, match="NVML asked"):
        cli.check_devices(fit_batch, fit_batch.resolve(texts={"device": "/CPU:0"}), DeviceConfig())
