"""The run process: one per run, started warm (TensorFlow imported and configured, not initialized), then
given one command.

Started (in a fork of `core.runproc.supervisor`) by `core.client.runtime.RuntimeProcess` as
`python -m core.runproc.runtime_main --events-fd N --commands-fd M`. It imports TensorFlow, reads the device
configuration (the first line on the commands pipe, sent by the panel itself), applies it, says `warm`, and waits
for ONE command on the commands pipe:
- `run`: initialize TensorFlow (its devices go out as `ready`), run the job on this main thread, exit with
  the job's status through a normal interpreter exit (atexit handlers run); a user's `script` gets TensorFlow
  configured but not initialized, and `ready` goes out when the script first initializes it (`run_script`),
  and the script runs at the interpreter's top level, the run having left every frame of its own for it
  (`script.hand_over`), as the outermost frame;
- `describe`: initialize, report the devices, exit;
- end of file (the panel discarded this spare, or is gone): exit 0 at once.

Events go to the events pipe as JSON lines (TensorFlow's C++ code writes to fds 1 and 2, never there); a
user's script gets pipes of its own as its fds 1 and 2 (`--script-stdout-fd`, `--script-stderr-fd`), copied byte
for byte, C's `stdout` and `stderr` (TensorFlow's C++ log and placement echo) writing to them as bare
(`script.give_script_its_fds`); before that, what TensorFlow's import printed is on the process's first stdout
and stderr. Nothing is ever written into them but what TensorFlow and the job print.
"""

from __future__ import annotations

import _thread
import argparse
import atexit
import contextlib
import ctypes
import json
import os
import platform
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import ModuleType
from typing import Any, TypedDict, cast

from tf_device_panel.core.catalogue import JOBS, ParamError, RunDevices
from tf_device_panel.core.catalogue.jobs import JobError
from tf_device_panel.core.config import ConfigError, DeviceConfig, ProfileJson
from tf_device_panel.core.config.plan import AppliedPlan, StepError, apply_plan, plan
from tf_device_panel.core.processes import die_with_parent, wait_for_exit
from tf_device_panel.core.protocol import events
from tf_device_panel.core.protocol.environment import USER_ENVIRONMENT_ENV
from tf_device_panel.core.protocol.output_lines import short_device_name
from tf_device_panel.core.runproc.jobs import implementation
from tf_device_panel.core.runproc.jobs.context import JobCancelled, JobContext, ScriptExit
from tf_device_panel.core.runproc.tf_facts import BuildInfo, build_info, physical_devices
from tf_device_panel.core.units import KIB, MIB

EXIT_OK, EXIT_JOB_FAILED, EXIT_CONFIG_REJECTED = 0, 1, 3
MEMORY_REPORT_S = 0.5

_libc = ctypes.CDLL(None)

# How the interpreter buffered sys.stdout and sys.stderr at this process's start, before `main` made them
# line-buffered: a user's script gets them back (core.runproc.jobs.script.bare_buffering).
bare_buffering: dict[str, tuple[bool, bool]] = {}
# The script job's module, imported only for a run of a user's script (`load_script_job`): other runs never
# need it, and its import is a good part of this process's own. Once loaded, events wait for what the script
# wrote before them, and the exit flushes and closes its pipes.
script_job: ModuleType | None = None


def load_script_job() -> ModuleType:
    global script_job
    if script_job is None:
        from tf_device_panel.core.runproc.jobs import script

        script.bare_buffering.update(bare_buffering)
        script_job = script
    return script_job


class ImportFailure(TypedDict, total=False):
    """What a `startup_error` adds when `import tensorflow` failed because TensorFlow is not installed."""

    not_installed: bool
    python: str
    message: str


class RuntimeFacts(TypedDict, total=False):
    """What the `warm` and `ready` events say, gathered as the process warms up (its keys are their fields)."""

    tf_version: str
    python: str
    platform: str
    build: BuildInfo
    physical: list[events.PhysicalDevice]
    pid: int
    applied: list[str]
    import_s: float
    config: ProfileJson
    logical: list[events.LogicalDevice]
    init_s: float


