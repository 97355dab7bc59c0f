"""A job handed to a warm spare, against TensorFlow's own initialization + first op in a bare process.

Measured per run: submit → first event (the run's `ready`: TensorFlow initialized) and submit → the
`matmul` job's `job_finished` (delivered after the process has exited and its pipes are drained). The bare
figure is initialization (list_logical_devices) + the same matmul, timed inside a bare process after its
import. Target: median round trip ≤ 1.5 × the bare figure. Measured with placement logging on and off.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

from tf_device_panel.core import events
from tf_device_panel.core.config import DeviceConfig
from tf_device_panel.core.runtime import RuntimeProcess

BARE = """
import time, tensorflow as tf
{placement}
started = time.perf_counter()
tf.config.list_logical_devices()
tf.matmul(tf.constant([[1., 2., 3.], [4., 5., 6.]]), tf.constant([[1., 2.], [3., 4.], [5., 6.]])).numpy()
print(time.perf_counter() - started)
"""


def bare_seconds(log_placement: bool) -> float:
    code = BARE.format(placement="tf.debugging.set_log_device_placement(True)" if log_placement else "")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return float(done.stdout.split()[-1])


def warm_run(config: DeviceConfig) -> tuple[float, float]:
    """(submit → first event, submit → job finished) for one job on a warm spare."""
    runtime = RuntimeProcess(config)
    runtime.start()
    runtime.wait_ready()
    while runtime.next_event(0.2) is not None:  # the spare's start-up output, before the job
        pass
    started = time.perf_counter()
    job_id = runtime.submit("matmul", {})
    first = None
    while True:
        event = runtime.next_event(60)
        if event is None:
            raise RuntimeError("no event in 60 s")
        first = first or time.perf_counter() - started
        if event.type == events.JOB_FINISHED and event.job_id == job_id:
            finished = time.perf_counter() - started
            break
    runtime.stop()
    return first, finished


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    for label, log_placement in (("placement log on", True), ("placement log off", False)):
        config = DeviceConfig(log_placement=log_placement)
        bare, first, trip = [], [], []
        for _ in range(args.repeat):
            bare.append(bare_seconds(log_placement))
            one, whole = warm_run(config)
            first.append(one)
            trip.append(whole)
        ratio = statistics.median(trip) / statistics.median(bare)
        print(f"{label}: bare TF init + first matmul median {statistics.median(bare) * 1000:.0f} ms; "
              f"warm spare: submit → first event {statistics.median(first) * 1000:.0f} ms, "
              f"submit → job finished {statistics.median(trip) * 1000:.0f} ms; "
              f"ratio {ratio:.2f} (target ≤ 1.5) {'OK' if ratio <= 1.5 else 'OVER TARGET'}  (n={args.repeat})")


if __name__ == "__main__":
    main()
