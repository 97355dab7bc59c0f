"""Placement-line parsing throughput on a realistic mix of runtime output. Target ≥ 300k lines/s."""

from __future__ import annotations

import statistics
import time

from figures import report
from tf_device_panel.core.protocol.output_lines import parse_line

SAMPLE = [
    ("I0000 00:00:1795270979.856597    5908 execute.cc:1775] Executing op _MklMatMul in device "
     "/job:localhost/replica:0/task:0/device:CPU:1", "stderr"),
    ("I0000 00:00:1795270979.856254    5908 placer.cc:162] replica_1/dense/MatMul: (MatMul): "
     "/job:localhost/replica:0/task:0/device:CPU:1", "stderr"),
    ("replica_1/dense/MatMul: (MatMul): /job:localhost/replica:0/task:0/device:CPU:1", "stdout"),
    ("I0000 00:00:1795270979.856597    5908 execute.cc:1775] Executing op ReadVariableOp in device "
     "/job:localhost/replica:0/task:0/device:GPU:0", "stderr"),
    ("W0000 00:00:1795270979.8    5908 gpu_device.cc:2344] Cannot dlopen some GPU libraries.", "stderr"),
    ("epoch 1/2: loss 0.018", "stdout"),
]


def main() -> None:
    lines = SAMPLE * 50_000
    rates = []
    for _ in range(5):
        started = time.perf_counter()
        for text, stream in lines:
            parse_line(text, stream)
        rates.append(len(lines) / (time.perf_counter() - started))
    median = statistics.median(rates)
    report("placement parsing", median / 1000, 300, unit="k lines/s", at_most=False,
           detail=f"median over {len(lines)} lines × 5")


if __name__ == "__main__":
    main()
