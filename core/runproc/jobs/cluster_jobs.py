"""Multi-worker and parameter-server training on a local cluster of processes bound to 127.0.0.1."""

from __future__ import annotations

import json
import resource
import signal
import time
from pathlib import Path
from typing import Any

from tf_device_panel.core.catalogue.cluster_layout import tf_config
from tf_device_panel.core.catalogue.jobs import JobError
from tf_device_panel.core.config import DeviceConfig
from tf_device_panel.core.protocol import events, output_lines
from tf_device_panel.core.results import ClusterResult
from tf_device_panel.core.runproc.cluster import LocalCluster, Task, TaskFailed, devices_by_task, free_ports
from tf_device_panel.core.runproc.jobs.context import JobCancelled, JobContext

HOST = "127.0.0.1"


def _forwarder(ctx: JobContext) -> Any:
    """Turn a task's output line into a placement or log event tagged with the task."""

    def forward(task: Task, stream: str, line: str) -> None:
        kind, placed = output_lines.parse_line(line, stream)
        if placed is not None:
            ctx.emit(events.Placement.of(placed, stream=stream, line=f"[{task.name}] {line}", task=task.name))
        elif kind != output_lines.PLACEMENT:  # stdout echoes of placer lines are not shown twice
            source = output_lines.TENSORFLOW if output_lines.is_tensorflow_log(line) else None
            ctx.emit(events.Log(stream=stream, kind=kind, text=f"[{task.name}] {line}", task=task.name, source=source))

    return forward


def task_device_config(runtime_config: DeviceConfig, runtime_gpus: int,
                       log_placement: bool) -> tuple[DeviceConfig, str]:
    """The device configuration every task applies, and a note for the result saying what it is.

    The tasks share this machine's GPUs with the runtime. A runtime whose configuration has neither
    memory growth nor memory limits took nearly all GPU memory when it started, so the tasks would fail
    to allocate: they run on the CPU then, and the note says how to give them the GPUs.
    """
    config = runtime_config.with_changes(log_placement=log_placement)
    note = "each task applies the runtime's device configuration before TensorFlow initializes"
    if runtime_gpus and not config.memory_growth and not config.virtual_gpus:
        config = config.with_changes(visible_gpus=[])
        note += ("; the tasks run on the CPU, because this runtime holds nearly all GPU memory (its "
                 "configuration has neither memory growth nor memory limits): turn on memory growth, or "
                 "give the GPUs limits, and Apply, to train the cluster on the GPUs")
    return config, note


def _runtime_gpus() -> int:
    import tensorflow as tf

    return len(tf.config.get_visible_devices("GPU"))


def _device_args(config: DeviceConfig) -> list[str]:
    return ["--device-config", json.dumps(config.to_json())]


CRASH_SIGNALS = {-signal.SIGSEGV, -signal.SIGABRT, -signal.SIGBUS, -signal.SIGILL, -signal.SIGFPE}
FAULT_LINES = 16  # of Python's fault-handler report, quoted in the error


def core_dump_note() -> str:
    """Whether the crashed task could leave a core dump, and where (the tasks inherit this process's limit)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_CORE)
    if soft == 0:
        return "no core dump was written (core size limit 0: run `ulimit -c unlimited` before starting to get one)"
    try:
        pattern = Path("/proc/sys/kernel/core_pattern").read_text().strip()
    except OSError:
        pattern = "unknown"
    return f"a core dump may have been written (kernel.core_pattern: {pattern})"


def crash_report(task: Task) -> str:
    """What is known of a task killed by a crash signal: where it crashed, from Python's fault handler."""
    lines = list(task.last_lines)
    start = next((i for i, line in enumerate(lines) if "Fatal Python error" in line), None)
    if start is None:
        return f"\n{core_dump_note()}"
    fault = lines[start:start + FAULT_LINES]
    # The handler marks the crashing thread "Current thread" only when it is a Python thread.
    current = next((i for i, line in enumerate(fault) if line.startswith("Current thread")), None)
    frame = fault[current + 1].strip() if current is not None and current + 1 < len(fault) else ""
    if current is None:
        where = ("in a thread Python does not run (one of TensorFlow's C++ or gRPC threads), so not in this "
                 "panel's code")
    elif not frame or "<no Python frame>" in frame:
        where = "in native code (TensorFlow's C++ runtime or gRPC), with no Python frame on that thread"
    else:
        where = f"in a Python thread at {frame} (inside what that line called)"
    return (f"\n{task.name} crashed {where}. Python's fault handler reported:\n" + "\n".join(fault)
            + f"\n{core_dump_note()}. A crash like this in TensorFlow's distributed runtime is usually "
              "intermittent: run the job again; if it repeats, report it to TensorFlow with the lines above.")


def _run_cluster(ctx: JobContext, cluster: LocalCluster, waited: list[Task], watched: list[Task],
                 timeout_s: int, what: str) -> None:
    try:
        cluster.wait(waited, timeout_s, ctx.cancel_requested.is_set, watch=watched)
    except TaskFailed as exc:
        code = exc.task.process.poll() if exc.task.process is not None else None
        report = crash_report(exc.task) if code in CRASH_SIGNALS else ""
        raise JobError(f"{what} failed: {exc}{report}") from None
    except TimeoutError as exc:
        raise JobError(f"{what} timed out: {exc}. Raise timeout_s on a slow machine.") from None
    if ctx.cancel_requested.is_set():
        raise JobCancelled("cancelled by the user; every cluster process was stopped")


