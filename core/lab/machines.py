"""Many machines' GPUs and hosts, from a Prometheus server or from exporters scraped directly (Qt-free).

Two sources give the same `MachineStatus` list:

- `PrometheusSource(url)`: the server's HTTP API. One request lists the targets (up/down, last scrape, last
  error) and one instant query per metric covers every machine at once, never one query per machine; range
  queries give one machine's history when its tile is opened.
- `ExporterSource(urls)`: a small lab without a Prometheus server; each exporter's /metrics is fetched
  (in parallel) and parsed with prometheus-client's parser; history is what this source has fetched so far.

Metric names are read from this panel's exporter and, where a lab already runs them, from NVIDIA's
dcgm-exporter and node_exporter (`MAPPING`, also in docs/lab.md), so a lab that never installed the panel's
exporter still shows its machines. A target that does not answer is a machine in the offline state with the
reason; it never fails the others.
"""

from __future__ import annotations

import json
import re
import threading
import time
import urllib.parse
from collections import deque
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol, TypedDict

from prometheus_client.parser import text_string_to_metric_families
from tf_device_panel.core.lab.fetch import MAX_BYTES, Cancelled, Deadline, FetchError, get
from tf_device_panel.core.units import MIB, gib_figure

TIMEOUT_S = 5.0  # one exporter target: lookup, connect, headers and body together (core.lab.fetch)
REFRESH_TIMEOUT_S = 10.0  # one refresh: every exporter target, or every query of Prometheus's, together
FETCH_THREADS = 16
MAX_SAMPLES = 10_000  # samples of known metrics one exporter's answer may hold (known_lines)
EXPORTER_HISTORY = 3600  # fetches an ExporterSource keeps per machine (an hour at one a second)

# What each figure is read from, in order of preference: (metric, scale to base units). dcgm-exporter reports
# framebuffer memory in MiB and utilization in percent; node_exporter has no "used", so it is total - available.
MAPPING: dict[str, tuple[tuple[str, float], ...]] = {
    "gpu_memory_used_bytes": (("tfdp_gpu_memory_used_bytes", 1.0), ("DCGM_FI_DEV_FB_USED", MIB)),
    "gpu_memory_free_bytes": (("DCGM_FI_DEV_FB_FREE", MIB),),
    "gpu_memory_reserved_bytes": (("DCGM_FI_DEV_FB_RESERVED", MIB),),
    "gpu_memory_total_bytes": (("tfdp_gpu_memory_total_bytes", 1.0),),
    "gpu_utilization_ratio": (("tfdp_gpu_utilization_ratio", 1.0), ("DCGM_FI_DEV_GPU_UTIL", 0.01)),
    "host_memory_used_bytes": (("tfdp_host_memory_used_bytes", 1.0),),
    "host_memory_total_bytes": (("tfdp_host_memory_total_bytes", 1.0), ("node_memory_MemTotal_bytes", 1.0)),
    "host_memory_available_bytes": (("node_memory_MemAvailable_bytes", 1.0),),
    "host_cpu_utilization_ratio": (("tfdp_host_cpu_utilization_ratio", 1.0),),
}
INFO_METRICS = ("tfdp_machine_info", "tfdp_run_info", "tfdp_sample_timestamp_seconds")
# node_exporter's CPU time is a counter: Prometheus turns it into a ratio with rate(); a direct scrape compares
# two fetches.
NODE_CPU = "node_cpu_seconds_total"
NODE_CPU_QUERY = f'1 - avg by (instance) (rate({NODE_CPU}{{mode="idle"}}[1m]))'
GPU_METRICS = {metric for key, found in MAPPING.items() if key.startswith("gpu_") for metric, _ in found}
KNOWN_METRICS = {metric for found in MAPPING.values() for metric, _ in found} | set(INFO_METRICS) | {NODE_CPU}


class SourceError(Exception):
    """The source as a whole cannot answer (a bad URL, Prometheus unreachable or not Prometheus)."""


class GpuStatusJson(TypedDict):
    index: str
    name: str
    uuid: str
    memory_used_bytes: float | None
    memory_total_bytes: float | None
    utilization_ratio: float | None


