"""The panel's side of the zygote (`core.runproc.zygote`): a process that imported TensorFlow once, from which
each run process is forked, so a configured run process is warm in milliseconds instead of a TensorFlow import.

`spawn` hands a run's arguments, environment, folder and pipes to the zygote and returns a `ForkedProcess`: what
`subprocess.Popen` would have been for the supervisor started by hand (pid, poll, wait, send_signal, the
stdout/stderr pipes), so `RuntimeProcess` treats both alike. It returns None whenever a fork cannot stand in
for a fresh process, and the caller starts one by hand as before:

- no zygote was asked for (`start_zygotes`: the window and the test suite ask, the one-job command line does
  not), or it is still importing (the first run of a panel, or of a new environment), or it failed;
- the run wants another Python, or an environment that differs from the zygote's in anything but the
  variables read after the import (`LATE_VARIABLES`): those are set in the fork before TensorFlow initializes;
  everything else (the C++ log level, library paths, Python's own variables) is read by the interpreter's
  start or TensorFlow's import, so a different value needs a zygote of its own, started then for next time;
- `TF_DEVICE_PANEL_NO_ZYGOTE=1` is set (every run process then starts by hand).

What a fork shares with its zygote and a fresh process would not: Python's hash seed (the order of a set of
strings is the same in every run); NumPy's global generator is reseeded in each fork.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import logging
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import IO, cast

from tf_device_panel.core.hub import Hub, Message
from tf_device_panel.core.processes import PARENT_PID_ENV, module_command
from tf_device_panel.core.protocol.environment import USER_ENVIRONMENT_ENV
from tf_device_panel.core.protocol.zygote import SpawnRequest, ZygoteReply

ZYGOTE_MODULE = "tf_device_panel.core.runproc.zygote"
DISABLE_ENV = "TF_DEVICE_PANEL_NO_ZYGOTE"
REPLY_TIMEOUT_S = 1.0      # a zygote answers a fork in milliseconds; one that does not is replaced
STATUS_AFTER_EXIT_S = 2.0  # how long a forked supervisor's status may come after its exit
MAX_ZYGOTES = 2  # one per environment in use; a third environment replaces the least recently used

# Read by TensorFlow when it initializes (or by the panel's own code at run time), never by the interpreter's
# start or TensorFlow's import: a fork sets them before initialization and they take effect
# (tests/test_zygote.py proves it for each one it can on a CPU; scripts/gpu-acceptance.sh for the GPU ones).
LATE_VARIABLES = frozenset({
    "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "TF_GPU_ALLOCATOR", "TF_FORCE_GPU_ALLOW_GROWTH",
    "TF_CPU_ALLOCATOR_USE_BFC", "TF_CPU_BFC_MEM_LIMIT_IN_MB",
    # The panel's own, per run or read at run time.
    "TF_DEVICE_PANEL_PASS_FDS", USER_ENVIRONMENT_ENV, PARENT_PID_ENV, "TF_DEVICE_PANEL_HOME",
    "PWD", "OLDPWD",
    # pytest names the test and its phase here, changing it between a test's set-up and its body.
    "PYTEST_CURRENT_TEST",
})

log = logging.getLogger(__name__)


def environment_key(python: str, env: Mapping[str, str]) -> tuple[str, tuple[tuple[str, str], ...]]:
    """What a run process's start and TensorFlow's import read: runs that agree on it can share a zygote."""
    return python, tuple(sorted((name, value) for name, value in env.items() if name not in LATE_VARIABLES))


class ForkedProcess:
    """A run's supervisor forked by the zygote, seen as the `subprocess.Popen` the panel would have started.

    Its status comes on `status_fd`, from the supervisor itself as it exits and from the zygote, its parent, when
    it reaps it; signals go through a pidfd. A zygote that died meanwhile (its forks live on: see
    core.runproc.zygote) says nothing, and the supervisor's own word is enough; a supervisor killed outright
    after its zygote died says nothing either, and reads as killed by SIGKILL."""

    def __init__(self, pid: int, pidfd: int, status_fd: int, stdout: IO[bytes], stderr: IO[bytes]):
        self.pid = pid
        self.args = [f"<run process forked by the zygote: pid {pid}>"]
        self.returncode: int | None = None
        self.stdout = stdout
        self.stderr = stderr
        self._pidfd = pidfd
        self._status_fd = status_fd
        os.set_blocking(status_fd, False)
        self._said = b""
        self._gone_since: float | None = None  # when the pidfd said the supervisor had exited
        self._lock = threading.Lock()

    def poll(self) -> int | None:
        return self._collect(0.0)

    def wait(self, timeout: float | None = None) -> int:
        returncode = self._collect(timeout)
        if returncode is None:
            raise subprocess.TimeoutExpired(self.args, timeout or 0.0)
        return returncode

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            signal.pidfd_send_signal(self._pidfd, sig)

    def _collect(self, timeout: float | None) -> int | None:
        with self._lock:
            deadline = None if timeout is None else time.monotonic() + timeout
            while self.returncode is None:
                said = self._read_status()
                if said is not None:
                    self._done(said)
                    break
                now = time.monotonic()
                if self._gone_since is None and select.select([self._pidfd], [], [], 0)[0]:
                    self._gone_since = now
                if self._gone_since is not None and now - self._gone_since > STATUS_AFTER_EXIT_S:
                    # Gone without a word from itself or its zygote (stopped, or dead): only a signal nothing can
                    # catch ends a supervisor that way.
                    self._done(-signal.SIGKILL)
                    break
                left = None if deadline is None else deadline - now
                if left is not None and left <= 0:
                    return None
                if self._gone_since is None:
                    select.select([self._status_fd, self._pidfd], [], [], left)
                else:  # the pidfd stays readable once it is gone: wait on the status pipe in short steps
                    select.select([self._status_fd], [], [], 0.05 if left is None else min(left, 0.05))
            return self.returncode

    def _read_status(self) -> int | None:
        """The first status line said on the pipe; raises nothing. End of file with nothing said: -SIGKILL (the
        zygote is gone and the supervisor exited without its word)."""
        try:
            while chunk := os.read(self._status_fd, 64):
                self._said += chunk
            ended = True
        except BlockingIOError:
            ended = False
        except OSError:
            ended = True
        first, newline, _ = self._said.partition(b"\n")
        if newline:
            try:
                return int(first.decode().strip())
            except ValueError:
                return 1
        if ended:
            select.select([self._pidfd], [], [], STATUS_AFTER_EXIT_S)  # its fds close as it exits: moments
            return -signal.SIGKILL
        return None

    def _done(self, returncode: int) -> None:
        self.returncode = returncode
        os.close(self._status_fd)
        os.close(self._pidfd)

    def __del__(self) -> None:
        if self.returncode is None:
            for fd in (self._status_fd, self._pidfd):
                with contextlib.suppress(OSError):
                    os.close(fd)


class Zygote:
    """One zygote process and the socket to it. Safe from any thread."""

    def __init__(self, python: str, env: Mapping[str, str]):
        self.python = python
        self.env = dict(env)
        self.key = environment_key(python, env)
        self.error: str | None = None
        self.zygote_pid: int | None = None
        self._lock = threading.Lock()
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self._sock = ours
        try:
            # Its parent-death signal is SIGKILL: the forks under it then get their SIGHUP and end their runs.
            # Imported without the late variables: nothing of any run's configuration is there before the fork.
            import_env = {name: value for name, value in env.items() if name not in LATE_VARIABLES}
            import_env[PARENT_PID_ENV] = str(os.getpid())
            self._process = subprocess.Popen(
                module_command(ZYGOTE_MODULE, str(theirs.fileno()), python=python), env=import_env,
                start_new_session=True, pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        finally:
            theirs.close()
        self.process_id = self._process.pid
        self._ready: bool | None = None  # None while it imports TensorFlow
        self.started_at = time.monotonic()
        self.let_go = False               # closed on purpose: its end is no news
        self.was_ready = False
        self.replaced = False             # killed for not serving: restarted once reaped
        self.returncode: int | None = None
        self.restarted = False            # started again by the watcher after one died
        # The watcher thread reaps it the moment it ends (no zombie) and says so (`_ended`): a zygote that died
        # is restarted, its runs go on.
        self.pidfd = os.pidfd_open(self.process_id)
        _watch(self)

    def reaped(self) -> bool:
        """Collect its exit status if it has ended (the watcher calls this when its pidfd says so)."""
        self.returncode = self._process.poll()
        return self.returncode is not None

    def stopped(self) -> bool:
        """Whether it is stopped (SIGSTOP, a debugger) or dead, read from /proc without waiting: such a zygote
        would not answer."""
        try:
            with open(f"/proc/{self.process_id}/stat", "rb") as handle:
                stat = handle.read()
        except OSError:
            return True
        return stat[stat.rfind(b")") + 2:][:1] in (b"T", b"t", b"Z", b"X")

    def ready(self) -> bool:
        """Whether it has imported TensorFlow and takes requests (never blocks)."""
        with self._lock:
            return self._check_ready()

    def _check_ready(self) -> bool:
        if self._ready is None:
            if not select.select([self._sock], [], [], 0)[0]:
                if self._process.poll() is not None:
                    self._fail(f"the zygote exited with {self._process.returncode} before it was ready")
                return False
            hello = self._receive()
            if hello is None or not hello[0].get("ok"):
                self._fail(str(hello[0].get("error")) if hello else "the zygote closed its socket")
            else:
                self.zygote_pid = int(hello[0]["pid"])
                self._ready = self.was_ready = True
        return bool(self._ready)

    def _fail(self, error: str) -> None:
        """It could not import TensorFlow (a Python without it, say): this environment's runs start by hand."""
        self.error = error
        self._ready = False
        log.info("run processes start by hand: %s", error)
        self.close()

    def _receive(self) -> tuple[ZygoteReply, list[int]] | None:
        try:
            message, fds, _, _ = socket.recv_fds(self._sock, 65536, 4)
        except OSError:
            return None
        if not message:
            return None
        return cast(ZygoteReply, json.loads(message)), fds

    def spawn(self, argv: list[str], env: Mapping[str, str], pass_fds: tuple[int, ...]) -> ForkedProcess | None:
        """The run's supervisor, forked: `argv` are the supervisor's arguments, `pass_fds` keep their numbers.
        None when this zygote cannot fork it now (the caller starts it by hand, on pipes of its own: a request
        answered too late may have been forked all the same, on the fds it passed)."""
        stdout_r, stdout_w = os.pipe()
        stderr_r, stderr_w = os.pipe()
        status_r, status_w = os.pipe()
        request: SpawnRequest = {"argv": argv, "env": dict(env), "cwd": os.getcwd(), "targets": [1, 2, *pass_fds]}
        reply = None
        try:
            with self._lock:
                if not self._check_ready():
                    return None
                if self.stopped():
                    self._replace("it was stopped (SIGSTOP or a debugger) and could not fork the run")
                    return None
                try:
                    socket.send_fds(self._sock, [json.dumps(request).encode()], [status_w, stdout_w, stderr_w,
                                                                                  *pass_fds])
                    if select.select([self._sock], [], [], REPLY_TIMEOUT_S)[0]:
                        reply = self._receive()
                except OSError as exc:
                    self._replace(f"it was not listening ({exc.strerror})")
                    return None
                if reply is None:
                    self._replace(f"it did not answer within {REPLY_TIMEOUT_S:g} s")
                    return None
        finally:
            for fd in (stdout_w, stderr_w, status_w):
                os.close(fd)
            if reply is None:
                for fd in (stdout_r, stderr_r, status_r):
                    os.close(fd)
        message, fds = reply
        if "pid" not in message or len(fds) != 1:
            for fd in (*fds, stdout_r, stderr_r, status_r):
                os.close(fd)
            log.warning("the zygote refused a run: %s", message.get("error"))
            return None
        return ForkedProcess(int(message["pid"]), fds[0], status_r, open(stdout_r, "rb"), open(stderr_r, "rb"))

    def _replace(self, reason: str) -> None:
        """It cannot serve: killed (its runs go on without it) and, once reaped, restarted (`_ended`)."""
        self.error = reason
        self._ready = False
        self.replaced = True
        log.warning("the zygote (pid %d) is replaced: %s", self.process_id, reason)
        with contextlib.suppress(OSError):
            self._sock.close()
        with contextlib.suppress(ProcessLookupError):
            self._process.kill()

    def close(self) -> None:
        """Let it go: it exits at end of file (its forks keep running until their runs end); one still importing
        TensorFlow has none and is ended at once."""
        self.let_go = True
        with contextlib.suppress(OSError):
            self._sock.close()
        if not self._ready:
            with contextlib.suppress(ProcessLookupError):
                self._process.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self._process.wait(0 if self._ready else 5)

    def kill(self) -> None:
        self.close()
        if self._process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self._process.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._process.wait(5)


