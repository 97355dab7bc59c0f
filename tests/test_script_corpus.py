"""Scripts written as users write them (tests/scripts_corpus), each run bare (`python script.py`) and through
`tf-device-panel run script`, with the default profile and with 2 logical CPUs: stdout byte for byte on the
CLI, stdout and stderr byte for byte in the run record, stderr byte for byte on the CLI once the panel's own
lines are taken out, and the same exit status.

Normalised, and nothing else: what TensorFlow's import and its first look at the devices print in the bare
run's stderr (through the panel both happen before the script, on the panel's own lines, shown with
--verbose), the time and thread of each line of TensorFlow's C++ log, and, for the graph error, TensorFlow's
node numbering and timings. TensorFlow's C++ log during the script is on the script's stderr, as bare."""

from __future__ import annotations

import itertools
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import ROOT, run_cli_bytes
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


def user_environment(unbuffered: bool = False) -> dict[str, str]:
    """As a user's shell has it: stdout buffered by blocks into a pipe (or, `unbuffered`, with PYTHONUNBUFFERED=1,
    as many containers set it: Python's streams and C's stdio unbuffered)."""
    environment = {name: value for name, value in os.environ.items() if name != "PYTHONUNBUFFERED"}
    return {**environment, "PYTHONUNBUFFERED": "1"} if unbuffered else environment


def bare(args: list[str], cwd: Path, cpp_log: bool = True, unbuffered: bool = False) -> tuple[int, bytes, bytes]:
    """`cpp_log`: the script's TensorFlow C++ log is kept, but for what TensorFlow's import printed."""
    done = subprocess.run([PYTHON, *args], cwd=cwd, capture_output=True, timeout=120, stdin=subprocess.DEVNULL,
                          env=user_environment(unbuffered))
    return done.returncode, done.stdout, (IMPORT_LOG if cpp_log else CPP_LOG).sub(b"", done.stderr)


def without_times(data: bytes) -> bytes:
    """The time and thread id of each line of TensorFlow's C++ log taken out."""
    return re.sub(rb"^([IWEF]\d{4}) [\d:. ]+ \d+ ", rb"\1 ", data, flags=re.M)


def cli_arguments(args: list[str], config: Path | None) -> list[str]:
    """`tf-device-panel run script` for `python ARGS`."""
    argv = ["run", "script", "-p", f"path={args[0]}"]
    if args[1:]:
        argv += ["-p", "args=" + shlex.join(args[1:])]
    return argv + (["--config", str(config)] if config is not None else [])


