"""Issue 32, items 1 and 2: the lab's fetches are bounded. Hostile targets on 127.0.0.1 (tests/hostile_http.py):
a huge answer is cut at the byte cap, a trickle of headers or body is given up at the overall deadline (one
target's, one refresh's, Prometheus's queries together), redirects are limited, a Prometheus answer with wrong JSON
types is named, and a stopped fetch ends at once."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import threading
import time
from typing import Any

import pytest
from hostile_http import HostileServer, huge, json_answer, redirect_loop, trickle_body, trickle_headers
from tf_device_panel.core.lab import fetch, machines
from tf_device_panel.core.lab.machines import ExporterSource, PrometheusSource, SourceError

MIB = 2**20


def timed(call: Any) -> tuple[Any, float]:
    started = time.monotonic()
    result = call()
    return result, time.monotonic() - started


@pytest.mark.parametrize("content_length", [False, True])
def test_a_huge_answer_is_cut_at_the_byte_cap(content_length: bool) -> None:
    with HostileServer(huge(40 * MIB, content_length)) as server:
        [machine], seconds = timed(ExporterSource([server.url]).fetch)
        assert not machine.online and "larger than the 8 MiB allowed" in machine.error, machine.error
        server.stop()
        [connection] = server.connections
        # the client hung up at the cap: what the server got out is the cap plus what the sockets' buffers held
        assert connection.sent < (8 if content_length else 24) * MIB, connection.sent  # 8: the body never read
    assert seconds < 10


@pytest.mark.parametrize("behaviour", [trickle_headers(0.2), trickle_body(0.2)], ids=["headers", "body"])
def test_a_trickling_target_is_given_up_at_its_deadline(behaviour: Any) -> None:
    with HostileServer(behaviour) as server:
        [machine], seconds = timed(ExporterSource([server.url], timeout=1.0).fetch)
    assert not machine.online and machine.error == "no complete answer within 1 s"
    assert seconds < 2.5, f"a 1 s deadline took {seconds:.1f} s"


def test_one_refresh_of_many_targets_has_one_deadline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(machines, "FETCH_THREADS", 1)  # the targets wait their turn, one after another
    with contextlib.ExitStack() as servers:
        urls = [servers.enter_context(HostileServer(trickle_body(0.2))).url for _ in range(3)]
        source = ExporterSource(urls, timeout=1.0, refresh_timeout=1.5)
        found, seconds = timed(source.fetch)
    assert [m.online for m in found] == [False] * 3
    errors = sorted(m.error for m in found)
    assert errors[0] == "no complete answer within 1 s"
    assert errors[1:] == ["no complete answer within 1.5 s (one refresh of every target)"] * 2
    assert seconds < 2.5, f"a 1.5 s refresh took {seconds:.1f} s"


EMPTY = {"status": "success", "data": {"resultType": "vector", "result": []}}
NO_TARGETS = {"status": "success", "data": {"activeTargets": []}}


def prometheus_answer(query: object = EMPTY, targets: object = NO_TARGETS) -> Any:
    return lambda path: targets if path.startswith("/api/v1/targets") else query


def test_prometheus_queries_in_a_row_share_one_deadline() -> None:
    # each answer trickles over about 3 s: no single read waits long, the whole refresh would take 6 s or more
    with HostileServer(json_answer(prometheus_answer(), every=0.05)) as server:
        started = time.monotonic()
        with pytest.raises(SourceError, match=r"no complete answer within 2 s \(one refresh's queries together\)"):
            PrometheusSource(server.url, timeout=2.0).fetch()
        seconds = time.monotonic() - started
        started = time.monotonic()
        with pytest.raises(SourceError, match="within 2 s"):
            PrometheusSource(server.url, timeout=2.0).history("gpu01:9848", 60)  # 8 range queries, one after another
        history_seconds = time.monotonic() - started
    assert seconds < 3.5 and history_seconds < 3.5, (seconds, history_seconds)


@pytest.mark.parametrize(("query", "targets", "message"), [
    ({"status": "success", "data": {"resultType": "vector", "result": [{"metric": {}, "value": 5}]}}, NO_TARGETS,
     r'data\.result\[0\]\.value should be \[time, "value"\], got a number \(5\)'),
    ({"status": "success", "data": {"resultType": "vector", "result": 5}}, NO_TARGETS,
     r"data\.result should be a list, got a number \(5\)"),
    ({"status": "success", "data": {"result": [{"metric": {"instance": 3}, "value": [1, "2"]}]}}, NO_TARGETS,
     r"data\.result\[0\]\.metric\.instance should be a string, got a number \(3\)"),
    ({"status": "success", "data": {"result": [{"metric": {}, "value": [1, "many"]}]}}, NO_TARGETS,
     r"data\.result\[0\]\.value\[1\] should be a number as a string, got a string"),
    (EMPTY, {"status": "success", "data": {"activeTargets": [{"labels": ["x"]}]}},
     r"the answer to targets .*data\.activeTargets\[0\]\.labels should be an object"),
    (EMPTY, {"status": "success", "data": {"activeTargets": 7}},
     r"data\.activeTargets should be a list, got a number \(7\)"),
])
def test_a_prometheus_answer_with_wrong_json_types_is_named(query: object, targets: object, message: str) -> None:
    with HostileServer(json_answer(prometheus_answer(query, targets))) as server, \
            pytest.raises(SourceError, match=message):
        PrometheusSource(server.url).fetch()


def test_the_machines_command_names_a_wrong_json_type() -> None:
    answer = {"status": "success", "data": {"resultType": "vector", "result": [{"metric": {}, "value": 5}]}}
    with HostileServer(json_answer(prometheus_answer(answer))) as server:
        done = subprocess.run([sys.executable, "-m", "tf_device_panel", "machines", "--prometheus", server.url],
                              capture_output=True, text=True, timeout=60)
    assert done.returncode == 1, done.stderr
    assert "data.result[0].value should be" in done.stderr
    assert "TypeError" not in done.stderr and "Traceback" not in done.stderr


def test_redirects_are_limited() -> None:
    with HostileServer(redirect_loop) as server:
        [machine] = ExporterSource([server.url]).fetch()
        assert not machine.online and machine.error.startswith("more than 3 redirects (a loop)"), machine.error
        assert len(server.connections) == 4  # the first ask and three redirects, no more


def test_a_redirect_elsewhere_is_followed_within_limits() -> None:
    body = b'tfdp_machine_info{hostname="moved"} 1\n'

    def target(connection: Any) -> None:
        if connection.path == "/metrics":
            connection.send(b"HTTP/1.1 301 Moved\r\nLocation: /real/metrics\r\nContent-Length: 0\r\n\r\n")
        else:
            connection.send(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body) + body)

    with HostileServer(target) as server:
        [machine] = ExporterSource([server.url]).fetch()
    assert machine.online and machine.name == "moved"


def test_a_stopped_fetch_ends_at_once() -> None:
    with HostileServer(trickle_body(0.2)) as server:
        stopping = threading.Event()
        outcome: list[object] = []
        source = ExporterSource([server.url], timeout=20.0)

        def run() -> None:
            try:
                outcome.append(source.fetch(stopping=stopping))
            except SourceError as exc:
                outcome.append(exc)

        thread = threading.Thread(target=run)
        thread.start()
        deadline = time.monotonic() + 10
        while not server.connections and time.monotonic() < deadline:
            threading.Event().wait(0.02)
        stopping.set()
        started = time.monotonic()
        thread.join(5)
        seconds = time.monotonic() - started
    assert not thread.is_alive() and seconds < 0.5, seconds
    assert [str(o) for o in outcome] == ["stopped"]


def test_an_answer_that_is_not_an_exporters_is_offline_with_the_reason() -> None:
    page = b"<html><body>a router's login page</body></html>\n"

    def target(connection: Any) -> None:
        connection.send(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(page) + page)

    with HostileServer(target) as server:
        [machine] = ExporterSource([server.url]).fetch()
    assert not machine.online and "no metric this view reads" in machine.error


def test_fetch_errors_are_one_line_each() -> None:
    with HostileServer(json_answer(lambda path: {"ok": True})) as server:
        deadline = fetch.Deadline(5)
        assert fetch.get(server.url, deadline).body == b'{"ok": true}'
        with pytest.raises(fetch.FetchError, match="larger than the 4 bytes allowed"):
            fetch.get(server.url, deadline, max_bytes=4)

    def elsewhere(connection: Any) -> None:
        connection.send(b"HTTP/1.1 302 Found\r\nLocation: ftp://example/x\r\nContent-Length: 0\r\n\r\n")

    with HostileServer(elsewhere) as server, \
            pytest.raises(fetch.FetchError, match="only http:// and https:// are followed"):
        fetch.get(server.url, fetch.Deadline(5))


def test_the_first_failed_query_ends_the_refresh() -> None:
    """One query refused at once while another trickles: the refresh fails with the refusal, not at the deadline."""

    def target(connection: Any) -> None:
        if connection.path.startswith("/api/v1/targets"):
            trickle_body(0.2)(connection)
        else:
            body = b'{"status":"error","error":"bad query"}'
            connection.send(b"HTTP/1.1 400 Bad Request\r\nContent-Length: %d\r\n\r\n" % len(body) + body)

    with HostileServer(target) as server:
        started = time.monotonic()
        with pytest.raises(SourceError, match=r"refused query: HTTP 400 Bad Request bad query"):
            PrometheusSource(server.url, timeout=20.0).fetch()
        assert time.monotonic() - started < 2.0
