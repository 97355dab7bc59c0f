"""Median round trip of the `matmul` job in a running runtime: submit → job_finished delivered.

Target: median ≤ 25 ms. Measured with placement logging on (the default) and off.
"""

from __future__ import annotations

import argparse
import statistics
import time

from tf_device_panel.core import events
from tf_device_panel.core.config import DeviceConfig
from tf_device_panel.core.runtime import RuntimeProcess


def round_trips(config: DeviceConfig, repeat: int) -> list[float]:
    runtime = RuntimeProcess(config)
    runtime.start()
    runtime.wait_ready()
    while runtime.next_event(0.1) is not None:
        pass
    timings = []
    try:
        for _ in range(repeat + 3):
            started = time.perf_counter()
            job_id = runtime.submit("matmul", {})
            while True:
                event = runtime.next_event(30)
                if event is None:
                    raise RuntimeError("no event in 30 s")
                if event.type == events.JOB_FINISHED and event.job_id == job_id:
                    break
            timings.append(time.perf_counter() - started)
    finally:
        runtime.stop()
    return timings[3:]  # the first calls trace and compile


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=50)
    args = parser.parse_args()
    configs = (("placement log on", DeviceConfig()), ("placement log off", DeviceConfig(log_placement=False)))
    for label, config in configs:
        timings = sorted(round_trips(config, args.repeat))
        median = statistics.median(timings) * 1000
        p90 = timings[int(len(timings) * 0.9)] * 1000
        verdict = "OK" if median <= 25 else "OVER TARGET"
        print(f"matmul round trip, {label}: median {median:.2f} ms, p90 {p90:.2f} ms "
              f"(n={len(timings)}; target median ≤ 25 ms) {verdict}")


if __name__ == "__main__":
    main()
