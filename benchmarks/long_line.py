"""One 200 MB line without a newline through `tf-device-panel run script` (stdout to /dev/null, the run record
kept) against the same script run bare, and the CLI's peak resident memory meanwhile.

Printed: the run's own time (job start → end, from its record) ÷ bare (target ≤ 2.0), the CLI's whole wall
time (it includes starting a process and importing TensorFlow), and the CLI's peak RSS (target ≤ 150 MB).
Before stream buffering was linear this run did not finish in 240 s and the CLI grew past 295 MB.
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

SCRIPT = "import sys\nchunk = 'x' * 65536\nfor _ in range({chunks}):\n    sys.stdout.write(chunk)\n"


def bare_seconds(script: Path) -> float:
    started = time.perf_counter()
    subprocess.run([sys.executable, str(script)], stdout=subprocess.DEVNULL, check=True)
    return time.perf_counter() - started


def bare_piped_seconds(script: Path) -> float:
    """The same script with its stdout a pipe (to `cat`), as the run's stdout is a pipe to the reader."""
    started = time.perf_counter()
    subprocess.run(f"{sys.executable} {script} | cat > /dev/null", shell=True, check=True)
    return time.perf_counter() - started


def cli_run(script: Path, home: Path) -> tuple[float, float, int]:
    """(CLI wall seconds, the run's own seconds, CLI peak RSS bytes)."""
    env = {**os.environ, "TF_DEVICE_PANEL_HOME": str(home)}
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
        time.sleep(0.02)
    out, _ = process.communicate()
    wall = time.perf_counter() - started
    report = json.loads(out)
    if report["status"] != "ok":
        raise RuntimeError(f"the run failed: {report['error']}")
    return wall, float(report["duration_s"]), peak


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--megabytes", type=int, default=200)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        script = Path(folder) / "one_line.py"
        script.write_text(SCRIPT.format(chunks=args.megabytes * 16))
        bare, piped, wall, own, peak = [], [], [], [], []
        for index in range(args.repeat):
            bare.append(bare_seconds(script))
            piped.append(bare_piped_seconds(script))
            one_wall, one_own, one_peak = cli_run(script, Path(folder) / f"home-{index}")
            wall.append(one_wall)
            own.append(one_own)
            peak.append(one_peak)
        base = statistics.median(bare)
        ratio = statistics.median(own) / base
        print(f"{args.megabytes} MB in one line, bare to /dev/null: median {base:.2f} s  (n={args.repeat})")
        print(f"bare, stdout a pipe to cat:        median {statistics.median(piped):.2f} s")
        print(f"run script, the run itself: {spread(own, 2)} s, {ratio:.2f} × the bare run to /dev/null")
        print(f"run script, whole CLI:      median {statistics.median(wall):.2f} s (includes the TensorFlow import)")
        report(f"{args.megabytes} MB in one line: the run ÷ the bare script writing into a pipe",
               statistics.median(own) / statistics.median(piped), 1.25,
               detail=f"the run {spread(own, 2)} s, piped bare {spread(piped, 2)} s")
        report(f"CLI peak RSS, {args.megabytes} MB in one line", max(peak) / 2**20, 150, unit="MB")


if __name__ == "__main__":
    main()
