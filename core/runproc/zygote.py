"""The zygote: TensorFlow imported once, not initialized; every run process is a fresh fork of it.

Started by `core.client.zygote.Zygote` as `python -m tf_device_panel.core.runproc.zygote SOCKET_FD`, where the fd is
its end of a SOCK_SEQPACKET socket pair. It imports TensorFlow and the run process's modules (capturing what the
import prints), says `{"ok": true, "pid": …}` (or why not) on the socket, then serves one request per message:

    {"argv": [...], "env": {...}, "cwd": "...", "targets": [1, 2, N, ...]}   with fds [status, stdout, stderr, ...]

For each it forks a child that becomes the run's supervisor (`core.runproc.supervisor`), exactly as the one the
panel starts by hand: a session of its own, a child subreaper, SIGHUP when its parent (this zygote) dies, and
the run process a fork of it running `core.runproc.runtime_main`, which finds TensorFlow already imported. The
child takes the request's fds as the numbers in `targets` (stdout, stderr, then the pipes the run's arguments
name) and nothing else of this process's; its environment, working folder and arguments are the request's, set
before TensorFlow initializes: the variables TensorFlow reads at initialization (the device order and the
visible devices, the allocators, memory growth, the CPU's BFC allocator) take effect as in a process started
with them. What TensorFlow's import printed is written to the run's stdout and stderr first, as a fresh
process's import would print it.

The reply is `{"pid": …}` with a pidfd of the child (so the panel's signals can never reach a recycled pid). When
the child exits, this process reaps it and writes its status (as `subprocess.Popen.returncode` has it) to the
request's status pipe. End of file on the socket (the panel let this zygote go) ends it once the runs forked from
it have ended; its parent's death (SIGKILL) ends it at once, and each child then gets its SIGHUP and ends its
run.

This process never initializes TensorFlow, starts no thread of its own and touches no GPU: a fork of it is a
process in which nothing has happened yet.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import json
import os
import select
import signal
import socket
import sys
import tempfile
import traceback
from typing import cast

from tf_device_panel.core.processes import PARENT_PID_ENV, die_with_parent
from tf_device_panel.core.protocol.zygote import SpawnRequest, ZygoteReply
from tf_device_panel.core.runproc.supervisor import HandOver

MAX_FDS = 16
MAX_MESSAGE = 1 << 20

# The modules a run process imports before its job: imported here once, so a fork finds them loaded.
PRELOADED = ("tensorflow", "tf_device_panel.core.runproc.supervisor", "tf_device_panel.core.catalogue",
             "tf_device_panel.core.config.plan", "tf_device_panel.core.protocol.events",
             "tf_device_panel.core.runproc.jobs", "tf_device_panel.core.runproc.jobs.context",
             "tf_device_panel.core.runproc.tf_facts", "tf_device_panel.core.protocol.output_lines")

_libc = ctypes.CDLL(None)


def import_capturing_output() -> tuple[bytes, bytes, str | None]:
    """Import PRELOADED with fds 1 and 2 going to files: (what went to stdout, to stderr, the error or None)."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        saved = {fd: os.dup(fd) for fd in (1, 2)}
        os.dup2(out.fileno(), 1)
        os.dup2(err.fileno(), 2)
        error = None
        try:
            import importlib

            for name in PRELOADED:
                importlib.import_module(name)
        except BaseException as exc:  # whatever stops the import is the answer to send
            error = f"{type(exc).__name__}: {exc}"
        finally:
            for stream in (sys.stdout, sys.stderr):
                with contextlib.suppress(OSError, ValueError):
                    stream.flush()
            _libc.fflush(None)
            for fd, original in saved.items():
                os.dup2(original, fd)
                os.close(original)
        out.seek(0)
        err.seek(0)
        return out.read(), err.read(), error


