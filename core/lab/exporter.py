"""`tf-device-panel exporter`: this machine's GPUs, host and panel runs as Prometheus metrics on /metrics.

One telemetry Sampler (NVML handles kept) samples at the chosen interval on its own thread; a scrape only
turns the newest sample into metric families, so its cost does not depend on NVML's speed and two scrapers
never double the NVML traffic. What only the panel knows (the run in progress, its device configuration,
TensorFlow's allocator figures) comes from the run history folder through core.client.history's public API, read on
the sampler's thread as well.

Faults stay local: a field NVML cannot read is left out and counted in `tfdp_nvml_read_errors_total`, a lost
GPU drops its series, and no NVML leaves the host metrics. The server is read-only and answers GET /metrics
only; every other path is 404 and every other method 405.
"""

from __future__ import annotations

import contextlib
import errno
import importlib
import importlib.metadata
import io
import logging
import os
import socket
import ssl
import sys
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, make_server

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, InfoMetricFamily, Metric
from prometheus_client.exposition import ThreadingWSGIServer, make_wsgi_app
from prometheus_client.registry import Collector, CollectorRegistry
from tf_device_panel.core.client.history import RunHistory
from tf_device_panel.core.client.records import RunSummary
from tf_device_panel.core.config import DeviceConfig
from tf_device_panel.core.config.schema import Kind, config_fields
from tf_device_panel.core.devices.nvml import GpuSnapshot, Nvml
from tf_device_panel.core.devices.telemetry import MAX_INTERVAL_S, MIN_INTERVAL_S, History, Sample, Sampler
from tf_device_panel.core.protocol import events
from tf_device_panel.core.units import MIB

log = logging.getLogger(__name__)

PREFIX = "tfdp_"
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 9848
DEFAULT_INTERVAL_S = 1.0
METRICS_PATH = "/metrics"
GPU_LABELS = ("gpu", "uuid", "pci_bus_id", "name")
RECENT_RUNS = 20  # a run in progress is among the newest folders; reading all of a long history each tick is waste
# Every distribution TensorFlow ships under, so its version is known without importing it (seconds, and GPU memory)
TENSORFLOW_DISTRIBUTIONS = ("tensorflow", "tensorflow-cpu", "tensorflow-macos", "tf-nightly", "tensorflow-intel")
# The configuration keys the info metric carries: every setting a profile has (core.config's declarations)
CONFIG_KEYS = tuple(field.key for field in config_fields(DeviceConfig) if field.kind is not Kind.VERSION)
# NVML function -> the field it reads, for the error counter's `field` label
NVML_FIELDS = {
    "nvmlDeviceGetMemoryInfo": "memory",
    "nvmlDeviceGetUtilizationRates": "utilization",
    "nvmlDeviceGetTemperature": "temperature",
    "nvmlDeviceGetPowerUsage": "power",
    "nvmlDeviceGetClockInfo": "clocks",
    "nvmlDeviceGetComputeRunningProcesses_v3": "processes",
    "nvmlDeviceGetComputeRunningProcesses_v2": "processes",
    "nvmlDeviceGetComputeRunningProcesses": "processes",
    "nvmlDeviceGetName": "name",
    "nvmlDeviceGetUUID": "uuid",
    "nvmlDeviceGetPciInfo": "pci_bus_id",
    "nvmlDeviceGetCudaComputeCapability": "compute_capability",
    "nvmlDeviceGetHandleByIndex": "handle",
    "nvmlSystemGetDriverVersion": "driver_version",
    "nvmlSystemGetCudaDriverVersion_v2": "cuda_version",
}


# Test-only: names a module whose `install()` replaces NVML with a fake before the exporter starts, so a test can
# run the real command in a subprocess against fake GPUs (tests/exporter_fake_nvml.py). Never set it otherwise.
TEST_NVML_ENV = "TF_DEVICE_PANEL_TEST_NVML"


def install_test_nvml() -> None:
    """Honour TEST_NVML_ENV (see above); a no-op when it is unset."""
    module = os.environ.get(TEST_NVML_ENV)
    if module:
        log.warning("%s=%s: NVML is replaced by a test fake", TEST_NVML_ENV, module)
        importlib.import_module(module).install()


class ExporterError(Exception):
    """A bad --listen, --interval or TLS file, or an address that cannot be bound: one clear line, exit 2."""


