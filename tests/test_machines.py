"""The Qt-free machines layer: the metric mapping (this panel's exporter, dcgm-exporter, node_exporter), exporters
scraped directly (one stopped: offline with its reason), and clear errors for bad sources."""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Iterator

import pytest
from fake_nvml import GIB, FakeGpus
from helpers import wait_until
from tf_device_panel.core.devices.nvml import Nvml
from tf_device_panel.core.lab.exporter import Exporter
from tf_device_panel.core.lab.machines import (
    NODE_CPU,
    ExporterSource,
    MachineStatus,
    Point,
    PrometheusSource,
    SourceError,
    build_machines,
    machines_text,
    make_source,
)

MIB = 2**20


def point(metric: str, instance: str, value: float, **labels: str) -> Point:
    return Point(metric, {"instance": instance, **labels}, value, 1000.0)


def test_dcgm_and_node_exporter_make_one_machine_per_host() -> None:
    dcgm, node = "gpu07:9400", "gpu07:9100"
    gpu = {"gpu": "0", "UUID": "GPU-abc", "modelName": "NVIDIA A100", "Hostname": "gpu07"}
    points = [point("DCGM_FI_DEV_FB_USED", dcgm, 1024, **gpu), point("DCGM_FI_DEV_FB_FREE", dcgm, 39000, **gpu),
              point("DCGM_FI_DEV_FB_RESERVED", dcgm, 512, **gpu), point("DCGM_FI_DEV_GPU_UTIL", dcgm, 87, **gpu),
              point("node_memory_MemTotal_bytes", node, 64 * GIB), point("node_memory_MemAvailable_bytes", node,
                                                                         48 * GIB)]
    targets = {dcgm: MachineStatus(dcgm, last_sample=990.0), node: MachineStatus(node, last_sample=995.0)}
    [machine] = build_machines(points, targets, {"gpu07": 0.25})
    assert machine.name == "gpu07" and machine.instance == "gpu07" and machine.exporters == ["dcgm", "node"]
    [card] = machine.gpus
    assert (card.index, card.name, card.uuid) == ("0", "NVIDIA A100", "GPU-abc")
    assert card.memory_used_bytes == 1024 * MIB and card.memory_total_bytes == (1024 + 39000 + 512) * MIB
    assert card.utilization_ratio == 0.87
    assert machine.host_memory_total_bytes == 64 * GIB and machine.host_memory_used_bytes == 16 * GIB
    assert machine.host_cpu_utilization_ratio == 0.25 and machine.last_sample == 995.0


def test_node_exporter_joins_the_panel_exporter_on_its_host_and_a_down_target_stands_alone() -> None:
    ours, node, down = "gpu01:9848", "gpu01:9100", "gpu02:9848"
    points = [point("tfdp_gpu_memory_used_bytes", ours, 5 * GIB, gpu="0", name="RTX"),
              point("tfdp_gpu_memory_total_bytes", ours, 24 * GIB, gpu="0", name="RTX"),
              point("tfdp_machine_info", ours, 1, hostname="gpu01.lab"),
              point("tfdp_run_info", ours, 1, run_id="r1", job="fit", status="running"),
              point("node_memory_MemTotal_bytes", node, 32 * GIB), point("node_memory_MemAvailable_bytes", node, GIB)]
    targets = {ours: MachineStatus(ours), node: MachineStatus(node),
               down: MachineStatus(down, online=False, error="connection refused"),
               "localhost:9090": MachineStatus("localhost:9090")}  # Prometheus itself: no machine metrics
    machines = {m.instance: m for m in build_machines(points, targets)}
    assert set(machines) == {ours, down}
    assert machines[ours].name == "gpu01.lab" and machines[ours].exporters == ["node", "tfdp"]
    assert machines[ours].host_memory_used_bytes == 31 * GIB
    assert machines[ours].run == {"run_id": "r1", "job": "fit", "status": "running"}
    assert not machines[down].online and machines[down].error == "connection refused"
    text = "\n".join(machines_text(list(machines.values()), "test", now=1000.0))
    assert "OFFLINE" in text and "gpu02:9848: connection refused" in text and "fit (running)" in text
    assert "gpu0   RTX" in text and "5.0/24.0 GiB" in text


