"""The seed examples as jobs, with real TensorFlow on logical CPUs and real cluster processes."""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path

import psutil
import pytest
from helpers import collect_job, events_until, of_type, progress_at_least, wait_until
from tf_device_panel.core.catalogue import JOBS, ParamError
from tf_device_panel.core.catalogue.cluster_layout import TASK_MODULE, cluster_commands
from tf_device_panel.core.client.runtime import RuntimeProcess
from tf_device_panel.core.protocol import events


def result_of(seen: list) -> dict:
    results = of_type(seen, events.RESULT)
    assert results, f"no result; errors: {of_type(seen, events.ERROR)}"
    return results[0].result


def error_of(seen: list) -> events.Error:
    (error,) = of_type(seen, events.ERROR)
    return error


def cluster_processes(runtime: RuntimeProcess) -> list[psutil.Process]:
    """The cluster tasks still running below this test (the run's process may have exited by now)."""
    found = []
    for child in psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.NoSuchProcess):  # it ended while we looked
            if TASK_MODULE in " ".join(child.cmdline()) and child.status() != psutil.STATUS_ZOMBIE:
                found.append(child)
    return found


def listening_ports(processes: list[psutil.Process]) -> set[int]:
    """TCP ports the processes' network namespaces listen on (psutil only sees this process's namespace)."""
    ports = set()
    for process in processes:
        for table in ("tcp", "tcp6"):
            try:
                lines = Path(f"/proc/{process.pid}/net/{table}").read_text().splitlines()[1:]
            except OSError:
                continue
            ports |= {int(f[1].rsplit(":", 1)[1], 16) for f in (line.split() for line in lines) if f[3] == "0A"}
    return ports


def assert_port_free(port: int) -> None:
    import socket

    with socket.socket() as sock:
        # SO_REUSEADDR: connections in TIME_WAIT do not count, a socket still listening does
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", port))


def test_custom_loop_loss_decreases_and_global_batch_scales(three_cpus: RuntimeProcess) -> None:
    seen = collect_job(three_cpus, three_cpus.submit("custom-loop", {"steps": 6, "batch_per_replica": 4}))
    result = result_of(seen)
    assert result["replicas_in_sync"] == 3 and result["global_batch_size"] == 12
    assert len(result["loss"]) == 6 and result["loss"][-1] < result["loss"][0]
    assert [m.step for m in of_type(seen, events.METRIC)] == list(range(1, 7))
    # the distributed step ran on every replica
    assert {"/CPU:0", "/CPU:1", "/CPU:2"} <= {e.short_device for e in of_type(seen, events.PLACEMENT)}


def test_fit_with_the_seed_cnn(three_cpus: RuntimeProcess) -> None:
    params = {"model": "cnn", "image_size": 16, "samples": 24, "epochs": 1, "devices": "/CPU:0,/CPU:1"}
    result = result_of(collect_job(three_cpus, three_cpus.submit("fit", params)))
    assert result["model"] == "cnn" and result["replicas_in_sync"] == 2 and result["global_batch_size"] == 10
    assert result["parameters"] > 10_000 and len(result["loss"]) == 1


def test_memory_steps_on_a_logical_cpu(three_cpus: RuntimeProcess) -> None:
    seen = collect_job(three_cpus, three_cpus.submit("memory", {"device": "/CPU:1", "step_mib": 8, "steps": 3}))
    result = result_of(seen)
    assert result["short_device"] == "/CPU:1"
    assert [r["label"] for r in result["rows"]] == ["before", "allocated", "allocated", "allocated", "released"]
    assert [r["allocated_mib"] for r in result["rows"]] == [0, 8, 16, 24, 0]
    assert all(r["rss_mib"] > 0 for r in result["rows"])
    assert len([m for m in of_type(seen, events.METRIC) if m.name == "memory"]) == 5


def test_memory_on_a_device_that_does_not_exist_is_refused(three_cpus: RuntimeProcess) -> None:
    error = error_of(collect_job(three_cpus, three_cpus.submit("memory", {"device": "/GPU:0", "steps": 1})))
    assert "'/GPU:0' is not among this run's devices" in error.message and "/CPU:2" in error.message


def test_benchmark_has_a_row_per_device_size_and_dtype(three_cpus: RuntimeProcess) -> None:
    params = {"sizes": "32,64", "dtypes": "float32,bfloat16", "repeats": 2, "devices": "/CPU:0,/CPU:2"}
    result = result_of(collect_job(three_cpus, three_cpus.submit("benchmark", params)))
    tf_rows = {(r["device"], r["dtype"], r["size"]) for r in result["rows"] if r["device"] != "NumPy (CPU)"}
    assert tf_rows == {(d, t, s) for d in ("/CPU:0", "/CPU:2") for t in ("float32", "bfloat16") for s in (32, 64)}
    numpy_rows = [r for r in result["rows"] if r["device"] == "NumPy (CPU)"]
    assert [r["size"] for r in numpy_rows] == [32, 64]
    assert all(r["gflops"] is None or r["gflops"] > 0 for r in result["rows"])


