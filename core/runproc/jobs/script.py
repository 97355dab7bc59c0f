"""Run the user's own Python file in the run process, exactly as `python file.py` would under the configuration.

The run process is fresh and the script runs on its main thread, so signal handlers, atexit, module state
and the working folder behave as in a bare run. What the script gets, and how it differs from a bare run:

- TensorFlow imported and configured (the profile's `tf.config` calls made) but NOT initialized: the script's
  own `tf.config` calls work as they do bare. The panel watches for the first initialization (to list the
  logical devices and start memory reporting then) and for `tf.device` scopes naming a device that does not
  exist (a soft-placement fallback, reported with the script's file and line); it makes no `tf.config` or
  `tf.debugging` call of its own once the script has started.
- `__main__` (and `__mp_main__`) as bare: a fresh module, `__file__` the path as given joined to the working
  folder, `__package__` None, kept in `sys.modules` until the process exits (a thread may still pickle the
  script's classes after its body ends); `sys.argv`, `sys.orig_argv`, `sys.executable`, the SIGINT handler
  and the streams' buffering as bare.
- Its fds 1 and 2 are pipes of its own, copied byte for byte, so Python's writes, `os.write` and children keep
  one order; TensorFlow's C++ log and placement echo go to the panel's pipes through C's `stdout`/`stderr`
  FILE*s (`give_script_its_fds`), and to the script's too once it turns placement logging on itself.
- An uncaught exception goes to `sys.excepthook` (Python's own printing: `Did you mean`, notes, chained
  exceptions, groups) with the panel's frames taken out, as are they from the stacks TensorFlow records
  (a graph error's "defined at"); its status is 1, or death by SIGINT for a KeyboardInterrupt.
"""

from __future__ import annotations

import _thread
import array
import builtins
import contextlib
import ctypes
import fcntl
import io
import os
import shlex
import signal
import sys
import termios
import threading
import time
import types
from collections.abc import Callable
from importlib.machinery import SourceFileLoader
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tf_device_panel.core.catalogue.script_checks import compile_script
from tf_device_panel.core.protocol import events
from tf_device_panel.core.protocol.output_lines import canonical_device, short_device_name
from tf_device_panel.core.runproc.jobs.context import JobCancelled, JobContext, ScriptExit

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
_libc.fdopen.restype = ctypes.c_void_p
_libc.fdopen.argtypes = [ctypes.c_int, ctypes.c_char_p]
_libc.setvbuf.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int, ctypes.c_size_t]
_libc.fflush.argtypes = [ctypes.c_void_p]
_IOFBF, _IOLBF, _IONBF = 0, 1, 2


# The script's pipes (write ends, the run's own copies): an event waits until what the script wrote before it
# has been read (`wait_until_read`), so the panel has the script's output and its events in one order.
script_pipes: list[int] = []
READ_WAIT_S = 0.5  # at most this long per event: a reader held up (a slow terminal) only blurs the order


def wait_until_read(limit_s: float = READ_WAIT_S) -> None:
    """Until the panel has read every byte written so far to the script's fds 1 and 2 (by the script, `os.write`,
    a child), or `limit_s` has passed. The pipes' fill level is the kernel's (FIONREAD, on the write end)."""
    if not script_pipes:
        return
    deadline = time.monotonic() + limit_s
    level = array.array("i", [0])
    for fd in script_pipes:
        while True:
            try:
                fcntl.ioctl(fd, termios.FIONREAD, level, True)
            except OSError:
                break
            if level[0] <= 0 or time.monotonic() > deadline:
                break
            time.sleep(0.0002)


# The panel's copies of fds 1 and 2 that C's `stdout` and `stderr` write to, by name, while the script's own
# output is apart; and, once the script turned placement logging on, the pipes teeing them to it too.
panel_c_fds: dict[str, int] = {}
tee_pipes: list[int] = []
tee_done: list[threading.Event] = []


