"""Matmul throughput per logical device, size and dtype, with NumPy on the same CPU as a reference."""

from __future__ import annotations

import time
from typing import Any

from tf_device_panel.core.jobs import split_devices
from tf_device_panel.core.jobs.context import JobContext
from tf_device_panel.core.jobs.devices import logical_devices, resolve_device
from tf_device_panel.core.placement import short_device_name
from tf_device_panel.core.results import TableResult


def _gflops(size: int, repeats: int, seconds: float) -> float:
    return 2.0 * size**3 * repeats / seconds / 1e9


def benchmark(ctx: JobContext, sizes: str = "256,512,1024", dtypes: str = "float32,float16,bfloat16",
              repeats: int = 5, devices: str = "") -> TableResult:
    import numpy as np
    import tensorflow as tf

    size_list = [int(s) for s in split_devices(sizes)]
    dtype_list = split_devices(dtypes)
    targets = [resolve_device(d) for d in split_devices(devices)] or list(logical_devices().values())
    total = len(targets) * len(size_list) * len(dtype_list) + len(size_list)
    rows: list[dict[str, Any]] = []
    done = 0

    def multiply(a: Any, b: Any) -> Any:
        c = a
        for _ in range(repeats):
            c = tf.matmul(a, b)
        return c[0, 0]  # one element to fetch: the copy back does not count against the device

    for device in targets:
        short = short_device_name(device)
        for dtype_name in dtype_list:
            dtype = tf.as_dtype(dtype_name)
            for size in size_list:
                ctx.check_cancelled()
                ctx.progress(done, total, f"{short} {dtype_name} {size}×{size}")
                row: dict[str, Any] = {"device": short, "dtype": dtype_name, "size": size}
                try:
                    with tf.device(device):
                        a = tf.random.uniform((size, size), dtype=tf.float32)
                        b = tf.random.uniform((size, size), dtype=tf.float32)
                        a, b = tf.cast(a, dtype), tf.cast(b, dtype)
                        step = tf.function(multiply)
                        step(a, b).numpy()  # warm-up: tracing, kernel selection, allocation
                        started = time.perf_counter()
                        step(a, b).numpy()  # .numpy() waits for the device to finish
                        seconds = time.perf_counter() - started
                    row.update(seconds=seconds, gflops=_gflops(size, repeats, seconds))
                except (tf.errors.NotFoundError, tf.errors.InvalidArgumentError,
                        tf.errors.UnimplementedError) as exc:
                    row.update(seconds=None, gflops=None,
                               unsupported=str(exc).strip().splitlines()[0][:200] if str(exc).strip() else "")
                rows.append(row)
                text = f"{row['gflops']:.1f} GFLOP/s" if row["gflops"] is not None else "unsupported"
                print(f"{short:<8} {dtype_name:<9} {size:>5}: {text}", flush=True)
                ctx.metric("gflops", row["gflops"] or 0.0, device=short, dtype=dtype_name, size=size)
                done += 1

    rng = np.random.default_rng(0)
    for size in size_list:
        ctx.check_cancelled()
        ctx.progress(done, total, f"NumPy float32 {size}×{size}")
        a = rng.random((size, size), dtype=np.float32)
        b = rng.random((size, size), dtype=np.float32)
        a @ b
        started = time.perf_counter()
        for _ in range(repeats):
            a @ b
        seconds = time.perf_counter() - started
        rows.append({"device": "NumPy (CPU)", "dtype": "float32", "size": size, "seconds": seconds,
                     "gflops": _gflops(size, repeats, seconds)})
        print(f"{'NumPy':<8} {'float32':<9} {size:>5}: {rows[-1]['gflops']:.1f} GFLOP/s", flush=True)
        done += 1
    ctx.progress(1, 1, "done", force=True)
    return {
        "kind": "table",
        "title": "Matmul throughput (GFLOP/s)",
        "columns": ["device", "dtype", "size", "gflops", "seconds"],
        "column_titles": {"device": "Device", "size": "Size", "gflops": "GFLOP/s", "seconds": "Seconds"},
        "rows": rows,
        "repeats": repeats,
        "plot": {"x": "size", "y": "gflops", "series": ["device", "dtype"]},
    }