def through_panel(args: list[str], cwd: Path, config: Path | None,
                  unbuffered: bool = False) -> tuple[int, bytes, bytes, bytes, bytes]:
    """(status, CLI stdout, CLI stderr without the panel's lines, the record's stdout, the record's stderr).

    The command line's `main()` runs in this process, in the user's environment: its run process forks from
    the test worker's zygote (one for each value of PYTHONUNBUFFERED, which Python reads as it starts) instead
    of importing TensorFlow cold, as a command line started by hand does (`test_a_command_line_of_its_own`
    below runs one of these cases that way)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.delenv("PYTHONUNBUFFERED", raising=False)
        if unbuffered:
            patch.setenv("PYTHONUNBUFFERED", "1")
        status, out, err = run_cli_bytes(cli_arguments(args, config), cwd, patch)
    return status, out, PANEL_LINE.sub(b"", err), *recorded_output()


def by_hand(args: list[str], cwd: Path, config: Path | None,
            unbuffered: bool = False) -> tuple[int, bytes, bytes, bytes, bytes]:
    """As `through_panel`, the command line started as a process of its own (`python -m tf_device_panel`):
    its run process imports TensorFlow itself."""
    command = [sys.executable, "-m", "tf_device_panel", *cli_arguments(args, config)]
    env = {**user_environment(unbuffered), "PYTHONPATH": str(ROOT)}
    done = subprocess.run(command, cwd=cwd, capture_output=True, timeout=180, env=env)
    return done.returncode, done.stdout, PANEL_LINE.sub(b"", done.stderr), *recorded_output()


def recorded_output() -> tuple[bytes, bytes]:
    """The script's stdout and stderr as the newest run's record keeps them."""
    history = RunHistory()
    run_id = history.summaries(limit=1)[0].run_id
    recorded = {"stdout": b"", "stderr": b""}
    for event in history.events(run_id):
        if isinstance(event, Log) and event.source == "script" and event.raw is not None:
            recorded[event.stream] += event.raw
    return recorded["stdout"], recorded["stderr"]


@pytest.fixture(scope="module")
def two_cpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("profile") / "two-cpus.json"
    path.write_text(json.dumps({"version": 1, "cpu_devices": 2}))
    return path


@pytest.fixture(scope="module")
def no_placement_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("profile") / "no-placement-log.json"
    path.write_text(json.dumps({"version": 1, "log_placement": False}))
    return path


def compare(args: list[str], cwd: Path, config: Path | None, normalise=lambda data: data,
            cpp_log: bool = True, unbuffered: bool = False, panel=through_panel) -> None:
    status, out, err = bare(args, cwd, cpp_log, unbuffered)
    panel_status, panel_out, panel_err, record_out, record_err = panel(args, cwd, config, unbuffered)
    normalise = (lambda given: lambda data: without_times(given(data)))(normalise)
    assert panel_status == status, panel_err.decode(errors="replace")
    assert normalise(panel_out) == normalise(out)
    assert normalise(record_out) == normalise(out)
    assert normalise(record_err) == normalise(err)
    # The panel's lines follow a last piece without a line end on a line of their own: only that is added.
    assert normalise(panel_err) in (normalise(err), normalise(err) + b"\n")


@pytest.mark.parametrize("method", ["spawn", "forkserver", "fork"])
def test_a_pool_returns_the_scripts_own_classes_under_every_start_method(method: str) -> None:
    compare(["mp_pool.py", method], CORPUS, None)


@pytest.mark.parametrize("script, profile", [
    # Each script once in the quick suite, both profiles among them; the slow suite runs the other three.
    pytest.param(script, profile, id=f"{script}-{profile}",
                 marks=[] if (index + column) % 2 else [pytest.mark.slow])
    for index, script in enumerate(["bytes_exact.py", "interleave.py", "os_exit.py"])
    for column, profile in enumerate(["default", "two-cpus"])])
def test_bytes_order_and_end_are_as_bare(script: str, profile: str, two_cpus: Path) -> None:
    compare([script], CORPUS, two_cpus if profile == "two-cpus" else None)


@pytest.mark.parametrize("profile", ["default", "two-cpus"])
def test_tensorflows_python_log_and_warnings_print_as_bare_and_placements_stay_the_panels(profile: str,
                                                                                         two_cpus: Path) -> None:
    # MirroredStrategy's INFO line differs with the devices, so the bare run makes the same ones.
    compare(["tf_logs.py"], CORPUS, two_cpus if profile == "two-cpus" else None)


def test_a_graph_errors_defined_at_stack_and_traceback_show_the_scripts_frames_only() -> None:
    def normalise(data: bytes) -> bytes:
        # and the line TensorFlow's teardown logs at a bare run's exit (the panel skips that teardown)
        data = re.sub(rb"^W\d{4} .* local_rendezvous.cc:\d+\] Local rendezvous is aborting with status: ABORTED: "
                      rb"Shutdown\n", b"", data, flags=re.M)
        return re.sub(rb"__inference_take_\d+|node [\w/]+ defined at", b"N", data)

    compare(["graph_error.py"], CORPUS, None, normalise)


def test_file_argv_handler_and_buffering_as_bare_with_dots_in_the_path(tmp_path: Path) -> None:
    folder = tmp_path / "work"
    shutil.copytree(CORPUS, folder / "corpus")
    compare(["./corpus/sub/../sub/where.py", "a b", "--flag"], folder, None)


def test_a_script_that_turns_placement_logging_on_sees_tensorflows_lines_as_bare() -> None:
    compare(["own_placement_log.py"], CORPUS, None)


def pairwise(**factors: list[str]) -> list[object]:
    """Every combination of three two-valued factors; the four of even parity (in which each pair of values of
    any two factors still meets) run in the quick suite, the other four are marked slow: each costs two
    TensorFlow processes, and the slow suite runs them all."""
    assert len(factors) == 3 and all(len(values) == 2 for values in factors.values())
    params: list[object] = []
    for indices in itertools.product((0, 1), repeat=3):
        values = [options[index] for options, index in zip(factors.values(), indices, strict=True)]
        params.append(pytest.param(*values, id="-".join(values), marks=[pytest.mark.slow] if sum(indices) % 2 else []))
    return params


@pytest.mark.parametrize("end, profile, buffering",
                         pairwise(end=["", "os_exit"], profile=["default", "no-placement-log"],
                                  buffering=["blocks", "unbuffered"]))
def test_placement_lines_the_script_turned_on_come_as_bare_and_os_exit_loses_what_bare_loses(
        end: str, profile: str, buffering: str, no_placement_log: Path) -> None:
    # Bare into a pipe, the echo on C's stdout waits in C's buffer for the exit (os._exit loses it); with
    # PYTHONUNBUFFERED=1 it comes right after the op, before what the script prints next, and os._exit keeps it.
    # The C++ log lines on stderr come right after the op either way.
    compare(["placement_echo.py", *([end] if end else [])], CORPUS,
            no_placement_log if profile == "no-placement-log" else None, unbuffered=buffering == "unbuffered")


@pytest.mark.parametrize("end, profile, buffering",
                         pairwise(end=["", "exit"], profile=["default", "no-placement-log"],
                                  buffering=["blocks", "unbuffered"]))
def test_c_stdio_is_the_scripts_own_in_order_and_buffered_as_bare(end: str, profile: str, buffering: str,
                                                                  no_placement_log: Path) -> None:
    # The default profile logs placements (C's stdout then leaves TensorFlow's echo out at each flush); the
    # other gives the script C's own stdout untouched.
    compare(["c_stdio.py", *([end] if end else [])], CORPUS,
            no_placement_log if profile == "no-placement-log" else None, unbuffered=buffering == "unbuffered")


@pytest.mark.parametrize("order", ["before", "after"])
def test_tensorflows_logger_is_as_its_import_leaves_it(order: str) -> None:
    # basicConfig before the import: no handler of TensorFlow's, each warning once; after: twice, as bare.
    def normalise(data: bytes) -> bytes:  # the traced function's address
        return re.sub(rb"0x[0-9a-f]+", b"0x...", data)

    compare(["logging_order.py", order], CORPUS, None, normalise)


def test_a_v1_sessions_placement_log_under_the_profiles_is_the_panels() -> None:
    compare(["session_v1.py"], CORPUS, None)


def test_no_frame_of_the_panels_is_under_the_script() -> None:
    compare(["frames.py"], CORPUS, None)


def test_the_recursion_limit_is_the_interpreters_until_the_script_imports_tensorflow() -> None:
    compare(["recursion_limit.py"], CORPUS, None)


def test_a_command_line_of_its_own() -> None:
    """The command line as a user starts it, its run process importing TensorFlow itself (no zygote): the
    cases above run its `main()` in the test's process."""
    compare(["os_exit.py"], CORPUS, None, panel=by_hand)
