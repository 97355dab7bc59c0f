"""The seeds as the test: every code example of the five seed documents (tests/seed_examples/, one file each)
runs bare (`python file.py`, the profile's snippet pasted at its top) and through `tf-device-panel run script`
under that profile, and both must print the same standard output (up to memory addresses and device
incarnations; for the training examples, up to the numbers that change from run to run: losses from random
initial weights, step times), end with the same exit status and, where TensorFlow logs placements, place the
same ops on the same devices.

An example's `# panel-test:` line says what it needs: `profile={...}` (the configuration, default `{}`),
`gpu=true` (it configures or uses GPUs: on a GPU host it runs as written, marked `gpu`; everywhere it also runs
on logical CPUs, its 'GPU' device type read as 'CPU' and its memory limits dropped, since TensorFlow refuses a
memory limit on a CPU), `volatile=true`, `slow=true` (Keras or strategy set-up: several seconds each).
accel_keras_fit runs with placement logging off: bare, TensorFlow's C++ echo of each placement shares fd 1 with
Keras's progress bar and, flushed at its stdio buffer's boundaries, cuts the bar's lines apart (in the panel
the script's output has a channel of its own), so bare and panel could not be compared line by line.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import ROOT
from tf_device_panel.core import cli
from tf_device_panel.core.client.history import RunHistory
from tf_device_panel.core.config import DeviceConfig, to_python_snippet
from tf_device_panel.core.devices.nvml import Nvml
from tf_device_panel.core.protocol import output_lines
from tf_device_panel.core.protocol.streams import visible_text

EXAMPLES = sorted((ROOT / "tests" / "seed_examples").glob("*.py"))
_OPTION = re.compile(r"(\w+)=(\{.*?\}|\S+)")


def options(example: Path) -> dict[str, object]:
    found: dict[str, object] = {"profile": {}, "gpu": False, "volatile": False, "slow": False}
    for line in example.read_text(encoding="utf-8").splitlines():
        if line.startswith("# panel-test:"):
            for key, value in _OPTION.findall(line):
                found[key] = json.loads(value)
    return found


def on_logical_cpus(source: str) -> str:
    """A GPU example as it runs on logical CPUs: the same calls with the CPU device type, no memory limits."""
    source = re.sub(r"(['\"])GPU\1", r"\1CPU\1", source)
    source = re.sub(r"(['\"])/gpu:", r"\1/cpu:", source)
    return source.replace("memory_limit=1024", "")


def cases() -> list[object]:
    params = []
    for example in EXAMPLES:
        found = options(example)
        marks = [pytest.mark.slow] if found["slow"] else []
        if found["gpu"]:
            params.append(pytest.param(example, "logical-cpus", id=f"{example.stem}[logical CPUs]", marks=marks))
            params.append(pytest.param(example, "as-written", id=f"{example.stem}[GPU]", marks=[pytest.mark.gpu]))
        else:
            params.append(pytest.param(example, "as-written", id=example.stem, marks=marks))
    # The seeds' point about soft placement, both ways: /device:GPU:2 under a profile that turns it off.
    params.append(pytest.param(ROOT / "tests" / "seed_examples" / "tf2gpu_3_invalid_gpu2.py", "soft-placement-off",
                               id="tf2gpu_3_invalid_gpu2[soft placement off]"))
    return params


_ADDRESS = re.compile(r"0x[0-9a-fA-F]+")
_PLACER_ECHO = re.compile(r"[A-Za-z_][\w/.-]*: \(\w+\): /job:\S+\n")
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_INCARNATION = re.compile(r"incarnation: \d+")
_NUMBER = re.compile(r"\d+(?:\.\d+)?(?:e[-+]?\d+)?")


def split_output(text: str, stream: str, volatile: bool) -> tuple[list[str], Counter[tuple[str, str]]]:
    """(the lines a terminal shows, placements excepted and normalized; the placements TensorFlow logged)."""
    lines, placed = [], Counter[tuple[str, str]]()
    if stream == "stdout":
        # Bare, TensorFlow's C++ echo of a placement shares fd 1 with the script and lands inside a line the
        # script has not finished (a progress bar); in the panel the script's lines are its own.
        text = _PLACER_ECHO.sub("", text)
    for raw in text.split("\n"):
        # What a terminal shows of a line a progress bar redraws: backspaces and `\r` rewind, colours go
        line = visible_text(raw.replace("\b", "").encode()).decode().rstrip("\r")
        line = _ANSI.sub("", line) if volatile else line
        kind, found = output_lines.parse_line(line, stream)
        if found is not None:
            placed[(found.op_type, found.short_device)] += 1
        if kind == output_lines.PLACEMENT or (stream == "stderr" and kind != output_lines.OUTPUT):
            continue  # TensorFlow's own log: where C stdio flushes it differs by buffering, not by what ran
        line = _INCARNATION.sub("incarnation: N", _ADDRESS.sub("0x…", line))
        if volatile:
            line = _NUMBER.sub("N", line).strip()
        if line:
            lines.append(line)
    return lines, placed


def with_prelude(source: str, prelude: str) -> str:
    """`prelude` pasted at the top, after any `from __future__` imports (which must come first)."""
    lines = source.splitlines(keepends=True)
    cut = max((i + 1 for i, line in enumerate(lines) if line.startswith("from __future__")), default=0)
    return "".join(lines[:cut]) + prelude + "\n" + "".join(lines[cut:])


@contextlib.contextmanager
def caught_streams() -> Iterator[tuple[io.BytesIO, io.BytesIO]]:
    """sys.stdout and sys.stderr as byte buffers (what the command line writes through their `.buffer` too)."""
    out, err = io.BytesIO(), io.BytesIO()
    streams = (io.TextIOWrapper(out, encoding="utf-8", errors="surrogateescape", write_through=True),
               io.TextIOWrapper(err, encoding="utf-8", errors="surrogateescape", write_through=True))
    with contextlib.redirect_stdout(streams[0]), contextlib.redirect_stderr(streams[1]):
        yield out, err


def run_panel(argv: list[str], cwd: Path, monkeypatch: pytest.MonkeyPatch) -> subprocess.CompletedProcess[str]:
    """`tf-device-panel ARGV` in this process, in `cwd`: its exit status and what it wrote."""
    monkeypatch.chdir(cwd)
    with caught_streams() as (out, err):
        status = cli.main(argv)
    return subprocess.CompletedProcess(argv, status, out.getvalue().decode("utf-8", "replace"),
                                       err.getvalue().decode("utf-8", "replace"))


def run(argv: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run to the end; the output decoded as it was written (text=True would turn each `\r` into a new line)."""
    done = subprocess.run(argv, cwd=cwd, capture_output=True, timeout=300, stdin=subprocess.DEVNULL,
                          env={**os.environ, "PYTHONHASHSEED": "0"})
    return subprocess.CompletedProcess(argv, done.returncode, done.stdout.decode("utf-8", "replace"),
                                       done.stderr.decode("utf-8", "replace"))


