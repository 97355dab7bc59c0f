"""Ending child processes that were started in a session of their own."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from typing import Any


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
