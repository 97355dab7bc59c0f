"""The zygote (core.client.zygote, core.runproc.zygote): a run process forked from a process that imported
TensorFlow keeps every promise of one started by hand: its configuration's environment is read after the fork
and takes effect, it sees the panel's folder, fds and environment of the moment, its exit status and signals
are a fresh process's, its random numbers are its own, and nothing outlives the panel. The zygote itself never
initializes TensorFlow."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from helpers import ROOT, collect_job, events_until, of_type, output_line, output_lines, process_gone, wait_until
from tf_device_panel.core.client import zygote
from tf_device_panel.core.client.runtime import RuntimeProcess
from tf_device_panel.core.config import DeviceConfig
from tf_device_panel.core.protocol import events


@pytest.fixture
def ready_zygote() -> Iterator[None]:
    """A zygote ready for this process's environment (the first run of an environment starts one)."""
    first = RuntimeProcess(DeviceConfig())
    first.start()
    first.stop()
    assert zygote.wait_until_ready(180), "the zygote did not import TensorFlow"
    yield


def run_script(tmp_path: Path, source: str, config: DeviceConfig | None = None,
               env: dict[str, str] | None = None) -> tuple[RuntimeProcess, list[events.Event]]:
    path = tmp_path / f"script_{len(list(tmp_path.iterdir()))}.py"
    path.write_text(textwrap.dedent(source))
    runtime = RuntimeProcess(config or DeviceConfig(), env=env)
    runtime.start()
    try:
        runtime.wait_ready()
        seen = collect_job(runtime, runtime.submit("script", {"path": str(path)}))
    finally:
        runtime.stop()
    return runtime, seen


def printed_json(seen: list[events.Event]) -> dict[str, object]:
    return json.loads(next(line for line in output_lines(seen) if line.startswith("{")))


REPORT = """
    import ctypes, json, os, re
    libc = ctypes.CDLL(None)
    libc.getenv.restype = ctypes.c_char_p
    names = ["CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "TF_GPU_ALLOCATOR", "TF_FORCE_GPU_ALLOW_GROWTH",
             "TF_CPU_ALLOCATOR_USE_BFC", "TF_CPU_BFC_MEM_LIMIT_IN_MB", "MY_SETTING"]
    import numpy
    print(json.dumps({
        "c_getenv": {name: (libc.getenv(name.encode()) or b"").decode() or None for name in names},
        "cwd": os.getcwd(),
        # What each fd is ("pipe", "socket", a file's path), not its number: the numbers of the pipes the panel
        # passes are whatever were free in the panel's process at that moment (under load a transient fd of its
        # own shifted them by two).
        "fds": sorted(re.sub(r":\\[\\d+\\]$", "", os.readlink(f"/proc/self/fd/{fd}"))
                      for fd in os.listdir("/proc/self/fd") if os.path.islink(f"/proc/self/fd/{fd}")),
        "random": numpy.random.rand(),
        "parent_is_supervisor": "supervisor" in open(f"/proc/{os.getppid()}/cmdline").read()
                                or "zygote" in open(f"/proc/{os.getppid()}/cmdline").read(),
    }), flush=True)
"""