class EventWriter:
    def __init__(self, fd: int):
        self._fd = fd
        self._lock = threading.Lock()

    def __call__(self, event: events.Event) -> None:
        data = event.encode()
        if script_job is not None:
            script_job.wait_until_read()  # what a script wrote before this event is read before it
        with self._lock:
            view = memoryview(data)
            while view:
                written = os.write(self._fd, view)
                view = view[written:]


def apply_config(tf: Any, config: DeviceConfig) -> list[str]:
    """Apply the configuration's plan (`core.config.plan`) before TensorFlow initializes; returns what was done,
    step by step. The plan is kept (`applied_plan`) so `describe_logical` can give each logical GPU its limit.

    Raises core.config.plan.StepError naming the step and carrying TensorFlow's (or the driver's) own message.
    """
    global applied_plan
    applied_plan = apply_plan(tf, plan(config))
    return list(applied_plan.steps)


applied_plan = AppliedPlan()  # what the last apply_config did (one configuration per process)



def import_failure(exc: BaseException) -> ImportFailure:
    """What to say when `import tensorflow` failed: TensorFlow absent from this Python is not a rejected
    configuration, and says how to install it into the very interpreter the run uses."""
    if isinstance(exc, ModuleNotFoundError) and (exc.name or "").split(".")[0] == "tensorflow":
        from tf_device_panel.core.devices.cudalibs import install_commands

        python = sys.executable
        return {"not_installed": True, "python": python,
                "message": f"TensorFlow is not installed in this Python ({python}); install it with: "
                           f"{install_commands(python)}"}
    return {}


def describe_physical(tf: Any) -> RuntimeFacts:
    """TensorFlow's build and physical devices: none of this initializes the runtime."""
    return {"tf_version": tf.__version__, "python": platform.python_version(), "platform": platform.platform(),
            "build": build_info(tf), "physical": physical_devices(tf), "pid": os.getpid()}


def describe_logical(tf: Any, config: DeviceConfig) -> list[events.LogicalDevice]:
    """The logical devices, each GPU with the memory limit the plan gave it (none for a GPU left whole);
    listing them initializes TensorFlow."""
    logical = []
    for device in tf.config.list_logical_devices():  # this initializes the runtime
        entry: events.LogicalDevice = {"name": f"/job:localhost/replica:0/task:0{device.name}",
                                       "short_name": short_device_name(device.name),
                                       "device_type": device.device_type}
        logical.append(entry)
    physical = tf.config.list_physical_devices("GPU")
    visible = [physical.index(gpu) for gpu in tf.config.get_visible_devices("GPU") if gpu in physical]
    limits = applied_plan.logical_gpu_limits(visible)
    logical_gpus = [d for d in logical if d["device_type"] == "GPU"]
    if len(limits) == len(logical_gpus):  # otherwise TF made other devices than planned: say no limit at all
        for device, limit in zip(logical_gpus, limits, strict=True):
            if limit is not None:
                device["memory_limit_mib"] = limit
    return logical


def allocator_devices(logical: list[events.LogicalDevice], config: DeviceConfig) -> list[str]:
    """The devices whose allocator keeps figures: each logical GPU, and the CPU when its allocator is BFC
    (cpu_memory_limit_mib; logical CPUs share one allocator, so CPU:0 stands for them all)."""
    names = [d["short_name"].lstrip("/") for d in logical if d["device_type"] == "GPU"]
    if config.cpu_memory_limit_mib and any(d["short_name"] == "/CPU:0" for d in logical):
        names.append("CPU:0")
    return names


