"""The supervisor between the panel and one run process: nothing a run starts outlives it.

Started by `core.client.runtime.RuntimeProcess` as `python -m tf_device_panel.core.runproc.supervisor -- ARGV...`.
It makes
itself a child subreaper (Linux `PR_SET_CHILD_SUBREAPER`), so every process the run starts, even one that
calls `setsid` or double-forks, stays its descendant; it starts the run process (ARGV), and when that
exits it ends every remaining descendant and exits with the run's own status (the same signal when the
run was killed by one), so its parent sees what a bare `python file.py` would have given.

Signals it takes from the panel:
- SIGINT and SIGTERM are forwarded to the run process (Ctrl+C, then a polite termination);
- SIGHUP ends the run process and every descendant at once (the panel gave up waiting, or the panel
  died: the parent-death signal of a supervisor started by hand is SIGHUP, and one forked from the zygote
  gets it from its thread that watches the panel's pidfd, core.runproc.zygote). Not SIGTERM: that one
  belongs to the run, whose script may handle it (save a checkpoint) as it would in a terminal.

Kept free of the panel's other modules (and of TensorFlow), so it starts in a few tens of milliseconds.
`python -m tf_device_panel.core.runproc.supervisor --module MODULE ARGS...` runs MODULE as `python -m` would, in a
fork of this process rather than in a new interpreter: the run process's start then skips an interpreter's
start-up, which every warm spare would otherwise pay before its TensorFlow import.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import resource
import runpy
import signal
import subprocess
import sys
import time
from typing import Any

from tf_device_panel.core.processes import PARENT_PID_ENV, die_with_parent

PR_SET_CHILD_SUBREAPER = 36
TERM_WAIT_S = 1.0   # what a leftover descendant gets between SIGTERM and SIGKILL

_libc = ctypes.CDLL(None, use_errno=True)


def descendants(root: int) -> list[int]:
    """Every live process below `root`, read from /proc (no psutil: this process must start fast)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as handle:
                stat = handle.read()
        except OSError:  # it ended while we looked
            continue
        # The command name may hold spaces and parentheses: the fields after its last ')' are fixed.
        fields = stat[stat.rfind(b")") + 2:].split()
        if fields[0] == b"Z":
            continue
        children.setdefault(int(fields[1]), []).append(int(entry))
    found, stack = [], [root]
    while stack:
        for child in children.get(stack.pop(), []):
            found.append(child)
            stack.append(child)
    return found


def signal_all(pids: list[int], sig: int) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


def reap_all() -> None:
    """Collect every exited child (orphans that came to this subreaper included), without blocking."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def end_descendants(grace_s: float) -> None:
    """SIGTERM every descendant, then SIGKILL those still there after `grace_s`; loops until none is left,
    since a process being ended may still start another."""
    deadline = time.monotonic() + grace_s
    signal_all(descendants(os.getpid()), signal.SIGTERM)
    while True:
        reap_all()
        left = descendants(os.getpid())
        if not left:
            return
        if time.monotonic() >= deadline:
            signal_all(left, signal.SIGKILL)
        time.sleep(0.02)


class HandOver(SystemExit):
    """Raised by a run process to leave every frame it is in, down to the interpreter's own top level, where the
    interpreter finalizes: what the run set up there (`core.runproc.jobs.script.hand_over`) then runs with no
    frame of Python's below it, as a bare `python file.py` runs its file. Nothing on the way may catch it (the
    zygote's child and `run_module_here` let it pass); the interpreter takes it for `sys.exit()`. Known by its
    `hands_over` attribute: this module may run as `__main__` too, whose class is another object."""

    hands_over = True


def run_module_here(module: str, args: list[str], env: dict[str, str]) -> None:
    """In a fork of the supervisor: become `python -m module args` (a fresh interpreter's signal dispositions,
    environment and standard input), and never return into the supervisor's code (except by a HandOver)."""
    status = 1
    handing_over = False
    try:
        signal.signal(signal.SIGINT, signal.default_int_handler)
        for signum in (signal.SIGTERM, signal.SIGHUP):
            signal.signal(signum, signal.SIG_DFL)
        os.environ.clear()
        os.environ.update(env)
        stdin = os.open(os.devnull, os.O_RDONLY)
        os.dup2(stdin, 0)
        os.close(stdin)
        sys.argv = [module, *args]
        runpy.run_module(module, run_name="__main__", alter_sys=True)
        status = 0
    except SystemExit as exc:
        if getattr(exc, "hands_over", False):
            handing_over = True
            raise
        if exc.code is None or isinstance(exc.code, int):
            status = exc.code or 0
        else:
            print(exc.code, file=sys.stderr)
    except BaseException:
        import traceback

        traceback.print_exc()
    finally:
        if not handing_over:
            with contextlib.suppress(Exception):
                sys.stdout.flush()
                sys.stderr.flush()
            os._exit(status & 0xFF)


