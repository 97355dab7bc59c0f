"""Runtime cold start (spawn → ready) versus a bare TensorFlow import + list_logical_devices.

Target: ratio of medians ≤ 1.15. Runs alternate so both see the same disk cache state.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

from tf_device_panel.core.config import DeviceConfig
from tf_device_panel.core.runtime import RuntimeProcess

BARE = "import tensorflow as tf; tf.config.list_logical_devices(); print('READY', flush=True)"


def bare_seconds() -> float:
    """Until the bare process has its devices (its slow interpreter teardown is not counted)."""
    started = time.perf_counter()
    process = subprocess.Popen([sys.executable, "-c", BARE], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    assert process.stdout is not None
    for line in process.stdout:
        if line.startswith(b"READY"):
            break
    elapsed = time.perf_counter() - started
    process.kill()
    process.wait()
    return elapsed


def runtime_seconds() -> float:
    started = time.perf_counter()
    runtime = RuntimeProcess(DeviceConfig())
    runtime.start()
    runtime.wait_ready()
    ready = time.perf_counter() - started
    runtime.stop()
    return ready


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    bare_seconds()  # warm the page cache once
    bare, ours = [], []
    for _ in range(args.repeat):
        bare.append(bare_seconds())
        ours.append(runtime_seconds())
    ratio = statistics.median(ours) / statistics.median(bare)
    print(f"bare import + list_logical_devices: median {statistics.median(bare):.3f} s  (n={args.repeat})")
    print(f"runtime start → ready:              median {statistics.median(ours):.3f} s  (n={args.repeat})")
    print(f"ratio: {ratio:.3f}  (target ≤ 1.15) {'OK' if ratio <= 1.15 else 'OVER TARGET'}")


if __name__ == "__main__":
    main()