class MachineJson(TypedDict):
    """A machine as `machines --json` prints it: its status, and how old its newest sample is."""

    instance: str
    name: str
    online: bool
    error: str
    last_sample: float | None
    gpus: list[GpuStatusJson]
    host_memory_used_bytes: float | None
    host_memory_total_bytes: float | None
    host_cpu_utilization_ratio: float | None
    run: dict[str, str] | None
    exporters: list[str]
    age_s: float | None


@dataclass
class GpuStatus:
    index: str
    name: str = ""
    uuid: str = ""
    memory_used_bytes: float | None = None
    memory_total_bytes: float | None = None
    utilization_ratio: float | None = None


@dataclass
class MachineStatus:
    instance: str                  # the scrape target, host:port
    name: str = ""                 # its host name where an exporter tells it, else the target's host
    online: bool = True
    error: str = ""                # why it is offline
    last_sample: float | None = None  # Unix time of the newest sample
    gpus: list[GpuStatus] = field(default_factory=list)
    host_memory_used_bytes: float | None = None
    host_memory_total_bytes: float | None = None
    host_cpu_utilization_ratio: float | None = None
    run: dict[str, str] | None = None  # the panel run in progress: run_id, job, status
    exporters: list[str] = field(default_factory=list)  # which kinds answered: tfdp, dcgm, node

    def age_s(self, now: float | None = None) -> float | None:
        return None if self.last_sample is None else max((now or time.time()) - self.last_sample, 0.0)

    def to_json(self, now: float | None = None) -> MachineJson:
        return {"instance": self.instance, "name": self.name, "online": self.online, "error": self.error,
                "last_sample": self.last_sample,
                "gpus": [{"index": gpu.index, "name": gpu.name, "uuid": gpu.uuid,
                          "memory_used_bytes": gpu.memory_used_bytes, "memory_total_bytes": gpu.memory_total_bytes,
                          "utilization_ratio": gpu.utilization_ratio} for gpu in self.gpus],
                "host_memory_used_bytes": self.host_memory_used_bytes,
                "host_memory_total_bytes": self.host_memory_total_bytes,
                "host_cpu_utilization_ratio": self.host_cpu_utilization_ratio,
                "run": None if self.run is None else dict(self.run), "exporters": list(self.exporters),
                "age_s": self.age_s(now)}


@dataclass
class Point:
    """One sample: its metric name, labels (with `instance`), value and time."""

    name: str
    labels: dict[str, str]
    value: float
    time: float


class Source(Protocol):
    """`stopping`: set, a fetch in flight gives up within core.lab.fetch.SLICE_S (SourceError 'stopped')."""

    description: str

    def fetch(self, stopping: threading.Event | None = None) -> list[MachineStatus]: ...

    def history(self, instance: str, seconds: float, *,
                stopping: threading.Event | None = None) -> dict[str, list[tuple[float, float]]]: ...


# -- turning samples into machines -----------------------------------------------------------------------------


def host_of(instance: str) -> str:
    """'gpu01:9848' -> 'gpu01', '[::1]:9848' -> '::1'."""
    host = instance.rsplit(":", 1)[0] if re.search(r":\d+$", instance) else instance
    return host[1:-1] if host.startswith("[") and host.endswith("]") else host


def exporter_kind(name: str) -> str:
    if name.startswith("tfdp_"):
        return "tfdp"
    if name.startswith("DCGM_"):
        return "dcgm"
    return "node"


def _gpu_key(labels: dict[str, str]) -> str:
    return labels.get("gpu") or labels.get("UUID") or labels.get("uuid") or "?"