class Supervisor:
    def __init__(self, argv: list[str], module: str | None = None):
        self.argv = argv          # the run's command, or its module's arguments when `module` is given
        self.module = module
        self.run_pid: int | None = None
        self.pending: list[int] = []
        self.kill_everything = False

    def on_signal(self, signum: int, _frame: Any) -> None:
        if signum == signal.SIGHUP:
            self.kill_everything = True
            signal_all(descendants(os.getpid()), signal.SIGKILL)
        elif self.run_pid is None:
            self.pending.append(signum)
        else:
            signal_all([self.run_pid], signum)

    def main(self) -> int:
        for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(signum, self.on_signal)
        _libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
        # The panel's death is a SIGHUP here (handled above: it ends the run and everything it started).
        die_with_parent(signal.SIGHUP)
        # The run process's own parent-death signal names this process (core.processes.die_with_parent).
        env = {**os.environ, PARENT_PID_ENV: str(os.getpid())}
        fds = tuple(int(fd) for fd in os.environ.get("TF_DEVICE_PANEL_PASS_FDS", "").split(",") if fd)
        if self.module is not None:
            pid = os.fork()
            if pid == 0:
                run_module_here(self.module, self.argv, env)
            self.run_pid = pid
        else:
            self.run_pid = subprocess.Popen(self.argv, env=env, pass_fds=fds, stdin=subprocess.DEVNULL).pid
        for fd in fds:
            os.close(fd)  # only the run process holds them: their other ends see end-of-file when it exits
        # The same for the output pipes: the panel has the whole run when the run closes them, not only after
        # this process has reaped it and ended its descendants. This process prints nothing of its own.
        devnull = os.open(os.devnull, os.O_WRONLY)
        for fd in (1, 2):
            os.dup2(devnull, fd)
        os.close(devnull)
        for pending in self.pending:
            signal_all([self.run_pid], pending)
        if self.kill_everything:
            signal_all([self.run_pid], signal.SIGKILL)
        status = self.wait_for_run()
        end_descendants(0.0 if self.kill_everything else TERM_WAIT_S)
        return status

    def wait_for_run(self) -> int:
        """The run's wait status as Popen gives it (negative: killed by that signal); reaps orphans meanwhile."""
        while True:
            pid, status = os.waitpid(-1, 0)
            if pid == self.run_pid:
                return os.waitstatus_to_exitcode(status)


def exit_like(status: int) -> None:
    """Leave with the run's status: the same exit code, or death by the same signal."""
    sys.stdout.flush()
    if status >= 0:
        os._exit(status)
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # the run already dumped core if it was going to
    with contextlib.suppress(OSError, ValueError):  # SIGKILL's action cannot be set, and needs not be
        signal.signal(-status, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, [-status])
    os.kill(os.getpid(), -status)
    os._exit(128 - status)


if __name__ == "__main__":
    args = sys.argv[1:]
    module = None
    if args[:1] == ["--module"] and len(args) >= 2:
        module, args = args[1], args[2:]
    elif args[:1] == ["--"]:
        args = args[1:]
    if not args and module is None:
        print("usage: python -m tf_device_panel.core.runproc.supervisor (--module MODULE ARGS... | -- COMMAND...)",
              file=sys.stderr)
        sys.exit(2)
    exit_like(Supervisor(args, module).main())
