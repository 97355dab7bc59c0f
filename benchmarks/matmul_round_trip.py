"""A job handed to a warm spare, against TensorFlow's own initialization + first op in a bare process.

Measured per run: submit → first event (the run's `ready`: TensorFlow initialized) and submit → the
`matmul` job's `job_finished` (delivered when the run process has said its exit status and closed its pipes).
The bare figure is initialization (list_logical_devices) + the same matmul, timed inside a bare process after
its import, twice: at once, and after the process idled as long as the spare did before its job (IDLE_S).
A spare always idles before its job, and idling costs the first op: on this shared machine a bare process's
init + first matmul took 57 ms at once against 114 ms after a 0.5 s sleep (caches and TLBs taken by other
processes meanwhile). Target (issue 43's decision): median round trip ≤ 1.25 × the bare process that idled as long
as the spare, with placement logging on and off; the ratio to a bare process right after its import is printed
beside it. Spares are forked from the zygote (core.client.zygote), as in the panel; a spare never initializes
TensorFlow before its job.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

from figures import report
from tf_device_panel.core.client import zygote
from tf_device_panel.core.client.runtime import RuntimeProcess
from tf_device_panel.core.config import DeviceConfig
from tf_device_panel.core.protocol import events

IDLE_S = 0.5
TARGET = 1.25  # × the bare process that idled as long as the spare

BARE = """
import time, tensorflow as tf
{placement}
time.sleep({idle})
started = time.perf_counter()
tf.config.list_logical_devices()
tf.matmul(tf.constant([[1., 2., 3.], [4., 5., 6.]]), tf.constant([[1., 2.], [3., 4.], [5., 6.]])).numpy()
print(time.perf_counter() - started)
"""


def bare_seconds(log_placement: bool, idle: float) -> float:
    code = BARE.format(placement="tf.debugging.set_log_device_placement(True)" if log_placement else "", idle=idle)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return float(done.stdout.split()[-1])


def warm_run(config: DeviceConfig) -> tuple[float, float]:
    """(submit → first event, submit → job finished) for one job on a warm spare."""
    runtime = RuntimeProcess(config)
    runtime.start()
    runtime.wait_ready()
    idle_until = time.monotonic() + IDLE_S
    while time.monotonic() < idle_until:  # the spare's start-up output, before the job
        runtime.next_event(max(0.0, idle_until - time.monotonic()))
    started = time.perf_counter()
    job_id = runtime.submit("matmul", {})
    first = None
    while True:
        event = runtime.next_event(60)
        if event is None:
            raise RuntimeError("no event in 60 s")
        first = first or time.perf_counter() - started
        if isinstance(event, events.JobFinished) and event.job_id == job_id:
            finished = time.perf_counter() - started
            break
    runtime.stop()
    return first, finished


def main() -> None:
    parser = argparse.ArgumentParser()
    # Single runs of either side spread from 45 to 100 ms on this shared 2-core machine: a median of 5 moved the
    # ratio between 1.03 and 1.31 from one run of this benchmark to the next with nothing changed, a median of 11
    # between 1.06 and 1.31 (n=21: about 6 minutes).
    parser.add_argument("--repeat", type=int, default=21)
    args = parser.parse_args()
    zygote.start_zygotes()  # as the window does
    warm_run(DeviceConfig())  # the first spare starts the zygote; the others are forked from it
    if not zygote.wait_until_ready(180):
        raise SystemExit("the zygote did not start")
    ratios: list[tuple[float, str]] = []
    for label, log_placement in (("placement log on", True), ("placement log off", False)):
        config = DeviceConfig(log_placement=log_placement)
        hot, idle, first, trip = [], [], [], []
        for _ in range(args.repeat):
            hot.append(bare_seconds(log_placement, 0.0))
            idle.append(bare_seconds(log_placement, IDLE_S))
            one, whole = warm_run(config)
            first.append(one)
            trip.append(whole)
        median = {name: statistics.median(values) * 1000 for name, values in
                  (("hot", hot), ("idle", idle), ("first", first), ("trip", trip))}
        for baseline in ("hot", "idle"):
            ratio = median["trip"] / median[baseline]
            when = "right after import" if baseline == "hot" else f"after idling {IDLE_S} s like the spare"
            verdict = (f"target ≤ {TARGET:g}: {'OK' if ratio <= TARGET else 'OVER TARGET'}" if baseline == "idle"
                       else "no target")
            print(f"{label}: bare TF init + first matmul {when}: median {median[baseline]:.0f} ms; warm spare "
                  f"(idled {IDLE_S} s): submit → first event {median['first']:.0f} ms, submit → job finished "
                  f"{median['trip']:.0f} ms; ratio {ratio:.2f} ({verdict})  (n={args.repeat})")
            if baseline == "idle":
                ratios.append((ratio, f"{label}: {median['trip']:.0f} ms vs {median['idle']:.0f} ms"))
    worst, mode = max(ratios)
    report("matmul round trip ÷ a bare process's init + first op after idling as long, worst of two modes", worst,
           TARGET, detail=mode)


if __name__ == "__main__":
    main()