class MemoryReporter:
    """While the job runs, TensorFlow's allocator figures (current, peak) for each logical GPU, and for the CPU
    under cpu_memory_limit_mib."""

    def __init__(self, tf: Any, gpus: list[str], emit: EventWriter, job_id: str):
        self.tf, self.gpus, self.emit, self.job_id = tf, gpus, emit, job_id
        self.stopped = threading.Event()

    def start(self) -> None:
        if self.gpus:
            self.sample()  # the figures as the job starts, whatever its length (even one under a period)
            threading.Thread(target=self.report, name="tf-memory", daemon=True).start()

    def report(self) -> None:
        while not self.stopped.wait(MEMORY_REPORT_S):
            self.sample()

    def sample(self) -> None:
        for name in self.gpus:
            try:
                info = self.tf.config.experimental.get_memory_info(name)
            except Exception:  # a device without allocator stats is simply not reported
                continue
            figures = events.TfMemory(device=f"/{name}", current_mib=info["current"] / MIB,
                                      peak_mib=info["peak"] / MIB, job_id=self.job_id)
            if not self.stopped.is_set():
                self.emit(figures)


def facts_event(kind: str, info: RuntimeFacts, job_id: str | None = None) -> events.Event:
    """The runtime's facts gathered so far (a dict that grows from `warm` to `ready`) as that event."""
    return events.from_json({"type": kind, "data": info, "job_id": job_id})


@dataclass(frozen=True)
class Command:
    """The one command a spare takes, as core.client.runtime sends it: a JSON object on one line."""

    cmd: object                     # "run" or "describe"; anything else is refused, named as it came
    job_id: str | None
    job: str
    params: Mapping[str, object]    # checked against the job's declarations when it runs
    after_pid: int | None           # the previous run's process, to wait for before initializing


MADV_POPULATE_WRITE = 23  # Linux 5.14: fault a range in writable, as writing each page would (no data changed)


def heap_spans() -> list[tuple[int, int]]:
    """(start, end) of this process's heap mappings, from /proc/self/maps (none where there is no such file)."""
    try:
        with open("/proc/self/maps", encoding="ascii", errors="replace") as maps:
            spans = [line.split()[0] for line in maps if line.rstrip().endswith("[heap]")]
    except OSError:  # not Linux
        return []
    return [(int(start, 16), int(end, 16)) for start, end in (span.split("-") for span in spans)]


def own_the_heap(spans: list[tuple[int, int]] | None = None) -> int:
    """Give this process its own copy of the heap it shares with the zygote it was forked from; returns the bytes
    made its own (0 where the kernel cannot).

    A fork shares the zygote's pages until either writes one; TensorFlow's first op then writes ~1,500 of the
    heap's pages, each a copy-on-write fault: the first matmul took 51 ms in a spare against 45 ms in a bare
    process (4,000 minor faults against 2,450). Done while the spare idles, before its job, it touches nothing of
    TensorFlow's state (the spare still never initializes TensorFlow) and costs ~45 ms of a core and the heap's
    size (~85 MiB) of memory no longer shared with the zygote."""
    owned = 0
    for start, end in heap_spans() if spans is None else spans:
        if _libc.madvise(ctypes.c_void_p(start), ctypes.c_size_t(end - start), MADV_POPULATE_WRITE) == 0:
            owned += end - start
    return owned


class CommandJson(TypedDict, total=False):
    """A line on the commands pipe as core.client.runtime writes it (every field as it came: checked by its reader)."""

    cmd: object
    config: object       # "configure": the profile's JSON object
    job_id: object
    job: object
    params: object
    after_pid: object


class Commands:
    """The commands pipe, line by line: the configuration first, then the one command (a line read past is kept)."""

    def __init__(self, fd: int):
        self.fd = fd
        self._pending = b""

    def next(self) -> CommandJson | None:
        """The next JSON object; None on end of file (the spare was discarded)."""
        while b"\n" not in self._pending:
            chunk = os.read(self.fd, 65536)
            if not chunk:
                return None
            self._pending += chunk
        line, self._pending = self._pending.split(b"\n", 1)
        command = json.loads(line)
        if not isinstance(command, dict):
            raise ValueError(f"a command is a JSON object, got {line[:200]!r}")
        return cast(CommandJson, command)


def read_configuration(commands: Commands) -> ProfileJson | None:
    """The run's device configuration, the first line the panel sends (core.client.runtime): it reaches this
    process straight from the panel, not through the zygote and the supervisor that fork it."""
    message = commands.next()
    if message is None:
        return None
    if message.get("cmd") != "configure" or not isinstance(message.get("config"), dict):
        raise ValueError(f"the first command is the configuration, got {json.dumps(message)[:200]}")
    return cast(ProfileJson, message["config"])


