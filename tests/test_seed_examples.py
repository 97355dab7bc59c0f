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

import hashlib
import importlib.metadata
import json
import os
import platform
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from helpers import ROOT, run_cli
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
    params: list[object] = []
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


def run(argv: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run to the end; the output decoded as it was written (text=True would turn each `\r` into a new line)."""
    done = subprocess.run(argv, cwd=cwd, capture_output=True, timeout=300, stdin=subprocess.DEVNULL,
                          env={**os.environ, "PYTHONHASHSEED": "0"})
    return subprocess.CompletedProcess(argv, done.returncode, done.stdout.decode("utf-8", "replace"),
                                       done.stderr.decode("utf-8", "replace"))


def prepared(example: Path, variant: str) -> tuple[str, dict[str, object]]:
    """(the example's source as it runs in this variant, its profile)."""
    found = options(example)
    profile = dict(found["profile"])  # type: ignore[call-overload]
    source = example.read_text(encoding="utf-8")
    if variant == "logical-cpus":
        source = on_logical_cpus(source)
    elif variant == "soft-placement-off":
        profile["soft_placement"] = False
    return source, profile


def bare_source(example: Path, variant: str) -> str:
    """What `python file.py` runs: the example with its profile's snippet pasted at its top."""
    source, profile = prepared(example, variant)
    return with_prelude(source, to_python_snippet(DeviceConfig.from_json({"version": 1, **profile})))


def bare_facts(example: Path, variant: str, folder: Path) -> dict[str, object]:
    """Run the example bare in `folder`: what the panel's run must match (its exit status, its standard output as
    a terminal shows it, Python's last line for an error, the placements TensorFlow logged)."""
    script = folder / example.name
    script.write_text(bare_source(example, variant), encoding="utf-8")
    bare = run([sys.executable, script.name], folder)
    volatile = bool(options(example)["volatile"])
    lines, placed = split_output(bare.stdout, "stdout", volatile)
    _, stderr_placed = split_output(bare.stderr, "stderr", volatile)
    placed += stderr_placed
    return {"status": 128 - bare.returncode if bare.returncode < 0 else bare.returncode, "stdout": lines,
            "last_stderr_line": bare.stderr.strip().splitlines()[-1] if bare.returncode != 0 else None,
            "placed": sorted([op, device, count] for (op, device), count in placed.items()),
            "stderr_tail": bare.stderr[-3000:] if bare.returncode != 0 else ""}


# The bare runs, recorded: each costs a TensorFlow import (~4.5 s of CPU on a 2-core machine, half the suite's
# seed time), and what they print does not change until the example, TensorFlow or Python does. The recording
# names all three; the test runs the example bare itself when one differs, and the slow suite runs every example
# bare again and checks its recording (`python tests/test_seed_examples.py` records them afresh).
RECORDINGS = ROOT / "tests" / "seed_examples" / "recorded_bare_runs.json"


def tensorflow_version() -> str:
    """The installed TensorFlow's version, read without importing it (whichever distribution installed it)."""
    for distribution in ("tensorflow", "tensorflow-cpu", "tf-nightly"):
        try:
            return importlib.metadata.version(distribution)
        except importlib.metadata.PackageNotFoundError:
            continue
    return "unknown"


def recording_key(example: Path, variant: str) -> dict[str, str]:
    return {"source_sha256": hashlib.sha256(bare_source(example, variant).encode()).hexdigest(),
            "tensorflow": tensorflow_version(), "python": platform.python_version()}


def case_id(example: Path, variant: str) -> str:
    return f"{example.stem}[{variant}]"


def recorded(example: Path, variant: str) -> dict[str, object] | None:
    """The recorded bare run of this case, when it was recorded from the same source, TensorFlow and Python."""
    if not RECORDINGS.exists():
        return None
    entry = json.loads(RECORDINGS.read_text(encoding="utf-8")).get(case_id(example, variant))
    if entry is None or entry["key"] != recording_key(example, variant):
        return None
    return dict(entry["facts"])


def recordable() -> list[tuple[Path, str]]:
    """Every case that runs everywhere (a GPU example as written runs on a GPU host only, and bare there)."""
    return [(param.values[0], param.values[1]) for param in cases()  # type: ignore[attr-defined]
            if param.values[1] != "as-written" or not options(param.values[0])["gpu"]]  # type: ignore[attr-defined]


@pytest.mark.parametrize("example, variant", cases())
def test_a_seed_example_runs_in_the_panel_as_it_runs_bare(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                           example: Path, variant: str) -> None:
    found = options(example)
    source, profile = prepared(example, variant)
    if variant == "as-written" and found["gpu"]:
        nvml = Nvml()
        if not nvml.init() or not nvml.gpus():
            pytest.skip(f"needs a real NVIDIA GPU and driver ({nvml.message or 'no GPU'})")
    (tmp_path / "profile.json").write_text(json.dumps({"version": 1, **profile}))
    script = tmp_path / example.name

    script.write_text(source, encoding="utf-8")
    argv = ["run", "script", "-p", f"path={script.name}", "--config", "profile.json"]
    if variant == "soft-placement-off":  # the whole command line, a process of its own
        panel = run([sys.executable, "-m", "tf_device_panel", *argv], tmp_path)
    else:
        panel = run_cli(argv, tmp_path, monkeypatch)
    bare = recorded(example, variant) or bare_facts(example, variant, tmp_path)

    bare_tail = bare.get("stderr_tail", "(a recorded run)")
    assert panel.returncode == bare["status"], f"bare:\n{bare_tail}\npanel:\n{panel.stderr[-3000:]}"
    panel_lines, _ = split_output(panel.stdout, "stdout", bool(found["volatile"]))
    assert panel_lines == bare["stdout"]
    if bare["last_stderr_line"] is not None:  # the same error, as Python words it
        assert bare["last_stderr_line"] in panel.stderr.splitlines(), panel.stderr[-3000:]
    (summary,) = RunHistory().summaries()
    panel_placed = sorted([op, device, count] for op, device, count in summary.placement_counts)
    assert panel_placed == bare["placed"]


@pytest.mark.slow
@pytest.mark.parametrize("example, variant", [pytest.param(*case, id=case_id(*case)) for case in recordable()])
def test_each_recorded_bare_run_is_what_python_prints_now(tmp_path: Path, example: Path, variant: str) -> None:
    entry = json.loads(RECORDINGS.read_text(encoding="utf-8")).get(case_id(example, variant))
    assert entry is not None, "not recorded: run `python tests/test_seed_examples.py`"
    key = recording_key(example, variant)
    if (entry["key"]["tensorflow"], entry["key"]["python"]) != (key["tensorflow"], key["python"]):
        pytest.skip(f"recorded under TensorFlow {entry['key']['tensorflow']} and Python {entry['key']['python']}: "
                    "here the seed test runs every example bare itself")
    assert entry["key"] == key, "the example changed since it was recorded: run `python tests/test_seed_examples.py`"
    now = bare_facts(example, variant, tmp_path)
    now.pop("stderr_tail")
    assert now == entry["facts"]


def record_all() -> None:
    """Run every recordable case bare (twice: a recording must not differ from one run to the next) and write
    RECORDINGS."""
    import tempfile

    recordings: dict[str, object] = {}
    for example, variant in recordable():
        runs = []
        for _ in range(2):
            with tempfile.TemporaryDirectory() as folder:
                facts = bare_facts(example, variant, Path(folder))
            runs.append({name: value for name, value in facts.items() if name != "stderr_tail"})
        if runs[0] != runs[1]:
            raise SystemExit(f"{case_id(example, variant)}: two bare runs differ, so it cannot be recorded")
        recordings[case_id(example, variant)] = {"key": recording_key(example, variant), "facts": runs[0]}
        print(case_id(example, variant), "recorded", flush=True)
    RECORDINGS.write_text(json.dumps(recordings, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")


if __name__ == "__main__":
    record_all()