def parse_listen(text: str) -> tuple[str, int]:
    """'HOST:PORT', '[v6]:PORT' or ':PORT' (127.0.0.1) -> (host, port)."""
    host, sep, port_text = text.strip().rpartition(":")
    if not sep:
        raise ExporterError(f"--listen {text!r}: expected HOST:PORT, e.g. 127.0.0.1:{DEFAULT_PORT}")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    elif ":" in host:
        raise ExporterError(f"--listen {text!r}: an IPv6 address goes in brackets, e.g. [::1]:{DEFAULT_PORT}")
    try:
        port = int(port_text)
    except ValueError:
        raise ExporterError(f"--listen {text!r}: the port must be a number, got {port_text!r}") from None
    if not 0 <= port <= 65535:
        raise ExporterError(f"--listen {text!r}: the port must be 0–65535, got {port}")
    return host or DEFAULT_HOST, port


def check_interval(interval: float) -> float:
    if not MIN_INTERVAL_S <= interval <= MAX_INTERVAL_S:
        raise ExporterError(f"--interval {interval:g}: must be between {MIN_INTERVAL_S:g} and {MAX_INTERVAL_S:g} s")
    return interval


def package_version(*names: str) -> str:
    """The installed version of the first distribution found, '' if none (never imports the package)."""
    for name in names:
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            return importlib.metadata.version(name)
    return ""


@dataclass
class PanelState:
    """What only this panel knows, from the run history: the run in progress, if any."""

    run: RunSummary | None = None
    tf_memory: dict[str, tuple[float, float]] = field(default_factory=dict)  # device -> (current, peak) MiB


class PanelStateReader:
    """The newest run still 'running' (a client that died shows as interrupted, so it is not one) and the last
    allocator figures it recorded per logical device.

    A run's event log can grow to megabytes (placement floods), so it is parsed again only when it has grown:
    its size is read from the layout core/client/history.py documents (<root>/<run_id>/events.jsonl)."""

    def __init__(self, history: RunHistory):
        self.history = history
        self._seen: tuple[str, int] | None = None  # (run_id, events.jsonl size) last parsed
        self._figures: dict[str, tuple[float, float]] = {}

    def read(self) -> PanelState:
        for summary in self.history.summaries(limit=RECENT_RUNS):
            if summary.status == "running":
                return PanelState(summary, dict(self._tf_memory(summary.run_id)))
        self._seen, self._figures = None, {}
        return PanelState()

    def _tf_memory(self, run_id: str) -> dict[str, tuple[float, float]]:
        try:
            size = (self.history.root / run_id / "events.jsonl").stat().st_size
        except OSError:
            size = -1
        if self._seen == (run_id, size):
            return self._figures
        figures: dict[str, tuple[float, float]] = {}
        with contextlib.suppress(KeyError, OSError):  # the run finished and was removed between the two reads
            for event in self.history.events(run_id):
                match event:  # decoded and checked once, by the history
                    case events.TfMemory(device=device, current_mib=current, peak_mib=peak):
                        figures[device] = (float(current), float(peak))
        self._seen, self._figures = (run_id, size), figures
        return figures


def _label(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value)
    if isinstance(value, dict):
        return ";".join(f"{k}={_label(v)}" for k, v in sorted(value.items()))
    return str(value)