def _tee(read_fd: int, script_fd: int, panel_fd: int, done: threading.Event) -> None:
    """Copy what C writes to both the script's fd (1 or 2, whatever it is now, as C's own stream would) and the
    panel's pipe, until end of file."""
    try:
        while chunk := os.read(read_fd, 65536):
            for fd in (script_fd, panel_fd):
                view = memoryview(chunk)
                with contextlib.suppress(OSError):
                    while view:
                        view = view[os.write(fd, view):]
    except OSError:
        pass
    finally:
        os.close(read_fd)
        done.set()


def give_tensorflows_output_to_the_script() -> None:
    """TensorFlow's C++ log and placement echo go to the script's fds 1 and 2, as in a bare run, and still to
    the panel (its placements): C's `stdout` and `stderr` write into pipes a thread of the run copies to both
    (not a `threading` thread: the script's `threading.enumerate()` does not list it)."""
    if not panel_c_fds or tee_pipes:
        return
    _libc.fflush(None)
    for name, script_fd in (("stdout", 1), ("stderr", 2)):
        panel_fd = panel_c_fds.get(name)
        if panel_fd is None:
            continue
        read_fd, write_fd = os.pipe()
        handle = _libc.fdopen(write_fd, b"w")
        if not handle:
            os.close(read_fd)
            os.close(write_fd)
            continue
        # Buffered as C buffers them for a bare run into a pipe: stdout by blocks, stderr not at all.
        _libc.setvbuf(handle, None, _IOFBF if name == "stdout" else _IONBF, 0)
        done = threading.Event()
        _thread.start_new_thread(_tee, (read_fd, script_fd, panel_fd, done))
        tee_pipes.append(write_fd)
        tee_done.append(done)
        ctypes.c_void_p.in_dll(_libc, name).value = handle


def finish_tee(limit_s: float = 2.0) -> None:
    """At the run's end (C's buffers flushed): the tee pipes closed, and what they held copied on."""
    for fd in tee_pipes:
        with contextlib.suppress(OSError):
            os.close(fd)
    deadline = time.monotonic() + limit_s
    for done in tee_done:
        done.wait(max(0.0, deadline - time.monotonic()))


def watch_placement_logging() -> None:
    """A script that turns TensorFlow's placement log on itself (`tf.debugging.set_log_device_placement(True)`)
    sees it as bare, on its own stdout and stderr: TensorFlow's setter, wrapped, has TensorFlow's output copied
    to the script's fds too (`give_tensorflows_output_to_the_script`)."""
    from tensorflow.python.eager import context

    cls = context.Context
    original = cls.log_device_placement

    def set_log_device_placement(self: Any, enable: Any) -> None:
        original.fset(self, enable)
        if enable:
            give_tensorflows_output_to_the_script()

    cls.log_device_placement = property(original.fget, set_log_device_placement, doc=original.__doc__)


# How the interpreter buffered sys.stdout and sys.stderr when it started, as it does for a bare run (by blocks
# into a pipe, by lines on a terminal, unbuffered with PYTHONUNBUFFERED): (line_buffering, write_through). The
# run process's own start (runtime_main.main) records it before it makes them line-buffered for itself, and
# copies it here when a script's run loads this module (runtime_main.load_script_job).
bare_buffering: dict[str, tuple[bool, bool]] = {}

# The copies of the panel's output pipes that C's `stdout` and `stderr` write to once a script has its fds: the
# run closes them at its end, with fds 1 and 2, so the panel sees end of file before the process is torn down.
panel_fds: list[int] = []