_zygotes: list[Zygote] = []   # most recently used last
_zygotes_lock = threading.Lock()
_watched_lock = threading.Lock()

STEADY_S = 60.0        # a zygote that lived this long before it died is restarted at once
BACKOFF_FIRST_S = 2.0  # one that keeps dying sooner waits this long before its next restart, doubling each time
BACKOFF_MAX_S = 120.0


@dataclass
class Restart:
    """A zygote that died, to be started again for its environment at `at` (time.monotonic)."""

    python: str
    env: dict[str, str]
    at: float
    how: str              # how the last one ended
    deaths: int           # deaths in a row, each sooner than STEADY_S after its start


_restarts: dict[tuple[str, tuple[tuple[str, str], ...]], Restart] = {}
_streaks: dict[tuple[str, tuple[tuple[str, str], ...]], int] = {}
_watched: set[Zygote] = set()    # every zygote started and not yet reaped, those let go included
_wake = os.pipe() if hasattr(os, "pidfd_open") else (-1, -1)  # a byte here: the watcher looks again
_watcher: threading.Thread | None = None
_closing = False


@dataclass(frozen=True)
class ZygoteDied(Message):
    """A zygote died and is being restarted; `text` says so, for the person (its runs go on)."""

    text: str


hub = Hub()  # ZygoteDied, published on the thread that reaped the zygote


