"""Run the user's own Python file inside the configured runtime."""

from __future__ import annotations

import os
import runpy
import shlex
import sys
from pathlib import Path
from typing import Any

from tf_device_panel.core.jobs.context import JobContext, JobError
from tf_device_panel.core.results import ScriptResult


def script(ctx: JobContext, path: str, args: str = "") -> ScriptResult:
    file = Path(path).expanduser()
    if not file.is_file():
        raise JobError(f"path: {file} is not a file")
    if not os.access(file, os.R_OK):
        raise JobError(f"path: {file} cannot be read (permissions)")
    argv = [str(file), *shlex.split(args)]
    saved_argv, saved_path = sys.argv[:], sys.path[:]
    sys.argv = argv
    sys.path.insert(0, str(file.resolve().parent))
    exit_code: Any = 0
    ctx.progress(0, 1, f"running {file.name}")
    try:
        with ctx.interruptible():
            runpy.run_path(str(file), run_name="__main__")
    except SystemExit as exc:
        exit_code = exc.code if exc.code is not None else 0
    finally:
        sys.argv, sys.path[:] = saved_argv, saved_path
        sys.stdout.flush()
        sys.stderr.flush()
    if exit_code not in (0, None):
        raise JobError(f"{file.name} exited with status {exit_code}")
    ctx.progress(1, 1, "done", force=True)
    return {"kind": "script", "path": str(file), "argv": argv, "exit_code": 0}