def give_script_its_fds(stdout_fd: int, stderr_fd: int) -> None:
    """The script's fds 1 and 2 become its own channels (`stdout_fd`, `stderr_fd`: pipes the panel copies byte
    for byte): `print`, `os.write(1, …)`, a child process's output and C code writing to fd 1 or 2 all reach
    them in the order they were written, as in a bare run.

    TensorFlow's C++ logging and its placement echo (written through C's `stderr` and `stdout` FILE*s) stay on
    the panel's own pipes, where fds 1 and 2 were: C's `stdout` and `stderr` are pointed at copies of those
    fds, so the panel's placement log never reaches the script's streams. `sys.stdout` and `sys.stderr` keep
    their objects (a logging handler made earlier still writes to them) and are buffered as the interpreter
    buffered them at its start, as a bare run's (`bare_buffering`)."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError, AttributeError):
            stream.flush()
    _libc.fflush(None)
    for name, fd, mode, buffering in (("stdout", 1, b"w", _IOLBF), ("stderr", 2, b"w", _IONBF)):
        panel_copy = os.dup(fd)
        handle = _libc.fdopen(panel_copy, mode)
        if not handle:
            os.close(panel_copy)
            continue
        _libc.setvbuf(handle, None, buffering, 0)
        ctypes.c_void_p.in_dll(_libc, name).value = handle
        panel_c_fds[name] = panel_copy
        panel_fds.append(panel_copy)
    os.dup2(stdout_fd, 1)
    os.dup2(stderr_fd, 2)
    for fd in {stdout_fd, stderr_fd} - {1, 2}:
        os.set_inheritable(fd, False)  # kept, not inherited: the run's own look at what is still unread there
        script_pipes.append(fd)
    for name, stream in (("stdout", sys.stdout), ("stderr", sys.stderr)):
        line_buffering, write_through = bare_buffering.get(name, (False, False))
        with contextlib.suppress(AttributeError, ValueError):
            stream.reconfigure(line_buffering=line_buffering, write_through=write_through)  # type: ignore[union-attr]


# -- its tracebacks -------------------------------------------------------------------------------
def _is_panel_frame(tb: types.TracebackType) -> bool:
    return tb.tb_frame.f_code.co_filename.startswith(PANEL_DIR)


def without_panel_frames(exc: BaseException | None, seen: set[int] | None = None) -> None:
    """Take the panel's frames out of `exc`'s traceback and those of its causes, contexts and group members:
    what remains is what a bare run's traceback shows."""
    seen = set() if seen is None else seen
    if exc is None or id(exc) in seen:
        return
    seen.add(id(exc))
    kept = []
    tb = exc.__traceback__
    while tb is not None:
        if not _is_panel_frame(tb):
            kept.append(tb)
        tb = tb.tb_next
    rebuilt: types.TracebackType | None = None
    for entry in reversed(kept):
        rebuilt = types.TracebackType(rebuilt, entry.tb_frame, entry.tb_lasti, entry.tb_lineno)
    exc.__traceback__ = rebuilt
    without_panel_frames(exc.__cause__, seen)
    without_panel_frames(exc.__context__, seen)
    members = getattr(exc, "exceptions", ())  # an exception group's (Python 3.11+)
    for member in members if isinstance(members, tuple) else ():
        if isinstance(member, BaseException):
            without_panel_frames(member, seen)


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
    """Report `exc` as the interpreter does at the end of a script: through `sys.excepthook` (the script may
    have set its own), and, if the hook itself fails, as Python says it then. Returns what was printed."""
    without_panel_frames(exc)
    stderr = sys.stderr
    tee = _Tee(stderr)
    sys.stderr = tee
    try:
        try:
            sys.excepthook(type(exc), exc, exc.__traceback__)
        except BaseException as hook_error:
            without_panel_frames(hook_error)
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


# -- TensorFlow, watched but not touched ------------------------------------------------------------
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
    from tensorflow.python.framework import device_spec

    _LIBRARY_DIRS = (os.path.dirname(tensorflow.__file__), os.path.dirname(contextlib.__file__) + os.sep
                     + "contextlib.py", PANEL_DIR)
    cls = context._EagerDeviceContext
    original = cls.__enter__
    reported: set[tuple[str, int, str]] = set()
    where_ops_go: dict[str, str | None] = {}  # a scope's device → where its ops run instead (None: it exists)

    def fallback_for(spec: Any, devices: list[str]) -> str | None:
        if not spec.device_type or spec.job not in (None, "localhost"):
            return None
        kind = spec.device_type.upper()
        present = [device_spec.DeviceSpecV2.from_string(d) for d in devices]
        same_kind = [d for d in present if (d.device_type or "").upper() == kind]
        if any(spec.device_index is None or d.device_index == spec.device_index for d in same_kind):
            return None
        return str((same_kind or present)[0].to_string())  # where soft placement puts the ops (measured)

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
            where_ops_go[entered] = fallback_for(scope._stack[-1][2], devices)
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