def build_machines(points: Iterable[Point], targets: dict[str, MachineStatus],
                   node_cpu: dict[str, float] | None = None) -> list[MachineStatus]:
    """Machines from every point of every target: this panel's exporter first, dcgm-exporter and node_exporter
    where ours is absent; a dcgm- or node_exporter target joins the panel exporter's machine on the same host.

    `targets` holds every target's state (online, error, last scrape), keyed by instance; a target with no known
    metric and online (Prometheus scraping itself, say) is not a machine."""
    by_instance: dict[str, list[Point]] = {}
    for point in points:
        by_instance.setdefault(point.labels.get("instance", ""), []).append(point)
    machines: dict[str, MachineStatus] = {}
    merged_into: dict[str, str] = {}
    tfdp_hosts: dict[str, list[str]] = {}
    for instance, found in by_instance.items():
        if any(p.name.startswith("tfdp_") for p in found):
            tfdp_hosts.setdefault(host_of(instance), []).append(instance)
    for instance in sorted(set(targets) | set(by_instance)):
        found = by_instance.get(instance, [])
        target = targets.get(instance, MachineStatus(instance))
        if not found and target.online:
            continue
        key = instance
        if found and not any(p.name.startswith("tfdp_") for p in found):
            ours = tfdp_hosts.get(host_of(instance), [])
            key = ours[0] if len(ours) == 1 else host_of(instance)  # dcgm + node of one host: one machine
        merged_into[instance] = key
        machine = machines.get(key)
        if machine is None:
            machine = machines[key] = MachineStatus(key, name=key, online=target.online,
                                                    error=target.error, last_sample=target.last_sample)
        else:
            machine.online = machine.online or target.online
            machine.error = machine.error or target.error
            if target.last_sample is not None:
                machine.last_sample = max(machine.last_sample or 0.0, target.last_sample)
    for key, machine in machines.items():
        found = [p for instance, points in by_instance.items() if merged_into.get(instance) == key for p in points]
        _fill(machine, found, (node_cpu or {}).get(key))
    return sorted(machines.values(), key=lambda m: (m.name, m.instance))


def _first(values: dict[str, float], key: str) -> float | None:
    for metric, scale in MAPPING[key]:
        if metric in values:
            return values[metric] * scale
    return None


def _fill(machine: MachineStatus, points: list[Point], node_cpu: float | None) -> None:
    host: dict[str, float] = {}
    gpus: dict[str, dict[str, float]] = {}
    gpu_labels: dict[str, dict[str, str]] = {}
    kinds: set[str] = set()
    for point in points:
        kinds.add(exporter_kind(point.name))
        if point.name in GPU_METRICS:
            key = _gpu_key(point.labels)
            gpus.setdefault(key, {})[point.name] = point.value
            gpu_labels.setdefault(key, {}).update(point.labels)
        elif point.name == "tfdp_machine_info" and point.labels.get("hostname"):
            machine.name = point.labels["hostname"]
        elif point.name == "tfdp_run_info":
            machine.run = {k: point.labels.get(k, "") for k in ("run_id", "job", "status")}
        elif point.name == "tfdp_sample_timestamp_seconds":
            machine.last_sample = point.value
        else:
            host[point.name] = point.value
            if point.name.startswith("DCGM_") and point.labels.get("Hostname") and machine.name == machine.instance:
                machine.name = point.labels["Hostname"]
    machine.exporters = sorted(kinds)
    for key in sorted(gpus, key=lambda k: (len(k), k)):
        values, labels = gpus[key], gpu_labels[key]
        total = _first(values, "gpu_memory_total_bytes")
        used = _first(values, "gpu_memory_used_bytes")
        free = _first(values, "gpu_memory_free_bytes")
        if total is None and used is not None and free is not None:
            total = used + free + (_first(values, "gpu_memory_reserved_bytes") or 0.0)
        machine.gpus.append(GpuStatus(key, labels.get("name") or labels.get("modelName", ""),
                                      labels.get("uuid") or labels.get("UUID", ""), used, total,
                                      _first(values, "gpu_utilization_ratio")))
    machine.host_memory_total_bytes = _first(host, "host_memory_total_bytes")
    machine.host_memory_used_bytes = _first(host, "host_memory_used_bytes")
    available = _first(host, "host_memory_available_bytes")
    if machine.host_memory_used_bytes is None and machine.host_memory_total_bytes is not None \
            and available is not None:
        machine.host_memory_used_bytes = machine.host_memory_total_bytes - available
    machine.host_cpu_utilization_ratio = _first(host, "host_cpu_utilization_ratio")
    if machine.host_cpu_utilization_ratio is None:
        machine.host_cpu_utilization_ratio = node_cpu