def read_command(commands: Commands) -> Command | None:
    """The one command a spare waits for; None on end of file (the spare was discarded)."""
    command = commands.next()
    if command is None:
        return None
    after, params = command.get("after_pid"), command.get("params")
    return Command(cmd=command.get("cmd"), job_id=str(command["job_id"]) if command.get("job_id") else None,
                   job=str(command.get("job")), params=params if isinstance(params, dict) else {},
                   after_pid=after if isinstance(after, int) and after > 0 else None)


FINALIZER_RETRY_S = 0.005  # a Ctrl+C that came during a finalizer is delivered again this much later


def in_finalizer(frame: Any) -> bool:
    """True when `frame` or a frame it was called from is an object's `__del__` (an exception raised there is
    printed and ignored by Python, never propagated)."""
    while frame is not None:
        if frame.f_code.co_name == "__del__":
            return True
        frame = frame.f_back
    return False


def came_of_cancel(exc: BaseException) -> bool:
    """Whether `exc` was raised while a KeyboardInterrupt (or JobCancelled) was being handled, or from one."""
    seen: set[int] = set()
    cause: BaseException | None = exc
    while cause is not None and id(cause) not in seen:
        if isinstance(cause, (KeyboardInterrupt, JobCancelled)):
            return True
        seen.add(id(cause))
        cause = cause.__cause__ or cause.__context__
    return False


class Run:
    """One job on this process's main thread: its events, its status, the process's exit status."""

    def __init__(self, emit: EventWriter, config: DeviceConfig, job_id: str, name: str,
                 params: Mapping[str, object]):
        """`params` as the command gave them: `execute` checks them against the job's declarations."""
        self.emit = emit
        self.config = config
        self.name = name
        self.params = params
        self.context = JobContext(job_id, emit, config)
        self.at_end: list[Any] = []  # called once the job is over, before its closing events (memory's last figures)
        self.devices: RunDevices | None = None  # this run's devices, once TensorFlow has listed them
        self.started = time.monotonic()

    def interrupted(self, signum: int, frame: Any) -> None:
        """SIGINT: what Ctrl+C does in a terminal (KeyboardInterrupt here), and the flag jobs check.

        Not inside a finalizer: a KeyboardInterrupt raised in a `__del__` (TensorFlow's
        ConcreteFunctionGarbageCollector.__del__ runs often during a fit) is printed as "Exception ignored in:
        …" with this handler in its traceback, and is then lost, so the job ran on. There the signal is sent
        again a moment later, when the finalizer has returned. (A user's script gets Ctrl+C as a bare `python`
        gives it.)"""
        self.context.cancel_requested.set()
        if self.name != "script" and in_finalizer(frame):
            retry = threading.Timer(FINALIZER_RETRY_S, os.kill, (os.getpid(), signal.SIGINT))
            retry.daemon = True
            retry.start()
            return
        signal.default_int_handler(signum, frame)

    def execute(self) -> int:
        self.begin()
        return self.conclude(self.job)

    def begin(self) -> None:
        self.started = time.monotonic()
        self.emit(events.JobStarted(job=self.name, params=self.params, job_id=self.context.job_id))

    def job(self) -> Any:
        spec = JOBS.get(self.name)
        if spec is None:
            raise JobError(f"unknown job {self.name!r}")
        if spec.in_client:
            raise JobError(f"{self.name} runs in the panel's own process, not in a run process")
        resolved = spec.resolve(self.params)
        if self.devices is not None:  # the check the window and the command line made, on what TF lists
            spec.check_devices(resolved, self.devices)
        return implementation(self.name)(self.context, **resolved)

    def conclude(self, job: Callable[[], Any]) -> int:
        """`job()`'s outcome told (its result, or what it raised) with the run's closing events; the exit status."""
        job_id = self.context.job_id
        status, result, exit_code = "ok", None, EXIT_OK
        error: events.Error | None = None
        try:
            result = job()
        except (KeyboardInterrupt, JobCancelled) as exc:
            status, exit_code = "cancelled", -signal.SIGINT if self.name == "script" else EXIT_JOB_FAILED
            error = events.Error(error_type="Cancelled", message=str(exc) or "cancelled by the user", job_id=job_id)
        except ScriptExit as exc:
            # The script's own status, as `python file.py` ends; its traceback (if any) is already on stderr.
            status, exit_code = "error", exc.code
            error = events.Error(error_type=exc.error_type, message=exc.message, traceback=exc.traceback or None,
                                 job_id=job_id)
        except (JobError, ParamError) as exc:
            status, exit_code = "error", EXIT_JOB_FAILED
            error = events.Error(error_type=type(exc).__name__, message=str(exc), job_id=job_id)
        except Exception as exc:
            if self.context.cancel_requested.is_set() and came_of_cancel(exc):
                # Ctrl+C landed inside a context manager's exit, whose own check then failed on it (TensorFlow's
                # device scope: "Exiting device scope without proper scope nesting"): the job was stopped.
                status, exit_code = "cancelled", EXIT_JOB_FAILED
                error = events.Error(error_type="Cancelled", message="cancelled by the user", job_id=job_id)
            else:  # a job's failure is reported as its result, with TF's message
                status, exit_code = "error", EXIT_JOB_FAILED
                error = events.Error(error_type=type(exc).__name__, message=str(exc).strip() or type(exc).__name__,
                                     traceback=traceback.format_exc(limit=-8), job_id=job_id)
        # The job is over: a late Ctrl+C must not cut its closing events short.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        self.context.finish()
        for last in self.at_end:
            with contextlib.suppress(Exception):  # the job's outcome is told whatever a last reading does
                last()
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(OSError, ValueError):
                stream.flush()
        if error is not None:
            self.emit(error)
        if result is not None:
            self.emit(events.Result(result=result, job_id=job_id))
        self.emit(events.JobFinished(job=self.name, status=status, duration_s=time.monotonic() - self.started,
                                     rss_mib=resident_mib(), rss_peak_mib=peak_resident_mib(), job_id=job_id))
        return exit_code