def multi_worker(ctx: JobContext, workers: int = 2, steps: int = 10, batch_per_replica: int = 5,
                 learning_rate: float = 0.1, log_placement: bool = True, timeout_s: int = 180) -> ClusterResult:
    addresses = [f"{HOST}:{port}" for port in free_ports(workers)]
    cluster_spec = {"worker": addresses}
    config, config_note = task_device_config(ctx.device_config, _runtime_gpus(), log_placement)
    args = ["--steps", str(steps), "--batch-per-replica", str(batch_per_replica),
            "--learning-rate", str(learning_rate), *_device_args(config)]
    started = time.monotonic()
    ctx.progress(0, 2, f"starting {workers} workers on {', '.join(addresses)}")
    print(f"MultiWorkerMirroredStrategy: {workers} worker processes on {', '.join(addresses)}", flush=True)
    with LocalCluster(_forwarder(ctx)) as cluster:
        print(f"isolation: {cluster.isolation}\ndevices: {config_note}", flush=True)
        tasks = [cluster.start(f"worker:{i}", "mwms-worker", tf_config(cluster_spec, "worker", i), args)
                 for i in range(workers)]
        ctx.progress(1, 2, "training (each worker imports TensorFlow and joins the cluster)", force=True)
        _run_cluster(ctx, cluster, tasks, [], timeout_s, "multi-worker training")
        isolation = cluster.isolation
    missing = [t.name for t in tasks if not t.results]
    if missing:
        raise JobError(f"{', '.join(missing)} finished without reporting a result")
    per_worker = {t.name: t.results[-1] for t in tasks}
    losses = {name: r["losses"] for name, r in per_worker.items()}
    reference = next(iter(losses.values()))
    agree = all(len(v) == len(reference) and all(abs(a - b) < 1e-5 for a, b in zip(v, reference, strict=True))
                for v in losses.values())
    first = next(iter(per_worker.values()))
    ctx.progress(2, 2, "done", force=True)
    return {
        "kind": "cluster",
        "strategy": "MultiWorkerMirroredStrategy",
        "addresses": cluster_spec,
        "isolation": isolation,
        "workers": workers,
        "replicas_in_sync": first["replicas_in_sync"],
        "global_batch_size": first["global_batch_size"],
        "losses": losses,
        "loss": reference,
        "losses_agree": agree,
        "timings": {name: {"connect_s": r["connect_s"], "train_s": r["train_s"]} for name, r in per_worker.items()},
        "device_config": {"config": config.to_json(), "note": config_note},
        "task_devices": {name: r["devices"]["logical"] for name, r in per_worker.items()},
        "wall_s": time.monotonic() - started,
    }


def parameter_server(ctx: JobContext, workers: int = 2, steps: int = 20, batch_per_replica: int = 5,
                     learning_rate: float = 0.1, log_placement: bool = False,
                     timeout_s: int = 180) -> ClusterResult:
    ports = free_ports(workers + 2)
    cluster_spec = {"chief": [f"{HOST}:{ports[0]}"], "ps": [f"{HOST}:{ports[1]}"],
                    "worker": [f"{HOST}:{port}" for port in ports[2:]]}
    config, config_note = task_device_config(ctx.device_config, _runtime_gpus(), log_placement)
    device_args = _device_args(config)
    started = time.monotonic()
    ctx.progress(0, 2, "starting 1 parameter server, "
                       f"{workers} workers and a coordinator on {HOST}")
    print("ParameterServerStrategy cluster: " + "; ".join(f"{k} {', '.join(v)}" for k, v in cluster_spec.items()),
          flush=True)
    with LocalCluster(_forwarder(ctx)) as cluster:
        print(f"isolation: {cluster.isolation}\ndevices: {config_note}", flush=True)
        servers = [cluster.start("ps:0", "server", tf_config(cluster_spec, "ps", 0), device_args)]
        servers += [cluster.start(f"worker:{i}", "server", tf_config(cluster_spec, "worker", i), device_args)
                    for i in range(workers)]
        coordinator = cluster.start("chief:0", "ps-coordinator", tf_config(cluster_spec, "chief", 0),
                                    ["--steps", str(steps), "--batch-per-replica", str(batch_per_replica),
                                     "--learning-rate", str(learning_rate), *device_args])
        ctx.progress(1, 2, "training through ClusterCoordinator", force=True)
        # Servers never exit by themselves: one that does has died, and that ends the run.
        _run_cluster(ctx, cluster, [coordinator], servers, timeout_s, "parameter-server training")
        isolation = cluster.isolation
    if not coordinator.results:
        raise JobError("the coordinator finished without reporting a result")
    result = coordinator.results[-1]
    ctx.progress(2, 2, "done", force=True)
    return {
        "kind": "cluster",
        "strategy": "ParameterServerStrategy",
        "addresses": cluster_spec,
        "isolation": isolation,
        "workers": workers,
        "variables": result["variables"],
        "values": result["values"],
        "loss": result["losses"],
        "steps": result["steps"],
        "steps_per_s": result["steps_per_s"],
        "timings": {"coordinator": {"connect_s": result["connect_s"], "train_s": result["train_s"]}},
        "device_config": {"config": config.to_json(), "note": config_note},
        "task_devices": devices_by_task(result["devices"]["cluster"]),  # as the coordinator sees them
        "wall_s": time.monotonic() - started,
    }
