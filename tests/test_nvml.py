"""The NVML layer over the fake pynvml: every failure an N/A, logged once, versions found once per GPU."""

from __future__ import annotations

import logging

import pytest
from fake_nvml import FakeGpus, process
from tf_device_panel.core.devices.nvml import GPU_LOST, Nvml

LOGGER = "tf_device_panel.core.devices.nvml"
V3, V2, V1 = ("nvmlDeviceGetComputeRunningProcesses_v3", "nvmlDeviceGetComputeRunningProcesses_v2",
              "nvmlDeviceGetComputeRunningProcesses")


def started(fake: FakeGpus, monkeypatch: pytest.MonkeyPatch) -> Nvml:
    fake.install(monkeypatch)
    nvml = Nvml()
    assert nvml.init(), nvml.message
    return nvml


def mentioning(caplog: pytest.LogCaptureFixture, text: str, level: int) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == LOGGER and r.levelno == level and text in r.getMessage()]


def test_a_missing_function_reads_as_na_and_is_logged_once(monkeypatch: pytest.MonkeyPatch,
                                                            caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    nvml = started(FakeGpus(2, unsupported=(), missing=("nvmlDeviceGetPowerUsage",)), monkeypatch)
    samples = [nvml.sample(index) for _ in range(3) for index in (0, 1)]
    assert all(s.power_w is None and s.error is None for s in samples)
    assert all(s.temperature_c == 55 and s.memory_used_mib == s.index * 1024 + 1024 for s in samples)
    assert len(mentioning(caplog, "nvmlDeviceGetPowerUsage", logging.WARNING)) == 1


def test_an_unsupported_field_is_none_and_logged_once_per_gpu(monkeypatch: pytest.MonkeyPatch,
                                                              caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    fake = FakeGpus(2, unsupported=("power", "clocks"))
    nvml = started(fake, monkeypatch)
    for _ in range(3):
        for index in (0, 1):
            sample = nvml.sample(index)
            assert sample.power_w is None and sample.sm_clock_mhz is None and sample.memory_clock_mhz is None
            assert sample.utilization == 42 and sample.error is None
    assert fake.calls["nvmlDeviceGetPowerUsage"] == 6  # N/A per tick, still asked: a value may come later
    power = mentioning(caplog, "nvmlDeviceGetPowerUsage", logging.INFO)
    assert sorted(r.getMessage().split(":")[0] for r in power) == ["GPU 0", "GPU 1"]
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]  # expected, so never a warning


def test_a_lost_gpu_is_one_row_and_is_not_asked_again(monkeypatch: pytest.MonkeyPatch,
                                                       caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    fake = FakeGpus(3)
    nvml = started(fake, monkeypatch)
    fake.lose(1)
    fake.used[2] = 5 * 2**30
    first = [nvml.sample(index) for index in range(3)]
    calls_after_first_tick = fake.calls.total()
    second = [nvml.sample(index) for index in range(3)]
    for sample in (first[1], second[1]):
        assert sample.error == GPU_LOST and sample.memory_used_mib is None and sample.processes is None
    assert [s.memory_used_mib for s in second] == [1024, None, 5120] and second[2].error is None
    # The second tick asked only GPUs 0 and 2: six values and one process list each.
    assert fake.calls.total() - calls_after_first_tick == 2 * 7
    assert [g.error for g in nvml.gpus()] == [None, GPU_LOST, None]
    assert nvml.processes(1) is None and nvml.processes(0) == []
    assert len(mentioning(caplog, "GPU 1", logging.WARNING)) == 1


def test_process_list_version_is_found_once_per_gpu(monkeypatch: pytest.MonkeyPatch,
                                                    caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    fake = FakeGpus(2, missing=(V3,))
    fake.processes[1] = [process(4242, 512), process(4343, None)]
    nvml = started(fake, monkeypatch)
    for _ in range(3):
        assert nvml.processes(0) == []
        found = nvml.processes(1)
        assert found is not None and [(p.pid, p.used_mib) for p in found] == [(4242, 512), (4343, None)]
    assert fake.calls[V3] == 2 and fake.calls[V2] == 6 and fake.calls[V1] == 0
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]  # an older driver is no problem


def test_no_process_query_at_all_is_logged_once_and_na(monkeypatch: pytest.MonkeyPatch,
                                                       caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    fake = FakeGpus(1, missing=(V3, V2, V1))
    nvml = started(fake, monkeypatch)
    assert [nvml.processes(0) for _ in range(3)] == [None, None, None]
    assert (fake.calls[V3], fake.calls[V2], fake.calls[V1]) == (1, 1, 3)
    assert len(mentioning(caplog, V1, logging.WARNING)) == 1


@pytest.mark.parametrize("missing, used_mib, v2_calls", [((), 1024, 3), (("nvmlDeviceGetMemoryInfo_v2",), 1324, 1)])
def test_memory_prefers_v2_and_falls_back_to_v1_once(monkeypatch: pytest.MonkeyPatch, missing: tuple[str, ...],
                                                     used_mib: int, v2_calls: int) -> None:
    fake = FakeGpus(1, missing=missing)
    versions: list[object] = []
    real_memory = fake._memory

    def memory(handle: str, version: int | None = None) -> object:
        versions.append(version)
        return real_memory(handle, version)

    monkeypatch.setattr(fake, "_memory", memory)
    nvml = started(fake, monkeypatch)
    assert [nvml.sample(0).memory_used_mib for _ in range(3)] == [used_mib] * 3  # v1 counts reserved memory
    assert sum(1 for v in versions if v) == v2_calls


def test_bytes_from_nvml_become_text(monkeypatch: pytest.MonkeyPatch) -> None:
    nvml = started(FakeGpus(1), monkeypatch)
    assert nvml.driver_version() == "570.86" and nvml.cuda_driver_version() == "12.8"
    gpu = nvml.gpus()[0]
    assert (gpu.name, gpu.uuid, gpu.pci_bus_id) == ("Fake GPU 0", "GPU-fake-0", "00000000:01:00.0")
    assert gpu.memory_total_mib == 16384 and gpu.compute_capability == "8.9" and gpu.error is None


def test_a_process_that_ends_while_it_is_read_has_no_name_and_the_list_is_still_read(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """psutil can let the bare FileNotFoundError of a vanished /proc/PID/stat through (seen in CI: the fake's pid
    4242 was a real process that ended between psutil's two reads)."""
    import psutil

    def vanishing(pid: int) -> psutil.Process:
        raise FileNotFoundError(2, "No such file or directory", f"/proc/{pid}/stat")

    fake = FakeGpus(1)
    fake.processes[0] = [process(4242, 512)]
    nvml = started(fake, monkeypatch)
    monkeypatch.setattr(psutil, "Process", vanishing)
    found = nvml.processes(0)
    assert found is not None and [(p.pid, p.used_mib, p.name) for p in found] == [(4242, 512, "")]
