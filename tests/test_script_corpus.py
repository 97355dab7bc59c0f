"""Scripts written as users write them (tests/scripts_corpus), each run bare (`python script.py`) and through
`tf-device-panel run script`, with the default profile and with 2 logical CPUs: stdout byte for byte on the
CLI, stdout and stderr byte for byte in the run record, stderr byte for byte on the CLI once the panel's own
lines are taken out, and the same exit status.

Normalised, and nothing else: TensorFlow's C++ log lines in the bare run's stderr (`I0000 …` and the lines
around them; through the panel TensorFlow is imported before the script, and its C++ log goes to the panel's
own lines, shown with --verbose) and, for the graph error, TensorFlow's node numbering and timings."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import ROOT
from tf_device_panel.core.client.history import RunHistory
from tf_device_panel.core.protocol.events import Log

CORPUS = Path(__file__).parent / "scripts_corpus"
PYTHON = os.path.join(os.path.dirname(sys.executable), "python")  # as a user types it: `python script.py`
CPP_LOG = re.compile(rb"^(?:[IWEF]\d{4} \d\d:\d\d:[\d.]+ +\d+ \S+:\d+\] .*\n(?:\t.*\n)*"  # and its continuation
                     rb"|WARNING: All log messages before absl::InitializeLog\(\) is called are written to STDERR\n"
                     rb"|To enable the following instructions: .*\n)", re.M)
# What TensorFlow's import and its first look at the devices print (through the panel, both happen before the
# script starts: the profile lists the physical devices).
IMPORT_LOG = re.compile(rb"^(?:[IWEF]\d{4} [\d:. ]+ \d+ (?:port|cudart_stub|cpu_feature_guard|cuda_platform)"
                        rb"\.cc:\d+\] .*\n"
                        rb"|WARNING: All log messages before absl::InitializeLog\(\) is called are written to STDERR\n"
                        rb"|To enable the following instructions: .*\n)", re.M)
# The panel's own lines on the CLI's stderr (progress, readiness, placements, fallbacks, the end).
PANEL_LINE = re.compile(rb"^(?:\xe2\x80\xa6 .*|runtime ready: .*|  placed .*|  \xe2\x9a\xa0 .*|result: .*|"
                        rb"placements: .*|status: .*|error: .*|runtime exited .*)\n", re.M)


def user_environment() -> dict[str, str]:
    """As a user's shell has it: stdout buffered by blocks into a pipe."""
    return {name: value for name, value in os.environ.items() if name != "PYTHONUNBUFFERED"}


def bare(args: list[str], cwd: Path, cpp_log: bool = False) -> tuple[int, bytes, bytes]:
    """`cpp_log`: the script's TensorFlow C++ log is kept, but for what TensorFlow's import printed."""
    done = subprocess.run([PYTHON, *args], cwd=cwd, capture_output=True, timeout=120, stdin=subprocess.DEVNULL,
                          env=user_environment())
    return done.returncode, done.stdout, (IMPORT_LOG if cpp_log else CPP_LOG).sub(b"", done.stderr)


def through_panel(args: list[str], cwd: Path, config: Path | None) -> tuple[int, bytes, bytes, bytes, bytes]:
    """(status, CLI stdout, CLI stderr without the panel's lines, the record's stdout, the record's stderr)."""
    command = [sys.executable, "-m", "tf_device_panel", "run", "script", "-p", f"path={args[0]}"]
    if args[1:]:
        command += ["-p", "args=" + shlex.join(args[1:])]
    if config is not None:
        command += ["--config", str(config)]
    env = {**user_environment(), "PYTHONPATH": str(ROOT)}
    done = subprocess.run(command, cwd=cwd, capture_output=True, timeout=180, env=env)
    history = RunHistory()
    run_id = history.summaries(limit=1)[0].run_id
    recorded = {"stdout": b"", "stderr": b""}
    for event in history.events(run_id):
        if isinstance(event, Log) and event.source == "script" and event.raw is not None:
            recorded[event.stream] += event.raw
    return done.returncode, done.stdout, PANEL_LINE.sub(b"", done.stderr), recorded["stdout"], recorded["stderr"]


@pytest.fixture(scope="module")
def two_cpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("profile") / "two-cpus.json"
    path.write_text(json.dumps({"version": 1, "cpu_devices": 2}))
    return path


def compare(args: list[str], cwd: Path, config: Path | None, normalise=lambda data: data,
            cpp_log: bool = False) -> None:
    status, out, err = bare(args, cwd, cpp_log)
    panel_status, panel_out, panel_err, record_out, record_err = through_panel(args, cwd, config)
    assert panel_status == status, panel_err.decode(errors="replace")
    assert normalise(panel_out) == normalise(out)
    assert normalise(record_out) == normalise(out)
    assert normalise(record_err) == normalise(err)
    # The panel's lines follow a last piece without a line end on a line of their own: only that is added.
    assert normalise(panel_err) in (normalise(err), normalise(err) + b"\n")


@pytest.mark.parametrize("method", ["spawn", "forkserver", "fork"])
def test_a_pool_returns_the_scripts_own_classes_under_every_start_method(method: str) -> None:
    compare(["mp_pool.py", method], CORPUS, None)


@pytest.mark.parametrize("profile", ["default", "two-cpus"])
@pytest.mark.parametrize("script", ["bytes_exact.py", "interleave.py", "os_exit.py"])
def test_bytes_order_and_end_are_as_bare(script: str, profile: str, two_cpus: Path) -> None:
    compare([script], CORPUS, two_cpus if profile == "two-cpus" else None)


@pytest.mark.parametrize("profile", ["default", "two-cpus"])
def test_tensorflows_python_log_and_warnings_print_as_bare_and_placements_stay_the_panels(profile: str,
                                                                                         two_cpus: Path) -> None:
    # MirroredStrategy's INFO line differs with the devices, so the bare run makes the same ones.
    compare(["tf_logs.py"], CORPUS, two_cpus if profile == "two-cpus" else None)


def test_a_graph_errors_defined_at_stack_and_traceback_show_the_scripts_frames_only() -> None:
    def normalise(data: bytes) -> bytes:
        return re.sub(rb"__inference_take_\d+|node [\w/]+ defined at", b"N", data)

    compare(["graph_error.py"], CORPUS, None, normalise)


def test_file_argv_handler_and_buffering_as_bare_with_dots_in_the_path(tmp_path: Path) -> None:
    folder = tmp_path / "work"
    shutil.copytree(CORPUS, folder / "corpus")
    compare(["./corpus/sub/../sub/where.py", "a b", "--flag"], folder, None)


def test_a_script_that_turns_placement_logging_on_sees_tensorflows_lines_as_bare() -> None:
    def normalise(data: bytes) -> bytes:  # the time and thread id of each C++ log line
        return re.sub(rb"^([IWEF]\d{4}) [\d:. ]+ \d+ ", rb"\1 ", data, flags=re.M)

    compare(["own_placement_log.py"], CORPUS, None, normalise, cpp_log=True)