def without_panel_frames_in_tensorflows_stacks() -> Any:
    """A context in which the stacks TensorFlow records on this thread (where an op was defined: a graph error's
    "defined at") leave out the panel's frames below the script: TensorFlow's own stack filter, given the files
    of every frame on the stack now (the interpreter's `-c` and runpy, the supervisor, this run, this job)."""
    from tensorflow.python.util import tf_stack

    below = set()
    frame: types.FrameType | None = sys._getframe()
    while frame is not None:
        below.add(frame.f_code.co_filename)
        frame = frame.f_back
    panel_files = frozenset(below)

    class PanelFrames(tf_stack.StackTraceFilter):
        def get_filtered_filenames(self) -> frozenset[str]:
            return panel_files

    return PanelFrames()


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
def script(ctx: JobContext, path: str, args: str = "") -> ScriptResult:
    code = compile_script(path)
    file = Path(path.strip()).expanduser()
    argv = [os.path.expanduser(path.strip()), *shlex.split(args)]
    absolute = code.co_filename
    main = types.ModuleType("__main__")
    main.__dict__.update(__file__=absolute, __cached__=None, __builtins__=builtins, __annotations__={},
                         __loader__=SourceFileLoader("__main__", absolute))
    # Kept until the process exits, as a bare run's. `__mp_main__` too: multiprocessing made it an alias of the
    # `__main__` of its import (the panel's), and a pool's result thread finds the script's classes there; a
    # spawned or forkserver child re-runs the script from `__file__`, as it does bare.
    sys.modules["__main__"] = sys.modules["__mp_main__"] = main
    sys.argv = argv
    sys.executable = python_as_typed(sys.executable)
    sys.orig_argv = [sys.executable, *argv]
    sys.path.insert(0, os.path.dirname(os.path.realpath(file)))  # as `python file.py` puts the script's folder
    ctx.progress(0, 1, f"running {file.name}")
    # Ctrl+C as bare: Python's own handler. The panel learns that a KeyboardInterrupt came from a signal (Stop)
    # through the interpreter's wakeup fd, which every handled signal writes to.
    wakeup_r, wakeup_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    signal.set_wakeup_fd(wakeup_w, warn_on_full_buffer=False)
    panel_handler = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with without_panel_frames_in_tensorflows_stacks():
            exec(code, main.__dict__)
    except SystemExit as exc:
        status = exit_status(exc.code)
        if status != 0:
            raise ScriptExit(status, "ScriptExit", f"{file.name} exited with status {status}") from None
    except JobCancelled:
        raise
    except BaseException as exc:
        if isinstance(exc, KeyboardInterrupt) and (ctx.cancel_requested.is_set() or signalled(wakeup_r)):
            ctx.cancel_requested.set()
            raise  # the user's Ctrl+C (Stop): the run is cancelled
        text = report_uncaught(exc)
        status = -signal.SIGINT if isinstance(exc, KeyboardInterrupt) else 1
        raise ScriptExit(status, type(exc).__name__, str(exc).strip() or type(exc).__name__, text) from None
    finally:
        signal.signal(signal.SIGINT, panel_handler)
        if signalled(wakeup_r):  # a Ctrl+C the script caught: the run's own handler has it from here on
            ctx.cancel_requested.set()
        with contextlib.suppress(ValueError):
            signal.set_wakeup_fd(-1)
        os.close(wakeup_r)
        os.close(wakeup_w)
    ctx.progress(1, 1, "done", force=True)
    return {"kind": "script", "path": absolute, "argv": argv, "exit_code": 0}
