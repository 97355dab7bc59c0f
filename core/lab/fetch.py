"""One bounded HTTP GET for the lab views (Qt-free): what `machines` and the window's Machines view fetch with.

A lab target can misbehave in every way a server can: answer a gigabyte, trickle a byte every few seconds
(headers or body), redirect in a loop, never finish its TLS handshake. Every fetch here is therefore bounded:

- an overall `Deadline` (not a per-read socket timeout): name lookup, connect, TLS, headers and body together;
  a deadline can sit inside another (one target's inside one refresh's), and the tighter one wins;
- a byte cap per answer (`max_bytes`, the body after chunked decoding; headers have http.client's limits and
  count against a raw cap);
- at most `max_redirects` redirects, to http(s) only;
- a `stopping` event that cancels a fetch within `SLICE_S` (the window stops its fetcher without waiting for a
  deadline).

Every failure is a `FetchError` whose text is one short reason ("no complete answer within 5 s", "the answer is
larger than 8 MiB", "HTTP 404 Not Found", …), never a traceback.
"""

from __future__ import annotations

import errno
import http.client
import io
import ipaddress
import os
import select
import socket
import ssl
import threading
import time
import urllib.parse
from dataclasses import dataclass, field

from tf_device_panel.core.units import MIB

MAX_BYTES = 8 * MIB  # an exporter's /metrics is tens of KB, a node_exporter's a few hundred; Prometheus's answers
                     # for a lab of hundreds of GPUs a few MB
MAX_REDIRECTS = 3
ERROR_BODY_BYTES = 64 * 1024  # what is read of an HTTP error's body (Prometheus explains its errors there)
SLICE_S = 0.1  # the longest a blocked read waits before looking at the deadline and the stopping event again
REDIRECTS = (301, 302, 303, 307, 308)
CHUNK = 64 * 1024
USER_AGENT = "tf-device-panel-machines"


class FetchError(Exception):
    """A fetch that gave no usable answer; str() is the reason. `status` and `body` are set for an HTTP error."""

    def __init__(self, reason: str, status: int | None = None, body: bytes = b"", *, connecting: bool = False):
        super().__init__(reason)
        self.status = status
        self.body = body
        self.connecting = connecting  # failed before a request was sent: no such host, refused, TLS


class Cancelled(FetchError):
    """The fetch's `stopping` event was set."""


class Deadline:
    """A point in time a fetch (or several in a row, or in parallel) must be done by.

    `what` says whose deadline it is in the error ("one target's 5 s"); `parent`: an enclosing deadline (a refresh
    of many targets) that ends this one too, if sooner; `stopping`: an event that cancels everything under it."""

    def __init__(self, seconds: float, what: str = "", *, parent: Deadline | None = None,
                 stopping: threading.Event | None = None):
        self.seconds = seconds
        self.what = what or f"{seconds:g} s"
        self.end = time.monotonic() + seconds
        self.parent = parent
        self.stopping: threading.Event | None = stopping
        if stopping is None and parent is not None:
            self.stopping = parent.stopping

    def remaining(self) -> float:
        own = self.end - time.monotonic()
        return own if self.parent is None else min(own, self.parent.remaining())

    def check(self) -> None:
        """Raise Cancelled or FetchError when stopped or past this deadline or an enclosing one."""
        if self.stopping is not None and self.stopping.is_set():
            raise Cancelled("stopped")
        if self.parent is not None:
            self.parent.check()
        if time.monotonic() >= self.end:
            raise FetchError(f"no complete answer within {self.what}")

    def wait_slice(self) -> float:
        """How long one blocking step may wait: at most SLICE_S, never past the deadline."""
        self.check()
        return max(min(self.remaining(), SLICE_S), 0.001)


@dataclass
class Answer:
    url: str  # where the answer came from, after redirects
    status: int
    headers: dict[str, str] = field(default_factory=dict)  # lower-case names
    body: bytes = b""



