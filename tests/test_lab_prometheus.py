"""A real Prometheus server (Debian's `prometheus` package) on 127.0.0.1 with a temporary config and storage,
scraping two exporters this test starts: one with the fake NVML's 2 GPUs, one host-only. `machines --json` and
the Qt-free source read back the values the fakes report, and an exporter that is stopped shows as offline."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest
from fake_nvml import GIB
from helpers import ROOT, wait_until
from tf_device_panel.core.lab.exporter import TEST_NVML_ENV
from tf_device_panel.core.lab.machines import MachineStatus, PrometheusSource, SourceError

pytestmark = pytest.mark.slow
PROMETHEUS = shutil.which("prometheus") or ("/usr/bin/prometheus" if os.path.exists("/usr/bin/prometheus") else None)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class Children:
    """Processes this test starts, each ended (SIGTERM, then SIGKILL) when the test ends."""

    def __init__(self) -> None:
        self.started: list[subprocess.Popen[str]] = []

    def start(self, command: list[str], **kwargs: object) -> subprocess.Popen[str]:
        child = subprocess.Popen(command, text=True, **kwargs)  # type: ignore[call-overload]
        self.started.append(child)
        return child

    @staticmethod
    def stop(child: subprocess.Popen[str]) -> None:
        if child.poll() is None:
            child.terminate()
            try:
                child.wait(15)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()
        for stream in (child.stdout, child.stderr):
            if stream is not None:
                stream.close()


@pytest.fixture
def children() -> Iterator[Children]:
    found = Children()
    yield found
    for child in reversed(found.started):
        found.stop(child)


def start_exporter(children: Children, fake_module: str, home: Path) -> tuple[subprocess.Popen[str], str]:
    env = {**os.environ, TEST_NVML_ENV: fake_module, "TF_DEVICE_PANEL_HOME": str(home),
           "PYTHONPATH": os.pathsep.join([str(ROOT / "tests"), os.environ.get("PYTHONPATH", "")])}
    child = children.start([sys.executable, "-m", "tf_device_panel", "exporter", "--listen", "127.0.0.1:0",
                            "--interval", "0.5"], env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    assert child.stdout is not None
    line = child.stdout.readline()
    assert line.startswith("serving http://127.0.0.1:"), f"the exporter did not start: {line!r}"
    return child, line.split()[1].removeprefix("http://").removesuffix("/metrics")


@pytest.fixture
def lab(children: Children, tmp_path: Path) -> Iterator[Callable[[], tuple[str, dict[str, object]]]]:
    if PROMETHEUS is None:
        pytest.skip("no `prometheus` binary on this machine (Debian: apt-get install prometheus; .ci/run does)")
    gpus_child, gpus = start_exporter(children, "exporter_fake_nvml", tmp_path / "home-gpus")
    host_child, host = start_exporter(children, "exporter_no_nvml", tmp_path / "home-host")
    config = tmp_path / "prometheus.yml"
    config.write_text(f"""global:
  scrape_interval: 1s
  scrape_timeout: 900ms
scrape_configs:
  - job_name: tf-device-panel
    static_configs:
      - targets: ["{gpus}", "{host}"]