def runtime_devices(info: RuntimeFacts, config: DeviceConfig) -> RunDevices:
    """This run's devices as TensorFlow listed them, for the parameters' check."""
    logical = [device.get("short_name", "") for device in info.get("logical", [])]
    physical_gpus = [d for d in info.get("physical", []) if d.get("device_type") == "GPU"]
    run_gpus = sum(name.startswith("/GPU:") for name in logical)
    return RunDevices(cpus=sum(name.startswith("/CPU:") for name in logical), gpus=run_gpus,
                      machine_gpus=len(physical_gpus), no_gpu_reason="" if physical_gpus else "TensorFlow found none",
                      whose="this run has")


def resident_mib() -> float | None:
    """This process's resident memory now (Linux's /proc; None where it cannot be read)."""
    try:
        with open("/proc/self/statm", "rb") as statm:
            pages = int(statm.read().split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return pages * os.sysconf("SC_PAGE_SIZE") / MIB


def peak_resident_mib() -> float | None:
    """This process's peak resident memory so far (Linux's VmHWM; None where it cannot be read)."""
    try:
        with open("/proc/self/status", "rb") as status:
            line = next(line for line in status if line.startswith(b"VmHWM:"))
        return int(line.split()[1]) * KIB / MIB  # Linux counts it in KiB ("kB")
    except (OSError, ValueError, IndexError, StopIteration):
        return None


def main(argv: list[str] | None = None) -> tuple[int, int | None]:
    """(exit status, the events pipe's fd or None if the arguments did not name one)."""
    die_with_parent()
    # Line by line, as on a terminal: every line the job prints reaches the panel when it is printed
    # (PYTHONUNBUFFERED would also pass to the job's own children and write each print in two pieces).
    for name, stream in (("stdout", sys.stdout), ("stderr", sys.stderr)):
        bare_buffering[name] = (bool(getattr(stream, "line_buffering", False)),
                                bool(getattr(stream, "write_through", False)))
        with contextlib.suppress(AttributeError, ValueError):
            stream.reconfigure(line_buffering=True)  # type: ignore[union-attr]
    parser = argparse.ArgumentParser(prog="tf-device-panel-runtime")
    parser.add_argument("--events-fd", type=int, required=True)
    parser.add_argument("--commands-fd", type=int, required=True)
    parser.add_argument("--script-stdout-fd", type=int, help="a user's script's fd 1, copied byte for byte")
    parser.add_argument("--script-stderr-fd", type=int, help="a user's script's fd 2, copied byte for byte")
    args = parser.parse_args(argv)
    global script_channel, events_fd_at_exit
    events_fd_at_exit = args.events_fd
    if args.script_stdout_fd is not None and args.script_stderr_fd is not None:
        script_channel = (args.script_stdout_fd, args.script_stderr_fd)
    return serve(args.events_fd, args.commands_fd), args.events_fd


# The events pipe, for a script's run, which ends at the interpreter's top level (`run_script`'s `finish`).
events_fd_at_exit: int | None = None
# The pipes a user's script gets as its fds 1 and 2, until they are given to it or closed.
script_channel: tuple[int, int] | None = None


def close_script_channel() -> None:
    """A job that is not a user's script writes nothing there: their end of file comes now."""
    global script_channel
    if script_channel is not None:
        for fd in script_channel:
            with contextlib.suppress(OSError):
                os.close(fd)
        script_channel = None


PR_SET_NAME = 15


def take_ctrl_c_on_a_thread() -> None:
    """Ctrl+C for a built-in job, with SIGINT blocked in every thread: a thread of ours waits for it and raises
    KeyboardInterrupt on the main thread as the signal would (`_thread.interrupt_main`: the handler runs there,
    at its next Python instruction).

    Delivered by the kernel, SIGINT interrupted whichever thread took it in the middle of a system call: the
    main thread inside TensorFlow's C++ (a step of the custom loop, waiting on its executor) or a thread of
    TensorFlow's, and the process died by SIGSEGV in about one cancel in thirty. Through this thread no system
    call of theirs is interrupted. A user's script is not run this way: it gets Ctrl+C as a bare `python` gives
    it (its own handlers, its children's signal mask). Our own child processes unblock SIGINT as they start
    (core.processes)."""
    def wait() -> None:
        _libc.prctl(PR_SET_NAME, b"ctrl-c")  # its name in /proc, where it alone waits for SIGINT
        while True:
            signal.sigwait({signal.SIGINT})
            _thread.interrupt_main(signal.SIGINT)  # nothing once the job is over (SIGINT ignored then)

    threading.Thread(target=wait, name="ctrl-c", daemon=True).start()


def serve(events_fd: int, commands_fd: int) -> int:
    """Warm up, take one command, carry it out; returns the exit status."""
    emit = EventWriter(events_fd)
    # Ctrl+C before the job begins (a job cancelled the moment it was handed over) ends this process by the
    # signal, as it would end a bare one, without a KeyboardInterrupt traceback from inside an import. No thread
    # started from here on takes it from the kernel (TensorFlow's, ours): it waits, blocked, for the job. A
    # built-in job takes it on a thread of ours (take_ctrl_c_on_a_thread); a script's main thread unblocks it, as
    # a bare run has it.
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})

    def fail(stage: str, exc: BaseException, **extra: Any) -> int:
        emit(events.StartupError(**{"stage": stage, "error_type": type(exc).__name__, "message": str(exc), **extra}))
        return EXIT_CONFIG_REJECTED

    def garbled(exc: Exception) -> int:
        emit(events.Error(error_type="ProtocolError", message=str(exc)))
        return EXIT_JOB_FAILED

    commands = Commands(commands_fd)
    try:
        config_json = read_configuration(commands)
    except (ValueError, OSError) as exc:
        return garbled(exc)
    if config_json is None:
        return EXIT_OK  # discarded before it was configured
    try:
        config = DeviceConfig.from_json(config_json)
    except ConfigError as exc:
        return fail("configuration", exc)

    inherited = "tensorflow" in sys.modules  # forked from a zygote that imported it: its heap is shared
    started = time.monotonic()
    try:
        import tensorflow as tf
    except Exception as exc:
        return fail("import tensorflow", exc, **import_failure(exc))
    imported = time.monotonic()
    try:
        steps = apply_config(tf, config)
    except StepError as exc:
        return fail(exc.step, exc.cause, tf_version=tf.__version__)
    info = describe_physical(tf)
    info.update({"applied": steps, "import_s": imported - started, "config": config.to_json()})
    emit(facts_event(events.WARM, info))
    # While the spare waits for its job, and only in a fork (a process started by hand wrote its heap itself). A
    # thread of `_thread`'s, not `threading`'s: a user's script started meanwhile must not find it among its
    # threads (bare, it has one); it ends within ~50 ms.
    if inherited:
        # The maps read here: a script started at once listed the thread's open /proc/self/maps among its fds.
        _thread.start_new_thread(own_the_heap, (heap_spans(),))

    try:
        command = read_command(commands)
    except (ValueError, OSError) as exc:
        return garbled(exc)
    if command is None:
        return EXIT_OK
    os.close(commands_fd)
    kind, job_id = command.cmd, command.job_id
    if kind not in ("run", "describe"):
        emit(events.Error(error_type="ProtocolError", message=f"unknown command {kind!r}"))
        return EXIT_JOB_FAILED
    run = None
    if kind == "run":
        run = Run(emit, config, str(job_id), command.job, command.params)
        signal.signal(signal.SIGINT, run.interrupted)
    if command.after_pid is not None:
        after_pid = command.after_pid
        wait_for_exit(after_pid, lambda: emit(events.Log(
            stream="panel", kind="warning", job_id=job_id,
            text=f"waiting for the previous run's process (pid {after_pid}) to exit")))
    if run is not None and run.name == "script":
        try:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})  # a Ctrl+C that came meanwhile: taken now
        except KeyboardInterrupt:
            return -signal.SIGINT  # cancelled before the script began: ended by the signal
        return run_script(tf, run, info)
    close_script_channel()
    initializing = time.monotonic()
    # TensorFlow's thread pools start as it initializes, with SIGINT blocked, as this thread has it.
    try:
        info["logical"] = describe_logical(tf, config)
    except Exception as exc:
        return fail("initialize runtime", exc, tf_version=tf.__version__)
    memory: MemoryReporter | None = None
    try:
        take_ctrl_c_on_a_thread()  # a Ctrl+C that came meanwhile is taken now
        info["init_s"] = time.monotonic() - initializing
        emit(facts_event(events.READY, info, job_id))
        if run is None:
            return EXIT_OK
        run.devices = runtime_devices(info, config)
        memory = MemoryReporter(tf, allocator_devices(info["logical"], config), emit, str(job_id))
        memory.start()
        run.at_end.append(memory.sample)  # the run's final peak, whatever its length
        return run.execute()  # from the job's start, its own handling takes a Ctrl+C
    except KeyboardInterrupt:
        return -signal.SIGINT  # cancelled before the job began: ended by the signal
    finally:
        if memory is not None:
            memory.stopped.set()


