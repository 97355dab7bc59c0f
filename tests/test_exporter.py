"""The Prometheus exporter: exposition text (parsed with prometheus-client's own parser) for normal fake GPUs,
a NotSupported field, a lost GPU and no NVML; the panel's own run metrics from the history folder; only GET
/metrics is served; the command listens only where it is told and says clearly why it cannot."""

from __future__ import annotations

import logging
import os
import select
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest
from fake_nvml import GIB, FakeGpus, no_library, process
from helpers import ROOT, wait_until
from prometheus_client.parser import text_string_to_metric_families
from tf_device_panel.core.client.history import RunHistory
from tf_device_panel.core.devices.nvml import Nvml
from tf_device_panel.core.lab import exporter as exporter_module
from tf_device_panel.core.lab.exporter import Exporter, ExporterError, _QuietHandler, parse_listen
from tf_device_panel.core.protocol import events

Samples = dict[str, list[tuple[dict[str, str], float]]]


def scrape(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as response:
        assert response.status == 200
        return str(response.read().decode())


def parse(text: str) -> Samples:
    """Sample name -> [(labels, value)], from the library's parser (which raises on invalid text)."""
    found: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found.setdefault(sample.name, []).append((sample.labels, sample.value))
    return found


def by_gpu(samples: Samples, name: str) -> dict[str, float]:
    return {labels["gpu"]: value for labels, value in samples.get(name, [])}


@pytest.fixture
def start_exporter() -> Iterator[Callable[..., Exporter]]:
    started: list[Exporter] = []

    def start(**kwargs: object) -> Exporter:
        exporter = Exporter("127.0.0.1", 0, interval=0.1, nvml=Nvml(), **kwargs)  # type: ignore[arg-type]
        exporter.start()
        started.append(exporter)
        return exporter

    yield start
    for exporter in started:
        exporter.stop()


def test_fake_gpus_as_metrics_with_their_labels(monkeypatch: pytest.MonkeyPatch,
                                                start_exporter: Callable[..., Exporter]) -> None:
    gpus = FakeGpus(2, unsupported=())
    gpus.processes[1] = [process(os.getpid(), 300)]
    gpus.install(monkeypatch)
    samples = parse(scrape(start_exporter().url))

    assert by_gpu(samples, "tfdp_gpu_memory_used_bytes") == {"0": 1 * GIB, "1": 2 * GIB}
    assert by_gpu(samples, "tfdp_gpu_memory_total_bytes") == {"0": 16 * GIB, "1": 16 * GIB}
    assert by_gpu(samples, "tfdp_gpu_utilization_ratio") == {"0": 0.42, "1": 0.42}
    assert by_gpu(samples, "tfdp_gpu_temperature_celsius") == {"0": 55, "1": 55}
    assert by_gpu(samples, "tfdp_gpu_power_watts") == {"0": 70, "1": 70}
    assert by_gpu(samples, "tfdp_gpu_sm_clock_hertz") == {"0": 1.5e9, "1": 1.5e9}
    assert by_gpu(samples, "tfdp_gpu_memory_clock_hertz") == {"0": 6e9, "1": 6e9}
    labels = samples["tfdp_gpu_memory_used_bytes"][1][0]
    assert labels == {"gpu": "1", "uuid": "GPU-fake-1", "pci_bus_id": "00000000:02:00.0", "name": "Fake GPU 1"}
    [(process_labels, used)] = samples["tfdp_gpu_process_memory_used_bytes"]
    assert used == 300 * 2**20
    assert process_labels["pid"] == str(os.getpid()) and process_labels["gpu"] == "1"
    assert process_labels["process"] == psutil.Process().name()
    [(build, _)] = samples["tfdp_build_info"]
    assert build["driver"] == "570.86" and build["cuda"] == "12.8" and build["version"]
    assert samples["tfdp_nvml_available"] == [({}, 1.0)]
    assert "tfdp_nvml_read_errors_total" not in samples  # nothing failed
    [(_, total)] = samples["tfdp_host_memory_total_bytes"]
    assert total == psutil.virtual_memory().total
    [(_, cpu)] = samples["tfdp_host_cpu_utilization_ratio"]
    assert 0.0 <= cpu <= 1.0
    assert "tfdp_run_info" not in samples  # no panel run goes


def test_a_not_supported_field_is_left_out_and_counted(monkeypatch: pytest.MonkeyPatch,
                                                       start_exporter: Callable[..., Exporter]) -> None:
    FakeGpus(2, unsupported=("power",)).install(monkeypatch)
    url = start_exporter().url
    samples = parse(scrape(url))
    assert "tfdp_gpu_power_watts" not in samples
    assert by_gpu(samples, "tfdp_gpu_temperature_celsius") == {"0": 55, "1": 55}

    def power_errors() -> dict[str, float]:
        errors = parse(scrape(url))["tfdp_nvml_read_errors_total"]
        return {labels["gpu"]: value for labels, value in errors if labels["field"] == "power"}

    first = power_errors()
    assert set(first) == {"0", "1"} and min(first.values()) >= 1
    wait_until(lambda: power_errors()["0"] > first["0"], 10, "the counter grows with each sample that fails")


def test_a_lost_gpu_drops_its_series_and_the_others_stay(monkeypatch: pytest.MonkeyPatch,
                                                        start_exporter: Callable[..., Exporter]) -> None:
    gpus = FakeGpus(2, unsupported=())
    gpus.install(monkeypatch)
    url = start_exporter().url
    assert set(by_gpu(parse(scrape(url)), "tfdp_gpu_memory_used_bytes")) == {"0", "1"}
    gpus.lose(1)
    samples = wait_until(lambda: (s := parse(scrape(url))) and
                         set(by_gpu(s, "tfdp_gpu_memory_used_bytes")) == {"0"} and s, 10, "GPU 1's series dropped")
    for name in ("tfdp_gpu_utilization_ratio", "tfdp_gpu_temperature_celsius", "tfdp_gpu_sm_clock_hertz"):
        assert set(by_gpu(samples, name)) == {"0"}
    lost = [labels for labels, _ in samples["tfdp_nvml_read_errors_total"] if labels["gpu"] == "1"]
    assert lost, "the read that found GPU 1 lost is counted"


def test_without_nvml_the_host_metrics_remain(monkeypatch: pytest.MonkeyPatch,
                                              start_exporter: Callable[..., Exporter]) -> None:
    no_library(monkeypatch)
    samples = parse(scrape(start_exporter().url))
    assert samples["tfdp_nvml_available"] == [({}, 0.0)]
    assert not [name for name in samples if name.startswith("tfdp_gpu_") and samples[name]]
    assert samples["tfdp_host_memory_used_bytes"][0][1] > 0
    [(build, _)] = samples["tfdp_build_info"]
    assert build["driver"] == "" and build["cuda"] == ""


def test_the_run_in_progress_its_configuration_and_tf_allocator(monkeypatch: pytest.MonkeyPatch, panel_home: Path,
                                                                start_exporter: Callable[..., Exporter]) -> None:
    no_library(monkeypatch)
    history = RunHistory()
    finished = history.new_run("matmul", {}, {"version": 1}, None)
    finished.finish(status="ok")
    recorder = history.new_run("memory", {"steps": 4}, {"version": 1, "memory_growth": True, "visible_gpus": [0, 1],
                                                        "virtual_gpus": {"0": [1024, 2048]}}, None)
    url = start_exporter().url
    recorder.append(events.TfMemory(device="/GPU:0", current_mib=100.0, peak_mib=150.0))
    recorder.append(events.TfMemory(device="/GPU:0", current_mib=120.0, peak_mib=150.0))
    recorder.append(events.TfMemory(device="/GPU:1", current_mib=8.0, peak_mib=9.5))

    def allocator() -> dict[str, float]:
        found = parse(scrape(url)).get("tfdp_tf_allocator_current_bytes", [])
        return {labels["device"]: value for labels, value in found}

    wait_until(lambda: allocator() == {"/GPU:0": 120 * 2**20, "/GPU:1": 8 * 2**20}, 10, allocator)
    samples = parse(scrape(url))
    assert {labels["device"]: v for labels, v in samples["tfdp_tf_allocator_peak_bytes"]} == {
        "/GPU:0": 150 * 2**20, "/GPU:1": 9.5 * 2**20}
    [(run, _)] = samples["tfdp_run_info"]
    assert run == {"run_id": recorder.run_id, "job": "memory", "status": "running"}
    [(config, _)] = samples["tfdp_device_config_info"]
    assert config["memory_growth"] == "true" and config["visible_gpus"] == "0,1"
    assert config["virtual_gpus"] == "0=1024,2048" and config["memory_fraction"] == ""

    recorder.finish(status="ok")
    wait_until(lambda: "tfdp_run_info" not in parse(scrape(url)), 10, "a finished run is no longer current")
    assert "tfdp_tf_allocator_current_bytes" not in parse(scrape(url))


def test_only_get_metrics_is_served(monkeypatch: pytest.MonkeyPatch, start_exporter: Callable[..., Exporter]) -> None:
    no_library(monkeypatch)
    base = start_exporter().url.removesuffix("/metrics")
    for path in ("/", "/favicon.ico", "/metrics/", "/metricsx", "/debug", "/../metrics2"):
        with pytest.raises(urllib.error.HTTPError) as caught:
            urllib.request.urlopen(base + path, timeout=10)
        assert caught.value.code == 404, path
    for method in ("POST", "PUT", "DELETE", "HEAD", "OPTIONS"):
        request = urllib.request.Request(base + "/metrics", data=None if method in ("HEAD", "OPTIONS") else b"x",
                                         method=method)
        with pytest.raises(urllib.error.HTTPError) as caught:
            urllib.request.urlopen(request, timeout=10)
        assert caught.value.code == 405, method
    assert "tfdp_build_info" in scrape(base + "/metrics")


@pytest.mark.parametrize(("text", "expected"), [
    ("127.0.0.1:9848", ("127.0.0.1", 9848)), (":9000", ("127.0.0.1", 9000)), ("[::1]:80", ("::1", 80)),
    ("0.0.0.0:0", ("0.0.0.0", 0))])
def test_listen_addresses(text: str, expected: tuple[str, int]) -> None:
    assert parse_listen(text) == expected


@pytest.mark.parametrize(("text", "message"), [
    ("9848", "expected HOST:PORT"), ("host:http", "must be a number"), ("h:70000", "0–65535"),
    ("::1:80", "in brackets")])
def test_bad_listen_addresses_are_named(text: str, message: str) -> None:
    with pytest.raises(ExporterError, match=message):
        parse_listen(text)


def exporter_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "tf_device_panel", "exporter", *args]