def get(url: str, deadline: Deadline, *, max_bytes: int = MAX_BYTES, max_redirects: int = MAX_REDIRECTS,
        accept: str = "*/*", tls: ssl.SSLContext | None = None) -> Answer:
    """GET `url` within `deadline`: a 2xx answer, else FetchError (an HTTP error carries its status and the start
    of its body)."""
    seen = [url]
    for _ in range(max_redirects + 1):
        answer = _get_once(url, deadline, max_bytes, accept, tls)
        if answer.status in REDIRECTS:
            location = answer.headers.get("location", "")
            if not location:
                raise FetchError(f"HTTP {answer.status} redirect without a Location")
            url = urllib.parse.urljoin(url, location.strip())
            if urllib.parse.urlsplit(url).scheme not in ("http", "https"):
                raise FetchError(f"redirected to {location[:200]!r}: only http:// and https:// are followed")
            seen.append(url)
            continue
        if not 200 <= answer.status < 300:
            raise FetchError(f"HTTP {answer.status} {http.client.responses.get(answer.status, '')}".strip(),
                             answer.status, answer.body)
        return answer
    loop = " (a loop)" if len(set(seen)) < len(seen) else ""
    raise FetchError(f"more than {max_redirects} redirects{loop}, last to {url[:200]}")


def _get_once(url: str, deadline: Deadline, max_bytes: int, accept: str, tls: ssl.SSLContext | None) -> Answer:
    parts = urllib.parse.urlsplit(url)
    host = parts.hostname
    if parts.scheme not in ("http", "https") or not host:
        raise FetchError(f"not an http(s) URL with a host: {url[:200]!r}")
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError as exc:
        raise FetchError(f"bad port in {url[:200]!r}: {exc}") from None
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    if any(c.isspace() or ord(c) < 32 for c in target):
        raise FetchError(f"the path {target[:200]!r} contains spaces or control characters")
    raw: socket.socket | None = None
    connecting = True
    try:
        raw = _connect(host, port, deadline)
        if parts.scheme == "https":
            raw = _handshake(raw, host, deadline, tls or ssl.create_default_context())
        connecting = False
        host_header = f"[{host}]" if ":" in host else host
        if parts.port:
            host_header += f":{parts.port}"
        request = (f"GET {target} HTTP/1.1\r\nHost: {host_header}\r\nUser-Agent: {USER_AGENT}\r\n"
                   f"Accept: {accept}\r\nAccept-Encoding: identity\r\nConnection: close\r\n\r\n").encode("ascii",
                                                                                                    "replace")
        _send(raw, request, deadline)
        reader = _Reader(raw, deadline, raw_cap=2 * max_bytes + MIB)
        response = http.client.HTTPResponse(reader, method="GET")  # type: ignore[arg-type]
        try:
            response.begin()
            headers = {name.lower(): value for name, value in response.getheaders()}
            if response.status in REDIRECTS:
                return Answer(url, response.status, headers)  # its body is not needed: never read
            failed = not 200 <= response.status < 300
            cap = min(max_bytes, ERROR_BODY_BYTES) if failed else max_bytes
            encoding = headers.get("content-encoding", "identity").strip().lower()
            if encoding not in ("", "identity") and not failed:
                raise FetchError(f"the answer is {encoding}-encoded, though only identity was accepted")
            length = headers.get("content-length", "")
            if length.isdigit() and int(length) > cap and not failed:
                raise FetchError(f"the answer is {_size(int(length))}, larger than the {_size(cap)} allowed")
            body = bytearray()
            while True:
                chunk = response.read(CHUNK)
                if not chunk:
                    break
                body += chunk
                if len(body) > cap:
                    if failed:
                        del body[cap:]  # enough of an error's explanation
                        break
                    raise FetchError(f"the answer is larger than the {_size(cap)} allowed")
            return Answer(url, response.status, headers, bytes(body))
        finally:
            response.close()
    except FetchError:
        raise
    except http.client.IncompleteRead as exc:
        raise FetchError(f"the connection closed {exc.expected or 'some'} bytes before the end of the answer") \
            from None
    except http.client.LineTooLong as exc:
        raise FetchError(f"an answer line too long ({exc})") from None
    except http.client.RemoteDisconnected:
        raise FetchError("the connection closed before an answer") from None
    except http.client.BadStatusLine as exc:
        raise FetchError(f"not an HTTP answer (it began {str(exc)[:60]!r})") from None
    except http.client.HTTPException as exc:
        raise FetchError(f"a malformed HTTP answer: {type(exc).__name__} {str(exc)[:100]}".strip()) from None
    except ssl.SSLError as exc:
        raise FetchError(f"TLS: {exc.reason or exc}", connecting=connecting) from None
    except OSError as exc:
        raise FetchError(_os_reason(exc), connecting=connecting) from None
    finally:
        if raw is not None:
            raw.close()