def run_script(tf: Any, run: Run, info: RuntimeFacts) -> int:
    """A user's script gets TensorFlow imported and configured but not initialized, as if its own first lines
    had made the profile's `tf.config` calls: its own calls then work as they do bare. The logical devices go
    out (`ready`) and memory reporting starts when the script first initializes TensorFlow, never before; if
    it never does, there is no `ready`. From here on the panel makes no `tf.config` or `tf.debugging` call."""
    memory: list[MemoryReporter] = []

    def initialized() -> None:
        try:
            info["logical"] = describe_logical(tf, run.config)  # initialized already: this only reads
            run.emit(facts_event(events.READY, info, run.context.job_id))
            memory.append(MemoryReporter(tf, allocator_devices(info["logical"], run.config), run.emit,
                                         run.context.job_id))
            memory[0].start()
            run.at_end.append(memory[0].sample)
        except Exception as exc:
            run.emit(events.Log(stream="panel", kind="warning", job_id=run.context.job_id,
                                text=f"could not list the logical devices: {type(exc).__name__}: {exc}"))

    script = load_script_job()
    script.watch_initialization(initialized)
    script.watch_device_scopes(run.context)
    script.watch_placement_logging(run.context, events_fd_at_exit)
    user_environment()
    global script_channel
    if script_channel is not None:
        script.give_script_its_fds(*script_channel, placement_is_the_panels=run.config.log_placement)
        script_channel = None

    def stop_memory() -> None:
        for reporter in memory:
            reporter.stopped.set()

    run.begin()
    try:
        prepared = script.prepare(**JOBS["script"].resolve(run.params))
    except BaseException as exc:
        refusal = exc

        def refused() -> None:
            raise refusal

        try:
            return run.conclude(refused)
        finally:
            stop_memory()

    run_pid = os.getpid()

    def finish(outcome: Callable[[], Any]) -> None:
        """After the script's module code, at the interpreter's top level: the run's end, then the process's.
        A child the script forked that ran on to the end of the script ends as a bare one would, telling the
        panel nothing (its `outcome` is then `forked_outcome`'s, which touches nothing of the run's)."""
        if os.getpid() != run_pid:
            try:
                outcome()
                status = 0
            except ScriptExit as exc:
                status = exc.code
            except BaseException:
                status = -signal.SIGINT
            exit_with(status, None)
        try:
            status = run.conclude(outcome)
        finally:
            stop_memory()
        exit_with(status, events_fd_at_exit)

    script.hand_over(run.context, prepared, finish)  # leaves for the interpreter's top level: never returns
    return EXIT_JOB_FAILED