@pytest.fixture
def exporter(monkeypatch: pytest.MonkeyPatch) -> Iterator[Exporter]:
    FakeGpus(2, unsupported=()).install(monkeypatch)
    running = Exporter("127.0.0.1", 0, interval=0.1, nvml=Nvml())
    running.start()
    yield running
    running.stop()


def stopped_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])  # closed again: nothing listens there


def test_exporters_scraped_directly_with_one_offline(exporter: Exporter) -> None:
    gone = f"127.0.0.1:{stopped_port()}"
    source = ExporterSource([exporter.url.removesuffix("/metrics"), gone])
    machines = {m.instance: m for m in source.fetch()}
    ours = machines[f"127.0.0.1:{exporter.port}"]
    assert ours.online and [g.memory_used_bytes for g in ours.gpus] == [1 * GIB, 2 * GIB]
    assert [g.utilization_ratio for g in ours.gpus] == [0.42, 0.42] and ours.host_memory_total_bytes
    assert ours.age_s() is not None and ours.age_s() < 30  # type: ignore[operator]
    assert not machines[gone].online and "refused" in machines[gone].error.lower()
    wait_until(lambda: len(source.fetch()) and len(source.history(ours.instance, 60).get("gpu1", [])) >= 2, 10)
    assert {v for _, v in source.history(ours.instance, 60)["gpu1"]} == {2 * GIB}
    assert source.history(gone, 60) == {}


def test_node_cpu_from_two_direct_scrapes() -> None:
    source = ExporterSource(["http://node:9100"])
    first = [point(NODE_CPU, "node:9100", 100, mode="idle", cpu="0"), point(NODE_CPU, "node:9100", 50, mode="user")]
    second = [point(NODE_CPU, "node:9100", 103, mode="idle", cpu="0"), point(NODE_CPU, "node:9100", 51, mode="user")]
    assert source._node_cpu("node:9100", first) is None  # a counter needs two readings
    assert source._node_cpu("node:9100", second) == pytest.approx(0.25)


@pytest.mark.parametrize(("prometheus", "exporters", "message"), [
    ("ftp://x", None, "expected an http:// or https:// URL"),
    ("http://a b", None, "cannot contain spaces"), ("http://:80", None, "with a host"),
    ("http://h:port", None, "Port could not be cast"), (None, ["http://"], "with a host"),
    ("http://a", ["http://b"], "not both"), (None, None, "name a source")])
def test_bad_sources_are_named(prometheus: str | None, exporters: list[str] | None, message: str) -> None:
    with pytest.raises(SourceError, match=message):
        make_source(prometheus, exporters)


def test_an_unreachable_prometheus_is_one_clear_error() -> None:
    with pytest.raises(SourceError, match=r"cannot reach Prometheus at http://127\.0\.0\.1:\d+: .*refused"):
        PrometheusSource(f"http://127.0.0.1:{stopped_port()}").fetch()


def test_something_that_is_not_prometheus_is_named(exporter: Exporter) -> None:
    with pytest.raises(SourceError, match="HTTP 404"):
        PrometheusSource(exporter.url.removesuffix("/metrics")).fetch()


def test_the_machines_command(exporter: Exporter) -> None:
    base = [sys.executable, "-m", "tf_device_panel", "machines"]
    done = subprocess.run([*base, "--exporter", exporter.url], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "Fake GPU 1" in done.stdout and "2.0/16.0 GiB  42% busy" in done.stdout
    done = subprocess.run([*base, "--prometheus", f"http://127.0.0.1:{stopped_port()}"], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 1 and "error: cannot reach Prometheus" in done.stderr and "Traceback" not in done.stderr
    done = subprocess.run([*base, "--prometheus", "not a url"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "a URL cannot contain spaces" in done.stderr