def ended_how(returncode: int) -> str:
    if returncode < 0:
        with contextlib.suppress(ValueError):
            return f"was killed by {signal.Signals(-returncode).name}"
        return f"was killed by signal {-returncode}"
    return f"exited with status {returncode}"


def _watch(zygote: Zygote) -> None:
    """Have the watcher thread reap `zygote` when it ends (started by `start_zygotes` or with the first zygote: the
    zygotes it restarts die with the thread that forked them, and this one never ends)."""
    global _watcher
    with _watched_lock:
        _watched.add(zygote)
        if _watcher is None:
            _watcher = threading.Thread(target=_watch_loop, name="zygote-watcher", daemon=True)
            _watcher.start()
    _poke()


def _poke() -> None:
    with contextlib.suppress(OSError):
        os.write(_wake[1], b"x")


def _watch_loop() -> None:
    """The watcher thread: reaps each zygote the moment it ends, and starts again each one whose restart is due."""
    while True:
        with _watched_lock:
            watching = {z.pidfd: z for z in _watched}
        with _zygotes_lock:
            now = time.monotonic()
            for key, restart in list(_restarts.items()):
                if restart.at > now or _closing:
                    continue
                del _restarts[key]
                if any(z.key == key for z in _zygotes):
                    continue  # a spawn started one meanwhile
                while len(_zygotes) >= MAX_ZYGOTES:
                    _zygotes.pop(0).close()
                try:
                    restarted = Zygote(restart.python, restart.env)
                except OSError as exc:
                    log.info("the zygote could not be restarted: %s", exc)
                    continue
                restarted.restarted = True
                _zygotes.append(restarted)
            due = [restart.at for restart in _restarts.values()]
        timeout = max(min(due) - time.monotonic(), 0.01) if due else None
        readable, _, _ = select.select([_wake[0], *watching], [], [], timeout)
        if _wake[0] in readable:
            os.read(_wake[0], 4096)
        for fd in readable:
            zygote = watching.get(fd)
            if zygote is not None and zygote.reaped():
                with _watched_lock:
                    _watched.discard(zygote)
                os.close(fd)
                _ended(zygote)


