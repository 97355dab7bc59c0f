"""Starting and ending the panel's child processes: one launcher for the runtime, the doctor's probe,
cluster tasks and the namespace holder.

Every child runs one of our modules with an import path that never holds the current folder: a user's
project with its own `core/` or `config.py` must not shadow the panel's modules (Python puts the
current folder first for `-m`; `-P` would avoid that but needs Python 3.11). Each child gets a
session of its own, so the terminal's Ctrl+C reaches only the process that drives it.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from typing import Any

PARENT_PID_ENV = "TF_DEVICE_PANEL_PARENT_PID"

# `python -c` puts '' (the current folder) first on sys.path; drop it, then run the module as -m would. SIGINT is
# unblocked first: a run process's built-in job blocks it in every thread (core.runproc.runtime_main's
# take_ctrl_c_on_a_thread), and a signal mask passes through fork and exec to the cluster's tasks and
# fit-batch's runs, whose Ctrl+C would then never arrive.
_RUN_MODULE = ("import runpy, signal, sys; hasattr(signal, 'pthread_sigmask') and "
               "signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT}); "
               "del sys.path[0]; runpy.run_module(sys.argv.pop(1), run_name='__main__', alter_sys=True)")


def module_command(module: str, *args: str, python: str | None = None) -> list[str]:
    """argv that runs `python -m module args` without the current folder on the import path."""
    return [python or sys.executable, "-c", _RUN_MODULE, module, *args]


def child_environment(extra: Mapping[str, str] | None = None, *, die_with_parent: bool = False) -> dict[str, str]:
    """This process's environment plus `extra`; `die_with_parent` lets the child call `die_with_parent()`."""
    env = dict(os.environ)
    env.update(extra or {})
    if die_with_parent:
        env[PARENT_PID_ENV] = str(os.getpid())
    return env


def start_module(module: str, *args: str, env: Mapping[str, str] | None = None, python: str | None = None,
                 wrap: Callable[[list[str]], list[str]] | None = None, die_with_parent: bool = False,
                 **popen: Any) -> subprocess.Popen[bytes]:
    """Start one of our modules in a session of its own; `wrap` prefixes the command (e.g. nsenter)."""
    argv = module_command(module, *args, python=python)
    popen.setdefault("stdin", subprocess.DEVNULL)
    return subprocess.Popen(wrap(argv) if wrap else argv, env=child_environment(env, die_with_parent=die_with_parent),
                            start_new_session=True, **popen)


def die_with_parent(signum: int = signal.SIGKILL) -> None:
    """Called first thing in a child started with `die_with_parent=True`: it gets `signum` when its parent
    dies, even by SIGKILL (its own session keeps it out of the parent's process group, so killing that group
    misses it). A child started by hand (no variable) is left alone."""
    parent = os.environ.pop(PARENT_PID_ENV, "")
    if not parent.isdigit() or not sys.platform.startswith("linux"):
        return
    pr_set_pdeathsig = 1
    ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signum)
    if os.getppid() != int(parent):  # the parent died before we asked
        os._exit(1)


def kill_group(process: subprocess.Popen[Any], wait_s: float = 10.0) -> None:
    """SIGKILL the process's whole group (its own children too), reap it, and close its pipes."""
    if process.poll() is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(wait_s)
    for handle in (process.stdin, process.stdout, process.stderr):
        with contextlib.suppress(OSError):
            if handle is not None:
                handle.close()


def run_module(module: str, *args: str, env: Mapping[str, str] | None = None,
               timeout: float) -> subprocess.CompletedProcess[str]:
    """Run one of our modules to completion, its output captured as text; on timeout its whole group is
    killed and `subprocess.TimeoutExpired` raised."""
    process = start_module(module, *args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        out, err = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_group(process)
        raise
    return subprocess.CompletedProcess(process.args, process.returncode,
                                       out.decode("utf-8", "replace"), err.decode("utf-8", "replace"))


EXIT_NOTICE_S = 0.5   # a wait for the last run's exit this long is said in the run's output
EXIT_LIMIT_S = 30.0


def wait_for_exit(pid: int, on_slow: Callable[[], None], between: Callable[[], None] = lambda: None) -> None:
    """Until process `pid` (the last run's: its outcome in, the kernel perhaps still tearing it down) has exited,
    at most EXIT_LIMIT_S, so two runs never hold a GPU's memory at once; a pidfd is readable from the moment it has
    (even before it is reaped). `on_slow` once the wait passes EXIT_NOTICE_S; `between`, every fifth of a second
    after that (a cancel check may raise from it)."""
    try:
        pidfd = os.pidfd_open(pid)
    except OSError:  # gone already, or an old kernel with nothing to wait with
        return
    try:
        if select.select([pidfd], [], [], EXIT_NOTICE_S)[0]:
            return
        on_slow()
        deadline = time.monotonic() + EXIT_LIMIT_S - EXIT_NOTICE_S
        while not select.select([pidfd], [], [], 0.2)[0] and time.monotonic() < deadline:
            between()
    finally:
        os.close(pidfd)