def send(sock: socket.socket, message: ZygoteReply, fds: list[int] | None = None) -> None:
    data = json.dumps(message).encode()
    if fds:
        socket.send_fds(sock, [data], fds)
    else:
        sock.send(data)


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def become_supervisor(request: SpawnRequest, received: list[int], import_output: tuple[bytes, bytes],
                      zygote_pid: int) -> None:
    """In the forked child: take the request's fds, environment and folder, then be the run's supervisor.
    Never returns."""
    try:
        os.setsid()  # a session and process group of its own, as `start_module` gives the supervisor
        for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGCHLD):
            signal.signal(signum, signal.SIG_DFL)
        targets = [int(fd) for fd in request["targets"]]
        given = received[1:]  # received[0] is the status pipe: the zygote's, never the run's
        floor = max([*targets, 2]) + 1
        high = [fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, floor) for fd in given]
        # Nothing of the zygote's but these: a fresh process started with `pass_fds` has no other fd.
        keep = set(high)
        for name in os.listdir("/proc/self/fd"):
            fd = int(name)
            if fd > 2 and fd not in keep:
                with contextlib.suppress(OSError):
                    os.close(fd)
        for source, target in zip(high, targets, strict=True):
            os.dup2(source, target)  # inheritable, as pass_fds makes them
        for fd in high:
            os.close(fd)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        os.chdir(request["cwd"])
        env = {str(k): str(v) for k, v in request["env"].items()}
        env[PARENT_PID_ENV] = str(zygote_pid)  # the supervisor's parent-death signal names the zygote
        os.environ.clear()
        os.environ.update(env)
        # What a fresh process gets that a fork would share: NumPy's global generator seeded from the OS
        # (Python's `random` reseeds itself in every fork).
        numpy = sys.modules.get("numpy")
        if numpy is not None:
            numpy.random.seed()
        for fd, data in zip((1, 2), import_output, strict=True):
            if data:
                write_all(fd, data)
        from tf_device_panel.core.runproc import supervisor

        argv = [str(arg) for arg in request["argv"]]
        sys.argv = [supervisor.__name__, *argv]
        module = None
        if argv[:1] == ["--module"]:
            module, argv = argv[1], argv[2:]
        supervisor.exit_like(supervisor.Supervisor(argv, module).main())
    except HandOver:
        raise  # a run process leaving for the interpreter's top level (supervisor.HandOver)
    except BaseException:
        with contextlib.suppress(Exception):
            write_all(2, traceback.format_exc().encode())
    os._exit(1)


def serve(sock: socket.socket, import_output: tuple[bytes, bytes]) -> None:
    children: dict[int, tuple[int, int]] = {}  # pidfd -> (pid, status pipe)
    listening = True
    while listening or children:
        # Once the panel has let this zygote go, the runs forked from it go on to their ends: their statuses are
        # still owed (and this zygote's end would end them, by their supervisors' parent-death signal).
        readable, _, _ = select.select([sock.fileno()] * listening + [*children], [], [])
        for pidfd in [fd for fd in readable if fd in children]:
            pid, status_fd = children.pop(pidfd)
            _, wait_status = os.waitpid(pid, 0)
            with contextlib.suppress(OSError):
                write_all(status_fd, f"{os.waitstatus_to_exitcode(wait_status)}\n".encode())
            os.close(status_fd)
            os.close(pidfd)
        if not listening or sock.fileno() not in readable:
            continue
        try:
            message, received, _, _ = socket.recv_fds(sock, MAX_MESSAGE, MAX_FDS)
        except OSError:
            message, received = b"", []
        if not message:
            listening = False  # the panel let this zygote go (a panel that died took this process with it)
            continue
        try:
            request = cast(SpawnRequest, json.loads(message))
            if len(received) != len(request["targets"]) + 1:
                raise ValueError(f"{len(received)} fds for {len(request['targets'])} targets")
        except (ValueError, KeyError, TypeError) as exc:
            for fd in received:
                os.close(fd)
            send(sock, {"error": f"bad request: {exc}"})
            continue
        pid = os.fork()
        if pid == 0:
            sock.close()
            become_supervisor(request, received, import_output, os.getppid())
        for fd in received[1:]:
            os.close(fd)
        pidfd = os.pidfd_open(pid)
        children[pidfd] = (pid, received[0])
        send(sock, {"pid": pid}, [pidfd])


def main() -> int:
    die_with_parent()
    # Its own session: the panel's Ctrl+C is the panel's; its death is this process's SIGKILL.
    sock = socket.socket(fileno=int(sys.argv[1]))
    stdout, stderr, error = import_capturing_output()
    if error is not None:
        send(sock, {"ok": False, "error": error})
        return 1
    send(sock, {"ok": True, "pid": os.getpid()})
    serve(sock, (stdout, stderr))
    return 0


if __name__ == "__main__":
    sys.exit(main())
