"""The zygote: TensorFlow imported once, not initialized; every run process is a fresh fork of it.

Started by `core.client.zygote.Zygote` as `python -m tf_device_panel.core.runproc.zygote SOCKET_FD`, where the fd is
its end of a SOCK_SEQPACKET socket pair. It imports TensorFlow and the run process's modules (capturing what the
import prints), says `{"ok": true, "pid": …}` (or why not) on the socket, then serves one request per message:

    {"argv": ["--module", MODULE, ...], "env": {...}, "cwd": "...", "targets": [1, 2, N, ...]}
                                                                          with fds [status, stdout, stderr, ...]

For each it forks a child that becomes the run's supervisor (`core.runproc.supervisor`), exactly as the one the
panel starts by hand: a session of its own, a child subreaper, SIGHUP when the panel dies (watched through a pidfd
of the panel, not by a parent-death signal: see below), and the run process a fork of it running
`core.runproc.runtime_main`, which finds TensorFlow already imported. The child takes the request's fds as the
numbers in `targets` (stdout, stderr, then the pipes the run's arguments name) and nothing else of this process's;
its environment, working folder and arguments are the request's, set before TensorFlow initializes: the variables
TensorFlow reads at initialization (the device order and the visible devices, the allocators, memory growth, the
CPU's BFC allocator) take effect as in a process started with them. What TensorFlow's import printed is written to
the run's stdout and stderr first, as a fresh process's import would print it.

The reply is `{"pid": …}` with a pidfd of the child (so the panel's signals can never reach a recycled pid). When
the child exits, this process reaps it and writes its status (as `subprocess.Popen.returncode` has it) to the
request's status pipe. End of file on the socket (the panel let this zygote go) ends it once the runs forked from
it have ended; its parent's death (SIGKILL) ends it at once.

A run outlives this process: the child's life is tied to the panel's, not to its parent's. It has no parent-death
signal (that would name this zygote); instead it holds a pidfd of the panel, opened here at the start, and a
thread started once its run process is forked waits on it and, when the panel is gone, gives the supervisor the
SIGHUP that ends the run. The child also holds the status pipe and writes its own status there as it exits, so
the panel learns how the run ended when this zygote died (SIGKILL, a crash) before it could say; the zygote's
word, when it comes too, is the same. The run process itself, a fork of the child, closes both at once: it holds
only what a process started by hand would.

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
import threading
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
                      panel_pidfd: int | None) -> None:
    """In the forked child: take the request's fds, environment and folder, then be the run's supervisor.
    Never returns."""
    status_fd: int | None = None
    try:
        os.setsid()  # a session and process group of its own, as `start_module` gives the supervisor
        for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGCHLD):
            signal.signal(signum, signal.SIG_DFL)
        targets = [int(fd) for fd in request["targets"]]
        floor = max([*targets, 2]) + 1
        # received[0] is the status pipe: this child's own (it writes its status there), never the run's.
        high = [fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, floor) for fd in received]
        if panel_pidfd is not None:
            panel_pidfd = fcntl.fcntl(panel_pidfd, fcntl.F_DUPFD_CLOEXEC, floor)
        # Nothing of the zygote's but these: a fresh process started with `pass_fds` has no other fd.
        keep = {*high, panel_pidfd}
        for name in os.listdir("/proc/self/fd"):
            fd = int(name)
            if fd > 2 and fd not in keep:
                with contextlib.suppress(OSError):
                    os.close(fd)
        status_fd, given = high[0], high[1:]
        for source, target in zip(given, targets, strict=True):
            os.dup2(source, target)  # inheritable, as pass_fds makes them
        for fd in given:
            os.close(fd)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        os.chdir(request["cwd"])
        env = {str(k): str(v) for k, v in request["env"].items()}
        env.pop(PARENT_PID_ENV, None)  # no parent-death signal: its parent is this zygote (see the module's doc)
        os.environ.clear()
        os.environ.update(env)
        tie_to_panel(status_fd, panel_pidfd)
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
        module, argv = argv[1], argv[2:]  # `--module MODULE`, as `serve` checked
        status = supervisor.Supervisor(argv, module).main()
        with contextlib.suppress(OSError):
            write_all(status_fd, f"{status}\n".encode())
        supervisor.exit_like(status)
    except HandOver:
        raise  # a run process leaving for the interpreter's top level (supervisor.HandOver)
    except BaseException:
        with contextlib.suppress(Exception):
            write_all(2, traceback.format_exc().encode())
    if status_fd is not None:
        with contextlib.suppress(OSError):
            write_all(status_fd, b"1\n")
    os._exit(1)


def tie_to_panel(status_fd: int, panel_pidfd: int | None) -> None:
    """In the child, once: its first fork (the run process) closes the status pipe and the panel's pidfd, and the
    child then watches the panel from a thread (started after that fork: a fork of a process with threads would
    warn in the run's output). Later forks, the run's own, are left alone."""
    armed = [True]

    def in_run_process() -> None:
        if armed[0]:
            armed[0] = False
            for fd in (status_fd, panel_pidfd):
                if fd is not None:
                    with contextlib.suppress(OSError):
                        os.close(fd)

    def in_supervisor() -> None:
        if armed[0]:
            armed[0] = False
            if panel_pidfd is not None:
                threading.Thread(target=end_with_panel, args=(panel_pidfd, threading.main_thread().ident),
                                 name="panel-watch", daemon=True).start()

    os.register_at_fork(after_in_child=in_run_process, after_in_parent=in_supervisor)


def end_with_panel(panel_pidfd: int, main_thread: int | None) -> None:
    """Wait for the panel's end, then SIGHUP to the supervisor's main thread (it ends the run and everything it
    started), as the parent-death signal of a supervisor the panel started by hand does."""
    select.select([panel_pidfd], [], [])
    if main_thread is not None:
        signal.pthread_kill(main_thread, signal.SIGHUP)


def serve(sock: socket.socket, import_output: tuple[bytes, bytes], panel_pidfd: int | None) -> None:
    children: dict[int, tuple[int, int]] = {}  # pidfd -> (pid, status pipe)
    listening = True
    while listening or children:
        # Once the panel has let this zygote go, the runs forked from it go on to their ends (tied to the panel,
        # which each watches through its pidfd, not to this zygote): this zygote still owes their statuses.
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
            if request["argv"][:1] != ["--module"] or len(request["argv"]) < 2:
                # The panel watch is armed at the supervisor's fork of its run process (`tie_to_panel`); a
                # program's would be started without that fork (subprocess skips fork handlers) and outlive the panel.
                raise ValueError("argv must begin with --module MODULE: a forked run runs a module")
        except (ValueError, KeyError, TypeError) as exc:
            for fd in received:
                os.close(fd)
            send(sock, {"error": f"bad request: {exc}"})
            continue
        pid = os.fork()
        if pid == 0:
            sock.close()
            become_supervisor(request, received, import_output, panel_pidfd)
        for fd in received[1:]:
            os.close(fd)
        pidfd = os.pidfd_open(pid)
        children[pidfd] = (pid, received[0])
        send(sock, {"pid": pid}, [pidfd])


def main() -> int:
    panel = os.environ.get(PARENT_PID_ENV, "")
    die_with_parent()
    # Its own session: the panel's Ctrl+C is the panel's; its death is this process's SIGKILL.
    # The panel's pidfd, for each child to watch (opened once the parent-death signal is set: a panel that died
    # before is caught there, so this pidfd names the panel and no recycled pid).
    panel_pidfd = os.pidfd_open(int(panel)) if panel.isdigit() else None
    sock = socket.socket(fileno=int(sys.argv[1]))
    stdout, stderr, error = import_capturing_output()
    if error is not None:
        send(sock, {"ok": False, "error": error})
        return 1
    send(sock, {"ok": True, "pid": os.getpid()})
    serve(sock, (stdout, stderr), panel_pidfd)
    return 0


if __name__ == "__main__":
    sys.exit(main())
