"""A user's script through `tf-device-panel run script` behaves as `python file.py` would: main thread, signal
handlers, atexit, exit status, its own traceback, fresh module state and folder, closed stdin, and nothing it
starts outlives the run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from helpers import ROOT, process_gone, wait_until
from tf_device_panel.core.config import DeviceConfig
from tf_device_panel.core.history import RunHistory
from tf_device_panel.core.session import run_job_once


def write(tmp_path: Path, body: str, name: str = "user_script.py") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(body))
    return path


def run_cli(script: Path, *extra: str, **popen: object) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "tf_device_panel", "run", "script", "-p", f"path={script}", *extra],
                            cwd=ROOT, text=True, env=os.environ.copy(), **popen)  # type: ignore[call-overload]


def cli(script: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    process = run_cli(script, *extra, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = process.communicate(timeout=180)
    return subprocess.CompletedProcess(process.args, process.returncode, out, err)


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
        if event.type == "log" and event.data.get("kind") == "output":
            seen.extend(event.data["text"].split("\n"))

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
        process = run_cli(write(tmp_path, CHILDREN), "-p", "args=--wait", stdout=sink, stderr=subprocess.STDOUT)
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
        assert RunHistory().summaries()[0]["status"] == "cancelled"
