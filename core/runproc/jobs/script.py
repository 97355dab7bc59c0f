"""Run the user's own file in the run process, exactly as `python FILE` would under the configuration.

The run process is fresh, and the script runs on its main thread with no frame of the panel's under it: the run
hands over (`hand_over`) by leaving every frame it is in down to the interpreter's own top level (a
`supervisor.HandOver`, which the interpreter takes for `sys.exit()`), and the interpreter's finalization, which
first calls `threading._shutdown()`, finds there a chain of calls made from C: the script's last preparations,
the script's module code itself (its frame the outermost, as in a bare run), then the run's end (`finish`). So
recursion depth, `traceback.print_stack()`, `stack_info`, `warnings` stack levels and `sys._getframe` are
as bare, and signal handlers, atexit, module state and the working folder behave as in a bare run.

What the script gets, and how it differs from a bare run:

- TensorFlow imported and configured (the profile's `tf.config` calls made) but NOT initialized: the script's
  own `tf.config` calls work as they do bare. The panel watches for the first initialization (to list the
  logical devices and start memory reporting then) and for `tf.device` scopes naming a device that does not
  exist (a soft-placement fallback, reported with the script's file and line); it makes no `tf.config` or
  `tf.debugging` call of its own once the script has started. TensorFlow's Python logger is as the script's
  own first import of TensorFlow would leave it (`tensorflow_logger_as_at_its_import`).
- `__main__` (and `__mp_main__`) as bare: a fresh module, `__file__` the path as given joined to the working
  folder, `__package__` None, kept in `sys.modules` until the process exits (a thread may still pickle the
  script's classes after its body ends); `sys.argv`, `sys.orig_argv`, `sys.executable`, the SIGINT handler
  and the streams' buffering as bare. A `.pyc`, a folder or a zip file holding `__main__` run as Python runs
  them (the latter two by runpy, whose frames are then under the script's, as bare).
- Its fds 1 and 2 are pipes of its own, copied byte for byte, and C's `stdout` and `stderr` write to them, so
  Python's writes, `os.write`, C code and children keep one order, buffered as bare (`give_script_its_fds`).
  TensorFlow's C++ log and placement echo are on them too, as bare; the panel reads its placements there,
  and takes them out when the placement log is the profile's, not the script's.
- An uncaught exception goes to `sys.excepthook` (Python's own printing: `Did you mean`, notes, chained
  exceptions, groups); its status is 1, or death by SIGINT for a KeyboardInterrupt.
"""

from __future__ import annotations

import array
import ast
import builtins
import contextlib
import ctypes
import fcntl
import functools
import importlib.machinery
import io
import itertools
import os
import re
import runpy
import shlex
import signal
import sys
import termios
import threading
import time
import types
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib.machinery import SourceFileLoader, SourcelessFileLoader
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from tf_device_panel.core.catalogue.script_checks import (
    COMPILED,
    PACKAGE,
    SOURCE,
    MainFile,
    compile_tree,
    main_file,
    parse_script,
    read_compiled,
)
from tf_device_panel.core.protocol import events
from tf_device_panel.core.protocol.output_lines import canonical_device, short_device_name
from tf_device_panel.core.protocol.streams import scripts_placement_log
from tf_device_panel.core.runproc.jobs.context import JobCancelled, JobContext, ScriptExit
from tf_device_panel.core.runproc.supervisor import HandOver
from tf_device_panel.core.runproc.tf_facts import soft_placement_target

if TYPE_CHECKING:  # the result kinds are annotations here: the job's run need not import core.results
    from tf_device_panel.core.results import ScriptResult

# Frames in this folder (the panel's engine) are not the user's: they are taken out of a script's tracebacks.
PANEL_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))) + os.sep