def test_a_forked_run_reads_its_configuration_environment_folder_and_fds_after_the_fork(
        ready_zygote: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    late = {"CUDA_VISIBLE_DEVICES": "1,0", "TF_FORCE_GPU_ALLOW_GROWTH": "true"}
    config = DeviceConfig(cpu_memory_limit_mib=256, gpu_allocator="cuda_malloc_async")
    forked, seen = run_script(tmp_path, REPORT, config, env=late)
    assert forked.forked, "the run was not forked from the zygote"
    report = printed_json(seen)
    # What the C library's getenv answers is what TensorFlow's C++ code reads when it initializes.
    assert report["c_getenv"] == {**late, "CUDA_DEVICE_ORDER": "PCI_BUS_ID", "TF_GPU_ALLOCATOR": "cuda_malloc_async",
                                  "TF_CPU_ALLOCATOR_USE_BFC": "true",
                                  "TF_CPU_BFC_MEM_LIMIT_IN_MB": "256", "MY_SETTING": None}
    assert report["cwd"] == str(tmp_path)

    monkeypatch.setenv(zygote.DISABLE_ENV, "1")
    by_hand, seen_by_hand = run_script(tmp_path, REPORT, config, env=late)
    assert not by_hand.forked
    bare = printed_json(seen_by_hand)
    assert report["fds"] == bare["fds"], f"a fork holds fds a fresh run process would not: {report['fds']} " \
                                         f"against {bare['fds']}"
    assert report["c_getenv"] == bare["c_getenv"]


def test_the_cpu_allocators_limit_set_after_the_fork_takes_effect(ready_zygote: None, tmp_path: Path) -> None:
    runtime, seen = run_script(tmp_path, """
        import tensorflow as tf
        kept = []
        try:
            for _ in range(40):
                kept.append(tf.random.normal([1024, 1024]))
            print("no limit", flush=True)
        except tf.errors.ResourceExhaustedError:
            print("out of memory after", len(kept), flush=True)
    """, DeviceConfig(cpu_memory_limit_mib=64))
    assert runtime.forked
    # 40 tensors of 4 MiB cannot fit under 64 MiB: the allocator TensorFlow made read the limit after the fork.
    assert any(line.startswith("out of memory after 1") for line in output_lines(seen)), output_lines(seen)


def test_two_forked_runs_draw_different_random_numbers(ready_zygote: None, tmp_path: Path) -> None:
    first, seen_first = run_script(tmp_path, REPORT)
    second, seen_second = run_script(tmp_path, REPORT)
    assert first.forked and second.forked
    assert printed_json(seen_first)["random"] != printed_json(seen_second)["random"]


def test_a_different_log_level_is_not_served_by_a_zygote_that_imported_with_another(
        ready_zygote: None, tmp_path: Path) -> None:
    """TensorFlow reads the C++ log level once, during its import: a run that wants another cannot be a fork of
    a zygote imported at level 0 (placement lines are INFO)."""
    placing = """
        import tensorflow as tf
        tf.debugging.set_log_device_placement(True)
        print(tf.add(1, 2).numpy(), flush=True)
    """
    quiet, seen = run_script(tmp_path, placing, env={"TF_CPP_MIN_LOG_LEVEL": "3"})
    assert not quiet.forked and "3" in output_lines(seen)
    assert not any("placer.cc" in line for line in quiet.recent_lines())
    loud, _ = run_script(tmp_path, placing)
    assert loud.forked
    assert any("placer.cc" in line for line in loud.recent_lines()), loud.recent_lines()


@pytest.mark.parametrize("ending, status, signal_name", [
    ("sys.exit(7)", 7, None),
    ("os.kill(os.getpid(), signal.SIGTERM)", -signal.SIGTERM, "SIGTERM"),
])
def test_a_forked_run_ends_with_its_scripts_status(ready_zygote: None, tmp_path: Path, ending: str, status: int,
                                                   signal_name: str | None) -> None:
    runtime, seen = run_script(tmp_path, f"""
        import os, signal, sys
        print("ending", flush=True)
        {ending}
    """)
    assert runtime.forked
    assert runtime.exited is not None
    assert runtime.exited.returncode == status and runtime.exited.signal == signal_name
    assert of_type(seen, events.JOB_FINISHED)[0].returncode == status


def test_the_zygote_never_initializes_tensorflow(ready_zygote: None, tmp_path: Path) -> None:
    """Initializing TensorFlow starts its thread pools (tens of threads) and, on a GPU machine, opens
    /dev/nvidia*: the zygote keeps the two threads TensorFlow's import leaves and opens no device."""
    run_script(tmp_path, "import tensorflow as tf\nprint(tf.reduce_sum(tf.ones([64, 64])).numpy())\n")
    zygotes = [z for z in zygote._zygotes if z.zygote_pid is not None]
    assert zygotes
    for one in zygotes:
        process = psutil.Process(one.zygote_pid)
        assert process.num_threads() <= 3, f"the zygote has {process.num_threads()} threads"
        opened = [os.readlink(f"/proc/{one.zygote_pid}/fd/{fd}") for fd in os.listdir(f"/proc/{one.zygote_pid}/fd")]
        assert not [path for path in opened if path.startswith("/dev/nvidia")]


def test_nothing_forked_outlives_a_panel_killed_by_sigkill(tmp_path: Path) -> None:
    """The panel dies: its zygote gets SIGKILL, the forked supervisor SIGHUP, the run its end."""
    panel = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import sys, time
        sys.path.insert(0, {str(ROOT)!r})
        from tf_device_panel.core.client import zygote
        from tf_device_panel.core.client.runtime import RuntimeProcess
        from tf_device_panel.core.config import DeviceConfig
        zygote.start_zygotes()
        first = RuntimeProcess(DeviceConfig()); first.start(); first.stop()
        assert zygote.wait_until_ready(180)
        runtime = RuntimeProcess(DeviceConfig()); runtime.start(); runtime.wait_ready()
        assert runtime.forked
        path = {str(tmp_path / "sleep.py")!r}
        open(path, "w").write("import time\\nprint('sleeping', flush=True)\\ntime.sleep(600)\\n")
        runtime.submit("script", {{"path": path}})
        while True:
            event = runtime.next_event(60)
            if getattr(event, "text", "") == "sleeping":
                break
        print(runtime.pid, runtime.supervisor_pid, zygote._zygotes[0].zygote_pid, flush=True)
        time.sleep(600)
    """)], stdout=subprocess.PIPE, text=True)
    assert panel.stdout is not None
    pids = [int(pid) for pid in panel.stdout.readline().split()]
    assert len(pids) == 3, "the panel did not get its forked run going"
    panel.kill()
    panel.wait()
    for pid in pids:
        wait_until(lambda pid=pid: process_gone(pid), 30, f"pid {pid} outlived the panel")


def test_the_command_line_starts_no_zygote(tmp_path: Path) -> None:
    """A command that runs one job and exits would never use a zygote: it must not import TensorFlow twice."""
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(ROOT)!r})
        from tf_device_panel.core.client import zygote
        from tf_device_panel.core.client.run_manager import run_job_once
        from tf_device_panel.core.config import DeviceConfig
        outcome = run_job_once(DeviceConfig(), "matmul", {{}})
        print(outcome.status, len(zygote._zygotes))
    """)], capture_output=True, text=True, timeout=300)
    assert done.stdout.split() == ["ok", "0"], done.stderr[-2000:]