def _size(count: int) -> str:
    return f"{round(count / MIB, 1):g} MiB" if count >= MIB else f"{count} bytes"


def _os_reason(exc: OSError) -> str:
    if isinstance(exc, socket.gaierror):
        return f"cannot resolve the host: {exc.strerror or exc}"
    return str(exc.strerror or exc or type(exc).__name__).rstrip(".").lower()


def _resolve(host: str, port: int, deadline: Deadline) -> list[tuple[int, tuple[object, ...]]]:
    """getaddrinfo, bounded: a literal address at once, a name on a helper thread given up at the deadline (the
    C call cannot be interrupted; its thread ends on its own when the resolver does)."""
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        pass
    else:
        family = socket.AF_INET6 if ip.version == 6 else socket.AF_INET
        return [(family, (host, port) if family == socket.AF_INET else (host, port, 0, 0))]
    found: list[object] = []
    done = threading.Event()

    def lookup() -> None:
        try:
            found.append(socket.getaddrinfo(host, port, type=socket.SOCK_STREAM))
        except OSError as exc:
            found.append(exc)
        finally:
            done.set()

    threading.Thread(target=lookup, name="machines-resolve", daemon=True).start()
    while not done.wait(deadline.wait_slice()):
        pass
    result = found[0]
    if isinstance(result, OSError):
        raise result
    assert isinstance(result, list)
    return [(info[0], info[4]) for info in result]


def _connect(host: str, port: int, deadline: Deadline) -> socket.socket:
    last: OSError | None = None
    for family, address in _resolve(host, port, deadline):
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.setblocking(False)
            code = sock.connect_ex(address)
            while code in (errno.EINPROGRESS, errno.EWOULDBLOCK, errno.EALREADY):
                _, writable, _ = select.select([], [sock], [], deadline.wait_slice())
                if writable:
                    code = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
                    break
            if code:
                raise OSError(code, os.strerror(code))
            return sock
        except FetchError:
            sock.close()
            raise
        except OSError as exc:
            sock.close()
            last = exc
    raise last or OSError("no address to connect to")


def _handshake(sock: socket.socket, host: str, deadline: Deadline, context: ssl.SSLContext) -> socket.socket:
    wrapped = context.wrap_socket(sock, server_hostname=host, do_handshake_on_connect=False)
    while True:
        try:
            wrapped.do_handshake()
            return wrapped
        except ssl.SSLWantReadError:
            select.select([wrapped], [], [], deadline.wait_slice())
        except ssl.SSLWantWriteError:
            select.select([], [wrapped], [], deadline.wait_slice())


def _send(sock: socket.socket, data: bytes, deadline: Deadline) -> None:
    view = memoryview(data)
    while view:
        sock.settimeout(deadline.wait_slice())
        try:
            sent = sock.send(view)
        except TimeoutError:
            continue
        view = view[sent:]


class _DeadlineRaw(io.RawIOBase):
    """A socket's reads, each waiting at most a slice of the deadline, counted against a raw byte cap."""

    def __init__(self, sock: socket.socket, deadline: Deadline, raw_cap: int):
        self.sock, self.deadline, self.raw_cap, self.count = sock, deadline, raw_cap, 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        while True:
            self.sock.settimeout(self.deadline.wait_slice())
            try:
                got = self.sock.recv_into(buffer)
            except TimeoutError:
                continue
            except ssl.SSLWantReadError:
                continue
            self.count += got
            if self.count > self.raw_cap:
                raise FetchError(f"more than {_size(self.raw_cap)} received (headers and body)")
            return got


class _Reader:
    """What http.client.HTTPResponse needs of a socket: makefile('rb')."""

    def __init__(self, sock: socket.socket, deadline: Deadline, raw_cap: int):
        self._raw = _DeadlineRaw(sock, deadline, raw_cap)

    def makefile(self, mode: str, *args: object, **kwargs: object) -> io.BufferedReader:
        return io.BufferedReader(self._raw, CHUNK)