def exit_status(code: object) -> int:
    """What the interpreter makes of `sys.exit(code)`: None is 0, an int is itself, anything else is printed
    and gives 1."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF if code >= 0 else code % 256
    print(code, file=sys.stderr)
    return 1


# -- its output -----------------------------------------------------------------------------------
_libc = ctypes.CDLL(None, use_errno=True)
_libc.setvbuf.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int, ctypes.c_size_t]
_libc.fflush.argtypes = [ctypes.c_void_p]
_IOFBF, _IOLBF, _IONBF = 0, 1, 2


# The script's pipes (write ends, the run's own copies): an event waits until what the script wrote before it
# has been read (`wait_until_read`), so the panel has the script's output and its events in one order.
script_pipes: list[int] = []
READ_WAIT_S = 0.5  # at most this long per event: a reader held up (a slow terminal) only blurs the order


def wait_until_read(limit_s: float = READ_WAIT_S, pipes: list[int] | None = None) -> None:
    """Until the panel has read every byte written so far to the script's fds 1 and 2 (by the script, `os.write`,
    a child), or to `pipes`, or `limit_s` has passed. The pipes' fill level is the kernel's (FIONREAD, on the
    write end)."""
    pipes = script_pipes if pipes is None else pipes
    if not pipes:
        return
    deadline = time.monotonic() + limit_s
    level = array.array("i", [0])
    for fd in pipes:
        while True:
            try:
                fcntl.ioctl(fd, termios.FIONREAD, level, True)
            except OSError:
                break
            if level[0] <= 0 or time.monotonic() > deadline:
                break
            time.sleep(0.0002)


# How the interpreter buffered sys.stdout and sys.stderr when it started, as it does for a bare run (by blocks
# into a pipe, by lines on a terminal, unbuffered with PYTHONUNBUFFERED): (line_buffering, write_through). The
# run process's own start (runtime_main.main) records it before it makes them line-buffered for itself, and
# copies it here when a script's run loads this module (runtime_main.load_script_job).
bare_buffering: dict[str, tuple[bool, bool]] = {}

# TensorFlow's echo of a placement on C's stdout (placer.cc's `printf("%s: (%s): %s\n", …)`).
_ECHO = re.compile(rb"^\S.*: \(\w+\): /job:[\w-]+/replica:\d+/task:\d+/device:\w+:\d+$")
_COOKIE_WRITE = ctypes.CFUNCTYPE(ctypes.c_ssize_t, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t)


class _CookieFunctions(ctypes.Structure):
    """glibc's `cookie_io_functions_t`: a FILE* whose writes are a function's."""

    _fields_ = [("read", ctypes.c_void_p), ("write", _COOKIE_WRITE), ("seek", ctypes.c_void_p),
                ("close", ctypes.c_void_p)]


_libc.fopencookie.restype = ctypes.c_void_p
_libc.fopencookie.argtypes = [ctypes.c_void_p, ctypes.c_char_p, _CookieFunctions]


class EchoFilter:
    """C's `stdout` while the placement log is the profile's: a FILE* buffered exactly as a bare run's C stdout
    (by blocks of the pipe's size, or not at all), whose every flush goes to fd 1 at once, in the caller's
    thread, as a bare flush would, less TensorFlow's placement echo lines. A line cut by a full buffer is held
    to the next flush (it may be an echo line whose rest is still in the buffer)."""

    def __init__(self, block_size: int):
        self.block_size = block_size
        self.filtering = True
        self.held = b""
        self.callback = _COOKIE_WRITE(self.write)  # kept: C calls it for as long as the process lives

    def write(self, _cookie: int | None, buffer: int | None, size: int) -> int:
        try:
            data = self.held + ctypes.string_at(buffer, size) if buffer else self.held
            self.held = b""
            if self.filtering:
                lines = data.split(b"\n")
                tail = lines.pop()
                out = b"".join(line + b"\n" for line in lines if not _ECHO.match(line))
                if tail and size == self.block_size:
                    self.held = tail
                else:
                    out += tail
            else:
                out = data
            view = memoryview(out)
            while view:
                view = view[os.write(1, view):]
        except BaseException:  # never an exception into C: the bytes are lost, as on a closed pipe
            pass
        return size


echo_filter: EchoFilter | None = None
_kept_alive: list[object] = []  # the C stdout buffer and functions of `echo_filter`


def give_script_its_fds(stdout_fd: int, stderr_fd: int, placement_is_the_panels: bool = False) -> None:
    """The script's fds 1 and 2 become its own channels (`stdout_fd`, `stderr_fd`: pipes the panel copies byte
    for byte): `print`, `os.write(1, …)`, a child process's output and C code writing to C's `stdout` and
    `stderr` all reach them in the order they were written, as in a bare run.

    C's `stdout` is buffered as the interpreter buffers it for a bare run into a pipe: by blocks, or not at all
    with PYTHONUNBUFFERED (`bare_buffering`); C's `stderr` is unbuffered. TensorFlow's C++ log (C's `stderr`)
    and its placement echo (C's `stdout`) are there too, as bare; the panel reads the placements from them
    (`core.protocol.streams`). When the placement log is the profile's (`placement_is_the_panels`), the panel
    takes those lines out of the script's stderr, and C's `stdout` is an `EchoFilter`, which leaves the echo
    out. `sys.stdout` and `sys.stderr` keep their objects (a logging handler made earlier
    still writes to them) and are buffered as the interpreter buffered them at its start."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError, AttributeError):
            stream.flush()
    _libc.fflush(None)
    os.dup2(stdout_fd, 1)
    os.dup2(stderr_fd, 2)
    for fd in {stdout_fd, stderr_fd} - {1, 2}:
        os.set_inheritable(fd, False)  # kept, not inherited: the run's own look at what is still unread there
        script_pipes.append(fd)
    for name, stream in (("stdout", sys.stdout), ("stderr", sys.stderr)):
        line_buffering, write_through = bare_buffering.get(name, (False, False))
        with contextlib.suppress(AttributeError, ValueError):
            stream.reconfigure(line_buffering=line_buffering, write_through=write_through)  # type: ignore[union-attr]
    unbuffered = bare_buffering.get("stdout", (False, False))[1]
    c_stdout = ctypes.c_void_p.in_dll(_libc, "stdout")
    if placement_is_the_panels:
        global echo_filter
        block_size = os.fstat(1).st_blksize or 4096  # what glibc gives a stream on fd 1 (a pipe: 4096)
        echo_filter = EchoFilter(block_size)
        handle = _libc.fopencookie(None, b"w", _CookieFunctions(None, echo_filter.callback, None, None))
        if handle:
            buffer = ctypes.create_string_buffer(block_size)
            _kept_alive.extend((echo_filter, buffer))
            if unbuffered:
                _libc.setvbuf(handle, None, _IONBF, 0)
            else:
                _libc.setvbuf(handle, buffer, _IOFBF, block_size)
            c_stdout.value = handle
            return
        echo_filter = None
    if c_stdout.value:
        _libc.setvbuf(c_stdout.value, None, _IONBF if unbuffered else _IOFBF, 0)


# -- its end -------------------------------------------------------------------------------------
class _Tee:
    """sys.stderr while an uncaught exception is reported: it prints, and the run record keeps a copy."""

    def __init__(self, stream: Any):
        self.stream = stream
        self.copy = io.StringIO()

    def write(self, text: str) -> int:
        self.copy.write(text)
        return int(self.stream.write(text))

    def __getattr__(self, name: str) -> Any:
        return getattr(self.stream, name)


def report_uncaught(exc: BaseException) -> str:
    """Report `exc` as the interpreter does at the end of a script (`PyErr_Print`): `sys.last_type`,
    `sys.last_value` and `sys.last_traceback` set, then `sys.excepthook` (the script may have set its own), and,
    if the hook itself fails, as Python says it then. Returns what was printed."""
    sys.last_type, sys.last_value, sys.last_traceback = type(exc), exc, exc.__traceback__
    stderr = sys.stderr
    tee = _Tee(stderr)
    sys.stderr = tee
    try:
        try:
            sys.excepthook(type(exc), exc, exc.__traceback__)
        except BaseException as hook_error:
            print("Error in sys.excepthook:", file=sys.stderr)
            sys.__excepthook__(type(hook_error), hook_error, hook_error.__traceback__)
            print("\nOriginal exception was:", file=sys.stderr)
            sys.__excepthook__(type(exc), exc, exc.__traceback__)
    finally:
        if sys.stderr is tee:
            sys.stderr = stderr
        with contextlib.suppress(OSError, ValueError):
            stderr.flush()
    return tee.copy.getvalue()


scripts_main: list[types.ModuleType] = []  # the script's `__main__`, once it is


def clear_main() -> None:
    """What the interpreter's finalization does to `__main__` after atexit (`_PyModule_ClearDict`): its names
    set to None, those starting with one underscore first, `__builtins__` left, so the `__del__` of what only
    they held runs, and prints, as bare. The rest of the teardown (TensorFlow's modules) is skipped."""
    if not scripts_main:
        return
    names = scripts_main[0].__dict__
    with contextlib.suppress(Exception):
        for first in (True, False):
            for name in list(names):
                if isinstance(name, str) and name != "__builtins__" and \
                        (not first or (name.startswith("_") and not name.startswith("__"))):
                    names[name] = None


# -- TensorFlow's Python logger ----------------------------------------------------------------------
class _FirstImport(importlib.machinery.ModuleSpec):
    """The class a module spec of TensorFlow's (or Keras's) takes until the script first imports one of them: the
    import statement asks the spec whether the module is still initializing (`_initializing`), which runs
    `on_first_import` once; then every spec gets its own class back."""

    armed: ClassVar[list[importlib.machinery.ModuleSpec]] = []
    on_first_import: ClassVar[Callable[[], None]] = staticmethod(lambda: None)

    @property
    def _initializing(self) -> bool:
        first = _FirstImport.on_first_import
        for spec in _FirstImport.armed:
            spec.__class__ = importlib.machinery.ModuleSpec
        _FirstImport.armed = []
        _FirstImport.on_first_import = staticmethod(lambda: None)
        with contextlib.suppress(Exception):  # the script's import goes on whatever happens here
            first()
        return bool(self.__dict__.get("_initializing", False))


INTERPRETERS_RECURSION_LIMIT = 1000  # what a fresh interpreter starts with


def tensorflow_as_at_its_import() -> None:
    """What TensorFlow's import does to the interpreter, done when the script first imports TensorFlow (or a module
    of it, or Keras), not before its first line, as bare:

    - TensorFlow's import raises the recursion limit (1000 to 3000, measured): the script starts with the
      interpreter's, and gets TensorFlow's at its import;
    - TensorFlow's Python logger gets a handler of its own at the import only if the root logger has none then
      (`tf_logging.get_logger`, "prevents double logging"): here TensorFlow was imported with no root handler,
      so its handler is taken away at the script's import if the script has given the root logger one by then
      (`logging.basicConfig()` before `import tensorflow`)."""
    import logging

    tensorflow_logger = logging.getLogger("tensorflow")
    tensorflows_own = [handler for handler in tensorflow_logger.handlers
                       if type(handler) is logging.StreamHandler]
    tensorflows_limit = sys.getrecursionlimit()

    def on_first_import() -> None:
        if sys.getrecursionlimit() == INTERPRETERS_RECURSION_LIMIT:  # unless the script set its own
            sys.setrecursionlimit(tensorflows_limit)
        if logging.getLogger().handlers:
            for handler in tensorflows_own:
                tensorflow_logger.removeHandler(handler)

    armed = []
    for name, module in list(sys.modules.items()):
        if name.partition(".")[0] in ("tensorflow", "keras", "tf_keras"):
            spec = getattr(module, "__spec__", None)
            if type(spec) is importlib.machinery.ModuleSpec:
                spec.__class__ = _FirstImport
                armed.append(spec)
    _FirstImport.armed = armed
    _FirstImport.on_first_import = staticmethod(on_first_import)
    sys.setrecursionlimit(INTERPRETERS_RECURSION_LIMIT)


# -- TensorFlow, watched but not touched ------------------------------------------------------------
def watch_placement_logging(ctx: JobContext, events_fd: int | None) -> None:
    """A script that turns TensorFlow's placement log on itself (`tf.debugging.set_log_device_placement(True)`)
    keeps its lines on its own streams, as bare, even where the profile turned it on too: TensorFlow's setter,
    wrapped, tells the panel (`streams.scripts_placement_log`) and waits until the panel has read that, so every
    placement line after it is read after it."""
    from tensorflow.python.eager import context

    cls = context.Context
    original = cls.log_device_placement

    def set_log_device_placement(self: Any, enable: Any) -> None:
        if enable:
            if echo_filter is not None:
                echo_filter.filtering = False
            with contextlib.suppress(Exception):  # the script's call goes on whatever happens to the report
                ctx.emit(scripts_placement_log(ctx.job_id))
                if events_fd is not None:
                    wait_until_read(pipes=[events_fd])
        original.fset(self, enable)

    cls.log_device_placement = property(original.fget, set_log_device_placement, doc=original.__doc__)


def watch_initialization(on_initialized: Callable[[], None]) -> None:
    """Call `on_initialized()` once, right after the script's first initialization of TensorFlow (its first
    op, device listing, strategy...). The watch is TensorFlow's own `ensure_initialized` wrapped until then,
    and put back as it was at once after: nothing is left in the way of the script's ops."""
    from tensorflow.python.eager import context

    cls = context.Context
    original = cls.ensure_initialized
    fired = threading.Lock()

    def ensure_initialized(self: Any) -> None:
        if self._initialized:
            return
        original(self)
        if getattr(self, "_is_global_context", True) and fired.acquire(blocking=False):
            cls.ensure_initialized = original
            on_initialized()

    ensure_initialized.__doc__ = original.__doc__
    cls.ensure_initialized = ensure_initialized


_LIBRARY_DIRS: tuple[str, ...] = ()


def script_location() -> tuple[str, int] | None:
    """The innermost frame of the user's code on this thread's stack (not TensorFlow's, the panel's or the
    standard library's context managers): (file, line)."""
    frame = sys._getframe(1)
    while frame is not None:
        name = frame.f_code.co_filename
        if not name.startswith(_LIBRARY_DIRS):
            return name, frame.f_lineno
        frame = frame.f_back  # type: ignore[assignment]
    return None


def watch_device_scopes(ctx: JobContext) -> None:
    """Report a soft-placement fallback when the script enters `tf.device(...)` (eagerly) naming a device the
    runtime does not have while soft placement is on: its ops then run elsewhere, silently in a bare run.
    Once per place in the script and device asked for. With soft placement off, TensorFlow's own error
    (and the script's line, in its traceback) says it."""
    global _LIBRARY_DIRS
    import tensorflow
    from tensorflow.python.eager import context

    _LIBRARY_DIRS = (os.path.dirname(tensorflow.__file__), os.path.dirname(contextlib.__file__) + os.sep
                     + "contextlib.py", PANEL_DIR)
    cls = context._EagerDeviceContext
    original = cls.__enter__
    reported: set[tuple[str, int, str]] = set()
    where_ops_go: dict[str, str | None] = {}  # a scope's device → where its ops run instead (None: it exists)

    def check(scope: Any) -> None:
        # Runs at every eager `tf.device` entry, which Keras makes at every training step (a dataset iterator's
        # `next`): the common case, a device that exists, returns after a dict lookup. Soft placement is asked
        # only then: TensorFlow builds its whole ConfigProto to answer (~35 µs, 3 % of a small model's step).
        runtime = scope._ctx
        devices = runtime._context_devices
        requested = scope._device_name
        if not devices or not isinstance(requested, str) or not scope._stack:
            return
        entered = runtime.device_name
        if entered not in where_ops_go:  # the devices never change once initialized: decided once per name
            where_ops_go[entered] = soft_placement_target(scope._stack[-1][2], devices)
        actual = where_ops_go[entered]
        if actual is None or not runtime.soft_device_placement:
            return
        where = script_location()
        if where is None or (where[0], where[1], requested) in reported:
            return
        reported.add((where[0], where[1], requested))
        ctx.emit(events.Fallback(op=f"{os.path.basename(where[0])}:{where[1]}", requested=requested,
                                 requested_short=canonical_device(requested), actual=actual,
                                 actual_short=short_device_name(actual), file=where[0], line=where[1]))

    def __enter__(self: Any) -> Any:
        entered = original(self)
        with contextlib.suppress(Exception):  # a report must never break the script's own code
            check(self)
        return entered

    __enter__.__doc__ = original.__doc__
    cls.__enter__ = __enter__


def signalled(wakeup_r: int) -> bool:
    """Whether SIGINT was handled since the last look (the interpreter wrote its number to the wakeup fd)."""
    seen = b""
    with contextlib.suppress(OSError):
        while chunk := os.read(wakeup_r, 512):
            seen += chunk
    return signal.SIGINT in seen


def python_as_typed(executable: str) -> str:
    """`sys.executable` as `python file.py` gives it: the `python` beside the panel's interpreter (`python3`,
    `python3.11` in the same folder), when that is the same program."""
    beside = os.path.join(os.path.dirname(executable), "python")
    with contextlib.suppress(OSError):
        if beside != executable and os.path.samefile(beside, executable):
            return beside
    return executable


# -- the job --------------------------------------------------------------------------------------
# A string no script holds: the constant the end of the script's module code is compiled with, replaced by the
# run's ScriptEnd in the compiled code's constants (`with_its_end_caught`).
_END = "\0tf-device-panel: the script's end\0"


class ScriptEnd:
    """What ended the script's module code: the exception that left it, caught by the handler the code was
    compiled with (outermost, in the module's own frame, so no frame is added below it)."""

    caught_types = BaseException

    def __init__(self) -> None:
        self.exception: BaseException | None = None
        self.started = False
        self.cancelled_before = False

    def caught(self) -> None:
        self.exception = sys.exc_info()[1]


def with_its_end_caught(tree: ast.Module) -> ast.Module:
    """The module's statements (after its docstring and `__future__` imports, which must stay first) inside
    `try: … except BaseException: <end>.caught()`; the handler's lines are the last statement's."""
    body = tree.body
    start = 0
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
            and isinstance(body[0].value.value, str):
        start = 1
    while start < len(body) and isinstance(future := body[start], ast.ImportFrom) and future.module == "__future__":
        start += 1
    rest = body[start:]
    if not rest:
        return tree
    last = rest[-1]
    line = last.end_lineno or last.lineno

    def place(node: ast.AST) -> None:
        for child in ast.walk(node):
            child.lineno, child.col_offset, child.end_lineno, child.end_col_offset = line, 0, line, 0  # type: ignore[attr-defined]

    def end_attribute(name: str) -> ast.Attribute:
        return ast.Attribute(value=ast.Constant(_END), attr=name, ctx=ast.Load())

    handler = ast.ExceptHandler(type=end_attribute("caught_types"), name=None, body=[
        ast.Expr(ast.Call(func=end_attribute("caught"), args=[], keywords=[]))])
    place(handler)
    guard = ast.Try(body=rest, handlers=[handler], orelse=[], finalbody=[], lineno=rest[0].lineno,
                    col_offset=rest[0].col_offset, end_lineno=line, end_col_offset=0)
    tree.body = [*body[:start], guard]
    return tree


@dataclass
class Prepared:
    """A script ready to run: what `python FILE` would run, its module, its arguments."""

    file: MainFile
    code: types.CodeType | None  # None for a folder or zip file: runpy finds its `__main__`
    main: types.ModuleType
    argv: list[str]
    end: ScriptEnd = field(default_factory=ScriptEnd)


def prepare(path: str, args: str = "") -> Prepared:
    """Read and compile the script as `python FILE` would (ScriptProblem where Python refuses it); its module
    and arguments made, nothing of the process changed yet."""
    file = main_file(path)
    end = ScriptEnd()
    code: types.CodeType | None = None
    if file.kind == SOURCE:
        code = compile_tree(path, with_its_end_caught(parse_script(path)))
        code = code.replace(co_consts=tuple(end if isinstance(value, str) and value == _END else value
                                            for value in code.co_consts))
    elif file.kind == COMPILED:
        code = read_compiled(path)
    argv = [os.path.expanduser(path.strip()), *shlex.split(args)]
    main = types.ModuleType("__main__")
    main.__dict__.update(__builtins__=builtins, __annotations__={})
    if file.kind == SOURCE:
        main.__dict__.update(__file__=file.filename, __cached__=None,
                             __loader__=SourceFileLoader("__main__", file.filename))
    elif file.kind == COMPILED:
        main.__dict__.update(__file__=file.filename, __cached__=None,
                             __loader__=SourcelessFileLoader("__main__", file.filename))
    return Prepared(file, code, main, argv, end)


def _become_main(prepared: Prepared) -> None:
    """`__main__`, `sys.argv` and the rest as `python FILE` sets them."""
    # Kept until the process exits, as a bare run's. `__mp_main__` too: multiprocessing made it an alias of the
    # `__main__` of its import (the panel's), and a pool's result thread finds the script's classes there; a
    # spawned or forkserver child re-runs the script from `__file__`, as it does bare.
    sys.modules["__main__"] = sys.modules["__mp_main__"] = prepared.main
    scripts_main[:] = [prepared.main]
    sys.argv = list(prepared.argv)
    sys.executable = python_as_typed(sys.executable)
    sys.orig_argv = [sys.executable, *prepared.argv]
    if prepared.file.kind == PACKAGE:
        sys.path.insert(0, prepared.file.filename)  # the folder or zip file itself, where runpy finds `__main__`
    else:  # as `python file.py` puts the script's folder
        sys.path.insert(0, os.path.dirname(os.path.realpath(prepared.file.filename)))
    tensorflow_as_at_its_import()


class _Signals:
    """Ctrl+C as bare while the script runs: Python's own handler. The panel learns that a KeyboardInterrupt came
    from a signal (Stop) through the interpreter's wakeup fd, which every handled signal writes to."""

    def __init__(self) -> None:
        self.wakeup_r, self.wakeup_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)

    def start(self) -> None:
        signal.set_wakeup_fd(self.wakeup_w, warn_on_full_buffer=False)
        signal.signal(signal.SIGINT, signal.default_int_handler)

    def stop(self, ctx: JobContext) -> bool:
        """Back to the run's own watch (Ctrl+C only noted from here on); whether SIGINT came meanwhile."""
        signal.signal(signal.SIGINT, lambda *_: ctx.cancel_requested.set())
        came = signalled(self.wakeup_r)
        with contextlib.suppress(ValueError):
            signal.set_wakeup_fd(-1)
        os.close(self.wakeup_r)
        os.close(self.wakeup_w)
        return came


def outcome(ctx: JobContext, prepared: Prepared, signals: _Signals) -> Callable[[], ScriptResult]:
    """What ended the script, reported as the interpreter reports it at that moment (`sys.exit`'s message, an
    uncaught exception's traceback: before non-daemon threads are waited for and atexit runs); returns the job's
    outcome for the run (its result, or ScriptExit, JobCancelled, KeyboardInterrupt raised)."""
    exc = prepared.end.exception
    if signals.stop(ctx):  # a Ctrl+C (Stop) that came while the script ran, caught by it or not
        ctx.cancel_requested.set()
    file = Path(prepared.file.filename)
    result: ScriptResult = {"kind": "script", "path": prepared.file.filename, "argv": prepared.argv,
                            "exit_code": 0}
    failure: BaseException | None = None
    if prepared.end.cancelled_before:
        failure = JobCancelled("cancelled before the script started")
    elif isinstance(exc, SystemExit):
        status = exit_status(exc.code)
        if status != 0:
            failure = ScriptExit(status, "ScriptExit", f"{file.name} exited with status {status}")
    elif isinstance(exc, KeyboardInterrupt) and ctx.cancel_requested.is_set():
        failure = exc  # the user's Ctrl+C (Stop): the run is cancelled
    elif exc is not None:
        text = report_uncaught(exc)
        status = -signal.SIGINT if isinstance(exc, KeyboardInterrupt) else 1
        failure = ScriptExit(status, type(exc).__name__, str(exc).strip() or type(exc).__name__, text)
    if failure is None:
        ctx.progress(1, 1, "done", force=True)

    def job_outcome() -> ScriptResult:
        if failure is not None:
            raise failure
        return result

    return job_outcome


def forked_outcome(prepared: Prepared) -> Callable[[], ScriptResult]:
    """The end of a child the script forked (`os.fork`) that ran on to the end of the script, as a bare one's:
    its uncaught exception reported as Python reports it, its status the one Python gives (ScriptExit raised for
    a non-zero one). Nothing of the run's is touched: its events pipe is the run's, and a lock it takes may have
    been copied held by the fork."""
    exc = prepared.end.exception
    status = 0
    if isinstance(exc, SystemExit):
        status = exit_status(exc.code)
    elif exc is not None:
        report_uncaught(exc)
        status = -signal.SIGINT if isinstance(exc, KeyboardInterrupt) else 1

    def job_outcome() -> ScriptResult:
        if status != 0:
            raise ScriptExit(status, type(exc).__name__, f"exited with status {status}")
        return {"kind": "script", "path": prepared.file.filename, "argv": prepared.argv, "exit_code": 0}

    return job_outcome


INTERRUPT_AT_START_ENV = "TF_DEVICE_PANEL_TEST_INTERRUPT_AT_SCRIPT_START"


def hand_over(ctx: JobContext, prepared: Prepared, finish: Callable[[Callable[[], ScriptResult]], None]) -> None:
    """Leave for the interpreter's top level, where the script then runs as the outermost frame; never returns.
    `finish(outcome)` is called after it (its outcome as `outcome` gives it; in a child the script forked that
    ran on to the end, as `forked_outcome` gives it) and must end the process.

    The interpreter's finalization calls `threading._shutdown()` first, from C: it is replaced by a chain of calls
    made from C (`list` over `itertools.chain` of `starmap`s, which add no frame and no recursion depth): the last
    preparations (`threading._shutdown` put back, `__main__`, `sys.argv`, Ctrl+C as bare), the script's module
    code as a function of its globals (run with them as its locals, as `exec` runs it), then `finish`. A `.pyc`'s
    code and a folder's or zip file's `__main__` (run by runpy, as bare) have no handler of the run's compiled in:
    an exception that leaves them, or any file's last preparations (a Ctrl+C as it becomes the script's), reaches
    `sys.unraisablehook`, the run's until then, which ends the run with it."""
    shutdown = threading._shutdown  # type: ignore[attr-defined]
    signals = _Signals()
    end = prepared.end
    if prepared.code is not None:
        body: Callable[[], object] = types.FunctionType(prepared.code, prepared.main.__dict__)
    else:
        body = functools.partial(runpy._run_module_as_main, "__main__", False)  # type: ignore[attr-defined]
    unraisablehook = sys.unraisablehook

    run_pid = os.getpid()

    def conclude() -> None:
        sys.unraisablehook = unraisablehook
        if os.getpid() != run_pid:  # a child the script forked: it ends as bare, telling the panel nothing
            finish(forked_outcome(prepared))
        finish(outcome(ctx, prepared, signals))
        os._exit(1)  # `finish` ends the process; never past it

    def before() -> None:
        threading._shutdown = shutdown  # type: ignore[attr-defined]
        _become_main(prepared)
        if not ctx.cancel_requested.is_set():
            ctx.progress(0, 1, f"running {os.path.basename(prepared.file.filename)}")  # may wait: Stop is noted
        # Ctrl+C as bare from here on: a KeyboardInterrupt before the script's body leaves this chain, and
        # `exception_left` ends the run with it.
        signals.start()
        if interrupt_at_start:
            signal.raise_signal(signal.SIGINT)
        if ctx.cancel_requested.is_set():  # Stop came while the run handed over: the script does not start
            end.cancelled_before = True
            conclude()
        end.started = True

    def exception_left(unraisable: Any) -> None:
        """An exception that left this chain, not the script's code (a `.pyc`'s or a folder's `__main__` has
        no handler of the run's; a Ctrl+C can come before a source file's handler is entered, or in `before`):
        the run ends with it, as cancelled before the script started where it came before that."""
        if unraisable.object is threading and end.exception is None:
            end.exception = unraisable.exc_value
            if not end.started and isinstance(end.exception, KeyboardInterrupt):
                end.cancelled_before = True
            conclude()
        unraisablehook(unraisable)

    # The tests' way to send Stop at the one moment no wait can catch: as Ctrl+C becomes the script's.
    interrupt_at_start = os.environ.pop(INTERRUPT_AT_START_ENV, "") == "1"
    sys.unraisablehook = exception_left
    threading._shutdown = functools.partial(list, itertools.chain(  # type: ignore[attr-defined]
        itertools.starmap(before, [()]), itertools.starmap(body, [()]), itertools.starmap(conclude, [()])))
    # Ctrl+C while the frames unwind: noted, and the script does not start (`before`).
    signal.signal(signal.SIGINT, lambda *_: ctx.cancel_requested.set())
    raise HandOver


def script(ctx: JobContext, path: str, args: str = "") -> ScriptResult:
    """The job as the catalogue names it: the run process runs a script through `prepare` and `hand_over`
    (core.runproc.runtime_main.run_script); this runs it in place, on the calling thread, for a caller that
    cannot hand over."""
    prepared = prepare(path, args)
    signals = _Signals()
    _become_main(prepared)
    signals.start()
    try:
        if prepared.code is not None:
            exec(prepared.code, prepared.main.__dict__)
        else:
            runpy._run_module_as_main("__main__", False)  # type: ignore[attr-defined]
    except BaseException as exc:
        prepared.end.exception = exc
    return outcome(ctx, prepared, signals)()