# -- HTTP ------------------------------------------------------------------------------------------------------


def check_url(url: str, what: str) -> str:
    """An http(s) URL with a host, without a trailing slash; SourceError names what is wrong."""
    text = url.strip()
    if any(c.isspace() or ord(c) < 32 for c in text):
        raise SourceError(f"{what} {url!r}: a URL cannot contain spaces or control characters")
    if "://" not in text and text:
        text = f"http://{text}"  # host:port alone, as Prometheus's targets are written
    parsed = urllib.parse.urlsplit(text)
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        raise SourceError(f"{what} {url!r}: expected an http:// or https:// URL with a host, e.g. "
                          f"http://gpu01.lab:9848")
    try:
        parsed.port  # noqa: B018 - raises on a port that is not a number
    except ValueError as exc:
        raise SourceError(f"{what} {url!r}: {exc}") from None
    return text.rstrip("/")


class AnswerError(ValueError):
    """An answer whose JSON does not have the shape Prometheus's HTTP API gives; str() names where and what."""


def _describe(value: Any) -> str:
    kind = ("null" if value is None else "true/false" if isinstance(value, bool) else
            "a number" if isinstance(value, (int, float)) else "a string" if isinstance(value, str) else
            "a list" if isinstance(value, list) else "an object" if isinstance(value, dict) else type(value).__name__)
    text = json.dumps(value, default=str)
    return f"{kind} ({text[:60]}{'…' if len(text) > 60 else ''})" if kind != "null" else kind


def _need(value: Any, kind: type | tuple[type, ...], where: str, expected: str) -> Any:
    if not isinstance(value, kind) or (isinstance(value, bool) and bool not in (kind if isinstance(kind, tuple)
                                                                                 else (kind,))):
        raise AnswerError(f"{where} should be {expected}, got {_describe(value)}")
    return value


def _labels(value: Any, where: str) -> dict[str, str]:
    labels = _need(value, dict, where, "an object of label names to strings")
    for name, text in labels.items():
        _need(text, str, f"{where}.{name}", "a string")
    return dict(labels)


def _sample(value: Any, where: str) -> tuple[float, float]:
    """Prometheus's [<unix time>, "<value>"]."""
    pair = _need(value, list, where, '[time, "value"]')
    if len(pair) != 2:
        raise AnswerError(f'{where} should be [time, "value"], got {_describe(pair)}')
    stamp = _need(pair[0], (int, float), f"{where}[0]", "a time in seconds")
    text = _need(pair[1], str, f"{where}[1]", 'a value as a string, e.g. "0.5"')
    try:
        return float(stamp), float(text)
    except ValueError:
        raise AnswerError(f"{where}[1] should be a number as a string, got {_describe(text)}") from None


def _series(data: Any, where: str, key: str) -> list[tuple[dict[str, str], Any]]:
    """data.result of a query: each series' labels and its `key` ('value' or 'values'), checked."""
    result = _need(_need(data, dict, where, "an object").get("result"), list, f"{where}.result", "a list")
    found = []
    for number, item in enumerate(result):
        here = f"{where}.result[{number}]"
        _need(item, dict, here, "an object with metric and " + key)
        found.append((_labels(item.get("metric", {}), f"{here}.metric"), item.get(key)))
    return found


def known_lines(body: str, limit: int = MAX_SAMPLES) -> str:
    """The lines of an exposition text that carry a metric this view reads (KNOWN_METRICS), at most `limit`.

    prometheus-client's parser takes about 0.1 ms a line: a node_exporter's thousands of other series, or a
    hostile target's megabytes, would cost seconds a scrape; picking the few known lines is a split per line.
    ValueError past `limit` known samples (a real machine has hundreds: GPUs × a few, node CPUs × 8 modes)."""
    kept: list[str] = []
    for line in body.splitlines():
        if not line or line.startswith("#"):
            continue  # HELP and TYPE: the parser reads the samples without them (as untyped)
        name = line.split("{", 1)[0].split(None, 1)[0] if line.strip() else ""
        if name in KNOWN_METRICS:
            if len(kept) == limit:
                raise ValueError(f"more than {limit} samples of the metrics this view reads")
            kept.append(line)
    return "\n".join(kept) + "\n" if kept else ""