class PanelCollector(Collector):
    """Turns the newest Sample, the GPUs' static facts, NVML's error counts and the panel state into metric
    families at scrape time. Reads only what the sampler thread replaced whole, so no lock is held long."""

    def __init__(self, nvml: Nvml, build: dict[str, str], hostname: str):
        self.nvml = nvml
        self.build = build
        self.hostname = hostname
        self.gpus: list[GpuSnapshot] = []
        self.sample: Sample | None = None
        self.panel = PanelState()

    def describe(self) -> Iterable[Metric]:
        return []  # the families depend on the GPUs found and the run in progress: described at collect time

    def collect(self) -> Iterator[Metric]:
        sample, panel = self.sample, self.panel
        yield InfoMetricFamily(f"{PREFIX}build", "Versions of the panel, TensorFlow, the NVIDIA driver and CUDA",
                               value=self.build)
        yield InfoMetricFamily(f"{PREFIX}machine", "This machine, for views that list machines by name",
                               value={"hostname": self.hostname})
        yield GaugeMetricFamily(f"{PREFIX}nvml_available", "1 when NVML answers, 0 without a driver (host-only)",
                                value=1.0 if self.nvml.available else 0.0)
        yield from self._errors()
        if sample is None:
            return
        yield GaugeMetricFamily(f"{PREFIX}sample_timestamp_seconds", "When the exporter last sampled (Unix time)",
                                value=sample.time)
        yield from self._host(sample)
        yield from self._gpus(sample)
        yield from self._panel(panel)

    def _errors(self) -> Iterator[Metric]:
        errors = CounterMetricFamily(f"{PREFIX}nvml_read_errors", "NVML reads that returned no value, by GPU and "
                                     "field (NotSupported, NoPermission, a lost GPU…)", labels=("gpu", "field"))
        totals: dict[tuple[str, str], int] = {}
        for (gpu, function), count in self.nvml.failures().items():
            key = ("" if gpu is None else str(gpu), NVML_FIELDS.get(function, function))
            totals[key] = totals.get(key, 0) + count
        for key, count in sorted(totals.items()):
            errors.add_metric(list(key), count)
        yield errors

    def _host(self, sample: Sample) -> Iterator[Metric]:
        host = sample.host
        for name, value, scale, doc in (
                ("host_memory_used_bytes", host.ram_used_mib, MIB, "Host memory in use (total - available)"),
                ("host_memory_total_bytes", host.ram_total_mib, MIB, "Host memory installed"),
                ("host_cpu_utilization_ratio", host.cpu_percent, 0.01, "Host CPU utilization, all cores (0–1)")):
            if value is not None:
                yield GaugeMetricFamily(f"{PREFIX}{name}", doc, value=value * scale)

    def _gpus(self, sample: Sample) -> Iterator[Metric]:
        per_gpu = (
            ("gpu_memory_used_bytes", "memory_used_mib", MIB, "GPU memory in use"),
            ("gpu_memory_total_bytes", "memory_total_mib", MIB, "GPU memory installed"),
            ("gpu_utilization_ratio", "utilization", 0.01, "Time the GPU was busy over NVML's last period (0–1)"),
            ("gpu_temperature_celsius", "temperature_c", 1.0, "GPU core temperature"),
            ("gpu_power_watts", "power_w", 1.0, "GPU power draw"),
            ("gpu_sm_clock_hertz", "sm_clock_mhz", 1e6, "GPU SM clock"),
            ("gpu_memory_clock_hertz", "memory_clock_mhz", 1e6, "GPU memory clock"),
        )
        families = {attr: GaugeMetricFamily(f"{PREFIX}{name}", doc, labels=GPU_LABELS)
                    for name, attr, _, doc in per_gpu}
        processes = GaugeMetricFamily(f"{PREFIX}gpu_process_memory_used_bytes",
                                      "GPU memory a compute process uses", labels=(*GPU_LABELS, "pid", "process"))
        facts = {gpu.index: gpu for gpu in self.gpus}
        for gpu in sample.gpus:
            snapshot = facts.get(gpu.index)
            if gpu.error is not None or snapshot is None or snapshot.error is not None:
                continue  # a lost GPU drops its series; its read errors say why
            labels = [str(gpu.index), snapshot.uuid or "", snapshot.pci_bus_id or "", snapshot.name or ""]
            for _, attr, scale, _ in per_gpu:
                value = getattr(gpu, attr)
                if value is not None:
                    families[attr].add_metric(labels, value * scale)
            for process in gpu.processes or []:
                if process.used_mib is not None:
                    processes.add_metric([*labels, str(process.pid), process.name], process.used_mib * MIB)
        yield from families.values()
        yield processes

    def _panel(self, panel: PanelState) -> Iterator[Metric]:
        run = panel.run
        if run is None:
            return
        yield InfoMetricFamily(f"{PREFIX}run", "The panel run in progress on this machine",
                               value={"run_id": run.run_id, "job": run.job, "status": run.status})
        config = run.config or {}
        yield InfoMetricFamily(f"{PREFIX}device_config", "The device configuration the run in progress applied",
                               value={key: _label(config.get(key)) for key in CONFIG_KEYS})
        current = GaugeMetricFamily(f"{PREFIX}tf_allocator_current_bytes", "TensorFlow's allocator: bytes in use "
                                    "per logical device, while a panel run goes", labels=("device",))
        peak = GaugeMetricFamily(f"{PREFIX}tf_allocator_peak_bytes", "TensorFlow's allocator: peak bytes per "
                                 "logical device during the run in progress", labels=("device",))
        for device, (now, top) in sorted(panel.tf_memory.items()):
            current.add_metric([device], now * MIB)
            peak.add_metric([device], top * MIB)
        yield current
        yield peak


