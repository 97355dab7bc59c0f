"""1M short lines through `tf-device-panel run script` (stdout to /dev/null, the run record kept) against the
same script run bare, and the CLI's peak resident memory meanwhile.

Printed: the CLI's whole wall time ÷ bare (it includes starting a process and importing TensorFlow, which
the CLI cannot have warm), also ÷ a bare script that imports TensorFlow first (the fair whole-CLI
comparison), the run's own time (job start → end, from its record) ÷ bare (target ≤ 2.0), and
the CLI's peak RSS (target ≤ 150 MB). Both are measured in this run, alternating.
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


def bare_seconds(script: Path) -> float:
    started = time.perf_counter()
    subprocess.run([sys.executable, str(script)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
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
        time.sleep(0.05)
    out, _ = process.communicate()
    wall = time.perf_counter() - started
    report = json.loads(out)
    if report["status"] != "ok":
        raise RuntimeError(f"the run failed: {report['error']}")
    return wall, float(report["duration_s"]), peak


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        script = Path(folder) / "flood.py"
        script.write_text(SCRIPT)
        with_tf = Path(folder) / "flood_tf.py"
        with_tf.write_text("import tensorflow\n" + SCRIPT)
        bare, bare_tf, wall, own, peak = [], [], [], [], []
        for index in range(args.repeat):
            bare.append(bare_seconds(script))
            bare_tf.append(bare_seconds(with_tf))
            one_wall, one_own, one_peak = cli_run(script, Path(folder) / f"home-{index}")
            wall.append(one_wall)
            own.append(one_own)
            peak.append(one_peak)
        record = max((Path(folder) / "home-0" / "runs").glob("*/output.txt"))
        base = statistics.median(bare)
        ratio = statistics.median(own) / base
        print(f"bare script to /dev/null:  median {base:.2f} s  (n={args.repeat})")
        whole = statistics.median(wall)
        tf_base = statistics.median(bare_tf)
        print(f"run script, whole CLI:     median {whole:.2f} s  ({whole / base:.2f} × bare; includes the "
              f"TensorFlow import of a cold process; {whole / tf_base:.2f} × a bare script that imports "
              f"TensorFlow first, median {tf_base:.2f} s)")
        report("1M short lines: the run ÷ bare", ratio, 1.25,
               detail=f"the run itself {spread(own, 2)} s, bare {spread(bare, 2)} s")
        report("CLI peak RSS, 1M short lines", max(peak) / 2**20, 150, unit="MB")
        raw = sum(len(f"line {i}\n") for i in range(1_000_000))  # the bytes the script prints
        report("record output ÷ the raw bytes, 1M short lines", record.stat().st_size / raw, 1.5)


if __name__ == "__main__":
    main()