def _ended(zygote: Zygote) -> None:
    """A zygote's process ended (reaped by the watcher). One let go is no news; one that died or was replaced is
    started again, at once or, when it keeps dying, after a backoff. Its runs go on."""
    if zygote.let_go:
        return
    with zygote._lock:
        with contextlib.suppress(OSError, ValueError):  # its hello may be waiting unread: it was ready, died after
            if not zygote.was_ready and select.select([zygote._sock], [], [], 0)[0]:
                hello = zygote._receive()
                zygote.was_ready = hello is not None and bool(hello[0].get("ok"))
        if not zygote.was_ready and not zygote.replaced and not zygote.restarted:
            # It could not import TensorFlow (a Python without it, say): no use starting it again.
            zygote._fail(f"the zygote {ended_how(zygote.returncode or 0)} before it was ready")
            return
    now = time.monotonic()
    how = ended_how(zygote.returncode or 0) + (f" ({zygote.error})" if zygote.error else "")
    with _zygotes_lock:
        if zygote not in _zygotes or _closing:
            return
        _zygotes.remove(zygote)
        key = zygote.key
        deaths = _streaks.get(key, 0) + 1 if now - zygote.started_at < STEADY_S else 1
        _streaks[key] = deaths
        delay = 0.0 if deaths == 1 else min(BACKOFF_FIRST_S * 2 ** (deaths - 2), BACKOFF_MAX_S)
        _restarts[key] = Restart(zygote.python, zygote.env, now + delay, how, deaths)
    when = "now" if not delay else f"in {delay:.0f} s ({deaths} deaths in a row)"
    message = (f"The zygote (pid {zygote.process_id}) {how}: runs in progress go on; it is restarted {when}, and "
               "spares start by hand meanwhile (a TensorFlow import each).")
    log.warning("%s", message)
    hub.publish(ZygoteDied(message))  # a subscriber's bug is the hub's to report: it never stops the watcher


