"""The runtime process: applies a device configuration before TensorFlow initializes, then runs jobs.

Started by `core.runtime.RuntimeProcess` as `python -m core.runtime_main --events-fd N --commands-fd M
--config JSON`. Events go to the events pipe as JSON lines (TensorFlow's C++ code writes to fds 1 and
2, never there). Commands arrive as JSON lines; end of file on the commands pipe means the client is
gone, and the process exits at once so it never outlives its client.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import os
import platform
import sys
import threading
import time
import traceback
from typing import Any

from tf_device_panel.core import events
from tf_device_panel.core.config import ConfigError, DeviceConfig, gpu_total_mib
from tf_device_panel.core.jobs import JOBS, ParamError
from tf_device_panel.core.jobs.context import JobCancelled, JobContext, JobError
from tf_device_panel.core.placement import short_device_name
from tf_device_panel.core.streams import FENCE_PREFIX

EXIT_CONFIG_REJECTED = 3
EXIT_CLIENT_GONE = 4
CANCEL_INTERRUPT_AFTER_S = 1.0
MEMORY_REPORT_S = 0.5
MIB = 1024 * 1024

_libc = ctypes.CDLL(None)


class EventWriter:
    def __init__(self, fd: int):
        self._fd = fd
        self._lock = threading.Lock()

    def __call__(self, event: events.Event) -> None:
        data = event.encode()
        with self._lock:
            view = memoryview(data)
            while view:
                written = os.write(self._fd, view)
                view = view[written:]


def fence(tag: str) -> None:
    """Mark both output streams so the client knows every earlier line of `tag` has arrived."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    _libc.fflush(None)  # C and C++ stdio buffers, where TF's stdout copies of placer lines wait
    marker = f"{FENCE_PREFIX}{tag}\n".encode()
    for fd in (1, 2):
        with contextlib.suppress(OSError):
            os.write(fd, marker)


def apply_config(tf: Any, config: DeviceConfig) -> list[str]:
    """Call the tf.config setters in TensorFlow's required order; returns what was done, step by step.

    Raises ConfigStepError naming the step and carrying TensorFlow's own message.
    """
    done: list[str] = []
    fraction_limits.clear()
    gpus = tf.config.list_physical_devices("GPU")
    cpus = tf.config.list_physical_devices("CPU")

    def step(description: str, action: Any) -> None:
        try:
            action()
        except (RuntimeError, ValueError, IndexError, TypeError) as exc:
            raise ConfigStepError(description, exc) from exc
        done.append(description)

    missing = [i for i in (config.visible_gpus or ()) if i >= len(gpus)]
    missing += [i for i in config.virtual_gpus if i >= len(gpus) and i not in missing]
    if missing:
        raise ConfigStepError(
            "check GPU indices",
            IndexError(f"GPU {', '.join(map(str, sorted(missing)))} requested, but TensorFlow sees "
                       f"{len(gpus)} physical GPU(s)"))
    if config.visible_gpus is not None:
        chosen = [gpus[i] for i in config.visible_gpus]
        step(f"set_visible_devices(GPU {list(config.visible_gpus)})",
             lambda: tf.config.set_visible_devices(chosen, "GPU"))
    visible = tf.config.get_visible_devices("GPU")
    if config.memory_growth:
        for gpu in visible:
            step(f"set_memory_growth({gpu.name}, True)",
                 lambda gpu=gpu: tf.config.experimental.set_memory_growth(gpu, True))
    for index, limits in sorted(config.virtual_gpus.items()):
        logical = [tf.config.LogicalDeviceConfiguration(memory_limit=m) for m in limits]
        step(f"set_logical_device_configuration(GPU:{index}, {list(limits)} MiB)",
             lambda index=index, logical=logical: tf.config.set_logical_device_configuration(gpus[index], logical))
    if config.memory_fraction is not None:
        fraction = config.memory_fraction
        for gpu in visible:
            index = gpus.index(gpu)
            try:
                total = gpu_total_mib(index)
            except (OSError, RuntimeError, AttributeError) as exc:
                raise ConfigStepError(f"read GPU:{index}'s total memory for memory_fraction", exc) from exc
            limit = int(total * fraction)
            fraction_limits.append(limit)
            step(f"set_logical_device_configuration(GPU:{index}, [{limit}] MiB = {fraction:g} × {total} MiB)",
                 lambda gpu=gpu, limit=limit: tf.config.set_logical_device_configuration(
                     gpu, [tf.config.LogicalDeviceConfiguration(memory_limit=limit)]))
    if config.cpu_devices > 1:
        step(f"set_logical_device_configuration(CPU:0, {config.cpu_devices} logical CPUs)",
             lambda: tf.config.set_logical_device_configuration(
                 cpus[0], [tf.config.LogicalDeviceConfiguration()] * config.cpu_devices))
    step(f"set_soft_device_placement({config.soft_placement})",
         lambda: tf.config.set_soft_device_placement(config.soft_placement))
    if config.log_placement:
        # After initialization this call silently does nothing, so it must come before.
        step("set_log_device_placement(True)", lambda: tf.debugging.set_log_device_placement(True))
    return done


