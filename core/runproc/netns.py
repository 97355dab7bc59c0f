"""A private network namespace for local clusters: only a loopback interface, so nothing is reachable from outside.

TensorFlow's gRPC server always listens on 0.0.0.0 (hard-coded in grpc_server_lib.cc). Inside a network
namespace of its own, "all interfaces" is just this namespace's loopback. Needs `unshare` and `nsenter`
(util-linux) and unprivileged user namespaces; where those are missing, `LoopbackNamespace.start` says why.

`python -m core.runproc.netns hold` is the process that keeps the namespace alive: it brings `lo` up, prints
"ready", and exits when its standard input closes (when its owner goes away).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys

from tf_device_panel.core.processes import kill_group, start_module

SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP = 0x8913, 0x8914, 0x1
READY_TIMEOUT_S = 10.0


def bring_loopback_up() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        request = struct.pack("16sh", b"lo", 0)
        flags = struct.unpack("16sh", fcntl.ioctl(sock, SIOCGIFFLAGS, request))[1]
        fcntl.ioctl(sock, SIOCSIFFLAGS, struct.pack("16sh", b"lo", flags | IFF_UP))


class NamespaceUnavailable(RuntimeError):
    """This system cannot make the namespace; the message says why (missing tool, forbidden by policy)."""


class LoopbackNamespace:
    def __init__(self) -> None:
        self.holder: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        unshare, nsenter = shutil.which("unshare"), shutil.which("nsenter")
        if not unshare or not nsenter:
            raise NamespaceUnavailable("unshare/nsenter (util-linux) are not installed")
        self.holder = start_module(
            "tf_device_panel.core.runproc.netns", "hold",
            wrap=lambda argv: [unshare, "--user", "--map-root-user", "--net", *argv],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        assert self.holder.stdout is not None
        import selectors

        with selectors.DefaultSelector() as selector:
            selector.register(self.holder.stdout, selectors.EVENT_READ)
            ready = selector.select(READY_TIMEOUT_S)
        line = self.holder.stdout.readline() if ready else b""
        if line.strip() != b"ready":
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.holder.pid, signal.SIGKILL)  # so that reading its stderr cannot block
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.holder.wait(5)
            error = b""
            if self.holder.stderr is not None:
                with contextlib.suppress(OSError, ValueError):
                    error = self.holder.stderr.read(2000) or b""
            self.stop()
            raise NamespaceUnavailable(error.decode("utf-8", "replace").strip().splitlines()[-1:][0]
                                       if error.strip() else "the namespace did not start")

    def command(self, argv: list[str]) -> list[str]:
        """`argv` run inside the namespace."""
        assert self.holder is not None
        return [shutil.which("nsenter") or "nsenter", "--target", str(self.holder.pid), "--user", "--net",
                "--preserve-credentials", *argv]

    def stop(self) -> None:
        if self.holder is not None:
            kill_group(self.holder, wait_s=5)


def hold() -> int:
    bring_loopback_up()
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    sys.stdin.buffer.read()  # until the owner closes the pipe or dies
    return 0


if __name__ == "__main__" and sys.argv[1:] == ["hold"]:
    sys.exit(hold())