@pytest.mark.parametrize(("job", "params", "problem"), [
    ("multi-worker", {"workers": 0}, "workers"),
    ("benchmark", {"sizes": "0,abc"}, "sizes"),
    ("benchmark", {"dtypes": "float8"}, "dtypes"),
    ("memory", {"step_mib": -1}, "step_mib"),
])
def test_parameters_are_validated_before_the_job_starts(job: str, params: dict, problem: str) -> None:
    with pytest.raises(ParamError) as caught:
        JOBS[job].resolve(params)
    assert [name for name, _ in caught.value.problems] == [problem]


def test_cancelling_a_benchmark(three_cpus: RuntimeProcess) -> None:
    job_id = three_cpus.submit("benchmark", {"sizes": "512,1024,2048", "repeats": 50})
    seen = events_until(three_cpus, progress_at_least(1), timeout=60)  # measuring, between two checks of the flag
    three_cpus.cancel(grace=20)
    seen += collect_job(three_cpus, job_id)
    assert of_type(seen, events.JOB_FINISHED)[0].status == "cancelled"
    assert three_cpus.wait_exited(30)  # cancelled cleanly: its process ended by itself


@pytest.mark.slow
def test_multi_worker_losses_agree_and_nothing_is_left(three_cpus: RuntimeProcess) -> None:
    seen = collect_job(three_cpus, three_cpus.submit("multi-worker", {"workers": 2, "steps": 4}), timeout=240)
    result = result_of(seen)
    assert result["workers"] == 2 and result["replicas_in_sync"] == 2 and result["losses_agree"]
    assert set(result["losses"]) == {"worker:0", "worker:1"} and len(result["loss"]) == 4
    assert result["loss"][-1] < result["loss"][0]
    assert all(a.startswith("127.0.0.1:") for a in result["addresses"]["worker"])
    assert result["isolation"].startswith("private network namespace") or "could not be made" in result["isolation"]
    tagged = {e.task for e in of_type(seen, events.PLACEMENT)}
    assert {"worker:0", "worker:1"} <= tagged
    devices = {e.short_device for e in of_type(seen, events.PLACEMENT)}
    assert {"/job:worker/task:0/CPU:0", "/job:worker/task:1/CPU:0"} <= devices
    # every worker applied the runtime's configuration (3 logical CPUs) before TensorFlow initialized
    assert result["device_config"]["config"]["cpu_devices"] == 3
    for task, logical in result["task_devices"].items():
        assert [d.rsplit("/", 1)[1] for d in logical if "CPU" in d] == ["device:CPU:0", "device:CPU:1",
                                                                        "device:CPU:2"], task
    assert cluster_processes(three_cpus) == []
    for address in result["addresses"]["worker"]:
        assert_port_free(int(address.rsplit(":", 1)[1]))


@pytest.mark.slow
def test_parameter_server_variables_live_on_ps(three_cpus: RuntimeProcess) -> None:
    seen = collect_job(three_cpus, three_cpus.submit("parameter-server", {"workers": 2, "steps": 8}), timeout=240)
    result = result_of(seen)
    assert result["variables"] and all(d.startswith("/job:ps/") for d in result["variables"].values())
    assert result["steps"] == 8 and result["steps_per_s"] > 0
    assert result["loss"][-1] < result["loss"][0]
    # the coordinator, the parameter server and both workers applied the runtime's 3 logical CPUs
    assert {task: len(names) for task, names in result["task_devices"].items()} == {
        "chief:0": 3, "ps:0": 3, "worker:0": 3, "worker:1": 3}
    assert "memory growth" not in result["device_config"]["note"]  # no GPU shared here
    assert cluster_processes(three_cpus) == []


@pytest.mark.slow
def test_a_killed_worker_ends_the_job_with_an_error_naming_it(three_cpus: RuntimeProcess) -> None:
    job_id = three_cpus.submit("multi-worker", {"workers": 2, "steps": 100_000, "log_placement": False})

    def worker_1() -> psutil.Process | None:
        for process in cluster_processes(three_cpus):
            with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied, ValueError):
                if json.loads(process.environ().get("TF_CONFIG", "{}")).get("task", {}).get("index") == 1:
                    return process
        return None

    victim = wait_until(worker_1, timeout=120, message="worker 1 never started")

    def both_listening() -> set[int] | None:
        # Each worker's gRPC server listens once it has imported TensorFlow and joined the cluster.
        ports = listening_ports(cluster_processes(three_cpus))
        return ports if len(ports) >= 2 else None

    ports = wait_until(both_listening, timeout=120, message="the workers never listened")
    if os.readlink(f"/proc/{victim.pid}/ns/net") != os.readlink("/proc/self/ns/net"):
        for port in ports:  # isolated: TF's 0.0.0.0 listeners are invisible from this machine's network
            assert_port_free(port)
    victim.kill()
    seen = collect_job(three_cpus, job_id, timeout=60)
    message = error_of(seen).message
    assert "worker:1" in message and "SIGKILL" in message
    assert cluster_processes(three_cpus) == []
    for port in ports:
        assert_port_free(port)


