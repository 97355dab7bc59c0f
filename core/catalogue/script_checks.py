"""Whether a script can run at all: the checks made before any process starts (the command line, the window) and
again by the run process, which reads and compiles the script exactly so.

What `python FILE` runs, `run script` runs: a Python source file, a compiled `.pyc`, or a folder or zip file with
a `__main__` module in it (a zip application); what Python refuses, it refuses with Python's own reason.
"""

from __future__ import annotations

import ast
import errno
import importlib.util
import io
import os
import tokenize
import types
import zipfile
from dataclasses import dataclass
from pathlib import Path

from tf_device_panel.core.catalogue.jobs import JobError
from tf_device_panel.core.catalogue.params import path_problem

SOURCE, COMPILED, PACKAGE = "source", "compiled", "package"


class ScriptProblem(JobError):
    """The file cannot run at all (missing, unreadable, not in its encoding, a syntax error, a folder or zip file
    without `__main__`)."""


@dataclass(frozen=True)
class MainFile:
    """What `python FILE` would run: `kind` SOURCE (a Python file), COMPILED (a `.pyc`) or PACKAGE (a folder or a
    zip file holding `__main__`); `filename` its `__file__` (a PACKAGE's: the folder or zip file itself, as
    `sys.path[0]`)."""

    kind: str
    filename: str


def script_filename(path: str) -> str:
    """The script's `__file__` as `python PATH` makes it: PATH joined to the working folder when relative, and
    not normalised (a `..` or `./` stays, as in a bare run's tracebacks and warnings)."""
    given = os.path.expanduser(path.strip())
    return given if os.path.isabs(given) else os.path.join(os.getcwd(), given)


def _cannot_open(shown: str, exc: OSError) -> ScriptProblem:
    """Python's own words for a file it cannot open (`can't open file …: [Errno 40] Too many levels of symbolic
    links`), in the panel's one line."""
    return ScriptProblem(f"{shown}: can't open file: [Errno {exc.errno}] {exc.strerror or exc}")


def main_file(path: str) -> MainFile:
    """What kind of thing PATH is for `python PATH`. Raises ScriptProblem with Python's reason where Python
    refuses it (a symlink loop, a folder or zip file without `__main__`)."""
    file = Path(path.strip()).expanduser()
    shown = str(file)
    filename = script_filename(path)
    try:
        os.stat(filename)
    except OSError as exc:
        if exc.errno not in (errno.ENOENT,):  # a symlink loop, a name too long, a folder that cannot be entered
            raise _cannot_open(shown, exc) from None
    if file.is_dir() or (file.is_file() and zipfile.is_zipfile(file)):
        # Python runs a folder or a zip file (any name: its zip importer is asked first) by the `__main__`
        # module it holds (runpy), as `python -m __main__` with it first on `sys.path`.
        if file.is_dir():
            found = any((file / name).is_file() for name in ("__main__.py", "__main__.pyc"))
        else:
            with zipfile.ZipFile(file) as archive:
                found = bool({"__main__.py", "__main__.pyc"} & set(archive.namelist()))
        if not found:
            raise ScriptProblem(f"can't find '__main__' module in {filename!r}")
        return MainFile(PACKAGE, filename)
    problem = path_problem(path)
    if problem:
        raise ScriptProblem(problem)
    if _is_compiled(file):
        return MainFile(COMPILED, filename)
    return MainFile(SOURCE, filename)


def _is_compiled(file: Path) -> bool:
    """Python's own test (`maybe_pyc_file`): the name ends in `.pyc`, or the file starts with this Python's magic
    number."""
    if file.name.endswith(".pyc"):
        return True
    try:
        with file.open("rb") as handle:
            head = handle.read(4)
    except OSError:
        return False
    return head == importlib.util.MAGIC_NUMBER


def read_source(path: str) -> bytes:
    """The script's bytes, checked as Python checks them before compiling (its declared encoding, no NUL)."""
    file = Path(path.strip()).expanduser()
    shown = str(file)
    try:
        source = file.read_bytes()
    except OSError as exc:
        raise _cannot_open(shown, exc) from None
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
    return source


def parse_script(path: str) -> ast.Module:
    """The script's syntax tree, parsed as `python file.py` parses it (absolute file name, declared encoding);
    its warnings (an invalid escape sequence) are Python's. Raises ScriptProblem naming the file and line."""
    try:
        return ast.parse(read_source(path), script_filename(path))
    except SyntaxError as exc:
        raise _syntax_problem(path, exc) from None


def compile_tree(path: str, tree: ast.Module) -> types.CodeType:
    try:
        return compile(tree, script_filename(path), "exec", dont_inherit=True)
    except SyntaxError as exc:
        raise _syntax_problem(path, exc) from None


def _syntax_problem(path: str, exc: SyntaxError) -> ScriptProblem:
    where = f", line {exc.lineno}" if exc.lineno else ""
    return ScriptProblem(f"{Path(path.strip()).expanduser()}{where}: {type(exc).__name__}: {exc.msg}")


def read_compiled(path: str) -> types.CodeType:
    """A `.pyc`'s code, as Python loads it for `python file.pyc` (its 16-byte header skipped); a wrong magic number
    is Python's `RuntimeError: Bad magic number in .pyc file`."""
    import marshal

    filename = script_filename(path)
    try:
        data = Path(filename).read_bytes()
    except OSError as exc:
        raise _cannot_open(str(Path(path.strip()).expanduser()), exc) from None
    if data[:4] != importlib.util.MAGIC_NUMBER:
        raise ScriptProblem(f"{filename}: RuntimeError: Bad magic number in .pyc file")
    try:
        code = marshal.loads(data[16:])
    except (EOFError, ValueError, TypeError) as exc:
        raise ScriptProblem(f"{filename}: {type(exc).__name__}: {exc}") from None
    if not isinstance(code, types.CodeType):
        raise ScriptProblem(f"{filename}: RuntimeError: Bad code object in .pyc file")
    return code


def compile_script(path: str) -> types.CodeType | None:
    """The script compiled as `python FILE` compiles it (a `.pyc` loaded; None for a folder or zip file, whose
    `__main__` Python's runpy finds). Raises ScriptProblem with one line naming the file and, where there is one,
    the line."""
    kind = main_file(path).kind
    if kind == COMPILED:
        return read_compiled(path)
    if kind == PACKAGE:
        return None
    return compile_tree(path, parse_script(path))


def script_problem(path: str) -> str | None:
    """Why the file cannot run at all, in one line, or None; checked before TensorFlow starts."""
    try:
        compile_script(path)
    except ScriptProblem as exc:
        return str(exc)
    return None