LISTEN_BACKLOG = 1024  # connections the kernel holds before accept: a dashboard's and Prometheus' bursts at once
                       # (socketserver's default of 5 dropped most of 200 simultaneous scrapes' SYNs)
MAX_CONNECTIONS = 64  # connections served at once, one thread each; more wait in the listen backlog (a slowloris
                      # flood costs at most this many threads, never one per client)
REQUEST_TIMEOUT_S = 5.0  # a request's line and headers must all have arrived this long after it was accepted
IDLE_TIMEOUT_S = 5.0  # the longest one read or write waits


EVICT_AFTER_S = 0.1  # a connection whose request is not in after this long may be closed to make room for another


def _hang_up(connection: socket.socket) -> None:
    """End a connection another thread serves: its read or write returns at once (the plain socket's shutdown,
    under TLS too: the SSL object stays with the thread that uses it)."""
    with contextlib.suppress(OSError):
        socket.socket.shutdown(connection, socket.SHUT_RDWR)


class _RequestDeadline(io.RawIOBase):
    """A connection's reads, all within REQUEST_TIMEOUT_S of the first: a client that sends a byte every few
    seconds (each read within any per-read timeout) is still closed when the whole request is late."""

    def __init__(self, sock: socket.socket, seconds: float, idle: float):
        self.sock, self.idle = sock, idle
        self.seconds = seconds
        self.end = time.monotonic() + seconds

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        left = self.end - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"no complete request within {self.seconds:g} s")
        self.sock.settimeout(min(left, self.idle))
        try:
            return self.sock.recv_into(buffer)
        except TimeoutError:
            if time.monotonic() >= self.end:
                raise TimeoutError(f"no complete request within {self.seconds:g} s") from None
            raise
        finally:
            with contextlib.suppress(OSError):
                self.sock.settimeout(self.idle)  # the answer's writes get the idle timeout, not what is left


class _QuietHandler(WSGIRequestHandler):
    timeout = IDLE_TIMEOUT_S  # one read or write; the whole request has REQUEST_TIMEOUT_S (_RequestDeadline)
    request_timeout = REQUEST_TIMEOUT_S

    def setup(self) -> None:
        super().setup()
        self.rfile = io.BufferedReader(_RequestDeadline(self.connection, self.request_timeout,
                                                        self.timeout or IDLE_TIMEOUT_S))

    def parse_request(self) -> bool:
        parsed = bool(super().parse_request())
        if parsed:
            request_read = getattr(self.server, "request_read", None)
            if request_read is not None:
                request_read(self.request)
        return parsed

    def log_message(self, format: str, *args: Any) -> None:  # a scrape a second would flood the terminal
        pass


class _Only(Collector):
    """A registry's families restricted to the names asked (prometheus-client's `name[]` filter): a family is
    kept whole when its name is asked, else the samples whose names are (e.g. tfdp_nvml_read_errors_total)."""

    def __init__(self, registry: Collector, names: list[str]):
        self.registry, self.names = registry, set(names)

    def collect(self) -> Iterator[Metric]:
        for family in self.registry.collect():
            samples = family.samples if family.name in self.names else \
                [s for s in family.samples if s.name in self.names]
            if samples:
                kept = Metric(family.name, family.documentation, family.type, family.unit)
                kept.samples = list(samples)
                yield kept


def metrics_only(registry: Collector) -> Callable[..., Any]:
    """prometheus-client's app answers any path; this one answers GET /metrics only. `?name[]=A&name[]=B` keeps
    the metrics named so (prometheus-client's own filter finds nothing here: the collector describes its families
    only when it collects them)."""
    app = make_wsgi_app(registry)

    # `environ` is the WSGI server's own dict (PEP 3333), handed over as is.
    def guarded(environ: dict[str, Any], start_response: Callable[..., Any]) -> list[bytes]:
        if environ.get("PATH_INFO") != METRICS_PATH:
            start_response("404 Not Found", [("Content-Type", "text/plain; charset=utf-8")])
            return [f"not found: this exporter serves {METRICS_PATH} only\n".encode()]
        if environ.get("REQUEST_METHOD") != "GET":
            start_response("405 Method Not Allowed", [("Allow", "GET"), ("Content-Type", "text/plain")])
            return [b"read-only: GET /metrics\n"]
        query = urllib.parse.parse_qs(environ.get("QUERY_STRING", ""))
        names = query.pop("name[]", None)
        if names:
            rest = {**environ, "QUERY_STRING": urllib.parse.urlencode(query, doseq=True)}
            filtered: list[bytes] = make_wsgi_app(_Only(registry, names))(rest, start_response)
            return filtered
        result: list[bytes] = app(environ, start_response)
        return result

    return guarded