def state_text() -> str | None:
    """What is wrong with the zygotes, in a few words (None when nothing is): one that died and waits for its
    restart, or one restarted and still importing TensorFlow."""
    now = time.monotonic()
    with _zygotes_lock:
        for restart in _restarts.values():
            wait = restart.at - now
            return f"zygote {restart.how}; restarting" + (f" in {wait:.0f} s" if wait >= 1 else "")
        for zygote in _zygotes:
            if _streaks.get(zygote.key) and zygote._ready is None:
                return "zygote restarting (importing TensorFlow)"
    return None


def enabled() -> bool:
    return os.environ.get(DISABLE_ENV, "") in ("", "0") and sys.platform.startswith("linux") and \
        hasattr(os, "pidfd_open") and hasattr(socket, "send_fds")


_starting = False  # whether `spawn` starts a zygote for an environment that has none (`start_zygotes`)


def start_zygotes() -> None:
    """From now on, a run for an environment with no zygote starts one, for the runs after it. A process that
    runs many (the window, its spare pool; the test suite) asks for it; the command line, which runs one job and
    exits, does not: a zygote would be a second TensorFlow import it never uses."""
    global _starting, _watcher
    _starting = True
    with _watched_lock:
        if _watcher is None and enabled():  # started now, before any run: it lives as long as this process
            _watcher = threading.Thread(target=_watch_loop, name="zygote-watcher", daemon=True)
            _watcher.start()


def spawn(python: str, env: Mapping[str, str], argv: list[str], pass_fds: tuple[int, ...]) -> ForkedProcess | None:
    """A run's supervisor forked from the zygote for this Python and environment; None (start it by hand) when
    there is none ready. After `start_zygotes`, the first call for an environment starts its zygote."""
    if not enabled():
        return None
    key = environment_key(python, env)
    with _zygotes_lock:
        zygote = next((z for z in _zygotes if z.key == key), None)
        if zygote is not None and zygote.error is not None:
            return None  # it failed (a Python without TensorFlow, say): this environment's runs start by hand
        if zygote is None and (not _starting or key in _restarts):
            return None  # none asked for, or one died and waits for its restart (the keeper starts it)
        if zygote is None:
            while len(_zygotes) >= MAX_ZYGOTES:
                _zygotes.pop(0).close()
            try:
                zygote = Zygote(python, env)
            except OSError as exc:
                log.info("no zygote: %s", exc)
                return None
        else:
            _zygotes.remove(zygote)
        _zygotes.append(zygote)
    return zygote.spawn(argv, env, pass_fds)


def process_ids() -> set[int]:
    """The zygote processes this process started and has not let go."""
    with _zygotes_lock:
        return {z.process_id for z in _zygotes}


def wait_until_ready(timeout: float = 120.0) -> bool:
    """Block until every zygote started has imported TensorFlow or failed (benchmarks and tests that want a quiet
    start); whether one is ready."""
    deadline = time.monotonic() + timeout
    with _zygotes_lock:
        zygotes = list(_zygotes)
    for zygote in zygotes:
        while not zygote.ready() and zygote.error is None:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.01)
    return any(z.error is None for z in zygotes)


@atexit.register
def close_all() -> None:
    global _closing
    with _zygotes_lock:
        _closing = True
        _restarts.clear()
        zygotes, _zygotes[:] = list(_zygotes), []
    for zygote in zygotes:
        zygote.kill()