""", encoding="utf-8")
    port = free_port()
    log = (tmp_path / "prometheus.log").open("w")
    server = children.start([PROMETHEUS, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                             f"--web.listen-address=127.0.0.1:{port}"], stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    yield lambda: (url, {"gpus": gpus, "host": host, "gpus_child": gpus_child, "host_child": host_child,
                         "server": server, "log": tmp_path / "prometheus.log"})
    log.close()


def by_instance(machines: list[MachineStatus]) -> dict[str, MachineStatus]:
    return {m.instance: m for m in machines}


def test_prometheus_reads_back_the_fakes_and_a_stopped_exporter_is_offline(
        lab: Callable[[], tuple[str, dict[str, object]]], children: Children, qtbot) -> None:
    from tf_device_panel.gui.docks.machines_panel import MachinesPanel

    url, parts = lab()
    gpus, host = str(parts["gpus"]), str(parts["host"])
    server = parts["server"]
    assert isinstance(server, subprocess.Popen)
    listening = wait_until(lambda: [c for c in psutil.Process(server.pid).net_connections(kind="inet")
                                    if c.status == psutil.CONN_LISTEN], 60,
                           lambda: Path(str(parts["log"])).read_text()[-2000:])
    assert {c.laddr.ip for c in listening} == {"127.0.0.1"}  # the test's server is not reachable from outside
    source = PrometheusSource(url)

    def both_scraped() -> dict[str, MachineStatus] | None:
        try:
            found = by_instance(source.fetch())
        except SourceError:
            return None  # still starting
        ready = (gpus in found and host in found and found[gpus].online and found[host].online
                 and len(found[gpus].gpus) == 2 and found[host].host_memory_total_bytes is not None)
        return found if ready else None

    found = wait_until(both_scraped, 90, lambda: Path(str(parts["log"])).read_text()[-2000:])
    machine = found[gpus]
    assert [(g.index, g.name, g.uuid) for g in machine.gpus] == [("0", "Fake GPU 0", "GPU-fake-0"),
                                                                  ("1", "Fake GPU 1", "GPU-fake-1")]
    assert [g.memory_used_bytes for g in machine.gpus] == [1 * GIB, 2 * GIB]
    assert [g.memory_total_bytes for g in machine.gpus] == [16 * GIB, 16 * GIB]
    assert [g.utilization_ratio for g in machine.gpus] == [0.42, 0.42]
    assert machine.exporters == ["tfdp"] and machine.name == socket.gethostname()
    assert machine.age_s() is not None and machine.age_s() < 30  # type: ignore[operator]
    assert found[host].gpus == [] and found[host].host_memory_total_bytes == psutil.virtual_memory().total

    done = subprocess.run([sys.executable, "-m", "tf_device_panel", "machines", "--prometheus", url, "--json"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    listed = {m["instance"]: m for m in json.loads(done.stdout)["machines"]}
    assert [g["memory_used_bytes"] for g in listed[gpus]["gpus"]] == [1 * GIB, 2 * GIB]
    assert listed[host]["online"] and listed[host]["gpus"] == []

    history = wait_until(lambda: (h := source.history(gpus, 120)) and len(h.get("gpu0", [])) >= 2 and h, 30)
    assert {value for _, value in history["gpu1"]} == {2 * GIB}
    assert {value for _, value in history["gpu0.total"]} == {16 * GIB}

    panel = MachinesPanel(None, refresh_s=0.5)  # the window's Machines view on the same server
    qtbot.addWidget(panel)
    panel.set_source(PrometheusSource(url))
    try:
        qtbot.waitUntil(lambda: {gpus, host} <= set(panel.tiles), timeout=30_000)
        assert panel.tile_lines()[gpus][2:] == ["gpu0 1.0/16.0 GiB 42%", "gpu1 2.0/16.0 GiB 42%",
                                                panel.tile_lines()[gpus][-1]]
        assert panel.tile_lines()[host][2].startswith("host ")  # no GPU rows: host-only
        dialog = panel.open_machine(gpus)  # what clicking the tile does: graphs from range queries
        assert dialog is not None
        qtbot.waitUntil(lambda: "gpu1" in dialog.series, timeout=30_000)
        assert {value for _, value in dialog.series["gpu1"]} == {2 * GIB}
        dialog.close()

        host_child = parts["host_child"]
        assert isinstance(host_child, subprocess.Popen)
        children.stop(host_child)
        # .get: for a scrape or two the stopped exporter may be missing from the answer before it reads offline
        offline = wait_until(lambda: (m := by_instance(source.fetch()).get(host)) and not m.online and m, 30,
                             "the stopped exporter shows as offline")
        # .get again: the view can miss the stopped exporter for a refresh too, before its tile reads offline
        qtbot.waitUntil(lambda: panel.tile_lines().get(host, ["", "", ""])[2].startswith("OFFLINE: "),
                        timeout=30_000)
    finally:
        panel.stop()
    assert offline.error  # Prometheus's own reason, e.g. "connection refused"
    assert by_instance(source.fetch())[gpus].online
    done = subprocess.run([sys.executable, "-m", "tf_device_panel", "machines", "--prometheus", url],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "OFFLINE" in done.stdout and host in done.stdout, done.stdout