def _rfc3339(text: str) -> float | None:
    """Prometheus's times ('2026-11-22T15:40:00.123456789Z'): nanoseconds cut to what datetime holds."""
    if not text or text.startswith("0001-"):
        return None
    text = re.sub(r"(\.\d{6})\d+", r"\1", text).replace("Z", "+00:00")
    try:
        return datetime.fromisoformat(text).timestamp()
    except ValueError:
        return None


class PrometheusSource:
    """Machines as a Prometheus server sees them. Every query of one refresh (or of one machine's history) shares
    one deadline, `timeout` s; each answer is capped at `max_bytes` and checked against the API's shapes."""

    def __init__(self, url: str, timeout: float = REFRESH_TIMEOUT_S, max_bytes: int = MAX_BYTES):
        self.url = check_url(url, "--prometheus")
        self.timeout = timeout
        self.max_bytes = max_bytes
        self.description = f"Prometheus {self.url}"

    def _deadline(self, stopping: threading.Event | None) -> Deadline:
        return Deadline(self.timeout, f"{self.timeout:g} s (one refresh's queries together)", stopping=stopping)

    def _api(self, path: str, deadline: Deadline, **params: str) -> Any:
        address = f"{self.url}/api/v1/{path}?{urllib.parse.urlencode(params)}"
        what = f"{path} {params['query']!r}" if "query" in params else path
        try:
            body = get(address, deadline, max_bytes=self.max_bytes, accept="application/json").body
        except Cancelled:
            raise SourceError("stopped") from None
        except FetchError as exc:
            if exc.status is not None:
                detail = ""
                try:
                    error = json.loads(exc.body)
                    detail = str(error.get("error", ""))[:300] if isinstance(error, dict) else ""
                except ValueError:
                    pass
                raise SourceError(f"Prometheus at {self.url} refused {path}: {exc} {detail}".strip()) from None
            if exc.connecting:
                raise SourceError(f"cannot reach Prometheus at {self.url}: {exc}") from None
            raise SourceError(f"Prometheus at {self.url} gave no usable answer to {what}: {exc}") from None
        try:
            answer = json.loads(body)
        except (ValueError, RecursionError):
            raise SourceError(f"{self.url} did not answer as Prometheus's HTTP API (not JSON): is it the server's "
                              f"address, e.g. http://host:9090?") from None
        if not isinstance(answer, dict) or answer.get("status") != "success":
            error = answer.get("error", answer) if isinstance(answer, dict) else answer
            raise SourceError(f"Prometheus at {self.url}: {path} failed: {str(error)[:300]}")
        return answer.get("data")

    def _checked(self, what: str, decode: Any) -> Any:
        try:
            return decode()
        except AnswerError as exc:
            raise SourceError(f"Prometheus at {self.url}: the answer to {what} is not shaped as Prometheus's HTTP "
                              f"API answers: {exc}") from None

    def query(self, expression: str, deadline: Deadline | None = None) -> list[Point]:
        """One instant query; every series as a Point named after its `__name__` (or the expression)."""
        data = self._api("query", deadline or self._deadline(None), query=expression)

        def decode() -> list[Point]:
            points = []
            for number, (labels, value) in enumerate(_series(data, "data", "value")):
                stamp, figure = _sample(value, f"data.result[{number}].value")
                points.append(Point(labels.pop("__name__", expression), labels, figure, stamp))
            return points

        return list(self._checked(f"the query {expression!r}", decode))

    def targets(self, deadline: Deadline | None = None) -> dict[str, MachineStatus]:
        data = self._api("targets", deadline or self._deadline(None), state="active")

        def decode() -> dict[str, MachineStatus]:
            found: dict[str, MachineStatus] = {}
            active = _need(_need(data, dict, "data", "an object").get("activeTargets", []), list,
                           "data.activeTargets", "a list")
            for number, target in enumerate(active):
                here = f"data.activeTargets[{number}]"
                _need(target, dict, here, "an object")
                instance = _labels(target.get("labels", {}), f"{here}.labels").get("instance", "")
                health = _need(target.get("health", "unknown"), str, f"{here}.health", '"up", "down" or "unknown"')
                last_error = _need(target.get("lastError", "") or "", str, f"{here}.lastError", "a string")
                last_scrape = _need(target.get("lastScrape", "") or "", str, f"{here}.lastScrape", "a time")
                if health == "up":
                    error = ""
                elif health == "unknown":
                    error = last_error or "not scraped yet"
                else:
                    error = last_error or "down"
                last = _rfc3339(last_scrape) if health == "up" else None
                found[instance] = MachineStatus(instance, online=health == "up", error=error, last_sample=last)
            return found

        return dict(self._checked("targets", decode))

    def fetch(self, stopping: threading.Event | None = None) -> list[MachineStatus]:
        names = sorted({metric for found in MAPPING.values() for metric, _ in found} | set(INFO_METRICS))
        refresh = self._deadline(stopping)
        failed = threading.Event()  # the first query that fails ends the others: the refresh has failed
        deadline = Deadline(self.timeout, refresh.what, parent=refresh, stopping=failed)
        errors: list[SourceError] = []

        def ask(call: Any, *args: Any) -> Any:
            try:
                return call(*args, deadline)
            except SourceError as exc:
                if not failed.is_set():
                    errors.append(exc)
                    failed.set()
                raise

        with ThreadPoolExecutor(FETCH_THREADS, thread_name_prefix="machines-query") as pool:
            targets_future = pool.submit(ask, self.targets)
            cpu_future = pool.submit(ask, self.query, NODE_CPU_QUERY)
            batches = [pool.submit(ask, self.query, name) for name in names]  # every machine in each answer
        if stopping is not None and stopping.is_set():
            raise SourceError("stopped")
        if errors:
            raise errors[0]
        results = [future.result() for future in batches]
        targets = targets_future.result()
        cpu = {p.labels.get("instance", ""): p.value for p in cpu_future.result()}
        points = [p for batch in results for p in batch]
        machines = build_machines(points, targets)
        by_instance = {m.instance: m for m in machines}
        for instance, ratio in cpu.items():  # node_exporter's CPU, for machines without the panel's exporter
            machine = by_instance.get(instance) or by_instance.get(host_of(instance))
            if machine is not None and machine.host_cpu_utilization_ratio is None:
                machine.host_cpu_utilization_ratio = ratio
        return machines

    def history(self, instance: str, seconds: float, step: float | None = None, *,
                stopping: threading.Event | None = None) -> dict[str, list[tuple[float, float]]]:
        """One machine's memory over the last `seconds`: 'gpu<N>' used and 'gpu<N>.total' bytes, 'host' used and
        'host.total' bytes (range queries, all within one deadline; this panel's metrics, else dcgm-exporter's
        and node_exporter's)."""
        end = time.time()
        step = step or max(seconds / 300, 1.0)
        deadline = self._deadline(stopping)
        selector = f'{{instance="{_escape(instance)}"}}'
        host_selector = f'{{instance=~"{_escape(re.escape(host_of(instance)))}(:[0-9]+)?"}}'
        queries = (
            ("gpu{}", f"tfdp_gpu_memory_used_bytes{selector}", f"DCGM_FI_DEV_FB_USED{host_selector} * {MIB}"),
            ("gpu{}.total", f"tfdp_gpu_memory_total_bytes{selector}",
             f"(DCGM_FI_DEV_FB_USED{host_selector} + DCGM_FI_DEV_FB_FREE{host_selector}) * {MIB}"),
            ("host", f"tfdp_host_memory_used_bytes{selector}",
             f"node_memory_MemTotal_bytes{host_selector} - node_memory_MemAvailable_bytes{host_selector}"),
            ("host.total", f"tfdp_host_memory_total_bytes{selector}", f"node_memory_MemTotal_bytes{host_selector}"),
        )
        series: dict[str, list[tuple[float, float]]] = {}
        for pattern, ours, theirs in queries:
            for expression in (ours, theirs):
                data = self._api("query_range", deadline, query=expression, start=f"{end - seconds:.3f}",
                                 end=f"{end:.3f}", step=f"{step:g}")

                def decode(data: Any = data, pattern: str = pattern) -> int:
                    found = _series(data, "data", "values")
                    for number, (labels, values) in enumerate(found):
                        here = f"data.result[{number}].values"
                        samples = _need(values, list, here, "a list of [time, \"value\"]")
                        series[pattern.format(_gpu_key(labels))] = [_sample(v, f"{here}[{i}]")
                                                                    for i, v in enumerate(samples)]
                    return len(found)

                if self._checked(f"the range query {expression!r}", decode):
                    break
        return series