fraction_limits: list[int] = []  # the MiB limits memory_fraction gave each visible GPU, in order


class ConfigStepError(Exception):
    def __init__(self, step: str, cause: BaseException):
        self.step = step
        self.cause = cause
        super().__init__(f"{step}: {type(cause).__name__}: {cause}")


def describe_devices(tf: Any, config: DeviceConfig) -> dict[str, Any]:
    physical = []
    counters: dict[str, int] = {}
    visible = {d.name for d in tf.config.get_visible_devices()}
    for device in tf.config.list_physical_devices():
        index = counters.get(device.device_type, 0)
        counters[device.device_type] = index + 1
        entry: dict[str, Any] = {"name": device.name, "device_type": device.device_type, "index": index,
                                 "visible": device.name in visible}
        if device.device_type == "GPU":
            try:
                details = tf.config.experimental.get_device_details(device)
            except Exception:  # details are a nicety; a failure must not stop the runtime
                details = {}
            entry["device_name"] = details.get("device_name", "")
            capability = details.get("compute_capability")
            entry["compute_capability"] = ".".join(map(str, capability)) if capability else None
        physical.append(entry)

    logical = []
    gpu_limits = [m for _, limits in sorted(config.virtual_gpus.items()) for m in limits] or list(fraction_limits)
    for device in tf.config.list_logical_devices():  # this initializes the runtime
        short = short_device_name(device.name)
        entry = {"name": f"/job:localhost/replica:0/task:0{device.name}", "short_name": short,
                 "device_type": device.device_type}
        logical.append(entry)
    split_gpus = [d for d in logical if d["device_type"] == "GPU"]
    if gpu_limits and len(gpu_limits) == len(split_gpus):
        for device, limit in zip(split_gpus, gpu_limits, strict=False):
            device["memory_limit_mib"] = limit

    try:
        build = {k: v for k, v in tf.sysconfig.get_build_info().items() if isinstance(v, (str, bool, list))}
    except Exception:
        build = {}
    return {
        "tf_version": tf.__version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "build": build,
        "physical": physical,
        "logical": logical,
        "pid": os.getpid(),
    }