def user_environment() -> None:
    """The environment a bare run of the script would see: the panel's own variables gone, those it set for
    TensorFlow's import (the C++ log level, read only then) back to the user's values. The profile's own
    (CUDA_DEVICE_ORDER, TF_GPU_ALLOCATOR, ...) stay, as the snippet's prelude would set them."""
    try:
        saved = json.loads(os.environ.pop(USER_ENVIRONMENT_ENV, "{}"))
    except json.JSONDecodeError:
        saved = {}
    for name, value in saved.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    for name in ("TF_DEVICE_PANEL_PASS_FDS", "TF_DEVICE_PANEL_PARENT_PID"):
        os.environ.pop(name, None)


def exit_with(status: int, events_fd: int | None) -> None:
    """Leave as the interpreter does at exit, as far as a job can tell: wait for its non-daemon threads, run
    its atexit handlers, flush every buffer (C stdio too: TensorFlow's stdout copies of placer lines), then
    exit with `status`; a negative status ends the process by that signal, as Python does after an uncaught
    KeyboardInterrupt. A script's `__main__` globals are cleared as finalization clears them (their `__del__`
    runs); what is skipped is the rest of the interpreter's teardown (TensorFlow's modules), which took 1.5 s
    after every run: what that teardown would print is missing (docs/runs.md, "What differs").

    Last, the status goes out as an `exiting` event and the pipes are closed: the client has the whole run
    (every byte, every event, the status) at end of file, without waiting for the kernel to tear down
    TensorFlow's address space (30–100 ms); it still waits for that before it calls the process gone."""
    shutdown_threads = getattr(threading, "_shutdown", None)
    if shutdown_threads is not None:
        shutdown_threads()
    atexit._run_exitfuncs()
    if script_job is not None:
        script_job.clear_main()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    _libc.fflush(None)
    if events_fd is not None:
        with contextlib.suppress(OSError):
            EventWriter(events_fd)(events.Exiting(status=status))
        close_script_channel()
        script_fds = script_job.script_pipes if script_job is not None else ()
        for fd in (events_fd, 1, 2, *script_fds):
            with contextlib.suppress(OSError):
                os.close(fd)
    if status < 0:
        signal.signal(-status, signal.SIG_DFL)
        # To this thread, unblocked (a built-in job's run blocks SIGINT; its waiting thread would take it)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {-status})
        signal.pthread_kill(threading.get_ident(), -status)
    os._exit(status & 0xFF)


if __name__ == "__main__":
    exit_with(*main())