def test_the_command_listens_only_where_told_and_stops_on_sigterm(tmp_path: Path) -> None:
    child = subprocess.Popen(exporter_command("--listen", "127.0.0.1:0", "--interval", "0.5"),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path)
    try:
        assert child.stdout is not None
        line = child.stdout.readline()
        assert line.startswith("serving http://127.0.0.1:"), line
        url = line.split()[1]
        listening = [c for c in psutil.Process(child.pid).net_connections(kind="inet")
                     if c.status == psutil.CONN_LISTEN]
        assert [(c.laddr.ip, c.laddr.port) for c in listening] == [("127.0.0.1", int(url.rsplit(":", 1)[1]
                                                                                    .split("/")[0]))]
        assert "tfdp_host_memory_total_bytes" in scrape(url)
        child.terminate()
        assert child.wait(15) == 0
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()


def test_the_command_names_what_it_cannot_do(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        for args, message in (
                (("--listen", f"127.0.0.1:{port}"), f"port {port} on 127.0.0.1 is in use"),
                (("--listen", "nonsense"), "expected HOST:PORT"),
                (("--listen", "192.0.2.1:0"), "192.0.2.1 is not an address of this machine"),
                (("--interval", "0"), "--interval 0: must be between 0.1 and 10 s"),
                (("--interval", "fast"), "expected seconds"),
                (("--listen", "127.0.0.1:0", "--certfile", str(tmp_path / "none.pem"), "--keyfile",
                  str(tmp_path / "none.key")), "cannot load the TLS certificate"),
                (("--listen", "127.0.0.1:0", "--certfile", "x.pem"), "TLS needs both --certfile and --keyfile")):
            done = subprocess.run(exporter_command(*args), capture_output=True, text=True, timeout=60,
                                  cwd=ROOT)
            assert done.returncode == 2, (args, done.stderr)
            assert message in done.stderr, (args, done.stderr)
            assert "Traceback" not in done.stderr


def test_tls_with_a_certificate_and_key(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                        start_exporter: Callable[..., Exporter]) -> None:
    import shutil
    import ssl

    if shutil.which("openssl") is None:
        pytest.skip("no openssl command to make a test certificate")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=localhost",
                    "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True, timeout=60)
    no_library(monkeypatch)
    exporter = start_exporter(certfile=str(cert), keyfile=str(key))
    assert exporter.url.startswith("https://127.0.0.1:")
    trusted = ssl.create_default_context(cafile=str(cert))
    # a client that connects and never starts its handshake must not hold up the others
    with socket.create_connection(("127.0.0.1", exporter.port), timeout=10), \
            urllib.request.urlopen(exporter.url, context=trusted, timeout=5) as response:
        assert "tfdp_build_info" in response.read().decode()
    with pytest.raises((urllib.error.URLError, ConnectionError)):  # plain HTTP gets no metrics from a TLS exporter
        urllib.request.urlopen(exporter.url.replace("https://", "http://"), timeout=10)
    # the lab's bounded fetch over TLS: the handshake within the deadline, an untrusted certificate named
    from tf_device_panel.core.lab import fetch

    assert b"tfdp_build_info" in fetch.get(exporter.url, fetch.Deadline(10), tls=trusted).body
    with pytest.raises(fetch.FetchError, match="TLS: CERTIFICATE_VERIFY_FAILED") as failed:
        fetch.get(exporter.url, fetch.Deadline(10))
    assert failed.value.connecting


def test_the_event_log_is_parsed_again_only_when_it_grows(monkeypatch: pytest.MonkeyPatch, panel_home: Path) -> None:
    from tf_device_panel.core.lab.exporter import PanelStateReader

    history = RunHistory()
    recorder = history.new_run("memory", {}, {"version": 1}, None)
    recorder.append(events.TfMemory(device="/GPU:0", current_mib=1.0, peak_mib=2.0))
    parsed = []
    original = history.events
    monkeypatch.setattr(history, "events", lambda run_id: parsed.append(run_id) or original(run_id))
    reader = PanelStateReader(history)
    assert reader.read().tf_memory == {"/GPU:0": (1.0, 2.0)}
    assert reader.read().tf_memory == {"/GPU:0": (1.0, 2.0)}
    assert len(parsed) == 1
    recorder.append(events.TfMemory(device="/GPU:0", current_mib=3.0, peak_mib=3.0))
    assert reader.read().tf_memory == {"/GPU:0": (3.0, 3.0)} and len(parsed) == 2
    recorder.finish(status="ok")
    assert reader.read().run is None


def test_a_silent_client_does_not_stall_other_scrapes(monkeypatch: pytest.MonkeyPatch,
                                                      start_exporter: Callable[..., Exporter]) -> None:
    no_library(monkeypatch)
    exporter = start_exporter()
    with socket.create_connection(("127.0.0.1", exporter.port), timeout=10):  # connects, never sends a request
        assert "tfdp_build_info" in scrape(exporter.url)


def test_200_simultaneous_scrapes_are_all_held_and_answered(monkeypatch: pytest.MonkeyPatch) -> None:
    no_library(monkeypatch)
    exporter = Exporter("127.0.0.1", 0, interval=0.1, nvml=Nvml())
    server = exporter._bind()  # listening, not yet accepting: every connection must wait in the backlog
    clients: list[socket.socket] = []
    thread: threading.Thread | None = None
    try:
        for _ in range(200):
            client = socket.socket()
            client.setblocking(False)
            client.connect_ex(("127.0.0.1", exporter.port))
            clients.append(client)
        _, connected, _ = select.select([], clients, [], 2.0)
        # a SYN past a full backlog is dropped and retried after 1 s, 3 s, …: such a client is not connected yet
        connected = [c for c in connected if c.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == 0]
        assert len(connected) == 200, f"only {len(connected)} of 200 connections were held"
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        for client in clients:
            client.setblocking(True)
            client.settimeout(30)
            client.sendall(b"GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n")
        answers = []
        for client in clients:
            with client.makefile("rb") as reply:
                answers.append(reply.readline())
        assert answers == [b"HTTP/1.0 200 OK\r\n"] * 200
    finally:
        for client in clients:
            client.close()
        if thread is not None:
            server.shutdown()
        server.server_close()


def test_idle_clients_are_closed_quietly_with_one_debug_line_each(monkeypatch: pytest.MonkeyPatch,
                                                                  start_exporter: Callable[..., Exporter],
                                                                  capfd: pytest.CaptureFixture[str],
                                                                  caplog: pytest.LogCaptureFixture) -> None:
    no_library(monkeypatch)
    monkeypatch.setattr(_QuietHandler, "timeout", 0.3)
    caplog.set_level(logging.DEBUG, logger="tf_device_panel.core.lab.exporter")
    exporter = start_exporter()
    idle = [socket.create_connection(("127.0.0.1", exporter.port), timeout=30) for _ in range(20)]
    try:
        for client in idle:
            assert client.recv(1) == b""  # the exporter closed it
        assert "tfdp_build_info" in scrape(exporter.url)
    finally:
        for client in idle:
            client.close()
    wait_until(lambda: len([r for r in caplog.records if r.getMessage().startswith("closed the connection")]) == 20,
               timeout=30, message="one debug line per idle client")
    assert "Traceback" not in capfd.readouterr().err


def request_threads() -> int:
    return sum(1 for t in threading.enumerate() if t.name == "exporter-request")


def test_a_client_trickling_its_request_is_closed_at_the_request_deadline(monkeypatch: pytest.MonkeyPatch,
                                                                         start_exporter: Callable[..., Exporter]
                                                                         ) -> None:
    """Issue 32, item 5: each byte comes well within the per-read timeout, the request as a whole is late."""
    no_library(monkeypatch)
    monkeypatch.setattr(_QuietHandler, "request_timeout", 1.0)
    exporter = start_exporter()
    with socket.create_connection(("127.0.0.1", exporter.port), timeout=10) as client:
        started = time.monotonic()
        client.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Slow: ")
        closed_after = None
        while time.monotonic() - started < 10:  # bounded: an exporter that never closes fails the test
            readable, _, _ = select.select([client], [], [], 0.3)
            if readable:
                assert client.recv(1) == b""  # closed, nothing answered
                closed_after = time.monotonic() - started
                break
            try:
                client.sendall(b"y")
            except OSError:
                closed_after = time.monotonic() - started
                break
    assert closed_after is not None and closed_after < 2.5, closed_after
    assert "tfdp_build_info" in scrape(exporter.url)


def test_a_flood_of_slow_clients_costs_at_most_the_cap_in_threads_and_stop_is_prompt(
        monkeypatch: pytest.MonkeyPatch, start_exporter: Callable[..., Exporter]) -> None:
    """Issue 32, item 5: 300 clients that each send the start of a request and stop: at most MAX_CONNECTIONS
    request threads, a scrape is still answered, and stop() ends every connection at once."""
    no_library(monkeypatch)
    exporter = start_exporter()
    baseline = threading.active_count()
    clients: list[socket.socket] = []
    try:
        for _ in range(300):
            client = socket.create_connection(("127.0.0.1", exporter.port), timeout=10)
            client.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")  # never finished
            clients.append(client)
        wait_until(lambda: threading.active_count() - baseline >= exporter_module.MAX_CONNECTIONS, 10,
                   message=lambda: f"{threading.active_count() - baseline} threads")
        # every client is connected (held by the kernel's backlog when not accepted): the server took what it will
        assert threading.active_count() - baseline <= exporter_module.MAX_CONNECTIONS
        # a scrape behind the flood: slow connections are closed to make room for it, and it is answered
        assert "tfdp_build_info" in scrape(exporter.url)
        assert threading.active_count() - baseline <= exporter_module.MAX_CONNECTIONS
        started = time.monotonic()
        exporter.stop()
        stopped_in = time.monotonic() - started
        assert stopped_in < 1.0, f"stop took {stopped_in:.2f} s"
        wait_until(lambda: request_threads() == 0, 5, message=lambda: f"{request_threads()} request threads left")
        assert clients[0].recv(1) == b""  # a connection that was served: closed by the stop
    finally:
        for client in clients:
            client.close()


def test_the_name_filter_keeps_the_metrics_asked(monkeypatch: pytest.MonkeyPatch,
                                                 start_exporter: Callable[..., Exporter]) -> None:
    """Issue 32, item 11: prometheus-client's `name[]` filter, by family or by sample name."""
    no_library(monkeypatch)
    exporter = start_exporter()
    everything = parse(scrape(exporter.url))
    assert len(everything) > 3
    asked = parse(scrape(f"{exporter.url}?name[]=tfdp_host_memory_total_bytes&name[]=tfdp_build_info"))
    assert set(asked) == {"tfdp_host_memory_total_bytes", "tfdp_build_info"}
    assert asked["tfdp_build_info"] == everything["tfdp_build_info"]
    assert parse(scrape(f"{exporter.url}?name[]=tfdp_nvml_available")) == {
        "tfdp_nvml_available": everything["tfdp_nvml_available"]}
    assert parse(scrape(f"{exporter.url}?name[]=no_such_metric")) == {}


def test_the_command_stops_at_once_on_sigterm_while_slow_clients_hold_it(tmp_path: Path) -> None:
    """Issue 32, item 5: 300 connections that each sent one byte of a request; SIGTERM ends the command in well
    under 2 s (before: every request thread was joined, each waiting out its read timeout)."""
    child = subprocess.Popen(exporter_command("--listen", "127.0.0.1:0", "--interval", "0.5"),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path)
    clients: list[socket.socket] = []
    try:
        assert child.stdout is not None
        line = child.stdout.readline()
        port = int(line.split()[1].rsplit(":", 1)[1].split("/")[0])
        for _ in range(300):
            client = socket.create_connection(("127.0.0.1", port), timeout=10)
            client.sendall(b"G")
            clients.append(client)
        process = psutil.Process(child.pid)
        wait_until(lambda: process.num_threads() >= exporter_module.MAX_CONNECTIONS, 10,
                   message=lambda: f"{process.num_threads()} threads")
        assert process.num_threads() <= exporter_module.MAX_CONNECTIONS + 8  # the sampler, the accept loop, …
        started = time.monotonic()
        child.terminate()
        assert child.wait(15) == 0
        assert time.monotonic() - started < 2.0
    finally:
        for client in clients:
            client.close()
        if child.poll() is None:
            child.kill()
            child.wait()
        for stream in (child.stdout, child.stderr):
            if stream is not None:
                stream.close()
