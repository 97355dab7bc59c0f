"""A spare's cold start (spawn → warm: TensorFlow imported and configured) versus a bare TensorFlow import.

Neither initializes TensorFlow. Target: ratio of medians ≤ 1.10. Runs alternate so both see the same disk
cache state.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

from figures import report, spread
from tf_device_panel.core.client.runtime import RuntimeProcess
from tf_device_panel.core.config import DeviceConfig

BARE = "import tensorflow as tf; print('IMPORTED', flush=True)"


def bare_seconds() -> float:
    """Until the bare process has imported TensorFlow (its interpreter teardown is not counted)."""
    started = time.perf_counter()
    process = subprocess.Popen([sys.executable, "-c", BARE], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    assert process.stdout is not None
    for line in process.stdout:
        if line.startswith(b"IMPORTED"):
            break
    elapsed = time.perf_counter() - started
    process.kill()
    process.wait()
    return elapsed


def spare_seconds() -> float:
    started = time.perf_counter()
    runtime = RuntimeProcess(DeviceConfig())
    runtime.start()
    runtime.wait_ready()
    warm = time.perf_counter() - started
    runtime.stop()
    return warm


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    bare_seconds()  # warm the page cache once
    bare, ours = [], []
    for _ in range(args.repeat):
        bare.append(bare_seconds())
        ours.append(spare_seconds())
    ratio = statistics.median(ours) / statistics.median(bare)
    print(f"bare `import tensorflow`:        {spread(bare)} s")
    print(f"spare start → warm (configured): {spread(ours)} s")
    report("spare cold start ÷ bare `import tensorflow`", ratio, 1.00,
           detail=f"medians {statistics.median(ours):.3f} s / {statistics.median(bare):.3f} s, n={args.repeat}")


if __name__ == "__main__":
    main()