def _escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"')


class ExporterSource:
    """Exporters' /metrics fetched directly (the panel's, dcgm-exporter's or node_exporter's)."""

    def __init__(self, urls: Sequence[str], timeout: float = TIMEOUT_S, refresh_timeout: float = REFRESH_TIMEOUT_S,
                 max_bytes: int = MAX_BYTES):
        if not urls:
            raise SourceError("no exporter URL given")
        self.urls = [self._metrics_url(url) for url in urls]
        self.timeout = timeout
        self.refresh_timeout = max(refresh_timeout, timeout)
        self.max_bytes = max_bytes
        self.description = f"{len(self.urls)} exporter(s)"
        self._lock = threading.Lock()
        self._cpu_before: dict[str, tuple[float, float]] = {}  # instance -> (idle seconds, all seconds)
        self._history: dict[str, deque[tuple[float, dict[str, float]]]] = {}

    @staticmethod
    def _metrics_url(url: str) -> str:
        checked = check_url(url, "--exporter")
        return checked if urllib.parse.urlsplit(checked).path not in ("", "/") else f"{checked}/metrics"

    @staticmethod
    def instance_of(url: str) -> str:
        return urllib.parse.urlsplit(url).netloc

    def _scrape(self, url: str, refresh: Deadline) -> tuple[list[Point], MachineStatus]:
        instance = self.instance_of(url)
        state = MachineStatus(instance)
        now = time.time()
        try:
            refresh.check()  # its turn came after the refresh's deadline (more targets than fetch threads)
            deadline = Deadline(self.timeout, f"{self.timeout:g} s", parent=refresh)
            body = get(url, deadline, max_bytes=self.max_bytes,
                       accept="text/plain;version=0.0.4;q=1,*/*;q=0.1").body.decode("utf-8", "replace")
        except FetchError as exc:
            state.online, state.error = False, str(exc)
            return [], state
        try:
            known = known_lines(body)
            families = list(text_string_to_metric_families(known))
        except (ValueError, IndexError, KeyError) as exc:
            state.online, state.error = False, f"not Prometheus exposition text ({str(exc)[:200]})"
            return [], state
        points = []
        for family in families:
            for sample in family.samples:
                if sample.name in KNOWN_METRICS:
                    points.append(Point(sample.name, {**sample.labels, "instance": instance}, float(sample.value),
                                        now))
        if not points:
            state.online = False
            state.error = ("no metric this view reads (tfdp_…, DCGM_FI_DEV_…, node_…): is it an exporter's "
                           "/metrics?")
            return [], state
        state.last_sample = now
        return points, state

    def _node_cpu(self, instance: str, points: list[Point]) -> float | None:
        idle = sum(p.value for p in points if p.name == NODE_CPU and p.labels.get("mode") == "idle")
        total = sum(p.value for p in points if p.name == NODE_CPU)
        if not total:
            return None
        with self._lock:
            before = self._cpu_before.get(instance)
            self._cpu_before[instance] = (idle, total)
        if before is None or total <= before[1]:
            return None
        return min(max(1.0 - (idle - before[0]) / (total - before[1]), 0.0), 1.0)

    def fetch(self, stopping: threading.Event | None = None) -> list[MachineStatus]:
        refresh = Deadline(self.refresh_timeout, f"{self.refresh_timeout:g} s (one refresh of every target)",
                           stopping=stopping)
        with ThreadPoolExecutor(min(FETCH_THREADS, len(self.urls)), thread_name_prefix="machines-scrape") as pool:
            scraped = list(pool.map(lambda url: self._scrape(url, refresh), self.urls))
        if stopping is not None and stopping.is_set():
            raise SourceError("stopped")
        points = [p for found, _ in scraped for p in found]
        targets = {state.instance: state for _, state in scraped}
        cpu = {}
        for found, state in scraped:
            ratio = self._node_cpu(state.instance, found)
            if ratio is not None:
                cpu[state.instance] = ratio
        machines = build_machines(points, targets, cpu)
        self._remember(machines)
        return machines

    def _remember(self, machines: list[MachineStatus]) -> None:
        with self._lock:
            for machine in machines:
                if not machine.online:
                    continue
                values = {}
                for gpu in machine.gpus:
                    if gpu.memory_used_bytes is not None:
                        values[f"gpu{gpu.index}"] = gpu.memory_used_bytes
                    if gpu.memory_total_bytes is not None:
                        values[f"gpu{gpu.index}.total"] = gpu.memory_total_bytes
                if machine.host_memory_used_bytes is not None:
                    values["host"] = machine.host_memory_used_bytes
                if machine.host_memory_total_bytes is not None:
                    values["host.total"] = machine.host_memory_total_bytes
                self._history.setdefault(machine.instance, deque(maxlen=EXPORTER_HISTORY)).append(
                    (machine.last_sample or time.time(), values))

    def history(self, instance: str, seconds: float, *,
                stopping: threading.Event | None = None) -> dict[str, list[tuple[float, float]]]:
        """What this source fetched from `instance` in the last `seconds` (it has no server to ask)."""
        since = time.time() - seconds
        series: dict[str, list[tuple[float, float]]] = {}
        with self._lock:
            for stamp, values in self._history.get(instance, ()):
                if stamp >= since:
                    for name, value in values.items():
                        series.setdefault(name, []).append((stamp, value))
        return series


