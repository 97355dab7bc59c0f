"""The telemetry sampler over a fake NVML (CI) and, when a GPU is present, the real one."""

from __future__ import annotations

import logging
import math
import os
import subprocess
import sys
import threading

import numpy as np
import psutil
import pytest
from fake_nvml import FakeGpus, no_library, process
from helpers import read_csv, wait_until
from tf_device_panel.core.devices.nvml import Nvml
from tf_device_panel.core.devices.telemetry import History, Sample, Sampler, Series
from tf_device_panel.core.hub import HandlerFailed


def test_series_is_a_bounded_ring_in_time_order() -> None:
    series = Series(5)
    for t in range(8):
        series.append(float(t), None if t == 6 else t * 10.0)
    times, values = series.arrays()
    assert list(times) == [3, 4, 5, 6, 7] and len(series) == 5
    assert math.isnan(values[3]) and values[-1] == 70
    assert list(series.arrays(since=5)[0]) == [5, 6, 7]
    assert series.last() == 70


def test_history_holds_an_hour_at_the_default_interval() -> None:
    assert History(0.5).capacity >= 7200
    assert History(0.1).capacity >= 36000


def test_two_gpus_with_an_unsupported_field(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeGpus(2, unsupported=("power",))
    fake.processes[0] = [process(os.getpid(), 512), process(4242, None)]
    fake.install(monkeypatch)
    sampler = Sampler(nvml=Nvml())
    sampler.start()
    sampler.stop()
    sampler.set_runtime_pid(os.getpid())
    sample = sampler.sample()
    assert [g.index for g in sample.gpus] == [0, 1]
    first = sample.gpus[0]
    assert first.memory_used_mib == 1024 and first.memory_total_mib == 16384
    assert first.utilization == 42 and first.temperature_c == 55 and first.power_w is None  # N/A, not an error
    assert first.sm_clock_mhz == 1500 and first.error is None
    assert [(p.pid, p.used_mib) for p in first.processes] == [(os.getpid(), 512), (4242, None)]
    values = sample.values()
    assert values["gpu0.runtime_used_mib"] == 512 and values["gpu1.runtime_used_mib"] is None
    assert values["host.runtime_rss_mib"] > 0 and values["host.ram_total_mib"] > 0
    assert [g.pci_bus_id for g in sampler.gpus] == ["00000000:01:00.0", "00000000:02:00.0"]


def test_an_exited_run_process_has_no_reading_rather_than_zero(monkeypatch: pytest.MonkeyPatch) -> None:
    FakeGpus(0).install(monkeypatch)
    sampler = Sampler(nvml=Nvml())
    sampler.start()
    sampler.stop()
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    sampler.set_runtime_pid(child.pid)
    # not reaped yet: a zombie, whose memory reads 0 (the graph used to drop to 0 MiB after every run)
    wait_until(lambda: psutil.Process(child.pid).status() == psutil.STATUS_ZOMBIE, timeout=30)
    assert sampler.sample().values()["host.runtime_rss_mib"] is None
    child.wait()
    assert sampler.sample().values()["host.runtime_rss_mib"] is None  # gone


def test_a_lost_gpu_is_one_bad_row_while_the_other_keeps_updating(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeGpus(2)
    fake.install(monkeypatch)
    sampler = Sampler(nvml=Nvml())
    sampler.start()
    sampler.stop()
    sampler.sample()
    fake.lose(1)
    fake.used[0] = 3 * 2**30
    sample = sampler.sample()
    assert sample.gpus[1].error and "lost" in sample.gpus[1].error and sample.gpus[1].memory_used_mib is None
    assert sample.gpus[0].error is None and sample.gpus[0].memory_used_mib == 3072
    _times, used = sampler.history.series["gpu1.memory_used_mib"].arrays()
    assert used[-2] == 2048 and math.isnan(used[-1])


def test_no_nvml_library_means_host_only_mode(monkeypatch: pytest.MonkeyPatch) -> None:
    no_library(monkeypatch)
    sampler = Sampler(nvml=Nvml())
    sampler.start()
    sampler.stop()
    assert "no NVIDIA driver found" in sampler.note and "host-only" in sampler.note
    sample = sampler.sample()
    assert sample.gpus == [] and sample.host.cpu_percent is not None and sample.host.ram_used_mib > 0


def test_the_sampler_thread_samples_at_its_interval_and_stops(monkeypatch: pytest.MonkeyPatch) -> None:
    FakeGpus(1).install(monkeypatch)
    seen: list[Sample] = []
    sampler = Sampler(interval=0.1, nvml=Nvml())
    sampler.hub.subscribe(seen, Sample, seen.append)
    sampler.start()
    wait_until(lambda: len(seen) >= 5, timeout=10, message=lambda: f"only {len(seen)} samples")
    sampler.stop()
    # stopped means its thread has ended, so no sample can come after stop() returns
    assert "telemetry-sampler" not in {t.name for t in threading.enumerate()}
    assert len(sampler.history.series["gpu0.memory_used_mib"]) >= 5


def test_a_failing_subscriber_is_reported_once_and_nothing_reaches_stdout(
        monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture) -> None:
    FakeGpus(1).install(monkeypatch)
    calls = []

    def broken_listener(sample) -> None:
        calls.append(sample)
        raise RuntimeError("the window went away")

    sampler = Sampler(interval=0.1, nvml=Nvml())
    sampler.hub.subscribe(calls, Sample, broken_listener)
    reported: list[HandlerFailed] = []
    sampler.hub.subscribe(reported, HandlerFailed, reported.append)
    sampler.start()
    try:
        wait_until(lambda: len(calls) >= 3, timeout=10, message=lambda: f"only {len(calls)} calls")
    finally:
        sampler.stop()
    assert "telemetry-sampler" not in {t.name for t in threading.enumerate()}
    assert capfd.readouterr().out == ""  # stdout is the command line's output; a thread must never write there
    failures = [r for r in caplog.records if r.name == "tf_device_panel.core.hub"]
    assert [r.levelno for r in failures] == [logging.ERROR]  # the same failure every tick is logged once
    assert "the window went away" in failures[0].getMessage() and failures[0].exc_info is not None
    assert [failed.handler for failed in reported] == [broken_listener]  # and published once, for the window
    assert len(sampler.history.series["gpu0.memory_used_mib"]) >= 3  # sampling went on


def test_history_exports_csv_that_reads_back(tmp_path) -> None:
    history = History(0.5)
    history.record(100.0, {"gpu0.memory_used_mib": 1024.0, "host.cpu_percent": None})
    history.record(100.5, {"gpu0.memory_used_mib": 2048.0, "host.cpu_percent": 12.5})
    history.mark(100.2, "job-start", "fit started")
    path = tmp_path / "t.csv"
    assert history.to_csv(path) == 4
    back = read_csv(path)
    assert back["gpu0.memory_used_mib"] == [(100.0, 1024.0), (100.5, 2048.0)]
    assert back["host.cpu_percent"] == [(100.0, None), (100.5, 12.5)]
    assert "marker:job-start" in path.read_text()


def _real_nvml() -> Nvml:
    nvml = Nvml()
    if not nvml.init() or not nvml.gpus():
        pytest.skip(f"needs a real NVIDIA GPU and driver ({nvml.message or 'no GPU'})")
    return nvml


@pytest.mark.gpu
def test_real_nvml_reads_every_gpu() -> None:
    nvml = _real_nvml()
    sampler = Sampler(nvml=nvml)
    sampler.start()
    sampler.stop()
    sample = sampler.sample()
    for gpu in sample.gpus:
        print(f"GPU {gpu.index}: {gpu.memory_used_mib:.0f}/{gpu.memory_total_mib:.0f} MiB, util {gpu.utilization}, "
              f"{gpu.temperature_c} °C, {gpu.power_w} W, clocks {gpu.sm_clock_mhz}/{gpu.memory_clock_mhz} MHz, "
              f"processes {gpu.processes}")
        assert gpu.error is None and gpu.memory_total_mib > 0
    assert all(g.pci_bus_id for g in sampler.gpus)


@pytest.mark.gpu
def test_real_gpu_allocation_moves_the_used_value() -> None:
    nvml = _real_nvml()
    torch = pytest.importorskip("torch", reason="allocating on the GPU here uses PyTorch (no TF on the GPU host)")
    sampler = Sampler(nvml=nvml)
    sampler.start()
    sampler.stop()
    before = sampler.sample().gpus[0].memory_used_mib
    block = torch.empty(2 * 2**30, dtype=torch.uint8, device="cuda:0")
    torch.cuda.synchronize()
    after = sampler.sample()
    used = after.gpus[0].memory_used_mib
    mine = [p for p in after.gpus[0].processes or [] if p.pid == os.getpid()]
    print(f"used before {before:.0f} MiB, after allocating 2 GiB {used:.0f} MiB; this process: {mine}")
    assert used - before >= 1900
    del block
    assert np.isfinite(used)


def test_a_sample_that_cannot_be_read_is_skipped_logged_once_and_sampling_goes_on(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    FakeGpus(1).install(monkeypatch)
    sampler = Sampler(interval=0.1, nvml=Nvml())
    failures_left = [3]
    real_host = sampler._host

    def flaky_host():
        if failures_left[0] > 0:
            failures_left[0] -= 1
            raise FileNotFoundError(2, "No such file or directory", "/proc/4242/stat")
        return real_host()

    monkeypatch.setattr(sampler, "_host", flaky_host)
    seen: list[Sample] = []
    sampler.hub.subscribe(seen, Sample, seen.append)
    sampler.start()
    try:
        wait_until(lambda: len(seen) >= 2, timeout=10, message=lambda: f"only {len(seen)} samples")
    finally:
        sampler.stop()
    assert failures_left == [0] and all(s.host.ram_total_mib for s in seen)
    logged = [r for r in caplog.records if "could not be read" in r.getMessage()]
    assert len(logged) == 1 and logged[0].exc_info is not None
