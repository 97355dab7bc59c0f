"""Whether a script can run at all: the checks made before any process starts (the command line, the window) and
again by the run process, which compiles the script exactly so.
"""

from __future__ import annotations

import io
import os
import tokenize
import types
from pathlib import Path

from tf_device_panel.core.catalogue.jobs import JobError
from tf_device_panel.core.catalogue.params import path_problem


class ScriptProblem(JobError):
    """The file cannot run at all (missing, a folder, unreadable, not in its encoding, a syntax error)."""


def compile_script(path: str) -> types.CodeType:
    """The script compiled as `python file.py` compiles it (absolute file name, its declared encoding).

    Raises ScriptProblem with one line naming the file and, where there is one, the line."""
    file = Path(path.strip()).expanduser()
    shown = str(file)
    if file.is_dir():
        raise ScriptProblem(f"{shown} is a folder, not a Python file; name the .py file to run")
    problem = path_problem(path)
    if problem:
        raise ScriptProblem(problem)
    try:
        source = file.read_bytes()
    except OSError as exc:
        raise ScriptProblem(f"{shown} cannot be read: {exc.strerror or exc}") from None
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(source).readline)
    except SyntaxError as exc:  # an unknown encoding declared, or a BOM that contradicts it
        raise ScriptProblem(f"{shown}: {exc}") from None
    try:
        source.decode(encoding)
    except UnicodeDecodeError as exc:
        line = source.count(b"\n", 0, exc.start) + 1
        column = exc.start - (source.rfind(b"\n", 0, exc.start) + 1) + 1
        raise ScriptProblem(
            f"{shown}, line {line}: not valid {encoding.upper()} (byte 0x{source[exc.start]:02x} at column "
            f"{column}); save the file as UTF-8, or declare its encoding on its first line, e.g. "
            "'# -*- coding: latin-1 -*-'") from None
    if b"\0" in source:
        line = source.count(b"\n", 0, source.index(b"\0")) + 1
        raise ScriptProblem(f"{shown}, line {line}: the file holds a NUL byte; is it really a Python file?")
    try:
        return compile(source, script_filename(path), "exec", dont_inherit=True)
    except SyntaxError as exc:
        where = f", line {exc.lineno}" if exc.lineno else ""
        raise ScriptProblem(f"{shown}{where}: {type(exc).__name__}: {exc.msg}") from None


def script_filename(path: str) -> str:
    """The script's `__file__` as `python PATH` makes it: PATH joined to the working folder when relative, and
    not normalised (a `..` or `./` stays, as in a bare run's tracebacks and warnings)."""
    given = os.path.expanduser(path.strip())
    return given if os.path.isabs(given) else os.path.join(os.getcwd(), given)


def script_problem(path: str) -> str | None:
    """Why the file cannot run at all, in one line, or None; checked before TensorFlow starts."""
    try:
        compile_script(path)
    except ScriptProblem as exc:
        return str(exc)
    return None
