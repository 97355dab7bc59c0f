"""A user's script through `tf-device-panel run script` behaves as `python file.py` would: main thread, signal
handlers, atexit, exit status, its own traceback, fresh module state and folder, closed stdin, and nothing it
starts outlives the run."""

from __future__ import annotations

import json
import os
import py_compile
import signal
import subprocess
import sys
import textwrap
import zipapp
import zipfile
from pathlib import Path

import pytest
from helpers import ROOT, collect_job, output_lines, process_gone, run_cli, wait_until
from tf_device_panel.core.client import zygote
from tf_device_panel.core.client.history import RunHistory
from tf_device_panel.core.client.run_manager import run_job_once
from tf_device_panel.core.client.runtime import RuntimeProcess
from tf_device_panel.core.config import DeviceConfig, to_python_snippet
from tf_device_panel.core.devices.inventory import DeviceInventory
from tf_device_panel.core.protocol import events


def write(tmp_path: Path, body: str, name: str = "user_script.py") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(body))
    return path


def start_cli(script: Path, *extra: str, **popen: object) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "tf_device_panel", "run", "script", "-p", f"path={script}", *extra],
                            cwd=ROOT, text=True, env=os.environ.copy(), **popen)  # type: ignore[call-overload]


def cli(script: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    """`tf-device-panel run script` on `script`, the command line's `main()` in this process (its run forks from
    the worker's zygote); the tests that signal or kill the command line start it as a process (`start_cli`)."""
    return run_cli(["run", "script", "-p", f"path={script}", *extra], ROOT)


def bare(script: Path) -> int:
    return subprocess.run([sys.executable, str(script)], capture_output=True, timeout=60,
                          stdin=subprocess.DEVNULL).returncode


def test_main_thread_signal_handler_atexit_stdin_and_exit_status(tmp_path: Path) -> None:
    marker = tmp_path / "atexit-ran"
    script = write(tmp_path, f"""
        import atexit, signal, sys, threading, time
        threading.Thread(target=lambda: (time.sleep(0.5), print("worker thread done", flush=True))).start()
        signal.signal(signal.SIGTERM, lambda *_: print("checkpoint saved"))  # only possible on the main thread
        atexit.register(lambda: open({str(marker)!r}, "w").write("yes"))
        print("main thread:", threading.current_thread() is threading.main_thread())
        try:
            input()
        except EOFError:
            print("stdin is closed")
        sys.exit(3)
    """)
    done = cli(script)
    assert done.returncode == 3 == bare(script), done.stderr
    assert "main thread: True" in done.stdout and "stdin is closed" in done.stdout
    assert "worker thread done" in done.stdout  # the interpreter waits for non-daemon threads at exit
    assert marker.read_text() == "yes"
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("body, status", [
    ("import os\nprint('bye', flush=True)\nos._exit(0)\n", 0),
    ("import sys\nsys.exit('a message')\n", 1),
])
def test_exit_status_is_what_a_bare_run_gives(tmp_path: Path, body: str, status: int) -> None:
    script = write(tmp_path, body)
    done = cli(script, "--json")
    assert done.returncode == status == bare(script), done.stderr
    report = json.loads(done.stdout)
    assert report["status"] == ("ok" if status == 0 else "error")


def test_an_uncaught_exception_shows_the_scripts_own_traceback(tmp_path: Path) -> None:
    script = write(tmp_path, """
        def train():
            raise ValueError("learning rate must be positive")

        train()
    """)
    done = cli(script)
    assert done.returncode == 1 == bare(script)
    assert 'user_script.py", line 5, in <module>' in done.stderr
    assert 'user_script.py", line 3, in train' in done.stderr
    assert "tf_device_panel" not in done.stderr.split("Traceback", 1)[1].split("ValueError")[0]  # no panel frames
    assert "error: ValueError: learning rate must be positive" in done.stderr


def test_every_run_has_fresh_modules_and_folder(tmp_path: Path) -> None:
    (tmp_path / "settings.py").write_text("VALUE = 1\n")
    script = write(tmp_path, f"""
        import os, settings
        print("value", settings.VALUE, "folder", os.getcwd())
        os.chdir({str(tmp_path)!r})
    """)
    seen: list[str] = []

    def lines(event) -> None:
        if event.type == "log" and event.kind == "output":
            seen.extend(event.text.split("\n"))

    folder = os.getcwd()
    run_job_once(DeviceConfig(), "script", {"path": str(script)}, on_event=lines)
    (tmp_path / "settings.py").write_text("VALUE = 2\n")
    run_job_once(DeviceConfig(), "script", {"path": str(script)}, on_event=lines)
    assert [line for line in seen if line.startswith("value")] == [f"value 1 folder {folder}",
                                                                   f"value 2 folder {folder}"]


CHILDREN = """
    import subprocess, sys, time
    plain = subprocess.Popen(["sleep", "3600"])
    detached = subprocess.Popen(["setsid", "sleep", "3600"])
    print("children", plain.pid, detached.pid, flush=True)
    if "--wait" in sys.argv:
        time.sleep(3600)
"""


def children_of(output: str) -> list[int]:
    line = next(line for line in output.splitlines() if "children" in line)
    return [int(pid) for pid in line.split()[-2:]]


def all_gone(pids: list[int]) -> bool:
    return all(process_gone(pid) for pid in pids)


def test_children_are_ended_when_the_script_finishes(tmp_path: Path) -> None:
    done = cli(write(tmp_path, CHILDREN))
    assert done.returncode == 0, done.stderr
    pids = children_of(done.stdout)
    wait_until(lambda: all_gone(pids), timeout=10, message=f"children {pids} outlived the run")


@pytest.mark.parametrize("how", ["ctrl-c", "sigkill"])
def test_children_are_ended_when_the_run_is_cancelled_or_the_cli_killed(tmp_path: Path, how: str) -> None:
    output = tmp_path / "out.txt"
    with output.open("w") as sink:
        process = start_cli(write(tmp_path, CHILDREN), "-p", "args=--wait", stdout=sink, stderr=subprocess.STDOUT)
        try:
            pids = wait_until(lambda: "children" in output.read_text() and children_of(output.read_text()),
                              timeout=120, message="the script never started its children")
            process.send_signal(signal.SIGINT if how == "ctrl-c" else signal.SIGKILL)
            status = process.wait(timeout=60)
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
    assert status == (130 if how == "ctrl-c" else -signal.SIGKILL)
    wait_until(lambda: all_gone(pids), timeout=15, message=f"children {pids} outlived the run")
    if how == "ctrl-c":
        assert RunHistory().summaries()[0].status == "cancelled"


# -- TensorFlow as the script gets it: imported and configured, not initialized ------------------------------
def profile(tmp_path: Path, **keys: object) -> Path:
    path = tmp_path / "profile.json"
    path.write_text(json.dumps({"version": 1, **keys}))
    return path


def bare_run(script: Path, cwd: Path, prelude: str = "", env: dict[str, str] | None = None,
             ) -> subprocess.CompletedProcess[str]:
    """`python file.py`, with `prelude` (a profile's snippet) pasted at its top when given."""
    if prelude:
        script = script.with_name(f"bare_{script.name}")
        script.write_text(prelude + "\n" + script.with_name(script.name[5:]).read_text())
    return subprocess.run([sys.executable, str(script)], cwd=cwd, capture_output=True, text=True, timeout=120,
                          stdin=subprocess.DEVNULL, env=env or os.environ.copy())


def test_the_scripts_own_tf_config_calls_work_as_bare(tmp_path: Path) -> None:
    # The seeds' lesson, configuration before initialization, with a logical-CPU split standing in for the
    # "1 Physical GPU, 2 Logical GPUs" example; TensorFlow refuses each of these calls once initialized.
    script = write(tmp_path, """
        import tensorflow as tf
        from tensorflow.python.eager import context
        print("initialized at start:", context.context()._initialized)
        print("profile's soft placement:", tf.config.get_soft_device_placement())
        print("before, logical CPUs configured:", len(tf.config.get_logical_device_configuration(
            tf.config.list_physical_devices("CPU")[0]) or []))
        tf.config.threading.set_intra_op_parallelism_threads(1)
        cpus = tf.config.list_physical_devices("CPU")
        tf.config.set_visible_devices(cpus, "CPU")
        tf.config.set_logical_device_configuration(cpus[0], [tf.config.LogicalDeviceConfiguration()] * 2)
        print("first output")
        logical = tf.config.list_logical_devices("CPU")
        print(len(cpus), "Physical CPU,", len(logical), "Logical CPUs")
    """)
    config = profile(tmp_path, cpu_devices=3, soft_placement=False, log_placement=False)
    done = cli(script, "--config", str(config))
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["initialized at start: False", "profile's soft placement: False",
                                        "before, logical CPUs configured: 3", "first output",
                                        "1 Physical CPU, 2 Logical CPUs"]
    assert "cannot be modified after being initialized" not in done.stderr
    # The logical devices went out when the script initialized TensorFlow, after its first output.
    (summary,) = RunHistory().summaries()
    recorded = RunHistory().events(summary.run_id)
    kinds = [e.type if e.type != events.LOG else e.text for e in recorded]
    assert kinds.index("ready") > kinds.index(next(k for k in kinds if "first output" in k))
    ready = next(e for e in recorded if isinstance(e, events.Ready))
    assert [d["short_name"] for d in ready.logical] == ["/CPU:0", "/CPU:1"]


SEED_GPU2 = """
    import tensorflow as tf
    tf.debugging.set_log_device_placement(True)

    try:
      # 유효하지 않은 GPU 장치를 명시
      with tf.device('/device:GPU:2'):
        a = tf.constant([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
        b = tf.constant([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
        c = tf.matmul(a, b)
    except RuntimeError as e:
      print(e)
    print(c.device)
"""


def test_soft_placement_off_stays_off_when_the_script_turns_placement_logging_on(tmp_path: Path) -> None:
    script = write(tmp_path, SEED_GPU2)
    config = profile(tmp_path, soft_placement=False)
    done = cli(script, "--config", str(config))
    bare = bare_run(script, tmp_path, to_python_snippet(DeviceConfig(soft_placement=False)))
    assert done.returncode == bare.returncode == 1, done.stderr
    for stderr in (done.stderr, bare.stderr):
        assert "InvalidArgumentError" in stderr and "Could not satisfy device specification" in stderr
    assert 'user_script.py", line 8, in <module>' in done.stderr  # TensorFlow's error and the script's line


def test_a_tf_device_fallback_in_a_script_is_reported_with_its_file_and_line(tmp_path: Path) -> None:
    script = write(tmp_path, SEED_GPU2)
    done = cli(script, "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    (fallback,) = report["fallbacks"]
    assert fallback["file"] == str(script) and fallback["line"] == 7
    assert fallback["requested"] == "/device:GPU:2" and fallback["actual_short"] == "/CPU:0"
    assert fallback["op"] == "user_script.py:7"
    (summary,) = RunHistory().summaries()
    assert summary.fallbacks == [fallback]
    # The device map draws it from this event, as for the matmul job; the log shows it too.
    assert any(isinstance(e, events.Fallback) for e in RunHistory().events(summary.run_id))
    shown = cli(script)
    assert f"soft-placement fallback: {script}, line 7: tf.device('/device:GPU:2')" in shown.stderr


def test_entering_an_existing_devices_scope_costs_the_script_what_it_costs_bare(tmp_path: Path) -> None:
    """The panel watches `tf.device` scopes for soft-placement fallbacks. Keras enters one at every training step
    (its dataset iterator's `next`); the watch asked TensorFlow whether soft placement was on each time, and
    TensorFlow builds its whole ConfigProto to answer: 2 builds a step, ~3 % of a small model's fit. Counted
    here as the script sees them: the same number through the panel as bare, for a device that exists; the
    fallback to a missing device is still reported (the test above)."""
    script = write(tmp_path, """
        import tensorflow as tf
        from tensorflow.python.eager import context
        built = []
        config = context.Context.config
        context.Context.config = property(lambda self: built.append(1) or config.fget(self))
        x = tf.constant(1.0)
        for _ in range(200):
            with tf.device("/CPU:0"):
                x = x + 1.0
        print("CONFIG_BUILDS", len(built), "RESULT", float(x))
    """)
    done = cli(script)
    bare = bare_run(script, tmp_path)
    assert done.returncode == bare.returncode == 0, done.stderr
    assert "RESULT 201.0" in bare.stdout
    assert done.stdout.split("CONFIG_BUILDS")[-1] == bare.stdout.split("CONFIG_BUILDS")[-1]


# -- what a bare run prints when a script fails: Python's own words, once -----------------------------------
FAILURES = {
    "did-you-mean": ("import os\nos.getcwdd()\n", 1),
    "notes-and-chains": ("""
        def load():
            raise KeyError("lr")
        try:
            load()
        except KeyError as exc:
            error = ValueError("bad config")
            error.add_note("see config.yaml")
            raise error from exc
    """, 1),
    "exception-group": ("""
        raise ExceptionGroup("two failures", [ValueError("a"), TypeError("b")])
    """, 1),
    "custom-excepthook": ("""
        import sys
        sys.excepthook = lambda kind, value, tb: print("custom hook:", kind.__name__, value)
        raise RuntimeError("handled by the hook")
    """, 1),
    "base-exception": ("""
        class StopTraining(BaseException):
            pass
        def train():
            raise StopTraining("early stop")
        train()
    """, 1),
    "keyboard-interrupt": ("raise KeyboardInterrupt\n", -signal.SIGINT),
}


@pytest.mark.parametrize("case", FAILURES)
def test_a_failing_script_prints_what_python_prints(tmp_path: Path, case: str) -> None:
    body, status = FAILURES[case]
    script = write(tmp_path, body)
    bare = bare_run(script, tmp_path)
    done = cli(script)
    assert bare.returncode == status and done.returncode == (130 if status < 0 else status), done.stderr
    assert done.stdout == bare.stdout
    assert bare.stderr in done.stderr  # the same traceback, hints, notes, chain and group, printed once
    assert done.stderr.count("Traceback") == bare.stderr.count("Traceback")
    assert "tf_device_panel" not in done.stderr and "runpy" not in done.stderr  # none of the panel's frames
    (summary,) = RunHistory().summaries()
    assert summary.status == "error"  # a KeyboardInterrupt the script raised is not the user's Ctrl+C


def test_main_is_the_script_as_a_bare_run_makes_it(tmp_path: Path) -> None:
    (tmp_path / "data.txt").write_text("found\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    script = write(tmp_path, f"""
        import os, pickle, sys, threading
        print("file", __file__, "package", __package__, "spec", __spec__, "argv", sys.argv)
        print("path[0] is the script's folder:", sys.path[0] == os.path.dirname(os.path.abspath(__file__)))
        print("tensorflow imported:", "tensorflow" in sys.modules)
        print("panel variables:", sorted(k for k in os.environ if k.startswith("TF_DEVICE_PANEL_")
                                         and k != "TF_DEVICE_PANEL_HOME"))
        print("log level:", os.environ.get("TF_CPP_MIN_LOG_LEVEL"))
        os.chdir({str(elsewhere)!r})
        print(open(os.path.join(os.path.dirname(__file__), "data.txt")).read().strip())

        class Point:
            def __init__(self, x):
                self.x = x

        def later():
            import time
            time.sleep(0.3)  # the script's body has ended by now
            print("pickled", len(pickle.dumps(Point(1))) > 0, flush=True)

        threading.Thread(target=later).start()
    """)
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    bare = bare_run(script, tmp_path, env=env)
    done = subprocess.run([sys.executable, "-m", "tf_device_panel", "run", "script", "-p", f"path={script}"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=180, env=env)
    assert done.returncode == bare.returncode == 0, done.stderr
    expected = bare.stdout.replace("tensorflow imported: False", "tensorflow imported: True")  # said in docs/runs.md
    assert done.stdout == expected
    assert "panel variables: []" in done.stdout and "log level: 2" in done.stdout and "pickled True" in done.stdout


def test_ctrl_c_before_the_script_starts_exits_130_and_finalizes_the_record(tmp_path: Path) -> None:
    script = write(tmp_path, "import signal\nsignal.pause()\n")  # never reached: Ctrl+C comes during the import
    process = start_cli(script, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        wait_until(lambda: RunHistory().summaries(), timeout=60, message="the run was never recorded")
        process.send_signal(signal.SIGINT)  # TensorFlow is still being imported: the script has not started
        _, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 130, err
    assert RunHistory().summaries()[0].status == "cancelled"


# -- the script's output is the script's -----------------------------------------------------------------
LOOKALIKES = """
    import logging, sys, traceback
    print("I0101 12:00:00.000000 1 x.cc:1] a line shaped like TensorFlow's log")
    print("MatMul: (MatMul): /job:localhost/replica:0/task:0/device:CPU:0")
    print("Executing op MatMul in device /job:localhost/replica:0/task:0/device:GPU:0")
    try:
        1 / 0
    except ZeroDivisionError:
        traceback.print_exc()
        logging.exception("it failed")
    print("ValueError: printed, not raised", file=sys.stderr)
    print("WARNING:tensorflow:shaped like TensorFlow's Python log", file=sys.stderr)
"""


def test_the_scripts_lines_are_never_taken_for_tensorflows(tmp_path: Path) -> None:
    script = write(tmp_path, LOOKALIKES)
    bare = bare_run(script, tmp_path)
    done = cli(script)
    assert done.returncode == bare.returncode == 0, done.stderr
    assert done.stdout == bare.stdout  # `run script > out.txt` gets what `python file.py > out.txt` gets
    assert bare.stderr in done.stderr
    (summary,) = RunHistory().summaries()
    recorded = RunHistory().events(summary.run_id)
    assert not [e for e in recorded if isinstance(e, events.Placement)]
    reclassified = "\n".join(e.text for e in recorded if isinstance(e, events.Log) and e.kind != "output")
    for line in ("shaped like", "(MatMul)", "Executing op", "Traceback", "ZeroDivisionError", "printed, not raised",
                 "it failed"):
        assert line not in reclassified


def test_stdout_and_stderr_keep_their_order(tmp_path: Path) -> None:
    script = write(tmp_path, """
        import sys
        for i in range(300):
            print(f"out {i}", flush=True)
            print(f"err {i}", file=sys.stderr, flush=True)
    """)
    bare = subprocess.run([sys.executable, str(script)], capture_output=False, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=60)
    process = start_cli(script, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    out, _ = process.communicate(timeout=180)
    assert process.returncode == 0
    assert [line for line in out.splitlines() if line.startswith(("out ", "err "))] == bare.stdout.splitlines()


# -- a script that cannot run at all ---------------------------------------------------------------------
@pytest.mark.parametrize("case", ["folder", "zip", "symlink-loop", "bad-pyc", "not-utf8", "syntax-error",
                                  "unreadable"])
def test_a_script_that_cannot_run_is_one_line_and_exit_2_before_tensorflow(tmp_path: Path, case: str) -> None:
    # Python's own reason where Python gives one: `python: can't find '__main__' module in '…'`, `can't open
    # file '…': [Errno 40] Too many levels of symbolic links`, `RuntimeError: Bad magic number in .pyc file`.
    if case == "folder":
        path, expected = tmp_path / "project", "can't find '__main__' module in"
        path.mkdir()
        (path / "helper.py").write_text("print(1)\n")
    elif case == "zip":
        path, expected = tmp_path / "app.pyz", "can't find '__main__' module in"
        with zipfile.ZipFile(path, "w") as archive:
            archive.writestr("helper.py", "print(1)\n")
    elif case == "symlink-loop":
        path, expected = tmp_path / "loop.py", "[Errno 40] Too many levels of symbolic links"
        path.symlink_to(tmp_path / "loop.py")
    elif case == "bad-pyc":
        path, expected = tmp_path / "old.pyc", "RuntimeError: Bad magic number in .pyc file"
        path.write_bytes(b"\0\0\0\0" + bytes(12) + b"junk")
    elif case == "not-utf8":
        path, expected = tmp_path / "latin.py", "latin.py, line 2: not valid UTF-8 (byte 0xe9 at column 12)"
        path.write_bytes(b"x = 1\nname = 'caf\xe9'\n")
    elif case == "syntax-error":
        path, expected = tmp_path / "broken.py", "broken.py, line 3: SyntaxError: "
        path.write_text("import os\n\ndef f(:\n    pass\n")
    else:
        if os.geteuid() == 0:
            pytest.skip("root reads any file")
        path, expected = tmp_path / "secret.py", "cannot be read"
        path.write_text("print(1)\n")
        path.chmod(0)
    done = cli(path)
    assert done.returncode == 2, done.stderr
    (line,) = done.stderr.splitlines()
    assert line.startswith("error: ") and expected in line and str(path.name) in line
    assert "runtime ready" not in done.stdout + done.stderr
    (summary,) = RunHistory().summaries()
    assert summary.status == "error" and expected in summary.error.message


@pytest.mark.parametrize("case", ["pyc", "folder", "zip-app"])
def test_what_python_runs_run_script_runs(tmp_path: Path, case: str) -> None:
    # A compiled .pyc, a folder with __main__.py (runpy's frames under the script's, as bare) and a zip
    # application: the same output, traceback and status as `python FILE`.
    body = textwrap.dedent("""
        import sys, traceback
        import helper
        print(__name__, __file__.replace(sys.path[0], "<root>"), __package__, sys.argv[1:], helper.VALUE)
        traceback.print_stack()
        raise SystemExit(4)
    """)
    source = tmp_path / "project"
    source.mkdir()
    (source / "helper.py").write_text("VALUE = 42\n")
    (source / "__main__.py").write_text(body)
    if case == "pyc":
        path = tmp_path / "compiled" / "main.pyc"
        path.parent.mkdir()
        py_compile.compile(str(source / "__main__.py"), cfile=str(path), dfile="main.py", doraise=True)
        (path.parent / "helper.py").write_text("VALUE = 42\n")
    elif case == "folder":
        path = source
    else:
        path = tmp_path / "app.pyz"
        zipapp.create_archive(source, path)
    bare = subprocess.run([sys.executable, str(path), "an argument"], capture_output=True, text=True, timeout=60,
                          stdin=subprocess.DEVNULL, cwd=tmp_path)
    done = subprocess.run([sys.executable, "-m", "tf_device_panel", "run", "script", "-p", f"path={path}",
                           "-p", "args='an argument'"], capture_output=True, text=True, timeout=180, cwd=tmp_path,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert bare.returncode == 4 and done.returncode == 4, done.stderr
    assert done.stdout == bare.stdout and "helper" not in bare.stderr
    assert bare.stderr in done.stderr  # the same stack (runpy's frames for a folder or zip file, as bare)


def test_a_latin1_script_that_declares_its_encoding_runs(tmp_path: Path) -> None:
    path = tmp_path / "latin.py"
    path.write_bytes(b"# -*- coding: latin-1 -*-\nprint('caf\xe9')\n")
    done = cli(path)
    assert done.returncode == 0 and done.stdout == "café\n", done.stderr


def test_a_scripts_fallback_is_drawn_on_the_device_map(qtbot, tmp_path: Path) -> None:
    pytest.importorskip("PySide6")
    from tf_device_panel.gui.docks.device_map import DeviceMapPanel

    script = write(tmp_path, SEED_GPU2)
    seen: list[events.Event] = []
    outcome = run_job_once(DeviceConfig(), "script", {"path": str(script)}, on_event=seen.append)
    assert outcome.status == "ok" and [f["line"] for f in outcome.fallbacks] == [7]
    ready = next(i for i, e in enumerate(seen) if isinstance(e, events.Ready))
    panel = DeviceMapPanel()
    qtbot.addWidget(panel)
    panel.resize(900, 300)
    report = seen[ready]
    assert isinstance(report, events.Ready)
    panel.set_devices(report, None, DeviceInventory.from_ready(report, []))
    panel.on_events(seen[ready + 1:])  # as the window hands them on after the run's ready report
    assert len(panel.canvas.current_map().arrows) == 1
    assert panel.canvas.current_map().segment("/CPU:0") is not None


FRAMES = """
    import inspect, sys, warnings
    deepest = 0
    def deeper(depth):
        global deepest
        deepest = depth
        deeper(depth + 1)
    try:
        deeper(1)
    except RecursionError:
        pass
    print("frames", len(inspect.stack()), sys._getframe().f_back, "depth", deepest, sys.getrecursionlimit())
    warnings.warn("top", stacklevel=2)
"""


def test_a_script_forked_from_the_zygote_runs_as_the_outermost_frame(tmp_path: Path) -> None:
    # The window's runs are forks of the zygote (TensorFlow imported there): the hand-over to the interpreter's top
    # level passes the zygote's frames too, and the script has none of the panel's under it.
    script = write(tmp_path, FRAMES)
    bare = bare_run(script, tmp_path)
    first = RuntimeProcess(DeviceConfig())
    first.start()
    first.stop()
    assert zygote.wait_until_ready(180), "the zygote did not import TensorFlow"
    runtime = RuntimeProcess(DeviceConfig())
    runtime.start()
    try:
        runtime.wait_ready()
        seen = collect_job(runtime, runtime.submit("script", {"path": str(script)}))
    finally:
        runtime.stop()
    assert runtime.forked
    assert output_lines(seen)[:1] == bare.stdout.splitlines() == ["frames 1 None depth 999 1000"]
    stderr = "".join(e.raw.decode() for e in seen
                     if isinstance(e, events.Log) and e.source == "script" and e.stream == "stderr" and e.raw)
    assert stderr == bare.stderr == "sys:1: UserWarning: top\n"


# -- a child the script forked is the script's, not the run's -------------------------------------------------------
def test_a_forked_child_that_runs_to_the_scripts_end_tells_the_panel_nothing(tmp_path: Path) -> None:
    script = write(tmp_path, """
        import os, sys
        pid = os.fork()
        if pid == 0:
            print("the child ends", flush=True)  # and runs on to the end of the script, as it does bare
            sys.stdout.flush()
        else:
            _, status = os.waitpid(pid, 0)
            print("child status", os.waitstatus_to_exitcode(status), flush=True)
    """)
    done = cli(script)
    assert done.returncode == 0, done.stderr
    assert "the child ends" in done.stdout and "child status 0" in done.stdout  # as bare
    (summary,) = RunHistory().summaries()
    recorded = RunHistory().events(summary.run_id)
    ends = [e for e in recorded if isinstance(e, events.Progress) and e.done == e.total]
    assert len(ends) == 1, ends  # the run's own; the child's end reported no progress on the run's pipe
    assert summary.status == "ok"


@pytest.mark.parametrize("name", ["user_script.py", "user_script.pyc"])
def test_stop_as_ctrl_c_becomes_the_scripts_exits_130_and_ends_the_job(tmp_path: Path, name: str,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    # The SIGINT comes right after the script's own Ctrl+C handling is set, before its first line: a
    # KeyboardInterrupt in the run's last preparations, outside the script's code.
    source = write(tmp_path, "print('the script started')\n")
    script = source
    if name.endswith(".pyc"):
        script = tmp_path / name
        py_compile.compile(str(source), cfile=str(script), doraise=True)
    monkeypatch.setenv("TF_DEVICE_PANEL_TEST_INTERRUPT_AT_SCRIPT_START", "1")
    process = start_cli(script, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = process.communicate(timeout=180)
    assert process.returncode == 130, err
    assert "the script started" not in out and "Exception ignored" not in err, err
    (summary,) = RunHistory().summaries()
    assert summary.status == "cancelled"
    recorded = RunHistory().events(summary.run_id)
    assert [e.status for e in recorded if isinstance(e, events.JobFinished)] == ["cancelled"]