def tls_context(certfile: str, keyfile: str) -> ssl.SSLContext:
    """The server side of TLS, as prometheus-client's own start_http_server(certfile=, keyfile=) builds it."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        context.load_cert_chain(certfile, keyfile)
    except (OSError, ssl.SSLError) as exc:
        raise ExporterError(f"cannot load the TLS certificate {certfile!r} / key {keyfile!r}: {exc}") from None
    return context


class Exporter:
    """The sampler, the collector and the HTTP server; `start()` binds, samples once, then serves.

    `sampler`: a sampler the process already runs (the window's, core.client.session.Session.sampler): the
    exporter then reads its samples instead of sampling NVML a second time, at its interval, and leaves starting
    and stopping it to its owner. Without one (the `exporter` command) it samples on a sampler of its own."""

    def __init__(self, host: str = DEFAULT_HOST, port: int = DEFAULT_PORT, *, interval: float = DEFAULT_INTERVAL_S,
                 nvml: Nvml | None = None, history: RunHistory | None = None,
                 certfile: str | None = None, keyfile: str | None = None, sampler: Sampler | None = None):
        self.host, self.port = host, port
        self.interval = check_interval(interval) if sampler is None else sampler.interval
        self.nvml = sampler.nvml if sampler is not None else nvml or Nvml()
        self.history = history or RunHistory()
        self.tls = tls_context(certfile, keyfile) if certfile and keyfile else None
        if bool(certfile) != bool(keyfile):
            raise ExporterError("TLS needs both --certfile and --keyfile")
        self._owns_sampler = sampler is None
        # A scrape reads only the newest sample: a minute of ring buffer is plenty (the window keeps an hour).
        self.sampler = sampler if sampler is not None else Sampler(interval=self.interval, nvml=self.nvml,
                                                                   history=History(self.interval, history_s=60.0))
        self._unsubscribe: Callable[[], None] | None = None
        self.panel_reader = PanelStateReader(self.history)
        self.collector: PanelCollector | None = None
        self.registry = CollectorRegistry(auto_describe=False)
        self._server: ThreadingWSGIServer | None = None
        self._thread: threading.Thread | None = None
        self._first = threading.Event()
        self._panel_failures = 0

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{'https' if self.tls else 'http'}://{host}:{self.port}{METRICS_PATH}"

    def _sampled(self, sample: Sample) -> None:
        collector = self.collector
        if collector is None:
            return
        try:
            collector.panel = self.panel_reader.read()
        except Exception as exc:  # an odd history folder must not stop the GPU metrics
            self._panel_failures += 1
            if self._panel_failures == 1:
                log.warning("cannot read the run history in %s: %s", self.history.root, exc)
        collector.sample = sample
        self._first.set()

    def start(self) -> None:
        server = self._bind()
        try:
            self._start_sampling()
        except BaseException:
            server.server_close()
            raise
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1},
                                        name="exporter-http", daemon=True)
        self._thread.start()

    def _start_sampling(self) -> None:
        self.nvml.init()
        build = {"version": package_version("tf-device-panel"),
                 "tensorflow": package_version(*TENSORFLOW_DISTRIBUTIONS),
                 "driver": self.nvml.driver_version() or "", "cuda": self.nvml.cuda_driver_version() or ""}
        self.collector = PanelCollector(self.nvml, build, socket.gethostname())
        self.registry.register(self.collector)
        self._unsubscribe = self.sampler.hub.subscribe(self, Sample, self._sampled)
        if self._owns_sampler:
            self.sampler.start()
        self.collector.gpus = self.sampler.gpus
        self._first.wait(10.0)  # the first scrape then already has GPU values, not only the build info

    def _bind(self) -> ThreadingWSGIServer:
        try:
            infos = socket.getaddrinfo(self.host, self.port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        except socket.gaierror as exc:
            raise ExporterError(f"cannot listen on {self.host!r}: {exc.strerror}") from None
        family = infos[0][0]

        class Server(ThreadingWSGIServer):
            """At most MAX_CONNECTIONS connections served at once, one thread each. When all are taken, the
            oldest whose request has not fully arrived (older than EVICT_AFTER_S) is closed to make room: a flood
            of slow clients churns through its own connections while a scrape, whose request comes in one packet,
            gets its turn. When all are busy answering, the accept loop waits and the kernel's backlog holds the
            rest. `close_connections()` ends every one at once, so a stop never waits for clients."""

            address_family = family
            request_queue_size = LISTEN_BACKLOG
            daemon_threads = True  # a request thread never keeps the process alive
            block_on_close = False  # nor does server_close() wait for one

            def __init__(self, *args: Any, **kwargs: Any):
                self.slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
                self.open: set[Any] = set()
                self.reading: dict[Any, float] = {}  # connections whose request is not in yet -> when accepted
                self.open_lock = threading.Lock()
                self.closing = threading.Event()
                self.evicted = 0
                super().__init__(*args, **kwargs)

            def process_request(self, request: Any, client_address: Any) -> None:
                taken = self.slots.acquire(blocking=False)
                while not taken and not self.closing.is_set():
                    self._evict_one()
                    taken = self.slots.acquire(timeout=0.02)
                if self.closing.is_set():
                    if taken:
                        self.slots.release()
                    self.shutdown_request(request)
                    return
                with self.open_lock:
                    self.open.add(request)
                    self.reading[request] = time.monotonic()
                try:
                    threading.Thread(target=self.process_request_thread, args=(request, client_address),
                                     name="exporter-request", daemon=True).start()
                except BaseException:
                    self._release(request)
                    self.shutdown_request(request)
                    raise

            def _evict_one(self) -> None:
                with self.open_lock:
                    oldest = next(iter(self.reading.items()), None)
                    if oldest is None or time.monotonic() - oldest[1] < EVICT_AFTER_S:
                        return
                    del self.reading[oldest[0]]
                self.evicted += 1
                _hang_up(oldest[0])

            def request_read(self, request: Any) -> None:
                """The handler has the whole request: no longer a candidate to close for room."""
                with self.open_lock:
                    self.reading.pop(request, None)

            def process_request_thread(self, request: Any, client_address: Any) -> None:
                try:
                    super().process_request_thread(request, client_address)
                finally:
                    self._release(request)

            def _release(self, request: Any) -> None:
                with self.open_lock:
                    self.open.discard(request)
                    self.reading.pop(request, None)
                self.slots.release()

            def close_connections(self) -> None:
                self.closing.set()
                with self.open_lock:
                    found = list(self.open)
                for request in found:
                    _hang_up(request)

            def handle_error(self, request: Any, client_address: Any) -> None:
                # A client that went idle past the timeout, hung up or failed its TLS handshake: its connection
                # is closed, one debug line says why (socketserver would print a traceback on stderr).
                _, exc, _ = sys.exc_info()
                if isinstance(exc, OSError):
                    log.debug("closed the connection from %s: %s", client_address, exc or type(exc).__name__)
                else:
                    log.warning("a request from %s failed: %s: %s", client_address, type(exc).__name__, exc)

        app = metrics_only(self.registry)
        try:
            server = make_server(self.host, self.port, app, Server, handler_class=_QuietHandler)
        except OSError as exc:
            where = f"{self.host}:{self.port}"
            if exc.errno == errno.EADDRINUSE:
                raise ExporterError(f"port {self.port} on {self.host} is in use; choose another with "
                                    f"--listen HOST:PORT") from None
            if exc.errno == errno.EADDRNOTAVAIL:
                raise ExporterError(f"{self.host} is not an address of this machine ({where})") from None
            if exc.errno == errno.EACCES:
                raise ExporterError(f"not allowed to listen on {where} (ports below 1024 need privileges)") from None
            raise ExporterError(f"cannot listen on {where}: {exc.strerror or exc}") from None
        if self.tls is not None:
            # The handshake then happens on the request's own thread, at its first read: done in accept(), one
            # silent client would stall the accepting thread and so every scrape.
            server.socket = self.tls.wrap_socket(server.socket, server_side=True, do_handshake_on_connect=False)
        self.port = server.server_address[1]  # the real one when 0 asked for any free port
        return server

    def stop(self) -> None:
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None
        if self._owns_sampler:
            self.sampler.stop()
        if self._server is not None:
            self._server.close_connections()  # type: ignore[attr-defined]
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(5.0)
            self._thread = None
