"""The Qt-free app model: the configuration draft and the applied one, the device inventory, and the one telemetry
sampler the window's panels and an exporter share. No Qt, no TensorFlow; NVML faked (tests/fake_nvml.py)."""

from __future__ import annotations

import threading
import urllib.request

import pytest
from fake_nvml import GIB, FakeGpus
from helpers import wait_until
from prometheus_client.parser import text_string_to_metric_families
from tf_device_panel.core.client.app_model import AppModel
from tf_device_panel.core.config import DeviceConfig
from tf_device_panel.core.devices.inventory import DeviceInventory
from tf_device_panel.core.devices.nvml import Nvml
from tf_device_panel.core.devices.telemetry import Sample, Sampler
from tf_device_panel.core.lab.exporter import Exporter
from tf_device_panel.core.listeners import Listeners
from tf_device_panel.core.protocol import events


def sampler_threads() -> int:
    return sum(1 for t in threading.enumerate() if t.name == "telemetry-sampler")


@pytest.fixture
def model(monkeypatch: pytest.MonkeyPatch):
    FakeGpus(2).install(monkeypatch)
    app = AppModel(nvml=Nvml(), interval_s=0.1)
    yield app
    app.stop()


def test_listeners_get_each_value_in_order_until_they_unsubscribe() -> None:
    news: Listeners[int] = Listeners()
    seen: list[tuple[str, int]] = []
    unsubscribe_a = news.subscribe(lambda v: seen.append(("a", v)))
    news.subscribe(lambda v: seen.append(("b", v)))
    news.notify(1)
    unsubscribe_a()
    unsubscribe_a()  # twice is harmless
    news.notify(2)
    assert seen == [("a", 1), ("b", 1), ("b", 2)] and len(news) == 1


def test_the_draft_the_applied_configuration_and_staleness_are_told_to_subscribers(model: AppModel) -> None:
    drafts: list[DeviceConfig] = []
    applied: list[DeviceConfig] = []
    model.draft_changed.subscribe(drafts.append)
    model.applied_changed.subscribe(applied.append)
    assert not model.is_stale  # nothing applied yet: nothing to be stale against
    first = DeviceConfig(memory_growth=True)
    model.mark_applied(first)
    assert model.applied == model.draft == first and not model.is_stale and applied == [first]
    edited = DeviceConfig(memory_growth=True, cpu_devices=3)
    model.set_draft(edited)
    model.set_draft(edited)  # the same draft again is no news
    assert drafts == [first, edited] and model.is_stale
    model.mark_applied(edited)
    assert not model.is_stale and applied == [first, edited]


def test_a_ready_run_gives_one_inventory_from_nvmls_gpus_read_once(model: AppModel) -> None:
    model.start()
    assert [g.pci_bus_id for g in model.nvml_gpus] == ["00000000:01:00.0", "00000000:02:00.0"]
    told: list[DeviceInventory] = []
    model.inventory_changed.subscribe(told.append)
    ready = events.Ready(pid=7, physical=(
        {"name": "/physical_device:GPU:0", "device_type": "GPU", "index": 0},
        {"name": "/physical_device:GPU:1", "device_type": "GPU", "index": 1}), gpu_devices=(
        {"logical": "/GPU:0", "physical": 0, "memory_mb": 1024, "name": "Fake GPU 1", "pci_bus_id": "0000:02:00.0"},
        {"logical": "/GPU:1", "physical": 1, "memory_mb": 1024, "name": "Fake GPU 0", "pci_bus_id": "0000:01:00.0"}))
    inventory = model.runtime_ready(ready)
    assert told == [inventory] and model.inventory is inventory
    assert [(g.tf_index, g.nvml_index) for g in inventory.gpus] == [(0, 1), (1, 0)]
    assert [g.memory_total_mib for g in inventory.gpus] == [16 * 1024, 16 * 1024]


def test_the_window_and_an_exporter_share_one_sampler(model: AppModel) -> None:
    """One sampling thread serves the memory graphs and the exporter: a scrape shows the GPUs the window's
    sampler reads, and stopping the exporter leaves the window's sampler running."""
    before = sampler_threads()
    model.start()
    graphs: list[Sample] = []
    model.subscribe_samples(graphs.append)
    exporter = Exporter("127.0.0.1", 0, sampler=model.sampler)
    exporter.start()
    try:
        assert exporter.sampler is model.sampler and sampler_threads() == before + 1
        with urllib.request.urlopen(exporter.url, timeout=10) as response:
            text = response.read().decode()
        used = {s.labels["gpu"]: s.value for family in text_string_to_metric_families(text)
                for s in family.samples if s.name == "tfdp_gpu_memory_used_bytes"}
        assert used == {"0": 1 * GIB, "1": 2 * GIB}
    finally:
        exporter.stop()
    assert model.sampler.running
    seen = len(graphs)
    wait_until(lambda: len(graphs) > seen, timeout=10, message="the window's graphs got no sample after the "
                                                               "exporter stopped")
    model.stop()
    assert sampler_threads() == before and not model.sampler.running


def test_a_failing_subscriber_does_not_keep_the_others_from_their_samples(monkeypatch: pytest.MonkeyPatch) -> None:
    FakeGpus(1).install(monkeypatch)
    got: list[Sample] = []

    def broken(_sample: Sample) -> None:
        raise RuntimeError("a closed panel")

    sampler = Sampler(broken, interval=0.1, nvml=Nvml())
    sampler.subscribe(got.append)
    sampler.start()
    sampler.start()  # a second owner's start is no second thread
    try:
        assert sampler_threads() == 1
        wait_until(lambda: len(got) >= 3, timeout=10, message=lambda: f"only {len(got)} samples")
    finally:
        sampler.stop()
    assert not sampler.running
