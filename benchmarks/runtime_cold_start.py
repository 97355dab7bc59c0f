"""A spare's start (spawn → warm: TensorFlow imported and configured) versus a bare TensorFlow import.

Neither initializes TensorFlow. A spare is forked from the zygote (core.client.zygote), which imported TensorFlow
once: its start is measured once the zygote is ready, and the zygote's own start (once per panel) and a spare
started by hand (`TF_DEVICE_PANEL_NO_ZYGOTE=1`, importing TensorFlow itself) are printed beside it. Target: ratio
of medians ≤ 1.00. Runs alternate so all see the same disk cache state.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

from figures import report, spread
from tf_device_panel.core.client import zygote
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


def spare_seconds(by_hand: bool = False) -> float:
    if by_hand:
        os.environ[zygote.DISABLE_ENV] = "1"
    try:
        started = time.perf_counter()
        runtime = RuntimeProcess(DeviceConfig())
        runtime.start()
        runtime.wait_ready()
        warm = time.perf_counter() - started
        runtime.stop()
    finally:
        os.environ.pop(zygote.DISABLE_ENV, None)
    assert runtime.forked != by_hand, "the spare was not started the way this figure measures"
    return warm


def zygote_start_seconds() -> float:
    """The zygote's own start: once per panel (and per environment), while the first spare starts by hand."""
    started = time.perf_counter()
    runtime = RuntimeProcess(DeviceConfig())
    runtime.start()
    runtime.stop()
    if not zygote.wait_until_ready(180):
        raise SystemExit("the zygote did not start")
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    zygote.start_zygotes()  # as the window does
    bare_seconds()  # warm the page cache once
    zygote_s = zygote_start_seconds()
    bare, ours, by_hand = [], [], []
    for _ in range(args.repeat):
        bare.append(bare_seconds())
        ours.append(spare_seconds())
        by_hand.append(spare_seconds(by_hand=True))
    ratio = statistics.median(ours) / statistics.median(bare)
    print(f"bare `import tensorflow`:                   {spread(bare)} s")
    print(f"spare forked from the zygote → warm:        {spread(ours)} s")
    print(f"spare started by hand → warm (no zygote):   {spread(by_hand)} s "
          f"({statistics.median(by_hand) / statistics.median(bare):.3f} × bare)")
    print(f"the zygote's own start (once per panel):    {zygote_s:.3f} s")
    report("spare cold start ÷ bare `import tensorflow`", ratio, 1.00,
           detail=f"medians {statistics.median(ours):.3f} s / {statistics.median(bare):.3f} s, n={args.repeat}; "
                  f"by hand {statistics.median(by_hand) / statistics.median(bare):.3f} ×")


if __name__ == "__main__":
    main()
