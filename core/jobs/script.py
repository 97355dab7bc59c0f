"""Run the user's own Python file in the run process, as `python file.py` would under the configuration.

The run process is fresh and the script runs on its main thread, so signal handlers, atexit, module state
and the working folder behave as in a bare run. The script's exit status becomes the process's.
"""

from __future__ import annotations

import os
import runpy
import shlex
import sys
import traceback
from pathlib import Path
from types import TracebackType

from tf_device_panel.core.jobs.context import JobContext, JobError
from tf_device_panel.core.results import ScriptResult


class ScriptExit(Exception):
    """The script ended with a non-zero status: `sys.exit(N)` or an uncaught exception."""

    def __init__(self, code: int, error_type: str, message: str, traceback_text: str = ""):
        super().__init__(message)
        self.code = code
        self.error_type = error_type
        self.message = message
        self.traceback = traceback_text


def own_frames(tb: TracebackType | None, filename: str) -> TracebackType | None:
    """The traceback from the script's first frame on: the panel's frames that ran it are not the user's."""
    start = tb
    while start is not None and start.tb_frame.f_code.co_filename != filename:
        start = start.tb_next
    return start or tb


def exit_status(code: object) -> int:
    """What the interpreter makes of `sys.exit(code)`: None is 0, an int is itself, anything else is printed
    and gives 1."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF if code >= 0 else code % 256
    print(code, file=sys.stderr)
    return 1


def script(ctx: JobContext, path: str, args: str = "") -> ScriptResult:
    file = Path(path).expanduser()
    if not file.is_file():
        raise JobError(f"path: {file} is not a file")
    if not os.access(file, os.R_OK):
        raise JobError(f"path: {file} cannot be read (permissions)")
    filename = str(file)
    argv = [filename, *shlex.split(args)]
    sys.argv = argv
    sys.path.insert(0, str(file.resolve().parent))  # as `python file.py` puts the script's folder first
    ctx.progress(0, 1, f"running {file.name}")
    try:
        runpy.run_path(filename, run_name="__main__")
    except SystemExit as exc:
        code = exit_status(exc.code)
        if code != 0:
            raise ScriptExit(code, "ScriptExit", f"{file.name} exited with status {code}") from None
    except Exception as exc:
        lines = traceback.format_exception(type(exc), exc, own_frames(exc.__traceback__, filename))
        text = "".join(lines)
        sys.stderr.write(text)
        raise ScriptExit(1, type(exc).__name__, str(exc).strip() or type(exc).__name__, text) from None
    ctx.progress(1, 1, "done", force=True)
    return {"kind": "script", "path": filename, "argv": argv, "exit_code": 0}
