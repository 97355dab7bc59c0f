"""The panel's own import cost in a run process, TensorFlow's excluded.

A run process (`core.runproc.runtime_main`) imports TensorFlow and then its own modules. This runs
`python -X importtime -c "import tensorflow; import tf_device_panel.core.runproc.runtime_main"` and sums the
self-times of every module imported after TensorFlow: the panel's modules and whatever stdlib or third-party
module they pull in that TensorFlow had not already imported (one TensorFlow imported first costs nothing
here). Target: median ≤ 50 ms.

The panel's code is measured from a copy of this repository's (first on PYTHONPATH), in two states:
- as installed: its .pyc files written first, as pip writes them at install. The figure judged.
- compiled at every start: no .pyc files and none written, as in a checkout used with PYTHONDONTWRITEBYTECODE
  set. What such an environment adds to every run process (and every test that starts one).
"""

from __future__ import annotations

import argparse
import compileall
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from figures import report, spread

REPOSITORY = Path(__file__).resolve().parent.parent
RUN_PROCESS_MODULE = "tf_device_panel.core.runproc.runtime_main"
TARGET_MS = 50.0


def parse_importtime(stderr: str) -> list[tuple[str, float]]:
    """(module, self time in ms) for each module imported after `tensorflow` itself had finished importing.

    -X importtime writes one line per module as its import finishes ("import time: self | cumulative | name",
    the name indented by depth), so every line after top-level tensorflow's belongs to the second import."""
    after_tensorflow = False
    costs = []
    for line in stderr.splitlines():
        if not line.startswith("import time:"):
            continue
        self_us, _cumulative, name = line[len("import time:"):].split("|", 2)
        if not self_us.strip().isdigit():  # the header line
            continue
        if name == " tensorflow":
            after_tensorflow = True
        elif after_tensorflow:
            costs.append((name.strip(), int(self_us) / 1000))
    if not after_tensorflow:
        raise RuntimeError("no `tensorflow` line in -X importtime's output:\n" + stderr[-2000:])
    return costs


def copy_of_the_panel(root: Path) -> Path:
    """This repository's package as it installs (core/ and gui/ inside tf_device_panel/), without .pyc files."""
    package = root / "tf_device_panel"
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(REPOSITORY / "tf_device_panel", package, ignore=ignore)
    for part in ("core", "gui", "resources"):
        shutil.copytree(REPOSITORY / part, package / part, ignore=ignore)
    return root


def one_measurement(path: Path, compiled: bool) -> list[tuple[str, float]]:
    # An editable install's finder would take the checkout's package first: the copy is the one measured.
    code = ("import sys; sys.meta_path[:] = [f for f in sys.meta_path if not getattr(f, '__module__', '').startswith("
            "'__editable__')]; "
            f"import tensorflow; import {RUN_PROCESS_MODULE}; "
            f"assert {RUN_PROCESS_MODULE}.__file__.startswith({str(path)!r}), {RUN_PROCESS_MODULE}.__file__")
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONPATH": str(path), "PYTHONDONTWRITEBYTECODE": "1"}
    # From the copy's folder: `-c` puts the working folder first on the path, and a checkout's holds the bare
    # tf_device_panel/ (its core/ and gui/ beside it, not inside).
    done = subprocess.run([sys.executable, "-X", "importtime", "-c", code], capture_output=True, text=True, env=env,
                          cwd=path)
    if done.returncode != 0:
        raise RuntimeError(f"the run process's import failed:\n{done.stderr[-3000:]}")
    has_pyc = any((path / "tf_device_panel").rglob("*.pyc"))
    assert has_pyc == compiled, "the copy's .pyc files are not as this measurement needs"
    return parse_importtime(done.stderr)


def measure(path: Path, compiled: bool, repeat: int, top: int) -> float:
    one_measurement(path, compiled)  # warms the page cache
    totals = []
    per_module: dict[str, list[float]] = {}
    for _ in range(repeat):
        costs = one_measurement(path, compiled)
        totals.append(sum(ms for _, ms in costs))
        for name, ms in costs:
            per_module.setdefault(name, []).append(ms)
    state = "as installed (.pyc)" if compiled else "compiled at every start (no .pyc)"
    print(f"{state}: {len(per_module)} modules imported after TensorFlow; the dearest (median self-time):")
    for name, values in sorted(per_module.items(), key=lambda item: -statistics.median(item[1]))[:top]:
        print(f"  {statistics.median(values):7.2f} ms  {name}")
    print(f"{state}: the panel's imports after TensorFlow's: {spread(totals, 1)} ms")
    return statistics.median(totals)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--top", type=int, default=8, help="how many of the dearest modules to list")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="run-process-imports-") as tmp:
        path = copy_of_the_panel(Path(tmp))
        from_source = measure(path, False, args.repeat, args.top)
        compileall.compile_dir(path / "tf_device_panel", quiet=1)
        installed = measure(path, True, args.repeat, args.top)
    report("run process: the panel's imports after TensorFlow's", installed, TARGET_MS, unit="ms",
           detail=f"median of {args.repeat}, .pyc as installed; {from_source:.0f} ms compiled at every start")


if __name__ == "__main__":
    main()