@pytest.mark.parametrize("example, variant", cases())
def test_a_seed_example_runs_in_the_panel_as_it_runs_bare(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                           example: Path, variant: str) -> None:
    found = options(example)
    profile = dict(found["profile"])  # type: ignore[call-overload]
    source = example.read_text(encoding="utf-8")
    if variant == "logical-cpus":
        source = on_logical_cpus(source)
    elif variant == "soft-placement-off":
        profile["soft_placement"] = False
    elif found["gpu"]:
        nvml = Nvml()
        if not nvml.init() or not nvml.gpus():
            pytest.skip(f"needs a real NVIDIA GPU and driver ({nvml.message or 'no GPU'})")
    config = DeviceConfig.from_json({"version": 1, **profile})
    (tmp_path / "profile.json").write_text(json.dumps({"version": 1, **profile}))
    script = tmp_path / example.name

    script.write_text(source, encoding="utf-8")
    argv = ["run", "script", "-p", f"path={script.name}", "--config", "profile.json"]
    if variant == "soft-placement-off":  # the whole command line, a process of its own
        panel = run([sys.executable, "-m", "tf_device_panel", *argv], tmp_path)
    else:
        panel = run_panel(argv, tmp_path, monkeypatch)
    script.write_text(with_prelude(source, to_python_snippet(config)), encoding="utf-8")
    bare = run([sys.executable, script.name], tmp_path)

    bare_status = 128 - bare.returncode if bare.returncode < 0 else bare.returncode
    assert panel.returncode == bare_status, f"bare:\n{bare.stderr[-3000:]}\npanel:\n{panel.stderr[-3000:]}"
    volatile = bool(found["volatile"])
    panel_lines, _ = split_output(panel.stdout, "stdout", volatile)
    bare_lines, bare_placed = split_output(bare.stdout, "stdout", volatile)
    assert panel_lines == bare_lines
    if bare.returncode != 0:  # the same error, as Python words it
        last = bare.stderr.strip().splitlines()[-1]
        assert last in panel.stderr.splitlines(), panel.stderr[-3000:]
    _, stderr_placed = split_output(bare.stderr, "stderr", volatile)
    bare_placed += stderr_placed
    (summary,) = RunHistory().summaries()
    panel_placed = Counter({(op, device): count for op, device, count in summary.placement_counts})
    assert panel_placed == bare_placed