def test_runs_forked_from_a_zygote_let_go_still_end_as_their_scripts_end(ready_zygote: None, tmp_path: Path) -> None:
    """A zygote is let go (a third environment took its place): the runs forked from it are not cut short."""
    flag = tmp_path / "go-on"
    path = tmp_path / "waits.py"
    path.write_text(f"import os, sys, time\nprint('waiting', flush=True)\nwhile not os.path.exists({str(flag)!r}):\n"
                    "    time.sleep(0.05)\nsys.exit(5)\n")
    runtime = RuntimeProcess(DeviceConfig())
    runtime.start()
    try:
        runtime.wait_ready()
        assert runtime.forked
        job_id = runtime.submit("script", {"path": str(path)})
        events_until(runtime, output_line("waiting"), timeout=60)
        with zygote._zygotes_lock:
            let_go = [z for z in zygote._zygotes if z.zygote_pid is not None]
            zygote._zygotes[:] = []
        for one in let_go:
            one.close()
        flag.write_text("")
        seen = collect_job(runtime, job_id)
    finally:
        runtime.stop()
    assert of_type(seen, events.JOB_FINISHED)[0].returncode == 5
    for one in let_go:
        wait_until(lambda one=one: process_gone(one.process_id), 30, "a zygote let go outlived its runs")


def test_a_zygote_that_failed_is_not_started_again_for_its_environment(tmp_path: Path) -> None:
    """A Python without TensorFlow (or without the panel) cannot have a zygote: its runs start by hand, and no
    run of it starts another zygote that would fail the same way."""
    python = tmp_path / "python-without-tensorflow"
    python.write_text("#!/bin/sh\nexec /bin/false\n")
    python.chmod(0o755)
    env = dict(os.environ)
    assert zygote.spawn(str(python), env, ["--module", "x"], ()) is None  # starts its zygote, not ready yet
    (failed,) = [z for z in zygote._zygotes if z.python == str(python)]
    wait_until(lambda: failed.ready() or failed.error is not None, 30, "the zygote neither started nor failed")
    assert failed.error is not None
    assert zygote.spawn(str(python), env, ["--module", "x"], ()) is None
    assert [z for z in zygote._zygotes if z.python == str(python)] == [failed]


def test_a_request_without_a_module_is_refused_clearly(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    # A forked run's tie to the panel is armed where its supervisor forks the run process: a program's supervisor
    # starts it without that fork, and the run would outlive the panel. The zygote refuses such a request.
    forked = zygote.Zygote(sys.executable, dict(os.environ))
    try:
        wait_until(lambda: forked.ready() or forked.error is not None, timeout=180, message="the zygote never said")
        assert forked.ready(), forked.error
        with caplog.at_level("WARNING"):
            assert forked.spawn(["-c", "print('a program')"], dict(os.environ), ()) is None
        assert "argv must begin with --module MODULE" in caplog.text
        assert forked.error is None  # refused, not broken: it serves the next request
    finally:
        forked.close()


HEAP_CHILD = textwrap.dedent("""\
    import os, resource, sys
    from tf_device_panel.core.runproc.runtime_main import own_the_heap

    blocks = [bytearray(4000) for _ in range(4000)]  # ~16 MB of small blocks: malloc's heap, as a zygote's is

    def faults_after_fork(own: bool) -> str:
        read_end, write_end = os.pipe()
        pid = os.fork()
        if pid == 0:
            owned = own_the_heap() if own else 0
            before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
            for block in blocks:  # what a job does to the heap it inherited: writes into it
                block[0] = 1
            faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
            os.write(write_end, f"{owned} {faults}".encode())
            os._exit(0)
        os.close(write_end)
        os.waitpid(pid, 0)
        return os.read(read_end, 100).decode()

    print(faults_after_fork(False), faults_after_fork(True))
    """)


def test_a_spare_owns_the_heap_it_was_forked_with_before_its_job() -> None:
    """A fork shares the zygote's heap until written: TensorFlow's first op in a spare paid ~1,500 copy-on-write
    faults (its matmul 51 ms against a bare process's 45). `own_the_heap`, run while the spare idles, takes them
    beforehand; a job's writes into the heap then fault (almost) never."""
    done = subprocess.run([sys.executable, "-c", HEAP_CHILD], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    shared, owned = done.stdout.split()[:2], done.stdout.split()[2:]
    if int(owned[0]) == 0:
        pytest.skip("this kernel cannot populate a range writable (MADV_POPULATE_WRITE: Linux 5.14)")
    assert int(shared[1]) > 1000, f"the writes into a shared heap faulted only {shared[1]} times"
    assert int(owned[0]) >= 16_000_000 and int(owned[1]) < 100, done.stdout