def _percent(value: float | None) -> str:
    return "N/A" if value is None else f"{value * 100:.0f}%"


def _age(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    return f"{seconds:.0f} s ago" if seconds < 120 else f"{seconds / 60:.0f} min ago"


def machines_text(machines: Sequence[MachineStatus], description: str, now: float | None = None) -> list[str]:
    """`tf-device-panel machines` as a table: one line per machine, one indented line per GPU."""
    now = now or time.time()
    if not machines:
        return [f"no machines found through {description}"]
    lines = [f"{'MACHINE':<24} {'STATE':<8} {'LAST SAMPLE':<12} {'CPU':>5}  {'HOST GiB':<11} GPUS  RUN"]
    for machine in machines:
        state = "online" if machine.online else "OFFLINE"
        run = f"{machine.run.get('job', '')} ({machine.run.get('status', '')})" if machine.run else ""
        if not machine.online:
            lines.append(f"{machine.name[:24]:<24} {state:<8} {'-':<12} {'-':>5}  {'-':<11} -")
            lines.append(f"  {machine.instance}: {machine.error}")
            continue
        host = f"{gib_figure(machine.host_memory_used_bytes)}/{gib_figure(machine.host_memory_total_bytes)}"
        lines.append(f"{machine.name[:24]:<24} {state:<8} {_age(machine.age_s(now)):<12} "
                     f"{_percent(machine.host_cpu_utilization_ratio):>5}  {host:<11} "
                     f"{len(machine.gpus):<4} {run}".rstrip())
        if machine.name != machine.instance:
            lines.append(f"  {machine.instance} ({', '.join(machine.exporters) or 'no known metrics'})")
        for gpu in machine.gpus:
            lines.append(f"  gpu{gpu.index:<3} {gpu.name[:28]:<28} {gib_figure(gpu.memory_used_bytes)}/"
                         f"{gib_figure(gpu.memory_total_bytes)} GiB  {_percent(gpu.utilization_ratio)} busy")
    return lines


def make_source(prometheus: str | None, exporters: Sequence[str] | None) -> Source:
    if prometheus and exporters:
        raise SourceError("use either --prometheus URL or --exporter URL …, not both")
    if prometheus:
        return PrometheusSource(prometheus)
    if exporters:
        return ExporterSource(exporters)
    raise SourceError("name a source: --prometheus URL (a Prometheus server) or --exporter URL (repeatable)")