@pytest.mark.slow
def test_cancelling_a_multi_worker_run_stops_every_worker(three_cpus: RuntimeProcess) -> None:
    job_id = three_cpus.submit("multi-worker", {"workers": 2, "steps": 100_000, "log_placement": False})
    wait_until(lambda: len(cluster_processes(three_cpus)) >= 2, timeout=60, message="the workers never started")
    three_cpus.cancel(grace=20)
    seen = collect_job(three_cpus, job_id, timeout=60)
    assert of_type(seen, events.JOB_FINISHED)[0].status == "cancelled"
    assert three_cpus.exited is not None and not three_cpus.exited.killed_for_cancel, \
        "the job did not stop by itself: its process had to be killed"
    assert cluster_processes(three_cpus) == []


def test_cluster_config_for_real_machines() -> None:
    tasks = cluster_commands(["10.0.0.1:2222", "10.0.0.2:2222"], ["10.0.0.3:2222"], chief="10.0.0.4:2222")
    by_task = {t["task"]: t for t in tasks}
    assert set(by_task) == {"worker:0", "worker:1", "ps:0", "chief:0"}
    config = by_task["worker:1"]["tf_config"]
    assert config["task"] == {"type": "worker", "index": 1}
    assert config["cluster"]["ps"] == ["10.0.0.3:2222"] and config["cluster"]["chief"] == ["10.0.0.4:2222"]
    assert "ps-coordinator" in by_task["chief:0"]["command"]
    with pytest.raises(ValueError, match="more than one task"):
        cluster_commands(["10.0.0.1:2222", "10.0.0.1:2222"])
    with pytest.raises(ValueError, match="HOST:PORT"):
        cluster_commands(["nohost"])


@pytest.mark.parametrize(("job", "params"), [
    ("custom-loop", {"steps": 1_000_000}),
    # a cluster: coordinator, parameter server and worker, each importing TensorFlow
    pytest.param("parameter-server", {"workers": 1, "steps": 100_000}, marks=pytest.mark.slow),
])
def test_cancelling_long_jobs(three_cpus: RuntimeProcess, job: str, params: dict) -> None:
    job_id = three_cpus.submit(job, params)
    # training (custom-loop), or the cluster's processes started (parameter-server): there is something to stop
    seen = events_until(three_cpus, progress_at_least(1), timeout=90)
    three_cpus.cancel(grace=20)
    seen += collect_job(three_cpus, job_id, timeout=60)
    assert of_type(seen, events.JOB_FINISHED)[0].status == "cancelled"
    assert three_cpus.exited is not None and not three_cpus.exited.killed_for_cancel, \
        "the job did not stop by itself: its process had to be killed"
    assert cluster_processes(three_cpus) == []


def test_without_network_namespaces_the_cluster_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tf_device_panel.core.runproc.cluster import LocalCluster

    for tool in ("unshare", "nsenter"):
        script = tmp_path / tool
        script.write_text("#!/bin/sh\necho 'unshare: write failed /proc/self/uid_map: Operation not permitted' >&2\n"
                          "exit 1\n")
        script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    with LocalCluster(lambda *_: None) as cluster:
        assert cluster.namespace is None
        assert "could not be made (unshare: write failed" in cluster.isolation


@pytest.mark.slow
def test_a_killed_runtime_takes_its_cluster_with_it(start_runtime) -> None:
    """The tasks run in their own sessions, so killing the runtime's process group misses them."""
    runtime = start_runtime()
    runtime.wait_ready()
    runtime.submit("parameter-server", {"workers": 1, "steps": 100_000})

    def whole_cluster() -> list[psutil.Process] | None:
        tasks = cluster_processes(runtime)
        return tasks if len(tasks) == 3 else None  # ps, worker and coordinator

    tasks = wait_until(whole_cluster, timeout=120, message="the cluster never started")
    runtime.kill(reason="killed by the test")
    _, alive = psutil.wait_procs(tasks, timeout=10)
    assert not alive, f"orphaned cluster tasks: {[' '.join(p.cmdline()[:4]) for p in alive]}"


def test_cluster_tasks_get_the_runtimes_configuration_and_gpus_only_when_they_can_share_them() -> None:
    from tf_device_panel.core.config import DeviceConfig, parse_config
    from tf_device_panel.core.runproc.jobs.cluster_jobs import task_device_config

    # no GPU: the runtime's configuration as it is (placement logging as the job asks)
    config, note = task_device_config(DeviceConfig(cpu_devices=3), 0, log_placement=False)
    assert config == DeviceConfig(cpu_devices=3, log_placement=False) and "CPU" not in note
    # a runtime that took nearly all GPU memory: the tasks stay off the GPUs, and the note says why
    config, note = task_device_config(DeviceConfig(), 1, log_placement=True)
    assert config.visible_gpus == [] and "memory growth" in note
    assert parse_config(config.to_json())[1] == []  # a task reads it back without a problem
    # memory growth (or limits) in the runtime: the tasks share the GPUs with the same configuration
    for runtime in (DeviceConfig(memory_growth=True), DeviceConfig(virtual_gpus={0: [1024, 1024]})):
        config, note = task_device_config(runtime, 1, log_placement=True)
        assert config == runtime.with_changes(log_placement=True) and "CPU" not in note