class Runtime:
    def __init__(self, emit: EventWriter, commands_fd: int, tf: Any = None, gpus: list[str] | None = None,
                 config: DeviceConfig | None = None):
        self.emit = emit
        self.config = config or DeviceConfig()
        self.commands = os.fdopen(commands_fd, "rb", buffering=0)
        self.job_thread: threading.Thread | None = None
        self.job_context: JobContext | None = None
        self.tf = tf
        self.gpus = gpus or []
        if tf is not None and self.gpus:
            threading.Thread(target=self.report_memory, name="tf-memory", daemon=True).start()

    def report_memory(self) -> None:
        """While a job runs, TensorFlow's allocator figures (current, peak) for each logical GPU."""
        while True:
            time.sleep(MEMORY_REPORT_S)
            context = self.job_context
            if context is None:
                continue
            for name in self.gpus:
                try:
                    info = self.tf.config.experimental.get_memory_info(name)
                except Exception:  # a device without allocator stats is simply not reported
                    continue
                figures: events.TfMemoryData = {"device": f"/{name}", "current_mib": info["current"] / MIB,
                                                "peak_mib": info["peak"] / MIB}
                self.emit(events.Event(events.TF_MEMORY, dict(figures), job_id=context.job_id))

    def serve(self) -> int:
        buffer = b""
        while True:
            chunk = self.commands.read(65536)
            if not chunk:
                return EXIT_CLIENT_GONE
            buffer += chunk
            while b"\n" in buffer:
                line, buffer = buffer.split(b"\n", 1)
                if not line.strip():
                    continue
                try:
                    command = json.loads(line)
                except json.JSONDecodeError:
                    self.emit(events.Event(events.ERROR, {"type": "ProtocolError",
                                                          "message": f"bad command {line[:200]!r}"}))
                    continue
                if command.get("cmd") == "stop":
                    self.cancel_running()
                    if self.job_thread is not None:
                        self.job_thread.join(timeout=float(command.get("grace", 5.0)))
                    return 0
                self.handle(command)

    def handle(self, command: dict[str, Any]) -> None:
        kind = command.get("cmd")
        if kind == "run":
            self.start_job(str(command.get("job_id")), str(command.get("job")), command.get("params") or {})
        elif kind == "cancel":
            if self.job_context is not None and self.job_context.job_id == command.get("job_id"):
                self.cancel_running()
        else:
            self.emit(events.Event(events.ERROR, {"type": "ProtocolError", "message": f"unknown command {kind!r}"}))

    def cancel_running(self) -> None:
        context, thread = self.job_context, self.job_thread
        if context is None or thread is None or not thread.is_alive():
            return
        context.cancel_requested.set()

        # Code that never checks the flag (a user's script) gets JobCancelled raised in it.
        timer = threading.Timer(CANCEL_INTERRUPT_AFTER_S, context.interrupt)
        timer.daemon = True
        timer.start()

    def start_job(self, job_id: str, name: str, params: dict[str, Any]) -> None:
        if self.job_context is not None:
            # Every job the client submits gets its closing events, or the client would wait forever.
            busy: events.ErrorData = {"type": "Busy", "message": "a job is already running"}
            finished: events.JobFinishedData = {"job": name, "status": "error", "duration_s": 0.0}
            self.emit(events.Event(events.ERROR, dict(busy), job_id=job_id))
            self.emit(events.Event(events.JOB_FINISHED, dict(finished), job_id=job_id))
            return
        if self.job_thread is not None:
            self.job_thread.join(5.0)  # the last job has reported; its thread is only returning
        context = JobContext(job_id, self.emit, self.config)
        self.job_context = context
        self.job_thread = threading.Thread(target=self.run_job, args=(context, name, params),
                                           name=f"job-{job_id}", daemon=True)
        self.job_thread.start()

    def run_job(self, context: JobContext, name: str, params: dict[str, Any]) -> None:
        started = time.monotonic()
        job_id = context.job_id
        status, result = "ok", None
        error: events.ErrorData | None = None
        job_started: events.JobStartedData = {"job": name, "params": params}
        self.emit(events.Event(events.JOB_STARTED, dict(job_started), job_id=job_id))
        try:
            spec = JOBS.get(name)
            if spec is None:
                raise JobError(f"unknown job {name!r}")
            resolved = spec.resolve(params)
            result = spec.function()(context, **resolved)
        except JobCancelled as exc:
            status, error = "cancelled", {"type": "Cancelled", "message": str(exc) or "cancelled"}
        except (JobError, ParamError) as exc:
            status, error = "error", {"type": type(exc).__name__, "message": str(exc)}
        except BaseException as exc:  # a job's failure is reported, never fatal to the runtime
            status = "error"
            error = {"type": type(exc).__name__, "message": str(exc).strip() or type(exc).__name__,
                     "traceback": traceback.format_exc(limit=-8)}
        context.finish()
        fence(job_id)
        duration = time.monotonic() - started
        # Free before the client hears JOB_FINISHED: it may submit the next job at once.
        self.job_context = None
        if error is not None:
            self.emit(events.Event(events.ERROR, dict(error), job_id=job_id))
        else:
            finished_with: events.ResultData = {"result": result}
            self.emit(events.Event(events.RESULT, dict(finished_with), job_id=job_id))
        finished: events.JobFinishedData = {"job": name, "status": status, "duration_s": duration}
        self.emit(events.Event(events.JOB_FINISHED, dict(finished), job_id=job_id))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tf-device-panel-runtime")
    parser.add_argument("--events-fd", type=int, required=True)
    parser.add_argument("--commands-fd", type=int, required=True)
    parser.add_argument("--config", required=True, help="the device configuration as JSON")
    args = parser.parse_args(argv)
    emit = EventWriter(args.events_fd)

    def fail(stage: str, exc: BaseException, **extra: Any) -> int:
        fence("startup")
        emit(events.Event(events.STARTUP_ERROR, {"stage": stage, "type": type(exc).__name__,
                                                 "message": str(exc), **extra}))
        return EXIT_CONFIG_REJECTED

    try:
        config = DeviceConfig.from_json(json.loads(args.config))
    except (ConfigError, json.JSONDecodeError) as exc:
        return fail("configuration", exc)

    started = time.monotonic()
    try:
        import tensorflow as tf
    except BaseException as exc:
        return fail("import tensorflow", exc)
    imported = time.monotonic()
    try:
        steps = apply_config(tf, config)
    except ConfigStepError as exc:
        return fail(exc.step, exc.cause, tf_version=tf.__version__)
    try:
        devices = describe_devices(tf, config)
    except Exception as exc:
        return fail("initialize runtime", exc, tf_version=tf.__version__)
    devices["applied"] = steps
    devices["import_s"] = imported - started
    devices["init_s"] = time.monotonic() - imported
    devices["config"] = config.to_json()
    fence("ready")
    emit(events.Event(events.READY, devices))
    gpus = [d["short_name"].lstrip("/") for d in devices["logical"] if d["device_type"] == "GPU"]
    return Runtime(emit, args.commands_fd, tf, gpus, config).serve()


if __name__ == "__main__":
    code = main()
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    _libc.fflush(None)
    os._exit(code)  # skip TensorFlow's slow, sometimes hanging, interpreter teardown
