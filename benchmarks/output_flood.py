"""1M short lines through `tf-device-panel run script` (stdout to /dev/null, the run record kept) against the
same script run bare, and the CLI's peak resident memory meanwhile, in the two ways a script writes:

- block-buffered, Python's default when stdout is not a terminal: compared with the bare script writing to
  /dev/null (target ≤ 1.25);
- line by line (`PYTHONUNBUFFERED=1`, as a terminal's line buffering writes): one write per line, so the bare
  script writing into a pipe is the comparison (target ≤ 1.25); each write into a pipe costs more than one
  into /dev/null whoever reads it, so the ratio against /dev/null is printed but cannot be a target for a run
  whose output is read.

Also printed: the CLI's whole wall time (it includes starting a process and importing TensorFlow, which the
CLI cannot have warm) against a bare script that imports TensorFlow first. Modes alternate, `--repeat` each.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
from figures import report, spread

SCRIPT = "for i in range(1_000_000):\n    print(f'line {i}')\n"


def environment(line_by_line: bool) -> dict[str, str]:
    env = {name: value for name, value in os.environ.items() if name != "PYTHONUNBUFFERED"}
    return {**env, "PYTHONUNBUFFERED": "1"} if line_by_line else env


def bare_seconds(script: Path, line_by_line: bool = False, piped: bool = False) -> float:
    started = time.perf_counter()
    if piped:
        subprocess.run(f"{sys.executable} {script} | cat > /dev/null", shell=True, check=True,
                       env=environment(line_by_line))
    else:
        subprocess.run([sys.executable, str(script)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                       check=True, env=environment(line_by_line))
    return time.perf_counter() - started


def cli_run(script: Path, home: Path, line_by_line: bool = False) -> tuple[float, float, int]:
    """(CLI wall seconds, the run's own seconds, CLI peak RSS bytes)."""
    env = {**environment(line_by_line), "TF_DEVICE_PANEL_HOME": str(home)}
    started = time.perf_counter()
    process = subprocess.Popen([sys.executable, "-m", "tf_device_panel", "run", "script", "-p", f"path={script}",
                                "--json"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
    watched = psutil.Process(process.pid)
    peak = 0
    while process.poll() is None:
        try:
            peak = max(peak, watched.memory_info().rss)
        except psutil.NoSuchProcess:
            break
        time.sleep(0.05)
    out, _ = process.communicate()
    wall = time.perf_counter() - started
    report = json.loads(out)
    if report["status"] != "ok":
        raise RuntimeError(f"the run failed: {report['error']}")
    return wall, float(report["duration_s"]), peak


def main() -> None:
    parser = argparse.ArgumentParser()
    # A 0.5 s figure moved by a third from run to run on the busy 2-core VM (0.41–0.80 s bare): 9 of each.
    parser.add_argument("--repeat", type=int, default=9)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        script = Path(folder) / "flood.py"
        script.write_text(SCRIPT)
        with_tf = Path(folder) / "flood_tf.py"
        with_tf.write_text("import tensorflow\n" + SCRIPT)
        bare, bare_tf, wall, own, peak = [], [], [], [], []
        bare_lines, bare_lines_piped, own_lines = [], [], []
        for index in range(args.repeat):
            bare.append(bare_seconds(script))
            bare_tf.append(bare_seconds(with_tf))
            one_wall, one_own, one_peak = cli_run(script, Path(folder) / f"home-{index}")
            wall.append(one_wall)
            own.append(one_own)
            peak.append(one_peak)
            bare_lines.append(bare_seconds(script, line_by_line=True))
            bare_lines_piped.append(bare_seconds(script, line_by_line=True, piped=True))
            _, one_own, one_peak = cli_run(script, Path(folder) / f"lines-{index}", line_by_line=True)
            own_lines.append(one_own)
            peak.append(one_peak)
        record = max((Path(folder) / "home-0" / "runs").glob("*/output.txt"))
        base = statistics.median(bare)
        print(f"block-buffered: bare script to /dev/null {spread(bare, 2)} s, the run {spread(own, 2)} s")
        whole = statistics.median(wall)
        tf_base = statistics.median(bare_tf)
        print(f"block-buffered: run script, whole CLI: median {whole:.2f} s ({whole / tf_base:.2f} × a bare script "
              f"that imports TensorFlow first, median {tf_base:.2f} s)")
        print(f"line by line: bare to /dev/null {spread(bare_lines, 2)} s, bare into a pipe "
              f"{spread(bare_lines_piped, 2)} s, the run {spread(own_lines, 2)} s "
              f"({statistics.median(own_lines) / statistics.median(bare_lines):.2f} × bare to /dev/null)")
        report("1M short lines, block-buffered: the run ÷ bare to /dev/null", statistics.median(own) / base, 1.25,
               detail=f"the run {spread(own, 2)} s, bare {spread(bare, 2)} s")
        report("1M short lines, line by line: the run ÷ bare into a pipe",
               statistics.median(own_lines) / statistics.median(bare_lines_piped), 1.25,
               detail=f"the run {spread(own_lines, 2)} s, bare piped {spread(bare_lines_piped, 2)} s, "
                      f"bare to /dev/null {spread(bare_lines, 2)} s")
        report("CLI peak RSS, 1M short lines", max(peak) / 2**20, 150, unit="MB")
        raw = sum(len(f"line {i}\n") for i in range(1_000_000))  # the bytes the script prints
        report("record output ÷ the raw bytes, 1M short lines", record.stat().st_size / raw, 1.5)


if __name__ == "__main__":
    main()
