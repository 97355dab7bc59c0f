"""The exporter's scrape cost: one HTTP GET /metrics with 8 fake GPUs (each with 2 processes) and a run in
progress, median of many, against a bare prometheus-client registry's scrape measured the same way in the same
run (its default process, platform and GC collectors, served by start_http_server). Target: ≤ 10 ms median.

Then 200 scrapes at once (200 threads, each its own connection, released together): the slowest answer's time,
target under 1 s; with socketserver's default listen backlog of 5 most of them waited for SYN retries (1 s, 3 s, …)
and some timed out at 10 s."""

from __future__ import annotations

import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from fake_nvml import FakeGpus, process
from figures import report
from prometheus_client import CollectorRegistry, GCCollector, PlatformCollector, ProcessCollector, start_http_server
from tf_device_panel.core.client.history import RunHistory
from tf_device_panel.core.devices.nvml import Nvml
from tf_device_panel.core.lab.exporter import Exporter
from tf_device_panel.core.protocol import events

TARGET_MS = 10.0


class Patcher:
    """The part of pytest's monkeypatch that FakeGpus.install uses."""

    def setattr(self, target: object, name: str, value: object) -> None:
        setattr(target, name, value)


def median_get(url: str, scrapes: int) -> tuple[float, int]:
    times, size = [], 0
    for _ in range(scrapes):
        started = time.perf_counter()
        with urllib.request.urlopen(url, timeout=10) as response:
            size = len(response.read())
        times.append(time.perf_counter() - started)
    return statistics.median(times), size


def burst(url: str, clients: int = 200) -> tuple[float, int]:
    """(seconds until the slowest of `clients` simultaneous scrapes was answered, how many failed)."""
    start = threading.Barrier(clients + 1)
    times: list[float] = []
    failures = [0]

    def one() -> None:
        start.wait()
        began = time.perf_counter()
        try:
            with urllib.request.urlopen(url, timeout=10) as response:
                response.read()
            times.append(time.perf_counter() - began)
        except OSError:
            failures[0] += 1

    threads = [threading.Thread(target=one) for _ in range(clients)]
    for thread in threads:
        thread.start()
    start.wait()
    for thread in threads:
        thread.join()
    return max(times, default=float("nan")), failures[0]


def main(scrapes: int = 300) -> None:
    gpus = FakeGpus(8, unsupported=())
    for index in range(8):
        gpus.processes[index] = [process(1000 + index, 2048), process(2000 + index, 512)]
    gpus.install(Patcher())
    with tempfile.TemporaryDirectory(prefix="tfdp-bench-") as home:
        history = RunHistory(Path(home))
        run = history.new_run("fit", {}, {"version": 1, "visible_gpus": list(range(8))}, None)
        for index in range(8):
            run.append(events.TfMemory(device=f"/GPU:{index}", current_mib=900.0, peak_mib=1000.0))
        exporter = Exporter("127.0.0.1", 0, interval=1.0, nvml=Nvml(), history=history)
        exporter.start()
        bare = CollectorRegistry()
        ProcessCollector(registry=bare)
        PlatformCollector(registry=bare)
        GCCollector(registry=bare)
        bare_server, bare_thread = start_http_server(0, "127.0.0.1", registry=bare)
        try:
            bare_url = f"http://127.0.0.1:{bare_server.server_address[1]}/metrics"
            median_get(exporter.url, 20)  # warm-up: connections, imports, caches
            median_get(bare_url, 20)
            ours, our_size = median_get(exporter.url, scrapes)
            reference, reference_size = median_get(bare_url, scrapes)
            slowest, failed = burst(exporter.url)
        finally:
            exporter.stop()
            run.finish(status="ok")
            bare_server.shutdown()
            bare_server.server_close()
            bare_thread.join(5)
    report("exporter scrape, 8 fake GPUs × 2 processes + a run", ours * 1000, TARGET_MS, unit="ms",
           detail=f"median of {scrapes} ({our_size} bytes); a bare prometheus-client registry "
                  f"{reference * 1000:.2f} ms ({reference_size} bytes), {ours / reference:.2f}×")
    report("200 simultaneous scrapes: the slowest answer", slowest if failed == 0 else float("inf"), 1.0,
           unit="s", detail=f"{failed} failed")


if __name__ == "__main__":
    main()
