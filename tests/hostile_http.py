"""A hostile HTTP target on 127.0.0.1 for the lab's fetch tests: it answers each connection with a behaviour the
test picks (a huge body, a trickle of bytes, a redirect loop, JSON of the wrong shape). Bounded: every behaviour
waits on the server's stop event, never longer than `LIFE_S`, and `stop()` ends and joins every thread."""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from collections.abc import Callable

LIFE_S = 30.0  # no connection is served longer than this, whatever the test does

Behaviour = Callable[["Connection"], None]


class Connection:
    def __init__(self, server: HostileServer, sock: socket.socket):
        self.server, self.sock = server, sock
        self.request = b""
        self.sent = 0
        self.started = time.monotonic()
        self.ended: float | None = None  # when the server let the connection go (the client hung up, or all was sent)

    @property
    def path(self) -> str:
        line = self.request.split(b"\r\n", 1)[0].decode("latin-1")
        parts = line.split(" ")
        return parts[1] if len(parts) > 1 else ""

    def alive(self) -> bool:
        return not self.server.stopping.is_set() and time.monotonic() - self.started < LIFE_S

    def send(self, data: bytes) -> bool:
        """False once the client hung up."""
        try:
            self.sock.sendall(data)
        except OSError:
            return False
        self.sent += len(data)
        return True

    def trickle(self, data: bytes, every: float) -> None:
        """One byte of `data` every `every` s, until it is all sent, the client hangs up or the server stops."""
        for index in range(len(data)):
            if not self.alive() or not self.send(data[index:index + 1]):
                return
            self.server.stopping.wait(every)


class HostileServer:
    def __init__(self, behaviour: Behaviour):
        self.behaviour = behaviour
        self.stopping = threading.Event()
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.listener.settimeout(0.1)
        self.port = self.listener.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.connections: list[Connection] = []
        self.threads: list[threading.Thread] = []
        self._accepting = threading.Thread(target=self._accept, name="hostile-accept", daemon=True)
        self._accepting.start()

    def _accept(self) -> None:
        while not self.stopping.is_set():
            try:
                sock, _ = self.listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            connection = Connection(self, sock)
            self.connections.append(connection)
            thread = threading.Thread(target=self._serve, args=(connection,), name="hostile-conn", daemon=True)
            self.threads.append(thread)
            thread.start()

    def _serve(self, connection: Connection) -> None:
        sock = connection.sock
        try:
            sock.settimeout(5.0)
            while b"\r\n\r\n" not in connection.request and len(connection.request) < 65536:
                got = sock.recv(4096)
                if not got:
                    return
                connection.request += got
            self.behaviour(connection)
        except OSError:
            pass
        finally:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()
            connection.ended = time.monotonic()

    def stop(self) -> None:
        self.stopping.set()
        self.listener.close()
        self._accepting.join(5)
        for thread in self.threads:
            thread.join(10)

    def __enter__(self) -> HostileServer:
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()


# -- behaviours ----------------------------------------------------------------------------------------------


def huge(total: int, content_length: bool = False) -> Behaviour:
    """200 and `total` bytes of exposition-like text, 1 MiB at a time (Content-Length given or not)."""
    line = b'junk_metric{label="x"} 1\n'
    block = line * (2**20 // len(line))

    def behave(connection: Connection) -> None:
        length = f"Content-Length: {total}\r\n" if content_length else ""
        if not connection.send(f"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n{length}Connection: close\r\n\r\n"
                               .encode()):
            return
        while connection.sent < total and connection.alive():
            if not connection.send(block):
                return

    return behave


def trickle_headers(every: float) -> Behaviour:
    def behave(connection: Connection) -> None:
        connection.trickle(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nX-Slow: " + b"y" * 10_000 + b"\r\n\r\n",
                           every)

    return behave


def trickle_body(every: float, body: bytes = b"tfdp_machine_info{hostname=\"slow\"} 1\n" * 1000) -> Behaviour:
    def behave(connection: Connection) -> None:
        if connection.send(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nConnection: close\r\n\r\n"):
            connection.trickle(body, every)

    return behave


def redirect_loop(connection: Connection) -> None:
    connection.send(f"HTTP/1.1 302 Found\r\nLocation: {connection.path}\r\nContent-Length: 0\r\n"
                    f"Connection: close\r\n\r\n".encode())


def json_answer(answer: Callable[[str], object], every: float = 0.0) -> Behaviour:
    """200 with `answer(path)` as JSON (trickled a byte every `every` s when given)."""

    def behave(connection: Connection) -> None:
        body = json.dumps(answer(connection.path)).encode()
        head = (f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n"
                f"Connection: close\r\n\r\n").encode()
        if every:
            connection.send(head)
            connection.trickle(body, every)
        else:
            connection.send(head + body)

    return behave
